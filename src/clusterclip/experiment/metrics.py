"""Pure metrics: from per-document loss sums to micro / macro / tail / head, and
the mean and spread over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Metric names, in table order. ``val_*`` are on held-out documents, ``train``
#: on an equally stratified sample of training documents, ``gap = val - train``.
METRICS = ("val_micro", "val_macro", "val_tail", "val_head", "train_micro", "gap")
QUARTILE = 0.25


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


def quartile_clusters(ids: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and the largest quarter of the clusters ``ids`` by size.

    ``sizes``: int[C] cluster sizes (documents in the whole corpus) aligned
    with ``ids``. A quarter is ``ceil(C / 4)`` clusters (at least one); ties in
    size are broken by cluster id so the choice is deterministic.
    Returns ``(tail_ids, head_ids)``.
    """
    ids = np.asarray(ids)
    q = max(1, math.ceil(QUARTILE * ids.size))
    order = np.lexsort((ids, np.asarray(sizes)))  # by size, then id
    return ids[order[:q]], ids[order[-q:]]


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
    tail, head = quartile_clusters(ids, sizes)
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


def mean_std(values: Sequence[float]) -> dict[str, Any]:
    """``{mean, std, values}``; std is the sample standard deviation (0 for one value)."""
    v = np.asarray(values, dtype=np.float64)
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "values": v.tolist()}
