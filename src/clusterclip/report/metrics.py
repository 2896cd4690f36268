"""Agreement between clusters and reference labels: NMI, ARI, purity (numpy only).

All three are computed from one contingency table, so a corpus of 10^7
documents costs one ``np.bincount``. Definitions follow the usual conventions
(and scikit-learn's, which the tests compare against): NMI with the arithmetic
mean of the two entropies as normaliser, ARI from the pair-counting confusion
matrix (Hubert & Arabie), purity as the share of documents that carry the most
frequent reference label of their cluster.
"""

from __future__ import annotations

import numpy as np


def contingency(clusters: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Dense contingency table of two labelings.

    ``clusters`` and ``classes`` are integer arrays of equal length n (any
    values). Returns int64[n_clusters, n_classes] with one row per distinct
    cluster value and one column per distinct class value, both in sorted order.
    """
    clusters = np.asarray(clusters)
    classes = np.asarray(classes)
    if clusters.shape != classes.shape or clusters.ndim != 1:
        raise ValueError(f"labelings must be 1-D of equal length, got "
                         f"{clusters.shape} and {classes.shape}")
    _, row = np.unique(clusters, return_inverse=True)
    _, col = np.unique(classes, return_inverse=True)
    n_rows = int(row.max()) + 1 if row.size else 0
    n_cols = int(col.max()) + 1 if col.size else 0
    flat = row.astype(np.int64) * n_cols + col
    return np.bincount(flat, minlength=n_rows * n_cols).reshape(n_rows, n_cols)


def _entropy(counts: np.ndarray) -> float:
    counts = counts[counts > 0].astype(np.float64)
    if counts.size <= 1:
        return 0.0
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def _mutual_information(table: np.ndarray) -> float:
    n = float(table.sum())
    rows = table.sum(axis=1).astype(np.float64)
    cols = table.sum(axis=0).astype(np.float64)
    i, j = np.nonzero(table)
    nij = table[i, j].astype(np.float64)
    mi = (nij / n) * (np.log(nij) + np.log(n) - np.log(rows[i]) - np.log(cols[j]))
    # Rounding can leave a tiny negative sum for independent labelings.
    return max(float(mi.sum()), 0.0)


def normalized_mutual_info(clusters: np.ndarray, classes: np.ndarray) -> float:
    """NMI in [0, 1], normalised by the arithmetic mean of the two entropies.

    Two labelings that each put everything in one group agree perfectly (1.0);
    if only one of them is a single group there is no information to share (0.0).
    """
    return _nmi(contingency(clusters, classes))


def _nmi(table: np.ndarray) -> float:
    if table.shape[0] == table.shape[1] and table.shape[0] <= 1:
        return 1.0
    mi = _mutual_information(table)
    if mi == 0.0:
        return 0.0
    h_rows = _entropy(table.sum(axis=1))
    h_cols = _entropy(table.sum(axis=0))
    normaliser = max((h_rows + h_cols) / 2.0, np.finfo(np.float64).eps)
    return float(min(mi / normaliser, 1.0))


def adjusted_rand_index(clusters: np.ndarray, classes: np.ndarray) -> float:
    """ARI: pair-counting agreement corrected for chance (1.0 identical, ~0 random).

    Computed with exact integer pair counts (Python ints), so it does not
    overflow or lose precision for large corpora.
    """
    return _ari(contingency(clusters, classes))


def _ari(table: np.ndarray) -> float:
    n = int(table.sum())
    rows = table.sum(axis=1)
    cols = table.sum(axis=0)
    # Ordered pairs of distinct documents: together in both / only in one labeling.
    same_both = int((table.astype(np.int64) ** 2).sum()) - n
    same_rows = int((rows.astype(np.int64) ** 2).sum()) - n
    same_cols = int((cols.astype(np.int64) ** 2).sum()) - n
    only_rows = same_rows - same_both
    only_cols = same_cols - same_both
    neither = n * n - n - same_both - only_rows - only_cols
    if only_rows == 0 and only_cols == 0:
        return 1.0  # identical partitions (includes the degenerate ones)
    numerator = 2 * (same_both * neither - only_rows * only_cols)
    denominator = ((same_both + only_cols) * (only_cols + neither)
                   + (same_both + only_rows) * (only_rows + neither))
    return float(numerator / denominator)


def purity(clusters: np.ndarray, classes: np.ndarray) -> float:
    """Share of documents whose class is the majority class of their cluster."""
    return _purity(contingency(clusters, classes))


def _purity(table: np.ndarray) -> float:
    n = table.sum()
    return float(table.max(axis=1).sum() / n) if n else 1.0


def cluster_label_agreement(clusters: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    """``{"nmi", "ari", "purity"}`` of ``clusters`` against reference ``classes``."""
    return table_agreement(contingency(clusters, classes))


def table_agreement(table: np.ndarray) -> dict[str, float]:
    """``{"nmi", "ari", "purity"}`` from a contingency table (int[clusters, classes]).

    Rows and columns without documents are dropped first, so a table counted over all
    cluster and class ids gives what :func:`contingency` of the two labelings gives."""
    table = np.asarray(table)
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    return {"nmi": _nmi(table), "ari": _ari(table), "purity": _purity(table)}
