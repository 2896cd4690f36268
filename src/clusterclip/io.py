"""Atomic output and content fingerprints, shared by every stage.

Every file a stage produces is written to a temporary sibling and moved into
place with :func:`os.replace`, so a killed run never leaves a half-written
output under the final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

# numpy dtype kinds by name, for the messages of :func:`load_npy`.
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}

@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` on success.

    Works for files and for directories (a directory created at the temporary
    path replaces an existing directory at ``path``). On error the temporary
    is removed and ``path`` is untouched.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # the caller creates a file or a directory here
    try:
        yield tmp
        if tmp.is_dir() and final.is_dir():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise


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


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON atomically (byte-stable)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def sha256_file(path: str | os.PathLike[str], chunk_bytes: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(obj: Any) -> str:
    """Stable short hash of a JSON-serialisable object (parameters, inputs)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def array_fingerprint(array: np.ndarray) -> str:
    """Stable short hash of an array's dtype, shape and bytes."""
    a = np.ascontiguousarray(array)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    return h.hexdigest()[:16]
