"""Atomic writes: every file clusterclip produces is written to a temporary sibling and
moved into place with :func:`os.replace`, so a killed run never leaves a half-written output
under the final name.

Temporaries are named ``.NAME.clusterclip-PID-XXXXXXXX.tmp`` (PID: the writing process), so
that a later run can recognise and remove those of a killed process, and nothing else
(:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TMP_TAG = "clusterclip"


_TMP_RE = re.compile(r"^\.(?P<name>.+)\.clusterclip-(?P<pid>\d+)-[A-Za-z0-9_]+\.tmp$")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` on success.

    Works for files and for directories (a directory created at the temporary
    path replaces an existing directory at ``path``). On error the temporary
    is removed and ``path`` is untouched.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.{_TMP_TAG}-{os.getpid()}-",
                                    suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # the caller creates a file or a directory here
    try:
        yield tmp
        if tmp.is_dir() and final.is_dir() and not final.is_symlink():
            old = tmp.with_name(tmp.name[:-len(".tmp")] + "old.tmp")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            hooks = _BEFORE_REPLACE.get()  # set only while `sample` replaces its own file
            hook = hooks.get(str(final.resolve())) if hooks else None
            if hook is not None:
                hook(tmp)
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise


_SYNC_FILE_RANGE: Any = None  # libc's sync_file_range, once looked up (False: none)


def start_writeback(fd: int, start: int, stop: int) -> None:
    """Start writing bytes ``start .. stop`` of the open file ``fd`` to disk, without
    waiting for them (Linux's ``sync_file_range``; nothing where it is missing).

    For a large file written to a temporary and then moved onto an existing one: ext4
    writes the temporary's unwritten pages out inside that move (``auto_da_alloc``, its
    guard against empty files after a crash), 0.16 s for 240 MB here, at the end of the
    command. Started as the file is written, from the thread that writes it, that work
    overlaps the rest; what is on disk and when it is final are unchanged."""
    global _SYNC_FILE_RANGE
    if _SYNC_FILE_RANGE is None:
        _SYNC_FILE_RANGE = False
        if hasattr(os, "posix_fadvise"):  # a Linux-like libc
            import ctypes

            with contextlib.suppress(AttributeError, OSError):
                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _SYNC_FILE_RANGE = fn
    if _SYNC_FILE_RANGE and stop > start:
        _SYNC_FILE_RANGE(fd, start, stop - start, 2)  # SYNC_FILE_RANGE_WRITE; advice only


def pid_alive(pid: int) -> bool:
    """False only when no process ``pid`` exists (ours counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike[str], name: str | None = None
                             ) -> list[Path]:
    """Remove the temporaries that dead processes left in ``directory``; return them.

    Only names of the form :func:`atomic_path` gives (``.NAME.clusterclip-PID-*.tmp``)
    whose PID no longer runs are touched; with ``name``, only those of that target.
    """
    d = Path(directory)
    removed: list[Path] = []
    try:
        entries = list(d.iterdir())
    except OSError:
        return removed
    for p in entries:
        m = _TMP_RE.match(p.name)
        if not m or (name is not None and m["name"] != name) or pid_alive(int(m["pid"])):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        removed.append(p)
    return removed


# Called with the temporary about to replace a file (by its resolved path) in atomic_path:
# owned_file records the new file's digest before it takes the name.
_BEFORE_REPLACE: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "clusterclip_before_replace", default=None)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON atomically (byte-stable)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
