"""How much the report's top terms change when each cluster's terms come from a sample.

For a finished work directory (``labels.npy`` and the corpus index ``corpus/``), counts
the c-TF-IDF top terms on every document (the reference) and on a seeded sample of at
most M documents per cluster (what ``clusterclip report`` does, see
``clusterclip.report.terms.sample_documents``), for several M and seeds, and prints the
agreement: the share of each cluster's reference top-10 terms that the sample's top-10
also holds (order ignored), averaged over the clusters that were sampled (the others are
read whole, so their terms can differ only through the other clusters' counts) and over
all clusters, with the worst sampled cluster's share, and ``near``: the share of the
sample's top-10 that are among the reference's top 20. ``unscaled`` is the same sample
without scaling a sampled cluster's counts to its size, for comparison.

    PYTHONPATH=src python benchmarks/bench_terms_sample.py W --per-cluster 250 500 1000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from clusterclip.corpus import Corpus
from clusterclip.report.build import load_labels
from clusterclip.report.readable import TEXT_BLOCK, _text_blocks
from clusterclip.report.terms import TOP_TERMS, count_terms, sample_documents, top_terms
from clusterclip.workdir import CENTROIDS, CORPUS, LABELS


def _terms(corpus, labels, k, per_cluster, seed, n_terms=TOP_TERMS):
    t0 = time.process_time()
    indices, sizes, taken = sample_documents(labels, k, per_cluster, seed)
    counts = count_terms(_text_blocks(corpus, labels, indices, TEXT_BLOCK), k)
    weights = np.divide(sizes, taken, out=np.ones(k), where=taken > 0)
    scaled = top_terms(counts, n_terms, weights)
    cpu = time.process_time() - t0
    return scaled, top_terms(counts, n_terms), taken < sizes, int(indices.size), cpu


def _agreement(ref, got, mask):
    """Share of the reference top-10 kept; ``near``: share of the sample's top-10 that are
    in the reference's top 20."""
    share = np.array([len(set(a[:TOP_TERMS]) & set(b)) / len(a[:TOP_TERMS]) if a else 1.0
                      for a, b in zip(ref, got, strict=True)])
    near = np.array([len(set(a) & set(b)) / len(b) if b else 1.0
                     for a, b in zip(ref, got, strict=True)])
    sampled = share[mask]
    return {"sampled_mean": float(sampled.mean()) if sampled.size else None,
            "sampled_min": float(sampled.min()) if sampled.size else None,
            "sampled_near": float(near[mask].mean()) if sampled.size else None,
            "all_mean": float(share.mean())}


def fmt(x):
    return "-" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--per-cluster", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    root = Path(args.workdir)
    labels, k = load_labels(root / LABELS, root / CENTROIDS)
    corpus = Corpus.load(root / CORPUS)
    n = int((labels >= 0).sum())
    ref, _, _, _, cpu_full = _terms(corpus, labels, k, max(n, 1), 0, 2 * TOP_TERMS)
    print(f"{root}: {n:,} documents, K = {k}; full count {cpu_full:.1f} CPU-s", flush=True)
    rows = []
    for m in args.per_cluster:
        for seed in range(args.seeds):
            scaled, unscaled, mask, read, cpu = _terms(corpus, labels, k, m, seed)
            row = {"per_cluster": m, "seed": seed, "documents_read": read,
                   "clusters_sampled": int(mask.sum()), "cpu_s": cpu,
                   "scaled": _agreement(ref, scaled, mask),
                   "unscaled": _agreement(ref, unscaled, mask)}
            rows.append(row)
            s, u = row["scaled"], row["unscaled"]
            print(f"M={m} seed={seed}: read {read:,} ({mask.sum()} clusters sampled), "
                  f"{cpu:.1f} CPU-s; top-10 kept, sampled clusters: mean "
                  f"{fmt(s['sampled_mean'])} min {fmt(s['sampled_min'])} near "
                  f"{fmt(s['sampled_near'])} (unscaled "
                  f"{fmt(u['sampled_mean'])}); all clusters {fmt(s['all_mean'])} "
                  f"(unscaled {fmt(u['all_mean'])})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"workdir": str(root), "documents": n,
                                               "clusters": k, "full_cpu_s": cpu_full,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
