"""Near-duplicate groups (``clusterclip dedup``): quality on planted copies, speed vs FAISS.

1. Quality: the bundled corpus (pydocs, 4,096 documents) plus ``--copies`` planted
   copies of distinct random documents, each with 2 small word edits (a word
   deleted, repeated or swapped with its neighbour:
   ``clusterclip.dedup.plant_near_duplicates``), run through ``clusterclip run``
   (embed + cluster) and ``clusterclip dedup`` at each threshold. Recall: planted
   copies in their source's group. Precision: of the other members of a planted
   copy's group, the fraction that is its source (strict), or its source or a
   document already grouped with the source without the plants (the corpus's own
   near-duplicates; "natural" column).
2. Scale: synthetic L2-normalised float32 embeddings (random directions, d = --d)
   with 2% planted near-copies (cosine ~0.98 to their source, same cluster),
   clusters of ~``--cluster-size`` documents, and one row with a single cluster
   of 10^5 documents (bounded memory). Ours (``near_duplicate_groups``, tiles of
   2048 x 4096) against FAISS (``IndexFlatIP`` per cluster, ``range_search`` of
   the cluster against itself at the same threshold, components with scipy), each
   in its own subprocess (peak RSS per method), same data, same run; the pair sets
   are compared. FAISS keeps similarities strictly above the radius, ours >=; the
   synthetic data has no pair at the threshold.

    python benchmarks/bench_dedup.py --quick
    python benchmarks/bench_dedup.py            # quality + N = 1e5, 1e6 + one 1e5 cluster
    python benchmarks/bench_dedup.py --only quality --embedder minilm
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _worker import run_worker


def peak_rss_gib() -> float:
    """This process's peak resident memory (VmHWM: not the parent's, as ru_maxrss is
    for a forked child)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


# ----------------------------------------------------------------- quality
def quality(thresholds: list[float], copies: int, embedder: str, clusters: int,
            seed: int) -> list[dict]:
    from clusterclip.cli import main as cli
    from clusterclip.data import pydocs_path
    from clusterclip.dedup import plant_near_duplicates

    with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    n = len(texts)
    allt, source = plant_near_duplicates(texts, copies, seed=seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, docs in (("plain", texts), ("planted", allt)):
            p = Path(tmp) / f"{name}.jsonl"
            p.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
        grouped = {}
        for t in thresholds:
            for name in ("plain", "planted"):
                W = Path(tmp) / f"W_{name}"
                args = ["run", str(Path(tmp) / f"{name}.jsonl"), "--workdir", str(W),
                        "--clusters", str(clusters), "--embedder", embedder, "--seed", str(seed)]
                with contextlib.redirect_stdout(io.StringIO()), \
                        contextlib.redirect_stderr(io.StringIO()):
                    assert cli(args) == 0
                    t0 = time.perf_counter()
                    assert cli(["dedup", "--workdir", str(W), "--threshold", str(t),
                                "--no-progress"]) == 0
                grouped[name] = (np.load(W / "groups.npy"), time.perf_counter() - t0)
            g_plain = grouped["plain"][0]
            g, secs = grouped["planted"]
            cp = n + np.arange(copies)
            hit = g[cp] == g[source]
            strict = natural = others = 0
            for c, s in zip(cp, source, strict=True):
                mates = np.flatnonzero(g == g[c])
                mates = mates[mates != c]
                others += mates.size
                strict += int((mates == s).sum())
                orig = mates[mates < n]
                natural += int((g_plain[orig] == g_plain[s]).sum())
            rows.append({"threshold": t, "recall": float(hit.mean()),
                         "precision": strict / others if others else 1.0,
                         "precision_natural": natural / others if others else 1.0,
                         "grouped_in_plain": int(n - np.unique(g_plain[g_plain >= 0]).size),
                         "seconds": secs})
    return rows


# ------------------------------------------------------------------- scale
def make_data(path: Path, n: int, d: int, cluster_size: int, seed: int) -> None:
    """Random unit rows, 2% of them near-copies of an earlier row (same cluster)."""
    rng = np.random.default_rng(seed)
    X = np.lib.format.open_memmap(path / "X.npy", mode="w+", dtype=np.float32, shape=(n, d))
    k = max(1, n // cluster_size)
    labels = rng.integers(0, k, n).astype(np.int32)
    chunk = 1 << 18
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        Y = rng.standard_normal((hi - lo, d), dtype=np.float32)
        X[lo:hi] = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    m = n // 50
    dst = np.sort(rng.choice(np.arange(n // 2, n), m, replace=False))
    src = rng.integers(0, n // 2, m)
    noise = 0.2 / np.sqrt(d)
    for lo in range(0, m, chunk):
        s, t = src[lo:lo + chunk], dst[lo:lo + chunk]
        Y = X[s] + noise * rng.standard_normal((s.size, d), dtype=np.float32)
        X[t] = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        labels[t] = labels[s]
    X.flush()
    del X
    np.save(path / "labels.npy", labels)


def worker(a: argparse.Namespace) -> dict:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    X = np.load(Path(a.data) / "X.npy", mmap_mode="r")
    labels = np.load(Path(a.data) / "labels.npy")
    t0 = time.perf_counter()
    if a.worker == "ours":
        from clusterclip.dedup import cluster_groups, iter_pairs, near_duplicate_groups

        groups, npairs = near_duplicate_groups(X, labels, a.threshold)
        secs = time.perf_counter() - t0
        pairs = []  # the pairs again (not timed), for the comparison
        order = np.argsort(labels, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(labels))])
        for k in range(bounds.size - 1):
            idx = order[bounds[k]:bounds[k + 1]]
            for p, q in iter_pairs(X, idx, a.threshold):
                pairs.append(np.stack([idx[p], idx[q]], 1))
        del cluster_groups
    else:
        import faiss

        faiss.omp_set_num_threads(a.threads)
        order = np.argsort(labels, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(labels))])
        groups = np.full(labels.size, -1, np.int64)
        pairs = []
        npairs = 0
        for k in range(bounds.size - 1):
            idx = order[bounds[k]:bounds[k + 1]]
            Y = np.ascontiguousarray(X[idx], dtype=np.float32)
            index = faiss.IndexFlatIP(Y.shape[1])
            index.add(Y)
            lims, _, nbr = index.range_search(Y, a.threshold)
            q = np.repeat(np.arange(idx.size), np.diff(lims.astype(np.int64)))
            nbr = nbr.astype(np.int64)
            keep = nbr > q
            p, r = q[keep], nbr[keep]
            npairs += p.size
            g = coo_matrix((np.ones(p.size, np.int8), (p, r)), shape=(idx.size, idx.size))
            _, comp = connected_components(g, directed=False)
            first = np.full(comp.max() + 1, idx.size, np.int64)
            np.minimum.at(first, comp, np.arange(idx.size))
            groups[idx] = idx[first[comp]]
            pairs.append(np.stack([idx[p], idx[r]], 1))
        secs = time.perf_counter() - t0
    P = np.concatenate(pairs) if pairs else np.empty((0, 2), np.int64)
    P = P[np.lexsort((P[:, 1], P[:, 0]))]
    np.save(Path(a.data) / f"pairs_{a.worker}.npy", P)
    np.save(Path(a.data) / f"groups_{a.worker}.npy", groups)
    return {"method": a.worker, "seconds": secs, "pairs": int(npairs),
            "peak_rss_gib": peak_rss_gib()}


def run_method(method: str, data: Path, threshold: float, threads: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--data", str(data),
           "--threshold", str(threshold), "--threads", str(threads)]
    return run_worker(cmd, method, threads, timeout)


def scale_row(n: int, d: int, cluster_size: int, threshold: float, threads: int, seed: int,
              timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        make_data(data, n, d, cluster_size, seed)
        res = {m: run_method(m, data, threshold, threads, timeout) for m in ("ours", "faiss")}
        same_pairs = same_groups = None
        if all("error" not in r for r in res.values()):
            same_pairs = bool(np.array_equal(np.load(data / "pairs_ours.npy"),
                                             np.load(data / "pairs_faiss.npy")))
            same_groups = bool(np.array_equal(np.load(data / "groups_ours.npy"),
                                              np.load(data / "groups_faiss.npy")))
    return {"n": n, "d": d, "cluster_size": cluster_size, "results": res,
            "same_pairs": same_pairs, "same_groups": same_groups}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small cases only (seconds)")
    p.add_argument("--worker", choices=("ours", "faiss"), help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--threshold", type=float, default=0.95)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--d", type=int, default=384, help="synthetic embedding dimension")
    p.add_argument("--cluster-size", type=int, default=1000)
    p.add_argument("--copies", type=int, default=400, help="planted copies (quality)")
    p.add_argument("--embedder", default="fast", help="embedder for the quality run")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("quality", "scale"), default=None)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    thresholds = [0.9, 0.95, 0.98]
    if a.only != "scale":
        print_quality(a, thresholds)
    if a.only != "quality":
        print_scale(a)


def print_quality(a: argparse.Namespace, thresholds: list[float]) -> None:
    print(f"## quality: pydocs + {a.copies} planted copies, embedder {a.embedder}\n")
    print("| threshold | recall | precision (strict) | precision (natural) | documents grouped "
          "without plants | dedup s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in quality(thresholds, a.copies, a.embedder, 16, a.seed):
        print(f"| {r['threshold']} | {r['recall']:.3f} | {r['precision']:.3f} | "
              f"{r['precision_natural']:.3f} | {r['grouped_in_plain']} | {r['seconds']:.2f} |",
              flush=True)


def print_scale(a: argparse.Namespace) -> None:
    cases = ([(20_000, 1000), (20_000, 20_000)] if a.quick
             else [(100_000, a.cluster_size), (1_000_000, a.cluster_size),
                   (100_000, 100_000)])
    print(f"\n## scale: synthetic d={a.d}, 2% planted near-copies, threshold {a.threshold}, "
          f"{a.threads} threads\n")
    print("| N | cluster size | method | seconds | peak RSS GiB | pairs | same pairs | "
          "same groups |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | --- | --- |")
    for n, cs in cases:
        row = scale_row(n, a.d, cs, a.threshold, a.threads, a.seed, a.timeout)
        for m, r in row["results"].items():
            if "error" in r:
                print(f"| {n:,} | ~{cs:,} | {m} | error: {r['error']} | | | | |")
                continue
            print(f"| {n:,} | ~{cs:,} | {m} | {r['seconds']:.2f} | {r['peak_rss_gib']:.2f} | "
                  f"{r['pairs']:,} | {row['same_pairs']} | {row['same_groups']} |", flush=True)


if __name__ == "__main__":
    main()
