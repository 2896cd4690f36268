"""Atomic output, output folders and content fingerprints, shared by every stage.

Every file a stage produces is written to a temporary sibling and moved into
place with :func:`os.replace`, so a killed run never leaves a half-written
output under the final name. Temporaries are named
``.NAME.clusterclip-PID-XXXXXXXX.tmp`` (PID: the writing process), so that a
later run can recognise and remove those of a killed process, and nothing
else. An output *folder* carries a marker file (:data:`MARKER`) naming the
command that wrote it; a folder without it is never replaced unless the user
asks (:func:`check_output_dir`).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

# numpy dtype kinds by name, for the messages of :func:`load_npy`.
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}

MARKER = ".clusterclip-output"
# The commands that have ``--overwrite`` (only their refusals suggest it).
OVERWRITE_COMMANDS = ("group", "export", "report", "demo", "dedup")
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
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise


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


def write_marker(directory: str | os.PathLike[str], command: str) -> None:
    """Mark ``directory`` as an output of ``clusterclip COMMAND`` (byte-stable content)."""
    (Path(directory) / MARKER).write_text(
        json.dumps({"written_by": f"clusterclip {command}"}) + "\n", encoding="utf-8")


def marker_of(directory: str | os.PathLike[str]) -> str | None:
    """The command whose marker ``directory`` carries, or None."""
    try:
        rec = json.loads((Path(directory) / MARKER).read_text(encoding="utf-8"))
        return str(rec["written_by"]).removeprefix("clusterclip ")
    except (OSError, ValueError, KeyError, TypeError):
        return None


# What the running command reads (see clusterclip.cli._paths): every output check also
# refuses these. ``(path, what, inside_ok)`` as ``protected`` below.
_DECLARED: contextvars.ContextVar[tuple[tuple[Path, str, bool], ...]] = contextvars.ContextVar(
    "clusterclip_declared_inputs", default=())


@contextlib.contextmanager
def declared_inputs(protected: tuple[tuple[Path, str, bool], ...]) -> Iterator[None]:
    """While the body runs, every :func:`check_output_dir` / :func:`check_output_file` /
    :func:`atomic_output_dir` also refuses ``protected`` (what the command reads)."""
    token = _DECLARED.set(_DECLARED.get() + tuple(protected))
    try:
        yield
    finally:
        _DECLARED.reset(token)


def check_output_dir(out: str | os.PathLike[str], command: str, *, overwrite: bool = False,
                     protected: tuple[tuple[Path, str, bool], ...] = (),
                     option: str = "--out") -> Path:
    """Refuse (InputError) an output folder that replacing would lose a user's files.

    ``out`` may be replaced when it does not exist, is empty, or carries the
    marker of an earlier ``clusterclip COMMAND``; ``overwrite`` allows any other
    folder. Never allowed, even with ``overwrite``: the current directory or a
    parent of it, and ``out`` equal to or a parent of a ``protected`` path
    (``(path, what, inside_ok)``; with ``inside_ok`` false, ``out`` inside it is
    refused too), or of what the running command declared it reads
    (:func:`declared_inputs`); a place that cannot hold it (below a file, in a
    read-only or unwritable folder). Also removes the temporaries a
    killed earlier run left beside ``out``. Returns ``out`` as a Path.
    """
    out = Path(out)
    real = out.resolve()
    refuse_cwd(out, option)
    refuse_protected(out, protected, option)
    if out.is_symlink() or out.exists():
        if out.is_symlink():
            raise InputError(f"{option} {out}: is a symbolic link; give the folder itself")
        if not out.is_dir():
            raise InputError(f"{option} {out}: exists and is not a directory")
        if any(out.iterdir()) and marker_of(out) != command and not overwrite:
            hint = (", or pass --overwrite to replace it" if command in OVERWRITE_COMMANDS
                    else " or move it away")
            raise InputError(f"{option} {out}: exists, is not empty and was not written by "
                             f"`clusterclip {command}` (no {MARKER} file); choose a new "
                             f"folder{hint}")
    check_writable(out, option)
    remove_stale_temporaries(real.parent, real.name)
    return out


def refuse_cwd(out: str | os.PathLike[str], option: str) -> None:
    """InputError when the folder ``out`` is the current directory or one of its parents."""
    real = Path(out).resolve()
    here = Path.cwd().resolve()
    if real == here or real in here.parents:
        raise InputError(f"{option} {out}: is the current directory or one of its parents; "
                         f"give a new folder")


def refuse_protected(out: str | os.PathLike[str],
                     protected: tuple[tuple[Path, str, bool], ...], option: str) -> None:
    """InputError when ``out`` is, contains or (for ``inside_ok`` false) lies inside a
    ``protected`` path or one the running command declared (:func:`declared_inputs`)."""
    out = Path(out)
    real = out.resolve()
    for path, what, inside_ok in (*protected, *_DECLARED.get()):
        p = Path(path).resolve()
        if real == p or real in p.parents or (not inside_ok and p in real.parents):
            where = "is" if real == p else ("contains" if real in p.parents else "is inside")
            raise InputError(f"{option} {out}: {where} {what} {path}; choose another path")


def check_writable(out: str | os.PathLike[str], option: str) -> None:
    """InputError when ``out`` cannot be created where it is: below a file, or in a folder
    this process may not write (read-only file system, permissions)."""
    out = Path(out)
    ancestor = Path(os.path.abspath(out)).parent
    while not ancestor.exists() and not ancestor.is_symlink():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{option} {out}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        try:
            readonly = bool(os.statvfs(ancestor).f_flag & os.ST_RDONLY)
        except OSError:
            readonly = False
        why = "read-only file system" if readonly else "permission denied"
        raise InputError(f"{option} {out}: cannot write in {ancestor} ({why})")


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free to this process on the file system where ``path`` is or would be created
    (None when it cannot be told)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check_free_space(out: str | os.PathLike[str], need: int, what: str = "the export",
                     option: str = "--out") -> None:
    """InputError (before writing) when the file system of ``out`` has less than ``need``
    bytes free (the message names ``option``, if any, ``out`` and ``what``)."""
    free = free_bytes(out)
    if free is not None and need > free:
        raise InputError(f"{option} {out}: {what} needs at least {need:,} bytes, and its "
                         f"file system has {free:,} free; free space or choose another "
                         f"place".lstrip())


def check_output_file(out: str | os.PathLike[str], *,
                      protected: tuple[tuple[Path, str, bool], ...] = (),
                      option: str = "--out", magic: bytes | None = None) -> Path:
    """Refuse (InputError) an output file whose replacement would lose a user's file:
    a directory, a ``protected`` path (see :func:`check_output_dir`) or a folder holding
    one, or (with ``magic``) an existing file that does not start with ``magic`` (so
    not one we wrote), or a place that cannot hold it (:func:`check_writable`). Returns
    ``out`` as a Path."""
    out = Path(out)
    refuse_protected(out, protected, option)
    if out.is_dir():
        raise InputError(f"{option} {out}: is a directory")
    if magic is not None and out.is_file():
        with open(out, "rb") as f:
            if f.read(len(magic)) != magic:
                raise InputError(f"{option} {out}: exists and is not a file clusterclip "
                                 f"writes; choose a new name or move it away")
    check_writable(out, option)
    return out


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike[str], command: str, *, overwrite: bool = False
                      ) -> Iterator[Path]:
    """Build an output folder in a temporary directory (marked as ``command``'s), then
    move it onto ``out`` if :func:`check_output_dir` still allows it."""
    check_output_dir(out, command, overwrite=overwrite)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        write_marker(tmp, command)
        yield tmp
        check_output_dir(out, command, overwrite=overwrite)


def cache_dir() -> Path | None:
    """The folder of clusterclip's caches (the sampler's seek index, the fast embedder's table).

    ``$CLUSTERCLIP_CACHE`` when set (empty, ``0``, ``off`` or ``none``: no disk cache,
    None), else ``$XDG_CACHE_HOME/clusterclip`` or ``~/.cache/clusterclip``. Every file
    in it is keyed by its inputs and checked when read, so any folder is safe to reuse.
    A place that cannot be a writable folder (a file on the way, a link to nothing) is an
    InputError naming the variable it came from, before any work that would fill it.
    """
    env = os.environ.get("CLUSTERCLIP_CACHE")
    if env is not None:
        if env.strip().lower() in ("", "0", "off", "none"):
            return None
        path, var = Path(env), "CLUSTERCLIP_CACHE"
    elif os.environ.get("XDG_CACHE_HOME"):
        path, var = Path(os.environ["XDG_CACHE_HOME"]) / "clusterclip", "XDG_CACHE_HOME"
    else:
        path, var = Path.home() / ".cache" / "clusterclip", "HOME"
    problem = _folder_problem(path)
    if problem:
        raise InputError(f"cache folder {path} (from ${var}): {problem}; set "
                         f"CLUSTERCLIP_CACHE to a folder clusterclip may write, or to off")
    return path


def _folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (or be made) a writable folder, or None: the first part of it
    that exists must be a folder we may write in, and none a link to nothing."""
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            return f"{p} is a symbolic link to nothing"
        if p.exists():
            if not p.is_dir():
                return f"{p} is a file, not a folder"
            if not os.access(p, os.W_OK | os.X_OK):
                return f"{p} is not writable"
            return None
    return None


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
