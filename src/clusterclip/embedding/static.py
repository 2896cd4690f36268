"""The fast CPU embedder: static word vectors distilled from a transformer.

No neural network runs per document. Once per model, every token of the
model's vocabulary is embedded on its own (``[CLS] token [SEP]``, the model's
pooling) and cached on disk: a V x d table of *static* token vectors. A word
is the mean of its word pieces' vectors; a document is the IDF-weighted sum
of its words' vectors, L2-normalised. IDF comes from a fixed sample of the
corpus (:meth:`StaticEmbedder.prepare`), so the same corpus always gives the
same vectors, whichever process or shard embeds a document.

Speed comes from splitting words with one regular expression and caching each
distinct word's row, so the tokenizer runs once per distinct word, not once
per document.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import Embedder, l2_normalize
from clusterclip.embedding.transformer import _local_model, bundled_minilm_path, model_identity
from clusterclip.errors import InputError
from clusterclip.io import fingerprint, save_npy

STATIC_VERSION = 1
# Characters read per requested word before checking whether the cut was short.
_CHARS_PER_WORD = 12
# Distinct words kept in the row cache before it is reset (bounds memory; the
# vectors do not depend on the cache, only the speed does).
_MAX_CACHED_WORDS = 500_000


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
    """Fast CPU embedder (``--embedder fast``): IDF-weighted static token vectors.

    A document's vector is ``sum over its word pieces p of idf(p) * table[p]``,
    L2-normalised, where ``table`` holds the distilled static vectors. Text is
    split on whitespace first and each distinct chunk's weighted piece sum is
    cached, so the tokenizer sees each distinct chunk once (the model's
    tokenizer splits on whitespace itself, so the pieces are the same).
    ``max_length`` counts whitespace-separated words, not model tokens.
    Output: d = the model's dimension (384 for MiniLM).
    """

    name = "fast"

    def __init__(self, model: str | os.PathLike[str] | None = None, *, max_length: int = 256,
                 batch_size: int = 1024, progress: bool = True) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        from tokenizers import Tokenizer

        self.path = _local_model(model, bundled_minilm_path())
        tok_file = self.path / "tokenizer.json"
        if not tok_file.exists():
            raise InputError(f"{self.path}: no tokenizer.json (--embedder fast needs a model "
                             f"with a fast tokenizer)")
        self.tokenizer = Tokenizer.from_file(str(tok_file))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.table = self._load_table(progress)
        self.dim = int(self.table.shape[1])
        self.unk_id = self.tokenizer.token_to_id("[UNK]") or 0
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
                "model": model_identity(self.path)}

    # -- corpus statistics --------------------------------------------------
    def prepare(self, sample_texts: Sequence[str]) -> None:
        """Inverse document frequency of each word piece over a fixed sample of texts."""
        self.idf = np.ones(len(self.table), dtype=np.float32)
        self._reset_cache()
        df = np.zeros(len(self.table), dtype=np.int64)
        for start in range(0, len(sample_texts), self.batch_size):
            chunks = [self._chunks(t) for t in sample_texts[start:start + self.batch_size]]
            self._add_chunks([c for cs in chunks for c in cs])
            for cs in chunks:
                if cs:
                    df[np.unique(np.concatenate([self._pieces[self._row_of[c]] for c in cs]))] += 1
        n = len(sample_texts)
        self.n_sample = n
        if n:
            self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32)
        self._reset_cache()

    # -- chunks -> rows -----------------------------------------------------
    def _chunks(self, text: str) -> list[str]:
        """The first ``max_length`` whitespace-separated chunks of ``text``.

        Exact without splitting all of a long text: when a cut yields more
        chunks than needed, the chunk the cut may have split lies past the limit.
        """
        m = self.max_length
        cut = m * _CHARS_PER_WORD
        while True:
            chunks = text[:cut].split(maxsplit=m)
            if len(chunks) > m or cut >= len(text):
                return chunks[:m]
            cut *= 4

    def _reset_cache(self) -> None:
        self._row_of: dict[str, int] = {}
        self._pieces: list[np.ndarray] = []
        self._rows = np.zeros((1024, self.dim), dtype=np.float32)

    def _add_chunks(self, chunks: list[str]) -> None:
        new = [c for c in dict.fromkeys(chunks) if c not in self._row_of]
        if not new:
            return
        n = len(self._row_of)
        need = n + len(new)
        if need > len(self._rows):
            rows = np.zeros((max(need, 2 * len(self._rows)), self.dim), dtype=np.float32)
            rows[:n] = self._rows[:n]
            self._rows = rows
        pieces = self._tokenize_chunks(new)
        counts = np.array([len(p) for p in pieces], dtype=np.int64)
        flat = np.concatenate(pieces)
        self._rows[n:need] = _weighted_sums(self.table, self.idf, flat, counts)
        self._pieces.extend(pieces)
        self._row_of.update(zip(new, range(n, need), strict=True))


    def _tokenize_chunks(self, chunks: list[str]) -> list[np.ndarray]:
        """Word-piece ids of each chunk, with one tokenizer call for all of them.

        The chunks are joined by spaces and tokenized once (the tokenizer splits
        on whitespace, so pieces never straddle two chunks); character offsets
        tell which chunk each piece came from. A chunk that yields no piece
        (only characters the normaliser drops) gets the unknown token.
        """
        lengths = np.fromiter(map(len, chunks), np.int64, len(chunks))
        starts = np.zeros(len(chunks), dtype=np.int64)
        np.cumsum(lengths[:-1] + 1, out=starts[1:])
        enc = self.tokenizer.encode(" ".join(chunks), add_special_tokens=False)
        ids = np.array(enc.ids, dtype=np.int64)
        first_char = np.array([o[0] for o in enc.offsets], dtype=np.int64)
        owner = np.searchsorted(starts, first_char, side="right") - 1
        bounds = np.searchsorted(owner, np.arange(len(chunks) + 1))
        unk = np.array([self.unk_id], dtype=np.int64)
        return [ids[bounds[i]:bounds[i + 1]] if bounds[i + 1] > bounds[i] else unk
                for i in range(len(chunks))]

    # -- encoding -----------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """n x d float32, L2-normalised; a text without any chunk gives a zero row."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            # Reset only between batches, so rows looked up for a batch stay valid.
            if len(self._row_of) > _MAX_CACHED_WORDS:
                self._reset_cache()
            part = texts[start:start + self.batch_size]
            chunks = [self._chunks(t) for t in part]
            # One tokenizer call per batch for all chunks not seen before.
            self._add_chunks([c for cs in chunks for c in cs])
            get = self._row_of.__getitem__
            rows = [np.fromiter(map(get, cs), np.int64, len(cs)) for cs in chunks]
            flat = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            counts = np.array([len(r) for r in rows], dtype=np.int64)
            ones = np.ones(len(self._rows), dtype=np.float32)
            out[start:start + len(part)] = _weighted_sums(self._rows, ones, flat, counts)
        return l2_normalize(out)


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
