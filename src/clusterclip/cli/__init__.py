"""``clusterclip`` command line: one subcommand per pipeline stage.

Each subcommand lives in its own module under ``clusterclip.cli`` and exposes
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Those modules import heavy libraries (torch, faiss, matplotlib) inside
``run`` only, so ``clusterclip --help`` stays fast.

An :class:`~clusterclip.errors.InputError` anywhere becomes a one-line message
on stderr and exit code 2; the parameters it names (``world_size``) are shown as
the options that set them (``--world-size``).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
from typing import Any

from clusterclip import __version__
from clusterclip.cli._options import parsed
from clusterclip.errors import InputError, flag_message

# In data-flow order: corpus -> embeddings -> clusters -> sampler -> report.
COMMANDS = ("embed", "cluster", "assign", "dedup", "group", "sample", "run", "export", "report",
            "experiment", "search", "demo")


# Commands that do no linear algebra: numpy's OpenBLAS is loaded with one thread for
# them (its other threads spin after they start: 0.03-0.04 CPU s per process, measured).
NO_BLAS_COMMANDS = frozenset({"sample"})


def _numpy_with_one_blas_thread() -> None:
    """Import numpy with OpenBLAS limited to one thread (read when the library loads),
    unless numpy is imported already or the user set the limit; the environment is
    left as it was (a process this one starts gets the user's)."""
    key = "OPENBLAS_NUM_THREADS"
    if "numpy" in sys.modules or key in os.environ:
        return
    os.environ[key] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[key]


# OS errors that are the machine's or the user's (a full disk, a read-only folder, a file
# where a folder should be), not a bug: one line naming the path and the cause, exit 2.
USER_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EEXIST, errno.ENOTDIR, errno.EISDIR,
                         errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG,
                         errno.ENAMETOOLONG, errno.ENOENT})


def os_error_message(e: OSError, written: list[str]) -> str | None:
    """One line for an OS error of :data:`USER_ERRNOS`, else None: the file (a temporary
    named by what it becomes), or else ``written`` (what the command writes, e.g.
    ``"--out E"``), then the cause. Errors of pyarrow's C++ writers carry their errno
    only in the message; numpy's ``tofile`` says only that a write was cut short."""
    code = e.errno
    if code is None:
        found = re.search(r"\[errno (\d+)\]", str(e), re.I)
        code = int(found[1]) if found else None
    short = code is None and re.fullmatch(r"\d+ requested and \d+ written", str(e))
    if code not in USER_ERRNOS and not short:
        return None
    cause = ("a write was cut short (a full disk or a file size limit)" if short
             else os.strerror(code))
    if e.filename is not None:
        names = [e.filename] + ([] if e.filename2 is None else [e.filename2])
        where = " -> ".join(_TMP_NAME.sub(r"\1", os.fsdecode(n)) for n in names)
    else:
        where = ", ".join(written) or "output"
    return f"{where}: {cause} (nothing half-written is left)"


# a temporary of clusterclip.storage.atomic.atomic_path, in a message: the name it was to take
_TMP_NAME = re.compile(r"\.([^/]+)\.clusterclip-\d+-[A-Za-z0-9_]+\.tmp")


class _Parser(argparse.ArgumentParser):
    """Every parser and sub-parser of the command line: no abbreviated options (``--seed``
    of ``experiment`` would otherwise silently mean ``--seeds``), errors exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # argparse's own errors exit 2 too
        self.exit(2, f"{self.prog}: error: {message}\n")


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append "(default: X)" to the help of every option that has a default and does not
    already state it (store_true flags and options defaulting to None say what they do),
    and the range of every number (clusterclip.cli._options.parsed: its options field's)."""
    for a in parser._actions:
        # the range of an option whose options class declares it is read when the help is
        # shown (the class is imported then), otherwise now
        bounds = (_LazyRange(a.type) if isinstance(a.type, parsed)
                  else getattr(a.type, "range_text", None))
        if bounds:
            a.range_text = bounds  # type: ignore[attr-defined]
            a.help = (f"{a.help} (range: %(range_text)s)" if a.help
                      else "(range: %(range_text)s)")
        if (not a.option_strings or a.required or a.default is None or a.default is False
                or a.default == argparse.SUPPRESS or "default" in (a.help or "")):
            continue
        a.help = f"{a.help} (default: %(default)s)" if a.help else "(default: %(default)s)"


class _LazyRange:
    """An option's range, as ``--help`` shows it: found when shown."""

    def __init__(self, kind: parsed) -> None:
        self.kind = kind

    def __str__(self) -> str:
        return self.kind.range_text


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only`` (a command's name), every command is there
    but only that one is imported and has its help and options (they may import what a
    choice list needs, e.g. the sampler's strategies), so running one command imports
    nothing another one needs."""
    parser = _Parser(
        prog="clusterclip",
        description="Balance LLM training data by semantic cluster: embed a corpus, cluster it "
                    "with spherical K-means, and sample a ClusterClip training schedule.")
    parser.add_argument("--version", action="version", version=f"clusterclip {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        if only is not None and name != only:
            # Only the command run is imported (its one line of help is never shown here).
            sub.add_parser(name)
            continue
        module = importlib.import_module(f"clusterclip.cli.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        if "--no-progress" not in p._option_string_actions:  # every command takes it
            p.add_argument("--no-progress", action="store_true",
                           help="no progress bars (they are drawn only on a terminal)")
        for q in (p, *_subcommands(p)):  # search propose and search fit too
            _show_defaults(q)
        p.set_defaults(_module=module, _parser=p)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of ``parser``'s subcommands (``search``: ``propose``, ``fit``)."""
    return [q for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for q in a.choices.values()]


def _flags(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """Parameter name -> the option of ``command`` that sets it, so that an error raised
    in terms of parameters (``world_size``) is shown in terms of options
    (``--world-size``): an option's ``dest`` in ``parser`` (the command's, or its
    subcommand's: ``search fit``), and the command module's ``PARAM_FLAGS`` for
    parameters set by an option of another name (``n_clusters``: ``--clusters``)."""
    flags = {a.dest: max(a.option_strings, key=len)
             for a in parser._actions if a.option_strings}
    flags.update(getattr(importlib.import_module(f"clusterclip.cli.{command}"),
                         "PARAM_FLAGS", {}))
    return flags


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The command is the first argument (the only top-level options are --help, --version).
    only = argv[0] if argv and argv[0] in COMMANDS else None
    if only in NO_BLAS_COMMANDS:
        _numpy_with_one_blas_thread()
    parser = build_parser(only)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or argparse's one-line refusal (exit 2)
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    from clusterclip.cli._paths import guard, written

    # a subcommand's errors name it (``clusterclip search propose: error: ...``)
    name = " ".join([args.command] + ([args.search_command] if getattr(
        args, "search_command", None) else []))
    try:
        with guard(args._parser, args):
            return int(args._module.run(args) or 0)
    except InputError as e:
        message = flag_message(e, _flags(args._parser, args.command))
        print(f"clusterclip {name}: error: {message}", file=sys.stderr)
        return 2
    except OSError as e:
        message = os_error_message(e, written(args._parser, args))
        if message is None:
            raise
        print(f"clusterclip {name}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"clusterclip {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
