"""Streaming row access to an embeddings matrix (in memory or memory-mapped).

K-means reads its input once per iteration. For a memory-mapped ``.npy`` the
rows are read with ``preadv`` into one reusable buffer instead of touching the
mapping: pages that a mapping touches count towards the process's resident
memory, pages read into a buffer only sit in the kernel's page cache. This is
what lets an embeddings file larger than the memory budget be clustered.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import numpy as np

from clusterclip.errors import InputError

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def check_matrix(X: np.ndarray, what: str = "embeddings") -> None:
    """Raise InputError unless ``X`` is a 2-D float16/32/64 array with at least one row."""
    if not isinstance(X, np.ndarray):
        raise InputError(f"{what}: expected a numpy array, got {type(X).__name__}")
    if X.ndim != 2:
        raise InputError(f"{what}: expected a 2-D (rows x dims) array, got shape {X.shape}")
    if X.dtype not in FLOAT_DTYPES:
        raise InputError(f"{what}: expected float16 or float32 values, got dtype {X.dtype}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise InputError(f"{what}: empty array of shape {X.shape}")


def _file_window(X: np.ndarray) -> tuple[str, int] | None:
    """``(filename, byte offset of row 0)`` when ``X`` is a C-contiguous view of a
    read-only or shared memory map, else None (then rows are read by slicing)."""
    if not isinstance(X, np.memmap) or X.filename is None or not X.flags.c_contiguous:
        return None
    if X.mode not in ("r", "r+"):  # a private copy ("c") may differ from the file
        return None
    base = X.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None:
        return None
    base_addr = np.frombuffer(base, dtype=np.uint8).ctypes.data
    # numpy maps from the offset rounded down to the allocation granularity.
    map_start = X.offset - X.offset % mmap.ALLOCATIONGRANULARITY
    return X.filename, map_start + (X.ctypes.data - base_addr)


class RowReader:
    """Iterate over ``(start, rows)`` chunks of a 2-D array.

    ``rows`` is a C-contiguous ndarray of the input dtype; it may be a reused
    buffer, valid only until the next chunk is produced.
    """

    def __init__(self, X: np.ndarray, chunk_rows: int) -> None:
        check_matrix(X)
        self.X = X
        self.n, self.d = X.shape
        self.chunk_rows = max(1, min(int(chunk_rows), self.n))
        self._window = _file_window(X)

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        if self._window is None:
            for start in range(0, self.n, self.chunk_rows):
                yield start, np.ascontiguousarray(self.X[start:start + self.chunk_rows])
            return
        filename, offset = self._window
        row_bytes = self.d * self.X.dtype.itemsize
        buf = np.empty((self.chunk_rows, self.d), dtype=self.X.dtype)
        fd = os.open(filename, os.O_RDONLY)
        try:
            for start in range(0, self.n, self.chunk_rows):
                rows = min(self.chunk_rows, self.n - start)
                view = memoryview(buf[:rows].reshape(-1).view(np.uint8))
                pos, want = offset + start * row_bytes, rows * row_bytes
                got = 0
                while got < want:
                    n = os.preadv(fd, [view[got:]], pos + got)
                    if n <= 0:
                        raise InputError(f"{filename}: file is shorter than its header says")
                    got += n
                yield start, buf[:rows]
        finally:
            os.close(fd)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Rows at sorted indices ``rows`` as a float32 array (len(rows), d)."""
        if len(rows) == 0:
            return np.empty((0, self.d), dtype=np.float32)
        return np.asarray(self.X[rows], dtype=np.float32)
