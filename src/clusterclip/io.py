"""Atomic output, output folders and content fingerprints, shared by every stage.

Every file a stage produces is written to a temporary sibling and moved into
place with :func:`os.replace`, so a killed run never leaves a half-written
output under the final name. Temporaries are named
``.NAME.clusterclip-PID-XXXXXXXX.tmp`` (PID: the writing process), so that a
later run can recognise and remove those of a killed process, and nothing
else. An output *folder* carries a marker file (:data:`MARKER`) naming the
command that wrote it and every file it wrote there with its size and SHA-256: a
rerun replaces or removes only those, only while they are plain files inside the
folder that still have them (:func:`owned_files`; any other entry is refused), and
a non-empty folder without a marker of ours is never written
(:func:`check_output_dir`, :func:`atomic_output_dir`). A single output file is
replaced only when the record beside it says we wrote it as it is
(:func:`owned_file`). Every JSON file is read by :func:`read_json`.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
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


# Bounds of every JSON file clusterclip reads (read_json): deeper nesting or a larger file
# is refused, so that no reader recurses without end or reads a file of any size.
JSON_MAX_DEPTH = 64
JSON_MAX_BYTES = 1 << 30


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(f"duplicate key {k!r}")
        out[k] = v
    return out


def _depth(obj: Any) -> int:
    """The nesting depth of ``obj`` (a scalar: 0), computed without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict | list):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def parse_json(text: str | bytes, source: str, what: str = "", *,
               max_depth: int = JSON_MAX_DEPTH) -> Any:
    """Parse ``text`` as JSON; anything else is an InputError ``"SOURCE: PROBLEM"``
    (``source``: a file, a file and line; ``what`` it should hold, if given, ends the
    message): not JSON (with its line and column), a key given twice in one object,
    nesting deeper than ``max_depth`` levels, a number of more digits than Python reads."""
    tail = f" (expected {what})" if what else ""
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise InputError(f"{source}: {e} (each key may appear once in an object){tail}"
                         ) from None
    except json.JSONDecodeError as e:
        raise InputError(f"{source}: not JSON (line {e.lineno} column {e.colno}: "
                         f"{e.msg}){tail}") from None
    except RecursionError:
        raise InputError(f"{source}: JSON nested deeper than {max_depth} levels{tail}"
                         ) from None
    except UnicodeDecodeError as e:
        raise InputError(f"{source}: not UTF-8 text (byte {e.start}){tail}") from None
    except ValueError as e:  # an integer of more digits than Python reads
        msg = str(e).split(";")[0].splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{source}: a number out of range ({msg}){tail}") from None
    if _depth(obj) > max_depth:
        raise InputError(f"{source}: JSON nested deeper than {max_depth} levels{tail}")
    return obj


def read_json(path: str | os.PathLike[str], what: str = "", *,
              max_depth: int = JSON_MAX_DEPTH, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """Read the JSON file ``path``: the one reader of every JSON file clusterclip reads
    (mixtures, records, manifests, stored runs, indexes). Anything but JSON of at most
    ``max_bytes`` bytes and ``max_depth`` levels, with no key given twice in one object,
    is an InputError naming the file (see :func:`parse_json`; ``what``: what it should
    hold), as is a file that cannot be read; ``FileNotFoundError`` stays itself, for the
    callers that treat a missing file apart."""
    tail = f" (expected {what})" if what else ""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}){tail}") from None
    if len(data) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes:,} bytes, more than a JSON file "
                         f"clusterclip reads{tail}")
    return parse_json(data, str(path), what, max_depth=max_depth)


def write_marker(directory: str | os.PathLike[str], command: str, *,
                 files: Mapping[str, Mapping[str, Any]] | None = None,
                 replacing: Mapping[str, Mapping[str, Any]] | None = None,
                 source: str | None = None) -> None:
    """Mark ``directory`` as an output of ``clusterclip COMMAND`` (byte-stable content,
    written atomically): with ``files``, every file the command wrote there (relative,
    ``/``-separated path -> its ``{"size", "sha256"}``, :func:`file_digest`), the only
    ones a rerun replaces or removes, and only while they still have that size and hash;
    with ``replacing``, the files being moved in (a path listed there is ours when it has
    either digest); with ``source``, what it was made from (a work directory), which a
    rerun from elsewhere does not replace without ``--overwrite``. Without ``files`` the
    marker only names the command (a folder whose files are checked otherwise)."""
    rec: dict[str, Any] = {"written_by": f"clusterclip {command}"}
    if files is not None:  # "entries": the paths alone, as older records list them
        rec["entries"] = sorted({*files, *(replacing or {})})
        rec["files"] = {k: dict(files[k]) for k in sorted(files)}
    if replacing:
        rec["replacing"] = {k: dict(replacing[k]) for k in sorted(replacing)}
    if source is not None:
        rec["source"] = str(source)
    write_text(Path(directory) / MARKER, json.dumps(rec, sort_keys=True) + "\n")


def read_marker(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The marker in ``directory``, or None when it has none: ``{"command", "files"
    (path -> digest, None for a path its ``entries`` list without one; None: a marker
    that lists none), "replacing", "source", "problem"}``; ``problem``
    says why it is not a record of ours that can be trusted (then ``command`` is None):
    not JSON, not of our form, or an older record that lists its files without their
    sizes and hashes. Its entries are checked against the folder by :func:`owned_files`."""
    path = Path(directory) / MARKER
    if not os.path.lexists(path):
        return None
    rec: dict[str, Any] = {"command": None, "files": None, "replacing": {}, "source": None,
                           "problem": None}
    try:
        if path.is_symlink() or not path.is_file():
            raise InputError("a symbolic link or not a file")
        data = read_json(path)
    except (InputError, OSError) as e:
        return {**rec, "problem": str(e).removeprefix(f"{path}: ")}
    written = data.get("written_by") if isinstance(data, dict) else None
    if not (isinstance(written, str) and written.startswith("clusterclip ")):
        return {**rec, "problem": "it does not say which clusterclip command wrote it"}
    if "entries" in data and "files" not in data:
        return {**rec, "problem": "it is an older record that lists its files without their "
                                  "sizes and SHA-256"}
    files, replacing, source = (data.get(k) for k in ("files", "replacing", "source"))
    for name, value in (("files", files), ("replacing", replacing or {})):
        if value is not None and not isinstance(value, dict):
            return {**rec, "problem": f"its {name!r} is not an object"}
    entries = data.get("entries", [])
    if not (isinstance(entries, list) and all(isinstance(e, str) for e in entries)):
        return {**rec, "problem": "its 'entries' is not a list of paths"}
    if files is not None:  # a path in "entries" without a digest is checked (and refused)
        files = {**dict.fromkeys(entries), **files}
    if source is not None and not isinstance(source, str):
        return {**rec, "problem": "its 'source' is not a path"}
    return {**rec, "command": written.removeprefix("clusterclip "), "files": files,
            "replacing": replacing or {}, "source": source}


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _is_digest(info: Any) -> bool:
    return (isinstance(info, dict) and type(info.get("size")) is int and info["size"] >= 0
            and isinstance(info.get("sha256"), str) and bool(_SHA256.match(info["sha256"])))


def _entry_problem(root: Path, rel: str, digests: list[Any]) -> str | None:
    """Why the record's entry ``rel`` (one of ``digests`` expected) cannot be honoured, or
    None; ``"missing"`` when no file is there (nothing of ours to replace or remove)."""
    parts = rel.split("/")
    if not rel or "\x00" in rel or os.path.isabs(rel):
        return "is not a relative path"
    if any(x in ("", ".", "..") for x in parts):
        return "is not a plain path inside the folder ('..', '.' or an empty part)"
    if not all(_is_digest(d) for d in digests):
        return "lists no size and SHA-256"
    p = root
    for part in parts:
        p = p / part
        if p.is_symlink():
            return f"is or lies below the symbolic link {p}"
        if not p.exists():
            return "missing"
    if not p.is_file():
        return "is not a regular file"
    if root.resolve() not in p.resolve().parents:
        return "resolves to a path outside the folder"
    if digests and not any(file_digest(p) == {"sha256": d["sha256"], "size": d["size"]}
                           for d in digests):
        return "no longer has the size and SHA-256 recorded (changed since clusterclip wrote it)"
    return None


def owned_files(directory: str | os.PathLike[str], rec: dict[str, Any] | None,
                option: str = "--out") -> dict[str, dict[str, Any]]:
    """The files of ``directory`` that its marker ``rec`` (:func:`read_marker`) lists and
    that are still as clusterclip wrote them (path -> digest as they are now): the only
    ones a command may replace or remove. None or a marker that lists no files: none.
    An entry that is not a plain relative path inside the folder (``..``, absolute, a
    symbolic link on its way, resolving elsewhere), or whose file no longer has the
    recorded size and SHA-256, is an InputError naming it (before any work); a listed
    file that is gone is left out."""
    if rec is None or rec["problem"] is not None or rec["files"] is None:
        return {}
    root = Path(directory)
    out: dict[str, dict[str, Any]] = {}
    replacing = rec["replacing"]
    for rel in sorted(set(rec["files"]) | set(replacing), key=str):
        digests = [d[rel] for d in (rec["files"], replacing) if d.get(rel) is not None]
        why = _entry_problem(root, rel, digests)
        if why in (None, "missing") and not digests:
            why = "has no size and SHA-256 recorded"
        if why == "missing":
            continue
        if why is not None:
            raise InputError(f"{option} {root}: its {MARKER} lists {rel!r}, which {why}; "
                             f"clusterclip replaces nothing there: remove that entry, or "
                             f"choose another folder")
        out[rel] = file_digest(root / rel)
    return out


_DIGESTS: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {}


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies a file's content without reading it: device, inode, size and the
    modification and change times in ns (a write changes both times; no call sets the
    change time back)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_digest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"sha256", "size"}`` of the file ``path`` (links followed); the hash is reused
    within one process while the file's inode, size, mtime and ctime are unchanged."""
    st = os.stat(path)
    key = _stat_key(st)
    hit = _DIGESTS.get(os.fspath(path))
    if hit is not None and hit[0] == key:
        return dict(hit[1])
    digest = {"sha256": sha256_file(path), "size": st.st_size}
    if len(_DIGESTS) > 4096:
        _DIGESTS.clear()
    _DIGESTS[os.fspath(path)] = (key, digest)
    return dict(digest)


def mark_output(directory: str | os.PathLike[str], command: str) -> Path:
    """Create ``directory`` if needed and mark it as ``command``'s before a command writes
    into it piece by piece (stored runs), keeping the files an earlier marker lists (and
    that are still as written); :func:`atomic_output_dir` lists the new files at the end."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    rec = read_marker(d)
    if rec is not None and (rec["problem"] is not None or rec["files"] is None):
        _check_ours(d, command, rec, True, "--out", None)  # refused: not a record to trust
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


def marker_of(directory: str | os.PathLike[str]) -> str | None:
    """The command whose marker ``directory`` carries, or None (none, or not ours)."""
    rec = read_marker(directory)
    return None if rec is None else rec["command"]


def files_under(directory: str | os.PathLike[str]) -> list[str]:
    """Every entry under ``directory`` that is not a folder (files, links, others), as
    sorted relative ``/``-separated paths, symbolic links not followed; the marker and
    our temporaries are left out."""
    root = Path(directory)
    out: list[str] = []
    for dirpath, dirs, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            if _TMP_RE.match(name) or (rel == Path(".") and name == MARKER):
                continue
            out.append((rel / name).as_posix())
    return sorted(out)


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
                     option: str = "--out", source: str | None = None,
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
            raise InputError(f"{option} {out}: is a symbolic link; give the folder itself")
        if not out.is_dir():
            raise InputError(f"{option} {out}: exists and is not a directory")
        rec = read_marker(out)
        _check_ours(out, command, rec, overwrite, option, source)
        ours = owned_files(out, rec, option)  # an entry not to be honoured: refused here
        if rec is not None:
            remove_stale_temporaries(out)
        clash = _clashes(writes, sorted(set(files_under(out)) - set(ours)), glob=True)
        if clash:
            raise InputError(_foreign_message(option, out, clash, (
                "holds files clusterclip did not write where it would write its own; "
                "move them away or choose another folder")))
    check_writable(out, option)
    remove_stale_temporaries(real.parent, real.name)
    return out


def _check_ours(out: Path, command: str, rec: dict[str, Any] | None, overwrite: bool,
                option: str, source: str | None) -> None:
    """InputError when the existing folder ``out`` (marker ``rec``) is not ``command``'s
    to write (see :func:`check_output_dir`)."""
    can = command in OVERWRITE_COMMANDS
    never = (" (--overwrite never replaces a folder clusterclip did not write)" if can
             else " or move it away")
    if rec is None:
        names = sorted(p.name for p in out.iterdir())
        if names:
            raise InputError(_foreign_message(
                option, out, names, f"exists, is not empty and was not written by "
                f"`clusterclip {command}` (no {MARKER} file); choose a new or empty "
                f"folder{never}; it holds"))
        return
    if rec["problem"] is not None or rec["files"] is None:
        why = rec["problem"] or "it lists no files with their sizes and SHA-256"
        raise InputError(f"{option} {out}: its {MARKER} is not a record clusterclip can "
                         f"trust ({why}), so its files may be yours; choose a new or empty "
                         f"folder{never}")
    if overwrite:
        return
    hint = (", or pass --overwrite to replace the files it wrote there (and only those)"
            if can else " or move it away")
    if rec["command"] != command:
        raise InputError(f"{option} {out}: was not written by `clusterclip {command}` (its "
                         f"{MARKER} says `clusterclip {rec['command']}`); choose a new "
                         f"folder{hint}")
    if source is not None and rec["source"] is not None and rec["source"] != str(source):
        raise InputError(f"{option} {out}: was written by `clusterclip {command}` from "
                         f"{rec['source']}, not from {source}; choose a new folder{hint}")


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
                      option: str = "--out", magic: bytes | None = None,
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
        raise InputError(f"{option} {out}: is a directory")
    if magic is not None and out.is_file():
        with open(out, "rb") as f:
            if f.read(len(magic)) != magic:
                raise InputError(f"{option} {out}: exists and is not a file clusterclip "
                                 f"writes; choose a new name or move it away")
    if owner is not None and os.path.lexists(out) and not _written_by(out, owner):
        raise InputError(f"{option} {out}: exists and was not written by `clusterclip "
                         f"{owner}` (no matching {record_of(out).name} beside it); choose a "
                         f"new name or move it away")
    check_writable(out, option)
    return out


def record_of(path: str | os.PathLike[str]) -> Path:
    """The record beside a single output file that says clusterclip wrote it."""
    p = Path(path)
    return p.with_name(f".{p.name}{MARKER}")


def _written_by(path: Path, command: str) -> bool:
    """True when ``path``'s record says ``clusterclip COMMAND`` wrote it as it is now: a
    plain file with the size and SHA-256 the record gives (or gives as ``replacing``)."""
    try:
        rec = read_json(record_of(path))
        if not isinstance(rec, dict) or rec.get("written_by") != f"clusterclip {command}" \
                or path.is_symlink() or not path.is_file():
            return False
        st = os.stat(path)
        if _is_digest(rec) and rec.get("stat") == list(_stat_key(st)):
            # the file as the record saw it when written: its digest, not read again
            _DIGESTS[os.fspath(path)] = (_stat_key(st), {"sha256": rec["sha256"],
                                                         "size": rec["size"]})
        now = file_digest(path)
        return any(_is_digest(d) and {"sha256": d["sha256"], "size": d["size"]} == now
                   for d in (rec, rec.get("replacing")))
    except (OSError, InputError):
        return False


# Called with the temporary about to replace a file (by its resolved path) in atomic_path:
# owned_file records the new file's digest before it takes the name.
_BEFORE_REPLACE: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "clusterclip_before_replace", default=None)


@contextlib.contextmanager
def owned_file(path: str | os.PathLike[str], command: str) -> Iterator[Path]:
    """Write the single output file ``path`` in the body (atomically, through
    :func:`atomic_path`), recorded as ``clusterclip COMMAND``'s in a hidden file beside it
    (:func:`record_of`) with its size and SHA-256: just before the new file takes the
    name, the record lists the old file's digest and the new one's (a kill leaves the name
    ours either way), then the new one's only. :func:`check_output_file` with ``owner``
    replaces only such a file. On an error the record describes the file then there, if
    it is one of these, else it is put back as it was. The final record also holds the
    file's identity (device, inode, size, modification and change times): a rerun that
    finds it unchanged takes the recorded digest without reading the file."""
    p = Path(path)
    rec = record_of(p)
    before = rec.read_bytes() if rec.is_file() and not rec.is_symlink() else None
    tag = f"clusterclip {command}"
    old = file_digest(p) if _written_by(p, command) else {}
    seen: list[dict[str, Any]] = [old] if old else []

    def record_new(tmp: Path) -> None:
        seen.append(file_digest(tmp))
        write_json(rec, {"written_by": tag, **old, "replacing": seen[-1]})

    token = _BEFORE_REPLACE.set({**(_BEFORE_REPLACE.get() or {}),
                                  str(p.resolve()): record_new})
    try:
        yield p
    except BaseException:
        now = file_digest(p) if p.is_file() and not p.is_symlink() else None
        if now is not None and now in seen:
            write_json(rec, {"written_by": tag, **now})
        elif before is None:
            with contextlib.suppress(OSError):
                rec.unlink()
        else:
            with atomic_path(rec) as tmp:
                tmp.write_bytes(before)
        raise
    finally:
        _BEFORE_REPLACE.reset(token)
    # with its identity (_stat_key): a rerun then checks the file without reading it
    write_json(rec, {"written_by": tag, **file_digest(p), "stat": list(_stat_key(os.stat(p)))})


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike[str], command: str, *, overwrite: bool = False,
                      source: str | None = None, adopt: Iterable[str] = (),
                      option: str = "--out") -> Iterator[Path]:
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
                  adopt: Iterable[str] = (), option: str = "--out") -> None:
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
            "away or choose another folder")))
    write_marker(out, command, files={**old, **adopted}, replacing=moved, source=source)
    for rel in sorted(set(old) - set(new)):
        _remove_ours(out, rel)
    for rel in sorted(moved):
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_dir() and not dst.is_symlink():
            raise InputError(f"{option} {out}: {dst} is a folder where clusterclip writes a "
                             f"file; move it away")
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


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON atomically (byte-stable)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


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
