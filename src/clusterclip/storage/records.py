"""Ownership records: what says a folder or a file is clusterclip's to replace.

An output *folder* carries a marker file (:data:`MARKER`) naming the command that wrote it
and every file it wrote there with its size and SHA-256: a rerun replaces or removes only
those, only while they are plain files inside the folder that still have them
(:func:`owned_files`; any other entry is refused). A single output file is replaced only when
the record beside it (:func:`record_of`) says we wrote it as it is (:func:`owned_file`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError
from clusterclip.storage.atomic import _BEFORE_REPLACE, _TMP_RE, atomic_path, write_json, write_text
from clusterclip.storage.digests import file_digest
from clusterclip.storage.jsonfile import read_json

MARKER = ".clusterclip-output"


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
                option: str = "out") -> dict[str, dict[str, Any]]:
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
                             f"choose another folder", params=(option,))
        out[rel] = file_digest(root / rel)
    return out


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
        now = file_digest(path)
        return any(_is_digest(d) and {"sha256": d["sha256"], "size": d["size"]} == now
                   for d in (rec, rec.get("replacing")))
    except (OSError, InputError):
        return False


@contextlib.contextmanager
def owned_file(path: str | os.PathLike[str], command: str) -> Iterator[Path]:
    """Write the single output file ``path`` in the body (atomically, through
    :func:`atomic_path`), recorded as ``clusterclip COMMAND``'s in a hidden file beside it
    (:func:`record_of`) with its size and SHA-256: just before the new file takes the
    name, the record lists the old file's digest and the new one's (a kill leaves the name
    ours either way), then the new one's only. :func:`check_output_file` with ``owner``
    replaces only such a file. On an error the record describes the file then there, if
    it is one of these, else it is put back as it was."""
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
    write_json(rec, {"written_by": tag, **file_digest(p)})
