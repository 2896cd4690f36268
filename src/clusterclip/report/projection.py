"""The map: a 2D projection of a seeded sample of the documents (stage ``map``, ``W/map/``).

``W/map/`` holds ``sample.npy`` (int64[n] document indices, ascending) and
``coords.npy`` (float32[n, 2]). The sample is drawn from the documents with
text (``W/valid.npy``; all rows without it), so the map does not depend on
the clustering: reclustering with another K reuses it. The stage is keyed by
the embeddings, the sample size, the seed and the projection's parameters, so
a rerun of ``report`` costs nothing.

The projection is umap-learn's UMAP (deterministic: ``random_state`` set, one
thread) on the first :data:`PCA_DIMS` principal components of the
L2-normalised embeddings, with the euclidean metric: on unit vectors it
orders neighbours as cosine does. The PCA step keeps the neighbour search's cost
independent of the model's dimension; at 10^5 documents the single-threaded layout
dominates either way (BENCHMARKS.md, "Report page and map": about 3.5 CPU-minutes with numba's
first use, over the 2-minute target).
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

STAGE = "map"
DIR = "map"
DEFAULT_MAP_SAMPLE = 100_000
PCA_DIMS = 50
_ROWS_PER_BLOCK = 65_536  # embeddings read (and PCA accumulated) this many rows at a time


def sample_rows(valid: np.ndarray | None, num_docs: int, size: int, seed: int) -> np.ndarray:
    """Ascending int64 indices of at most ``size`` documents, drawn without replacement
    with ``seed`` among those where ``valid`` (bool[N]; None: all ``num_docs``) is True."""
    candidates = (np.flatnonzero(np.asarray(valid)) if valid is not None
                  else np.arange(num_docs, dtype=np.int64))
    if candidates.size <= size:
        return candidates.astype(np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(candidates, size=size, replace=False)).astype(np.int64)


def principal_components(X: np.ndarray, dims: int) -> np.ndarray:
    """``X`` (float[n, d]) projected on its first ``dims`` principal components, float32.

    From the d x d covariance (accumulated in float64 blocks), so the result does
    not depend on how the rows are split; each component's sign is fixed (its
    largest coefficient positive), so the same input gives the same output.
    """
    n, d = X.shape
    if d <= dims or n < 2:
        return np.asarray(X, dtype=np.float32)
    mean = np.zeros(d)
    cov = np.zeros((d, d))
    for start in range(0, n, _ROWS_PER_BLOCK):
        mean += np.asarray(X[start:start + _ROWS_PER_BLOCK], dtype=np.float64).sum(axis=0)
    mean /= n
    for start in range(0, n, _ROWS_PER_BLOCK):
        block = np.asarray(X[start:start + _ROWS_PER_BLOCK], dtype=np.float64) - mean
        cov += block.T @ block
    _, vectors = np.linalg.eigh(cov)  # ascending eigenvalues
    top = vectors[:, ::-1][:, :dims]
    top *= np.sign(top[np.argmax(np.abs(top), axis=0), np.arange(dims)])
    return ((np.asarray(X, dtype=np.float64) - mean) @ top).astype(np.float32)


@dataclass(frozen=True)
class MapParams:
    """The projection's parameters (all part of the stage's key).

    ``n_epochs``: UMAP's layout epochs; None is umap-learn's own default (500 below
    10,000 points, 200 above). ``init``: the layout's start, ``"pca"`` (the first two
    principal components: a linear scan) or ``"spectral"`` (umap-learn's default: an
    eigensolve on the neighbour graph). One thread (``n_jobs=1``): umap-learn is
    deterministic only then.
    """

    method: str = "umap"
    pca_dims: int = PCA_DIMS
    n_neighbors: int = 15
    min_dist: float = 0.1
    init: str = "pca"
    n_epochs: int | None = None


def project(X: np.ndarray, seed: int, params: MapParams = MapParams(),
            progress: bool = False) -> np.ndarray:
    """float32[n, 2] UMAP coordinates of the rows of ``X`` (see the module docstring);
    ``progress``: a bar over the layout's epochs on stderr."""
    if params.method != "umap":
        raise InputError(f"map method must be 'umap', got {params.method!r}")
    n = X.shape[0]
    if n < 4:  # too few points for a neighbour graph: a line, in order
        return np.stack([np.arange(n, dtype=np.float32), np.zeros(n, np.float32)], axis=1)
    import umap

    Z = principal_components(X, params.pca_dims)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # umap's and numba's notes on threads and sparsity
        reducer = umap.UMAP(
            n_components=2, random_state=seed, n_jobs=1, metric="euclidean",
            n_neighbors=min(params.n_neighbors, n - 1), min_dist=params.min_dist,
            init=params.init if n > 16 else "random", n_epochs=params.n_epochs,
            tqdm_kwds={"disable": not progress, "desc": "map: layout", "unit": "epoch",
                       "leave": False, "file": sys.stderr,
                       "mininterval": 0})  # every epoch: a small map's layout is quick
        return np.asarray(reducer.fit_transform(Z), dtype=np.float32)


def map_key(sample: int, seed: int, params: MapParams = MapParams()) -> dict[str, Any]:
    """What determines ``W/map/`` besides the embeddings (and valid.npy)."""
    return {"sample": int(sample), "seed": int(seed), "params": asdict(params),
            "umap_version": _umap_version()}


def _umap_version() -> str | None:
    try:
        return importlib.metadata.version("umap-learn")
    except importlib.metadata.PackageNotFoundError:
        return None


def map_stage(w: Any, *, sample: int, seed: int, progress: bool = False,
              params: MapParams = MapParams()) -> str | None:
    """Run (or reuse) the ``map`` stage of work directory ``w``; return None when
    ``W/map/`` is current afterwards, else why there is no map (a note for the report):
    no embeddings, ``sample`` 0, or umap-learn not installed."""
    from clusterclip.io import atomic_output_dir, load_npy, save_npy

    if sample < 0:
        raise InputError(f"--map-sample must be >= 0, got {sample}")
    if sample == 0:
        return "no map: --map-sample 0"
    if not w.path("embeddings.npy").is_file():
        return "no map: the work directory has no embeddings.npy"
    if _umap_version() is None:
        return "no map: umap-learn is not installed (pip install 'clusterclip[report]')"

    def work(run: Any) -> dict[str, Any]:
        X = load_npy(w.path("embeddings.npy"), "embeddings", kinds="f", ndim=2, mmap=True)
        valid = (load_npy(w.path("valid.npy"), "valid", ndim=1)
                 if w.path("valid.npy").is_file() else None)
        if valid is not None and valid.shape[0] != X.shape[0]:
            raise InputError(f"{w.path('valid.npy')}: {valid.shape[0]} rows but "
                             f"embeddings.npy has {X.shape[0]}")
        rows = sample_rows(valid, X.shape[0], sample, seed)
        if progress:
            print(f"map: UMAP of {rows.size:,} of {X.shape[0]:,} documents (neighbours, "
                  "then the layout; first use compiles numba code) ...", file=sys.stderr,
                  flush=True)
        t0 = time.perf_counter()
        coords = project(np.asarray(X[rows], dtype=np.float32), seed, params, progress)
        with atomic_output_dir(w.path(DIR), STAGE, overwrite=True) as tmp:
            save_npy(Path(tmp) / "sample.npy", rows)
            save_npy(Path(tmp) / "coords.npy", coords)
        seconds = time.perf_counter() - t0
        if progress:
            print(f"map: done in {seconds:.0f} s", file=sys.stderr, flush=True)
        return {"documents": int(rows.size), "of": int(X.shape[0]), "seconds": seconds}

    w.run_stage(STAGE, key=map_key(sample, seed, params), work=work, reads=["embeddings.npy"],
                maybe_reads=["valid.npy"], outputs=[DIR])
    return None


def load_map(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(sample, coords)`` of ``W/map/``: int64[n] document indices, float32[n, 2]."""
    from clusterclip.io import load_npy

    rows = load_npy(root / DIR / "sample.npy", "map sample", kinds="iu", ndim=1)
    coords = load_npy(root / DIR / "coords.npy", "map coordinates", kinds="f", ndim=2)
    if coords.shape != (rows.size, 2):
        raise InputError(f"{root / DIR}: coords.npy {list(coords.shape)} does not match "
                         f"sample.npy ({rows.size} rows); rerun `clusterclip report`")
    return rows.astype(np.int64), coords.astype(np.float32)
