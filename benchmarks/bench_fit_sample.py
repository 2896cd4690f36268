"""K-means on a sample (``--fit-sample``) against the full fit: time, objective, NMI.

The same data as ``bench_kmeans.py`` (unit rows around ``--blobs`` random directions,
generated in chunks onto disk, with each row's blob kept as the truth). Each method
runs in its own subprocess (peak RSS per method) with the commands' k-means settings
(``max_iter`` 50, ``tol`` 1e-4, seed 0, cosine):

- full: k-means++ and Lloyd over every row;
- sample M: k-means++ and Lloyd on a seeded sample of M rows, then one streamed
  assignment pass over every row (``KMeans(fit_sample=M)``).

Reported per method: wall and CPU seconds of the fit (the sample's fit and the final
pass included), the objective on every row (mean cosine similarity to the assigned
centroid, higher is better) and its gap to the full fit's, the sample's own objective,
NMI against the blobs, NMI against the full fit's labels, peak RSS.

Or real embeddings (``--embeddings W/embeddings.npy``, with ``W/valid.npy`` beside it
when present) and any labels to compare with (``--truth``, an int .npy, one per row), e.g.
the ``fast`` embeddings of ``bench_scale.py``'s corpus and its topics.

    python benchmarks/bench_fit_sample.py --quick
    python benchmarks/bench_fit_sample.py --n 1000000 --d 256 --k 256 \
        --samples 65536,131072,262144
    python benchmarks/bench_fit_sample.py --embeddings W/embeddings.npy --truth topics.npy \
        --k 256 --samples 65536,131072,262144
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from _worker import run_worker
from bench_kmeans import make_data, peak_rss_gib


def worker(a: argparse.Namespace) -> dict:
    import torch

    from clusterclip.clustering import KMeans

    torch.set_num_threads(a.threads)
    X = np.load(a.data, mmap_mode="r")
    valid_path = Path(a.data).with_name("valid.npy")
    valid = np.load(valid_path) if valid_path.is_file() else None
    m = a.sample or None
    km = KMeans(a.k, seed=0, metric="cosine", fit_sample=m)
    t0, c0 = time.perf_counter(), time.process_time()
    km.fit(X, valid)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.save(a.out, km.labels_)
    return {"method": "full" if m is None else f"sample {m:,}", "wall_s": wall, "cpu_s": cpu,
            "objective": km.objective_, "sample_objective": km.sample_objective_,
            "n_iter": km.n_iter_, "peak_rss_gib": peak_rss_gib(),
            "sample_fit_s": km.sample_seconds_}


def nmi(a: np.ndarray, b: np.ndarray) -> float:
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small case (seconds)")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--blobs", type=int, default=None, help="default: K")
    p.add_argument("--samples", default="100000,250000", help="comma-separated M")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--dir", default="/tmp/clusterclip-fit-sample")
    p.add_argument("--embeddings", help="an (N, d) .npy to cluster instead of generated blobs")
    p.add_argument("--truth", help="with --embeddings: int .npy of labels to compare with")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--reuse", action="store_true",
                   help="reuse the results of fits already run in --dir (same data and K)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--sample", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    if a.quick:
        a.n, a.d, a.k, a.samples = 20_000, 32, 20, "2000,5000"
    if a.embeddings:
        data = Path(a.embeddings).resolve()
        root = Path(a.dir) / f"{data.parent.name}-k{a.k}"
        truth = np.load(a.truth) if a.truth else None
        a.n, a.d = np.load(data, mmap_mode="r").shape
    else:
        root = Path(a.dir) / f"n{a.n}-d{a.d}-k{a.k}"
        root.mkdir(parents=True, exist_ok=True)
        data = make_data(root / "emb.npy", a.n, a.d, a.blobs or a.k, 0,
                         labels=root / "truth.npy")
        truth = np.load(root / "truth.npy")
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for m in [0] + [int(x) for x in a.samples.split(",")]:
        out = root / f"labels-{m}.npy"
        cmd = [sys.executable, __file__, "--worker", "--data", str(data), "--k", str(a.k),
               "--threads", str(a.threads), "--sample", str(m), "--out", str(out)]
        saved = root / f"result-{m}.json"
        if a.reuse and saved.is_file() and out.is_file():
            r = json.loads(saved.read_text())
        else:
            r = run_worker(cmd, f"sample {m}", a.threads, a.timeout)
            if "error" not in r:
                saved.write_text(json.dumps(r))
        if "error" not in r:
            labels = np.load(out)
            keep = labels >= 0
            r["nmi_truth"] = nmi(truth[keep], labels[keep]) if truth is not None else float("nan")
            r["nmi_full"] = nmi(np.load(root / "labels-0.npy")[keep], labels[keep]) if m else 1.0
        rows.append(r)
        print(json.dumps(r), file=sys.stderr)
    full = rows[0]
    what = str(a.embeddings) if a.embeddings else f"blobs={a.blobs or a.k}"
    print(f"N={a.n:,} d={a.d} K={a.k} {what} threads={a.threads}")
    print("| fit | wall s | CPU s | iterations | objective (every row) | vs full "
          "| sample objective | NMI vs truth | NMI vs full | peak RSS GiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if "error" in r:
            print(f"| {r['method']} | error: {r['error']} |||||||||")
            continue
        gap = 100 * (r["objective"] - full["objective"]) / full["objective"]
        so = "-" if r["sample_objective"] is None else f"{r['sample_objective']:.5f}"
        print(f"| {r['method']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['n_iter']} "
              f"| {r['objective']:.5f} | {gap:+.3f}% | {so} | {r['nmi_truth']:.4f} "
              f"| {r['nmi_full']:.4f} | {r['peak_rss_gib']:.2f} |")


if __name__ == "__main__":
    main()
