"""``clusterclip sample`` as a whole process from two source trees, alternated: what a change
to the command's imports, writing or hashing costs or saves, paired round by round.

    python benchmarks/bench_sample_ab.py --base /work/main/src --rounds 8

Issue's shape (N = 2 x 10^6 power-law labels, K = 5,000, T = 3 x 10^7, clip 20,
``--strategy clusterclip``), each process writing over its own tree's previous output (a rerun
replacing its own file, as ``bench_sampler.py --sections cli`` does: its ownership record is
checked and the old file replaced; a tree never replaces the other's, whose record it may
read differently; ``--fresh``: each process to a new path, none replaced, all removed at the
end), ``CLUSTERCLIP_CACHE=off``, both trees byte-compiled first. Each round runs the base
tree and this tree in an order that alternates round by round, and records wall, user and
system CPU seconds (``RUSAGE_CHILDREN``) with the load average. The conclusion is
the mean paired difference (this tree - base) of the CPU seconds, and of the user CPU seconds
alone (system time swings with the machine's page cache), each with its t interval, Holm-
corrected for the two: measurable only when the interval excludes zero.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1] / "src"
# The 0.975 quantiles of Student's t for 1..30 degrees of freedom (two-sided 95%).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# The 0.9875 quantiles of Student's t for 1..30 degrees of freedom: the two-sided 97.5%
# interval, Holm's level for the first of two comparisons.
T9875 = (50.923, 8.860, 5.392, 4.315, 3.810, 3.521, 3.335, 3.206, 3.111, 3.038, 2.981, 2.934,
         2.896, 2.864, 2.837, 2.813, 2.793, 2.775, 2.759, 2.744, 2.732, 2.720, 2.710, 2.700,
         2.692, 2.684, 2.676, 2.669, 2.663, 2.657)


def _run(src: Path, labels: Path, out: Path) -> tuple[float, float, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "CLUSTERCLIP_CACHE": "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "clusterclip.cli", "sample", "--labels", str(labels),
                    "--strategy", "clusterclip", "--clip", "20", "--num-samples", "30000000",
                    "--out", str(out), "--no-progress"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other tree's src/ folder")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--fresh", action="store_true",
                    help="every process writes a new path (kept until the end): no rerun")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_sampler import power_law_labels

    trees = {"base": Path(args.base).resolve(), "this": HERE}
    for src in trees.values():
        compileall.compile_dir(src / "clusterclip", quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench-sample-ab-") as d:
        labels = Path(d) / "labels.npy"
        np.save(labels, power_law_labels(2_000_000, 5000))
        outs = {name: Path(d) / f"schedule-{name}.npy" for name in trees}
        for name, src in trees.items():
            _run(src, labels, outs[name])  # the output each tree then replaces
        cpu: dict[str, list[float]] = {k: [] for k in trees}
        user: dict[str, list[float]] = {k: [] for k in trees}
        print("| round | tree | wall s | CPU s | user s | system s | load |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in range(args.rounds):
            for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
                load = os.getloadavg()[0]
                out = outs[name].with_name(f"new-{name}-{r}.npy") if args.fresh else outs[name]
                wall, u, sy = _run(trees[name], labels, out)
                cpu[name].append(u + sy)
                user[name].append(u)
                print(f"| {r + 1} | {name} | {wall:.2f} | {u + sy:.2f} | {u:.2f} | {sy:.2f} | "
                      f"{load:.1f} |", flush=True)
    print()
    first_holds = False
    for rank, (what, xs) in enumerate(sorted(
            (("CPU s", cpu), ("user CPU s", user)), key=lambda w: -_t_stat(w[1]))):
        diff = np.array(xs["this"]) - np.array(xs["base"])
        # Holm: the larger |t| is judged at 1 - 0.05 / 2, the other at 1 - 0.05
        df = min(len(diff) - 1, len(T975))
        q = (T9875 if rank == 0 else T975)[df - 1]
        half = q * diff.std(ddof=1) / np.sqrt(len(diff))
        lo, hi = diff.mean() - half, diff.mean() + half
        # Holm stops at the first comparison it cannot call measurable
        holds = (lo > 0 or hi < 0) and (rank == 0 or first_holds)
        first_holds = holds if rank == 0 else first_holds
        verdict = "measurable" if holds else "not measurable"
        print(f"{what}, median: base {statistics.median(xs['base']):.2f}, this "
              f"{statistics.median(xs['this']):.2f}; this - base, paired: {diff.mean():+.3f} s "
              f"({100 - 5 / (2 - rank):.2f}% CI, Holm, {lo:+.3f} to {hi:+.3f}): {verdict}")


def _t_stat(xs: dict[str, list[float]]) -> float:
    diff = np.array(xs["this"]) - np.array(xs["base"])
    sd = diff.std(ddof=1)
    return abs(diff.mean()) / sd * np.sqrt(len(diff)) if sd > 0 else float("inf")

if __name__ == "__main__":
    main()
