"""Tokens per document, and where the counts came from (the ``tokens`` stage, which
counts them once per corpus and tokenizer into ``W/tokens.npy``, is
:mod:`clusterclip.stages.tokens`).

Token budgets and token-balanced cluster weights, which only need the counts,
live on the sampling side (:mod:`clusterclip.sampling.budget`).

Counts come from one of three sources, and every output says which:

- the **estimate** (default, free): ``ceil(characters / 4)`` per document with
  text, from the corpus index (``W/corpus`` stores each text's length in
  characters; 4 characters per token is the usual rule of thumb for English
  with a BPE tokenizer; code and other languages differ, e.g. the bundled
  Python-docs corpus has 3.4 characters per MiniLM WordPiece token);
- a **tokenizer** (``--tokenizer PATH``, a local Hugging Face fast tokenizer,
  :func:`load_tokenizer`): every text tokenized once without special tokens,
  streamed in batches, cached as ``W/tokens.npy`` (int64) by the work
  directory's ``tokens`` stage, keyed by the tokenizer's identity (a hash of
  its serialised definition) and the corpus index, so a rerun reuses it and a
  changed corpus or tokenizer recounts;
- a **file** (``sample --tokens T.npy``): counts you made yourself, for labels
  outside a work directory.

Excluded documents (label -1, no text) count 0 tokens.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.limits import MAX_DOCUMENT_TOKENS

#: Characters per token of the estimate (the text length in the corpus index / 4).
CHARS_PER_TOKEN = 4
_BATCH = 256  # texts per tokenizer call


def load_tokenizer(path: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Any:
    """The Hugging Face tokenizer saved at ``path`` (a folder), loaded offline.

    One loader for every command that takes ``--tokenizer PATH``: nothing is
    downloaded (``local_files_only``). Raises InputError naming ``path`` when it
    is missing, is not a folder, or holds no tokenizer that
    ``transformers.AutoTokenizer`` can load.
    """
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"tokenizer {path}: not a folder that Hugging Face's AutoTokenizer "
                         f"loads", params=("tokenizer",))
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise InputError("tokenizer needs transformers; install the `embed` extra "
                         "(pip install 'clusterclip[embed]')", params=("tokenizer",)) from None
    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True,
                                             trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise InputError(f"tokenizer {path}: cannot load an AutoTokenizer from it ({first})",
                         params=("tokenizer",)) from None


class BackendIds:
    """Token ids of a fast tokenizer, from its Rust backend (``tokenizers.Tokenizer``) called
    directly: ``ids(texts)`` equals ``tokenizer(texts, add_special_tokens=False)["input_ids"]``
    (no truncation, no padding, special tokens in the text split or not as the tokenizer's
    ``split_special_tokens`` says), without transformers' per-call work (it asks the
    backend for offsets too, and builds a ``BatchEncoding``). Pickled as the backend's JSON
    definition: a worker process that unpickles it imports ``tokenizers``, not
    ``transformers``. Made by :func:`backend_ids`.

    Parameters
    ----------
    definition : str
        The backend's serialised definition (``tokenizer.backend_tokenizer.to_str()``).
    split_special_tokens : bool
        Whether special tokens written in a text are split like any other text.

    Examples
    --------
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> t = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> BackendIds(t.to_str(), False)(["a b a", "", "c"])
    [[1, 2, 1], [], [0]]
    """

    def __init__(self, definition: str, split_special_tokens: bool) -> None:
        self.definition, self.split_special_tokens = definition, bool(split_special_tokens)
        self._backend: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"definition": self.definition, "split_special_tokens": self.split_special_tokens}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["definition"], state["split_special_tokens"])  # type: ignore[misc]

    def __call__(self, texts: list[str]) -> list[list[int]]:
        """The token ids of each of ``texts``."""
        if self._backend is None:
            from tokenizers import Tokenizer

            backend = Tokenizer.from_str(self.definition)
            backend.no_truncation()  # as transformers sets it for a call without either
            backend.no_padding()
            backend.encode_special_tokens = self.split_special_tokens
            self._backend = backend
        # encode_batch_fast: the same ids, without the character offsets (tokenizers >= 0.21)
        encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]


def backend_ids(tokenizer: Any) -> BackendIds | None:
    """:class:`BackendIds` of ``tokenizer`` when calling its backend directly gives its
    ids: a transformers fast tokenizer whose class keeps transformers' own ``__call__`` and
    ``_encode_plus`` (a class that changes either may change the ids: None, call the
    tokenizer itself)."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers layout: no shortcut
        return None
    cls = type(tokenizer)
    if (not isinstance(tokenizer, TokenizersBackend)
            or cls.__call__ is not PreTrainedTokenizerBase.__call__
            or cls._encode_plus is not TokenizersBackend._encode_plus):
        return None
    return BackendIds(tokenizer.backend_tokenizer.to_str(),
                      bool(getattr(tokenizer, "split_special_tokens", False)))


def ids_of(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """``tokenizer(texts, add_special_tokens=False)["input_ids"]`` (no truncation, no
    padding); ``tokenizer`` a transformers tokenizer or its :class:`BackendIds`."""
    if isinstance(tokenizer, BackendIds):
        return tokenizer(texts)
    if not texts:  # transformers fails on an empty batch
        return []
    return tokenizer(texts, add_special_tokens=False, truncation=False, padding=False,
                     return_attention_mask=False, return_token_type_ids=False,
                     verbose=False)["input_ids"]


# -- counting ------------------------------------------------------------------------------
def estimate_tokens(text_lengths: Any, valid: Any) -> np.ndarray:
    """int64[N] estimated tokens: ``ceil(characters / 4)`` where ``valid``, else 0."""
    chars = np.asarray(text_lengths, dtype=np.int64)
    return np.where(np.asarray(valid, dtype=bool), -(-chars // CHARS_PER_TOKEN), 0)


def tokenizer_identity(tokenizer: Any) -> str:
    """SHA-256 of a fast tokenizer's serialised definition (vocabulary, merges,
    normalizer, pre-tokenizer, ...) and its class: equal for equal tokenizers,
    wherever they are stored."""
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(f"tokenizer: {type(tokenizer).__name__} is not a fast one "
                         f"(counting needs the `tokenizers` backend, tokenizer.json)",
                         params=("tokenizer",))
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    h.update(tokenizer.backend_tokenizer.to_str().encode())
    return h.hexdigest()


def count_tokens(texts: Iterable[tuple[int, str | None]], n: int, tokenizer: Any, *,
                 progress: bool = False, batch_size: int = _BATCH) -> np.ndarray:
    """int64[n] tokens per document of ``texts`` ((index, text or None) pairs, streamed).

    Each text is tokenized without special tokens and without truncation, in
    batches of ``batch_size``; None (excluded) counts 0.
    """
    from tqdm import tqdm

    out = np.zeros(n, dtype=np.int64)
    idx: list[int] = []
    batch: list[str] = []
    encoder = backend_ids(tokenizer) or tokenizer

    def flush() -> None:
        out[idx] = [len(e) for e in ids_of(encoder, batch)]
        idx.clear()
        batch.clear()

    with tqdm(total=n, desc="counting tokens", unit="doc", disable=not progress,
              leave=False) as bar:
        for i, text in texts:
            if text is not None:
                idx.append(i)
                batch.append(text)
                if len(batch) >= batch_size:
                    flush()
            bar.update()
        if batch:
            flush()
    return out


def load_token_counts(path: str | os.PathLike[str], num_documents: int | None = None
                      ) -> np.ndarray:
    """``--tokens T.npy`` or ``W/tokens.npy``: int64[N] counts, checked (1-D integers >= 0,
    one per document when ``num_documents`` is given)."""
    from clusterclip.storage.arrays import load_npy

    n = num_documents
    a = load_npy(path, "token counts", kinds="iu", ndim=1)
    if n is not None and a.size != n:
        raise InputError(f"{path}: {a.size} token counts but the labels have {n} documents")
    if a.size and int(a.min()) < 0:
        raise InputError(f"{path}: token counts must be >= 0, got {int(a.min())} at index "
                         f"{int(np.argmin(a))}")
    if a.size and int(a.max()) > MAX_DOCUMENT_TOKENS:  # cumulative sums stay in int64
        raise InputError(f"{path}: token count {int(a.max()):,} at index {int(np.argmax(a))} "
                         f"is more than a document holds (at most {MAX_DOCUMENT_TOKENS:,})")
    a = a.astype(np.int64, copy=False)
    # the exact total (32-bit halves summed apart): counts whose sum int64 cannot hold are
    # no real corpus, and every total, cumulative sum and message below would wrap
    total = (int((a >> 32).sum(dtype=np.uint64)) << 32) + int((a & 0xFFFFFFFF).sum(
        dtype=np.uint64))
    if total > np.iinfo(np.int64).max:
        raise InputError(f"{path}: token counts sum to {total:,}, more than int64 holds "
                         f"({np.iinfo(np.int64).max:,}); not a corpus's token counts")
    return a


def describe_source(source: dict[str, Any] | None) -> str:
    """One phrase saying where token counts came from."""
    if not source:
        return "tokens: none"
    if source["method"] == "estimate":
        return (f"estimated as ceil(characters / "
                f"{source.get('chars_per_token', CHARS_PER_TOKEN)}) per document")
    if source["method"] == "file":
        return f"counts from {source.get('file')}"
    return f"counted with the tokenizer at {source.get('tokenizer')}"


def token_summary_lines(s: dict[str, Any]) -> list[str]:
    """The summary's token lines (budget, balance, where the counts came from), if any."""
    out = []
    if s.get("balance_by") == "tokens":
        out.append("balance:     by tokens (cluster weight n_k ** alpha / mean tokens per "
                   "document)")
    if s.get("num_tokens") is not None:
        cut = (f"; the first {s['num_samples']:,} of a {s['sampler_num_samples']:,}-position "
               f"{s['strategy']} schedule" if s.get("sampler_num_samples") else "")
        out.append(f"tokens:      budget {s['num_tokens']:,}, reached at global position "
                   f"{s['num_samples']:,} ({s['schedule_tokens']:,} tokens{cut})")
    if s.get("token_counts"):
        out.append(f"token count: {describe_source(s['token_counts'])}")
    return out
