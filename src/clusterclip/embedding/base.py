"""What every embedder shares: the interface, length bucketing, normalisation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Tokens per text by default: MiniLM's own limit (the default of every embedder but
#: model2vec; see ``embedding.pipeline.DEFAULT_MAX_LENGTH``).
MINILM_MAX_LENGTH = 256
#: Texts per batch by default (of every embedder but ``fast``, which takes larger ones).
DEFAULT_BATCH_SIZE = 64


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``x`` (n x d float32) scaled to unit L2 norm; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, eps)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` (n x d) scaled to unit L2 norm in one fixed order of arithmetic.

    Each row's sum of squares is accumulated in float64 column by column (element-wise
    operations only: no reduction kernel, no BLAS), so a row's result depends on that
    row alone, not on the other rows, the batch, the memory layout or the CPU's SIMD
    width. Returns float32; all-zero rows stay zero.

    Examples
    --------
    >>> unit_rows(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    x64 = np.asarray(x, dtype=np.float64)
    acc = np.zeros(len(x64), dtype=np.float64)
    for c in range(x64.shape[1] if x64.ndim == 2 else 0):
        col = x64[:, c]
        acc += col * col  # exact products of float32 values; fixed order of sums
    norm = np.sqrt(acc)
    out = np.zeros(x64.shape, dtype=np.float32)
    nz = norm > 0
    out[nz] = (x64[nz] / norm[nz, None]).astype(np.float32)
    return out


def length_bucketed_batches(lengths: Sequence[int] | np.ndarray,
                            batch_size: int) -> list[np.ndarray]:
    """Split positions ``0..n-1`` into batches of similar length, longest first.

    Sorting by length keeps padding (wasted compute) small inside a batch;
    longest first makes an out-of-memory batch fail at once, not at the end.
    The sort is stable, so equal lengths keep their order (determinism).
    Returns int64 arrays whose concatenation is a permutation of ``0..n-1``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


class Embedder:
    """Texts in, L2-normalised float32 vectors out.

    Subclasses set ``name`` and ``dim`` and implement :meth:`_encode_sorted`
    (one batch of texts of similar length -> n x dim float32) or override
    :meth:`encode` entirely. :meth:`identity` describes everything that
    changes the vectors; it goes into the work directory's fingerprint.
    """

    name: str = "embedder"
    dim: int = 0

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_length: int | None = MINILM_MAX_LENGTH) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.batch_size = batch_size
        self.max_length = max_length

    def identity(self) -> dict[str, Any]:
        """JSON-serialisable description of what determines the output vectors."""
        return {"embedder": self.name, "dim": self.dim, "max_length": self.max_length}

    def prepare(self, sample_texts: Sequence[str]) -> None:
        """Fit corpus-dependent state from a fixed sample of texts (default: none)."""

    def encode(self, texts: Sequence[str],
               on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        """Embed ``texts``: n x dim float32, rows L2-normalised, in the order given.

        ``on_batch(n)`` is called after each batch of ``n`` texts (progress bars).
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch in length_bucketed_batches([len(t) for t in texts], self.batch_size):
            out[batch] = self._encode_sorted([texts[i] for i in batch])
            if on_batch is not None:
                on_batch(len(batch))
        return l2_normalize(out)

    def _encode_sorted(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError
