"""The fast CPU embedder: IDF-weighted sums of static word-piece vectors.

No neural network runs per document. A document's vector is the sum of
``idf(p) * table[p]`` over the word pieces ``p`` of its first words (the
MiniLM tokenizer's vocabulary), L2-normalised. The table is either a fixed
Gaussian random matrix (default: TF-IDF followed by a random projection) or
static token vectors distilled once from MiniLM and cached on disk
(``[CLS] token [SEP]`` through the model, mean-pooled). ``bench_embed.py``
measured both on pydocs; the random table clustered as well or better, ran
faster and needs no distillation, so ``--embedder fast`` uses it.

IDF comes from a fixed sample of the corpus (:meth:`StaticEmbedder.prepare`),
so the same corpus always gives the same vectors, whichever process or shard
embeds a document. Speed comes from splitting text on whitespace and caching
each distinct chunk's weighted piece sum, so the tokenizer runs once per
distinct chunk, not once per document.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import Embedder, l2_normalize
from clusterclip.embedding.transformer import _local_model, bundled_minilm_path, model_identity
from clusterclip.errors import InputError
from clusterclip.io import fingerprint, save_npy

STATIC_VERSION = 2
# Characters read per requested word before checking whether the cut was short.
_CHARS_PER_WORD = 12
# Distinct words kept in the row cache before it is reset (bounds memory; the
# vectors do not depend on the cache, only the speed does).
_MAX_CACHED_WORDS = 500_000
# Chunks per tokenizer input when tokenizing unseen chunks (parallel across inputs).
_GROUP = 2048


def cache_dir() -> Path:
    """Where distilled tables live: ``$CLUSTERCLIP_CACHE`` or ``~/.cache/clusterclip``."""
    env = os.environ.get("CLUSTERCLIP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "clusterclip"


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


class StaticEmbedder(Embedder):
    """Fast CPU embedder (``--embedder fast``): IDF-weighted sums of static token vectors.

    A document's vector is ``sum over its word pieces p of idf(p) * table[p]``,
    L2-normalised. ``table="random"`` (the default) is a fixed Gaussian V x
    ``dim`` matrix, which makes this TF-IDF over the model's word pieces
    followed by a random projection; ``table="distilled"`` uses each token's
    vector from the model (see :func:`distill_token_table`). The benchmark
    measures both; the random table clustered pydocs as well or better at the
    same speed and needs no model run, hence the default.

    Text is split on whitespace into chunks; each distinct chunk is tokenized
    once and its weighted piece sum cached, so the tokenizer does not run per
    document. ``max_length`` counts whitespace-separated words, not model tokens.
    """

    name = "fast"

    def __init__(self, model: str | os.PathLike[str] | None = None, *, max_length: int = 256,
                 batch_size: int = 1024, table: str = "random", dim: int = 256,
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
        if table == "random":
            vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
            rng = np.random.default_rng(0)
            self.table = (rng.standard_normal((vocab, dim), dtype=np.float32)
                          / np.float32(math.sqrt(dim)))
        else:
            self.table = self._load_table(progress)
        self.dim = int(self.table.shape[1])
        self.unk_id = self.tokenizer.token_to_id("[UNK]") or 0
        # Lower-cased chunk keys (fewer distinct chunks) only where the tokenizer
        # lower-cases anyway, so the word pieces cannot change.
        enc = self.tokenizer.encode_batch(["Word", "word"], add_special_tokens=False)
        self._lower = enc[0].ids == enc[1].ids
        self.idf = np.ones(len(self.table), dtype=np.float32)
        self.n_sample = 0
        self._reset_cache()

    # -- the static table ---------------------------------------------------
    def _load_table(self, progress: bool) -> np.ndarray:
        key = fingerprint({"v": STATIC_VERSION, "model": model_identity(self.path)})
        path = cache_dir() / f"static-{key}.npy"
        if path.exists():
            try:
                return np.load(path, allow_pickle=False)
            except (OSError, ValueError):
                pass  # a damaged cache is rebuilt below
        table = distill_token_table(self.path, progress=progress)
        save_npy(path, table)
        return table

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "static_version": STATIC_VERSION,
                "table": self.table_kind, "model": model_identity(self.path)}

    # -- corpus statistics --------------------------------------------------
    def prepare(self, sample_texts: Sequence[str]) -> None:
        """Inverse document frequency of each word piece over a fixed sample of texts."""
        vocab = len(self.table)
        df = np.zeros(vocab, dtype=np.int64)
        for start in range(0, len(sample_texts), self.batch_size):
            chunks = [self._chunks(t) for t in sample_texts[start:start + self.batch_size]]
            rows = self._lookup(chunks)
            doc = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
            pieces, piece_doc = self._expand(np.concatenate(rows) if rows else
                                             np.zeros(0, np.int64), doc)
            # each (document, piece) pair once: document frequency
            pairs = np.unique(piece_doc * vocab + pieces)
            df += np.bincount(pairs % vocab, minlength=vocab)
        n = len(sample_texts)
        self.n_sample = n
        self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32) if n else \
            np.ones(vocab, dtype=np.float32)
        # The cached chunks stay; only their weighted sums change with the IDF.
        k = len(self._row_of)
        self._rows[:k] = self._chunk_vectors(np.arange(k))

    # -- chunks -> rows -----------------------------------------------------
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
                return chunks[:m]
            cut *= 4

    def _reset_cache(self) -> None:
        self._row_of: dict[str, int] = {}
        self._rows = np.zeros((1024, self.dim), dtype=np.float32)
        # word pieces of cached chunk j: _pflat[_pstart[j] : _pstart[j] + _plen[j]]
        self._pstart = np.zeros(1024, dtype=np.int64)
        self._plen = np.zeros(1024, dtype=np.int64)
        self._pflat = np.zeros(4096, dtype=np.int64)
        self._pused = 0

    def _lookup(self, chunks: list[list[str]]) -> list[np.ndarray]:
        """Cache rows of each document's chunks, adding unseen chunks (one tokenizer call)."""
        self._add_chunks([c for cs in chunks for c in cs])
        get = self._row_of.__getitem__
        return [np.fromiter(map(get, cs), np.int64, len(cs)) for cs in chunks]

    def _expand(self, rows: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Word pieces of cached chunks ``rows``, each with its ``owner`` repeated."""
        lens = self._plen[rows]
        total = int(lens.sum())
        ends = np.cumsum(lens)
        pos = np.arange(total) - np.repeat(ends - lens, lens) + np.repeat(self._pstart[rows], lens)
        return self._pflat[pos], np.repeat(owner, lens)

    def _chunk_vectors(self, rows: np.ndarray) -> np.ndarray:
        pieces, _ = self._expand(rows, rows)
        return _weighted_sums(self.table, self.idf, pieces, self._plen[rows])

    def _add_chunks(self, chunks: list[str]) -> None:
        new = [c for c in dict.fromkeys(chunks) if c not in self._row_of]
        if not new:
            return
        n = len(self._row_of)
        need = n + len(new)
        if need > len(self._rows):
            cap = max(need, 2 * len(self._rows))
            self._rows = _grow(self._rows, cap)
            self._pstart = _grow(self._pstart, cap)
            self._plen = _grow(self._plen, cap)
        pieces = self._tokenize_chunks(new)
        lens = np.fromiter(map(len, pieces), np.int64, len(pieces))
        flat = np.concatenate(pieces)
        if self._pused + len(flat) > len(self._pflat):
            self._pflat = _grow(self._pflat, max(self._pused + len(flat), 2 * len(self._pflat)))
        self._pflat[self._pused:self._pused + len(flat)] = flat
        self._pstart[n:need] = self._pused + np.cumsum(lens) - lens
        self._plen[n:need] = lens
        self._pused += len(flat)
        self._rows[n:need] = _weighted_sums(self.table, self.idf, flat, lens)
        self._row_of.update(zip(new, range(n, need), strict=True))

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
            rows = self._lookup([self._chunks(t) for t in part])
            flat = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            counts = np.array([len(r) for r in rows], dtype=np.int64)
            ones = np.ones(len(self._rows), dtype=np.float32)
            out[start:start + len(part)] = _weighted_sums(self._rows, ones, flat, counts)
            if on_batch is not None:
                on_batch(len(part))
        return l2_normalize(out)


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
    out[:len(a)] = a
    return out


def _weighted_sums(table: np.ndarray, weights: np.ndarray, rows: np.ndarray,
                   counts: np.ndarray) -> np.ndarray:
    """For each document, sum of ``weights[r] * table[r]`` over its ``rows`` (n x d float32)."""
    import torch

    offsets = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    t = torch.from_numpy(table)
    r = torch.from_numpy(rows)
    w = torch.from_numpy(weights[rows])
    return torch.nn.functional.embedding_bag(r, t, torch.from_numpy(offsets), mode="sum",
                                             per_sample_weights=w).numpy()
