"""Transformer embedders through ONNX Runtime (``--backend onnx``): no torch per process.

A local model (``minilm``: a sentence-transformers folder, its pooling and normalisation
included; ``hf``: an ``AutoModel`` with mean or first-token pooling) is exported once with
``torch.onnx.export`` (eager attention, so that ONNX Runtime's transformer optimiser fuses
attention, GELU and layer norms), into the clusterclip cache
(:func:`clusterclip.storage.cache.cache_dir`)::

    onnx-<key>/model.onnx        fp32, fused
    onnx-<key>/model-int8.onnx   int8 dynamic quantisation, per-channel weights
    onnx-<key>/export.json       sha256 of each file; agreement of each with torch

``key`` hashes the model's files (their bytes), the exporter settings and the
onnxruntime version. Files are written atomically, ``export.json`` last; a file whose
hash differs from the record is exported again. Every export is checked against the
torch model on a fixed probe (:data:`PROBE_DOCS` bundled Python-docs sections,
:data:`PROBE_TOKENS` tokens): fp32 must agree to cosine 0.999 on the first
:data:`PROBE_FP32_DOCS` (else the export is refused), int8 is used only where the
per-document cosine is >= :data:`AGREE_MEAN` on average and >= :data:`AGREE_P1` at the 1st
percentile (``--precision auto`` falls back
to fp32, ``--precision int8`` refuses).

At run time only ``onnxruntime``, ``tokenizers`` and numpy are imported: the model's
``tokenizer.json`` tokenizes (truncated to ``max_length``, whitespace stripped as
sentence-transformers does), documents are batched by token count, and the session runs
on the CPU cores this process may use (:func:`cpu_threads`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import (
    DEFAULT_BATCH_SIZE,
    MINILM_MAX_LENGTH,
    Embedder,
    l2_normalize,
)
from clusterclip.embedding.transformer import (
    LOAD_ERRORS,
    _local_model,
    bundled_minilm_path,
    model_files,
    model_identity,
    transformer_folder,
)
from clusterclip.errors import InputError
from clusterclip.pool import available_cpus
from clusterclip.storage.atomic import atomic_path, write_json
from clusterclip.storage.cache import cache_dir
from clusterclip.storage.digests import fingerprint, sha256_file
from clusterclip.storage.jsonfile import read_json

# Changes whenever the export recipe changes the graph (part of the cache key and of
# the embed stage's identity).
EXPORT_VERSION = 1
OPSET = 17
# Quantisation is allowed only where it agrees this well with torch (per-document cosine).
AGREE_MEAN = 0.99
AGREE_P1 = 0.97
# The fp32 export must reproduce torch to this cosine on every probe document.
EXPORT_MIN_COSINE = 0.999
# The fixed probe: evenly spaced bundled Python-docs sections, truncated to this many tokens.
PROBE_DOCS = 128
PROBE_TOKENS = 128
# The fp32 graph is checked on the first of them (it agrees to float rounding or not at all).
PROBE_FP32_DOCS = 32
PRECISIONS = ("auto", "fp32", "int8", "fp16")
KINDS = ("sentence-transformers", "hf")


def cpu_threads() -> int:
    """Threads for one process: ``OMP_NUM_THREADS`` when set, else the CPUs this process
    may run on, shared among the processes of this node under ``torchrun``."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cpus = available_cpus()
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    return max(1, cpus // max(1, int(local) if local.isdigit() else 1))


def onnxruntime_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def model_hash(path: Path) -> str:
    """sha256 over the relative names and bytes of every file of a model folder (dot files
    and folders left out)."""
    h = hashlib.sha256()
    for p in model_files(path):
        h.update(f"{p.relative_to(path).as_posix()}\0{sha256_file(p)}\0".encode())
    return h.hexdigest()


def probe_texts() -> list[str]:
    """The fixed probe: :data:`PROBE_DOCS` evenly spaced bundled Python-docs sections."""
    import gzip

    from clusterclip.data import pydocs_path

    with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"][:4000] for line in f]
    at = np.linspace(0, len(texts) - 1, PROBE_DOCS).round().astype(int)
    return [texts[i] for i in at]


def agreement(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Per-row cosine of two n x d arrays: mean, 1st percentile and minimum."""
    cos = np.sum(l2_normalize(a) * l2_normalize(b), axis=1, dtype=np.float64)
    return {"mean": float(cos.mean()), "p1": float(np.percentile(cos, 1)),
            "min": float(cos.min()), "docs": int(len(cos))}


def agrees(record: dict[str, float]) -> bool:
    return record["mean"] >= AGREE_MEAN and record["p1"] >= AGREE_P1


class _Export:
    """Everything that determines one model's ONNX files, and where they are cached."""

    def __init__(self, path: Path, kind: str, pooling: str, trust_remote_code: bool) -> None:
        import onnxruntime

        self.path, self.kind, self.pooling = path, kind, pooling
        self.trust_remote_code = trust_remote_code
        self.settings = {"v": EXPORT_VERSION, "opset": OPSET, "kind": kind, "pooling": pooling,
                         "attention": "eager", "fused": True, "int8": "dynamic-per-channel",
                         "probe": [PROBE_DOCS, PROBE_TOKENS, PROBE_FP32_DOCS], "onnxruntime":
                         onnxruntime.__version__}
        self.key = fingerprint({**self.settings, "model": model_hash(path)})
        root = cache_dir()
        self._tmp = None
        if root is None:  # no disk cache: this process exports into a folder of its own
            self._tmp = tempfile.TemporaryDirectory(prefix="clusterclip-onnx-")
            root = Path(self._tmp.name)
        self.folder = root / f"onnx-{self.key}"

    def record(self) -> dict[str, Any]:
        try:
            rec = read_json(self.folder / "export.json")
        except (OSError, InputError):
            return {}
        return rec if isinstance(rec, dict) and rec.get("key") == self.key else {}

    def file(self, int8: bool, progress: bool) -> tuple[Path, dict[str, Any]]:
        """The verified ONNX file (fp32 or int8) and the export record; exported (again)
        when missing or when its bytes are not the ones recorded."""
        name = "model-int8.onnx" if int8 else "model.onnx"
        rec = self.record()
        if self.verified(name, rec) is None:
            rec = self.build(progress)
        return self.folder / name, rec

    def verified(self, name: str, rec: dict[str, Any]) -> Path | None:
        """``folder/name`` when the record ``rec`` (:meth:`record`) lists it with the hash of
        its bytes, else None."""
        want = rec.get("files", {}).get(name)
        return self.folder / name if want and _same_hash(self.folder / name, want) else None

    def build(self, progress: bool) -> dict[str, Any]:
        """Export, fuse, quantise and check against torch; write the files and the record."""
        from tqdm import tqdm

        with tqdm(total=4, desc="exporting the model to ONNX (once)", disable=not progress,
                  leave=False) as bar:
            self.folder.mkdir(parents=True, exist_ok=True)
            fp32, int8 = self.folder / "model.onnx", self.folder / "model-int8.onnx"
            names, meta = self._export(fp32)
            bar.update(1)
            _quantize(fp32, int8)
            bar.update(1)
            texts = probe_texts()
            ref = self._torch_vectors(texts)
            bar.update(1)
            checks = {}
            for which, path, n in (("fp32", fp32, PROBE_FP32_DOCS), ("int8", int8, None)):
                emb = OnnxEmbedder.from_file(path, self, names, meta, max_length=PROBE_TOKENS)
                checks[which] = agreement(emb.encode(texts[:n]), ref[:n])
            bar.update(1)
        if checks["fp32"]["min"] < EXPORT_MIN_COSINE:
            raise InputError(f"{self.path}: the ONNX export does not reproduce the torch model "
                             f"(cosine {checks['fp32']['min']:.4f} on a probe document); use "
                             f"backend torch", params=("backend",))
        rec = {"key": self.key, "settings": self.settings, "inputs": names, "meta": meta,
               "files": {p.name: sha256_file(p) for p in (fp32, int8)},
               "fp32": checks["fp32"], "int8": {**checks["int8"], "agrees": agrees(
                   checks["int8"])}}
        write_json(self.folder / "export.json", rec)
        return rec

    def _load_torch(self, eager: bool) -> Any:
        """The torch module whose outputs the graph reproduces."""
        kwargs = {"attn_implementation": "eager"} if eager else {}
        try:
            if self.kind == "sentence-transformers":
                from sentence_transformers import SentenceTransformer

                return SentenceTransformer(str(self.path), device="cpu", local_files_only=True,
                                           model_kwargs=kwargs).eval()
            from transformers import AutoModel

            return AutoModel.from_pretrained(str(self.path), local_files_only=True,
                                             trust_remote_code=self.trust_remote_code,
                                             **kwargs).eval()
        except LOAD_ERRORS as e:
            what = "a sentence-transformers" if self.kind != "hf" else "a Hugging Face"
            raise InputError(f"{self.path}: cannot load as {what} model "
                             f"({str(e).splitlines()[0]})") from None

    def _torch_vectors(self, texts: list[str]) -> np.ndarray:
        from clusterclip.embedding.transformer import HFEmbedder, SentenceTransformerEmbedder

        if self.kind == "sentence-transformers":
            ref = SentenceTransformerEmbedder(self.path, max_length=PROBE_TOKENS)
        else:
            ref = HFEmbedder(self.path, pooling=self.pooling, max_length=PROBE_TOKENS,
                             trust_remote_code=self.trust_remote_code)
        return ref.encode(texts)

    def _export(self, out: Path) -> tuple[list[str], dict[str, Any]]:
        """``torch.onnx.export`` of the model with pooling, then ONNX Runtime's transformer
        fusions; returns the graph's input names and what the runtime needs to know."""
        import torch

        model = self._load_torch(eager=True)
        tok_folder = transformer_folder(self.path) if self.kind == "sentence-transformers" \
            else self.path
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tok_folder), local_files_only=True,
                                            trust_remote_code=self.trust_remote_code)
        sample = tok(["a first example sentence", "and a second one"], padding=True,
                     return_tensors="pt")
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
        pooling = "model" if self.kind == "sentence-transformers" else self.pooling

        class Pooled(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
                feats = dict(zip(names, inputs, strict=True))
                if pooling == "model":
                    return self.model(feats)["sentence_embedding"]
                hidden = self.model(**feats).last_hidden_state
                if pooling == "first":
                    return hidden[:, 0]
                mask = feats["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

        axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"embedding": {0: "batch"}}
        with atomic_path(out) as tmp, torch.inference_mode():
            torch.onnx.export(Pooled().eval(), tuple(sample[n] for n in names), str(tmp),
                              input_names=names, output_names=["embedding"],
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False)
            _fuse(tmp, model)
        config = model[0].auto_model.config if pooling == "model" else model.config
        return names, {"pad_id": int(tok.pad_token_id or 0),
                       "max_positions": int(getattr(config, "max_position_embeddings", 0) or 0),
                       "dim": int(model.get_sentence_embedding_dimension()
                                  if pooling == "model" else config.hidden_size)}


def _same_hash(path: Path, want: str) -> bool:
    try:
        return sha256_file(path) == want
    except OSError:
        return False


def _fuse(path: Path, model: Any) -> None:
    """ONNX Runtime's transformer optimiser in place (attention, GELU, layer norms fused);
    a graph it cannot fuse is left as exported."""
    from onnxruntime.transformers import optimizer

    config = getattr(model, "config", None) or model[0].auto_model.config
    try:
        opt = optimizer.optimize_model(str(path), model_type="bert",
                                       num_heads=int(getattr(config, "num_attention_heads", 0)),
                                       hidden_size=int(getattr(config, "hidden_size", 0)),
                                       opt_level=1)
    except Exception:  # noqa: BLE001 - an unfusable graph still runs unfused
        return
    opt.save_model_to_file(str(path))


def _quantize(src: Path, dst: Path) -> None:
    """int8 dynamic quantisation, per-channel weights, of MatMul and fused Attention."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with atomic_path(dst) as tmp:
        quantize_dynamic(str(src), str(tmp), per_channel=True, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Attention"],
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


class OnnxEmbedder(Embedder):
    """A sentence-transformers model (``minilm``) or Hugging Face ``AutoModel`` (``hf``)
    through ONNX Runtime; vectors agree with the torch backend's (see the module).

    ``precision``: ``auto`` (int8 where it agrees with torch, else fp32; fp32 on CUDA),
    ``fp32`` or ``int8``. On ``device="cuda"`` the CUDA execution provider of
    onnxruntime-gpu runs the fp32 graph.
    """

    def __init__(self, model: str | os.PathLike[str] | None = None, *,
                 kind: str = "sentence-transformers", pooling: str = "mean",
                 device: str = "cpu", batch_size: int = DEFAULT_BATCH_SIZE,
                 max_length: int = MINILM_MAX_LENGTH,
                 precision: str = "auto", trust_remote_code: bool = False,
                 progress: bool = True) -> None:
        super().__init__(batch_size=batch_size, max_length=max_length)
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: expected one of {KINDS}")
        if precision not in ("auto", "fp32", "int8"):
            raise InputError(f"precision {precision}: the onnx backend runs auto, fp32 or "
                             f"int8", params=("precision",))
        path = _local_model(model, bundled_minilm_path() if kind != "hf" else None)
        cuda = device.startswith("cuda")
        if cuda and precision == "int8":
            raise InputError("precision int8 runs on the CPU only (use device cpu)",
                             params=("precision", "device"))
        self._providers = _providers(device)
        export = _Export(path, kind, pooling if kind == "hf" else "model", trust_remote_code)
        want_int8 = precision == "int8" or (precision == "auto" and not cuda)
        file, rec = export.file(int8=want_int8, progress=progress)
        if want_int8 and not rec["int8"]["agrees"]:
            if precision == "int8":
                a = rec["int8"]
                raise InputError(f"{path}: int8 agrees with torch only to cosine "
                                 f"{a['mean']:.4f} on average, {a['p1']:.4f} at the 1st "
                                 f"percentile (needs {AGREE_MEAN} and {AGREE_P1}); use "
                                 f"precision fp32", params=("precision",))
            file, rec = export.file(int8=False, progress=progress)
            want_int8 = False
        self.precision = "int8" if want_int8 else "fp32"
        self.agreement = rec["int8" if want_int8 else "fp32"]
        self._setup(file, export, rec["inputs"], rec["meta"], device)

    @classmethod
    def from_file(cls, file: Path, export: _Export, names: list[str], meta: dict[str, Any],
                  *, max_length: int) -> OnnxEmbedder:
        """An embedder over one exported file on the CPU (the export's own check)."""
        self = cls.__new__(cls)
        Embedder.__init__(self, batch_size=64, max_length=max_length)
        self._providers = ["CPUExecutionProvider"]
        self.precision, self.agreement = "unchecked", {}
        self._setup(file, export, names, meta, "cpu")
        return self

    def _setup(self, file: Path, export: _Export, names: list[str], meta: dict[str, Any],
               device: str) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.name = "minilm" if export.kind == "sentence-transformers" else "hf"
        self.path, self.kind, self.pooling = export.path, export.kind, export.pooling
        self.device, self.file, self._inputs = device, file, names
        self.dim = int(meta["dim"])
        self.max_length = _max_tokens(export.path, export.kind, self.max_length,
                                      meta["max_positions"])
        tok_folder = transformer_folder(self.path) if self.kind != "hf" else self.path
        if not (tok_folder / "tokenizer.json").exists():
            raise InputError(f"{tok_folder}: no tokenizer.json (backend onnx needs a fast "
                             f"tokenizer; use backend torch)", params=("backend",))
        self.tokenizer = Tokenizer.from_file(str(tok_folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()
        self._pad = int(meta["pad_id"])
        self._lower = self.kind != "hf" and _st_lowercases(self.path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = cpu_threads()
        so.inter_op_num_threads = 1
        # Busy-waiting threads only take CPU from the other processes of a shared machine.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(file), so, providers=self._providers)
        self._export = export  # keeps a temporary export folder alive (no disk cache)

    def identity(self) -> dict[str, Any]:
        ident = {**super().identity(), "backend": "onnx", "precision": self.precision,
                 "export_version": EXPORT_VERSION, "model": model_identity(self.path)}
        if self.kind == "hf":
            ident["pooling"] = self.pooling
        return ident

    def encode(self, texts: Sequence[str],
               on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        """n x dim float32, L2-normalised, in input order; batches of similar token count."""
        if self.kind != "hf":  # sentence-transformers strips (and may lower-case) texts
            texts = [t.strip().lower() if self._lower else t.strip() for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), 4096):  # bounds the token lists kept at once
            part = list(texts[start:start + 4096])
            encs = self.tokenizer.encode_batch(part)
            lengths = np.fromiter((len(e.ids) for e in encs), np.int64, len(encs))
            order = np.argsort(-lengths, kind="stable")
            for i in range(0, len(order), self.batch_size):
                batch = order[i:i + self.batch_size]
                out[start + batch] = self._run([encs[j] for j in batch])
                if on_batch is not None:
                    on_batch(len(batch))
        return l2_normalize(out)

    def _run(self, encs: list[Any]) -> np.ndarray:
        width = max(1, max(len(e.ids) for e in encs))
        ids = np.full((len(encs), width), self._pad, dtype=np.int64)
        types = np.zeros((len(encs), width), dtype=np.int64)
        mask = np.zeros((len(encs), width), dtype=np.int64)
        for r, e in enumerate(encs):
            n = len(e.ids)
            ids[r, :n], types[r, :n], mask[r, :n] = e.ids, e.type_ids, 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return self.session.run(None, {n: feeds[n] for n in self._inputs})[0]


def _providers(device: str) -> list[str]:
    import onnxruntime as ort

    if device == "cpu":
        return ["CPUExecutionProvider"]
    if device.startswith("cuda"):
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise InputError(f"backend onnx device {device}: this onnxruntime has no CUDA "
                             f"provider (pip install onnxruntime-gpu), or use backend torch",
                             params=("backend", "device"))
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    raise InputError(f"device {device}: the onnx backend runs on cpu or cuda",
                     params=("device",))


def _max_tokens(path: Path, kind: str, max_length: int, max_positions: int) -> int:
    """Tokens per document: ``max_length``, capped by the model's own limits (what the torch
    embedders do: sentence-transformers' ``max_seq_length``, the position table)."""
    limit = max_positions or max_length
    if kind != "hf":
        try:
            cfg = read_json(path / "sentence_bert_config.json")
            limit = int(cfg.get("max_seq_length") or limit)
        except (OSError, ValueError, TypeError, AttributeError, InputError):
            pass
    return min(max_length, limit)


def _st_lowercases(path: Path) -> bool:
    try:
        cfg = read_json(path / "sentence_bert_config.json")
    except (OSError, InputError):
        return False
    if not isinstance(cfg, dict):
        return False
    return bool(cfg.get("do_lower_case", False))
