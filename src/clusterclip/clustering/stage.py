"""File edges of the clustering stage: work directory, bare embeddings file, assign.

Every function here may run under ``torchrun``: each rank clusters its
contiguous shard of rows, rank 0 gathers labels and scores and writes every
output (atomically, through :mod:`clusterclip.io`). Inputs are validated on
every rank before anything is written, so bad input leaves no output behind.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._rows import check_matrix
from clusterclip.clustering.kmeans import KMeans, assign, default_fit_sample
from clusterclip.errors import InputError
from clusterclip.io import check_output_dir, load_npy, save_npy, write_json, write_marker
from clusterclip.workdir import Workdir

STAGE = "cluster"
OUTPUTS = ("labels.npy", "scores.npy", "centroids.npy")


def _open_embeddings(path: Path) -> np.memmap:
    X = load_npy(path, "embeddings", mmap=True)
    check_matrix(X, str(path))
    if X.dtype == np.float64:
        raise InputError(f"{path}: expected float16 or float32 embeddings, got float64")
    return X


def _open_valid(path: str | os.PathLike[str] | None, n_rows: int) -> np.ndarray | None:
    """The bool valid mask at ``path`` (None when ``path`` is None)."""
    if path is None:
        return None
    v = load_npy(path, "valid mask", mmap=True)
    if v.dtype != np.bool_ or v.shape != (n_rows,):
        raise InputError(f"{path}: expected a bool array of shape ({n_rows},), "
                         f"got {v.dtype} of shape {v.shape}")
    return np.array(v)  # small (N bools); a writable copy


def _params(n_clusters: int, max_iter: int, n_init: int, tol: float, metric: str, backend: str,
            seed: int) -> dict[str, Any]:
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


def _write_outputs(root: Path, km: KMeans, info: dict[str, Any]) -> None:
    save_npy(root / "labels.npy", info.pop("_labels").astype(np.int32))
    save_npy(root / "scores.npy", info.pop("_scores").astype(np.float32))
    save_npy(root / "centroids.npy", km.cluster_centers_.astype(np.float32))


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


def _check_k(n_clusters: int) -> None:
    if not isinstance(n_clusters, (int, np.integer)) or n_clusters < 1:
        raise InputError(f"n_clusters {n_clusters}: must be an integer >= 1",
                         params=("n_clusters",))


def _checked_params(X: np.ndarray, valid: np.ndarray | None, emb: Path, n_clusters: int,
                    max_iter: int, n_init: int, tol: float, metric: str, backend: str, seed: int,
                    device: str, chunk_rows: int, fit_sample: int | None = 0
                    ) -> dict[str, Any]:
    """The k-means parameters, checked (also K against the valid rows of ``emb``), with
    ``fit_sample`` resolved (:func:`resolve_fit_sample`; in them only when it samples)."""
    params = _params(n_clusters, max_iter, n_init, tol, metric, backend, seed)
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


def cluster_workdir(workdir: Workdir, *, n_clusters: int, max_iter: int = 50, n_init: int = 1,
                    tol: float = 1e-4, metric: str = "cosine", backend: str = "torch",
                    seed: int = 0, device: str = "cpu", chunk_rows: int = 65536,
                    progress: bool = True, fit_sample: int | None = None) -> dict[str, Any]:
    """Cluster ``W/embeddings.npy`` (rows where ``W/valid.npy`` is True; all if absent).

    Writes ``W/labels.npy`` (int32, -1 for excluded rows), ``W/scores.npy``
    (float32), ``W/centroids.npy`` (float32, K x d) and the stage ``cluster`` in
    the manifest (objective per iteration in its info). Skips the work when the
    stage is current (same ``embed`` stage or embeddings bytes, same parameters).
    Returns the stage info plus ``skipped`` and the output paths. ``fit_sample``: see
    :func:`resolve_fit_sample` (None: the automatic choice).
    """
    _check_k(n_clusters)
    with workdir.locked():  # before reading: no other command replaces the inputs meanwhile
        # the stage that writes them finished and is current, else the stage to rerun
        workdir.upstream(["embeddings.npy"], ["valid.npy"])
        emb = workdir.path("embeddings.npy")
        X = _open_embeddings(emb)
        valid_file = workdir.path("valid.npy")
        valid = _open_valid(valid_file if valid_file.exists() else None, X.shape[0])
        params = _checked_params(X, valid, emb, n_clusters, max_iter, n_init, tol, metric,
                                 backend, seed, device, chunk_rows, fit_sample)
        result = workdir.run_stage(
            STAGE, key=params, params={**params, "device": device, "chunk_rows": chunk_rows},
            reads=["embeddings.npy"], maybe_reads=["valid.npy"], outputs=OUTPUTS,
            work=lambda run: _fit_and_write(run.workdir.root, X, valid, params, device,
                                            chunk_rows, progress))
    return {**result, **{name[:-4]: str(workdir.path(name)) for name in OUTPUTS}}


def _fit_and_write(root: Path, X: np.ndarray, valid: np.ndarray | None,
                   params: dict[str, Any], device: str, chunk_rows: int, progress: bool
                   ) -> dict[str, Any]:
    """Fit on every rank; rank 0 writes the outputs and returns the stage info."""
    km, info = _fit_shard(X, valid, params, device, chunk_rows, progress)
    if not D.is_main():
        return {}
    _write_outputs(root, km, info)
    return info


def cluster_embeddings_file(path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                            n_clusters: int, max_iter: int = 50, n_init: int = 1,
                            tol: float = 1e-4, metric: str = "cosine", backend: str = "torch",
                            seed: int = 0, device: str = "cpu", chunk_rows: int = 65536,
                            valid_path: str | os.PathLike[str] | None = None,
                            progress: bool = True, fit_sample: int | None = None
                            ) -> dict[str, Any]:
    """Cluster a bare ``.npy`` embeddings file; outputs and a manifest go to ``out_dir``.

    Same outputs and caching as :func:`cluster_workdir` (fingerprint: the
    embeddings file's bytes, the optional valid mask's bytes and the
    parameters). ``out_dir`` must be new, empty or an earlier ``cluster --out``; a
    folder this call creates is removed again when clustering fails.
    """
    _check_k(n_clusters)
    emb = Path(path)
    X = _open_embeddings(emb)
    valid = _open_valid(valid_path, X.shape[0])
    params = _checked_params(X, valid, emb, n_clusters, max_iter, n_init, tol, metric,
                             backend, seed, device, chunk_rows, fit_sample)
    out = check_output_dir(out_dir, STAGE, protected=((emb, "the input file", False),)
                           + (() if valid_path is None
                              else ((Path(valid_path), "the input file", False),)))
    created = not out.exists()
    try:
        wd = Workdir(out)
        if D.is_main():
            write_marker(out, STAGE)
        result = wd.run_stage(
            STAGE, key=params, inputs=[emb] + ([] if valid_path is None else [valid_path]),
            params={**params, "device": device, "chunk_rows": chunk_rows,
                    "embeddings": str(emb.resolve())},
            outputs=OUTPUTS, work=lambda run: _fit_and_write(out, X, valid, params, device,
                                                             chunk_rows, progress))
    except BaseException:
        if created and D.is_main():  # a folder this call made, holding no output yet
            shutil.rmtree(out, ignore_errors=True)
        raise
    return {**result, **{name[:-4]: str(out / name) for name in OUTPUTS}}


def assign_embeddings_file(centroids_path: str | os.PathLike[str],
                           embeddings_path: str | os.PathLike[str],
                           out_dir: str | os.PathLike[str], *, metric: str = "cosine",
                           device: str = "cpu", chunk_rows: int = 65536,
                           valid_path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Label new embeddings with existing centroids.

    Writes ``out_dir/labels.npy`` (int32, -1 where the valid mask is False) and
    ``out_dir/scores.npy`` (float32) plus ``out_dir/assign.json`` (inputs, counts).
    ``out_dir`` must be new, empty or an earlier ``assign --out`` (never a work
    directory's own labels).
    """
    C = load_npy(centroids_path, "centroids", mmap=True)
    check_matrix(C, str(centroids_path))
    C = np.asarray(C, dtype=np.float32)
    emb = Path(embeddings_path)
    X = _open_embeddings(emb)
    if C.shape[1] != X.shape[1]:
        raise InputError(f"{centroids_path}: centroids have {C.shape[1]} dimensions but "
                         f"{emb} has {X.shape[1]}")
    if not np.isfinite(C).all():
        raise InputError(f"{centroids_path}: centroids hold NaN or infinite values")
    valid = _open_valid(valid_path, X.shape[0])
    ins = [Path(centroids_path), emb] + ([] if valid_path is None else [Path(valid_path)])
    out = D.on_main(lambda: check_output_dir(
        out_dir, "assign", protected=tuple((p, "the input file", False) for p in ins)))
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
    result: dict[str, Any] = {"labels": str(out / "labels.npy"),
                              "scores": str(out / "scores.npy")}
    if D.is_main():
        assert labels_all is not None and scores_all is not None
        out.mkdir(parents=True, exist_ok=True)
        write_marker(out, "assign")
        save_npy(out / "labels.npy", labels_all.astype(np.int32))
        save_npy(out / "scores.npy", scores_all.astype(np.float32))
        counts = np.bincount(labels_all[labels_all >= 0], minlength=C.shape[0])
        info = {"centroids": str(Path(centroids_path).resolve()),
                "embeddings": str(emb.resolve()), "metric": metric,
                "n_rows": int(X.shape[0]), "n_valid": int((labels_all >= 0).sum()),
                "n_excluded": int((labels_all < 0).sum()), "n_clusters": int(C.shape[0]),
                "empty_clusters": int((counts == 0).sum())}
        write_json(out / "assign.json", info)
        result.update(info)
    return result


SWEEP = "sweep"
SWEEP_FILES = {"csv": "sweep.csv", "md": "sweep.md", "png": "sweep.png", "json": "sweep.json"}


def sweep_workdir(workdir: Workdir, *, ks: list[int], sample_size: int | None = None,
                  silhouette_sample: int | None = None, max_iter: int = 50, n_init: int = 1,
                  tol: float = 1e-4, metric: str = "cosine", backend: str = "torch",
                  seed: int = 0, device: str = "cpu", chunk_rows: int = 65536,
                  progress: bool = True) -> dict[str, Any]:
    """Fit each K of ``ks`` on one seeded sample of ``W/embeddings.npy`` (valid rows) and
    write ``W/sweep/`` (sweep.csv, sweep.md, sweep.png, sweep.json); see
    :mod:`clusterclip.clustering.sweep`. ``sample_size``: rows in the sample (default
    ``min(valid rows, 50,000)``); ``silhouette_sample``: rows the silhouette is computed
    on (default 10,000). A stage: cached under its parameters and the embed stage.
    Returns the stage info (``rows``, ``suggested_k``, ``reason``, ...) plus ``skipped``.
    """
    from clusterclip.clustering import sweep as S

    if D.rank_and_world()[1] > 1:
        raise InputError("the sweep runs in one process; start it without torchrun")
    if metric != "cosine":
        raise InputError(f"the sweep measures cosine clusters; got metric {metric}",
                         params=("metric",))
    sample_size = S.DEFAULT_SAMPLE if sample_size is None else sample_size
    silhouette_sample = S.SILHOUETTE_SAMPLE if silhouette_sample is None else silhouette_sample
    if sample_size < 3:
        raise InputError(f"sample_size {sample_size}: must be at least 3",
                         params=("sample_size",))
    if silhouette_sample < 3:
        raise InputError(f"silhouette_sample {silhouette_sample}: must be at least 3",
                         params=("silhouette_sample",))
    ks = sorted(set(int(k) for k in ks))
    with workdir.locked():
        workdir.upstream(["embeddings.npy"], ["valid.npy"])  # else: the stage to rerun
        emb = workdir.path("embeddings.npy")
        X = _open_embeddings(emb)
        valid_file = workdir.path("valid.npy")
        valid = _open_valid(valid_file if valid_file.exists() else None, X.shape[0])
        valid = np.ones(X.shape[0], dtype=bool) if valid is None else valid
        n_valid = int(valid.sum())
        _check_ks(ks, sample_size, n_valid, emb)
        params = {"ks": ks, "sample_size": int(sample_size),
                  "silhouette_sample": int(silhouette_sample),
                  **_params(ks[0], max_iter, n_init, tol, metric, backend, seed)}
        del params["n_clusters"]
        KMeans(ks[0], max_iter=max_iter, n_init=n_init, tol=tol, metric=metric, seed=seed,
               device=device, chunk_rows=chunk_rows, backend=backend)._check_params()

        def work(run: Any) -> dict[str, Any]:
            rows_idx = S.sample_rows(valid, sample_size, seed)
            Xs = np.asarray(X[rows_idx], dtype=np.float32)
            if not np.isfinite(Xs).all():
                bad = int(rows_idx[np.flatnonzero(~np.isfinite(Xs).all(axis=1))[0]])
                raise InputError(f"{emb}: row {bad} holds NaN or infinite values")
            t0 = time.perf_counter()
            rows, seconds = S.run_sweep(Xs, ks, max_iter=max_iter, n_init=n_init, tol=tol,
                                        backend=backend, seed=seed, device=device,
                                        chunk_rows=chunk_rows,
                                        silhouette_sample=silhouette_sample, progress=progress)
            k, reason = S.suggest_k(rows)
            info = {"rows": rows, "suggested_k": k, "reason": reason, "rule": S.RULE,
                    "sample_rows": int(rows_idx.size), "valid_rows": n_valid,
                    "silhouette_rows": min(silhouette_sample, int(rows_idx.size)),
                    "seed": seed, "command": f"clusterclip cluster --workdir {workdir.root} "
                                             f"--clusters {k}"}
            _write_sweep(workdir, info)
            return {**info, "fit_seconds": [round(s, 3) for s in seconds],
                    "seconds": round(time.perf_counter() - t0, 3)}

        result = workdir.run_stage(SWEEP, key=params, reads=["embeddings.npy"],
                                   maybe_reads=["valid.npy"], outputs=[SWEEP], work=work)
    return {**result, **{name: str(workdir.path(SWEEP, f)) for name, f in SWEEP_FILES.items()}}


def _check_ks(ks: list[int], sample_size: int, n_valid: int, emb: Path) -> None:
    """Refuse a K of the sweep below 2 or not below its sample of rows."""
    n_sample = min(sample_size, n_valid)
    for k in ks:
        if k < 2:
            raise InputError(f"ks {k}: a sweep needs every K >= 2 (the silhouette "
                             "compares clusters)", params=("ks",))
        if k >= n_sample:
            raise InputError(f"ks {k}: not below the sample of {n_sample} rows "
                             f"(sample_size {sample_size}, {n_valid} valid rows in {emb})",
                             params=("ks", "sample_size"))


def _write_sweep(workdir: Workdir, info: dict[str, Any]) -> None:
    """``W/sweep/``: the sweep's json, csv table, markdown report and plot, replaced whole."""
    from clusterclip.clustering import sweep as S
    from clusterclip.io import atomic_output_dir

    with atomic_output_dir(workdir.path(SWEEP), SWEEP) as tmp:
        write_json(tmp / SWEEP_FILES["json"], info)
        (tmp / SWEEP_FILES["csv"]).write_text(S.table_csv(info["rows"]), encoding="utf-8")
        (tmp / SWEEP_FILES["md"]).write_text(S.render_markdown(info, SWEEP_FILES["png"]),
                                             encoding="utf-8")
        S.plot_sweep(info, tmp / SWEEP_FILES["png"])
