"""Embedding: texts -> L2-normalised vectors (the resumable ``embed`` stage that runs them
into a work directory: :mod:`clusterclip.stages.embed`).

Embedders (all return float32 n x d, rows L2-normalised, in input order):

- ``minilm``: a sentence-transformers model, by default the bundled
  all-MiniLM-L6-v2 (offline), :class:`SentenceTransformerEmbedder`;
- ``hf``: any local Hugging Face ``AutoModel``, mean or first-token pooling,
  :class:`HFEmbedder`;
- ``fast``: static token vectors distilled from MiniLM (PCA, SIF weights), no
  neural network per document, :class:`StaticEmbedder`; ``--tune N`` fits its table to
  MiniLM's vectors of N documents of the corpus (:mod:`~clusterclip.embedding.tune`);
- ``model2vec``: any local Model2Vec model, :class:`Model2VecEmbedder`.

``minilm`` and ``hf`` run on torch or, exported once, on ONNX Runtime (int8 where it
agrees with torch), :class:`OnnxEmbedder`; :func:`resolve_backend` says which.

:func:`make_embedder` loads an embedder by name; the ``embed`` stage, which runs them into
a work directory (shards, resume, ``torchrun``), is :mod:`clusterclip.stages.embed`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Embedder", "HFEmbedder", "Model2VecEmbedder", "OnnxEmbedder",
           "SentenceTransformerEmbedder", "StaticEmbedder",
           "embedder_identity", "l2_normalize", "length_bucketed_batches", "make_embedder",
           "resolve_backend"]

_WHERE = {
    "Embedder": "base", "l2_normalize": "base", "length_bucketed_batches": "base",
    "SentenceTransformerEmbedder": "transformer", "HFEmbedder": "transformer",
    "StaticEmbedder": "static", "OnnxEmbedder": "onnx_runtime",
    "Model2VecEmbedder": "model2vec_embedder",
    "make_embedder": "pipeline", "embedder_identity": "pipeline",
    "resolve_backend": "pipeline",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package does not import torch.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"clusterclip.embedding.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'clusterclip.embedding' has no attribute {name!r}")
