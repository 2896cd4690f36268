"""The FAISS backend of :class:`~clusterclip.clustering.KMeans` (``faiss.Kmeans``).

FAISS trains on an in-memory float32 matrix, so the valid rows are read (in
chunks) into one array first. Labels and scores come from the same chunked
assignment as the torch backend, so both backends report them identically.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._rows import RowReader
from clusterclip.errors import InputError

if TYPE_CHECKING:
    from clusterclip.clustering.kmeans import KMeans


def import_faiss():  # noqa: ANN201 - the module type is faiss's own
    """Import faiss or raise InputError saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise InputError("k-means: backend 'faiss' requested but faiss is not installed "
                         "(pip install faiss-cpu, or use --backend torch)") from None
    return faiss


def fit_faiss(est: KMeans, X: np.ndarray, valid: np.ndarray | None) -> KMeans:
    """Fit ``est`` with ``faiss.Kmeans`` (spherical in cosine mode); single process only."""
    faiss = import_faiss()
    from clusterclip.clustering.kmeans import assign

    if D.rank_and_world()[1] > 1:
        raise InputError("k-means: backend 'faiss' runs in one process; use --backend torch "
                         "under torchrun")
    if not str(est.device).startswith("cpu"):
        raise InputError(f"k-means: backend 'faiss' runs on the CPU, not {est.device!r}")
    n, d = X.shape
    rows = []
    for start, chunk in RowReader(X, est.chunk_rows):
        part = np.asarray(chunk, dtype=np.float32)
        if valid is not None:
            part = part[valid[start:start + len(chunk)]]
        rows.append(np.array(part, dtype=np.float32, copy=True))
    x = np.ascontiguousarray(np.concatenate(rows))
    if not np.isfinite(x).all():
        raise InputError("embeddings: some valid rows hold NaN or infinite values")
    if est.metric == "cosine":
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    K = int(est.n_clusters)
    t0 = time.perf_counter()
    km = faiss.Kmeans(d, K, niter=int(est.max_iter), nredo=int(est.n_init),
                      spherical=est.metric == "cosine", seed=int(est.seed), verbose=False,
                      # use every row, never FAISS's default subsample of 256 per centroid
                      max_points_per_centroid=int(np.ceil(len(x) / K)) + 1,
                      min_points_per_centroid=1)
    if isinstance(est.init, str):
        km.train(x)
    else:
        km.train(x, init_centroids=np.asarray(est.init, dtype=np.float32))
    est.init_seconds_ = est.init_cpu_seconds_ = 0.0
    est.train_seconds_ = time.perf_counter() - t0
    centroids = np.asarray(km.centroids, dtype=np.float32).reshape(K, d)
    labels, scores = assign(X, centroids, metric=est.metric, device="cpu",
                            chunk_rows=est.chunk_rows, valid=valid)
    v = labels >= 0
    counts = np.bincount(labels[v], minlength=K)
    if est.metric == "cosine":
        objective = float(scores[v].astype(np.float64).mean())
        inertia = float((2.0 - 2.0 * scores[v].astype(np.float64)).clip(0).sum())
    else:
        inertia = float((scores[v].astype(np.float64) ** 2).sum())
        objective = inertia / len(x)
    # FAISS records one objective (a sum) per iteration of every restart; keep the last run's.
    obj = list(np.asarray(km.obj, dtype=np.float64))
    history = [float(o) / len(x) for o in obj[-int(est.max_iter):]] if obj else []
    est.cluster_centers_ = centroids
    est.labels_ = labels
    est.scores_ = scores
    est.objective_history_ = history + [objective]
    est.objective_ = objective
    est.inertia_ = inertia
    est.n_iter_ = int(est.max_iter)
    est.reseeds_ = []
    est.empty_clusters_ = int((counts == 0).sum())
    return est
