"""Mixtures: the cluster weights, clip and timing of a schedule, kept as a file.

A mixture says how much of each cluster to train on: ``weights[k]`` is cluster
``k``'s weight (>= 0; a cluster of weight 0 is never drawn), ``clip`` the
repetition clip R and ``timing`` how the draws are placed: ``paced`` gives
cluster k ``min(R n_k, lam w_k)`` draws spread evenly over the schedule,
``clusterclip`` draws greedily by weight until a cluster's R passes are used up.
``clusterclip search`` writes one (``W/search/mixture.json``); ``sample
--mixture``, ``run --mixture`` and the samplers' ``cluster_weights`` read it.

The file is JSON:

    {"format_version": 1, "weights": [0.2, 0.0, ...], "clip": 4, "timing": "paced",
     "objective": "target", ...}

with any further keys kept as they are (``write_mixture(..., **extra)``).

Version 2 adds ``stages``: the weights change over training, under one clip:

    {"format_version": 2, "clip": 4, "timing": "paced",
     "stages": [{"until": 0.8, "weights": [...]},
                {"until": 1.0, "weights": [...], "timing": "clusterclip"}]}

Stage i draws the positions from the previous stage's end to ``round(until x T)``
of a schedule of T positions (``until`` in (0, 1], strictly increasing, the last
1) with its weights (one per cluster id) and its timing (default: the file's). No
document is drawn more than R times over all stages together: a stage's clusters
have what earlier stages left of their R passes. A version-1 file is one stage, and
a one-stage version-2 file is the same mixture as the version-1 file of its weights.

Either version may carry ``exclude``: the corpus document indices kept out of the
schedule (``search propose --target`` writes the corpus copies of the target's
documents there), read with
[`read_exclusions`][clusterclip.sampling.mixture.read_exclusions]; ``sample
--mixture`` labels them -1 before drawing, as the candidate's own schedule was drawn.
Read a file with [`read_mixture`][clusterclip.sampling.mixture.read_mixture], write
one with [`write_mixture`][clusterclip.sampling.mixture.write_mixture].
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.limits import MAX_CLIP, int_problem, real_problem, shown, weight_span_problem
from clusterclip.storage.atomic import write_json
from clusterclip.storage.digests import sha256_file
from clusterclip.storage.jsonfile import read_json

MIXTURE_FORMAT_VERSION = 1
#: The version of a mixture file with ``stages``.
STAGED_FORMAT_VERSION = 2
#: How a mixture's draws are placed: the sampler strategies that take a mixture.
MIXTURE_TIMINGS = ("paced", "clusterclip")


@dataclass(frozen=True)
class Mixture:
    """Cluster weights (index = cluster id), repetition clip R, timing and objective.

    Checked on construction. A sampler takes it as ``mixture=`` (see
    [`SamplerSpec`][clusterclip.sampling.SamplerSpec]), or its
    [`cluster_weights`][clusterclip.sampling.mixture.Mixture.cluster_weights].

    Parameters
    ----------
    weights : tuple of float
        One weight per cluster id: finite and >= 0, at least one > 0, their sum
        finite (a cluster of weight 0 is never drawn). A numpy array is taken as its
        list.
    clip : int
        The repetition clip R, in [1, 2**20].
    timing : str
        How the draws are placed: one of
        [`MIXTURE_TIMINGS`][clusterclip.sampling.mixture.MIXTURE_TIMINGS].
    objective : str
        What the weights were chosen for (a note kept in the file).
    stages : tuple of Stage
        More than one [`Stage`][clusterclip.sampling.mixture.Stage] (a staged
        mixture; ``weights`` are then the first stage's), or empty: one stage of
        ``weights`` over the whole schedule. One stage is made the plain mixture of
        its weights.

    Raises
    ------
    InputError
        If a field is not valid (the message names it).

    Examples
    --------
    >>> from clusterclip.sampling import Mixture, Stage
    >>> m = Mixture((0.5, 0.0, 1.5), clip=4, timing="paced", objective="")
    >>> m.num_clusters, m.staged, m.cluster_weights().tolist()
    (3, False, [0.5, 0.0, 1.5])
    >>> staged = Mixture((), 4, "paced", "", stages=(Stage(0.8, (1.0, 1.0, 0.0)),
    ...                                             Stage(1.0, (0.0, 1.0, 1.0))))
    >>> staged.staged, staged.weights
    (True, (1.0, 1.0, 0.0))
    """

    weights: tuple[float, ...]
    clip: int
    timing: str
    objective: str
    #: more than one ``Stage`` (a staged mixture; ``weights`` are then the first
    #: stage's), or empty: one stage of ``weights`` over the whole schedule
    stages: tuple[Stage, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.weights, np.ndarray):
            object.__setattr__(self, "weights", tuple(self.weights.tolist()))
        if self.stages and not self.weights and isinstance(self.stages, (list, tuple)):
            object.__setattr__(self, "weights", tuple(self.stages[0].weights))
        object.__setattr__(self, "stages", tuple(self.stages))
        problem = _problem(self.weights, self.clip, self.timing, self.objective)
        if not problem and self.stages:
            problem = _stages_problem(self.stages, self.clip, self.timing, self.objective)
        if problem:
            raise InputError(f"mixture: {problem}")
        if len(self.stages) == 1:  # one stage is the plain mixture of its weights
            st = self.stages[0]
            object.__setattr__(self, "timing", st.timing or self.timing)
            object.__setattr__(self, "weights", tuple(st.weights))
            object.__setattr__(self, "stages", ())
        elif self.stages:
            object.__setattr__(self, "stages", tuple(
                Stage(float(st.until), tuple(float(w) for w in st.weights), st.timing)
                for st in self.stages))
            object.__setattr__(self, "weights", self.stages[0].weights)
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        object.__setattr__(self, "clip", int(self.clip))

    @property
    def num_clusters(self) -> int:
        """The number of cluster ids the weights are for (K)."""
        return len(self.weights)

    def cluster_weights(self) -> np.ndarray:
        """The weights, as the samplers' ``cluster_weights`` takes them.

        Returns
        -------
        numpy.ndarray
            float64 (K,) weights; of a staged mixture, the first stage's (pass a
            staged mixture as ``mixture=``).
        """
        return np.array(self.weights, dtype=np.float64)

    @property
    def staged(self) -> bool:
        """Whether the weights change over the schedule (more than one stage)."""
        return len(self.stages) > 1

    def stage_list(self) -> tuple[Stage, ...]:
        """The stages, the one of a plain mixture included.

        Returns
        -------
        tuple of Stage
            ``stages``, or for a plain mixture one
            [`Stage`][clusterclip.sampling.mixture.Stage] of its weights up to 1.
        """
        return self.stages or (Stage(1.0, self.weights, self.timing),)

    def sampler_options(self) -> dict[str, Any]:
        """What a sampler takes of this mixture (the same schedule either way).

        Returns
        -------
        dict
            ``{"mixture": self}`` when staged, else ``{"cluster_weights": ...}``:
            keyword arguments for [`make_sampler`][clusterclip.sampling.make_sampler].
        """
        if self.staged:
            return {"mixture": self}
        return {"cluster_weights": self.cluster_weights()}


@dataclass(frozen=True)
class Stage:
    """One stage of a staged [`Mixture`][clusterclip.sampling.mixture.Mixture].

    Parameters
    ----------
    until : float
        Where the stage ends, as a fraction of the schedule in (0, 1]; it starts
        where the previous stage ended (0 for the first).
    weights : tuple of float
        One weight per cluster id, as a mixture's ``weights``.
    timing : str or None
        ``"paced"`` or ``"clusterclip"``; None: the mixture's.
    """

    until: float
    weights: tuple[float, ...]
    timing: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.weights, np.ndarray):
            object.__setattr__(self, "weights", tuple(self.weights.tolist()))


def _stages_problem(stages: Any, clip: Any, timing: Any, objective: Any,
                    num_clusters: int | None = None) -> str | None:
    """What is wrong with a mixture's ``stages`` (one phrase naming the field), or None."""
    if not isinstance(stages, (list, tuple)) or not stages:
        return "stages must be a non-empty list of {\"until\": ..., \"weights\": [...]}"
    prev, K = 0.0, num_clusters
    for i, st in enumerate(stages):
        if isinstance(st, Stage):
            until, weights, own = st.until, st.weights, st.timing
        elif not isinstance(st, dict) or "until" not in st or "weights" not in st:
            return f"stages[{i}] must be an object with until and weights"
        else:
            until, weights, own = st["until"], st["weights"], st.get("timing")
        if isinstance(until, bool) or not isinstance(until, numbers.Real) \
                or not math.isfinite(until) or not 0 < until <= 1:
            return f"stages[{i}].until is {until!r:.40}; it must be in (0, 1]"
        if until <= prev:
            return (f"stages[{i}].until is {until}, not above stages[{i - 1}].until "
                    f"{prev}: the stages must be strictly increasing")
        problem = _problem(weights, clip, timing if own is None else own, objective)
        if problem:
            return f"stages[{i}].{problem}" if problem.startswith("weights[") \
                else f"stages[{i}]: {problem}"
        K = len(weights) if K is None else K
        if len(weights) != K:
            return (f"stages[{i}].weights has {len(weights)} weights, not {K} (one per "
                    f"cluster id{'' if num_clusters is not None else ', as stages[0]'})")
        prev = until
    if prev != 1:
        return f"stages[{len(stages) - 1}].until is {prev}; the last stage must end at 1"
    return None


def _read_staged(path: str | os.PathLike[str], data: dict[str, Any],
                 num_clusters: int | None) -> Mixture:
    """The version-2 mixture ``data`` of file ``path``, checked (InputError naming both)."""
    missing = [k for k in ("stages", "clip", "timing") if k not in data]
    if missing:
        raise InputError(f"{path}: the mixture has no {', '.join(missing)}")
    stages, clip, timing = data["stages"], data["clip"], data["timing"]
    objective = data.get("objective", "")
    first = stages[0]["weights"] if isinstance(stages, list) and stages \
        and isinstance(stages[0], dict) and "weights" in stages[0] else None
    problem = _problem([1.0], clip, timing, objective)  # the fields beside the stages
    if not problem:
        problem = _stages_problem(stages, clip, timing, objective, num_clusters)
    if problem:
        if num_clusters is not None and "one per cluster id" in problem:
            problem += f": the labels have {num_clusters} cluster ids"
        raise InputError(f"{path}: {problem}")
    return Mixture(tuple(first), clip, timing, objective,
                   tuple(Stage(float(st["until"]), tuple(st["weights"]), st.get("timing"))
                         for st in stages))


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

    Parameters
    ----------
    path : str or os.PathLike
        A mixture file (format version 1 or 2).
    num_clusters : int or None
        K of the labels the mixture is for: then ``weights`` (of every stage) must
        have exactly K entries.

    Returns
    -------
    Mixture
        The mixture, checked.

    Raises
    ------
    InputError
        Naming the file and the problem: unreadable or not JSON, another
        ``format_version``, a missing field, weights NaN/infinite/negative/all zero
        or of the wrong length, clip < 1, an unknown timing.

    Examples
    --------
    >>> import os, tempfile
    >>> from clusterclip.sampling import Mixture, read_mixture, write_mixture
    >>> path = os.path.join(tempfile.mkdtemp(), "mixture.json")
    >>> write_mixture(path, Mixture((1.0, 2.0), 4, "paced", "target"), note="kept")
    >>> read_mixture(path, num_clusters=2)
    Mixture(weights=(1.0, 2.0), clip=4, timing='paced', objective='target', stages=())
    >>> read_mixture(path, num_clusters=3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: ...mixture.json: the mixture has 2 weights but the labels ...
    """
    try:
        data = read_json(path, "a mixture file")
    except FileNotFoundError as e:
        raise InputError(f"{path}: cannot read the mixture ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a mixture file (a JSON object is expected)")
    version = data.get("format_version")
    if version == STAGED_FORMAT_VERSION and not isinstance(version, bool):
        return _read_staged(path, data, num_clusters)
    if version != MIXTURE_FORMAT_VERSION or isinstance(version, bool):
        raise InputError(f"{path}: mixture format_version {version!r:.40} is not supported "
                         f"(this clusterclip reads versions {MIXTURE_FORMAT_VERSION} and "
                         f"{STAGED_FORMAT_VERSION})")
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
    """Write ``mixture`` to ``path`` as JSON, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced whole, never half-written).
    mixture : Mixture
        The mixture; a staged one is written as format version 2.
    **extra : Any
        Further keys, added as given: JSON-serialisable, and not the mixture's own
        keys.

    Raises
    ------
    ValueError
        If an ``extra`` key is one of the mixture's own.

    See Also
    --------
    - [`read_mixture`][clusterclip.sampling.mixture.read_mixture]: reads it back.
    """
    own = {"format_version": MIXTURE_FORMAT_VERSION, "weights": list(mixture.weights),
           "clip": mixture.clip, "timing": mixture.timing, "objective": mixture.objective}
    if mixture.staged:
        del own["weights"]
        own["format_version"] = STAGED_FORMAT_VERSION
        own["stages"] = [{"until": st.until, "weights": list(st.weights),
                          **({"timing": st.timing} if st.timing else {})}
                         for st in mixture.stages]
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


def read_exclusions(path: str | os.PathLike[str], num_docs: int) -> np.ndarray:
    """The corpus documents a mixture file keeps out of its schedules (its ``exclude``).

    Parameters
    ----------
    path : str or os.PathLike
        A mixture file.
    num_docs : int
        The documents the labels have: every index must be below it.

    Returns
    -------
    numpy.ndarray
        int64 document indices, sorted and unique; empty when the file has none.

    Raises
    ------
    InputError
        Naming the file: ``exclude`` not a list of integers in ``[0, num_docs)``.

    Examples
    --------
    >>> import os, tempfile
    >>> from clusterclip.sampling import Mixture, write_mixture
    >>> from clusterclip.sampling.mixture import read_exclusions
    >>> path = os.path.join(tempfile.mkdtemp(), "mixture.json")
    >>> write_mixture(path, Mixture((1.0, 2.0), 4, "paced", ""), exclude=[5, 2])
    >>> read_exclusions(path, num_docs=10).tolist()
    [2, 5]
    """
    try:
        data = read_json(path, "a mixture file")
    except FileNotFoundError:
        raise InputError(f"{path}: cannot read the mixture (no such file)") from None
    ids = data.get("exclude", []) if isinstance(data, dict) else []
    if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_docs for i in ids):
        raise InputError(f"{path}: exclude must be a list of document indices in "
                         f"[0, {num_docs}) (the labels have {num_docs} documents)")
    return np.unique(np.asarray(ids, dtype=np.int64))


def excluding(labels: np.ndarray, exclude: np.ndarray) -> np.ndarray:
    """``labels`` with the documents ``exclude`` labelled -1 (a copy when any is)."""
    if exclude.size == 0:
        return labels
    out = np.array(labels, copy=True)
    out[exclude] = -1
    return out
