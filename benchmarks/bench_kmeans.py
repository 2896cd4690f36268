"""K-means speed and quality: clusterclip (torch, CPU) vs faiss.Kmeans vs scikit-learn.

All three get the same L2-normalised float32 embeddings (a mixture of
vMF-like blobs, generated in chunks onto disk), the same K and the same number
of iterations, one run each (no restarts):

- ours: ``clusterclip.clustering.KMeans(metric="cosine", tol=0)``;
- FAISS: ``faiss.Kmeans(spherical=True, nredo=1, niter=I)`` with
  ``max_points_per_centroid`` large enough to train on every row, then one
  ``search`` for the final labels;
- scikit-learn: ``KMeans(init="random", n_init=1, max_iter=I, tol=0)`` on the
  same normalised rows (euclidean k-means, the usual stand-in).

Time per iteration = (time to final centroids *and* labels, minus the
initialisation) / I. Each method then has done I centroid updates and I + 1
assignment passes (FAISS's ``train`` plus one ``search``; ours and sklearn's
``fit`` label the rows themselves). FAISS's train-only time is shown too.
The objective is computed the same way for all three: mean cosine similarity
of each row to the nearest L2-normalised final centroid.

Each method runs in its own subprocess, so peak RSS is per method. The
out-of-core case writes an embeddings file larger than ``--memory`` and
clusters it with ``chunk_rows`` derived from that budget (FAISS and sklearn
need the whole matrix in RAM; they run on it too, to show what that costs).

    python benchmarks/bench_kmeans.py --quick
    python benchmarks/bench_kmeans.py            # N=1e6, d=384, K=1000 + out-of-core
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
from _worker import run_worker

GIB = 1 << 30


def make_data(path: Path, n: int, d: int, n_blobs: int, seed: int,
              labels: Path | None = None) -> Path:
    """Write an (n, d) float32 .npy of unit rows drawn around ``n_blobs`` random directions
    (and, with ``labels``, each row's blob as an int32 .npy there)."""
    if path.exists() and (labels is None or labels.exists()):
        return path
    rng = np.random.default_rng(seed)
    mus = rng.standard_normal((n_blobs, d)).astype(np.float32)
    mus /= np.linalg.norm(mus, axis=1, keepdims=True)
    # Blob sizes vary (Dirichlet) and so does their spread: cosine to the blob
    # centre is about 0.5-0.8, like real sentence embeddings.
    weights = rng.dirichlet(np.full(n_blobs, 2.0))
    sigma = rng.uniform(0.035, 0.07, n_blobs).astype(np.float32)
    tmp = path.with_suffix(".tmp.npy")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, d))
    truth = np.empty(n, np.int32)
    step = 65536
    for s in range(0, n, step):
        m = min(step, n - s)
        comp = rng.choice(n_blobs, size=m, p=weights)
        x = rng.standard_normal((m, d), dtype=np.float32) * sigma[comp, None] + mus[comp]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s:s + m] = x
        truth[s:s + m] = comp
    out.flush()
    del out
    os.replace(tmp, path)
    if labels is not None:
        np.save(labels, truth)
    return path


def mean_cosine(X: np.ndarray, centroids: np.ndarray, chunk: int = 65536) -> float:
    """Mean over rows of the best cosine similarity to the normalised centroids."""
    import torch

    from clusterclip.clustering._rows import RowReader

    C = torch.from_numpy(np.ascontiguousarray(centroids, dtype=np.float32))
    C = C / C.norm(dim=1, keepdim=True).clamp_min(1e-12)
    total = 0.0
    for _, rows in RowReader(X, chunk):  # reads, never maps, a memmap's pages
        x = torch.from_numpy(np.array(rows, dtype=np.float32))
        sims = (x @ C.T).max(dim=1).values / x.norm(dim=1).clamp_min(1e-12)
        total += float(sims.double().sum())
    return total / X.shape[0]


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def worker(a: argparse.Namespace) -> dict:
    """Run one method in this process; returns its timings and objective."""
    import torch

    torch.set_num_threads(a.threads)
    in_ram = a.chunk_rows == 0
    X = np.load(a.data, mmap_mode="r")
    if in_ram:
        X = np.ascontiguousarray(X)  # every method gets the matrix in memory
    N, d = X.shape
    res: dict = {"method": a.worker}
    if a.worker == "ours":
        from clusterclip.clustering import KMeans

        km = KMeans(a.k, max_iter=a.iters, tol=0.0, seed=0, metric="cosine",
                    chunk_rows=a.chunk_rows or 65536)
        t0, c0 = time.perf_counter(), time.process_time()
        km.fit(X)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        res["peak_rss_gib"] = peak_rss_gib()
        iters = max(km.n_iter_, 1)
        res.update(init_s=km.init_seconds_, total_s=total,
                   per_iter_s=(total - km.init_seconds_) / iters,
                   cpu_per_iter_s=(cpu - km.init_cpu_seconds_) / iters,
                   objective=mean_cosine(X, km.cluster_centers_),
                   own_objective=km.objective_, n_iter=km.n_iter_)
    elif a.worker == "faiss":
        import faiss

        faiss.omp_set_num_threads(a.threads)
        t_load = time.perf_counter()
        x = np.ascontiguousarray(X, dtype=np.float32)
        t_load = time.perf_counter() - t_load
        km = faiss.Kmeans(d, a.k, niter=a.iters, nredo=1, spherical=True, seed=1234,
                          verbose=False, max_points_per_centroid=N // a.k + 1,
                          min_points_per_centroid=1)
        t0, c0 = time.perf_counter(), time.process_time()
        km.train(x)
        train = time.perf_counter() - t0
        t1 = time.perf_counter()
        km.index.search(x, 1)  # the final labels
        label = time.perf_counter() - t1
        cpu = time.process_time() - c0
        res["peak_rss_gib"] = peak_rss_gib()
        res.update(init_s=0.0, load_s=t_load, train_s=train, total_s=train + label,
                   cpu_per_iter_s=cpu / a.iters,
                   per_iter_s=(train + label) / a.iters, train_per_iter_s=train / a.iters,
                   objective=mean_cosine(x, km.centroids))
    elif a.worker == "sklearn":
        from sklearn.cluster import KMeans as SKMeans
        from threadpoolctl import threadpool_limits

        x = np.ascontiguousarray(X, dtype=np.float32)
        km = SKMeans(a.k, init="random", n_init=1, max_iter=a.iters, tol=0.0, random_state=0,
                     algorithm="lloyd")
        with threadpool_limits(a.threads):
            t0, c0 = time.perf_counter(), time.process_time()
            km.fit(x)
            total, cpu = time.perf_counter() - t0, time.process_time() - c0
        res["peak_rss_gib"] = peak_rss_gib()
        res.update(init_s=0.0, total_s=total, per_iter_s=total / max(km.n_iter_, 1),
                   cpu_per_iter_s=cpu / max(km.n_iter_, 1),
                   objective=mean_cosine(x, km.cluster_centers_), n_iter=int(km.n_iter_))
    return res


def run_method(method: str, data: Path, k: int, iters: int, threads: int, chunk_rows: int,
               timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--data", str(data), "--k", str(k),
           "--iters", str(iters), "--threads", str(threads), "--chunk-rows", str(chunk_rows)]
    return run_worker(cmd, method, threads, timeout)


def table(title: str, rows: list[dict]) -> str:
    ref = next((r for r in rows if r["method"] == "faiss" and "error" not in r), None)
    lines = [f"### {title}", "",
             "| method | s/iter | x FAISS | CPU s/iter | x FAISS | init s | objective "
             "| gap vs FAISS | peak RSS GiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['method']} | error: {r['error']} | | | | | | | |")
            continue
        ratio = f"{r['per_iter_s'] / ref['per_iter_s']:.2f}" if ref else "-"
        cpu_ratio = f"{r['cpu_per_iter_s'] / ref['cpu_per_iter_s']:.2f}" if ref else "-"
        gap = (f"{100 * (r['objective'] - ref['objective']) / ref['objective']:+.3f}%"
               if ref else "-")
        name = r["method"]
        if name == "faiss":
            name += f" (train only: {r['train_per_iter_s']:.3f} s/iter)"
        lines.append(f"| {name} | {r['per_iter_s']:.3f} | {ratio} | {r['cpu_per_iter_s']:.3f} | "
                     f"{cpu_ratio} | {r['init_s']:.2f} | "
                     f"{r['objective']:.5f} | {gap} | {r['peak_rss_gib']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small case only (seconds)")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=384)
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--memory", type=float, default=2.0,
                   help="RAM budget in GiB for the out-of-core case (default 2)")
    p.add_argument("--ooc-n", type=int, default=2_000_000,
                   help="rows of the out-of-core case (file must exceed --memory)")
    p.add_argument("--ooc-k", type=int, default=256)
    p.add_argument("--no-ooc", action="store_true", help="skip the out-of-core case")
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument("--no-in-ram", action="store_true", help="skip the in-RAM case")
    p.add_argument("--cache", default=os.environ.get("BENCH_CACHE", "/tmp/clusterclip-bench"))
    p.add_argument("--timeout", type=float, default=1800)
    # internal: run one method in a subprocess
    p.add_argument("--worker", choices=("ours", "faiss", "sklearn"), help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--chunk-rows", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    if a.quick:
        a.n, a.d, a.k, a.iters, a.ooc_n, a.ooc_k, a.memory = 50_000, 128, 100, 5, 400_000, 64, 0.1
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    methods = ["ours", "faiss"] + ([] if a.no_sklearn else ["sklearn"])
    print(f"# K-means benchmark: {a.threads} threads, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    if not a.no_in_ram:
        data = make_data(cache / f"blobs_{a.n}x{a.d}_{a.k}.npy", a.n, a.d, a.k, seed=0)
        rows = [run_method(m, data, a.k, a.iters, a.threads, 0, a.timeout) for m in methods]
        print(table(f"in RAM: N={a.n:,}, d={a.d}, K={a.k}, {a.iters} iterations", rows),
              flush=True)
    if not a.no_ooc:
        budget = a.memory * GIB
        data = make_data(cache / f"blobs_{a.ooc_n}x{a.d}_{a.ooc_k}.npy", a.ooc_n, a.d, a.ooc_k,
                         seed=1)
        size = data.stat().st_size
        # Our working set is about 3 x chunk (raw rows, float32 copy, float64 block)
        # plus the score block; leave half the budget to Python, torch and labels.
        chunk_rows = max(1024, int(budget / 2 / (3 * a.d * 8)))
        rows = [run_method(m, data, a.ooc_k, a.iters, a.threads, chunk_rows, a.timeout)
                for m in methods]
        print(table(f"out of core: N={a.ooc_n:,}, d={a.d}, K={a.ooc_k}, {a.iters} iterations, "
                    f"file {size / GIB:.2f} GiB > budget {a.memory:.2f} GiB "
                    f"(ours: chunk_rows={chunk_rows}, memmap read in chunks)", rows))
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
