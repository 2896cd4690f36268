"""Sequential writes of a new large file around the page cache (``O_DIRECT``) where the
file system takes them, for ``sample --out``: the bytes go from one reused aligned buffer
to the disk, so writing a 240 MB schedule needs no 240 MB of fresh page cache. On the
project's virtual machine (whose freed memory is slow to touch again, most likely handed
back to its host), filling fresh page cache cost up to 0.9 system CPU s per 240 MB, measured
(docs/scale.md, "The sampler as a whole process"); the direct writes cost 0.01-0.08 s.
Where ``O_DIRECT`` is refused (not Linux, a file system without it, an alignment it does not
take), the same bytes are written through the page cache. On a machine whose page cache is
cheap, the direct writes cost the disk's time instead, in the writer thread."""

from __future__ import annotations

import errno
import mmap
import os
from typing import Any

#: Offset, length and buffer alignment of the direct writes: 4 KiB (or the page) covers
#: the logical block sizes of the disks and file systems that take ``O_DIRECT``.
ALIGN = max(4096, mmap.PAGESIZE)


class DirectWriter:
    """A new binary file at ``path`` (it must not exist), written in order: ``write``,
    ``flush``, ``fileno``, ``close``, and a context manager that closes it.

    The bytes are gathered in a buffer of ``chunk_bytes`` (a multiple of ``ALIGN``)
    and written a full buffer at a time; ``flush`` writes what is gathered, padded to
    ``ALIGN`` and cut back to its length, so the file always holds exactly the bytes
    written once flushed. ``direct=False`` (or a file system that refuses ``O_DIRECT``)
    writes the same bytes through the page cache; ``direct`` (the attribute) says which
    is used.

    Parameters
    ----------
    path : str or os.PathLike
        The file to create (``FileExistsError`` if something is there).
    chunk_bytes : int
        The buffer: bytes gathered per write.
    direct : bool
        Try ``O_DIRECT`` (False: through the page cache).

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with DirectWriter(os.path.join(d, "x.bin")) as f:
    ...     _ = f.write(b"header") + f.write(bytes(range(200)) * 50)
    >>> os.path.getsize(os.path.join(d, "x.bin"))
    10006
    """

    def __init__(self, path: str | os.PathLike[str], chunk_bytes: int = 8 << 20,
                 direct: bool = True) -> None:
        if chunk_bytes <= 0 or chunk_bytes % ALIGN:
            raise ValueError(f"chunk_bytes {chunk_bytes} is not a positive multiple of {ALIGN}")
        self.path = os.fspath(path)
        self._buf = mmap.mmap(-1, chunk_bytes)  # anonymous: page-aligned, reused
        self._view = memoryview(self._buf)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(self.path, flags, 0o666)
        except BaseException:
            self._view.release()
            self._buf.close()
            raise
        # switched on once the file is made (an open with O_CREAT | O_DIRECT may make the
        # file and then refuse the flag)
        self.direct = direct and _set_direct(self._fd, True)
        self._base = 0  # file offset of the buffer's first byte (a multiple of chunk_bytes)
        self._fill = 0  # bytes gathered in the buffer
        self._flushed = True  # the file holds every byte written

    def write(self, data: Any) -> int:
        """Append the bytes of ``data`` (any bytes-like object); returns their number."""
        src = memoryview(data).cast("B")
        n, done = src.nbytes, 0
        size = len(self._view)
        while done < n:
            k = min(size - self._fill, n - done)
            self._view[self._fill:self._fill + k] = src[done:done + k]
            self._fill += k
            done += k
            if self._fill == size:
                self._pwrite(size)
                self._base += size
                self._fill = 0
        if n:
            self._flushed = False
        return n

    def flush(self) -> None:
        """Write the gathered bytes (the file then holds exactly what was written)."""
        if self._flushed:
            return
        if self._fill:
            padded = -(-self._fill // ALIGN) * ALIGN
            self._view[self._fill:padded] = bytes(padded - self._fill)
            self._pwrite(padded)
        os.ftruncate(self._fd, self._base + self._fill)
        self._flushed = True

    def _pwrite(self, n: int) -> None:
        """Write the buffer's first ``n`` bytes at its file offset (all of them)."""
        done = 0
        with self._view[:n] as view:  # released on an error too (the buffer is closed)
            while done < n:
                try:
                    done += os.pwrite(self._fd, view[done:], self._base + done)
                except OSError as e:  # an alignment the file system refuses: page cache
                    if not self.direct or e.errno != errno.EINVAL:
                        raise
                    self.direct = _set_direct(self._fd, False)

    def fileno(self) -> int:
        """The file descriptor."""
        return self._fd

    def close(self) -> None:
        """Flush, then close the file (once)."""
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            self._release()

    def _release(self) -> None:
        os.close(self._fd)
        self._fd = -1
        self._view.release()
        self._buf.close()

    def __enter__(self) -> DirectWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()
        elif self._fd >= 0:  # the caller's error stands; the file is the caller's to remove
            self._release()


def _set_direct(fd: int, on: bool) -> bool:
    """Switch ``O_DIRECT`` on or off for ``fd``; whether it is now on (False where the
    platform has no such flag or the file system refuses it)."""
    flag = getattr(os, "O_DIRECT", 0)
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return False
    if not flag:
        return False
    old = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, old | flag if on else old & ~flag)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    return on
