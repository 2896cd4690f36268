"""The map: a 2D projection of a seeded sample of the documents (stage ``map``, ``W/map/``;
run by :mod:`clusterclip.stages.map`).

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
independent of the model's dimension. Up to
:attr:`MapParams.exact_neighbours_up_to` points the neighbour graph is exact
(:func:`nearest_neighbours`: blocked matrix products on every core, candidates
re-ranked in float64) and handed to UMAP; above it UMAP's own NN-descent,
whose cost grows as n log n rather than n^2, finds it. The exact search is
both faster at the default sample (10^5 glosses: 19 s on 2 cores; NN-descent
on one thread took about 45 s there, its compilation included) and needs no numba
compilation of its own (docs/benchmarks.md, "Report page and map").
"""

from __future__ import annotations

import importlib.metadata
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

STAGE = "map"
DEFAULT_MAP_SAMPLE = 100_000
PCA_DIMS = 50
_ROWS_PER_BLOCK = 65_536  # embeddings read (and PCA accumulated) this many rows at a time
_KNN_BLOCK_BYTES = 1 << 28  # the exact neighbour search's distance block (256 MiB)
_KNN_MARGIN = 16  # candidates beyond k kept from the float32 block, re-ranked in float64
# A candidate list is trusted when its worst squared distance exceeds the k-th by more
# than this share of |x|^2 + max |y|^2: far above float32's rounding of the scores.
_KNN_TIE_TOLERANCE = 1e-4


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
    deterministic only then. ``exact_neighbours_up_to``: the most points whose
    neighbour graph is searched exactly (:func:`nearest_neighbours`, n^2 cost);
    above it umap-learn's NN-descent.
    """

    method: str = "umap"
    pca_dims: int = PCA_DIMS
    n_neighbors: int = 15
    min_dist: float = 0.1
    init: str = "pca"
    n_epochs: int | None = None
    exact_neighbours_up_to: int = 200_000


def nearest_neighbours(Z: np.ndarray, k: int,
                       progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``k`` nearest rows of ``Z`` (float[n, d]) to each row, euclidean:
    ``(indices int64[n, k], distances float32[n, k])``, nearest first, the row itself
    in column 0 (UMAP's convention), ties in index order.

    Blocks of rows are scored against all rows with one float32 matrix product
    (every core); each row's ``k + 16`` best candidates are then re-ranked by their
    float64 distance. A row whose worst candidate is not clearly farther than its
    k-th (ties, e.g. many copies of one document, or near-ties within float32's
    rounding) is ranked again against every row in float64, so the result does not
    depend on the product's rounding, the thread count or the BLAS. Cost: n^2 d
    multiply-adds, plus n d per such row; memory: a 256 MiB block. ``progress``:
    a bar over the rows on stderr.
    """
    import torch
    from tqdm import tqdm

    n = Z.shape[0]
    k = min(k, n)
    m = min(k + _KNN_MARGIN, n)
    Z64 = np.asarray(Z, dtype=np.float64)
    sq64 = np.einsum("ij,ij->i", Z64, Z64)
    Zt = torch.from_numpy(np.ascontiguousarray(Z, dtype=np.float32))
    ZT = Zt.T.contiguous()
    half_sq = (Zt * Zt).sum(dim=1) / 2
    rows = max(1, min(n, _KNN_BLOCK_BYTES // (4 * n)))
    score = torch.empty((rows, n), dtype=torch.float32)  # reused: no page faults per block
    indices = np.empty((n, k), dtype=np.int64)
    dists = np.empty((n, k), dtype=np.float32)
    bar = tqdm(total=n, desc="map: neighbours", unit="row", unit_scale=True, leave=False,
               file=sys.stderr, disable=not progress, mininterval=0)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        block = score[:stop - start]
        torch.mm(Zt[start:stop], ZT, out=block)  # x.y; the nearest have the largest x.y - |y|^2/2
        block.sub_(half_sq)
        block.view(-1)[torch.arange(stop - start) * (n + 1) + start] = float("inf")  # itself
        cand = torch.topk(block, m, dim=1, sorted=False).indices.numpy()
        diff = Z64[start:stop, None, :] - Z64[cand]
        d = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        d[cand == np.arange(start, stop)[:, None]] = -1.0  # itself first, even among copies
        order = np.lexsort((cand, d), axis=1)[:, :k]
        indices[start:stop] = np.take_along_axis(cand, order, axis=1)
        dists[start:stop] = np.maximum(np.take_along_axis(d, order, axis=1), 0.0)
        if m < n:  # rows whose margin is too thin to trust: ties or near-ties past it
            kth = np.take_along_axis(d, order[:, -1:], axis=1)[:, 0]
            thin = d.max(axis=1) ** 2 - np.maximum(kth, 0.0) ** 2 <= (
                _KNN_TIE_TOLERANCE * (sq64[start:stop] + sq64.max()))
            for i in start + np.flatnonzero(thin):
                indices[i], dists[i] = _row_neighbours(Z64, int(i), k)
        bar.update(stop - start)
    bar.close()
    return indices, dists


def _row_neighbours(Z64: np.ndarray, i: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ``i``'s exact ``k`` nearest rows of ``Z64`` from all float64 distances:
    itself first, then nearest, ties by index."""
    d = np.sqrt(np.einsum("ij,ij->i", Z64 - Z64[i], Z64 - Z64[i]))
    d[i] = -1.0
    order = np.lexsort((np.arange(d.size), d))[:k]
    return order, np.maximum(d[order], 0.0).astype(np.float32)


def neighbour_graph(Z: np.ndarray, k: int, seed: int, params: MapParams = MapParams(),
                    progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest neighbours of each row of ``Z`` (itself first) that the layout
    starts from: exact (:func:`nearest_neighbours`) up to
    ``params.exact_neighbours_up_to`` rows, else umap-learn's NN-descent as UMAP runs
    it itself (seeded, one thread: deterministic)."""
    if Z.shape[0] <= params.exact_neighbours_up_to:
        return nearest_neighbours(Z, k, progress)
    from umap.umap_ import nearest_neighbors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's and pynndescent's notes on threads
        indices, dists, _ = nearest_neighbors(
            Z, k, "euclidean", {}, False, np.random.RandomState(seed), low_memory=True,
            use_pynndescent=True, n_jobs=1)
    return indices, dists


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
    k = min(params.n_neighbors, n - 1)
    indices, dists = neighbour_graph(Z, k, seed, params, progress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # umap's and numba's notes on threads and sparsity
        reducer = umap.UMAP(
            n_components=2, random_state=seed, n_jobs=1, metric="euclidean",
            n_neighbors=k, min_dist=params.min_dist,
            init=params.init if n > 16 else "random", n_epochs=params.n_epochs,
            tqdm_kwds={"disable": not progress, "desc": "map: layout", "unit": "epoch",
                       "leave": False, "file": sys.stderr,
                       "mininterval": 0},  # every epoch: a small map's layout is quick
            precomputed_knn=(indices, dists, None))
        return np.asarray(reducer.fit_transform(Z), dtype=np.float32)


def map_key(sample: int, seed: int, params: MapParams = MapParams()) -> dict[str, Any]:
    """What determines ``W/map/`` besides the embeddings (and valid.npy)."""
    return {"sample": int(sample), "seed": int(seed), "params": asdict(params),
            "umap_version": umap_version()}


def umap_version() -> str | None:
    try:
        return importlib.metadata.version("umap-learn")
    except importlib.metadata.PackageNotFoundError:
        return None


def load_map(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(sample, coords)`` of the map's ``folder`` (``W/map/``, which the stage names):
    int64[n] document indices, float32[n, 2]."""
    from clusterclip.storage.arrays import load_npy

    rows = load_npy(folder / "sample.npy", "map sample", kinds="iu", ndim=1)
    coords = load_npy(folder / "coords.npy", "map coordinates", kinds="f", ndim=2)
    if coords.shape != (rows.size, 2):
        raise InputError(f"{folder}: coords.npy {list(coords.shape)} does not match "
                         f"sample.npy ({rows.size} rows); rerun `clusterclip report`")
    return rows.astype(np.int64), coords.astype(np.float32)
