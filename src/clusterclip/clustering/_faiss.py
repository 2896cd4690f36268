"""The FAISS backend of :class:`~clusterclip.clustering.KMeans` (``faiss.Kmeans``).

FAISS trains on an in-memory float32 matrix, so the valid rows are read (in
chunks) into one array first. Labels and scores come from the same chunked
assignment as the torch backend, so both backends report them identically.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._passes import Fit, assign
from clusterclip.clustering._rows import RowReader
from clusterclip.errors import InputError


def import_faiss():  # noqa: ANN201 - the module type is faiss's own
    """Import faiss or raise InputError saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise InputError("k-means: backend 'faiss' requested but faiss is not installed "
                         "(pip install faiss-cpu, or use backend torch)",
                         params=("backend",)) from None
    return faiss


def fit_faiss(X: np.ndarray, valid: np.ndarray | None, *, n_clusters: int, max_iter: int,
              n_init: int, metric: str, seed: int, device: str, chunk_rows: int,
              init: Any) -> Fit:
    """Fit with ``faiss.Kmeans`` (spherical in cosine mode); single process only."""
    faiss = import_faiss()
    if D.rank_and_world()[1] > 1:
        raise InputError("k-means: backend faiss runs in one process; use backend torch "
                         "under torchrun", params=("backend",))
    if not str(device).startswith("cpu"):
        raise InputError(f"k-means: backend 'faiss' runs on the CPU, not device={device!r}",
                         params=("backend", "device"))
    n, d = X.shape
    rows = []
    for start, chunk in RowReader(X, chunk_rows):
        part = np.asarray(chunk, dtype=np.float32)
        if valid is not None:
            part = part[valid[start:start + len(chunk)]]
        rows.append(np.array(part, dtype=np.float32, copy=True))
    x = np.ascontiguousarray(np.concatenate(rows))
    if not np.isfinite(x).all():
        raise InputError("embeddings: some valid rows hold NaN or infinite values")
    if metric == "cosine":
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    K = int(n_clusters)
    t0 = time.perf_counter()
    km = faiss.Kmeans(d, K, niter=int(max_iter), nredo=int(n_init),
                      spherical=metric == "cosine", seed=int(seed), verbose=False,
                      # use every row, never FAISS's default subsample of 256 per centroid
                      max_points_per_centroid=int(np.ceil(len(x) / K)) + 1,
                      min_points_per_centroid=1)
    if isinstance(init, str):
        km.train(x)
    else:
        km.train(x, init_centroids=np.asarray(init, dtype=np.float32))
    train_seconds = time.perf_counter() - t0
    centroids = np.asarray(km.centroids, dtype=np.float32).reshape(K, d)
    labels, scores = assign(X, centroids, metric=metric, device="cpu", chunk_rows=chunk_rows,
                            valid=valid)
    v = labels >= 0
    counts = np.bincount(labels[v], minlength=K)
    if metric == "cosine":
        objective = float(scores[v].astype(np.float64).mean())
        inertia = float((2.0 - 2.0 * scores[v].astype(np.float64)).clip(0).sum())
    else:
        inertia = float((scores[v].astype(np.float64) ** 2).sum())
        objective = inertia / len(x)
    # FAISS records one objective (a sum) per iteration of every restart; keep the last run's.
    obj = list(np.asarray(km.obj, dtype=np.float64))
    history = [float(o) / len(x) for o in obj[-int(max_iter):]] if obj else []
    return Fit(centroids=centroids, labels=labels, scores=scores,
               history=history + [objective], objective=objective, inertia=inertia,
               n_iter=int(max_iter), reseeds=[], empty=int((counts == 0).sum()),
               train_seconds=train_seconds)
