"""The target: the user's documents of what the model must be good at.

Read like a corpus (JSONL or Parquet, :class:`~clusterclip.corpus.Corpus`),
split into val and test by file (:func:`~clusterclip.search.splits.target_splits`),
and, for the prior, the val documents are embedded with the work directory's
own embedder (as its manifest records it) and labelled with its centroids by
the function ``clusterclip assign`` uses
(:func:`clusterclip.clustering.kmeans.assign`). Their cluster histogram is the
prior. The test documents are embedded too, only to find their copies in the
corpus (:mod:`clusterclip.search.overlap`); nothing the search chooses reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.errors import InputError


@dataclass(frozen=True)
class Target:
    """The target's rows: ``texts[i]`` (None without text), rows per file in order."""

    files: tuple[str, ...]
    texts: tuple[str | None, ...]
    rows_per_file: tuple[int, ...]

    @property
    def usable(self) -> np.ndarray:
        return np.array([t is not None for t in self.texts], dtype=bool)


def read_target(files: list[str], text_field: str) -> Target:
    """Every row of the target files (InputError naming them when they cannot serve:
    unreadable, no ``text_field``, fewer than 2 documents with text)."""
    from clusterclip.corpus import Corpus

    names = ", ".join(map(str, files))
    try:
        corpus = Corpus.scan(files, text_field=text_field, progress=False)
    except InputError as e:
        msg = str(e)
        if any(str(f) in msg for f in files):
            raise InputError(msg) from None
        raise InputError(f"targets {names}: {msg}", params=("targets",)) from None
    texts: list[str | None] = [None] * len(corpus)
    for i, t in corpus.iter_texts():
        texts[i] = t
    usable = sum(t is not None for t in texts)
    if usable < 2:
        raise InputError(f"targets {names}: {usable} document(s) with text in field "
                         f"{text_field!r}; the target needs at least 2 (half for val, half "
                         "for test)", params=("targets",))
    return Target(tuple(map(str, files)), tuple(texts),
                  tuple(int(f["documents"]) for f in corpus.files))


def _embedder(params: dict[str, Any], corpus: Any, device: str) -> Any:
    """W's embedder, as its manifest's embed stage ran it (``params``: that stage's
    parameters): a fast embedder's table tuned and its statistics fitted as the stage did,
    on the same samples of W's corpus."""
    from clusterclip.embedding.pipeline import stage_embedder

    return stage_embedder(params, corpus, device=device)[0]


def embed_texts(params: dict[str, Any], corpus: Any, texts: list[str], device: str
                ) -> np.ndarray:
    """float32 unit rows: ``texts`` embedded by W's embedder (``params``: its embed
    stage's parameters; see :func:`_embedder`)."""
    if not texts:
        return np.zeros((0, 1), dtype=np.float32)
    # Embedders return unit rows already; normalising them again would change their last
    # bits, and the stage's rows must come out the same.
    return np.asarray(_embedder(params, corpus, device).encode(texts), dtype=np.float32)


def target_histogram(X: np.ndarray, centroids: np.ndarray, metric: str, device: str
                     ) -> np.ndarray:
    """int64[K]: how many of the embedded documents ``X`` fall in each of the clusters of
    ``centroids`` (assigned by the clustering's ``metric``)."""
    from clusterclip.clustering.kmeans import assign

    labels, _ = assign(X, centroids, metric=metric, device=device)
    return np.bincount(labels[labels >= 0], minlength=centroids.shape[0]).astype(np.int64)
