"""Settings of the proxy model and its optimiser, and the byte vocabulary (no torch here)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Byte-level vocabulary: the 256 byte values plus one end-of-document token.
EOS = 256
VOCAB_SIZE = 257


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the model. The default is the ``small`` preset (0.45 M parameters,
    window 128); see :data:`MODEL_PRESETS`."""

    seq_len: int = 128
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    #: Tokens of the vocabulary, the end-of-document separator (the last id) included:
    #: :data:`VOCAB_SIZE` for bytes, a tokenizer's vocabulary + 1 with ``--tokenizer``.
    vocab_size: int = VOCAB_SIZE

    @property
    def eos(self) -> int:
        """The end-of-document token: the last id of the vocabulary."""
        return self.vocab_size - 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.vocab_size == VOCAB_SIZE:
            del d["vocab_size"]  # byte-level results keep their bytes
        return d

    def num_parameters(self) -> int:
        """Parameters of :class:`~clusterclip.lm.model.ByteLM` of this shape,
        counted without building it: token and position embeddings (the output layer
        shares the token embedding), per layer two layer norms, the attention's qkv and
        projection and the 4x MLP, and the final layer norm."""
        d = self.d_model
        per_layer = 12 * d * d + 13 * d
        return self.vocab_size * d + self.seq_len * d + self.n_layers * per_layer + 2 * d


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings shared by every run of an experiment or a search."""

    batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_frac: float = 0.05
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_points: int = 9       # evaluations over training, including start and end
    eval_batch_size: int = 32

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Model size presets for ``--model``: (shape, peak learning rate). ``tiny`` is the
#: ``--quick`` model (44 k parameters, window 64), ``small`` the default (0.45 M,
#: window 128), ``base`` a model large enough to memorise repeated documents
#: (3.26 M, window 128; meant for a GPU, slow on 2 CPU cores); ``medium`` (14.4 M,
#: window 256) and ``large`` (59.4 M, window 256) are for ``--device cuda`` only (with
#: bytes; a tokenizer's vocabulary adds vocabulary x d parameters).
MODEL_PRESETS: dict[str, tuple[ModelConfig, float]] = {
    "tiny": (ModelConfig(seq_len=64, d_model=48, n_layers=1, n_heads=2), 3e-3),
    "small": (ModelConfig(seq_len=128, d_model=128, n_layers=2, n_heads=4), 2e-3),
    "base": (ModelConfig(seq_len=128, d_model=256, n_layers=4, n_heads=8), 1e-3),
    "medium": (ModelConfig(seq_len=256, d_model=384, n_layers=8, n_heads=6), 6e-4),
    "large": (ModelConfig(seq_len=256, d_model=640, n_layers=12, n_heads=10), 3e-4),
}
DEFAULT_MODEL = "small"


def format_parameters(n: int) -> str:
    """``44k``, ``0.45M``: a parameter count in words."""
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def describe_presets() -> str:
    """Each preset's parameter count (byte vocabulary) and window, for ``--help``."""
    return ", ".join(f"{name} {format_parameters(m.num_parameters())} parameters window "
                     f"{m.seq_len}" for name, (m, _) in MODEL_PRESETS.items())


def describe_model(config: dict[str, Any]) -> str:
    """The proxy model in words, from a results dict's ``config``: parameters, window and
    how much of each document it reads (it limits what a verdict means)."""
    m = ModelConfig(**config["model"])
    size = format_parameters(m.num_parameters())
    tok = config.get("tokenizer")
    kind, unit = ("byte-level LM", "bytes") if tok is None else (
        f"LM over the tokens of {tok} ({m.vocab_size:,}-token vocabulary)", "tokens")
    return (f"a {size}-parameter {kind} ({m.n_layers} layer"
            f"{'s' if m.n_layers != 1 else ''}, d={m.d_model}, window {m.seq_len}, reading "
            f"the first {config['max_doc_tokens'] - 1} {unit} of each document)")
