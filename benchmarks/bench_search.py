"""``clusterclip search`` benchmark: the time of a whole ``search --quick`` process as a
user runs it, the seconds per proxy, and the search's result against the number of
proxies (the test difference searched - random with its paired 95% interval, and the
predictor's leave-one-out rank correlation).

Rows, in one run, on one work directory and target:

1. ``--runs`` first value (default 24, the --quick default) from an empty ``W/search``:
   the whole process (wall and CPU seconds of the child, the 1-minute load before and
   after, and the estimate it printed first);
2. each further ``--runs`` value, one after the other (a smaller search's first round is a
   prefix of a larger one's, so those proxies are reused: their time is not a row's).

The target is an absolute one (issue 17: <= 10 minutes on 2 CPU cores for a 2,500-document
subsample); no peer tool runs offline here (RegMix and CLIMB publish scripts for their
clusters, not a package), so there is no side-by-side row. On a shared machine the child's
CPU seconds (one torch thread) are what the run would take idle.

    python benchmarks/bench_search.py --workdir W --target target.jsonl [--runs 24,8,16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def search(workdir: Path, target: list[str], runs: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "clusterclip.cli", "search", "--workdir", str(workdir),
           "--quick", "--runs", str(runs), *(["--target", *target] if target else []), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"search failed: {out.stderr.strip().splitlines()[-1]}")
    res = json.loads((workdir / "search" / "results.json").read_text())
    secs = sorted(json.loads(f.read_text())["seconds"]
                  for f in (workdir / "search" / "runs").glob("*.json"))
    est = next((ln for ln in out.stderr.splitlines() if "estimated" in ln), "")
    d = res["comparisons"]["searched - random"][res["objective"]]
    return {"runs": runs, "wall_s": wall,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "load": (load0, os.getloadavg()[0]), "estimate": est.split("estimated ")[-1],
            "median_run_s": secs[len(secs) // 2], "objective": res["objective"],
            "chosen": f"{res['chosen']['origin']}, {res['chosen']['timing']}, "
                      f"clip {res['chosen']['clip']}",
            "chosen_val": res["chosen"]["val"]["objective"], "diff": d,
            "rho": res["predictor"].get("loo_spearman")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--target", nargs="*", default=[])
    ap.add_argument("--runs", default="24,8,16")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy the first (fresh) search's W/search here")
    args, extra = ap.parse_known_args()
    rows = []
    for i, runs in enumerate(int(x) for x in args.runs.split(",")):
        if i == 0 and (args.workdir / "search").exists():
            shutil.rmtree(args.workdir / "search")  # a fresh start: nothing stored
        rows.append(search(args.workdir, args.target, runs, extra))
        if i == 0 and args.keep is not None:
            shutil.copytree(args.workdir / "search", args.keep, dirs_exist_ok=True)
        print(json.dumps(rows[-1]), flush=True)
    print("| proxies | whole process | CPU s | load | estimate | s per proxy (median) | "
          "chosen | val objective | searched - random on test (95% CI) | LOO Spearman |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["diff"]
        ci = (f"{d['mean']:+.4f} ({d['low']:+.4f} to {d['high']:+.4f}), "
              f"{'measurable' if d['measurable'] else 'not measurable'}")
        rho = "—" if r["rho"] is None else f"{r['rho']:.2f}"
        print(f"| {r['runs']} | {r['wall_s']:.0f} s | {r['cpu_s']:.0f} | "
              f"{r['load'][0]:.1f} / {r['load'][1]:.1f} | {r['estimate']} | "
              f"{r['median_run_s']:.1f} | {r['chosen']} | {r['chosen_val']:.4f} | {ci} | "
              f"{rho} |")


if __name__ == "__main__":
    main()
