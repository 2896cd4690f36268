"""``ClusterClipSampler``: ClusterClip and its baselines as one resumable sampler.

The global schedule (a sequence of ``num_samples`` document indices) depends
only on ``(labels, strategy, clip, alpha or cluster_weights, seed,
num_samples)``. Ranks share it out: see
[`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler].
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.sampling import _seek
from clusterclip.sampling._engine import ClusterEngine, EpochEngine, PacedEngine, stable_order
from clusterclip.sampling._segments import SegmentedEngine, plan_segments
from clusterclip.sampling.spec import (  # noqa: F401 - the names this module always exported
    ALPHA_STRATEGIES,
    CLIP_STRATEGIES,
    DEFAULT_CLIP,
    DEFAULT_STRATEGY,
    LENGTH_DEPENDENT_STRATEGIES,
    MAX_SEED,
    STRATEGIES,
    Clusters,
    SamplerSpec,
    _checked_weights,
    as_int,
    mixture_defaults,
    resolve_clusters,
    resolve_sizes,
    with_spec_signature,
)
from clusterclip.sampling.stream import STATE_VERSION, BaseSampler  # noqa: F401
from clusterclip.sampling.stream import state_checksum as _state_checksum  # noqa: F401
from clusterclip.storage.cache import cache_dir as cache_dir_default
from clusterclip.storage.digests import array_fingerprint

SEEK_GAP = 1 << 16  # a gap longer than this before the next index is skipped count-only


class ClusterClipSampler(BaseSampler):
    """Stream of document indices drawn by cluster (ClusterClip and baselines).

    Iteration, ``blocks``, ``state_dict`` / ``load_state_dict`` and the attributes
    are those of [`BaseSampler`][clusterclip.sampling.BaseSampler]. A sampler over
    near-duplicate groups comes from
    [`make_sampler`][clusterclip.sampling.make_sampler] (``groups=``), not from
    this class.

    Parameters
    ----------
    labels : array_like
        (N,) integer cluster id (>= 0) of each document; -1 excludes it.
    num_samples : int
        Length T of the global schedule, >= 1.
    **options : Any
        Keyword-only: the fields of
        [`SamplerSpec`][clusterclip.sampling.SamplerSpec] but ``groups``, with its
        defaults; it checks them (below, what each does here).

    Other Parameters
    ----------------
    strategy : str
        ``"random"``, ``"uniform"``, ``"temperature"``, ``"clusterclip"`` or
        ``"paced"``: see Notes.
    clip : int
        The repetition clip R, >= 1; ``clusterclip`` and ``paced`` only (ignored
        otherwise).
    alpha : float
        The exponent of the cluster weight n_k ** alpha; ``temperature``,
        ``clusterclip`` and ``paced`` only (must be 0 otherwise, unless
        ``cluster_weights`` is given).
    seed : int
        Seed of the schedule, >= 0.
    rank : int
        This process's rank r. From start position c, rank r yields global
        positions c + r, c + r + W, ...: floor((T - c) / W) indices for every rank;
        the last (T - c) mod W positions are served to nobody
        (``summary()["unserved_positions"]``).
    world_size : int
        Number of ranks W.
    consumed_samples : int
        Start at this global position, in [0, T] (after a count-only replay of the
        draws before it, no documents gathered; ``paced``: a search over its keys,
        no replay).
    cluster_weights : array_like or None
        (>= K,) float weights, finite and >= 0 (e.g.
        [`Mixture.cluster_weights`][clusterclip.sampling.mixture.Mixture.cluster_weights]).
        Replaces n_k ** alpha as the cluster weight (``uniform``, ``temperature``,
        ``clusterclip``, ``paced``; alpha is then ignored), e.g. n_k ** alpha / mean
        tokens per document of k. A cluster of weight 0 is never drawn: its
        documents count as excluded (capacity is clip x the documents of clusters of
        weight > 0, of which there must be one).
    cache_dir : str or os.PathLike or bool or None
        Folder of the cached seek index (``uniform``, ``temperature``,
        ``clusterclip``), or False for none. Their seek is a count-only replay from
        the nearest checkpoint of the index (per-cluster counts every 2**24
        positions, keyed by the cluster sizes, weights, seed and clip); the first
        seek past its end extends it (a one-off cost, printed to stderr) and
        rewrites the file. Default (None): ``$CLUSTERCLIP_CACHE`` (``off`` for
        none), else ``~/.cache/clusterclip``.
    mixture : Mixture or None
        A [`Mixture`][clusterclip.sampling.mixture.Mixture]: its weights as
        ``cluster_weights``, or its stages; its timing and clip are the
        ``strategy`` and ``clip`` unless given.

    Raises
    ------
    InputError
        If a parameter is not valid or ``num_samples`` exceeds the capacity
        (clip x eligible documents).
    TypeError
        If ``groups`` is given (use ``make_sampler``).

    See Also
    --------
    - [`make_sampler`][clusterclip.sampling.make_sampler]: the sampler for any
      parameters, groups included.
    - [`ClusterClipTorchSampler`][clusterclip.sampling.torch.ClusterClipTorchSampler]:
      this sampler as a ``torch.utils.data.Sampler``.

    Notes
    -----
    The strategies:

    - ``random``: epochs of fresh permutations of all eligible documents.
    - ``uniform``: a cluster uniformly among the non-empty clusters, then the next
      document of its current pass (a fresh permutation of the cluster each pass:
      no repeat inside a cluster before all were seen).
    - ``temperature``: as ``uniform``, cluster k with weight n_k ** alpha.
    - ``clusterclip``: as ``temperature``, but a cluster that completes its
      ``clip``-th pass leaves the pool for good. No document appears more than
      ``clip`` times; the capacity is clip x eligible N.
    - ``paced``: ClusterClip's totals spread evenly over the schedule. Cluster k
      gets q_k = min(clip n_k, lam w_k) draws (water-filling, sum T; w_k = n_k **
      alpha or ``cluster_weights``; integers by largest remainder, ties by cluster
      id); its j-th draw sits at key (j + u_kj) T / q_k (seeded u_kj in [0, 1),
      integer key), the schedule ordered by (key, cluster); documents by the same
      passes as the other cluster strategies. Same capacity as ``clusterclip``.
      Seeking any position costs O(K log K), no replay.

    Every rank computes the whole global schedule and keeps its share, so a rank
    costs O(global positions), not O(its positions); the schedule is then
    independent of the world size (elastic resumption).

    Examples
    --------
    >>> import numpy as np
    >>> from clusterclip.sampling import ClusterClipSampler
    >>> labels = np.array([0, 0, 0, 0, 1, 1, 2, -1])
    >>> sampler = ClusterClipSampler(labels, 12, strategy="paced", clip=2, seed=0)
    >>> it = iter(sampler)
    >>> first = [next(it) for _ in range(5)]
    >>> state = sampler.state_dict()  # plain JSON
    >>> resumed = ClusterClipSampler(labels, 12, strategy="paced", clip=2, seed=0)
    >>> resumed.load_state_dict(state)
    >>> first + list(resumed) == list(ClusterClipSampler(labels, 12, strategy="paced",
    ...                                                  clip=2, seed=0))
    True
    """

    def __init__(self, labels: Any, num_samples: int, **options: Any) -> None:
        if options.get("groups") is not None:
            raise TypeError("ClusterClipSampler takes no groups: make_sampler(labels, "
                            "num_samples, groups=groups, ...) returns the sampler over "
                            "near-duplicate groups (a GroupClipSampler)")
        # every parameter checked, before any work
        spec = SamplerSpec(num_samples, **mixture_defaults(options))
        self._setup(spec, resolve_clusters(spec, labels))

    @classmethod
    def _from_spec(cls, spec: SamplerSpec, clusters: Clusters) -> ClusterClipSampler:
        """The sampler of ``spec`` over already resolved ``clusters`` (no re-check)."""
        self = cls.__new__(cls)
        self._setup(spec, clusters)
        return self

    def _setup(self, spec: SamplerSpec, clusters: Clusters) -> None:
        lab, sizes = clusters.labels, clusters.sizes
        K = sizes.size
        weights = clusters.weights
        self._init_share(spec)
        self.capacity = clusters.capacity
        self.num_eligible = clusters.num_eligible
        self.num_excluded = clusters.num_excluded
        self.cluster_sizes = sizes
        self._zero_weight = clusters.zero_weight
        self._labels_fp = array_fingerprint(lab.astype(np.int64, copy=False))
        self._weights_fp = None if weights is None or spec.alpha_in_use is not None \
            else array_fingerprint(weights)
        if clusters.stages is not None:  # every stage's end, weights and timing
            self._weights_fp = array_fingerprint(np.concatenate(
                [np.array([e, t == "paced"], np.float64) for e, _, t, _ in
                 clusters.stages] + [w for _, w, _, _ in clusters.stages]))
        self._state_has_counts = spec.strategy != "random"
        # the stages the schedule is planned from, and set_weights' calls (position,
        # weights) in force: a segmented engine draws them
        self._stages = clusters.stages or (
            (spec.num_samples, weights, spec.strategy, "the schedule"),)
        self._calls: list[tuple[int, np.ndarray]] = []
        self._unweighted = (np.zeros(K, bool) if clusters.unweighted is None
                            else clusters.unweighted)

        cache_dir = spec.cache_dir
        if cache_dir is None or cache_dir is True:
            self._cache_dir = cache_dir_default()
        else:
            self._cache_dir = None if cache_dir is False else Path(cache_dir)
        self._seek_index: _seek.SeekIndex | None = None

        idx_dtype = np.int32 if lab.size < 2**31 else np.int64
        n_eligible, T, clip, seed = self.num_eligible, spec.num_samples, spec.clip, spec.seed
        if spec.strategy == "random":
            self._engine: ClusterEngine | EpochEngine = EpochEngine(
                np.flatnonzero(clusters.drawable), seed)
        else:
            # One stable sort over all documents groups them by cluster in index order;
            # excluded documents get key K and sort last, so no gather is needed (a
            # radix sort of 16-bit keys, in linear time).
            docs = stable_order(np.where(clusters.drawable, lab, K), K)[:n_eligible].astype(
                idx_dtype)
            if clusters.stages is not None:
                self._engine = SegmentedEngine(docs, sizes, seed, clip,
                                               plan_segments(list(clusters.stages), []))
            elif spec.strategy == "paced":
                self._engine = PacedEngine(docs, sizes, seed, weights, clip, T)
            else:
                self._engine = ClusterEngine(docs, sizes, seed, weights, clip)
        self._engine0 = self._engine  # the engine without set_weights calls
        self._set_start(spec.consumed_samples, None)

    # ------------------------------------------------------------- positions
    def _set_start(self, position: int, counts: np.ndarray | None = None) -> None:
        eng = self._engine
        if isinstance(eng, (ClusterEngine, SegmentedEngine)):
            if counts is None:
                if self._indexed(position):
                    at = self._index().engine_at(position)
                    eng.reset(position, at.counts)
                    eng.clip_events, eng.events_from = at.clip_events, 0
                else:
                    eng.reset(0, None)
                    eng.seek(position)
                counts = eng.counts.copy()
            else:
                eng.reset(position, counts)
        else:
            eng.reset(position)
        self._start_counts = counts
        self._reset_stream(position)

    def _engine_at(self, position: int) -> ClusterEngine:
        """A separate engine at ``position`` whose ``clip_events`` cover [0, position).

        Continues from this sampler's engine when that one has recorded every clip
        since position 0 and has not passed ``position`` (after generating the
        schedule, as ``write_schedule`` does, that costs nothing); else replays
        from 0 (count-only). Paced needs no replay: its seek is a key search.
        """
        eng = self._engine
        if isinstance(eng, (PacedEngine, SegmentedEngine)):
            out = eng.fresh()
            out.seek(position)
            return out
        if not (eng.events_from == 0 and eng.pos <= position) and self._indexed(position):
            return self._index().engine_at(position)
        out = eng.fresh()
        if eng.events_from == 0 and eng.pos <= position:
            out.reset(eng.pos, eng.counts)
            out.clip_events, out.events_from = list(eng.clip_events), 0
        out.seek(position)
        return out

    def _indexed(self, position: int) -> bool:
        """Whether reaching ``position`` goes through the seek index (a replayed
        strategy, at least one checkpoint interval from 0)."""
        return (type(self._engine) is ClusterEngine
                and position >> (_seek.SEEK_BITS if self._seek_index is None
                                 else self._seek_index.bits) > 0)

    def _index(self) -> _seek.SeekIndex:
        if self._seek_index is None:
            self._seek_index = _seek.SeekIndex(self._engine, self._cache_dir)
        return self._seek_index

    def _restart(self) -> None:
        self._set_start(self._start, self._start_counts)

    def _global(self, p0: int, span: int) -> np.ndarray:
        eng = self._engine
        if eng.pos > p0:  # only after a state_dict fallback; replay from the start
            eng.reset(self._start, self._start_counts)
        if p0 - eng.pos > SEEK_GAP:
            eng.seek(p0)
        begin = eng.pos
        return eng.advance(p0 + span - begin, gather=True)[p0 - begin:]

    # ----------------------------------------------------------------- state
    def _config(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "num_samples": self.num_samples,
                "clip": self.clip, "alpha": self.alpha, "seed": self.seed,
                "labels": self._labels_fp, "cluster_weights": self._weights_fp}

    def _state_counts(self, position: int) -> np.ndarray:
        eng = self._engine
        try:
            return eng.counts_at(position)
        except LookupError:
            eng.reset(self._start, self._start_counts)
            eng.seek(position)
            return eng.counts.copy()

    def _check_state_counts(self, counts: np.ndarray, position: int, version: int) -> None:
        lim = self._engine.limit
        if (int(counts.sum()) != position or (counts < 0).any()
                or (lim is not None and (counts > lim).any())):
            raise InputError("state_dict counts are inconsistent with its position and "
                             "this sampler's clusters")
        if version == 1:
            replay = self._engine.fresh()
            replay.seek(position)
            if not np.array_equal(replay.counts, counts):
                raise InputError(f"state_dict (version 1) counts are not those of this "
                                 f"schedule at position {position}")

    # ----------------------------------------------------------- set_weights
    def set_weights(self, weights: Any, at: int | None = None) -> None:
        """From global position ``at`` on, draw with cluster ``weights``, same clip R.

        A live hook for adaptive mixing (``paced`` and ``clusterclip``). The new
        weights hold to the end of the schedule (a staged mixture's later stages
        included) or to the next call's ``at``; a call at or before an earlier
        call's ``at`` replaces it. Draws per cluster from ``at`` follow from the
        weights and what the clip leaves; with timing ``paced`` they are spread
        evenly from ``at`` to the end.

        Parameters
        ----------
        weights : array_like
            One weight per cluster id, finite, >= 0, and > 0 on at least one cluster
            with documents left. A cluster excluded when the sampler was made
            (weight 0 everywhere) stays excluded.
        at : int or None
            The global position the weights apply from; default (None): this
            rank's [`position`][clusterclip.sampling.BaseSampler.position]. Not
            before ``position`` (those draws were handed out) nor after
            ``num_samples``.

        Raises
        ------
        InputError
            If the strategy has no clip (not ``paced`` or ``clusterclip``), ``at``
            is out of range, or ``weights`` are not valid for these clusters.

        Notes
        -----
        The calls are part of the state (``state_dict`` records them;
        ``load_state_dict`` restores them), and every rank that makes the same
        calls draws the same global schedule. Costs O(K) (``paced``;
        ``clusterclip``: plus a count-only replay from the stage's start when
        ``at`` is not where the sampler's engine stands).
        """
        if self.clip is None:
            raise InputError(f"set_weights needs strategy paced or clusterclip (a clip "
                             f"over the stages), not {self.strategy}", params=("strategy",))
        pos = self.position
        at = pos if at is None else as_int("at", at, 0, self.num_samples)
        if at < pos:
            raise InputError(f"set_weights: at {at} is before this sampler's position {pos} "
                             f"(the draws before it were handed out)", params=("at",))
        w = self._new_weights(weights, "set_weights")
        self._replan([c for c in self._calls if c[0] < at] + [(at, w)])

    def _new_weights(self, weights: Any, what: str) -> np.ndarray:
        """``weights`` checked against this sampler's clusters (InputError): numbers (no
        strings, no booleans), exactly one per cluster id, as a mixture file's."""
        sizes = self.cluster_sizes
        try:
            a = np.asarray(weights)
        except (TypeError, ValueError):
            a = np.asarray(None)
        if a.dtype.kind not in "iuf" or (isinstance(weights, list | tuple) and any(
                isinstance(x, bool | np.bool_) for x in weights)):
            raise InputError(f"{what}: weights must be numbers (not text, booleans or "
                             f"None), one per cluster id", params=("weights",))
        if a.ndim != 1 or a.size != sizes.size:
            raise InputError(f"{what}: weights must be one per cluster id: {sizes.size} "
                             f"numbers, got shape {a.shape}", params=("weights",))
        try:
            w = _checked_weights(weights, sizes.size, sizes > 0)
        except InputError as e:
            raise InputError(f"{what}: {e}", params=("weights",)) from None
        out = np.flatnonzero((np.asarray(weights, np.float64)[:sizes.size] > 0)
                             & self._unweighted)
        if out.size:
            raise InputError(f"{what}: cluster {int(out[0])} was excluded when this sampler "
                             f"was made (weight 0 in every stage); it cannot be drawn",
                             params=("weights",))
        return w

    def _replan(self, calls: list[tuple[int, np.ndarray]], incremental: bool = True) -> None:
        """Draw the stages after ``calls``. ``incremental``: the calls are those in
        force plus one at or after this rank's position, so the schedule before that
        position and the counts at each kept stage's start stay as they are (O(K)
        work); else (a loaded state) everything is planned again."""
        old = self._engine
        counts = None
        if not calls and not isinstance(self._engine0, SegmentedEngine):
            eng = self._engine0.fresh()
        else:
            segs = plan_segments(list(self._stages), calls)
            bases = None
            if incremental:
                counts = _counts_or_none(old, self.position)
                bases = list(old.bases[:len(segs) - 1]) if isinstance(old, SegmentedEngine) \
                    else [np.zeros(self.cluster_sizes.size, np.int64)][:len(segs) - 1]
                at_counts = _counts_or_none(old, calls[-1][0])
                if at_counts is not None:  # else a greedy stage's replay, in the new engine
                    bases.append(at_counts)
            eng = SegmentedEngine(old.docs, self.cluster_sizes, self.seed, self.clip, segs,
                                  bases, holder=getattr(old, "_holder", old))
        if incremental:
            eng.reset(self.position, counts)
        self._engine, self._calls = eng, calls
        self._buf, self._buf_i, self._buf_list = np.empty(0, np.int64), 0, None

    def _state_extra(self) -> dict[str, Any]:
        if not self._calls:
            return {}  # a state without calls keeps its fields
        return {"weights_calls": [[at, w.tolist()] for at, w in self._calls]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken, its ``set_weights`` calls in force.

        As [`BaseSampler.load_state_dict`][clusterclip.sampling.BaseSampler.load_state_dict],
        with the state's ``weights_calls`` (the
        [`set_weights`][clusterclip.sampling.ClusterClipSampler.set_weights] calls)
        made again.

        Parameters
        ----------
        state : dict
            A [`state_dict`][clusterclip.sampling.BaseSampler.state_dict] of a
            sampler with the same configuration (any rank or world size).

        Raises
        ------
        InputError
            If the state is not one of this sampler's (the field that differs is
            named), is edited, or holds ``weights_calls`` that are not valid here.
        """
        raw = state.get("weights_calls", []) if isinstance(state, dict) else []
        if not isinstance(raw, list) or not all(
                isinstance(c, list) and len(c) == 2 for c in raw):
            raise InputError("state_dict weights_calls must be a list of [position, "
                             "weights] pairs")
        calls, last = [], -1
        for at, w in raw:
            at = as_int("state_dict weights_calls position", at, 0, self.num_samples)
            if at <= last:
                raise InputError("state_dict weights_calls positions must increase")
            calls.append((at, self._new_weights(w, "state_dict weights_calls")))
            last = at
        if calls and self.clip is None:
            raise InputError(f"state_dict weights_calls do not apply to strategy "
                             f"{self.strategy}")
        same = len(calls) == len(self._calls) and all(
            a == b and np.array_equal(w, v)
            for (a, w), (b, v) in zip(calls, self._calls, strict=True))
        if same:
            super().load_state_dict(state)
            return
        engine, before = self._engine, self._calls
        self._replan(calls, incremental=False)
        try:
            super().load_state_dict(state)
        except Exception:
            self._engine, self._calls = engine, before
            raise

    # --------------------------------------------------------------- summary
    def summary(self) -> dict[str, Any]:
        """JSON-able description of the whole global schedule and of this rank's share.

        Returns
        -------
        dict
            The parameters (``strategy``, ``num_samples``, ``seed``, ``clip``,
            ``alpha``, ``capacity``), the documents (``eligible_documents``,
            ``excluded_documents``, cluster sizes), what the schedule does with them
            (``clip_events`` as ``[cluster, position]``, ``max_repetition``,
            ``documents_seen``, ...) and this rank's share (``rank``,
            ``start_position``, ``samples_per_rank``, ``unserved_positions``).

        Notes
        -----
        For ``uniform``, ``temperature`` and ``clusterclip`` this runs a count-only
        pass over the schedule (about 0.1 s per 10**7 positions); ``paced`` locates
        its capped clusters' last draws from the keys.
        """
        T, ne, sizes = self.num_samples, self.num_eligible, self.cluster_sizes
        nonempty = sizes > 0
        s: dict[str, Any] = {
            "strategy": self.strategy, "num_samples": T, "seed": self.seed,
            "clip": self.clip, "alpha": self.alpha,
            "cluster_weights": self._weights_fp is not None,
            "capacity": self.capacity,
            "eligible_documents": ne, "excluded_documents": self.num_excluded,
            "clusters": int(nonempty.sum()),
            "cluster_size_min": int(sizes[nonempty].min()),
            "cluster_size_median": float(np.median(sizes[nonempty])),
            "cluster_size_max": int(sizes.max()),
            "epochs_equivalent": T / ne,
        }
        if self._zero_weight is not None:  # only then: other summaries stay as they were
            s["zero_weight_clusters"], s["zero_weight_documents"] = self._zero_weight
        if isinstance(self._engine, EpochEngine):
            s.update(clusters_clipped=0, clip_events=[], max_repetition=-(-T // ne),
                     min_repetition=T // ne, documents_seen=min(T, ne))
        else:
            eng = self._engine
            if not (isinstance(eng, SegmentedEngine) and eng.pos == T):
                eng = self._engine_at(T)  # a segmented engine at T has counted it all
            c = eng.counts
            reps_hi = -(-c[nonempty] // sizes[nonempty])
            seen = np.minimum(c[nonempty], sizes[nonempty]).sum()
            # paced: the clusters whose quota is clip x n_k, at their last draw
            if isinstance(eng, SegmentedEngine):
                stages, ev = eng.segment_report()
                s.update(stages=stages, stages_short=[st["stage"] for st in stages
                                                      if st["clusters_used_up"]])
            else:
                ev = eng.capped_events() if isinstance(eng, PacedEngine) else eng.clip_events
            events = [[k, p] for k, p in ev]
            s.update(clusters_clipped=len(events), clip_events=events,
                     first_clip_position=events[0][1] if events else None,
                     last_clip_position=events[-1][1] if events else None,
                     max_repetition=int(reps_hi.max()),
                     min_repetition=int((c[nonempty] // sizes[nonempty]).min()),
                     documents_seen=int(seen),
                     clusters_never_drawn=int((c[nonempty] == 0).sum()))
        s.update(self._share_summary())
        return s

    def _repr_fields(self) -> dict[str, Any]:
        return {"alpha": self.alpha}


class ClusterDraws:
    """The cluster of every position of a cluster strategy's global schedule, from the
    cluster sizes alone: the draws of :class:`ClusterClipSampler` with the same options
    (``uniform``, ``temperature``, ``clusterclip``, ``paced``, a mixture's weights or
    stages), without its documents. Its memory is O(K + a block), not O(N): what needs
    only the clusters of a schedule (a report's shares, pool and clip events; with the
    passes, how often documents repeat) is computed without one array over the corpus.

    ``sizes``: (K,) eligible documents per cluster; ``num_samples`` and ``options`` as
    :func:`~clusterclip.sampling.make_sampler`'s (not ``random``, which draws documents,
    nor ``groups``; ``rank``, ``consumed_samples`` and ``cache_dir`` do not apply).
    """

    def __init__(self, sizes: Any, num_samples: int, **options: Any) -> None:
        spec = SamplerSpec(num_samples, **mixture_defaults(options))
        if spec.strategy == "random" or spec.groups is not None:
            raise ValueError("ClusterDraws draws clusters: not strategy random nor groups")
        clusters = resolve_sizes(spec, sizes)
        self.num_samples, self.sizes = spec.num_samples, clusters.sizes
        none = np.empty(0, np.int32)  # no documents: the engines never read them here
        if clusters.stages is not None:
            self._engine: Any = SegmentedEngine(none, clusters.sizes, spec.seed, spec.clip,
                                                plan_segments(list(clusters.stages), []))
        elif spec.strategy == "paced":
            self._engine = PacedEngine(none, clusters.sizes, spec.seed, clusters.weights,
                                       spec.clip, spec.num_samples)
        else:
            self._engine = ClusterEngine(none, clusters.sizes, spec.seed, clusters.weights,
                                         spec.clip)

    def blocks(self, block_size: int = 1 << 20) -> Iterator[np.ndarray]:
        """The clusters of positions 0 .. T - 1 in order, uint32 arrays of at most
        ``block_size`` (each drawn once: iterate once)."""
        eng = self._engine
        while eng.pos < self.num_samples:
            yield eng.clusters(min(int(block_size), self.num_samples - eng.pos))

    def counts(self) -> np.ndarray:
        """(K,) int64 draws per cluster of the whole schedule."""
        return self._engine.counts_at(self.num_samples)

    def events(self) -> tuple[list[list[int]], list[dict[str, Any]] | None]:
        """``clip_events`` ([cluster, position of its last draw] of each cluster that
        reached its clip, in order) and ``stages`` (a staged mixture's, else None), as
        :meth:`ClusterClipSampler.summary` gives them, once :meth:`blocks` has run to
        the end (paced: from the keys)."""
        eng, stages = self._engine, None
        if isinstance(eng, SegmentedEngine):
            stages, ev = eng.segment_report()
        elif isinstance(eng, PacedEngine):
            ev = eng.capped_events()
        else:
            ev = eng.clip_events
        return [[int(k), int(p)] for k, p in ev], stages


def _counts_or_none(engine: Any, position: int) -> np.ndarray | None:
    """``engine``'s draws per cluster at ``position``, or None where only a replay tells."""
    try:
        return engine.counts_at(position)
    except LookupError:
        return None


with_spec_signature(ClusterClipSampler.__init__, skip=("groups",))
