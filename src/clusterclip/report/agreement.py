"""Agreement of two embeddings' clusterings, without labels.

Whether a cheap embedder (``fast``, tuned or not, or a Model2Vec model) clusters a corpus
the way MiniLM does can be checked on any corpus, labelled or not: K-means of each set of
vectors (same K, same seeds), then the NMI between the two labelings. 1.0: the same
partition; near 0: unrelated partitions (compare with the same score for two K-means
seeds of the reference alone, the ceiling set by K-means' own instability).
"""

from __future__ import annotations

import numpy as np

from clusterclip.clustering import KMeans
from clusterclip.clustering.kmeans import DEFAULT_MAX_ITER
from clusterclip.report.metrics import normalized_mutual_info


def clustering_agreement(vectors: np.ndarray, reference: np.ndarray, n_clusters: int, *,
                         seeds: tuple[int, ...] = (0, 1, 2),
                         max_iter: int = DEFAULT_MAX_ITER
                         ) -> dict[str, float]:
    """NMI between K-means of ``vectors`` and K-means of ``reference`` (both n x d, rows
    of the same documents; any dimensions), over ``seeds``.

    Returns ``nmi`` (mean over seeds, each pairing the two fits of one seed), ``nmi_min``,
    ``nmi_max`` and ``reference_self`` (mean NMI between the reference's fits of
    consecutive seeds: how well K-means agrees with itself; nan for a single seed).
    """
    vectors, reference = np.asarray(vectors, np.float32), np.asarray(reference, np.float32)
    if len(vectors) != len(reference):
        raise ValueError(f"vectors and reference must have the same rows, got "
                         f"{len(vectors)} and {len(reference)}")
    if not seeds:
        raise ValueError("seeds must not be empty")

    def labels(x: np.ndarray, seed: int) -> np.ndarray:
        return KMeans(n_clusters=n_clusters, max_iter=max_iter, seed=seed).fit(x).labels_

    ref = [labels(reference, s) for s in seeds]
    scores = [normalized_mutual_info(labels(vectors, s), r) for s, r in zip(seeds, ref,
                                                                              strict=True)]
    self_scores = [normalized_mutual_info(a, b) for a, b in zip(ref, ref[1:], strict=False)]
    return {"nmi": float(np.mean(scores)), "nmi_min": float(min(scores)),
            "nmi_max": float(max(scores)),
            "reference_self": float(np.mean(self_scores)) if self_scores else float("nan")}
