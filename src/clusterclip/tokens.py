"""Tokenizers for token budgets and token-level exports (a local Hugging Face tokenizer).

One loader for every command that takes ``--tokenizer PATH``: nothing is
downloaded (``local_files_only``), and a path that is not a tokenizer is a
one-line error naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError


def load_tokenizer(path: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Any:
    """The Hugging Face tokenizer saved at ``path`` (a folder), loaded offline.

    Raises InputError naming ``path`` when it is missing, is not a folder, or
    holds no tokenizer that ``transformers.AutoTokenizer`` can load.
    """
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"--tokenizer {path}: not a folder holding a Hugging Face tokenizer")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise InputError("--tokenizer needs transformers; install the `embed` extra "
                         "(pip install 'clusterclip[embed]')") from None
    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True,
                                             trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise InputError(f"--tokenizer {path}: cannot load a tokenizer ({first})") from None
