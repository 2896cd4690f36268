"""The report on one core and on two, against another source tree: whole processes of
``clusterclip report --label-field topic`` pinned with ``taskset``.

    python benchmarks/bench_scale.py --docs 200000 --clusters 400 --no-export --dir /tmp/r
    python benchmarks/bench_report.py --workdir /tmp/r/work-200000 --base-src /tmp/main-src

The work directory is one that ``bench_scale.py`` made (its corpus has the ``topic``
field, and its first report made ``W/map/``, which every report here reuses). Rows, each a
whole process (interpreter start, imports, the corpus read, the plots, writing), started by
``taskset -c 0`` (one core) and ``taskset -c 0,1`` (two), for ``--base-src`` (say a copy
of main's ``src``) right before this tree, alternated ``--repeat`` rounds; the worker count
is each tree's default (this tree: the CPUs the process may use). Each row gives the wall
seconds and the CPU seconds of the main process and of its worker processes
(``getrusage``), with the 1-minute load average when it started. The "idle bound" is what
the CPU seconds allow on idle cores: no less than the main process's CPU, nor than all the
CPU divided among the cores (a projection, labelled as one). Every report is compared file
by file with the base's first one.

The conclusion: per round, this tree's wall and CPU against the base's on two cores (paired
differences; a 95% t-interval at level 0.05 / 2, Bonferroni over the two comparisons, at
least as strict as Holm).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_cores import CORES, OURS, _env, _timed

ROOT = Path(__file__).resolve().parents[1]


def _same(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def _interval(diffs: list[float], tests: int) -> tuple[float, float, float]:
    """Mean of ``diffs`` and its two-sided t-interval at level 0.05 / ``tests``
    (Bonferroni over ``tests`` comparisons: at least as strict as Holm)."""
    from scipy import stats

    m = statistics.fmean(diffs)
    if len(diffs) < 2:
        return m, float("nan"), float("nan")
    half = stats.t.ppf(1 - 0.05 / tests / 2, len(diffs) - 1) * statistics.stdev(diffs) \
        / len(diffs) ** 0.5
    return m, m - half, m + half


def _rounds(args: argparse.Namespace, trees: dict[str, Path], scratch: Path
            ) -> tuple[dict[Any, list[tuple[float, float, float, float]]], bool]:
    rows: dict[Any, list[tuple[float, float, float, float]]] = {}
    first: Path | None = None
    same = True
    for r in range(args.repeat):
        for cores, cpus in CORES.items():
            for tree, src in trees.items():
                out = scratch / f"{tree}-{r}-{cpus}"
                cmd = ["taskset", "-c", cpus, sys.executable, "-c", OURS, "report",
                       "--workdir", str(args.workdir), "--label-field", "topic", "--out",
                       str(out), "--no-progress"]
                got = _timed(cmd, _env(src))
                rows.setdefault((tree, cores), []).append(got)
                print(f"round {r + 1} {tree:<5} {cores}: wall {got[0]:.1f} s, CPU "
                      f"{got[1]:.1f} + {got[2]:.1f} s (load {got[3]:.2f})", flush=True)
                if first is None:
                    first = out
                else:
                    same &= _same(first, out)
                    shutil.rmtree(out)
    return rows, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--base-src", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    trees = {"base": args.base_src.resolve(), "ours": ROOT / "src"}
    with tempfile.TemporaryDirectory(prefix="bench-report-") as d:
        rows, same = _rounds(args, trees, Path(d))
    print("\n| tree | cores | wall s (median) | main CPU s | workers CPU s | idle bound s |"
          " load |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (tree, cores), got in rows.items():
        n = len(CORES[cores].split(","))
        med = [statistics.median(g[i] for g in got) for i in range(4)]
        bound = statistics.median(max(g[1], (g[1] + g[2]) / n) for g in got)
        print(f"| {tree} | {cores} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | "
              f"{bound:.1f} | {med[3]:.2f} |")
    base, ours = rows[("base", "2 cores")], rows[("ours", "2 cores")]
    for what, f in (("wall", lambda g: g[0]), ("CPU", lambda g: g[1] + g[2])):
        m, lo, hi = _interval([f(o) - f(b) for o, b in zip(ours, base, strict=True)], 2)
        if len(ours) < 2:  # one round: no spread, so no interval and no verdict
            print(f"2 cores, ours - base, {what}: {m:+.1f} s in one round (no interval: "
                  f"repeat with --repeat 2 or more to test it)")
            continue
        verdict = ("measurably less" if hi < 0 else "measurably more" if lo > 0
                   else "no measurable difference")
        print(f"2 cores, ours - base, {what}: {m:+.1f} s (95% interval, Bonferroni over 2: "
              f"{lo:+.1f} to {hi:+.1f} s): {verdict}")
    print(f"reports byte-identical to the base's: {same}")


if __name__ == "__main__":
    main()
