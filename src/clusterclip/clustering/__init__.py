"""Clustering stage: embeddings -> K-means labels, scores and centroids.

Pure core: :class:`KMeans` and :func:`assign` (arrays in, arrays out).
Edges: :func:`cluster_workdir`, :func:`cluster_embeddings_file` and
:func:`assign_embeddings_file` read and write files. The row-shard helpers
(:func:`load_shard`, :func:`shard_bounds`, :func:`gather_rows`) come from
:mod:`clusterclip.distributed`.
"""

from __future__ import annotations

from clusterclip.clustering.kmeans import KMeans, assign
from clusterclip.clustering.stage import (
    assign_embeddings_file,
    cluster_embeddings_file,
    cluster_workdir,
)
from clusterclip.distributed import gather_rows, load_shard, shard_bounds

__all__ = [
    "KMeans",
    "assign",
    "assign_embeddings_file",
    "cluster_embeddings_file",
    "cluster_workdir",
    "gather_rows",
    "load_shard",
    "shard_bounds",
]
