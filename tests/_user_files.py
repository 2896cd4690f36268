"""Files of a user's planted in an output folder, and the check that a rerun kept them
(issue 25): shared by tests/test_user_files.py and the search and experiment tests."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from clusterclip.storage.records import MARKER, files_under

names = st.text("abcxyz_-.", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
# a file of the user's: (which of our folders, folders of the user's below it, name, bytes)
plants = st.lists(st.tuples(st.integers(0, 10**6), st.lists(names, max_size=2), names,
                            st.binary(max_size=64)), min_size=1, max_size=4)


def listed(folder: Path) -> set[str]:
    """The files the folder's marker says clusterclip wrote."""
    return set(json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"])


def plant(folder: Path, spec: list) -> dict[Path, bytes]:
    """Write the user's files of ``spec`` (see ``plants``) in ``folder`` or a folder of
    ours below it, at random depths; returns them with their bytes."""
    ours = sorted({folder} | {(folder / e).parent for e in listed(folder)})
    planted: dict[Path, bytes] = {}
    for i, below, name, content in spec:
        path = ours[i % len(ours)].joinpath(*[f"u-{x}" for x in below], f"user-{name}")
        if path not in planted:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            planted[path] = content
    return planted


def assert_kept(folder: Path, planted: dict[Path, bytes]) -> None:
    """Every planted file is as it was, none is listed as ours, and the folder holds
    exactly our listed files and the planted ones."""
    for path, content in planted.items():
        assert path.read_bytes() == content, path
    ours = listed(folder)
    assert ours and all((folder / e).is_file() for e in ours)
    mine = {p.relative_to(folder).as_posix() for p in planted}
    assert set(files_under(folder)) == ours | mine and not ours & mine


def unplant(planted: dict[Path, bytes]) -> None:
    """Remove the planted files and the folders of the user's they leave empty."""
    for path in planted:
        path.unlink(missing_ok=True)
        for parent in path.parents:
            if parent.name.startswith("u-") and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()


# Ways to tamper with an output folder's record (issue 35); each must be refused.
TAMPERS = ("climbing", "absolute", "symlinked", "dotdot", "copied", "older", "users-own",
           "garbage", "appended", "listed")


def digest(data: bytes) -> dict:
    import hashlib

    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def tamper(folder: Path, kind: str, outside: Path) -> tuple[str, dict[Path, bytes]]:
    """Tamper with the record of ``folder`` (one of ours) as ``kind`` says, planting a
    user's files inside it and in ``outside`` (a folder of the user's); returns what the
    refusal must say and every planted file with its bytes (a link: its target's)."""
    import os

    rec_path = folder / MARKER
    rec = json.loads(rec_path.read_text(encoding="utf-8"))
    outside.mkdir(parents=True, exist_ok=True)
    victim = outside / "victim.txt"
    victim.write_bytes(b"precious\n")
    planted = {victim: b"precious\n"}
    entry, say = None, None
    if kind == "climbing":
        entry, say = os.path.relpath(victim, folder), "is not a plain path inside the folder"
    elif kind == "absolute":
        entry, say = str(victim), "is not a relative path"
    elif kind == "symlinked":
        (folder / "linkdir").symlink_to(outside, target_is_directory=True)
        entry, say = "linkdir/victim.txt", "is or lies below the symbolic link"
    elif kind == "dotdot":
        first = sorted(rec["files"])[0].split("/")[0]
        entry = f"{first}/../../{os.path.relpath(victim, folder.parent)}"
        say = "is not a plain path inside the folder"
    elif kind in ("copied", "users-own"):  # the user's bytes under names the record lists
        names = sorted(rec["files"]) if kind == "copied" else ["user-notes.txt"]
        for name in names:
            (folder / name).write_bytes(b"mine: " + name.encode())
            planted[folder / name] = b"mine: " + name.encode()
        rec["files"].update({n: digest(b"ours") for n in names if kind == "users-own"})
        say = "no longer has the size and SHA-256 recorded"
    elif kind == "older":
        rec = {"written_by": rec["written_by"], "entries": sorted(rec["files"])}
        say = "older record"
    elif kind == "appended":  # as the issue shows it: a path added to the list alone
        rec["entries"].append(os.path.relpath(victim, folder))
        say = f"lists {rec['entries'][-1]!r}, which is not a plain path inside the folder"
    elif kind == "listed":  # the user's own file added to the list alone
        (folder / "user-notes.txt").write_bytes(b"mine")
        planted[folder / "user-notes.txt"] = b"mine"
        rec["entries"].append("user-notes.txt")
        say = "lists 'user-notes.txt', which has no size and SHA-256 recorded"
    elif kind == "garbage":
        rec_path.write_bytes(b'{"written_by": "clusterclip export", "files": [1,')
        return "not a record clusterclip can trust", planted
    if entry is not None:
        rec["files"][entry] = digest(b"precious\n")
        say = f"lists {entry!r}, which {say}"
    rec_path.write_text(json.dumps(rec), encoding="utf-8")
    return say, planted
