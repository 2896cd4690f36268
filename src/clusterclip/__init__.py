"""clusterclip: balance LLM training data by semantic cluster (ClusterClip sampling).

Data flow: corpus -> embeddings -> clusters -> sampler -> report / experiment.
The sampler needs only numpy; torch, embedding models, FAISS and plotting are
optional extras.

Layout, from the bottom (imports point down; ``tests/test_layers.py`` checks it):
shared modules (``errors``, ``limits``, ``io``, ``labels``, ``distributed``, ...);
the algorithm packages ``corpus`` -> ``embedding`` -> ``clustering`` -> ``sampling``,
then ``dedup``, ``tokens``, ``grouping``, ``export``, ``report``, ``lm`` (the proxy
language model), ``experiment`` and ``search``, which take arrays, paths or options;
``workdir`` (the work directory: its artifact names, loaders, lock and manifest);
``stages`` (one module per stage: its options and ``run(w, options)``); ``cli``.
Only ``stages`` and ``cli`` import the work directory.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["ClusterClipSampler", "OnlineMixer", "__version__", "make_sampler"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `import clusterclip.<stage>` never pays for the sampler's imports.
    if name in ("ClusterClipSampler", "OnlineMixer", "make_sampler"):
        from clusterclip import sampling

        return getattr(sampling, name)
    raise AttributeError(f"module 'clusterclip' has no attribute {name!r}")
