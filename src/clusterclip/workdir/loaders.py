"""The work directory's loaders: each artifact read one way, checked (an InputError naming
the file), by a method of :class:`~clusterclip.workdir.Workdir` (``w.labels()``,
``w.valid()``, ``w.embeddings()``, ...; ``w.current_groups()`` and ``w.load_inputs()`` for
what a stage reads only while current or all together)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterclip.errors import InputError
from clusterclip.workdir.layout import (
    CENTROIDS,
    CORPUS,
    EMBEDDINGS,
    GROUPS,
    LABELS,
    SCHEDULE,
    SCORES,
    VALID,
)

if TYPE_CHECKING:
    import numpy as np


class Loaders:
    """The loaders of a :class:`~clusterclip.workdir.Workdir` (through its ``path``; the
    ``dedup`` stage's record through ``stage`` and ``require``)."""

    def embeddings(self) -> np.ndarray:
        """``W/embeddings.npy``: N x d floats, memory-mapped read-only."""
        from clusterclip.storage.arrays import load_npy

        return load_npy(self.path(EMBEDDINGS), "embeddings", kinds="f", ndim=2, mmap=True)

    def valid(self, num_documents: int | None = None) -> np.ndarray | None:
        """``W/valid.npy`` (bool[N], True where the document has text), or None when W has
        none; checked against ``num_documents`` when given."""
        import numpy as np

        from clusterclip.storage.arrays import load_npy

        path = self.path(VALID)
        if not path.exists():
            return None
        v = load_npy(path, "valid mask", mmap=True)
        if v.dtype != np.bool_ or v.ndim != 1 or (num_documents is not None
                                                  and v.shape != (num_documents,)):
            n = v.shape[0] if num_documents is None and v.ndim else num_documents
            raise InputError(f"{path}: expected a bool array of shape ({n},), "
                             f"got {v.dtype} of shape {v.shape}")
        return np.array(v)  # small (N bools); a writable copy

    def labels(self, num_documents: int | None = None) -> np.ndarray:
        """``W/labels.npy``, checked (:func:`clusterclip.labels.load_labels`)."""
        from clusterclip.labels import load_labels

        return load_labels(self.path(LABELS), num_documents)

    def scores(self) -> np.ndarray:
        """``W/scores.npy``: each document's cosine to its cluster centroid (``cluster``)."""
        from clusterclip.storage.arrays import load_npy

        return load_npy(self.path(SCORES), "scores", kinds="f", ndim=1)

    def centroids(self) -> np.ndarray:
        """``W/centroids.npy``: K x d cluster centroids (``cluster``)."""
        from clusterclip.storage.arrays import load_npy

        return load_npy(self.path(CENTROIDS), "centroids", kinds="f", ndim=2)

    def schedule(self) -> np.ndarray:
        """``W/schedule.npy``: the schedule's document indices (``sample``)."""
        from clusterclip.storage.arrays import load_npy

        return load_npy(self.path(SCHEDULE), "schedule", kinds="iu", ndim=1)

    def groups(self) -> np.ndarray:
        """``W/groups.npy``: the near-duplicate group of each document (``dedup``)."""
        from clusterclip.storage.arrays import load_npy

        return load_npy(self.path(GROUPS), "groups", kinds="iu", ndim=1)

    def corpus(self) -> Any:
        """``W/corpus``: the corpus index (:class:`clusterclip.corpus.Corpus`)."""
        from clusterclip.corpus import Corpus

        return Corpus.load(self.path(CORPUS))

    def current_groups(self) -> np.ndarray | None:
        """``W/groups.npy`` while its ``dedup`` stage is done and current, else None."""
        if self.stage("dedup") is None or not self.path(GROUPS).is_file():
            return None
        try:
            self.require("dedup")
        except InputError:
            return None
        return self.groups()

    def load_inputs(self, texts: bool = True) -> tuple[np.ndarray, list[str | None], Any]:
        """``(labels, texts, corpus)``: ``W/labels.npy`` (checked), the corpus index of
        ``W/corpus/`` of as many documents, and its texts (all None unless ``texts``):
        what the ``experiment`` and ``search`` stages train on."""
        labels_path = self.path(LABELS)
        if not labels_path.is_file():
            raise InputError(f"{labels_path}: missing (run `clusterclip cluster` first)")
        labels = self.labels()
        corpus_dir = self.path(CORPUS)
        if not corpus_dir.is_dir():
            raise InputError(f"{corpus_dir}: missing (run `clusterclip embed` first)")
        corpus = self.corpus()
        if len(corpus) != labels.size:
            raise InputError(f"{corpus_dir}: {len(corpus)} documents but {LABELS} has "
                             f"{labels.size}")
        out: list[str | None] = [None] * len(corpus)
        for i, text in corpus.iter_texts() if texts else ():
            out[i] = text
        return labels, out, corpus
