"""Pure metrics: from per-document loss sums to micro / macro / tail / head, and
the mean and spread over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from clusterclip.sampling.clip import quartile_clusters

#: Metric names, in table order. ``val_*`` are on held-out documents, ``train``
#: on an equally stratified sample of training documents, ``gap = val - train``.
METRICS = ("val_micro", "val_macro", "val_tail", "val_head", "train_micro", "gap")


def per_cluster_loss(loss_sum: np.ndarray, n_tokens: np.ndarray, clusters: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token-weighted mean loss of each cluster.

    ``loss_sum``: float[D] summed cross-entropy (nats) of each evaluated
    document; ``n_tokens``: int[D] its predicted tokens; ``clusters``: int[D].
    Returns ``(ids int64[C], loss float64[C], tokens int64[C])`` for the C
    clusters present, ids ascending.
    """
    clusters = np.asarray(clusters, dtype=np.int64)
    ids, inverse = np.unique(clusters, return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(loss_sum, dtype=np.float64),
                       minlength=ids.size)
    toks = np.bincount(inverse, weights=np.asarray(n_tokens, dtype=np.float64),
                       minlength=ids.size)
    if np.any(toks <= 0):
        raise ValueError("every evaluated cluster needs at least one token")
    return ids, sums / toks, toks.astype(np.int64)


def summarize(loss_sum: np.ndarray, n_tokens: np.ndarray, clusters: np.ndarray,
              cluster_sizes: np.ndarray) -> dict[str, Any]:
    """Micro, macro, tail and head loss of one evaluation.

    ``cluster_sizes``: int[K] documents per cluster id in the corpus (the
    size that ranks clusters into tail and head). Micro is token-weighted
    over all evaluated text; macro is the unweighted mean of the per-cluster
    losses; tail / head are the unweighted means over the smallest / largest
    quarter of the evaluated clusters.
    """
    loss_sum = np.asarray(loss_sum, dtype=np.float64)
    n_tokens = np.asarray(n_tokens, dtype=np.float64)
    ids, loss, toks = per_cluster_loss(loss_sum, n_tokens, clusters)
    sizes = np.asarray(cluster_sizes)[ids]
    tail, head = quartile_clusters(cluster_sizes, among=ids)
    head = head[::-1]  # ascending by size, the order the results list
    by_id = dict(zip(ids.tolist(), loss.tolist(), strict=True))
    return {
        "micro": float(loss_sum.sum() / n_tokens.sum()),
        "macro": float(loss.mean()),
        "tail": float(np.mean([by_id[c] for c in tail.tolist()])),
        "head": float(np.mean([by_id[c] for c in head.tolist()])),
        "tail_clusters": tail.tolist(),
        "head_clusters": head.tolist(),
        "per_cluster": {str(c): {"loss": by_id[c], "tokens": int(t), "size": int(s)}
                        for c, t, s in zip(ids.tolist(), toks.tolist(), sizes.tolist(),
                                           strict=True)},
    }


def bits_per_byte(loss_sum: np.ndarray, n_bytes: np.ndarray) -> float:
    """Summed loss (nats) over the UTF-8 bytes the tokens cover, in bits: the loss that
    compares across tokenizers (for the byte-level model, nats per token / ln 2)."""
    return float(np.sum(loss_sum) / (math.log(2) * max(1, int(np.sum(n_bytes)))))


def mean_std(values: Sequence[float]) -> dict[str, Any]:
    """``{mean, std, values}``; std is the sample standard deviation (0 for one value)."""
    v = np.asarray(values, dtype=np.float64)
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "values": v.tolist()}


#: Per-run schedule statistics, in table order (see :func:`schedule_stats`).
SCHEDULE_STATS = ("docs_drawn", "distinct_docs", "max_repetition", "clusters_clipped",
                  "clusters_over_clip", "tail_token_share", "late_tail_token_share",
                  "head_token_share")
#: Added to :data:`SCHEDULE_STATS` when near-duplicate groups are counted (``W/groups.npy``).
GROUP_STATS = ("max_group_repetition",)
#: The part of the fed schedule (its last fifth, by position) behind ``late_tail_token_share``.
LATE_FRACTION = 0.2


def schedule_stats(fed: np.ndarray, labels: np.ndarray, doc_tokens: np.ndarray,
                   tail: Sequence[int], head: Sequence[int], clip: int,
                   clusters_clipped: int, groups: np.ndarray | None = None
                   ) -> dict[str, Any]:
    """What a run's schedule fed the model, to tell whether the clip mattered.

    ``fed``: int[D] document indices in the order packed (see
    :func:`~clusterclip.lm.runs.schedule_stream`); ``labels``: int[N];
    ``doc_tokens``: int[N] tokens per document; ``tail`` / ``head``: the smallest / largest quarter
    of the evaluated clusters; ``clusters_clipped``: clusters that completed
    their ``clip``-th pass and left the pool (the sampler's summary; 0 for
    strategies without a clip). ``clusters_over_clip`` counts clusters with a
    document fed more than ``clip`` times (0 under ClusterClip by construction;
    for uniform, the clusters a clip would have retired). Token shares are of
    the tokens of the fed documents; ``late_tail_token_share`` is the tail's
    share of the tokens of the last :data:`LATE_FRACTION` of the fed documents
    (by position), where a greedy clip may have retired the tail already.
    ``groups``: int[N] near-duplicate group per document (-1 none), adds
    ``max_group_repetition``: the most times one group's documents were fed, together.
    """
    fed = np.asarray(fed, dtype=np.int64)
    reps = np.bincount(fed, minlength=labels.size)
    tok = doc_tokens[fed].astype(np.float64)
    total = max(1.0, float(tok.sum()))
    lab = labels[fed]
    over = np.unique(labels[reps > clip])
    late = slice(fed.size - int(math.ceil(LATE_FRACTION * fed.size)), None)
    late_total = max(1.0, float(tok[late].sum()))
    out = {
        "docs_drawn": int(fed.size),
        "distinct_docs": int(np.count_nonzero(reps)),
        "max_repetition": int(reps.max(initial=0)),
        "clusters_clipped": int(clusters_clipped),
        "clusters_over_clip": int(np.count_nonzero(over >= 0)),
        "tail_token_share": float(tok[np.isin(lab, tail)].sum() / total),
        "late_tail_token_share": float(tok[late][np.isin(lab[late], tail)].sum() / late_total),
        "head_token_share": float(tok[np.isin(lab, head)].sum() / total),
    }
    if groups is not None:
        from clusterclip.dedup import group_repetition

        out["max_group_repetition"] = group_repetition(reps, groups)["max_group_repetition"]
    return out


def schedule_keys(schedule: dict[str, Any]) -> tuple[str, ...]:
    """The statistics in a run's (or strategy's) ``schedule``, in table order."""
    return SCHEDULE_STATS + tuple(k for k in GROUP_STATS if k in schedule)


def cluster_repetition(fed: np.ndarray, train_labels: np.ndarray, ids: Sequence[int]
                       ) -> np.ndarray:
    """Mean times each training document of each cluster in ``ids`` was fed.

    ``fed``: int[D] document indices in schedule order; ``train_labels``:
    int[N], -1 for documents not in training (held out or excluded).
    Returns float64[len(ids)]: (documents of the cluster fed, repeats
    counted) / (training documents of the cluster); 0 for a cluster without
    training documents.
    """
    train_labels = np.asarray(train_labels, dtype=np.int64)
    k = int(max(int(train_labels.max(initial=-1)), max(ids, default=-1))) + 1
    lab = train_labels[np.asarray(fed, dtype=np.int64)]
    fed_per = np.bincount(lab[lab >= 0], minlength=k).astype(np.float64)
    docs_per = np.bincount(train_labels[train_labels >= 0], minlength=k).astype(np.float64)
    ids_a = np.asarray(list(ids), dtype=np.int64)
    out = np.zeros(ids_a.size, dtype=np.float64)
    ok = docs_per[ids_a] > 0
    out[ok] = fed_per[ids_a][ok] / docs_per[ids_a][ok]
    return out
