"""Embedding benchmark: speed of our embedders against their peers, and the
quality of each embedder's clusters on the bundled Python-docs corpus.

Rows, all in one run:

- MiniLM: our path (``SentenceTransformerEmbedder.encode``) vs a direct
  ``SentenceTransformer.encode`` on the same texts, batch size and max length
  (target: ratio >= 1.0). Runs alternate, best of ``--rounds`` is kept.
- fast: our no-model embedder (TF-IDF over MiniLM's word pieces, randomly
  projected to 256 dims) over the whole corpus, from a fresh embedder (IDF
  sample + cold chunk cache, as one ``embed`` run does) and warm (target:
  >= 5,000 docs/s on 2 cores). Its peer is the other candidate: the same
  pipeline with static token vectors distilled from MiniLM instead of the
  random table (one-off distillation, cached under ~/.cache/clusterclip).
- NMI of K-means (scikit-learn, ``--seeds`` restarts averaged) against the
  pydocs ``label`` field, K = 15 and 50, plus a shuffled-label baseline.

Wall-clock figures on a shared machine vary with load; CPU seconds
(``time.process_time``) are printed alongside.

    python benchmarks/bench_embed.py            # MiniLM on all 4,096 docs (slow on CPU)
    python benchmarks/bench_embed.py --quick    # MiniLM on a 128-doc subset
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def nmi_row(x: np.ndarray, labels: np.ndarray, ks: list[int], seeds: int) -> list[float]:
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    out = []
    for k in ks:
        scores = [normalized_mutual_info_score(
            labels, KMeans(k, n_init=1, random_state=s).fit_predict(x)) for s in range(seeds)]
        out.append(float(np.mean(scores)))
    return out


def shuffled_row(x: np.ndarray, labels: np.ndarray, ks: list[int], seeds: int) -> list[float]:
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(0)
    return [float(np.mean([normalized_mutual_info_score(
        rng.permutation(labels), KMeans(k, n_init=1, random_state=s).fit_predict(x))
        for s in range(seeds)])) for k in ks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="MiniLM rows on a 128-doc subset")
    ap.add_argument("--minilm-docs", type=int, default=None,
                    help="documents for the MiniLM rows (default: all, 128 with --quick)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (best kept)")
    ap.add_argument("--seeds", type=int, default=3, help="k-means restarts averaged for NMI")
    ap.add_argument("--clusters", default="15,50")
    ap.add_argument("--minilm-embeddings", default=None,
                    help="N x d MiniLM vectors of all pydocs docs saved by an earlier full run "
                         "(np.save), for the full-corpus MiniLM NMI row when MiniLM itself "
                         "runs on a subset")
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from clusterclip.data import pydocs_path
    from clusterclip.embedding.pipeline import SAMPLE_SIZE, make_embedder, sample_indices
    from clusterclip.embedding.static import StaticEmbedder, cache_dir
    from clusterclip.embedding.transformer import bundled_minilm_path

    with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    texts = [r["text"] for r in rows]
    labels = np.array([r["label"] for r in rows])
    ks = [int(k) for k in args.clusters.split(",")]
    n_minilm = args.minilm_docs or (128 if args.quick else len(texts))
    rounds = args.rounds or (2 if args.quick else 1)
    # An evenly spaced subset keeps every doc folder represented.
    sub = np.linspace(0, len(texts) - 1, n_minilm).round().astype(int)
    sub_texts = [texts[i] for i in sub]
    print(f"pydocs: {len(texts)} docs; MiniLM rows on {n_minilm} docs, max_length "
          f"{args.max_length}, batch {args.batch_size}; torch threads {torch.get_num_threads()}, "
          f"cpus {os.cpu_count()}")

    # -- MiniLM: ours vs direct sentence-transformers ----------------------------
    ours = make_embedder("minilm", max_length=args.max_length, batch_size=args.batch_size)
    direct = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    direct.max_seq_length = ours.model.max_seq_length
    ours.encode(sub_texts[:8])  # warm both (first-call allocations)
    direct.encode(sub_texts[:8])
    t_ours, t_direct = [], []
    e_ours = e_direct = None
    for _ in range(rounds):
        e_ours, w, c = timed(lambda: ours.encode(sub_texts))
        t_ours.append((w, c))
        e_direct, w, c = timed(lambda: direct.encode(
            sub_texts, batch_size=args.batch_size, normalize_embeddings=True))
        t_direct.append((w, c))
    best_o, best_d = min(t_ours), min(t_direct)
    cos = float(np.sum(e_ours * e_direct, axis=1).min())

    # -- fast: TF-IDF + random projection vs distilled static vectors -------------
    from clusterclip.embedding.static import STATIC_VERSION
    from clusterclip.embedding.transformer import model_identity
    from clusterclip.io import fingerprint

    key = fingerprint({"v": STATIC_VERSION, "model": model_identity(bundled_minilm_path())})
    table_cached = (cache_dir() / f"static-{key}.npy").exists()
    fast, t_init, c_init = timed(lambda: make_embedder("fast", max_length=args.max_length))
    valid = np.ones(len(texts), dtype=bool)
    sample = [texts[i] for i in sample_indices(valid, SAMPLE_SIZE)]

    def cold_run(emb: StaticEmbedder) -> np.ndarray:
        emb.prepare(sample)
        return emb.encode(texts)

    e_fast, w_cold, c_cold = timed(lambda: cold_run(fast))
    _, w_warm, c_warm = timed(lambda: fast.encode(texts))
    dist, t_dist, c_dist = timed(lambda: StaticEmbedder(table="distilled",
                                                        max_length=args.max_length))
    e_rp, w_rp, c_rp = timed(lambda: cold_run(dist))
    _, w_rpw, c_rpw = timed(lambda: dist.encode(texts))

    # -- quality ---------------------------------------------------------------------
    e_minilm_full = e_ours if n_minilm == len(texts) else None
    quality = []
    if e_minilm_full is None and args.minilm_embeddings:
        e_minilm_full = np.load(args.minilm_embeddings)
    if e_minilm_full is not None:
        name = "minilm" if n_minilm == len(texts) else "minilm (vectors from --minilm-embeddings)"
        quality.append((name, "all", nmi_row(e_minilm_full, labels, ks, args.seeds)))
    quality.append((f"minilm (ours), {n_minilm}-doc subset", "subset",
                    nmi_row(e_ours, labels[sub], ks, args.seeds)))
    quality.append(("fast (TF-IDF + random projection)", "all",
                    nmi_row(e_fast, labels, ks, args.seeds)))
    quality.append(("fast, same subset", "subset", nmi_row(e_fast[sub], labels[sub], ks,
                                                           args.seeds)))
    quality.append(("static vectors distilled from MiniLM", "all",
                    nmi_row(e_rp, labels, ks, args.seeds)))
    quality.append(("shuffled labels (fast clusters)", "all",
                    shuffled_row(e_fast, labels, ks, args.seeds)))

    n = len(texts)
    print()
    print("| embedder | docs | wall s | docs/s (wall) | CPU s | docs/CPU-s | ratio vs peer |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| MiniLM, ours | {n_minilm} | {best_o[0]:.2f} | {n_minilm / best_o[0]:.1f} | "
          f"{best_o[1]:.2f} | {n_minilm / best_o[1]:.1f} | "
          f"{best_d[0] / best_o[0]:.2f}x wall, {best_d[1] / best_o[1]:.2f}x CPU |")
    print(f"| MiniLM, direct `SentenceTransformer.encode` | {n_minilm} | {best_d[0]:.2f} | "
          f"{n_minilm / best_d[0]:.1f} | {best_d[1]:.2f} | {n_minilm / best_d[1]:.1f} | 1.00x |")
    print(f"| fast (TF-IDF + RP), one run from scratch | {n} | {w_cold:.2f} | "
          f"{n / w_cold:.0f} | {c_cold:.2f} | {n / c_cold:.0f} | "
          f"{w_rp / w_cold:.2f}x vs distilled |")
    print(f"| fast (TF-IDF + RP), warm cache | {n} | {w_warm:.2f} | {n / w_warm:.0f} | "
          f"{c_warm:.2f} | {n / c_warm:.0f} | {w_rpw / w_warm:.2f}x vs distilled |")
    print(f"| distilled static vectors, from scratch | {n} | {w_rp:.2f} | "
          f"{n / w_rp:.0f} | {c_rp:.2f} | {n / c_rp:.0f} | |")
    print(f"| distilled static vectors, warm | {n} | {w_rpw:.2f} | "
          f"{n / w_rpw:.0f} | {c_rpw:.2f} | {n / c_rpw:.0f} | |")
    print()
    print(f"min cosine ours vs direct MiniLM: {cos:.6f}; fast embedder load {t_init:.2f} s "
          f"wall (CPU {c_init:.2f} s); distilled table load {t_dist:.2f} s wall "
          f"({'cached' if table_cached else 'distilled now'}, CPU {c_dist:.2f} s)")
    print()
    print("| clusters of | docs | " + " | ".join(f"NMI K={k}" for k in ks) + " |")
    print("|---|---|" + "---:|" * len(ks))
    for name, scope, vals in quality:
        docs = n if scope == "all" else n_minilm
        print(f"| {name} | {docs} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")


if __name__ == "__main__":
    main()
