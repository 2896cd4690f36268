"""clusterclip: balance LLM training data by semantic cluster (ClusterClip sampling).

Data flow: corpus -> embeddings -> clusters -> sampler -> report / experiment.
The sampler needs only numpy; torch, embedding models, FAISS and plotting are
optional extras.
"""

from __future__ import annotations

__version__ = "0.1.0"

from clusterclip.sampling import ClusterClipSampler  # noqa: E402

__all__ = ["ClusterClipSampler", "__version__"]
