"""File edges of clustering: embeddings and valid-mask files in, labels, scores and
centroids out, and ``assign``. The stage that runs them in a work directory (or a
``cluster --out`` folder) is :mod:`clusterclip.stages.cluster`.

Every function here may run under ``torchrun``: each rank clusters its
contiguous shard of rows, rank 0 gathers labels and scores and writes every
output (atomically, through :mod:`clusterclip.storage`). Inputs are validated on
every rank before anything is written, so bad input leaves no output behind.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._rows import check_matrix
from clusterclip.clustering.kmeans import (
    DEFAULT_CHUNK_ROWS,
    DEFAULT_METRIC,
    KMeans,
    assign,
    default_fit_sample,
)
from clusterclip.errors import InputError
from clusterclip.storage.arrays import load_npy, save_npy
from clusterclip.storage.atomic import write_json
from clusterclip.storage.outputs import check_output_dir, mark_output, record_written

# The record ``assign --out`` writes beside the labels and scores (inputs, counts).
ASSIGN_RECORD = "assign.json"


def open_embeddings(path: Path) -> np.memmap:
    """The N x d float16/float32 embeddings at ``path``, memory-mapped and checked."""
    X = load_npy(path, "embeddings", mmap=True)
    check_matrix(X, str(path))
    if X.dtype == np.float64:
        raise InputError(f"{path}: expected float16 or float32 embeddings, got float64")
    return X


def open_valid(path: str | os.PathLike[str] | None, n_rows: int) -> np.ndarray | None:
    """The bool valid mask at ``path`` (None when ``path`` is None)."""
    if path is None:
        return None
    v = load_npy(path, "valid mask", mmap=True)
    if v.dtype != np.bool_ or v.shape != (n_rows,):
        raise InputError(f"{path}: expected a bool array of shape ({n_rows},), "
                         f"got {v.dtype} of shape {v.shape}")
    return np.array(v)  # small (N bools); a writable copy


def kmeans_params(n_clusters: int, max_iter: int, n_init: int, tol: float, metric: str,
                  backend: str, seed: int) -> dict[str, Any]:
    """The parameters that change the result (device and chunk size do not)."""
    return {"n_clusters": int(n_clusters), "max_iter": int(max_iter), "n_init": int(n_init),
            "tol": float(tol), "metric": metric, "backend": backend, "seed": int(seed)}


def _fit_shard(X: np.ndarray, valid: np.ndarray | None, params: dict[str, Any],
               device: str, chunk_rows: int, progress: bool) -> tuple[KMeans, dict[str, Any]]:
    """Fit on this rank's shard; returns the estimator and gathered outputs (rank 0)."""
    rank, world = D.rank_and_world()
    start, stop = D.shard_bounds(X.shape[0], rank, world)
    shard_valid = None if valid is None else valid[start:stop]
    km = KMeans(params["n_clusters"], max_iter=params["max_iter"], n_init=params["n_init"],
                tol=params["tol"], metric=params["metric"], seed=params["seed"], device=device,
                chunk_rows=chunk_rows, backend=params["backend"], progress=progress,
                fit_sample=params.get("fit_sample"))
    t0 = time.perf_counter()
    km.fit(X[start:stop], shard_valid)
    seconds = time.perf_counter() - t0
    labels = D.gather_rows(km.labels_)
    scores = D.gather_rows(km.scores_)
    info: dict[str, Any] = {}
    if labels is not None and D.is_main():
        counts = np.bincount(labels[labels >= 0], minlength=params["n_clusters"])
        info = {
            "n_clusters": int(params["n_clusters"]),
            "objective": km.objective_,
            "objective_history": [float(f) for f in km.objective_history_],
            "objective_kind": ("mean cosine similarity" if params["metric"] == "cosine"
                               else "mean squared euclidean distance"),
            "n_iter": int(km.n_iter_),
            "reseeds": [int(r) for r in km.reseeds_],
            "empty_clusters": int(km.empty_clusters_),
            "n_rows": int(X.shape[0]),
            "n_valid": int((labels >= 0).sum()),
            "n_excluded": int((labels < 0).sum()),
            "cluster_size_min": int(counts.min()),
            "cluster_size_median": float(np.median(counts)),
            "cluster_size_max": int(counts.max()),
            "processes": world,
            "seconds": round(seconds, 3),
        }
        if km.fit_sample_rows_ is not None:  # the objective above is every valid row's
            info.update(fit_sample_rows=int(km.fit_sample_rows_),
                        sample_objective=float(km.sample_objective_),
                        sample_seconds=round(float(km.sample_seconds_), 3))
    info["_labels"], info["_scores"] = labels, scores
    return km, info


def _write_outputs(paths: tuple[Path, Path, Path], km: KMeans, info: dict[str, Any]) -> None:
    labels, scores, centroids = paths
    save_npy(labels, info.pop("_labels").astype(np.int32))
    save_npy(scores, info.pop("_scores").astype(np.float32))
    save_npy(centroids, km.cluster_centers_.astype(np.float32))


def check_fit_sample(fit_sample: int | None, n_clusters: int) -> None:
    """Refuse a ``fit_sample`` that is not None, 0 or a number of rows >= ``n_clusters``."""
    if fit_sample is None:
        return
    if isinstance(fit_sample, bool) or not isinstance(fit_sample, (int, np.integer)) \
            or fit_sample < 0 or 0 < fit_sample < n_clusters:
        raise InputError(f"fit_sample {fit_sample}: must be 0 (every row) or a number of "
                         f"rows >= n_clusters ({n_clusters})", params=("fit_sample",))


def resolve_fit_sample(fit_sample: int | None, n_valid: int, n_clusters: int,
                       backend: str = "torch") -> int | None:
    """The rows k-means is fitted on, or None for every valid row.

    ``fit_sample``: None for the automatic choice (:func:`default_fit_sample`), 0 for
    every row, else a number of rows >= K (every row when it is not below ``n_valid``).
    """
    check_fit_sample(fit_sample, n_clusters)
    if fit_sample is None:
        fit_sample = default_fit_sample(n_valid, n_clusters) if backend == "torch" else 0
    if fit_sample == 0 or fit_sample >= n_valid:
        return None
    if backend != "torch":
        raise InputError(f"fit_sample {fit_sample}: works with backend torch only",
                         params=("fit_sample", "backend"))
    return int(fit_sample)


def sample_note(info: dict[str, Any]) -> str:
    """The line of ``cluster`` and ``run`` that says the centroids were fitted on a sample."""
    return (f"           fitted on a seeded sample of {info['fit_sample_rows']:,} rows "
            f"(objective there {info['sample_objective']:.6f}), then every row labelled "
            f"in one pass: the objective above is every valid row's")


def check_k(n_clusters: int) -> None:
    """Refuse a number of clusters that is not an integer >= 1."""
    if not isinstance(n_clusters, (int, np.integer)) or n_clusters < 1:
        raise InputError(f"n_clusters {n_clusters}: must be an integer >= 1",
                         params=("n_clusters",))


def check_kmeans(n_clusters: int, *, max_iter: int, n_init: int, tol: float, metric: str,
                 backend: str, seed: int, device: str, chunk_rows: int,
                 fit_sample: int | None = None) -> None:
    """Refuse (InputError, in the parameters' names) k-means options that no data can
    make right: K, the estimator's parameters and ``fit_sample``."""
    check_k(n_clusters)
    KMeans(n_clusters, max_iter=max_iter, n_init=n_init, tol=tol, metric=metric, seed=seed,
           device=device, chunk_rows=chunk_rows, backend=backend)._check_params()
    check_fit_sample(fit_sample, n_clusters)


def checked_params(X: np.ndarray, valid: np.ndarray | None, emb: Path, n_clusters: int,
                   max_iter: int, n_init: int, tol: float, metric: str, backend: str, seed: int,
                   device: str, chunk_rows: int, fit_sample: int | None = 0
                   ) -> dict[str, Any]:
    """The k-means parameters, checked (also K against the valid rows of ``emb``), with
    ``fit_sample`` resolved (:func:`resolve_fit_sample`; in them only when it samples)."""
    params = kmeans_params(n_clusters, max_iter, n_init, tol, metric, backend, seed)
    KMeans(**params, device=device, chunk_rows=chunk_rows)._check_params()
    n_valid = X.shape[0] if valid is None else int(valid.sum())
    if n_clusters >= n_valid and not n_clusters == n_valid == 1:
        how = "more than" if n_clusters > n_valid else "as many clusters as (one row each)"
        raise InputError(f"n_clusters {n_clusters}: {how} the {n_valid} valid rows of {emb}",
                         params=("n_clusters",))
    rows = resolve_fit_sample(fit_sample, n_valid, n_clusters, backend)
    if rows is not None:
        params["fit_sample"] = rows
    return params


def fit_and_write(paths: tuple[Path, Path, Path], X: np.ndarray, valid: np.ndarray | None,
                  params: dict[str, Any], device: str, chunk_rows: int, progress: bool
                  ) -> dict[str, Any]:
    """Fit on every rank; rank 0 writes the labels, scores and centroids to ``paths`` and
    returns the stage info."""
    km, info = _fit_shard(X, valid, params, device, chunk_rows, progress)
    if not D.is_main():
        return {}
    _write_outputs(paths, km, info)
    return info


def assign_embeddings_file(centroids_path: str | os.PathLike[str],
                           embeddings_path: str | os.PathLike[str],
                           out_dir: str | os.PathLike[str], *,
                           metric: str = DEFAULT_METRIC, device: str = "cpu",
                           chunk_rows: int = DEFAULT_CHUNK_ROWS,
                           valid_path: str | os.PathLike[str] | None = None,
                           names: tuple[str, str]) -> dict[str, Any]:
    """Label new embeddings with existing centroids.

    Writes the labels (int32, -1 where the valid mask is False) and the scores (float32)
    as ``out_dir/`` the file names ``names`` (``assign`` gives the work directory's,
    ``labels.npy`` and ``scores.npy``), plus ``out_dir/assign.json`` (inputs, counts).
    ``out_dir`` must be new, empty or an earlier ``assign --out`` (never a work
    directory's own labels).
    """
    writes = (*names, ASSIGN_RECORD)
    labels_name, scores_name = names
    C = load_npy(centroids_path, "centroids", mmap=True)
    check_matrix(C, str(centroids_path))
    C = np.asarray(C, dtype=np.float32)
    emb = Path(embeddings_path)
    X = open_embeddings(emb)
    if C.shape[1] != X.shape[1]:
        raise InputError(f"{centroids_path}: centroids have {C.shape[1]} dimensions but "
                         f"{emb} has {X.shape[1]}")
    if not np.isfinite(C).all():
        raise InputError(f"{centroids_path}: centroids hold NaN or infinite values")
    valid = open_valid(valid_path, X.shape[0])
    ins = [Path(centroids_path), emb] + ([] if valid_path is None else [Path(valid_path)])
    out = D.on_main(lambda: check_output_dir(
        out_dir, "assign", protected=tuple((p, "the input file", False) for p in ins),
        writes=writes))
    rank, world = D.rank_and_world()
    start, stop = D.shard_bounds(X.shape[0], rank, world)
    labels, scores = assign(X[start:stop], C, metric=metric, device=device,
                            chunk_rows=chunk_rows,
                            valid=None if valid is None else valid[start:stop])
    bad = False
    if valid is None or valid[start:stop].any():
        v = labels >= 0
        bad = not np.isfinite(scores[v]).all()
    if D.Comm().any(bad):
        raise InputError(f"{emb}: embeddings hold NaN or infinite values")
    labels_all = D.gather_rows(labels)
    scores_all = D.gather_rows(scores)
    result: dict[str, Any] = {"labels": str(out / labels_name),
                              "scores": str(out / scores_name)}
    if D.is_main():
        assert labels_all is not None and scores_all is not None
        out.mkdir(parents=True, exist_ok=True)
        mark_output(out, "assign")
        save_npy(out / labels_name, labels_all.astype(np.int32))
        save_npy(out / scores_name, scores_all.astype(np.float32))
        counts = np.bincount(labels_all[labels_all >= 0], minlength=C.shape[0])
        info = {"centroids": str(Path(centroids_path).resolve()),
                "embeddings": str(emb.resolve()), "metric": metric,
                "n_rows": int(X.shape[0]), "n_valid": int((labels_all >= 0).sum()),
                "n_excluded": int((labels_all < 0).sum()), "n_clusters": int(C.shape[0]),
                "empty_clusters": int((counts == 0).sum())}
        write_json(out / ASSIGN_RECORD, info)
        record_written(out, "assign", writes)
        result.update(info)
    return result
