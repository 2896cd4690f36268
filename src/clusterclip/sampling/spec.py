"""The sampler's parameters, their checks and the strategy rules, each in one place.

[`SamplerSpec`][clusterclip.sampling.SamplerSpec] holds every parameter of a sampler
and checks them on construction (scikit-learn validates an estimator's parameters in
one place; this is that place). ``resolve_clusters`` adds what the labels make of a
spec: the cluster sizes, the cluster weights, the capacity. The plain and the group
sampler, the torch sampler, the Hugging Face helpers and the schedule writer all take
their parameters through these two.

The strategy rules: [`strategy_options`][clusterclip.sampling.spec.strategy_options]
(clip only for the clip strategies, alpha only for the alpha strategies) and
[`rank_share`][clusterclip.sampling.spec.rank_share] (the positions a rank serves,
``(T - c) // W`` of them).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip import limits
from clusterclip.errors import InputError
from clusterclip.labels import check_labels
from clusterclip.limits import (
    MAX_ALPHA,
    MAX_CLIP,
    MAX_SAMPLES,
    MAX_TOKENS,
    MAX_WEIGHT_SPAN,
    MAX_WORLD,
    check_ranges,
    ranged,
    shown,
    weight_span_problem,
)

#: Every strategy name, here only: the CLI, the report and the experiment take these.
STRATEGIES = ("random", "uniform", "temperature", "clusterclip", "paced")
#: The strategies whose cluster weight is n_k ** alpha.
ALPHA_STRATEGIES = ("temperature", "clusterclip", "paced")
#: The strategies with a repetition clip R (``clip``) and capacity R x eligible N.
CLIP_STRATEGIES = ("clusterclip", "paced")
#: The strategies whose schedule depends on num_samples T (it is not a prefix of the
#: schedule of a longer T): a consumer that uses only a prefix must size T to it.
LENGTH_DEPENDENT_STRATEGIES = ("paced",)
#: The strategies compared when none are named (``experiment``, ``report``).
DEFAULT_STRATEGIES = ("random", "uniform", "clusterclip", "paced")
#: The sampler's strategy and clip when none is given (the CLI's defaults too).
DEFAULT_STRATEGY = "clusterclip"
DEFAULT_CLIP = 4
MAX_SEED = 2**64 - 1  # seeds are packed as unsigned 64-bit integers (sampling._rng)


def as_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum]; InputError naming parameter ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r}", params=(name,))
    if int(value) < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {shown(int(value))}",
                         params=(name,))
    if maximum is not None and int(value) > maximum:
        raise InputError(f"{name} must be <= {maximum}, got {shown(int(value))}",
                         params=(name,))
    return int(value)


def check_clip(clip: Any) -> int:
    """The repetition clip R as an int in [1, MAX_CLIP]: the one rule for a clip, wherever
    it is given (InputError naming the parameter ``clip``)."""
    return as_int("clip", clip, 1, MAX_CLIP)


def strategy_options(strategy: str, *, clip: int | None = DEFAULT_CLIP, alpha: float = 0.0,
                     cluster_weights: Any = None) -> dict[str, Any]:
    """The sampler options that apply to ``strategy``, from options given for several.

    Parameters
    ----------
    strategy : str
        One of [`STRATEGIES`][clusterclip.sampling.spec.STRATEGIES].
    clip : int or None
        The repetition clip R; kept only for the clip strategies (``clusterclip``,
        ``paced``).
    alpha : float
        The exponent of n_k ** alpha; kept only for the alpha strategies
        (``temperature``, ``clusterclip``, ``paced``). Left out elsewhere, so it is 0
        there: the baselines refuse another value.
    cluster_weights : array_like or None
        Kept (when not None) for every strategy but ``random``, which draws no
        cluster.

    Returns
    -------
    dict
        Keyword arguments for [`SamplerSpec`][clusterclip.sampling.SamplerSpec]
        (and so for [`make_sampler`][clusterclip.sampling.make_sampler]), with
        ``strategy`` always among them.

    Examples
    --------
    >>> from clusterclip.sampling.spec import strategy_options
    >>> strategy_options("uniform", clip=4, alpha=0.5)
    {'strategy': 'uniform'}
    >>> strategy_options("paced", clip=4, alpha=0.5)
    {'strategy': 'paced', 'alpha': 0.5, 'clip': 4}
    """
    out: dict[str, Any] = {"strategy": strategy}
    if strategy in ALPHA_STRATEGIES:
        out["alpha"] = alpha
    if strategy in CLIP_STRATEGIES:
        out["clip"] = clip
    if cluster_weights is not None and strategy != "random":
        out["cluster_weights"] = cluster_weights
    return out


def check_alpha(strategy: str, alpha: Any, has_weights: bool = False) -> float:
    """``alpha`` as a float: finite, and 0 outside :data:`ALPHA_STRATEGIES` unless cluster
    weights replace n_k ** alpha (``has_weights``); InputError otherwise."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) \
            or not math.isfinite(alpha):
        raise InputError(f"alpha must be a finite number, got {alpha!r}", params=("alpha",))
    alpha = float(alpha)
    if strategy not in ALPHA_STRATEGIES and alpha != 0.0 and not has_weights:
        names = ", ".join(ALPHA_STRATEGIES[:-1]) + " and " + ALPHA_STRATEGIES[-1]
        raise InputError(f"alpha applies to {names} only, got alpha={alpha} with strategy "
                         f"{strategy}", params=("alpha",))
    return alpha


def rank_share(length: int, rank: int, world_size: int, start: int = 0) -> tuple[int, int]:
    """The global positions one rank serves of a schedule.

    Rank ``rank`` of ``world_size`` (W) serves global positions ``first, first + W,
    ...``, ``count`` of them: ``first = start + rank`` and ``count = (length - start)
    // W``, the same for every rank. The last ``(length - start) % W`` positions are
    served to nobody.

    Parameters
    ----------
    length : int
        Positions of the global schedule (T).
    rank : int
        This process's rank, ``0 <= rank < world_size``.
    world_size : int
        Number of ranks W, ``1 <= W <= 2**20``.
    start : int
        The global position the ranks start at (``consumed_samples``).

    Returns
    -------
    first : int
        The first global position this rank serves.
    count : int
        How many positions it serves.

    Raises
    ------
    InputError
        If ``rank`` or ``world_size`` is not an integer in range (the message names
        the parameter).

    Examples
    --------
    >>> from clusterclip.sampling.spec import rank_share
    >>> rank_share(10, rank=1, world_size=4)
    (1, 2)
    >>> rank_share(10, rank=1, world_size=4, start=3)
    (4, 1)
    """
    rank, world_size = _checked_rank(rank, world_size)
    return start + rank, (length - start) // world_size


def _checked_rank(rank: Any, world_size: Any) -> tuple[int, int]:
    world_size = as_int("world_size", world_size, 1, MAX_WORLD)
    rank = as_int("rank", rank, 0)
    if rank >= world_size:
        raise InputError(f"rank must be < world_size {world_size}, got {rank}",
                         params=("rank", "world_size"))
    return rank, world_size


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings:
    """The numbers of a schedule's draw, their ranges declared once (checked when made,
    InputError naming the parameter): its length ``num_samples`` or token budget
    ``num_tokens``, the clip (None: the default clip), ``alpha`` and the ``seed`` (that of
    the command line, whose commands share it with k-means: 0 .. 2**63 - 1). The ``sample``
    stage's options extend them (:class:`clusterclip.stages.sample.SampleOptions`), and the
    command line's ``sample`` and ``run`` only parse the options that set them.

    Examples
    --------
    >>> ScheduleSettings(num_samples=1000, clip=4).clip
    4
    >>> ScheduleSettings(num_samples=0)
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: num_samples: 0 is out of range (an integer in 1 .. 1099511627776)
    """

    num_samples: int | None = ranged(1, MAX_SAMPLES, default=None)
    num_tokens: int | None = ranged(1, MAX_TOKENS, default=None)
    clip: int | None = ranged(1, MAX_CLIP, default=None)
    alpha: float = ranged(-MAX_ALPHA, MAX_ALPHA, real=True, default=0.0)
    seed: int = ranged(0, limits.MAX_SEED, default=0)

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True, kw_only=True)
class ScheduleRequest(ScheduleSettings):
    """What ``clusterclip sample`` draws: the :class:`ScheduleSettings` and the share of
    the schedule this rank writes (global positions ``consumed_samples + rank``, then
    every ``world_size``-th; :func:`rank_share`). Checked when made."""

    rank: int = ranged(0, MAX_WORLD - 1, default=0)
    world_size: int = ranged(1, MAX_WORLD, default=1)
    consumed_samples: int = ranged(0, MAX_SAMPLES, default=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        _checked_rank(self.rank, self.world_size)


@dataclass(frozen=True, eq=False)
class SamplerSpec:
    """Every parameter of a sampler, checked on construction.

    The samplers ([`make_sampler`][clusterclip.sampling.make_sampler],
    [`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler],
    [`GroupClipSampler`][clusterclip.sampling.GroupClipSampler], the torch sampler and
    [`write_schedule`][clusterclip.sampling.write_schedule]) take these fields as
    keyword arguments after ``labels`` and ``num_samples`` and check them here. The
    fields are stored checked: ints as ``int``, ``alpha`` as ``float``, ``clip`` None
    outside the clip strategies.

    Parameters
    ----------
    num_samples : int
        Length T of the global schedule, in [1, 2**40].
    strategy : str
        One of [`STRATEGIES`][clusterclip.sampling.spec.STRATEGIES]; what each does:
        [`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler].
    clip : int or None
        The repetition clip R of ``clusterclip`` and ``paced``, in [1, 2**20]; None
        for the other strategies, whatever was given.
    alpha : float
        The exponent of n_k ** alpha for ``temperature``, ``clusterclip`` and
        ``paced``, finite; must be 0 for the others unless ``cluster_weights`` or
        ``mixture`` is given (which replace n_k ** alpha).
    seed : int
        Seed of the schedule, in [0, 2**64 - 1].
    rank : int
        This process's rank, ``0 <= rank < world_size``.
    world_size : int
        Number of ranks W, ``1 <= W <= 2**20``.
    consumed_samples : int
        The global position to start at, in [0, T].
    cluster_weights : array_like or None
        (>= K,) finite weights >= 0, one per cluster id; not for ``random``. Checked
        against the labels when a sampler is made.
    cache_dir : str or os.PathLike or bool or None
        Folder of the seek index, False for none, None for the default.
    groups : array_like or None
        (N,) integer array of near-duplicate groups: the sampler is then a
        [`GroupClipSampler`][clusterclip.sampling.GroupClipSampler].
    mixture : Mixture or None
        A [`Mixture`][clusterclip.sampling.mixture.Mixture] (not with
        ``cluster_weights``): its weights, or its stages (weights that change over
        the schedule under one clip; ``paced`` and ``clusterclip`` only). The samplers
        take ``strategy`` and ``clip`` from it unless given.

    Raises
    ------
    InputError
        If a field is out of range or does not apply to ``strategy``; the message
        names the parameter.

    See Also
    --------
    - [`make_sampler`][clusterclip.sampling.make_sampler]: the sampler for a spec's
      fields.
    - [`strategy_options`][clusterclip.sampling.spec.strategy_options]: the fields
      that apply to a strategy.

    Examples
    --------
    >>> from clusterclip.sampling import SamplerSpec
    >>> spec = SamplerSpec(100, strategy="paced", clip=2)
    >>> spec.clip, spec.replace(strategy="uniform").clip  # a clip: clusterclip and paced
    (2, None)
    >>> SamplerSpec(0)
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: num_samples must be >= 1, got 0
    """

    num_samples: int
    strategy: str = DEFAULT_STRATEGY
    clip: int | None = DEFAULT_CLIP
    alpha: float = 0.0
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    consumed_samples: int = 0
    cluster_weights: Any = None
    cache_dir: str | os.PathLike[str] | bool | None = None
    groups: Any = None
    mixture: Any = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InputError(f"unknown strategy {self.strategy!r}; choose one of "
                             + ", ".join(STRATEGIES), params=("strategy",))
        T = as_int("num_samples", self.num_samples, 1, MAX_SAMPLES)
        seed = as_int("seed", self.seed, 0, MAX_SEED)
        rank, world_size = _checked_rank(self.rank, self.world_size)
        consumed = as_int("consumed_samples", self.consumed_samples, 0)
        if consumed > T:
            raise InputError(f"consumed_samples {consumed} exceeds num_samples {T}",
                             params=("consumed_samples", "num_samples"))
        clip = check_clip(self.clip) if self.strategy in CLIP_STRATEGIES else None
        weighted = self.cluster_weights is not None or self.mixture is not None
        alpha = check_alpha(self.strategy, self.alpha, weighted)
        if self.cluster_weights is not None and self.strategy == "random":
            raise InputError("cluster_weights does not apply to strategy random",
                             params=("cluster_weights",))
        _check_mixture(self.mixture, self.strategy, self.cluster_weights)
        for name, value in (("num_samples", T), ("seed", seed), ("rank", rank),
                            ("world_size", world_size),
                            ("consumed_samples", consumed), ("clip", clip), ("alpha", alpha)):
            object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> SamplerSpec:
        """A copy with some fields changed, checked again.

        Parameters
        ----------
        **changes : Any
            New values of fields, by name.

        Returns
        -------
        SamplerSpec
            The new spec.

        Raises
        ------
        InputError
            If a new value is not valid (as on construction).
        """
        return dataclasses.replace(self, **changes)

    def options(self) -> dict[str, Any]:
        """The fields as keyword arguments.

        Returns
        -------
        dict
            Field name to value (arrays are not copied).
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def alpha_in_use(self) -> float | None:
        """The alpha the schedule depends on (what samplers report and states hold).

        None outside the alpha strategies and when ``cluster_weights`` or a mixture
        replace n_k ** alpha.
        """
        if self.strategy in ALPHA_STRATEGIES and self.cluster_weights is None \
                and self.mixture is None:
            return self.alpha
        return None


def _check_mixture(mixture: Any, strategy: str, cluster_weights: Any) -> None:
    """A spec's ``mixture``: a Mixture, not with cluster_weights nor strategy random, and
    staged only under the clip strategies (InputError)."""
    if mixture is None:
        return
    if not all(hasattr(mixture, a) for a in ("staged", "stages", "cluster_weights")):
        raise InputError(f"mixture must be a Mixture (clusterclip.sampling.read_mixture), "
                         f"got {type(mixture).__name__}", params=("mixture",))
    if cluster_weights is not None:
        raise InputError("give mixture or cluster_weights, not both",
                         params=("mixture", "cluster_weights"))
    if strategy == "random":
        raise InputError("strategy random draws documents, not clusters, so it takes no "
                         "mixture", params=("mixture", "strategy"))
    if mixture.staged and strategy not in CLIP_STRATEGIES:
        raise InputError(f"a staged mixture needs strategy {' or '.join(CLIP_STRATEGIES)} "
                         f"(one clip over its stages), got {strategy}",
                         params=("mixture", "strategy"))


def mixture_defaults(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``strategy`` and ``clip`` from ``options["mixture"]`` (its
    timing and clip) where they are not given."""
    mixture = options.get("mixture")
    if mixture is None or not hasattr(mixture, "timing"):
        return options
    return {"strategy": mixture.timing, "clip": mixture.clip, **options}


@dataclass(frozen=True, eq=False)
class Clusters:
    """What labels make of a :class:`SamplerSpec`: the documents it may draw and how.

    ``labels``: the checked (N,) labels; ``drawable``: (N,) bool, label >= 0 and in
    a cluster of weight > 0; ``sizes``: (K,) int64 drawable documents per cluster
    (n_k); ``weights``: (K,) float64 cluster weights (the given ``cluster_weights``,
    or n_k ** alpha) or None (uniform over the non-empty clusters); ``capacity``:
    clip x drawable documents (clip strategies) or None; ``zero_weight``:
    (clusters, documents) of weight 0 with documents, or None when there are none.
    """

    labels: np.ndarray
    drawable: np.ndarray
    sizes: np.ndarray
    weights: np.ndarray | None
    capacity: int | None
    zero_weight: tuple[int, int] | None
    #: a staged mixture's stages: (end position, (K,) weights, timing, name) each
    stages: tuple[tuple[int, np.ndarray, str, str], ...] | None = None
    #: (K,) bool: the clusters with documents excluded for weight 0 (None: none)
    unweighted: np.ndarray | None = None

    @property
    def num_eligible(self) -> int:
        return int(self.sizes.sum())

    @property
    def num_excluded(self) -> int:
        return int(self.labels.size - self.num_eligible)


def capacity_error(num_samples: int, clip: int, units: int, unit: str) -> InputError:
    """The refusal of ``num_samples`` T above the capacity ``clip`` R x ``units``: it names
    the smallest R that serves T and the largest T that R allows."""
    return InputError(f"num_samples {num_samples} exceeds capacity {clip * units} = clip "
                      f"{clip} x {units} {unit}; "
                      f"{smallest_clip_phrase(-(-num_samples // max(1, units)), '')}, the largest "
                      f"num_samples that clip {clip} allows is {clip * units}",
                      params=("num_samples", "clip"))


def smallest_clip_phrase(smallest: int, digits: str = ",") -> str:
    """The phrase naming the smallest clip that serves a budget (none beyond MAX_CLIP)."""
    if smallest > MAX_CLIP:
        return f"no clip up to {MAX_CLIP:{digits}} serves it"
    return f"the smallest clip that serves it is {smallest:{digits}}"


def resolve_clusters(spec: SamplerSpec, labels: Any, unit: str = "eligible documents"
                     ) -> Clusters:
    """The :class:`Clusters` of ``spec`` over ``labels``, checked (InputError): labels
    valid, ``cluster_weights`` of length >= K, finite, >= 0 on non-empty clusters and
    > 0 on at least one, n_k ** alpha finite and > 0, num_samples within the capacity
    (``unit`` names what the capacity counts in the message)."""
    lab = check_labels(labels)
    K = int(lab.max()) + 1
    drawable = lab >= 0
    clusters = resolve_sizes(spec, np.bincount(lab if drawable.all() else lab[drawable],
                                               minlength=K), unit)
    if clusters.unweighted is not None:
        # A cluster of weight 0 is never drawn: its documents are excluded as if
        # labelled -1 (capacity, passes and summary count only the others).
        drawable &= ~clusters.unweighted[np.where(drawable, lab, 0)]
    return dataclasses.replace(clusters, labels=lab, drawable=drawable)


def resolve_sizes(spec: SamplerSpec, sizes: Any, unit: str = "eligible documents"
                  ) -> Clusters:
    """The :class:`Clusters` of ``spec`` over the cluster sizes alone (``sizes`` (K,)
    eligible documents per cluster), checked as :func:`resolve_clusters` does; its
    ``labels`` and ``drawable`` are None (what draws clusters without documents needs:
    :class:`~clusterclip.sampling.sampler.ClusterDraws`)."""
    sizes = np.asarray(sizes).astype(np.int64)
    K = int(sizes.size)
    nonempty = sizes > 0
    weights, zero_weight, stages = None, None, None
    given = spec.cluster_weights
    if spec.mixture is not None:
        given = spec.mixture.cluster_weights()
        if spec.mixture.staged:
            stages = _stages(spec, K, nonempty)
    if given is not None:
        weights = _checked_weights(given, K, nonempty)
        anywhere = weights if stages is None else np.max([w for _, w, _, _ in stages], axis=0)
        unweighted = nonempty & (anywhere == 0)
        if unweighted.any():
            zero_weight = (int(unweighted.sum()), int(sizes[unweighted].sum()))
            sizes = np.where(unweighted, 0, sizes)
    elif spec.strategy in ALPHA_STRATEGIES and spec.alpha != 0.0:
        weights = _alpha_weights(sizes, spec.alpha)
    capacity = None
    if spec.clip is not None:
        n = int(sizes.sum())
        capacity = spec.clip * n
        if spec.num_samples > capacity:
            raise capacity_error(spec.num_samples, spec.clip, n, unit)
    return Clusters(None, None, sizes, weights, capacity, zero_weight, stages,
                    unweighted if zero_weight is not None else None)


def _stages(spec: SamplerSpec, K: int, nonempty: np.ndarray
            ) -> tuple[tuple[int, np.ndarray, str, str], ...]:
    """The staged mixture's stages over ``spec.num_samples`` T positions: stage i ends at
    round(until x T) (T for the last), its weights checked as cluster_weights."""
    T, out = spec.num_samples, []
    for i, st in enumerate(spec.mixture.stages):
        end = T if st.until >= 1 else min(T, math.floor(st.until * T + 0.5))
        try:
            w = _checked_weights(st.weights, K, nonempty)
        except InputError as e:
            raise InputError(f"mixture stages[{i}]: {e}", params=("mixture",)) from None
        out.append((end, w, st.timing or spec.strategy, f"stage {i + 1} (until {st.until})"))
    return tuple(out)


def _checked_weights(cluster_weights: Any, K: int, nonempty: np.ndarray) -> np.ndarray:
    try:
        w = np.asarray(cluster_weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("cluster_weights must be an array of numbers",
                         params=("cluster_weights",)) from None
    if w.ndim != 1 or w.size < K:
        raise InputError(f"cluster_weights must be a 1-D array of length >= {K} "
                         f"(number of cluster ids), got shape {w.shape}",
                         params=("cluster_weights",))
    w = w[:K].copy()
    bad = np.flatnonzero(nonempty & ~(np.isfinite(w) & (w >= 0)))
    if bad.size:
        k = int(bad[0])
        raise InputError(f"cluster_weights must be finite and >= 0 for non-empty "
                         f"clusters, got {w[k]} for cluster {k}", params=("cluster_weights",))
    if not (w[nonempty] > 0).any():
        raise InputError("cluster_weights: no cluster with documents has a weight > 0",
                         params=("cluster_weights",))
    w[~nonempty] = 0.0
    with np.errstate(over="ignore"):
        total = float(w.sum())
    if not math.isfinite(total):
        raise InputError("cluster_weights: their sum overflows to infinity",
                         params=("cluster_weights",))
    span = weight_span_problem(w)
    if span:
        raise InputError(f"cluster_weights: {span}", params=("cluster_weights",))
    return w


def _alpha_weights(sizes: np.ndarray, alpha: float) -> np.ndarray:
    nonempty = sizes > 0
    weights = np.zeros(sizes.size)
    with np.errstate(over="ignore", under="ignore"):  # both are reported below
        weights[nonempty] = sizes[nonempty].astype(np.float64) ** alpha
        total = float(weights.sum())
    if not math.isfinite(total):
        raise InputError(f"alpha={alpha} overflows the cluster weights n_k ** alpha")
    zero = np.flatnonzero(nonempty & (weights == 0))
    if zero.size:
        k = int(zero[0])
        raise InputError(f"alpha={alpha} underflows the cluster weight n_k ** alpha to 0 "
                         f"for cluster {k} of {sizes[k]} documents; use an alpha "
                         f"closer to 0")
    if weight_span_problem(weights):
        raise InputError(f"alpha={alpha}: the cluster weights n_k ** alpha span more than "
                         f"{MAX_WEIGHT_SPAN:g}; use an alpha closer to 0")
    return weights


def with_spec_signature(func: Callable[..., Any], *, skip: tuple[str, ...] = ()
                        ) -> Callable[..., Any]:
    """Give ``func(first, ..., **options)`` the signature of the :class:`SamplerSpec`
    fields in place of ``**options`` (for ``help()`` and ``inspect``; the fields are
    written once, in :class:`SamplerSpec`)."""
    own = [p for p in inspect.signature(func).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    names = {p.name for p in own}
    spec = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(SamplerSpec).parameters.values()
            if p.name not in names and p.name not in skip]
    pos = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    kw = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    func.__signature__ = inspect.Signature(pos + kw + spec)  # type: ignore[attr-defined]
    return func
