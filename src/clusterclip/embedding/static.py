"""The fast CPU embedder: sums of static word-piece vectors, no network per document.

A document's vector is the L2-normalised sum of ``table[p]`` over the word
pieces ``p`` of its first words (the MiniLM tokenizer's vocabulary). Two tables:

- ``distilled`` (the default, ``--embedder fast``): every vocabulary token run
  alone through MiniLM (``[CLS] token [SEP]``, mean-pooled), centred and
  reduced to ``dim`` dimensions by PCA over the vocabulary, each row scaled by
  a smooth-inverse-frequency weight ``a / (a + p(token))`` with ``p`` a Zipf
  law over the token's id (the vocabulary lists word pieces roughly by
  frequency). Computed once per model and cached on disk
  (:func:`clusterclip.io.cache_dir`; with ``CLUSTERCLIP_CACHE=off`` it is computed
  again in every process); it needs no corpus statistics.
- ``random``: a fixed Gaussian matrix with IDF weights from a sample of the
  corpus (:meth:`StaticEmbedder.prepare`), i.e. TF-IDF over word pieces
  followed by a random projection: the default before
  ``STATIC_VERSION`` 3, kept as the lexical baseline.

``bench_embed.py`` measures both against MiniLM on the bundled corpus (labels
are doc folders: lexical) and on WordNet glosses (labels are semantic
categories): the distilled table keeps the lexical corpus's NMI within a few
per cent and more than doubles it on the semantic one.

Speed comes from splitting text on whitespace and caching each distinct
chunk's word pieces, so the tokenizer runs once per distinct chunk, not once
per document.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import Embedder, l2_normalize
from clusterclip.embedding.transformer import _local_model, bundled_minilm_path, model_identity
from clusterclip.errors import InputError
from clusterclip.io import cache_dir, fingerprint, save_npy

# Changes whenever a recipe changes the vectors (part of the embed stage's identity).
STATIC_VERSION = 4
# Version of the raw distilled token vectors cached on disk (unchanged since 2).
_RAW_VERSION = 2
# SIF constant: a token's weight is a / (a + p), p its Zipf probability by id.
_SIF_A = 1e-3
# Documents of prepare()'s sample whose mean vector the distilled table's vectors are
# centred on (sums of static token vectors share one large common direction).
_CENTRE_SAMPLE = 2000
# Characters read per requested word before checking whether the cut was short.
_CHARS_PER_WORD = 12
# Distinct words kept in the chunk cache before it is reset (bounds memory; the
# vectors do not depend on the cache, only the speed does).
_MAX_CACHED_WORDS = 500_000
# Chunks per tokenizer input when tokenizing unseen chunks (parallel across inputs).
_GROUP = 2048
# Runs of characters other than whitespace and ASCII punctuation, or one ASCII
# punctuation character: where BERT's pre-tokenizer always cuts.
_ASCII_PUNCT_SPLIT = re.compile(r"[^\s!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")


def distill_token_table(model_path: Path, batch_size: int = 512, progress: bool = True
                        ) -> np.ndarray:
    """Embed every vocabulary token alone with a sentence-transformers model.

    Returns V x d float32 (not normalised). Costs one forward pass over
    V three-token inputs (about a minute on 2 CPU cores for MiniLM).
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from tqdm import tqdm

    model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True).eval()
    tok = model.tokenizer
    vocab = len(tok)
    specials = [t for t in (tok.cls_token_id, tok.sep_token_id) if t is not None]
    get_dim = getattr(model, "get_embedding_dimension", None) or \
        model.get_sentence_embedding_dimension
    out = np.zeros((vocab, int(get_dim())), dtype=np.float32)
    bar = tqdm(total=vocab, desc="distilling static token vectors", unit="tok",
               disable=not progress, leave=False)
    with torch.inference_mode():
        for start in range(0, vocab, batch_size):
            ids = torch.arange(start, min(start + batch_size, vocab))
            cols = [ids]
            if len(specials) == 2:
                cols = [torch.full_like(ids, specials[0]), ids, torch.full_like(ids, specials[1])]
            input_ids = torch.stack(cols, 1)
            features = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                        "token_type_ids": torch.zeros_like(input_ids)}
            emb = model(features)["token_embeddings"]
            # Mean over the tokens, as the model's mean pooling would do.
            out[start:start + len(ids)] = emb.mean(1).numpy()
            bar.update(len(ids))
    bar.close()
    return out


def sif_weights(vocab: int, a: float = _SIF_A) -> np.ndarray:
    """``a / (a + p(i))`` for token ids ``i``, ``p`` a Zipf law over the id (rank + 10)."""
    p = 1.0 / (np.arange(vocab, dtype=np.float64) + 10.0)
    p /= p.sum()
    return (a / (a + p)).astype(np.float32)


def pca_table(raw: np.ndarray, dim: int) -> np.ndarray:
    """Rows of ``raw`` centred and projected on its top ``dim`` principal axes (float32).

    Each axis's sign is fixed (its largest coefficient positive), so the table
    does not depend on the sign convention of the eigen-solver.
    """
    x = raw.astype(np.float64)
    x -= x.mean(0)
    vals, vecs = np.linalg.eigh(x.T @ x)
    axes = vecs[:, np.argsort(vals)[::-1][:dim]]
    big = np.abs(axes).argmax(0)
    axes *= np.sign(axes[big, np.arange(axes.shape[1])])
    return (x @ axes).astype(np.float32)


def distilled_table(model_path: Path, dim: int = 256, progress: bool = True
                    ) -> tuple[np.ndarray, str]:
    """The ``distilled`` table (PCA to ``dim``, SIF-weighted rows) and where it came from.

    Computed once per model and cached in :func:`clusterclip.io.cache_dir` (``"cached"``;
    not at all with ``CLUSTERCLIP_CACHE=off``);
    otherwise derived from the cached raw token vectors (``"derived"``) or,
    the first time ever, from a distillation run (``"distilled"``, a minute or
    more on 2 cores).
    """
    ident = model_identity(model_path)
    folder = cache_dir()
    name = f"static{STATIC_VERSION}-pca{dim}-" \
        f"{fingerprint({'v': STATIC_VERSION, 'dim': dim, 'a': _SIF_A, 'model': ident})}.npy"
    table = None if folder is None else _load_cached(folder / name)
    if table is not None:
        return table, "cached"
    raw_name = f"static-{fingerprint({'v': _RAW_VERSION, 'model': ident})}.npy"
    raw = None if folder is None else _load_cached(folder / raw_name)
    source = "derived"
    if raw is None:
        raw = distill_token_table(model_path, progress=progress)
        if folder is not None:
            save_npy(folder / raw_name, raw)
        source = "distilled"
    if dim > raw.shape[1]:
        raise InputError(f"static table of {dim} dimensions: the model has only {raw.shape[1]}")
    table = pca_table(raw, dim) * sif_weights(len(raw))[:, None]
    if folder is not None:
        save_npy(folder / name, table)
    return table, source


def _load_cached(path: Path) -> np.ndarray | None:
    if not path.exists():
        return None
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None  # a damaged cache is rebuilt


class StaticEmbedder(Embedder):
    """Fast CPU embedder (``--embedder fast``): sums of static word-piece vectors.

    A document's vector is ``sum over its word pieces p of w(p) * table[p]``,
    L2-normalised. ``table="distilled"`` (the default) uses MiniLM's token
    vectors, PCA-reduced and SIF-weighted (:func:`distilled_table`), ``w = 1``;
    ``table="random"`` is a fixed Gaussian V x ``dim`` matrix with ``w`` the IDF
    over a sample of the corpus (:meth:`prepare`): TF-IDF plus a random projection.

    Text is split on whitespace into chunks; each distinct chunk is tokenized
    once and its word pieces cached, so the tokenizer does not run per
    document. ``max_length`` counts whitespace-separated words, not model tokens.
    """

    name = "fast"

    def __init__(self, model: str | os.PathLike[str] | None = None, *, max_length: int = 256,
                 batch_size: int = 1024, table: str = "distilled", dim: int = 256,
                 progress: bool = True) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        from tokenizers import Tokenizer

        if table not in ("random", "distilled"):
            raise InputError(f"static table {table!r}: expected random or distilled")
        self.path = _local_model(model, bundled_minilm_path())
        tok_file = self.path / "tokenizer.json"
        if not tok_file.exists():
            raise InputError(f"{self.path}: no tokenizer.json (--embedder fast needs a model "
                             f"with a fast tokenizer)")
        self.tokenizer = Tokenizer.from_file(str(tok_file))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.table_kind = table
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        # Per-piece weights: IDF for the random table (set by prepare), none otherwise.
        self.idf: np.ndarray | None = None
        if table == "random":
            rng = np.random.default_rng(0)
            self.table = (rng.standard_normal((vocab, dim), dtype=np.float32)
                          / np.float32(math.sqrt(dim)))
            self.idf = np.ones(vocab, dtype=np.float32)
            self.table_source = "random"
        else:
            self.table, self.table_source = distilled_table(self.path, dim, progress)
        self.dim = int(self.table.shape[1])
        self.unk_id = self.tokenizer.token_to_id("[UNK]") or 0
        # Lower-cased chunk keys (fewer distinct chunks) only where the tokenizer
        # lower-cases anyway, so the word pieces cannot change.
        enc = self.tokenizer.encode_batch(["Word", "word"], add_special_tokens=False)
        self._lower = enc[0].ids == enc[1].ids
        # BERT-style tokenizers (BertPreTokenizer + WordPiece) always cut words at
        # ASCII punctuation, so chunks may be cut there too (far fewer distinct
        # chunks), and a lower-case ASCII word found whole in the vocabulary is its
        # own single piece (no tokenizer call).
        spec = json.loads(self.tokenizer.to_str())
        self._bert = ((spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
                      and spec["model"].get("type") == "WordPiece")
        self._vocab = self.tokenizer.get_vocab(with_added_tokens=False) \
            if self._bert and self._lower else {}
        self.n_sample = 0
        # Mean vector of prepare()'s sample (distilled table): subtracted, then renormalised.
        self.centre: np.ndarray | None = None
        self._reset_cache()

    def identity(self) -> dict[str, Any]:
        ident = {**super().identity(), "static_version": STATIC_VERSION,
                 "table": self.table_kind, "model": model_identity(self.path)}
        if self.table_kind == "distilled":
            ident["sif_a"] = _SIF_A
            ident["centre_sample"] = _CENTRE_SAMPLE
        return ident

    # -- corpus statistics --------------------------------------------------
    def prepare(self, sample_texts: Sequence[str]) -> None:
        """Corpus statistics over a fixed sample of texts.

        Random table: the inverse document frequency of each word piece.
        Distilled table: the mean vector of the first ``_CENTRE_SAMPLE`` texts, which
        :meth:`encode` then subtracts. Sums of static token vectors all lean one way
        (mean cosine between unrelated pydocs sections 0.88 without it, 0.005 with
        it), which leaves no room for a cosine threshold such as dedup's.
        """
        if self.idf is None:
            self.centre = None
            part = list(sample_texts[:_CENTRE_SAMPLE])
            if part:
                x = self.encode(part).astype(np.float64)
                self.centre = x[np.any(x != 0, axis=1)].mean(0).astype(np.float32)
            self.n_sample = len(part)
            return
        vocab = len(self.table)
        df = np.zeros(vocab, dtype=np.int64)
        for start in range(0, len(sample_texts), self.batch_size):
            rows, counts = self._lookup([self._chunks(t)
                                         for t in sample_texts[start:start + self.batch_size]])
            pieces, piece_doc = self._expand(rows, np.repeat(np.arange(len(counts)), counts))
            # each (document, piece) pair once: document frequency
            pairs = np.unique(piece_doc * vocab + pieces)
            df += np.bincount(pairs % vocab, minlength=vocab)
        n = len(sample_texts)
        self.n_sample = n
        self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32) if n else \
            np.ones(vocab, dtype=np.float32)

    # -- chunks -> word pieces ----------------------------------------------
    def _chunks(self, text: str) -> list[str]:
        """The first ``max_length`` chunks of ``text``.

        Exact without splitting all of a long text: when a cut yields more
        chunks than needed, the chunk the cut may have split lies past the limit.
        """
        m = self.max_length
        cut = m * _CHARS_PER_WORD
        while True:
            part = text[:cut]
            if self._lower:
                part = part.lower()
            chunks = part.split(maxsplit=m)
            if len(chunks) > m or cut >= len(text):
                if not self._bert:
                    return chunks[:m]
                return _ASCII_PUNCT_SPLIT.findall(" ".join(chunks[:m]) if len(chunks) > m
                                                  else part)
            cut *= 4

    def _reset_cache(self) -> None:
        self._row_of: dict[str, int] = {}
        # word pieces of cached chunk j: _pflat[_pstart[j] : _pstart[j] + _plen[j]]
        self._pstart = np.zeros(0, dtype=np.int64)
        self._plen = np.zeros(0, dtype=np.int64)
        self._pflat = np.zeros(0, dtype=np.int64)
        self._pused = 0

    def _lookup(self, chunks: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """Cache rows of all documents' chunks, concatenated, and each document's count.

        Unseen chunks are added first (one tokenizer call for the batch).
        """
        flat = [c for cs in chunks for c in cs]
        self._add_chunks(flat)
        rows = np.fromiter(map(self._row_of.__getitem__, flat), np.int64, len(flat))
        return rows, np.fromiter(map(len, chunks), np.int64, len(chunks))

    def _expand(self, rows: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Word pieces of cached chunks ``rows``, each with its ``owner`` repeated."""
        lens = self._plen[rows]
        total = int(lens.sum())
        ends = np.cumsum(lens)
        pos = np.arange(total) - np.repeat(ends - lens, lens) + np.repeat(self._pstart[rows], lens)
        return self._pflat[pos], np.repeat(owner, lens)

    def _add_chunks(self, chunks: list[str]) -> None:
        new = set(chunks)
        new.difference_update(self._row_of)
        if not new:
            return
        new_list = sorted(new)  # a fixed order, whatever the string hashes
        n = len(self._row_of)
        need = n + len(new_list)
        if need > len(self._plen):
            cap = max(need, 2 * len(self._plen))
            self._pstart = _grow(self._pstart, cap)
            self._plen = _grow(self._plen, cap)
        get = self._vocab.get
        whole = [get(c) if c.isascii() else None for c in new_list] if self._vocab else \
            [None] * len(new_list)
        rest = [c for c, i in zip(new_list, whole, strict=True) if i is None]
        tokenized = iter(self._tokenize_chunks(rest))
        pieces = [next(tokenized) if i is None else np.array([i], dtype=np.int64)
                  for i in whole]
        lens = np.fromiter(map(len, pieces), np.int64, len(pieces))
        flat = np.concatenate(pieces)
        if self._pused + len(flat) > len(self._pflat):
            self._pflat = _grow(self._pflat, max(self._pused + len(flat), 2 * len(self._pflat)))
        self._pflat[self._pused:self._pused + len(flat)] = flat
        self._pstart[n:need] = self._pused + np.cumsum(lens) - lens
        self._plen[n:need] = lens
        self._pused += len(flat)
        self._row_of.update(zip(new_list, range(n, need), strict=True))


    def _tokenize_chunks(self, chunks: list[str]) -> list[np.ndarray]:
        """Word-piece ids of each chunk, with few tokenizer calls for all of them.

        Chunks are joined by spaces into groups and the groups tokenized in one
        batch (in parallel threads unless TOKENIZERS_PARALLELISM=false); the
        tokenizer splits on whitespace, so pieces never straddle two chunks, and
        character offsets tell which chunk each piece came from. A chunk that
        yields no piece (only characters the normaliser drops) gets the unknown token.
        """
        out: list[np.ndarray] = []
        groups = [chunks[i:i + _GROUP] for i in range(0, len(chunks), _GROUP)]
        encs = self.tokenizer.encode_batch([" ".join(g) for g in groups],
                                           add_special_tokens=False)
        unk = np.array([self.unk_id], dtype=np.int64)
        for group, enc in zip(groups, encs, strict=True):
            lengths = np.fromiter(map(len, group), np.int64, len(group))
            starts = np.zeros(len(group), dtype=np.int64)
            np.cumsum(lengths[:-1] + 1, out=starts[1:])
            ids = np.array(enc.ids, dtype=np.int64)
            first_char = np.array([o[0] for o in enc.offsets], dtype=np.int64)
            owner = np.searchsorted(starts, first_char, side="right") - 1
            bounds = np.searchsorted(owner, np.arange(len(group) + 1))
            out.extend(ids[bounds[i]:bounds[i + 1]] if bounds[i + 1] > bounds[i] else unk
                       for i in range(len(group)))
        return out

    # -- encoding -----------------------------------------------------------
    def encode(self, texts: Sequence[str],
               on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        """n x d float32, L2-normalised; a text without any chunk gives a zero row.

        ``on_batch(n)`` is called after each batch of ``n`` texts (progress bars).
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            # Reset only between batches, so rows looked up for a batch stay valid.
            if len(self._row_of) > _MAX_CACHED_WORDS:
                self._reset_cache()
            part = texts[start:start + self.batch_size]
            rows, counts = self._lookup([self._chunks(t) for t in part])
            pieces, _ = self._expand(rows, rows)
            per_doc = np.bincount(np.repeat(np.arange(len(part)), counts),
                                  weights=self._plen[rows], minlength=len(part))
            out[start:start + len(part)] = _weighted_sums(self.table, self.idf, pieces,
                                                          per_doc.astype(np.int64))
            if on_batch is not None:
                on_batch(len(part))
        out = l2_normalize(out)
        if self.centre is not None:
            empty = ~np.any(out != 0, axis=1)
            out = l2_normalize(out - self.centre)
            out[empty] = 0.0
        return out


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
    out[:len(a)] = a
    return out


def _weighted_sums(table: np.ndarray, weights: np.ndarray | None, rows: np.ndarray,
                   counts: np.ndarray) -> np.ndarray:
    """For each document, sum of ``weights[r] * table[r]`` (``weights`` None: 1) over
    its ``rows``, ``counts[i]`` of them for document ``i`` (n x d float32)."""
    import torch

    offsets = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    w = None if weights is None else torch.from_numpy(weights[rows])
    return torch.nn.functional.embedding_bag(
        torch.from_numpy(rows), torch.from_numpy(table), torch.from_numpy(offsets),
        mode="sum", per_sample_weights=w).numpy()
