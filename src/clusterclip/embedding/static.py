"""The fast CPU embedder: sums of static word-piece vectors, no network per document.

A document's vector is the L2-normalised sum of ``table[p]`` over the word
pieces ``p`` of its first words (the MiniLM tokenizer's vocabulary). Two tables:

- ``distilled`` (the default, ``--embedder fast``): every vocabulary token run
  alone through MiniLM (``[CLS] token [SEP]``, mean-pooled), centred and
  reduced to ``dim`` dimensions by PCA over the vocabulary, each row scaled by
  a smooth-inverse-frequency weight ``a / (a + p(token))`` with ``p`` a Zipf
  law over the token's id (the vocabulary lists word pieces roughly by
  frequency). Computed once per model and cached on disk
  (:func:`clusterclip.storage.cache.cache_dir`; with ``CLUSTERCLIP_CACHE=off`` it is computed
  again in every process); it needs no corpus statistics.
- ``random``: a fixed Gaussian matrix with IDF weights from a sample of the
  corpus (:meth:`StaticEmbedder.prepare`), i.e. TF-IDF over word pieces
  followed by a random projection: the default before
  ``STATIC_VERSION`` 3, kept as the lexical baseline.

The distilled table can be tuned to a corpus (``--tune N``, :meth:`StaticEmbedder.tune`,
:mod:`clusterclip.embedding.tune`). ``bench_embed.py`` measures it against MiniLM and a
Model2Vec model on three labelled corpora (docs/benchmarks.md, "Embedding").

Speed comes from splitting text on whitespace and caching each distinct
word's word pieces, so only new words are cut and tokenized (once per batch
of new words), not every document; the sums are a sparse (documents x
vocabulary) matrix times the table (scipy), so a process that only runs this
embedder never imports torch once the table is cached. The vectors of
``prepare()``'s sample are computed once and reused by ``encode()``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, compress, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clusterclip.embedding.base import MINILM_MAX_LENGTH, Embedder, unit_rows
from clusterclip.embedding.transformer import (
    _local_model,
    bundled_minilm_path,
    model_identity,
    transformer_folder,
)
from clusterclip.errors import InputError
from clusterclip.kernels import kernels_enabled, load_kernel
from clusterclip.storage.arrays import save_npy
from clusterclip.storage.cache import cache_dir
from clusterclip.storage.digests import fingerprint

if TYPE_CHECKING:
    from clusterclip.embedding.tune import TunePlan

# Changes whenever a recipe changes the vectors (part of the embed stage's identity).
# 5: vectors normalised in a fixed order (base.unit_rows), whatever the batch or the CPU.
STATIC_VERSION = 5
# Version of the raw distilled token vectors cached on disk (unchanged since 2).
_RAW_VERSION = 2
# SIF constant: a token's weight is a / (a + p), p its Zipf probability by id.
_SIF_A = 1e-3
# Documents of prepare()'s sample whose mean vector the distilled table's vectors are
# centred on (sums of static token vectors share one large common direction).
_CENTRE_SAMPLE = 2000
# prepare()'s sample texts at most this long (and this many characters in all) have their
# vectors kept for encode() to reuse.
_SAMPLE_KEPT_CHARS = 1 << 16
_SAMPLE_KEPT_TOTAL = 1 << 24
# Characters read per requested word before checking whether the cut was short.
_CHARS_PER_WORD = 12
# Distinct words kept in the chunk cache before it is reset (bounds memory; the
# vectors do not depend on the cache, only the speed does).
_MAX_CACHED_WORDS = 500_000
# Chunks per tokenizer input when tokenizing unseen chunks (parallel across inputs).
_GROUP = 2048
# Runs of characters other than whitespace and ASCII punctuation, or one ASCII
# punctuation character: where BERT's pre-tokenizer always cuts.
_ASCII_PUNCT = "!-/:-@\\[-`{-~"
_ASCII_PUNCT_SPLIT = re.compile(rf"[^\s{_ASCII_PUNCT}]+|[{_ASCII_PUNCT}]")


# The optional compiled loops (setup.py, _static.c, the VERSION this code calls); the
# Python and scipy path is the reference.
_kernel = load_kernel("clusterclip.embedding._static", 1)


def kernel_enabled() -> bool:
    """Whether new embedders use the compiled loops: they are built and
    ``CLUSTERCLIP_KERNEL`` is not ``off`` (:func:`clusterclip.kernels.kernels_enabled`)."""
    return _kernel is not None and kernels_enabled()


def distill_token_table(model_path: Path, batch_size: int = 4096, progress: bool = True,
                        tokens: int | None = None) -> np.ndarray:
    """Embed every vocabulary token alone with a sentence-transformers model.

    Returns V x d float32 (not normalised; the first ``tokens`` rows only when
    given): the mean of the model's token
    embeddings over ``[CLS] token [SEP]``, as the model's mean pooling would do.
    Costs one forward pass over V three-token inputs (about a minute on 2 CPU
    cores for MiniLM). The transformer is loaded with ``transformers`` alone
    (what sentence-transformers' Transformer module runs, without importing
    sentence-transformers); large batches run the same sums faster on a CPU.
    """
    import torch
    from tqdm import tqdm
    from transformers import AutoModel, AutoTokenizer

    folder = transformer_folder(model_path)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()
    vocab = len(tok) if tokens is None else min(tokens, len(tok))
    specials = [t for t in (tok.cls_token_id, tok.sep_token_id) if t is not None]
    out = np.zeros((vocab, int(model.config.hidden_size)), dtype=np.float32)
    bar = tqdm(total=vocab, desc="distilling static token vectors", unit="tok",
               disable=not progress, leave=False)
    with torch.inference_mode():
        for start in range(0, vocab, batch_size):
            ids = torch.arange(start, min(start + batch_size, vocab))
            cols = [ids]
            if len(specials) == 2:
                cols = [torch.full_like(ids, specials[0]), ids, torch.full_like(ids, specials[1])]
            input_ids = torch.stack(cols, 1)
            emb = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                        token_type_ids=torch.zeros_like(input_ids), return_dict=True)[0]
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
    mean, axes = pca_axes(raw, dim)
    return ((raw.astype(np.float64) - mean) @ axes).astype(np.float32)


def pca_axes(raw: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean row of ``raw`` (float64, d) and its top ``dim`` principal axes (d x dim,
    orthonormal columns, signs fixed as :func:`pca_table` says)."""
    x = raw.astype(np.float64)
    mean = x.mean(0)
    x -= mean
    vals, vecs = np.linalg.eigh(x.T @ x)
    axes = vecs[:, np.argsort(vals)[::-1][:dim]]
    big = np.abs(axes).argmax(0)
    axes *= np.sign(axes[big, np.arange(axes.shape[1])])
    return mean, axes


def distilled_table(model_path: Path, dim: int = 256, progress: bool = True
                    ) -> tuple[np.ndarray, str]:
    """The ``distilled`` table (PCA to ``dim``, SIF-weighted rows) and where it came from.

    Computed once per model and cached in :func:`clusterclip.storage.cache.cache_dir` (``"cached"``;
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
    raw, source = raw_token_table(model_path, progress)
    if dim > raw.shape[1]:
        raise InputError(f"static table of {dim} dimensions: the model has only {raw.shape[1]}")
    table = pca_table(raw, dim) * sif_weights(len(raw))[:, None]
    if folder is not None:
        save_npy(folder / name, table)
    return table, source


def raw_token_table(model_path: Path, progress: bool = True) -> tuple[np.ndarray, str]:
    """:func:`distill_token_table` of the model, cached (``"derived"``: from the cache,
    ``"distilled"``: computed now)."""
    folder = cache_dir()
    raw_name = f"static-{fingerprint({'v': _RAW_VERSION, 'model': model_identity(model_path)})}.npy"
    raw = None if folder is None else _load_cached(folder / raw_name)
    if raw is not None:
        return raw, "derived"
    raw = distill_token_table(model_path, progress=progress)
    if folder is not None:
        save_npy(folder / raw_name, raw)
    return raw, "distilled"


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

    def __init__(self, model: str | os.PathLike[str] | None = None, *,
                 max_length: int = MINILM_MAX_LENGTH,
                 batch_size: int = 1024, table: str = "distilled", dim: int = 256,
                 progress: bool = True) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        from tokenizers import Tokenizer

        if table not in ("random", "distilled"):
            raise InputError(f"static table {table!r}: expected random or distilled")
        self.path = _local_model(model, bundled_minilm_path())
        tok_file = self.path / "tokenizer.json"
        if not tok_file.exists():
            raise InputError(f"{self.path}: no tokenizer.json (embedder fast needs a model "
                             f"with a fast tokenizer)", params=("embedder",))
        # The file is parsed once: for the tokenizer and for what is read from its spec.
        spec_text = tok_file.read_text(encoding="utf-8")
        self.tokenizer = Tokenizer.from_str(spec_text)
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
        spec = json.loads(spec_text)
        self._bert = ((spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
                      and spec["model"].get("type") == "WordPiece")
        # The word-piece model's vocabulary (``get_vocab(with_added_tokens=False)``).
        self._vocab = spec["model"]["vocab"] if self._bert and self._lower else {}
        self._kernel = _kernel if kernel_enabled() else None
        self._progress = progress
        # Set by make_embedder(tune=N): the embed stage then calls tune() on its sample.
        self.tune_plan: TunePlan | None = None
        self.n_sample = 0
        # Mean vector of prepare()'s sample (distilled table): subtracted, then renormalised.
        self.centre: np.ndarray | None = None
        # The file holding the table while shared_table() lends it to worker processes.
        self._table_file: str | None = None
        self._forget_sample()
        self._reset_cache()

    def __getstate__(self) -> dict[str, Any]:
        """For worker processes (:func:`clusterclip.embedding.pipeline.embed_shards` with
        workers): the table (or, inside :meth:`shared_table`, the file holding it),
        tokenizer, weights and centre as they are; the word caches start empty there (the
        vectors do not depend on them) and the tuning plan, whose teacher is no longer
        needed once the table is tuned, is dropped."""
        state = dict(self.__dict__)
        state.update(_kernel=self._kernel is not None, tune_plan=None,
                     _words_cache=None, _chunks_cache=None)
        if self._table_file is not None:
            state["table"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.table is None:
            self.table = np.load(state["_table_file"], allow_pickle=False)
        self._table_file = None
        self._kernel = _kernel if state["_kernel"] else None
        self._reset_cache()

    @contextlib.contextmanager
    def shared_table(self, folder: Path) -> Iterator[None]:
        """While inside, a pickled copy of this embedder (a worker process's) reads the
        table from a file written once into ``folder`` instead of receiving its 31 MB in
        the pickle, which a process start sends through a pipe, one worker after another.
        The file (``.table.clusterclip-PID-*.tmp``: a killed run's is a stale temporary)
        is removed on leaving; the copies' tables are the same bytes."""
        fd, name = tempfile.mkstemp(prefix=f".table.clusterclip-{os.getpid()}-",
                                    suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.save(fh, self.table, allow_pickle=False)
            self._table_file = name
            yield
        finally:
            self._table_file = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def identity(self) -> dict[str, Any]:
        ident = {**super().identity(), "static_version": STATIC_VERSION,
                 "table": self.table_kind, "model": model_identity(self.path)}
        if self.table_kind == "distilled":
            ident["sif_a"] = _SIF_A
            ident["centre_sample"] = _CENTRE_SAMPLE
        if self.tune_plan is not None:
            ident["tune"] = {"documents": self.tune_plan.documents, "seed": self.tune_plan.seed}
        return ident

    def pca_axes(self) -> np.ndarray:
        """The PCA axes of the distilled table (model dim x ``dim``): teacher vectors in
        this table's space are ``vectors @ axes``."""
        raw, _ = raw_token_table(self.path, self._progress)
        return pca_axes(raw, self.dim)[1]

    def tune(self, texts: list[str]) -> dict[str, Any]:
        """Tune the table on ``texts`` (the sample :attr:`tune_plan` asked for) toward the
        teacher's vectors (:mod:`clusterclip.embedding.tune`; cached). Call before
        :meth:`prepare`. Returns the tuning report."""
        from clusterclip.embedding.tune import tuned_table

        if self.tune_plan is None or self.table_kind != "distilled":
            raise ValueError("tune() needs a distilled table and a tune_plan")
        self.table, report = tuned_table(self, texts, self.tune_plan, self._progress)
        self.table_source = "tuned (cached)" if report["cached"] else "tuned"
        self.centre = None
        self._forget_sample()
        return report

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
            self._forget_sample()
            part = list(sample_texts[:_CENTRE_SAMPLE])
            if part:
                sums = self._sums(part)
                x = unit_rows(sums).astype(np.float64)
                self.centre = x[np.any(x != 0, axis=1)].mean(0).astype(np.float32)
                # encode() takes these texts' sums from here (the embed stage's sample is
                # part of its corpus): the same vectors, computed once.
                lengths = np.fromiter(map(len, part), np.int64, len(part))
                keep = np.flatnonzero(lengths <= _SAMPLE_KEPT_CHARS)
                keep = keep[np.cumsum(lengths[keep]) <= _SAMPLE_KEPT_TOTAL].tolist()
                self._sample_sums = sums[keep]
                self._sample_row = {part[i]: j for j, i in enumerate(keep)}
                self._sample_lengths = {len(part[i]) for i in keep}
            self.n_sample = len(part)
            return
        vocab = len(self.table)
        df = np.zeros(vocab, dtype=np.int64)
        for start in range(0, len(sample_texts), self.batch_size):
            pieces, indptr = self._pieces(sample_texts[start:start + self.batch_size])
            piece_doc = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
            # each (document, piece) pair once: document frequency
            pairs = np.unique(piece_doc * vocab + pieces)
            df += np.bincount(pairs % vocab, minlength=vocab)
        n = len(sample_texts)
        self.n_sample = n
        self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32) if n else \
            np.ones(vocab, dtype=np.float32)

    def _forget_sample(self) -> None:
        self._sample_sums = np.zeros((0, self.dim), dtype=np.float32)
        self._sample_row: dict[str, int] = {}
        self._sample_lengths: set[int] = set()

    def _sums(self, texts: Sequence[str]) -> np.ndarray:
        """Unnormalised vectors of ``texts`` (n x d float32), those of prepare()'s
        sample reused (a text's sum does not depend on the other texts)."""
        lengths, row_of = self._sample_lengths, self._sample_row
        known = np.fromiter((row_of.get(t, -1) if len(t) in lengths else -1 for t in texts),
                            np.int64, len(texts)) if row_of else np.full(len(texts), -1)
        todo = np.flatnonzero(known < 0)
        if len(todo) == len(texts):
            return self._sparse_sums(*self._pieces(texts))
        out = self._sample_sums[np.maximum(known, 0)]
        if len(todo):
            out[todo] = self._sparse_sums(*self._pieces([texts[i] for i in todo]))
        return out

    def _sparse_sums(self, rows: np.ndarray, indptr: np.ndarray) -> np.ndarray:
        """:func:`_sparse_sums` of this embedder's table and weights, in the compiled
        loop where it is built (unweighted sums only: the same additions in the same
        order, so the same bits)."""
        if self._kernel is None or self.idf is not None:
            return _sparse_sums(self.table, self.idf, rows, indptr)
        out = np.zeros((len(indptr) - 1, self.dim), dtype=np.float32)
        self._kernel.csr_sums(np.ascontiguousarray(indptr, np.int64),
                              np.ascontiguousarray(rows, np.int64),
                              np.ascontiguousarray(self.table, np.float32),
                              self.dim, out)
        return out

    # -- texts -> word pieces -------------------------------------------------
    def _words(self, text: str) -> list[str]:
        """The first ``max_length`` whitespace-separated words of ``text`` (lower-cased
        where the tokenizer lower-cases anyway).

        Exact without splitting all of a long text: when a cut yields more
        words than needed, the word the cut may have split lies past the limit.
        """
        m = self.max_length
        cut = m * _CHARS_PER_WORD
        while True:
            part = text[:cut]
            if self._lower:
                part = part.lower()
            words = part.split(maxsplit=m)
            if len(words) > m:
                del words[m]
                return words
            if cut >= len(text):
                return words
            cut *= 4

    def _pieces(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Word pieces of all ``texts``' first words, concatenated, and the CSR row
        pointer (text ``i``'s pieces are ``pieces[indptr[i]:indptr[i + 1]]``).

        Each distinct word is looked up in a dictionary; only unseen words are cut
        and tokenized (:meth:`_add_words`).
        """
        words = [self._words(t) for t in texts]
        ends = np.cumsum(np.fromiter(map(len, words), np.int64, len(words)))
        total = int(ends[-1]) if len(ends) else 0
        if self._kernel is not None:
            rows = np.empty(total, dtype=np.int64)
            new = self._kernel.word_rows(self._words_cache.row_of, words, rows)
            if new:  # distinct, in order of first appearance
                self._add_words(new)
                self._kernel.word_rows(self._words_cache.row_of, words, rows)
        else:
            flat = list(chain.from_iterable(words))
            rows = self._words_cache.rows(flat)
            unseen = [flat[i] for i in np.flatnonzero(rows < 0)]
            if unseen:
                self._add_words(unseen)
                rows[rows < 0] = self._words_cache.rows(unseen)
        pieces, lens = self._words_cache.expand(rows)
        per_text = np.zeros(len(texts) + 1, dtype=np.int64)
        if total:
            cum = np.cumsum(lens)
            per_text[1:] = np.where(ends > 0, cum[np.maximum(ends - 1, 0)], 0)
        return pieces, per_text

    def _add_words(self, words: list[str]) -> None:
        """Cache the word pieces of ``words`` (unseen words, repeats allowed).

        A word's pieces are its chunks' pieces in order. BERT-style tokenizers
        (BertPreTokenizer + WordPiece) always cut at ASCII punctuation, so there a
        word is cut into chunks first (one regular-expression pass over all new
        words), and each distinct chunk is tokenized once. Other tokenizers get
        each word whole.
        """
        new_list = list(dict.fromkeys(words))  # first-seen order: deterministic
        if self._bert:
            joined = " ".join(new_list)
            chunks = _ASCII_PUNCT_SPLIT.findall(joined)
            nparts = _chunks_per_word(joined, len(new_list))
        else:
            chunks, nparts = new_list, np.ones(len(new_list), dtype=np.int64)
        known = self._chunks_cache.row_of
        if self._kernel is not None:
            crows = np.empty(len(chunks), dtype=np.int64)
            unseen = self._kernel.word_rows(known, [chunks], crows)
        else:
            unseen = [c for c in dict.fromkeys(chunks) if c not in known]
        if unseen:
            self._chunks_cache.add_flat(unseen, *self._chunk_pieces(unseen))
            if self._kernel is not None:
                self._kernel.word_rows(known, [chunks], crows)
        if self._kernel is None:
            crows = np.fromiter(map(known.__getitem__, chunks), np.int64, len(chunks))
        pieces, clens = self._chunks_cache.expand(crows)
        lens = np.bincount(np.repeat(np.arange(len(new_list)), nparts), weights=clens,
                           minlength=len(new_list)).astype(np.int64)
        self._words_cache.add_flat(new_list, pieces, lens)

    def _chunk_pieces(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Word-piece ids of ``chunks``, concatenated, and how many each has.

        With a BERT-style lower-casing tokenizer, a chunk of ASCII letters and digits
        is something its normaliser and pre-tokenizer leave as it is: it is its own
        single piece when the vocabulary has it, else it goes to the word-piece model
        alone. Other chunks go through the whole tokenizer.
        """
        whole = np.full(len(chunks), -1, dtype=np.int64)
        plain = np.zeros(len(chunks), dtype=bool)
        if self._vocab:
            get = self._vocab.get
            plain = np.fromiter((c.isascii() and c.isalnum() for c in chunks), bool,
                                len(chunks))
            whole[plain] = np.fromiter((get(c, -1) for c in compress(chunks, plain)), np.int64,
                                       int(plain.sum()))
        lens = np.ones(len(chunks), dtype=np.int64)
        groups = []
        for where, pieces_of in ((np.flatnonzero(plain & (whole < 0)), self._model_pieces),
                                 (np.flatnonzero(~plain), self._tokenize_chunks)):
            flat, glens = pieces_of([chunks[i] for i in where]) if len(where) else \
                (np.zeros(0, np.int64), np.zeros(0, np.int64))
            lens[where] = glens
            groups.append((where, flat, glens))
        starts = np.cumsum(lens) - lens
        flat = np.empty(int(lens.sum()), dtype=np.int64)
        hit = whole >= 0
        flat[starts[hit]] = whole[hit]
        for where, gflat, glens in groups:
            flat[_positions(starts[where], glens)] = gflat
        return flat, lens

    def _model_pieces(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The word-piece model's ids for each chunk (no normaliser, no pre-tokenizer),
        concatenated, and how many each has."""
        tokenize = self.tokenizer.model.tokenize
        ids = [[t.id for t in tokenize(c)] for c in chunks]
        lens = np.fromiter(map(len, ids), np.int64, len(ids))
        return np.fromiter(chain.from_iterable(ids), np.int64, int(lens.sum())), lens

    def _reset_cache(self) -> None:
        self._words_cache = _PieceCache()
        self._chunks_cache = _PieceCache()

    def _tokenize_chunks(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Word-piece ids of ``chunks``, concatenated, and how many each has; few
        tokenizer calls for all of them.

        Chunks are joined by spaces into groups and the groups tokenized in one
        batch (in parallel threads unless TOKENIZERS_PARALLELISM=false); the
        tokenizer splits on whitespace, so pieces never straddle two chunks, and
        character offsets tell which chunk each piece came from. A chunk that
        yields no piece (only characters the normaliser drops) gets the unknown token.
        """
        groups = [chunks[i:i + _GROUP] for i in range(0, len(chunks), _GROUP)]
        encs = self.tokenizer.encode_batch([" ".join(g) for g in groups],
                                           add_special_tokens=False)
        flats, all_lens = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for group, enc in zip(groups, encs, strict=True):
            lengths = np.fromiter(map(len, group), np.int64, len(group))
            starts = np.zeros(len(group), dtype=np.int64)
            np.cumsum(lengths[:-1] + 1, out=starts[1:])
            ids = np.array(enc.ids, dtype=np.int64)
            first_char = np.array([o[0] for o in enc.offsets], dtype=np.int64)
            owner = np.searchsorted(starts, first_char, side="right") - 1
            found = np.bincount(owner, minlength=len(group))
            lens = np.maximum(found, 1)
            flat = np.full(int(lens.sum()), self.unk_id, dtype=np.int64)
            flat[_positions(np.cumsum(lens) - lens, found)] = ids
            flats.append(flat)
            all_lens.append(lens)
        return np.concatenate(flats), np.concatenate(all_lens)

    # -- encoding -----------------------------------------------------------
    def encode(self, texts: Sequence[str],
               on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        """n x d float32, L2-normalised; a text without any word gives a zero row.

        ``on_batch(n)`` is called after each batch of ``n`` texts (progress bars).
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            # Reset only between batches, so rows looked up for a batch stay valid.
            if len(self._words_cache) > _MAX_CACHED_WORDS:
                self._reset_cache()
            part = texts[start:start + self.batch_size]
            out[start:start + len(part)] = self._sums(part)
            if on_batch is not None:
                on_batch(len(part))
        # Normalised in a fixed order: a row's bits depend on its text alone.
        out = unit_rows(out)
        if self.centre is not None:
            empty = ~np.any(out != 0, axis=1)
            out = unit_rows(out - self.centre)
            out[empty] = 0.0
        return out


class _PieceCache:
    """Strings (words or chunks) -> their word-piece ids, in flat growing arrays.

    Row ``j``'s pieces are ``flat[start[j] : start[j] + lens[j]]``.
    """

    def __init__(self) -> None:
        self.row_of: dict[str, int] = {}
        self.start = np.zeros(0, dtype=np.int64)
        self.lens = np.zeros(0, dtype=np.int64)
        self.flat = np.zeros(0, dtype=np.int64)
        self.used = 0

    def __len__(self) -> int:
        return len(self.row_of)

    def rows(self, keys: list[str]) -> np.ndarray:
        """Row of each key, -1 where it is not cached."""
        return np.fromiter(map(self.row_of.get, keys, repeat(-1)), np.int64, len(keys))

    def add_flat(self, keys: list[str], flat: np.ndarray, lens: np.ndarray) -> None:
        """Cache new distinct ``keys``; key ``i`` has ``lens[i]`` of the pieces ``flat``."""
        n, need = len(self.row_of), len(self.row_of) + len(keys)
        if need > len(self.lens):
            cap = max(need, 2 * len(self.lens))
            self.start, self.lens = _grow(self.start, cap), _grow(self.lens, cap)
        if self.used + len(flat) > len(self.flat):
            self.flat = _grow(self.flat, max(self.used + len(flat), 2 * len(self.flat)))
        self.flat[self.used:self.used + len(flat)] = flat
        self.start[n:need] = self.used + np.cumsum(lens) - lens
        self.lens[n:need] = lens
        self.used += len(flat)
        self.row_of.update(zip(keys, range(n, need), strict=True))

    def expand(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pieces of ``rows``, concatenated, and how many each row has."""
        lens = self.lens[rows]
        return self.flat[_positions(self.start[rows], lens)], lens


def _positions(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """``starts[i] + 0, 1, ..., lens[i] - 1`` for every ``i``, concatenated."""
    ends = np.cumsum(lens)
    return np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(starts - (ends - lens), lens)


_PUNCT = np.zeros(128, dtype=bool)
_PUNCT[[i for i in range(128) if re.fullmatch(f"[{_ASCII_PUNCT}]", chr(i))]] = True


def _chunks_per_word(joined: str, n_words: int) -> np.ndarray:
    """How many :data:`_ASCII_PUNCT_SPLIT` matches each word of ``joined`` (words without
    whitespace, joined by single spaces) has: each ASCII punctuation character, and
    each run of other characters."""
    cp = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    punct = _PUNCT[np.minimum(cp, 127)] & (cp < 128)
    space = cp == 32
    after_break = np.ones(len(cp), dtype=bool)
    after_break[1:] = punct[:-1] | space[:-1]
    starts = punct | (after_break & ~space)
    word = np.cumsum(space)
    return np.bincount(word[starts], minlength=n_words).astype(np.int64)


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
    out[:len(a)] = a
    return out


def _sparse_sums(table: np.ndarray, weights: np.ndarray | None, rows: np.ndarray,
                 indptr: np.ndarray) -> np.ndarray:
    """For each document ``i``, the sum of ``weights[r] * table[r]`` (``weights`` None: 1)
    over its rows ``rows[indptr[i]:indptr[i + 1]]``, in order (n x d float32).

    A sparse (documents x vocabulary) matrix times the table: scipy, not torch, so a
    process that embeds with the fast embedder never imports torch.
    """
    from scipy.sparse import csr_matrix

    data = np.ones(len(rows), dtype=np.float32) if weights is None else weights[rows]
    counts = csr_matrix((data, rows, indptr), shape=(len(indptr) - 1, len(table)))
    return np.asarray(counts @ table, dtype=np.float32)
