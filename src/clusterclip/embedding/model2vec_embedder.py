"""Any local Model2Vec model (``--embedder model2vec --model PATH``; the ``model2vec`` extra).

Model2Vec (https://github.com/MinishLab/model2vec) stores static token vectors with
their tokenizer; ``StaticModel.encode`` averages a text's token vectors. Its models are
published on the Hugging Face Hub (the ``potion-*`` family, or distilled from any
sentence-transformers model with ``model2vec.distill``); clusterclip ships none and never
downloads: download or distil one, then pass its folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import Embedder, l2_normalize
from clusterclip.embedding.transformer import (
    LOAD_ERRORS,
    _local_model,
    model_identity,
    safetensors_header,
)
from clusterclip.errors import InputError


class Model2VecEmbedder(Embedder):
    """``StaticModel.from_pretrained(PATH)``; vectors are ``StaticModel.encode``'s,
    L2-normalised: with ``max_length`` tokens per text, or, with None (the default), the
    library's own default length, so that they are the vectors the library gives."""

    name = "model2vec"

    def __init__(self, model: str | os.PathLike[str] | None, *, batch_size: int = 1024,
                 max_length: int | None = None) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        try:
            from model2vec import StaticModel
        except ImportError:
            raise InputError("embedder model2vec needs the model2vec package "
                             "(pip install 'clusterclip[model2vec]')",
                             params=("embedder",)) from None
        if model is None:
            raise InputError("embedder model2vec needs model PATH (a local Model2Vec "
                             "folder; none ships with clusterclip)",
                             params=("embedder", "model"))
        self.path = model2vec_folder(_local_model(model, None))
        try:
            self.model = StaticModel.from_pretrained(self.path, force_download=False)
        except LOAD_ERRORS as e:
            raise InputError(f"{self.path}: cannot load as a Model2Vec model "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
                             ) from None
        self.dim = int(self.model.dim)

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "model": model_identity(self.path)}

    def encode(self, texts: Sequence[str],
               on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        """n x dim float32, L2-normalised, in input order (a text without any known token:
        a zero row)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            part = list(texts[start:start + self.batch_size])
            length = {} if self.max_length is None else {"max_length": self.max_length}
            out[start:start + len(part)] = self.model.encode(
                part, batch_size=self.batch_size, use_multiprocessing=False,
                show_progress_bar=False, **length)
            if on_batch is not None:
                on_batch(len(part))
        return l2_normalize(out)


def model2vec_folder(path: Path) -> Path:
    """``path`` when it holds a Model2Vec model; InputError when its ``model.safetensors``
    has no ``embeddings`` tensor (a sentence-transformers or Hugging Face model: name the
    embedder that reads it)."""
    weights = path / "model.safetensors"
    if weights.is_file() and not (path / "0_StaticEmbedding").is_dir():
        header = safetensors_header(weights)
        if isinstance(header, dict) and "embeddings" not in header:
            kind = ("a sentence-transformers model" if (path / "modules.json").is_file()
                    else "a Hugging Face model")
            raise InputError(f"{path}: {kind}, not a Model2Vec one ({weights.name} holds no "
                             f"`embeddings` table); use embedder minilm or hf with this "
                             f"folder, or give a Model2Vec one", params=("embedder",))
    return path
