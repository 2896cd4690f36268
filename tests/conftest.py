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

# Before the tests import the package's modules: the fingerprint of the code this process
# runs, which every child process the tests launch is checked against
# (_helpers.check_same_code).
import _helpers  # noqa: E402, F401


def pytest_configure(config):
    """Under pytest-xdist (``make test``), the controller fills the checkout's cache before
    the workers start: the fast embedder's distilled table and MiniLM's ONNX export (about
    70 and 60 CPU s on a fresh checkout, seconds once cached). Else both workers would
    build each at the same time, or wait for the other's, in whichever test comes first."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    import gzip
    import subprocess
    import sys
    import tempfile

    from clusterclip.data import pydocs_path

    with tempfile.TemporaryDirectory() as d:
        corpus = Path(d) / "c.jsonl"
        with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
            corpus.write_text("".join(next(f) for _ in range(8)), encoding="utf-8")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs = [subprocess.Popen([sys.executable, "-m", "clusterclip.cli", "embed", str(corpus),
                                   "--workdir", str(Path(d) / name), "--embedder", name,
                                   "--no-progress"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
                 for name in ("fast", "minilm")]
        for p in procs:
            err = p.communicate()[1]
            if p.returncode:  # the tests that embed will fail and say why; say it here too
                print(f"conftest: filling the cache failed: {err[-500:]}", file=sys.stderr)


@pytest.fixture(scope="session")
def pydocs_path():
    from clusterclip.data import pydocs_path

    return pydocs_path()
