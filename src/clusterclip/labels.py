"""Cluster labels: one cluster id per document, -1 for a document left out.

The one place that says what a valid labels array is (:func:`check_labels`)
and that reads one from a ``.npy`` file (:func:`load_labels`). The sampler,
``sample``, ``group``, the report and the experiment all go through it, so a
labels file is accepted or refused the same way everywhere.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.storage.arrays import load_npy, release_pages

#: Cluster ids may exceed the number of documents N (empty clusters) by this much:
#: per-cluster arrays are sized by the largest id, so ids far beyond N would cost
#: memory out of all proportion to the labels themselves (2**31 - 2: 16 GiB).
ID_ROOM = 1 << 16
#: Ids are stored and drawn as int32 downstream.
MAX_ID = 2**31 - 2
SIZES_CHUNK = 1 << 20  # labels per pass of cluster_sizes


def check_labels(labels: Any, source: str | os.PathLike[str] | None = None,
                 num_documents: int | None = None) -> np.ndarray:
    """``labels`` as a 1-D integer array, checked; InputError naming ``source`` otherwise.

    Valid: 1-D, integer dtype, not empty, every id >= 0 or -1 (excluded), at
    least one document not excluded, the largest id below ``max(N, ID_ROOM)``
    for N documents (and at most :data:`MAX_ID`), and N == ``num_documents``
    when given. ``source`` (a file) prefixes every message.
    """
    where = "" if source is None else f"{source}: "
    a = np.asarray(labels)
    if a.ndim != 1:
        raise InputError(f"{where}labels must be a 1-D array, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise InputError(f"{where}labels must be integers, got dtype {a.dtype}")
    if a.size == 0:
        raise InputError(f"{where}labels is empty")
    if num_documents is not None and a.size != num_documents:
        raise InputError(f"{where}{a.size} labels but the corpus has {num_documents} documents; "
                         f"re-run `clusterclip cluster`")
    lo, hi = _min_max(a)
    if lo < -1:
        i = int(np.argmax(a < -1))
        raise InputError(f"{where}labels must be cluster ids >= 0 or -1 (excluded), "
                         f"got {lo} at index {i}")
    if hi < 0:
        raise InputError(f"{where}no eligible documents: all {a.size} labels are -1")
    limit = min(max(a.size, ID_ROOM), MAX_ID + 1)
    if hi >= limit:
        i = int(np.argmax(a == hi))
        raise InputError(f"{where}cluster id {hi} at index {i} is too large for {a.size} "
                         f"documents (ids must be < {limit}); number the clusters 0..K-1")
    return a


def load_labels(path: str | os.PathLike[str], num_documents: int | None = None, *,
                mmap: bool = False) -> np.ndarray:
    """Read and check a labels ``.npy`` (see :func:`check_labels`); errors name ``path``."""
    a = load_npy(path, "labels", kinds="iu", ndim=1, mmap=mmap)
    return check_labels(a, path, num_documents)


def cluster_sizes(labels: np.ndarray, num_clusters: int | None = None) -> np.ndarray:
    """Documents per cluster: int64[K] from int[N] labels (-1 = excluded, not counted).

    K is ``num_clusters`` if given (clusters without documents get 0), else
    ``labels.max() + 1``. Counted a chunk at a time (temporaries of one chunk, not N).
    """
    out = np.zeros(0 if num_clusters is None else int(num_clusters), np.int64)
    for start in range(0, len(labels), SIZES_CHUNK):
        lab = np.asarray(labels[start:start + SIZES_CHUNK])
        got = np.bincount(lab[lab >= 0], minlength=out.size)
        release_pages(labels, start, start + SIZES_CHUNK)  # a memory map: one chunk resident
        if got.size > out.size:  # K from the labels: a larger id in this chunk
            got[:out.size] += out
            out = got.astype(np.int64)
        else:
            out += got
    return out


def _min_max(a: np.ndarray) -> tuple[int, int]:
    """The smallest and largest label, a chunk at a time (a memory-mapped file's pages
    released after each chunk: one chunk resident, whatever N)."""
    lo, hi = None, None
    for start in range(0, a.size, SIZES_CHUNK):
        chunk = a[start:start + SIZES_CHUNK]
        c_lo, c_hi = int(chunk.min()), int(chunk.max())
        lo = c_lo if lo is None else min(lo, c_lo)
        hi = c_hi if hi is None else max(hi, c_hi)
        release_pages(a, start, start + SIZES_CHUNK)
    return int(lo), int(hi)
