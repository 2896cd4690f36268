"""Files of a user's planted in an output folder, and the check that a rerun kept them
(issue 25): shared by tests/test_user_files.py and the search and experiment tests."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from clusterclip.io import MARKER, files_under

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
