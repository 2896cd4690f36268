"""Data shipped with the package.

``pydocs.jsonl.gz``: 4,096 sections of the Python documentation (field
``text``; field ``label`` names the documentation folder, e.g. ``library``,
``whatsnew``, ``c-api``). The Python documentation is distributed under the
PSF License; it is the built-in default corpus of ``clusterclip demo`` and the
integration tests.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def pydocs_path() -> Path:
    """Path of the bundled Python-docs corpus (JSONL, gzip)."""
    return DATA_DIR / "pydocs.jsonl.gz"
