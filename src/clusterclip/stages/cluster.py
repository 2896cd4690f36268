"""The ``cluster`` stage: ``W/embeddings.npy`` -> ``W/labels.npy``, ``scores.npy``,
``centroids.npy``; the same fit into a ``cluster --out`` folder from a bare embeddings
file (:func:`run_file`); and the ``sweep`` stage over several K (``W/sweep/``).

The k-means itself is :class:`clusterclip.clustering.KMeans` (arrays in, arrays out) and
its file edges :mod:`clusterclip.clustering.files`; this module only runs them through
:meth:`clusterclip.workdir.Workdir.run_stage`.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering import files as F
from clusterclip.clustering.kmeans import KMeansSettings
from clusterclip.errors import InputError
from clusterclip.limits import MAX_ROWS, check_ranges, ranged
from clusterclip.storage.atomic import write_json
from clusterclip.storage.outputs import check_output_dir, mark_output, record_written
from clusterclip.workdir import (
    CENTROIDS,
    EMBEDDINGS,
    LABELS,
    MANIFEST,
    SCORES,
    SWEEP,
    VALID,
    Workdir,
)

STAGE = "cluster"
OUTPUTS = (LABELS, SCORES, CENTROIDS)
SWEEP_FILES = {"csv": "sweep.csv", "md": "sweep.md", "png": "sweep.png", "json": "sweep.json"}


@dataclass(frozen=True, kw_only=True)
class KMeansOptions(KMeansSettings):
    """The k-means settings, declared once in
    :class:`clusterclip.clustering.kmeans.KMeansSettings` (``.kmeans()``: the estimator's
    keywords), and ``progress``."""

    progress: bool = True


@dataclass(frozen=True, kw_only=True)
class ClusterOptions(KMeansOptions):
    """What the ``cluster`` stage fits: K, the k-means knobs and ``fit_sample`` (None: the
    automatic choice, 0: every row; :func:`clusterclip.clustering.files.resolve_fit_sample`).
    Checked when made (InputError naming the parameter)."""

    n_clusters: int = ranged(1, MAX_ROWS)
    fit_sample: int | None = ranged(0, MAX_ROWS, default=None)

    def __post_init__(self) -> None:
        check_ranges(self)
        F.check_kmeans(self.n_clusters, fit_sample=self.fit_sample, **self.kmeans())


@dataclass(frozen=True, kw_only=True)
class SweepOptions(KMeansOptions):
    """The ``sweep`` stage: each K of ``ks`` on one seeded sample of ``sample_size`` valid
    rows (None: ``min(valid rows, 50,000)``), silhouette on ``silhouette_sample`` rows
    (None: 10,000); see :mod:`clusterclip.clustering.sweep`."""

    ks: tuple[int, ...] = ranged(1, MAX_ROWS, each=True)
    sample_size: int | None = ranged(3, MAX_ROWS, default=None)
    silhouette_sample: int | None = ranged(3, MAX_ROWS, default=None)

    def __post_init__(self) -> None:
        from clusterclip.clustering import sweep as S

        check_ranges(self)
        if self.metric != "cosine":
            raise InputError(f"the sweep measures cosine clusters; got metric {self.metric}",
                             params=("metric",))
        object.__setattr__(self, "ks", tuple(sorted(set(int(k) for k in self.ks))))
        if self.sample_size is None:
            object.__setattr__(self, "sample_size", S.DEFAULT_SAMPLE)
        if self.silhouette_sample is None:
            object.__setattr__(self, "silhouette_sample", S.SILHOUETTE_SAMPLE)
        F.check_kmeans(2, **self.kmeans())  # K: checked against the sample when run


def _read(w: Workdir) -> tuple[Path, np.ndarray, np.ndarray | None]:
    """``W/embeddings.npy`` (memory-mapped) and the valid mask (None without one), after
    checking that the stage that wrote them finished and is current (else the stage to
    rerun). Under the lock."""
    w.upstream([EMBEDDINGS], [VALID])
    emb = w.path(EMBEDDINGS)
    X = F.open_embeddings(emb)
    return emb, X, w.valid(X.shape[0])


def run(w: Workdir, options: ClusterOptions) -> dict[str, Any]:
    """Cluster ``W/embeddings.npy`` (rows where ``W/valid.npy`` is True; all if absent).

    Writes ``W/labels.npy`` (int32, -1 for excluded rows), ``W/scores.npy``
    (float32), ``W/centroids.npy`` (float32, K x d) and the stage ``cluster`` in
    the manifest (objective per iteration in its info). Skips the work when the
    stage is current (same ``embed`` stage or embeddings bytes, same parameters).
    Returns the stage info plus ``skipped`` and the output paths.
    """
    o = options
    with w.locked():  # before reading: no other command replaces the inputs meanwhile
        emb, X, valid = _read(w)
        params = F.checked_params(X, valid, emb, o.n_clusters, **o.kmeans(),
                                  fit_sample=o.fit_sample)
        paths = tuple(w.path(name) for name in OUTPUTS)
        result = w.run_stage(
            STAGE, key=params, params={**params, "device": o.device, "chunk_rows": o.chunk_rows},
            reads=[EMBEDDINGS], maybe_reads=[VALID], outputs=OUTPUTS,
            work=lambda run: F.fit_and_write(paths, X, valid, params, o.device, o.chunk_rows,
                                             o.progress))
    return {**result, **{name[:-4]: str(w.path(name)) for name in OUTPUTS}}


def run_file(path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
             options: ClusterOptions, valid_path: str | os.PathLike[str] | None = None
             ) -> dict[str, Any]:
    """Cluster a bare ``.npy`` embeddings file; outputs and a manifest go to ``out_dir``.

    Same outputs and caching as :func:`run` (fingerprint: the embeddings file's bytes,
    the optional valid mask's bytes and the parameters). ``out_dir`` must be new, empty
    or an earlier ``cluster --out``; a folder this call creates is removed again when
    clustering fails.
    """
    o = options
    emb = Path(path)
    X = F.open_embeddings(emb)
    valid = F.open_valid(valid_path, X.shape[0])
    params = F.checked_params(X, valid, emb, o.n_clusters, **o.kmeans(),
                              fit_sample=o.fit_sample)
    out = check_output_dir(out_dir, STAGE, protected=((emb, "the input file", False),)
                           + (() if valid_path is None
                              else ((Path(valid_path), "the input file", False),)),
                           writes=(*OUTPUTS, MANIFEST))
    created = not out.exists()
    paths = tuple(out / name for name in OUTPUTS)
    try:
        wd = Workdir(out)
        if D.is_main():
            mark_output(out, STAGE)
        result = wd.run_stage(
            STAGE, key=params, inputs=[emb] + ([] if valid_path is None else [valid_path]),
            params={**params, "device": o.device, "chunk_rows": o.chunk_rows,
                    "embeddings": str(emb.resolve())},
            outputs=OUTPUTS, work=lambda run: F.fit_and_write(
                paths, X, valid, params, o.device, o.chunk_rows, o.progress))
        if D.is_main():
            record_written(out, STAGE, (*OUTPUTS, MANIFEST))
    except BaseException:
        if created and D.is_main():  # a folder this call made, holding no output yet
            shutil.rmtree(out, ignore_errors=True)
        raise
    return {**result, **{name[:-4]: str(out / name) for name in OUTPUTS}}


def sweep(w: Workdir, options: SweepOptions) -> dict[str, Any]:
    """Fit each K of ``options.ks`` on one seeded sample of ``W/embeddings.npy`` (valid
    rows) and write ``W/sweep/`` (sweep.csv, sweep.md, sweep.png, sweep.json); see
    :mod:`clusterclip.clustering.sweep`. A stage: cached under its parameters and the
    embed stage. Returns the stage info (``rows``, ``suggested_k``, ``reason``, ...) plus
    ``skipped``.
    """
    from clusterclip.clustering import sweep as S

    if D.rank_and_world()[1] > 1:
        raise InputError("the sweep runs in one process; start it without torchrun")
    o = options
    with w.locked():
        emb, X, valid = _read(w)
        valid = np.ones(X.shape[0], dtype=bool) if valid is None else valid
        n_valid = int(valid.sum())
        _check_ks(list(o.ks), o.sample_size, n_valid, emb)
        params = {"ks": list(o.ks), "sample_size": int(o.sample_size),
                  "silhouette_sample": int(o.silhouette_sample),
                  **F.kmeans_params(o.ks[0], o.max_iter, o.n_init, o.tol, o.metric, o.backend,
                                    o.seed)}
        del params["n_clusters"]

        def work(run: Any) -> dict[str, Any]:
            rows_idx = S.sample_rows(valid, o.sample_size, o.seed)
            Xs = np.asarray(X[rows_idx], dtype=np.float32)
            if not np.isfinite(Xs).all():
                bad = int(rows_idx[np.flatnonzero(~np.isfinite(Xs).all(axis=1))[0]])
                raise InputError(f"{emb}: row {bad} holds NaN or infinite values")
            t0 = time.perf_counter()
            kw = {k: v for k, v in o.kmeans().items() if k != "metric"}
            rows, seconds = S.run_sweep(Xs, list(o.ks), silhouette_sample=o.silhouette_sample,
                                        progress=o.progress, **kw)
            k, reason = S.suggest_k(rows)
            info = {"rows": rows, "suggested_k": k, "reason": reason, "rule": S.RULE,
                    "sample_rows": int(rows_idx.size), "valid_rows": n_valid,
                    "silhouette_rows": min(o.silhouette_sample, int(rows_idx.size)),
                    "seed": o.seed, "command": f"clusterclip cluster --workdir {w.root} "
                                               f"--clusters {k}"}
            _write_sweep(w, info)
            return {**info, "fit_seconds": [round(s, 3) for s in seconds],
                    "seconds": round(time.perf_counter() - t0, 3)}

        result = w.run_stage(SWEEP, key=params, reads=[EMBEDDINGS], maybe_reads=[VALID],
                             outputs=[SWEEP], work=work)
    return {**result, **{name: str(w.path(SWEEP, f)) for name, f in SWEEP_FILES.items()}}


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


def _write_sweep(w: Workdir, info: dict[str, Any]) -> None:
    """``W/sweep/``: the sweep's json, csv table, markdown report and plot, replaced whole."""
    from clusterclip.clustering import sweep as S
    from clusterclip.storage.outputs import atomic_output_dir

    with atomic_output_dir(w.path(SWEEP), SWEEP) as tmp:
        write_json(tmp / SWEEP_FILES["json"], info)
        (tmp / SWEEP_FILES["csv"]).write_text(S.table_csv(info["rows"]), encoding="utf-8")
        (tmp / SWEEP_FILES["md"]).write_text(S.render_markdown(info, SWEEP_FILES["png"]),
                                             encoding="utf-8")
        S.plot_sweep(info, tmp / SWEEP_FILES["png"])
