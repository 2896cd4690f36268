"""Corpus: JSON Lines (plain or gzip) and Parquet inputs, indexed for reading by document.

``Corpus.scan(paths)`` reads the inputs once and keeps, per document, where
its text lives; stages read texts back in corpus order (``iter_texts``) or by
index (``texts``). See :class:`clusterclip.corpus.index.Corpus`.
``scan_into(directory, paths)`` writes the same index to disk with the files
shared among ``torchrun`` ranks (what ``embed`` uses).
"""

from __future__ import annotations

from clusterclip.corpus.index import Corpus, scan_into
from clusterclip.corpus.readers import KINDS, expand_inputs

__all__ = ["KINDS", "Corpus", "expand_inputs", "scan_into"]
