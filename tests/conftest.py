"""Shared fixtures. Tests use the corpus bundled with the package, so they do
not depend on anything outside the repository. Helpers for tests that start
processes (the command line, ``torchrun``, their environment) are in ``_helpers.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Keep the 2-core CI machine from oversubscribing when torch and BLAS both spawn threads.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Caches (the fast embedder's distilled table, the sampler's seek index) in the checkout's
# .cache/ (git-ignored), never in the user's home; built once per checkout, then reused.
os.environ.setdefault("CLUSTERCLIP_CACHE",
                      str(Path(__file__).resolve().parents[1] / ".cache" / "clusterclip"))


@pytest.fixture(scope="session")
def pydocs_path():
    from clusterclip.data import pydocs_path

    return pydocs_path()
