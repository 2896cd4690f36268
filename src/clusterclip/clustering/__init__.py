"""Clustering: embeddings -> K-means labels, scores and centroids.

Pure core: :class:`KMeans` and :func:`assign` (arrays in, arrays out).
Edges: :mod:`clusterclip.clustering.files` reads embeddings files and writes labels,
scores and centroids (:func:`assign_embeddings_file`); the stages that run them in a
work directory are in :mod:`clusterclip.stages.cluster`. The row-shard helpers
(:func:`load_shard`, :func:`shard_bounds`, :func:`gather_rows`) come from
:mod:`clusterclip.distributed`.
"""

from __future__ import annotations

from clusterclip.clustering.files import assign_embeddings_file
from clusterclip.clustering.kmeans import KMeans, assign
from clusterclip.distributed import gather_rows, load_shard, shard_bounds

__all__ = [
    "KMeans",
    "assign",
    "assign_embeddings_file",
    "gather_rows",
    "load_shard",
    "shard_bounds",
]
