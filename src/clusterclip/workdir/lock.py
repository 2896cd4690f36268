"""The work directory's lock: one process at a time writes W (:meth:`Locking.locked`).

A second process gets an InputError at once naming the holder; the OS releases the lock
when its holder dies, so a killed run's lock is simply taken over. On a read-only file
system the lock is shared and the command may only read W.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from clusterclip.errors import InputError
from clusterclip.storage.atomic import pid_alive, remove_stale_temporaries
from clusterclip.storage.jsonfile import parse_json, read_json
from clusterclip.workdir.layout import EMBED_DIR, LOCK, MANIFEST

# Processes of this interpreter holding a work directory's lock: root -> [fd, depth].
_HELD: dict[str, list[Any]] = {}


def command_line() -> str:
    """This process's command line, as the user typed it (for the lock's holder)."""
    argv = list(sys.argv)
    head = Path(argv[0]).name if argv else "python"
    if head in ("__main__.py", "clusterclip", "cli.py"):
        head = "clusterclip"
    return " ".join([head, *argv[1:]])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _is_lock_record(data: bytes) -> bool:
    """True for an empty lock file or one holding our holder record (never a user's file)."""
    if not data.strip():
        return True
    try:
        rec = parse_json(data, "lock")
    except InputError:
        return False
    return isinstance(rec, dict) and {"pid", "command", "since"} <= rec.keys()


_W = TypeVar("_W", bound="Locking")


class Locking:
    """The lock of a :class:`~clusterclip.workdir.Workdir` (its ``root``, ``manifest_path``
    and whether it made ``root``: ``_made``), re-entrant within a process."""

    @contextlib.contextmanager
    def locked(self: _W, command: str | None = None) -> Iterator[_W]:
        """Hold the work directory's exclusive lock (re-entrant within a process).

        A second process gets an InputError at once naming the holder (pid,
        command, since when). The OS releases the lock when its holder dies, so
        a killed run's lock is simply taken over. Under ``torchrun`` rank 0
        holds it for all ranks (every rank must enter). The first acquisition
        removes the temporaries that killed runs left in the directory.
        """
        from clusterclip.distributed import is_main, on_main

        main = is_main()
        on_main(lambda: self._acquire(command or command_line()))
        try:
            yield self
        finally:
            if main:
                self._release()

    def _acquire(self, command: str) -> None:
        key = str(self.root.resolve())
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return
        fd = self._lock_fd()
        if fd is None or self.read_only():  # only read here (a read-only file system)
            _HELD[key] = [fd, 1, None, True]
            return
        if not _is_lock_record(os.pread(fd, 1 << 16, 0)):
            os.close(fd)
            raise InputError(f"{self.root / LOCK}: exists and was not written by clusterclip; "
                             f"move it away or use another work directory")
        info = json.dumps({"pid": os.getpid(), "command": command, "since": _now()})
        # what was here before, when W was not yet a work directory (see _release)
        before = None if self.manifest_path.exists() else set(os.listdir(self.root)) - {LOCK}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (info + "\n").encode(), 0)
        _HELD[key] = [fd, 1, before, False]
        for d in (self.root, self.root / EMBED_DIR):
            remove_stale_temporaries(d)

    def _lock_fd(self) -> int | None:
        """A descriptor of W/.lock holding its exclusive lock (InputError when another
        process holds it). Retried when the file was removed and made again meanwhile (a
        lock taken on a removed file would lock nothing). On a read-only file system, a
        shared lock of the existing lock file (None when there is none): the command may
        then only read W (:meth:`save` records nothing)."""
        path = self.root / LOCK
        while True:
            read_only = self.read_only()
            try:
                fd = os.open(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                if read_only:
                    return None
                raise
            except OSError as e:
                raise InputError(f"work directory {self.root}: cannot create its lock file "
                                 f"{LOCK} ({e.strerror})") from None
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if read_only else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise InputError(f"work directory {self.root} is in use by {self._holder()}; "
                                 f"wait for it to finish (or stop it) and try again") from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)

    def read_only(self) -> bool:
        """True when W lies on a read-only file system (a command can then only read it)."""
        held = _HELD.get(str(self.root.resolve()))
        if held is not None:
            return bool(held[3])
        try:
            return bool(os.statvfs(self.root).f_flag & os.ST_RDONLY)
        except OSError:
            return False

    def _release(self) -> None:
        key = str(self.root.resolve())
        held = _HELD[key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[key]
            if held[3]:  # read-only: nothing was written
                if held[0] is not None:
                    os.close(held[0])
                return
            if self._nothing_made(held[2]):
                # not a work directory (a refused command): leave no lock file, and no
                # folder this object made; removed while locked, see _lock_fd
                with contextlib.suppress(OSError):
                    os.unlink(self.manifest_path)
                with contextlib.suppress(OSError):
                    os.unlink(self.root / LOCK)
                if self._made:
                    with contextlib.suppress(OSError):
                        self.root.rmdir()  # only when empty
            os.close(held[0])  # closing the descriptor releases the lock

    def _nothing_made(self, before: set[str] | None) -> bool:
        """True when W was not a work directory when locked (``before``: its entries then)
        and holds nothing more now than a manifest of no finished stage (e.g. ``run``
        refused after the corpus scan): nothing would resume from it."""
        if before is None:
            return False
        with contextlib.suppress(OSError, InputError, KeyError, TypeError, AttributeError):
            if set(os.listdir(self.root)) - {LOCK, MANIFEST} == before:
                if not self.manifest_path.exists():
                    return True
                stages = read_json(self.manifest_path)["stages"]
                return all(s.get("status") != "finished" for s in stages.values())
        return False

    def _holder(self) -> str:
        try:
            rec = read_json(self.root / LOCK)
            if pid_alive(int(rec["pid"])):
                return f"pid {rec['pid']} (`{rec['command']}`, since {rec['since']})"
        except (OSError, InputError, ValueError, KeyError, TypeError):
            pass
        return "another process (that has not yet recorded itself)"
