"""clusterclip: balance LLM training data by semantic cluster (ClusterClip sampling).

Data flow: corpus -> embeddings -> clusters -> sampler -> report / experiment.
The sampler needs only numpy; torch, embedding models, FAISS and plotting are
optional extras.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["ClusterClipSampler", "__version__", "make_sampler"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `import clusterclip.<stage>` never pays for the sampler's imports.
    if name in ("ClusterClipSampler", "make_sampler"):
        from clusterclip import sampling

        return getattr(sampling, name)
    raise AttributeError(f"module 'clusterclip' has no attribute {name!r}")
