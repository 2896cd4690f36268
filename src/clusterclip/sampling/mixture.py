"""Mixtures: the cluster weights, clip and timing of a schedule, kept as a file.

A mixture says how much of each cluster to train on: ``weights[k]`` is cluster
``k``'s weight (>= 0; a cluster of weight 0 is never drawn), ``clip`` the
repetition clip R and ``timing`` how the draws are placed: ``paced`` gives
cluster k ``min(R n_k, lam w_k)`` draws spread evenly over the schedule,
``clusterclip`` draws greedily by weight until a cluster's R passes are used up.
``clusterclip search`` writes one (``W/search/mixture.json``); ``sample
--mixture``, ``run --mixture`` and the samplers' ``cluster_weights`` read it.

The file is JSON::

    {"format_version": 1, "weights": [0.2, 0.0, ...], "clip": 4, "timing": "paced",
     "objective": "target", ...}

with any further keys kept as they are (``write_mixture(..., **extra)``).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.io import sha256_file, write_json
from clusterclip.limits import MAX_CLIP, int_problem, real_problem, shown, weight_span_problem

MIXTURE_FORMAT_VERSION = 1
#: How a mixture's draws are placed: the sampler strategies that take a mixture.
MIXTURE_TIMINGS = ("paced", "clusterclip")


@dataclass(frozen=True)
class Mixture:
    """Cluster weights (index = cluster id), repetition clip R, timing and objective.

    Checked on construction: every weight finite and >= 0, at least one > 0, their sum
    finite, ``clip`` an integer in [1, 2**20] (:data:`clusterclip.limits.MAX_CLIP`),
    ``timing`` one of :data:`MIXTURE_TIMINGS` (:class:`InputError` otherwise).
    """

    weights: tuple[float, ...]
    clip: int
    timing: str
    objective: str

    def __post_init__(self) -> None:
        if isinstance(self.weights, np.ndarray):
            object.__setattr__(self, "weights", tuple(self.weights.tolist()))
        problem = _problem(self.weights, self.clip, self.timing, self.objective)
        if problem:
            raise InputError(f"mixture: {problem}")
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        object.__setattr__(self, "clip", int(self.clip))

    @property
    def num_clusters(self) -> int:
        return len(self.weights)

    def cluster_weights(self) -> np.ndarray:
        """float64 (K,): the weights, as the samplers' ``cluster_weights`` takes them."""
        return np.array(self.weights, dtype=np.float64)


def _problem(weights: Any, clip: Any, timing: Any, objective: Any) -> str | None:
    """What is wrong with these fields (one phrase), or None."""
    if not isinstance(weights, (list, tuple)) or not weights:
        return "weights must be a non-empty list of numbers, one per cluster id"
    for k, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            return f"weights[{k}] is {shown(repr(w))}, not a number"
        if real_problem(w, 0.0, math.inf):  # NaN, infinite, negative, or past float's range
            return f"weights[{k}] is {shown(w)}; every weight must be finite and >= 0"
    if not any(w > 0 for w in weights):
        return "every weight is 0; at least one cluster needs a weight > 0"
    if not math.isfinite(sum(float(w) for w in weights)):
        return "the weights sum to infinity; scale them down"
    span = weight_span_problem([float(w) for w in weights])
    if span:
        return span
    problem = int_problem(clip, 1, MAX_CLIP)
    if problem:
        return f"clip {problem}"
    if timing not in MIXTURE_TIMINGS:
        return f"timing must be one of {', '.join(MIXTURE_TIMINGS)}, got {timing!r:.40}"
    if not isinstance(objective, str):
        return f"objective must be a string, got {objective!r:.40}"
    return None


def read_mixture(path: str | os.PathLike[str], num_clusters: int | None = None) -> Mixture:
    """The mixture in the JSON file ``path``, checked.

    With ``num_clusters`` (K of the labels it is for), ``weights`` must have
    exactly K entries. Raises :class:`InputError` naming the file and the
    problem: unreadable or not JSON, another ``format_version``, a missing
    field, weights NaN/infinite/negative/all zero or of the wrong length, clip
    < 1, an unknown timing.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read the mixture ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a mixture file (not JSON: {e})") from None
    except ValueError as e:  # an integer of more digits than Python reads
        raise InputError(f"{path}: a number out of range ({str(e).split(';')[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a mixture file (a JSON object is expected)")
    version = data.get("format_version")
    if version != MIXTURE_FORMAT_VERSION or isinstance(version, bool):
        raise InputError(f"{path}: mixture format_version {version!r:.40} is not supported "
                         f"(this clusterclip reads version {MIXTURE_FORMAT_VERSION})")
    missing = [k for k in ("weights", "clip", "timing") if k not in data]
    if missing:
        raise InputError(f"{path}: the mixture has no {', '.join(missing)}")
    fields = (data["weights"], data["clip"], data["timing"], data.get("objective", ""))
    problem = _problem(*fields)
    if problem:
        raise InputError(f"{path}: {problem}")
    if num_clusters is not None and len(data["weights"]) != num_clusters:
        raise InputError(f"{path}: the mixture has {len(data['weights'])} weights but the "
                         f"labels have {num_clusters} cluster ids: it was made for other "
                         f"labels")
    return Mixture(tuple(data["weights"]), data["clip"], data["timing"], fields[3])


def write_mixture(path: str | os.PathLike[str], mixture: Mixture, **extra: Any) -> None:
    """Write ``mixture`` to ``path`` as JSON, atomically; ``extra`` keys are added as given
    (they must be JSON-serialisable and must not reuse the mixture's own keys)."""
    own = {"format_version": MIXTURE_FORMAT_VERSION, "weights": list(mixture.weights),
           "clip": mixture.clip, "timing": mixture.timing, "objective": mixture.objective}
    clash = sorted(set(own) & set(extra))
    if clash:
        raise ValueError(f"write_mixture: extra keys {clash} are the mixture's own")
    write_json(path, {**own, **extra})


def mixture_record(path: str | os.PathLike[str]) -> dict[str, str]:
    """What a summary or a stage records of the mixture file ``path``: its absolute path
    and the SHA-256 of its bytes."""
    return {"path": str(os.path.abspath(path)), "sha256": sha256_file(path)}


def resolve_strategy(strategy: str | None, clip: int | None, mixture: Mixture | None = None
                     ) -> tuple[str, int | None]:
    """``(strategy, clip)`` of a command's sampler: those given, else the mixture's timing
    and clip, else the commands' strategy (``DEFAULT_COMMAND_STRATEGY``) and clip None (the
    caller takes :func:`clusterclip.sampling.clip.default_clip`'s, which needs the labels and
    the budget). A mixture cannot be drawn by ``random`` (it draws no cluster):
    InputError."""
    from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY

    if mixture is None:
        return DEFAULT_COMMAND_STRATEGY if strategy is None else strategy, clip
    strategy = mixture.timing if strategy is None else strategy
    if strategy == "random":
        raise InputError("strategy random draws documents, not clusters, so it takes no "
                         "mixture; choose paced or clusterclip (the mixture's timing is "
                         f"{mixture.timing})")
    return strategy, mixture.clip if clip is None else clip
