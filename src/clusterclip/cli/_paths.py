"""Every path a command reads or writes, declared once, and the one guard over them.

A command adds each path-valued option with :func:`add_path`, which records the
option's role on its argparse action:

- ``input``: a file or folder the command reads (never replaced, written into, or
  held by an output);
- ``workdir``: a work directory (read, and written only through its stages; what the
  command may write there as an output option is ``owns``);
- ``output_dir`` / ``output_file``: what the command creates or replaces;
- ``container``: a folder the command creates things in (``demo --out``).

Before ``run(args)``, :func:`guard` collects the inputs from the parsed options
(with each input's default, e.g. ``W/schedule.npy``, and every file the work
directories they name list: their corpus files and recorded inputs) and refuses,
with or without ``--overwrite``, any output that is, contains or lies inside one of
them. It also hands what the command reads (all but the parts of W, which its
stages write) to :func:`clusterclip.storage.outputs.declared_inputs`, so that every later
output check of the command (``check_output_dir``, ``check_output_file``,
``atomic_output_dir``) sees it too. A new path option added
through :func:`add_path` is thereby protected without further code; a test checks
that every string-valued option is either declared so or known not to be a path.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError

ROLES = ("input", "workdir", "output_dir", "output_file", "container")
OUTPUT_ROLES = ("output_dir", "output_file", "container")
#: String options that are not paths (field names, devices, the primary question); every
#: other string option of every command must be added with :func:`add_path`
#: (tests/test_paths_guard.py).
NOT_PATHS = ("--text-field", "--id-field", "--label-field", "--device", "--kmeans-device",
             "--primary")


def add_path(p: Any, *flags: str, role: str,
             default_from: Callable[[argparse.Namespace], Any] | None = None,
             owns: tuple[str, ...] = (), **kw: Any) -> argparse.Action:
    """``p.add_argument(*flags, **kw)`` for a path-valued option of ``role`` (see the module).

    ``default_from(args)``: the path the command uses when the option is not given (e.g.
    ``W/schedule.npy``), guarded like a given one. ``owns`` (``workdir`` only): the names
    in W that an output option of this command may be (``report`` for ``W/report``).
    """
    if role not in ROLES:
        raise ValueError(f"unknown path role {role!r}")
    action = p.add_argument(*flags, **kw)
    action.path_role = role  # type: ignore[attr-defined]
    action.path_default = default_from  # type: ignore[attr-defined]
    action.path_owns = owns  # type: ignore[attr-defined]
    return action


def path_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions of ``parser`` added with :func:`add_path`."""
    return [a for a in parser._actions if getattr(a, "path_role", None)]


def _option(a: argparse.Action) -> str:
    return a.option_strings[0] if a.option_strings else a.metavar or a.dest.upper()


def _values(a: argparse.Action, args: argparse.Namespace) -> list[Path]:
    value = getattr(args, a.dest, None)
    if value is None and a.path_default is not None:  # type: ignore[attr-defined]
        value = a.path_default(args)  # type: ignore[attr-defined]
    values = value if isinstance(value, list) else [] if value is None else [value]
    for v in values:
        if str(v) == "":
            raise InputError(f"{_option(a)} '': an empty path; give a file or folder name")
    return [Path(v) for v in values]


def _workdir_of(path: Path) -> Path | None:
    """The work directory ``path`` is or lies directly in (it holds a manifest), or None."""
    from clusterclip.workdir import MANIFEST

    for d in (path, path.parent):
        if (d / MANIFEST).is_file():
            return d
    return None


def _ours(folder: Path, parser: argparse.ArgumentParser) -> bool:
    """True when ``folder`` carries the marker of the command ``parser`` parses (``cluster
    --embeddings ... --out O`` keeps its manifest in O: O is its output, not a work
    directory to protect from it)."""
    from clusterclip.storage.records import marker_of

    return marker_of(folder) == parser.prog.removeprefix("clusterclip ")


def protected_paths(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    parts: bool = True) -> tuple[tuple[Path, str, bool], ...]:
    """What no output of this command may be, contain or lie in: ``(path, what, inside_ok)``
    as :func:`clusterclip.storage.outputs.check_output_dir` takes them. The inputs the
    options name, and for every work directory an option names, an input lies in or an
    output would land in: the directory, its parts (but those the command ``owns``; none
    without ``parts``) and the files it read."""
    from clusterclip.workdir import MANIFEST, Workdir

    out: list[tuple[Path, str, bool]] = []
    workdirs: dict[Path, tuple[str, ...]] = {}
    found: set[Path] = set()  # not named by an option: skipped when not ours
    actions = path_actions(parser)
    for a in actions:
        if a.path_role == "workdir":  # type: ignore[attr-defined]
            for p in _values(a, args):
                workdirs[p.resolve()] = a.path_owns  # type: ignore[attr-defined]
    for a in actions:
        role = a.path_role  # type: ignore[attr-defined]
        for p in _values(a, args) if role != "workdir" else []:
            if role == "input":
                out.append((p, f"the {_option(a)} input", False))
            w = _workdir_of(p)
            if w is not None and role == "output_dir" and w == p and _ours(p, parser):
                continue  # an earlier output of this command that keeps a manifest
            if w is not None and w.resolve() not in workdirs:
                workdirs[w.resolve()] = ()
                found.add(w.resolve())
    for w, owns in workdirs.items():
        if (w / MANIFEST).is_file():
            try:
                out += Workdir(w, create=False).protected(own=owns, parts=parts)
            except InputError:  # a manifest.json of the user's beside an input
                if w not in found:
                    raise
        else:
            out.append((w, "the work directory", True))
    return tuple(out)


def written(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """``"OPTION PATH"`` of what the command writes: its outputs, else its work directories
    (to name the place in the message of an OS error that names no file)."""
    found = {role: [f"{_option(a)} {p}" for a in path_actions(parser)
                    if a.path_role == role for p in _values(a, args)]  # type: ignore[attr-defined]
             for role in ROLES}
    return [x for role in OUTPUT_ROLES for x in found[role]] or found["workdir"]


@contextlib.contextmanager
def guard(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Iterator[None]:
    """Refuse (InputError) an output of the command that is, contains or lies inside one of
    its inputs (see the module); then run the body with those inputs declared to
    :mod:`clusterclip.storage`. Reads only: nothing is created."""
    from clusterclip.storage.outputs import (
        check_writable,
        declared_inputs,
        refuse_cwd,
        refuse_protected,
    )

    protected = protected_paths(parser, args)  # an empty path is refused here
    for a in path_actions(parser):
        role = a.path_role  # type: ignore[attr-defined]
        for path in _values(a, args) if role != "input" else []:
            if role in ("output_dir", "container"):
                refuse_cwd(path, _option(a))
            if role != "workdir":
                refuse_protected(path, protected, _option(a))
            if not path.exists():
                check_writable(path, _option(a))
    # Later checks see what the command reads; its stages write their own parts of W.
    with declared_inputs(protected_paths(parser, args, parts=False)):
        yield

