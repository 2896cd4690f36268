"""Helpers for tests that start real processes (the command line and ``torchrun``) and
for tests that run the docs' recipes as written (``docs_recipe``).

``torchrun`` runs with ``--standalone``: its rendezvous store binds port 0
itself and the workers join that store, so no test picks a port and releases
it for another process to take before torchrun binds it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

# What torchrun sets for its workers; a child must not inherit them from the test runner.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT")


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a child process: one thread each, offline models, no torchrun leftovers."""
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
    return subprocess.run(cli_command(*args), capture_output=True, text=True,
                          env=env or child_env(), timeout=timeout, **kw)


def torchrun_command(*args: Any, nproc: int = 2) -> list[str]:
    """``torchrun --standalone --nproc_per_node NPROC ARGS`` with this interpreter."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(nproc), *map(str, args)]


def torchrun(*args: Any, nproc: int = 2, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node NPROC ARGS`` (a script and its arguments)."""
    return subprocess.run(torchrun_command(*args, nproc=nproc), capture_output=True, text=True,
                          env=env or child_env(), timeout=timeout)


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
