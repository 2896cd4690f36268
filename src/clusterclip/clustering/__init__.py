"""Clustering stage: embeddings -> K-means labels, scores and centroids.

Pure core: :class:`KMeans` and :func:`assign` (arrays in, arrays out).
Edges: :func:`cluster_workdir`, :func:`cluster_embeddings_file` and
:func:`assign_embeddings_file` read and write files; ``distributed`` holds the
torch.distributed helpers (shards, gathering to rank 0).
"""

from __future__ import annotations

from clusterclip.clustering.distributed import gather_rows, load_shard, shard_bounds
from clusterclip.clustering.kmeans import KMeans, assign
from clusterclip.clustering.stage import (
    assign_embeddings_file,
    cluster_embeddings_file,
    cluster_workdir,
)

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
