"""The ``tokens`` stage: tokens per document of ``W/corpus``, and where they came from.

Without a tokenizer, the estimate from the corpus index (no stage, nothing written);
with one, ``W/tokens.npy``, counted once per corpus and tokenizer identity (see
:mod:`clusterclip.tokens` for the sources and the counting itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.tokens import (
    CHARS_PER_TOKEN,
    count_tokens,
    estimate_tokens,
    load_token_counts,
    load_tokenizer,
    tokenizer_identity,
)
from clusterclip.workdir import CORPUS, TOKENS, Workdir

STAGE = "tokens"


@dataclass(frozen=True, kw_only=True)
class TokensOptions:
    """``tokenizer``: a local Hugging Face fast tokenizer folder, or None for the
    estimate; ``progress``: a progress bar while counting."""

    tokenizer: str | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.tokenizer is not None:
            object.__setattr__(self, "tokenizer", str(self.tokenizer))


def _corpus(w: Workdir) -> Any:
    path = w.path(CORPUS)
    if not path.is_dir():
        raise InputError(f"{path}: missing, so no token counts (run `clusterclip embed` first, "
                         f"or give counts: `clusterclip sample --tokens T.npy`)")
    return w.corpus()


def run(w: Workdir, options: TokensOptions) -> tuple[np.ndarray, dict[str, Any]]:
    """Tokens per document of ``w``'s corpus, and where they came from.

    Without a tokenizer: the estimate from ``W/corpus``. With it: the ``tokens`` stage
    (``W/tokens.npy``, counted once per corpus and tokenizer). Returns ``(int64[N],
    source)``; ``source`` is ``{"method": "estimate", "chars_per_token": 4}`` or
    ``{"method": "tokenizer", "tokenizer": PATH, "identity": SHA256}``.
    """
    if options.tokenizer is None:
        corpus = _corpus(w)
        return (estimate_tokens(corpus.text_lengths, corpus.valid),
                {"method": "estimate", "chars_per_token": CHARS_PER_TOKEN})
    from clusterclip.distributed import is_main

    tok = load_tokenizer(options.tokenizer)
    ident = tokenizer_identity(tok)
    source = {"method": "tokenizer", "tokenizer": str(Path(options.tokenizer).resolve()),
              "identity": ident}

    def work(run: Any) -> dict[str, Any] | None:
        if not is_main():
            return None
        from clusterclip.storage.arrays import save_npy

        corpus = _corpus(w)
        corpus.verify_files()
        counts = count_tokens(corpus.iter_texts(), len(corpus), tok,
                              progress=options.progress)
        save_npy(w.path(TOKENS), counts)
        return {**source, "documents": int(counts.size), "total_tokens": int(counts.sum())}

    # The path is a parameter for the record only: the identity decides reuse.
    w.run_stage(STAGE, key={"identity": ident}, params=source, reads=[CORPUS],
                outputs=[TOKENS], work=work)
    return load_token_counts(w.path(TOKENS)), source


def recorded(w: Workdir) -> tuple[np.ndarray, dict[str, Any]]:
    """What the report counts in: the counts ``W/schedule.npy`` was made with when its
    ``sample`` stage recorded them (the estimate, or the tokenizer's), else
    ``W/tokens.npy`` when the ``tokens`` stage is current (the counts of the last
    ``--tokenizer``), else the estimate (source says why)."""
    used = ((w.stage("sample") or {}).get("params") or {}).get("token_counts") or {}
    rec = w.stage(STAGE)
    estimate = TokensOptions()
    if used.get("method") != "estimate" and rec is not None and w.path(TOKENS).is_file():
        try:
            w.require(STAGE)
        except InputError as e:
            counts, source = run(w, estimate)
            return counts, {**source, "note": f"W/{TOKENS} not used: {e}"}
        params = rec.get("params") or {}
        return (load_token_counts(w.path(TOKENS)),
                {"method": "tokenizer", "tokenizer": params.get("tokenizer"),
                 "identity": params.get("identity"), "file": str(w.path(TOKENS))})
    return run(w, estimate)
