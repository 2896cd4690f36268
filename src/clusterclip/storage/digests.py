"""Content digests: the SHA-256 of files (hashed once per process, and as they are written
through a :class:`HashingWriter`) and the short fingerprints of objects and arrays that key
the stages and caches."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

_DIGESTS: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}


def file_digest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"sha256", "size"}`` of the file ``path`` (links followed); the hash is reused
    within one process while the file's inode, size, mtime and ctime are unchanged."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    hit = _DIGESTS.get(os.fspath(path))
    if hit is not None and hit[0] == key:
        return dict(hit[1])
    digest = {"sha256": sha256_file(path), "size": st.st_size}
    if len(_DIGESTS) > 4096:
        _DIGESTS.clear()
    _DIGESTS[os.fspath(path)] = (key, digest)
    return dict(digest)


# SHA-256 of files this process wrote through a HashingWriter, by what identified each file
# when it was closed (device, inode, size, modification time in ns; a rename keeps them).
_WRITTEN_DIGESTS: dict[tuple[int, int, int, int], str] = {}


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class HashingWriter:
    """A binary file's ``write``, hashed (SHA-256) as it goes, so that the digest of a
    large output (``sample --out``'s record) costs no second read: after
    :meth:`finish`, :func:`sha256_file` of the file, wherever it is moved, returns the
    digest while the file keeps its device, inode, size and modification time."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self._h = hashlib.sha256()

    def write(self, data: Any) -> int:
        self._h.update(data)
        return self._f.write(data)

    def finish(self) -> str:
        """Flush the file, remember its digest; returns it (hex)."""
        self._f.flush()
        digest = self._h.hexdigest()
        _WRITTEN_DIGESTS[_identity(os.fstat(self._f.fileno()))] = digest
        return digest


def sha256_file(path: str | os.PathLike[str], chunk_bytes: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (not read again when this process
    wrote it through a :class:`HashingWriter` and it is as written)."""
    known = _WRITTEN_DIGESTS.get(_identity(os.stat(path)))
    if known is not None:
        return known
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
