"""The search's splits: corpus train / val / test by cluster, target val / test by file.

Pure numpy. Selection reads val only; the verdict reads test. The target split
depends on nothing but the number of rows of each target file and the seed, so
changing the text of a target's test documents changes neither the split nor
anything the search chooses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from clusterclip.errors import InputError
from clusterclip.lm.data import HOLDOUT_FRACTION, MIN_CLUSTER_DOCS, stratified_split

#: The keys of ``W/search/splits.npz`` (int64 document indices each).
SPLIT_KEYS = ("corpus_train", "corpus_val", "corpus_test", "target_val", "target_test")


def corpus_splits(labels: np.ndarray, seed: int, fraction: float = HOLDOUT_FRACTION,
                  min_cluster_docs: int = MIN_CLUSTER_DOCS
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train, val, test)`` int64 indices of the documents with ``labels >= 0``.

    The two held-out parts of :func:`clusterclip.lm.data.stratified_split`: a cluster of
    ``n >= min_cluster_docs`` documents gives ``max(1, round(fraction * n))`` documents
    to val and as many to test (at most ``(n - 1) // 2`` each), chosen uniformly at
    random (deterministic in ``seed``); smaller clusters give none. Every cluster keeps
    at least one training document. Each array is ascending.
    """
    labels = np.asarray(labels, dtype=np.int64)
    part = stratified_split(labels, fraction, min_cluster_docs, seed, parts=2)
    train = np.flatnonzero((labels >= 0) & (part == 0))
    return (train.astype(np.int64), np.flatnonzero(part == 1).astype(np.int64),
            np.flatnonzero(part == 2).astype(np.int64))


def target_splits(rows_per_file: Sequence[int], usable: np.ndarray, seed: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(val, test)`` int64 row indices of the target (rows of the target files in
    order), stratified by file: each file's usable rows (``usable``: bool per row,
    False where a row has no text) go half to val (the larger half when odd) and half to
    test, by a seeded permutation of the file's rows. Depends only on the row counts,
    the usable mask and ``seed``, never on the texts."""
    usable = np.asarray(usable, dtype=bool)
    if usable.size != sum(rows_per_file):
        raise ValueError("usable must have one entry per target row")
    rng = np.random.default_rng([seed, 1])  # its own stream, apart from the corpus split
    val, test, first = [], [], 0
    for n in rows_per_file:
        rows = first + np.flatnonzero(usable[first:first + n])
        first += n
        rows = rng.permutation(rows)
        half = (rows.size + 1) // 2
        val.append(rows[:half])
        test.append(rows[half:])
    return _sorted(val), _sorted(test)


def _sorted(parts: list[np.ndarray]) -> np.ndarray:
    return np.sort(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, np.int64)


def save_splits(path: str | os.PathLike[str], splits: dict[str, np.ndarray]) -> None:
    """``splits.npz`` with exactly :data:`SPLIT_KEYS` (int64), written atomically.

    The archive ``np.load`` reads, with fixed member dates (``np.savez`` stamps the
    current time), so that the same splits give the same bytes.
    """
    import io
    import zipfile

    from clusterclip.storage.atomic import atomic_path

    if set(splits) != set(SPLIT_KEYS):
        raise ValueError(f"splits must have the keys {SPLIT_KEYS}")
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for k in SPLIT_KEYS:
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(splits[k], dtype=np.int64),
                                      allow_pickle=False)
            z.writestr(zipfile.ZipInfo(f"{k}.npy", date_time=(1980, 1, 1, 0, 0, 0)),
                       buf.getvalue())


def load_splits(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of a ``splits.npz`` (InputError naming the file when it is not one)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in SPLIT_KEYS}
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{path}: not a search splits file ({e})") from None
    return out
