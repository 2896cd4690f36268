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

With ``--base-src DIR`` (say a copy of main's ``src``) every fit runs once more with
that source tree, in alternating rounds (``--rounds``). A line per assignment pass of
each fit says its CPU seconds (the sample's passes, then the pass over every row).
``--samples`` may hold ``0``: the full fit.

    python benchmarks/bench_fit_sample.py --embeddings W/embeddings.npy --k 1024 \
        --samples 0 --skip-full --base-src /tmp/base-src --rounds 2
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

    import clusterclip
    from clusterclip.clustering import KMeans

    torch.set_num_threads(a.threads)
    passes = _record_passes()
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
            "sample_fit_s": km.sample_seconds_, "init_cpu_s": km.init_cpu_seconds_,
            "passes": passes, "src": str(Path(clusterclip.__file__).parents[1])}


def _record_passes() -> list[dict]:
    """Wrap the k-means engine's pass to record each pass's CPU seconds and rows."""
    from clusterclip.clustering._passes import Engine

    passes: list[dict] = []
    run = Engine.run

    def timed(self, *args, **kw):
        c0 = time.process_time()
        p = run(self, *args, **kw)
        passes.append({"cpu_s": time.process_time() - c0, "rows": int(self.reader.n)})
        return p

    Engine.run = timed
    return passes


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
    p.add_argument("--base-src", help="also fit with this source tree (e.g. main's src)")
    p.add_argument("--rounds", type=int, default=1, help="with --base-src: paired rounds")
    p.add_argument("--skip-full", action="store_true", help="no full fit (unless in --samples)")
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
    runs = [(m, tree, rnd) for rnd in range(a.rounds if a.base_src else 1)
            for m in ([] if a.skip_full else [0]) + [int(x) for x in a.samples.split(",")]
            for tree in (["ours"] + (["base"] if a.base_src else []))]
    rows = [_fit(a, root, data, truth, m, tree, rnd) for m, tree, rnd in runs]
    _table(a, rows)
    _passes_lines(rows)


def _fit(a: argparse.Namespace, root: Path, data: Path, truth: np.ndarray | None, m: int,
         tree: str, rnd: int) -> dict:
    """One fit in its own process (``tree``: this checkout's src or ``--base-src``)."""
    tag = f"{m}" if tree == "ours" and rnd == 0 else f"{m}-{tree}-{rnd}"
    out, saved = root / f"labels-{tag}.npy", root / f"result-{tag}.json"
    cmd = [sys.executable, __file__, "--worker", "--data", str(data), "--k", str(a.k),
           "--threads", str(a.threads), "--sample", str(m), "--out", str(out)]
    if a.reuse and saved.is_file() and out.is_file():
        r = json.loads(saved.read_text())
    else:
        src = a.base_src if tree == "base" else str(Path(__file__).parents[1] / "src")
        os.environ["PYTHONPATH"] = src
        r = run_worker(cmd, f"sample {m}", a.threads, a.timeout)
        if "error" not in r:
            saved.write_text(json.dumps(r))
    r.update(tree=tree, round=rnd)
    if "error" not in r:
        labels = np.load(out)
        keep = labels >= 0
        r["nmi_truth"] = nmi(truth[keep], labels[keep]) if truth is not None else float("nan")
        full = root / "labels-0.npy"
        r["nmi_full"] = nmi(np.load(full)[keep], labels[keep]) if full.is_file() else np.nan
    print(json.dumps({k: v for k, v in r.items() if k != "passes"}), file=sys.stderr)
    return r


def _table(a: argparse.Namespace, rows: list[dict]) -> None:
    full = rows[0]
    what = str(a.embeddings) if a.embeddings else f"blobs={a.blobs or a.k}"
    print(f"N={a.n:,} d={a.d} K={a.k} {what} threads={a.threads} "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| fit | tree | round | wall s | CPU s | init CPU s | passes CPU s | iterations "
          "| objective (every row) | vs first | sample objective | NMI vs truth "
          "| NMI vs full | peak RSS GiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: |")
    for r in rows:
        if "error" in r:
            print(f"| {r['method']} | {r['tree']} | error: {r['error']} ||||||||||||")
            continue
        gap = 100 * (r["objective"] - full["objective"]) / full["objective"]
        so = "-" if r["sample_objective"] is None else f"{r['sample_objective']:.5f}"
        lloyd = sum(q["cpu_s"] for q in r["passes"])
        print(f"| {r['method']} | {r['tree']} | {r['round']} | {r['wall_s']:.1f} "
              f"| {r['cpu_s']:.1f} | {r['init_cpu_s']:.1f} | {lloyd:.1f} | {r['n_iter']} "
              f"| {r['objective']:.5f} | {gap:+.3f}% | {so} | {r['nmi_truth']:.4f} "
              f"| {r['nmi_full']:.4f} | {r['peak_rss_gib']:.2f} |")


def _passes_lines(rows: list[dict]) -> None:
    """A line per assignment pass of each fit: its CPU seconds and rows."""
    for r in rows:
        if "error" in r:
            continue
        print(f"\n{r['method']}, {r['tree']}, round {r['round']}: pass, CPU s, rows")
        for i, q in enumerate(r["passes"]):
            print(f"  {i:>3} {q['cpu_s']:>8.2f} {q['rows']:>10,}")


if __name__ == "__main__":
    main()
