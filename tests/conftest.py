"""Shared fixtures. Tests use the corpus bundled with the package, so they do
not depend on anything outside the repository. Helpers for tests that start
processes (the command line, ``torchrun``, their environment) are in ``_helpers.py``."""

from __future__ import annotations

import os

import pytest

# Keep the 2-core CI machine from oversubscribing when torch and BLAS both spawn threads.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# No seek-index cache in the user's home from tests (tests of the cache pass cache_dir).
os.environ.setdefault("CLUSTERCLIP_CACHE", "off")


@pytest.fixture(scope="session")
def pydocs_path():
    from clusterclip.data import pydocs_path

    return pydocs_path()
