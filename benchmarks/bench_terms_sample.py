"""How much the report's top terms change when each cluster's terms come from a sample.

For a finished work directory (``labels.npy`` and the corpus index ``corpus/``), counts
the c-TF-IDF top terms on every document (the reference) and on the report's seeded
samples, for several seeds: a fixed sample of at most M documents per cluster (one round,
``--per-cluster``), and the sample sized by what the terms need (``--first-round F``:
rounds of F, 2F, 4F, ... documents per cluster up to the cap ``--cap``, a cluster stopping
when a round leaves its top-10 set unchanged; ``clusterclip.report.terms.sampled_terms``,
which the report reads its fixed sample with too, in one round). For each it prints the
documents read, the CPU seconds (reading and counting) and the agreement: the share of
each cluster's
reference top-10 terms that the sample's top-10 also holds (order ignored), averaged over
all clusters and over those read in part, with the worst cluster's share, and ``near``:
the share of the sample's top-10 that are among the reference's top 20.

Then the rounds against the fixed sample at the cap, paired by cluster (each cluster's
share averaged over the seeds; the same seed draws the same sample, which the rounds read a
prefix of): the mean difference with its paired-t 95% interval and p-value
(:func:`clusterclip.verdict.paired_difference`), and the plain conclusion.

    PYTHONPATH=src python benchmarks/bench_terms_sample.py W --per-cluster 200 2000 \\
        --first-round 200 --cap 2000 --seeds 3 [--merge 5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from clusterclip.corpus import Corpus
from clusterclip.report.build import load_labels
from clusterclip.report.reading import read_corpus
from clusterclip.report.terms import TOP_TERMS, sample_order, sampled_terms
from clusterclip.verdict import paired_difference
from clusterclip.workdir import CENTROIDS, CORPUS, LABELS


def _terms(corpus, labels, k, per_cluster, first_round, seed, n_terms=TOP_TERMS):
    t0 = time.process_time()
    order = sample_order(labels, k, per_cluster, seed, ordered=first_round is not None)
    # One process (workers=1), so that the process's CPU time is all of it.
    got = sampled_terms(order, lambda idx: read_corpus(corpus, labels, idx, k, workers=1).counts,
                        first_round, n_terms)
    return got, time.process_time() - t0


def _shares(ref, got):
    """Per cluster: share of the reference top-10 kept, and share of the sample's top-10
    in the reference's top 20."""
    share = np.array([len(set(a[:TOP_TERMS]) & set(b)) / len(a[:TOP_TERMS]) if a else 1.0
                      for a, b in zip(ref, got, strict=True)])
    near = np.array([len(set(a) & set(b)) / len(b) if b else 1.0
                     for a, b in zip(ref, got, strict=True)])
    return share, near


def _row(name, seed, ref, got, cpu):
    share, near = _shares(ref, got.terms)
    part = got.read < got.sizes
    live = got.read[got.sizes > 0]
    row = {"sample": name, "seed": seed, "documents_read": int(got.read.sum()),
           "rounds": got.rounds, "clusters_sampled": int(part.sum()), "cpu_s": cpu,
           "read_min": int(live.min()), "read_median": float(np.median(live)),
           "read_max": int(live.max()), "all_mean": float(share.mean()),
           "all_min": float(share.min()), "all_near": float(near.mean()),
           "sampled_mean": float(share[part].mean()) if part.any() else None,
           "sampled_min": float(share[part].min()) if part.any() else None,
           "part_read": {str(v): int(c) for v, c in
                         zip(*np.unique(got.read[part], return_counts=True), strict=True)}}
    print(f"{name} seed={seed}: read {row['documents_read']:,} in {got.rounds} round(s) "
          f"(per cluster {row['read_min']}/{row['read_median']:g}/{row['read_max']}; "
          f"{row['clusters_sampled']} clusters read in part), {cpu:.1f} CPU-s; top-10 kept: "
          f"all clusters mean {row['all_mean']:.3f} worst {row['all_min']:.3f} near "
          f"{row['all_near']:.3f}; clusters read in part mean {fmt(row['sampled_mean'])} "
          f"worst {fmt(row['sampled_min'])}; read in part, clusters by documents read: "
          f"{row['part_read']}", flush=True)
    return row, share


def fmt(x):
    return "-" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--per-cluster", type=int, nargs="*", default=[200, 2000])
    ap.add_argument("--first-round", type=int, default=200)
    ap.add_argument("--cap", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--merge", type=int, default=1,
                    help="count clusters F at a time (cluster c as c // F): a regime of "
                         "larger clusters than the run's")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    root = Path(args.workdir)
    labels, k = load_labels(root / LABELS, root / CENTROIDS)
    if args.merge > 1:
        labels = np.where(labels >= 0, labels // args.merge, -1)
        k = -(-k // args.merge)
    corpus = Corpus.load(root / CORPUS)
    n = int((labels >= 0).sum())
    full, cpu_full = _terms(corpus, labels, k, max(n, 1), None, 0, 2 * TOP_TERMS)
    ref = full.terms
    print(f"{root}: {n:,} documents, K = {k}; full count {cpu_full:.1f} CPU-s", flush=True)
    rows, shares = [], {}
    plan = [(f"fixed-{m}", m, None) for m in args.per_cluster]
    plan.append((f"rounds-{args.first_round}-to-{args.cap}", args.cap, args.first_round))
    for name, cap, first in plan:
        for seed in range(args.seeds):
            got, cpu = _terms(corpus, labels, k, cap, first, seed)
            row, share = _row(name, seed, ref, got, cpu)
            rows.append(row)
            shares.setdefault(name, []).append(share)
    out = {"workdir": str(root), "documents": n, "clusters": k, "merge": args.merge,
           "full_cpu_s": cpu_full, "rows": rows}
    fixed = f"fixed-{args.cap}"
    if fixed in shares:
        rounds = plan[-1][0]
        diff = np.mean(shares[rounds], axis=0) - np.mean(shares[fixed], axis=0)
        p = paired_difference(diff)
        out["rounds_minus_fixed"] = p.to_dict()
        # Higher agreement is better (Paired.call reads lower as better: not used).
        verdict = ("not measurably different from" if not p.measurable else
                   "measurably worse than" if p.mean < 0 else "measurably better than")
        print(f"{rounds} minus {fixed}, top-10 kept per cluster (paired by cluster, "
              f"{diff.size} clusters, each the mean over {args.seeds} seeds): "
              f"{p.interval(4)}, p = {p.p if p.p is None else f'{p.p:.3g}'}: the rounds are "
              f"{verdict} the fixed {args.cap:,} (alone, before any Holm correction)",
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
