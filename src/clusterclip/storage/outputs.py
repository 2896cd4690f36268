"""Output folders and files: the checks before a command writes (a non-empty folder without
a marker of ours is never written, nor a path the command reads, nor the current directory),
and the move of a finished folder into place that replaces only the files its marker lists
(:func:`check_output_dir`, :func:`atomic_output_dir`, :func:`check_output_file`).

Their refusals name the output by ``option``: by default the parameter ``out``, listed in
the error's ``params`` so that the command line shows it as its option (``--out``; the
``overwrite`` a refusal suggests likewise); a caller may name it otherwise (the command
line passes its own option, the dedup stage ``keep_one``)."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fnmatch
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError
from clusterclip.storage.atomic import _TMP_TAG, remove_stale_temporaries
from clusterclip.storage.digests import file_digest
from clusterclip.storage.records import (
    MARKER,
    _entry_problem,
    _written_by,
    files_under,
    owned_files,
    read_marker,
    record_of,
    write_marker,
)

# The commands that have ``--overwrite`` (only their refusals suggest it).
OVERWRITE_COMMANDS = ("group", "export", "report", "demo", "dedup")


def mark_output(directory: str | os.PathLike[str], command: str) -> Path:
    """Create ``directory`` if needed and mark it as ``command``'s before a command writes
    into it piece by piece (stored runs), keeping the files an earlier marker lists (and
    that are still as written); :func:`atomic_output_dir` lists the new files at the end."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    rec = read_marker(d)
    if rec is not None and (rec["problem"] is not None or rec["files"] is None):
        _check_ours(d, command, rec, True, "out", None)  # refused: not a record to trust
    files = owned_files(d, rec)  # an entry not to be honoured: refused before any work
    if rec is None or rec["command"] != command:
        write_marker(d, command, files=files)
    return d


def record_written(directory: str | os.PathLike[str], command: str,
                   names: Iterable[str]) -> None:
    """List ``names`` (files a command wrote in place in ``directory``, e.g. ``cluster
    --out``'s fixed names) in its marker with their sizes and hashes, with the earlier
    files of ours still as written; names that are not plain files there are left out."""
    d = Path(directory)
    names = list(names)
    rec = read_marker(d)
    if rec is not None and rec["files"] is not None:  # the names just written: new digests
        rec = {**rec, "files": {k: v for k, v in rec["files"].items() if k not in names},
               "replacing": {k: v for k, v in rec["replacing"].items() if k not in names}}
    files = owned_files(d, rec)
    for rel in names:
        if _entry_problem(d, rel, []) is None:
            files[rel] = file_digest(d / rel)
    write_marker(d, command, files=files)


def unmark_unused(directory: str | os.PathLike[str]) -> None:
    """Remove ``directory`` when it holds nothing but a marker of ours that lists no file
    (what :func:`mark_output` made for a command that then failed before writing)."""
    d = Path(directory)
    rec = read_marker(d)
    with contextlib.suppress(OSError):
        if rec is not None and rec["files"] == {} and not rec["replacing"] \
                and os.listdir(d) == [MARKER]:
            (d / MARKER).unlink()
            d.rmdir()


def _clashes(paths: Iterable[str], foreign: Iterable[str], glob: bool = False) -> list[str]:
    """The ``foreign`` paths that writing ``paths`` (with ``glob``: shell patterns of the
    paths a command may write) would replace or remove: the same path, one below a path
    written (a file where the user has a folder), or one that a path written lies below
    (a folder where the user has a file)."""
    want = set(paths)
    dirs = {p.rsplit("/", i)[0] for p in want for i in range(1, p.count("/") + 1)}
    if glob:
        return sorted(f for f in foreign if any(_glob(f, p, below=True) for p in want)
                      or any(_glob(f, d) for d in dirs))
    return sorted(f for f in foreign if f in want or f in dirs
                  or any(f.startswith(p + "/") for p in want))


def _glob(path: str, pattern: str, below: bool = False) -> bool:
    """True when ``path`` matches ``pattern`` part by part (a ``*`` never spans a ``/``),
    or with ``below`` lies below a path that does."""
    got, want = path.split("/"), pattern.split("/")
    return (len(got) == len(want) or (below and len(got) > len(want))) and all(
        fnmatch.fnmatchcase(g, w) for g, w in zip(got[:len(want)], want, strict=True))


def _foreign_message(option: str, out: Path, foreign: list[str], why: str) -> str:
    more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
    return f"{option} {out}: {why}: {out / foreign[0]}{more}"


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


# The work directory the running command writes an output folder from (see made_from).
_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "clusterclip_output_source", default=None)


@contextlib.contextmanager
def made_from(workdir: str | os.PathLike[str]) -> Iterator[None]:
    """While the body runs, an output folder outside ``workdir`` that
    :func:`atomic_output_dir` writes records ``workdir`` as its source, and one that
    another work directory wrote is refused without ``--overwrite``."""
    token = _SOURCE.set(str(Path(workdir).resolve()))
    try:
        yield
    finally:
        _SOURCE.reset(token)


def _source_for(out: Path, source: str | None) -> str | None:
    """``source``, else the one :func:`made_from` set, unless ``out`` lies inside it."""
    src = source if source is not None else _SOURCE.get()
    if src is None or Path(src) in out.resolve().parents:
        return None
    return src


def check_output_dir(out: str | os.PathLike[str], command: str, *, overwrite: bool = False,
                     protected: tuple[tuple[Path, str, bool], ...] = (),
                     option: str = "out", source: str | None = None,
                     writes: Iterable[str] = ()) -> Path:
    """Refuse (InputError) an output folder whose files are not all ours to replace.

    ``out`` may be written when it does not exist, is empty, or carries the marker
    of an earlier ``clusterclip COMMAND`` (made from the same ``source``, when both
    name one); ``overwrite`` also allows a folder another clusterclip command (or
    source) wrote. Either way only the files its marker lists are replaced or
    removed (:func:`atomic_output_dir`); every other file stays as it is, and one in
    the way of ``writes`` (shell patterns of the paths the command may write) is
    refused. Never allowed, even with ``overwrite``: a non-empty folder without our
    marker, the current directory or a parent of it, and ``out`` equal to or a
    parent of a ``protected`` path (``(path, what, inside_ok)``; with ``inside_ok``
    false, ``out`` inside it is refused too), or of what the running command
    declared it reads (:func:`declared_inputs`); a place that cannot hold it (below
    a file, in a read-only or unwritable folder). Also removes the temporaries a
    killed earlier run left beside and in ``out``. Returns ``out`` as a Path.
    """
    out = Path(out)
    real = out.resolve()
    source = _source_for(out, source)
    refuse_cwd(out, option)
    refuse_protected(out, protected, option)
    if out.is_symlink() or out.exists():
        if out.is_symlink():
            raise InputError(f"{option} {out}: is a symbolic link; give the folder itself",
                             params=(option,))
        if not out.is_dir():
            raise InputError(f"{option} {out}: exists and is not a directory", params=(option,))
        rec = read_marker(out)
        _check_ours(out, command, rec, overwrite, option, source)
        ours = owned_files(out, rec, option)  # an entry not to be honoured: refused here
        if rec is not None:
            remove_stale_temporaries(out)
        clash = _clashes(writes, sorted(set(files_under(out)) - set(ours)), glob=True)
        if clash:
            raise InputError(_foreign_message(option, out, clash, (
                "holds files clusterclip did not write where it would write its own; "
                "move them away or choose another folder")), params=(option,))
    check_writable(out, option)
    remove_stale_temporaries(real.parent, real.name)
    return out


def _check_ours(out: Path, command: str, rec: dict[str, Any] | None, overwrite: bool,
                option: str, source: str | None) -> None:
    """InputError when the existing folder ``out`` (marker ``rec``) is not ``command``'s
    to write (see :func:`check_output_dir`)."""
    can = command in OVERWRITE_COMMANDS
    never = (" (overwrite never replaces a folder clusterclip did not write)" if can
             else " or move it away")
    params = (option, "overwrite") if can else (option,)
    if rec is None:
        names = sorted(p.name for p in out.iterdir())
        if names:
            raise InputError(_foreign_message(
                option, out, names, f"exists, is not empty and was not written by "
                f"`clusterclip {command}` (no {MARKER} file); choose a new or empty "
                f"folder{never}; it holds"), params=params)
        return
    if rec["problem"] is not None or rec["files"] is None:
        why = rec["problem"] or "it lists no files with their sizes and SHA-256"
        raise InputError(f"{option} {out}: its {MARKER} is not a record clusterclip can "
                         f"trust ({why}), so its files may be yours; choose a new or empty "
                         f"folder{never}", params=params)
    if overwrite:
        return
    hint = (", or pass overwrite to replace the files it wrote there (and only those)"
            if can else " or move it away")
    if rec["command"] != command:
        raise InputError(f"{option} {out}: was not written by `clusterclip {command}` (its "
                         f"{MARKER} says `clusterclip {rec['command']}`); choose a new "
                         f"folder{hint}", params=params)
    if source is not None and rec["source"] is not None and rec["source"] != str(source):
        raise InputError(f"{option} {out}: was written by `clusterclip {command}` from "
                         f"{rec['source']}, not from {source}; choose a new folder{hint}",
                         params=params)


def refuse_cwd(out: str | os.PathLike[str], option: str) -> None:
    """InputError when the folder ``out`` is the current directory or one of its parents."""
    real = Path(out).resolve()
    here = Path.cwd().resolve()
    if real == here or real in here.parents:
        raise InputError(f"{option} {out}: is the current directory or one of its parents; "
                         f"give a new folder", params=(option,))


def refuse_protected(out: str | os.PathLike[str],
                     protected: tuple[tuple[Path, str, bool], ...], option: str) -> None:
    """InputError when ``out`` is, contains or (for ``inside_ok`` false) lies inside a
    ``protected`` path or one the running command declared (:func:`declared_inputs`).
    ``inside_ok`` may also be a tuple of paths: inside only those (or at them) is allowed
    (a work directory and the parts of it the command writes as an output)."""
    out = Path(out)
    real = out.resolve()
    for path, what, inside_ok in (*protected, *_DECLARED.get()):
        p = Path(path).resolve()
        if isinstance(inside_ok, tuple):
            inside_ok = any(real == q.resolve() or q.resolve() in real.parents
                            for q in map(Path, inside_ok))
        if real == p or real in p.parents or (not inside_ok and p in real.parents):
            where = "is" if real == p else ("contains" if real in p.parents else "is inside")
            raise InputError(f"{option} {out}: {where} {what} {path}; choose another path",
                             params=(option,))


def check_writable(out: str | os.PathLike[str], option: str) -> None:
    """InputError when ``out`` cannot be created where it is: below a file, or in a folder
    this process may not write (read-only file system, permissions)."""
    out = Path(out)
    ancestor = Path(os.path.abspath(out)).parent
    while not ancestor.exists() and not ancestor.is_symlink():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{option} {out}: {ancestor} is a file, not a folder", params=(option,))
    if not os.access(ancestor, os.W_OK | os.X_OK):
        try:
            readonly = bool(os.statvfs(ancestor).f_flag & os.ST_RDONLY)
        except OSError:
            readonly = False
        why = "read-only file system" if readonly else "permission denied"
        raise InputError(f"{option} {out}: cannot write in {ancestor} ({why})", params=(option,))


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
                     option: str = "out") -> None:
    """InputError (before writing) when the file system of ``out`` has less than ``need``
    bytes free (the message names ``option``, if any, ``out`` and ``what``)."""
    free = free_bytes(out)
    if free is not None and need > free:
        raise InputError(f"{option} {out}: {what} needs at least {need:,} bytes, and its "
                         f"file system has {free:,} free; free space or choose another "
                         f"place".lstrip(), params=(option,) if option else ())


def check_output_file(out: str | os.PathLike[str], *,
                      protected: tuple[tuple[Path, str, bool], ...] = (),
                      option: str = "out", magic: bytes | None = None,
                      owner: str | None = None) -> Path:
    """Refuse (InputError) an output file whose replacement would lose a user's file:
    a directory, a ``protected`` path (see :func:`check_output_dir`) or a folder holding
    one, (with ``magic``) an existing file that does not start with ``magic``, (with
    ``owner``, a command) an existing file that its record (:func:`owned_file`) does not
    say ``clusterclip OWNER`` wrote as it is, so not one we wrote, or a place that cannot
    hold it (:func:`check_writable`). Returns ``out`` as a Path."""
    out = Path(out)
    refuse_protected(out, protected, option)
    if out.is_dir():
        raise InputError(f"{option} {out}: is a directory", params=(option,))
    if magic is not None and out.is_file():
        with open(out, "rb") as f:
            if f.read(len(magic)) != magic:
                raise InputError(f"{option} {out}: exists and is not a file clusterclip "
                                 f"writes; choose a new name or move it away", params=(option,))
    if owner is not None and os.path.lexists(out) and not _written_by(out, owner):
        raise InputError(f"{option} {out}: exists and was not written by `clusterclip "
                         f"{owner}` (no matching {record_of(out).name} beside it); choose a "
                         f"new name or move it away", params=(option,))
    check_writable(out, option)
    return out


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike[str], command: str, *, overwrite: bool = False,
                      source: str | None = None, adopt: Iterable[str] = (),
                      option: str = "out") -> Iterator[Path]:
    """Build an output folder in a temporary directory beside ``out``, then move what it
    holds into ``out`` if :func:`check_output_dir` still allows it (:func:`commit_output`).

    ``adopt``: paths already in ``out`` that this run wrote there (e.g. stored runs),
    listed as ours without being moved. A failure before the move leaves ``out`` as it
    was, and removes the folders above it that this call made (once empty)."""
    out = check_output_dir(out, command, overwrite=overwrite, source=source, option=option)
    source = _source_for(out, source)
    made = [p for p in Path(os.path.abspath(out)).parents if not os.path.lexists(p)]
    out.parent.mkdir(parents=True, exist_ok=True)
    done = False
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_TMP_TAG}-{os.getpid()}-",
                                    suffix=".tmp", dir=out.parent))
        try:
            yield tmp
            check_output_dir(out, command, overwrite=overwrite, source=source, option=option)
            commit_output(tmp, out, command, source=source, adopt=adopt, option=option)
            done = True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        for p in [] if done else made:  # deepest first; one holding anything stays
            try:
                p.rmdir()
            except OSError:
                break


def commit_output(tmp: Path, out: Path, command: str, *, source: str | None = None,
                  adopt: Iterable[str] = (), option: str = "out") -> None:
    """Move the files of ``tmp`` into ``out`` (which :func:`check_output_dir` allowed).

    A new ``out`` is ``tmp`` renamed (one step). Into an existing one, only the files its
    marker lists and that are still as written (:func:`owned_files`) are replaced or
    removed: first the marker lists the old files and, as ``replacing``, the new ones
    with their sizes and hashes (so a kill in between leaves nothing of ours unlisted),
    then each new file is renamed into place, the old ones no longer written are removed
    (and their folders, once empty), and the marker lists the new files. Every other file
    stays as it is; one in the way of a new file is refused (InputError) before anything
    moves. ``adopt``: plain files already in ``out`` that this run wrote, listed as they
    are."""
    adopted = {rel: file_digest(out / rel) for rel in sorted(set(adopt))
               if _entry_problem(out, rel, []) is None}
    moved = {rel: file_digest(tmp / rel) for rel in files_under(tmp)}
    new = {**adopted, **moved}
    if not os.path.lexists(out):
        write_marker(tmp, command, files=new, source=source)
        try:
            os.rename(tmp, out)
            return
        except OSError as e:  # made meanwhile: merged below
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    old = owned_files(out, read_marker(out), option)
    clash = _clashes(moved, sorted(set(files_under(out)) - set(old) - set(adopted)))
    if clash:
        raise InputError(_foreign_message(option, out, clash, (
            "holds files clusterclip did not write where it would write its own; move them "
            "away or choose another folder")), params=(option,))
    write_marker(out, command, files={**old, **adopted}, replacing=moved, source=source)
    for rel in sorted(set(old) - set(new)):
        _remove_ours(out, rel)
    for rel in sorted(moved):
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_dir() and not dst.is_symlink():
            raise InputError(f"{option} {out}: {dst} is a folder where clusterclip writes a "
                             f"file; move it away", params=(option,))
        os.replace(tmp / rel, dst)
    write_marker(out, command, files=new, source=source)


def _remove_ours(out: Path, rel: str) -> None:
    """Remove the file ``out/rel`` (ours) and the folders above it that it leaves empty."""
    p = out / rel
    if p.is_symlink() or p.is_file() or (p.exists() and not p.is_dir()):
        p.unlink()
    for parent in p.parents:
        if parent == out or out not in parent.parents:
            break
        try:
            parent.rmdir()
        except OSError:
            break
