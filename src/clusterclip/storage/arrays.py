"""``.npy`` arrays: written atomically, read without unpickling and checked for kind and
shape (:func:`load_npy`), and a memory-mapped array's pages released once read."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.storage.atomic import atomic_path

# numpy dtype kinds by name, for the messages of :func:`load_npy`.
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


def load_npy(path: str | os.PathLike[str], what: str = "array", *, kinds: str | None = None,
             ndim: int | None = None, mmap: bool = False) -> np.ndarray:
    """Read one ``.npy`` array; anything else is an :class:`InputError` naming ``path``.

    Never unpickles (object arrays and pickles are refused) and refuses ``.npz``
    archives. ``kinds``: the numpy dtype kinds allowed (``"iu"`` integers,
    ``"f"`` floats, ``"b"`` booleans); ``ndim``: the number of dimensions
    required; ``mmap``: memory-map read-only instead of reading into memory.
    ``what`` names the content in messages ("labels", "embeddings", ...).
    """
    try:
        a = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except (OSError, ValueError, EOFError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{path}: cannot read {what} as .npy ({msg})") from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        a.close()
        raise InputError(f"{path}: expected a single .npy array of {what}, got an .npz archive")
    if kinds is not None and a.dtype.kind not in kinds:
        want = " or ".join(dict.fromkeys(_KIND_NAMES.get(k, k) for k in kinds))
        raise InputError(f"{path}: {what} must be {want}, got dtype {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise InputError(f"{path}: {what} must be a {ndim}-D array, got shape {a.shape}")
    return a


def release_pages(array: np.ndarray, start: int = 0, stop: int | None = None) -> None:
    """Drop this process's resident pages of rows ``start:stop`` of ``array`` when it is a
    read-only memory map (``load_npy(..., mmap=True)``, or a view of one): ``madvise``
    ``MADV_DONTNEED``. The file's pages stay in the page cache and are read again on the
    next access, so a pass over a memory-mapped file that releases each chunk once read
    keeps about one chunk resident, whatever the file's size. No-op for anything else."""
    import mmap

    base: Any = array
    while base is not None and not isinstance(base, mmap.mmap):
        if isinstance(base, np.memmap) and base.mode != "r":
            return  # a writable or copy-on-write map: its pages may hold changes
        base = getattr(base, "base", None)
    if base is None or not hasattr(mmap, "MADV_DONTNEED") or not array.flags.c_contiguous \
            or array.ndim == 0 or base.closed:
        return
    stop = array.shape[0] if stop is None else min(int(stop), array.shape[0])
    if stop <= start:
        return
    row = array.strides[0] if array.ndim else array.itemsize
    lo = array.ctypes.data + int(start) * row - np.frombuffer(base, np.uint8).ctypes.data
    hi = min(lo + (stop - int(start)) * row, len(base))
    lo -= lo % mmap.PAGESIZE
    if hi > lo >= 0:
        base.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
