"""``clusterclip sample`` as a whole process from two source trees, alternated: what a change
to the command's imports, writing or hashing costs or saves, paired round by round.

    python benchmarks/bench_sample_ab.py --base /work/main/src --rounds 8

Issue's shape (N = 2 x 10^6 power-law labels, K = 5,000, T = 3 x 10^7, clip 20,
``--strategy clusterclip``), each process writing over the previous one's output (as
``bench_sampler.py --sections cli`` does, so its ownership record is checked and the old file
replaced), ``CLUSTERCLIP_CACHE=off``, both trees byte-compiled first. Each round runs the
base tree and this tree in an order that alternates round by round, and records wall and
CPU seconds (``RUSAGE_CHILDREN``) with the load average. The conclusion is the mean paired
difference (this tree - base) of the CPU seconds with its 95% t interval: measurable only
when the interval excludes zero.
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
# Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _run(src: Path, labels: Path, out: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "CLUSTERCLIP_CACHE": "off"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "clusterclip.cli", "sample", "--labels", str(labels),
                    "--strategy", "clusterclip", "--clip", "20", "--num-samples", "30000000",
                    "--out", str(out), "--no-progress"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other tree's src/ folder")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_sampler import power_law_labels

    trees = {"base": Path(args.base).resolve(), "this": HERE}
    for src in trees.values():
        compileall.compile_dir(src / "clusterclip", quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench-sample-ab-") as d:
        labels = Path(d) / "labels.npy"
        np.save(labels, power_law_labels(2_000_000, 5000))
        out = Path(d) / "schedule.npy"
        _run(HERE, labels, out)  # the output both trees then replace
        cpu: dict[str, list[float]] = {k: [] for k in trees}
        print("| round | tree | wall s | CPU s | load |")
        print("| ---: | --- | ---: | ---: | ---: |")
        for r in range(args.rounds):
            for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
                load = os.getloadavg()[0]
                wall, c = _run(trees[name], labels, out)
                cpu[name].append(c)
                print(f"| {r + 1} | {name} | {wall:.2f} | {c:.2f} | {load:.1f} |", flush=True)
    diff = np.array(cpu["this"]) - np.array(cpu["base"])
    half = T975[min(len(diff) - 1, len(T975)) - 1] * diff.std(ddof=1) / np.sqrt(len(diff))
    lo, hi = diff.mean() - half, diff.mean() + half
    verdict = "measurable" if lo > 0 or hi < 0 else "not measurable"
    print(f"\nCPU s, median: base {statistics.median(cpu['base']):.2f}, this "
          f"{statistics.median(cpu['this']):.2f}; this - base, paired: {diff.mean():+.3f} s "
          f"(95% CI {lo:+.3f} to {hi:+.3f}): {verdict}")


if __name__ == "__main__":
    main()
