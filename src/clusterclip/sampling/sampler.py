"""``ClusterClipSampler``: ClusterClip and its baselines as one resumable sampler.

The global schedule (a sequence of ``num_samples`` document indices) depends
only on ``(labels, strategy, clip, alpha or cluster_weights, seed,
num_samples)``. Ranks share it out: see :class:`ClusterClipSampler`.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.io import array_fingerprint
from clusterclip.io import cache_dir as cache_dir_default
from clusterclip.labels import check_labels
from clusterclip.sampling import _seek
from clusterclip.sampling._engine import ClusterEngine, EpochEngine, PacedEngine, stable_order

#: Every strategy name, here only: the CLI, the report and the experiment take these.
STRATEGIES = ("random", "uniform", "temperature", "clusterclip", "paced")
#: The strategies whose cluster weight is n_k ** alpha.
ALPHA_STRATEGIES = ("temperature", "clusterclip", "paced")
#: The strategies with a repetition clip R (``clip``) and capacity R x eligible N.
CLIP_STRATEGIES = ("clusterclip", "paced")
#: The strategies whose schedule depends on num_samples T (it is not a prefix of the
#: schedule of a longer T): a consumer that uses only a prefix must size T to it.
LENGTH_DEPENDENT_STRATEGIES = ("paced",)
#: The sampler's strategy and clip when none is given (the commands' strategy is
#: clusterclip.sampling.clip.DEFAULT_COMMAND_STRATEGY; DEFAULT_CLIP is paced's default R there).
DEFAULT_STRATEGY = "clusterclip"
DEFAULT_CLIP = 4
STATE_VERSION = 2  # 2: with a checksum over the other fields
MAX_SEED = 2**64 - 1  # seeds are packed as unsigned 64-bit integers (sampling._rng)
ITER_BLOCK = 1 << 14  # rank indices produced at a time for Python iteration
SEEK_GAP = 1 << 16  # a gap longer than this before the next index is skipped count-only


def _as_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {int(value)}")
    if maximum is not None and int(value) > maximum:
        raise InputError(f"{name} must be <= {maximum}, got {int(value)}")
    return int(value)


def _state_checksum(state: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of every field of ``state`` but ``checksum``."""
    fields = {k: v for k, v in state.items() if k != "checksum"}
    try:
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return ""  # not JSON: cannot be a state this class wrote
    return hashlib.sha256(blob.encode()).hexdigest()


def _check_counts(counts: Any, k: int) -> None:
    """``counts`` must be a list of ``k`` plain integers (as ``state_dict`` writes them)."""
    if not isinstance(counts, (list, tuple)):
        raise InputError(f"state_dict counts must be a list of {k} integers, got "
                         f"{type(counts).__name__}")
    if len(counts) != k:
        raise InputError(f"state_dict counts must be a list of {k} integers, got {len(counts)}")
    for i, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            raise InputError(f"state_dict counts must be integers, got {c!r:.40} at index {i}")


class _RankStream:
    """This rank's share of a schedule, handed out by ``iter`` and ``blocks``.

    The one iteration protocol of the samplers. A subclass sets ``num_samples``,
    ``world_size`` and, through :meth:`_reset_stream`, ``_start`` and ``_length``;
    it provides ``_global(p0, span)`` (the global schedule's positions ``p0 ..
    p0 + span - 1``, consumed in order) and ``_restart()`` (back to ``_start`` once
    the share is used up).
    """

    num_samples: int
    world_size: int

    def _reset_stream(self, position: int) -> None:
        self._start = int(position)
        self._length = (self.num_samples - self._start) // self.world_size
        self._taken = 0
        self._buf = np.empty(0, np.int64)
        self._buf_list: list[int] | None = None
        self._buf_i = 0

    def _produce(self, n: int) -> np.ndarray:
        """This rank's next ``n`` indices (the buffer must be empty): every
        ``world_size``-th position of the global schedule from this rank's next one."""
        n = min(n, self._length - self._taken)
        if n <= 0:
            return np.empty(0, np.int64)
        W = self.world_size
        glob = self._global(self._start + self.rank + self._taken * W, (n - 1) * W + 1)
        return glob if W == 1 else np.ascontiguousarray(glob[::W])

    def _global(self, p0: int, span: int) -> np.ndarray:
        raise NotImplementedError

    def _restart(self) -> None:
        raise NotImplementedError

    @property
    def position(self) -> int:
        """Global position this rank has consumed up to (start + taken x world_size)."""
        return self._start + self._taken * self.world_size

    def _restart_if_done(self) -> None:
        if self._taken >= self._length:
            self._restart()

    def __len__(self) -> int:
        left = self._length - self._taken
        return left if left > 0 else self._length

    def __iter__(self) -> Iterator[int]:
        self._restart_if_done()
        return self._iter_ints()

    def _iter_ints(self) -> Iterator[int]:
        # The shared position is re-read for every index, so iterators and
        # blocks() may be interleaved; each index counts as handed out on yield.
        while True:
            if self._buf_i >= self._buf.size:
                if self._taken >= self._length:
                    return
                self._buf, self._buf_i, self._buf_list = self._produce(ITER_BLOCK), 0, None
            if self._buf_list is None:
                self._buf_list = self._buf.tolist()
            i = self._buf_i
            self._buf_i = i + 1
            self._taken += 1
            yield self._buf_list[i]

    def blocks(self, block_size: int = 1 << 20) -> Iterator[np.ndarray]:
        """This rank's indices as int64 arrays of at most ``block_size`` (bulk export).

        Advances the same state as ``iter``: a block counts as handed out once yielded.
        """
        block_size = _as_int("block_size", block_size, 1)
        self._restart_if_done()
        while self._taken < self._length:
            if self._buf_i < self._buf.size:
                blk = self._buf[self._buf_i:self._buf_i + block_size]
                self._buf_i += blk.size
            else:
                blk = self._produce(block_size)
            self._taken += blk.size
            yield blk


class ClusterClipSampler(_RankStream):
    """Stream of document indices drawn by cluster (ClusterClip and baselines).

    Parameters
    ----------
    labels : (N,) integer array. Cluster id (>= 0) of each document; -1 excludes it.
    num_samples : int >= 1. Length T of the global schedule.
    strategy : "random" | "uniform" | "temperature" | "clusterclip" | "paced".

        * random: epochs of fresh permutations of all eligible documents.
        * uniform: cluster uniformly among non-empty clusters, then the next
          document of its current pass (a fresh permutation of the cluster
          each pass: no repeat inside a cluster before all were seen).
        * temperature: as uniform, cluster k with weight n_k ** alpha.
        * clusterclip: as temperature, but a cluster that completes its
          ``clip``-th pass leaves the pool for good. No document appears more
          than ``clip`` times; capacity is clip x eligible N.
        * paced: ClusterClip's totals spread evenly over the schedule. Cluster
          k gets q_k = min(clip n_k, lam w_k) draws (water-filling, sum T;
          w_k = n_k ** alpha or cluster_weights; integers by largest
          remainder, ties by cluster id); its j-th draw sits at key
          (j + u_kj) T / q_k (seeded u_kj in [0, 1), integer key), the
          schedule ordered by (key, cluster); documents by the same passes
          as the other cluster strategies. Same capacity as clusterclip.
          Seeking any position costs O(K log K), no replay.
    clip : int >= 1, clusterclip and paced only (ignored otherwise).
    alpha : float, temperature, clusterclip and paced only (must be 0
        otherwise, unless cluster_weights is given).
    seed : int >= 0.
    rank, world_size : this process's share. From start position c, rank r
        yields global positions c + r, c + r + W, ...: floor((T - c) / W)
        indices for every rank; the last (T - c) mod W positions are served
        to nobody (``summary()['unserved_positions']``).
    consumed_samples : int in [0, T]. Start at this global position (after a
        count-only replay of the draws before it; no documents are gathered;
        paced: a search over its keys, no replay).
    cluster_weights : optional (>= K,) float array, finite and >= 0 (e.g. a
        :class:`~clusterclip.sampling.mixture.Mixture`'s ``cluster_weights()``).
        Replaces n_k ** alpha as the cluster weight (uniform, temperature,
        clusterclip, paced; alpha is then ignored), e.g. n_k ** alpha / mean
        tokens per document of k. A cluster of weight 0 is never drawn: its
        documents count as excluded (capacity is clip x the documents of
        clusters of weight > 0, of which there must be one).
    cache_dir : folder of the cached seek index (uniform, temperature,
        clusterclip), or False for none. Their seek is a count-only replay
        from the nearest checkpoint of the index (per-cluster counts every
        2**24 positions, keyed by the cluster sizes, weights, seed and clip);
        the first seek past its end extends it (a one-off cost, printed to
        stderr) and rewrites the file. Default (None): ``$CLUSTERCLIP_CACHE``
        (``off`` for none), else ``~/.cache/clusterclip``.
    groups : optional (N,) integer array (``W/groups.npy`` of ``clusterclip dedup``):
        near-duplicate group of each document. Then each group is one unit of
        the passes and of the clip (a :class:`~clusterclip.sampling.groups.
        GroupClipSampler` is returned; see :mod:`clusterclip.sampling.groups`).

    Attributes: ``capacity`` (clip x eligible N for clusterclip, else None),
    ``position`` (global position consumed so far, what ``state_dict`` saves),
    ``num_eligible``, ``num_excluded``, ``cluster_sizes`` ((K,) int64 n_k).

    Every rank computes the whole global schedule and keeps its share, so a
    rank costs O(global positions), not O(its positions); the schedule is then
    independent of the world size (elastic resumption).

    Iteration continues from the current position (``state_dict`` reflects
    what has been handed out, by ``iter`` and ``blocks`` alike). Once the
    stream is exhausted, a new ``iter()`` starts again from the start position
    (the constructor's ``consumed_samples`` or the last ``load_state_dict``),
    like any re-iterable torch sampler; ``len()`` is what the next ``iter()``
    yields.
    """

    def __new__(cls, *args: Any, groups: Any = None, **kwargs: Any) -> Any:
        if groups is None or cls is not ClusterClipSampler:
            return super().__new__(cls)
        from clusterclip.sampling.groups import GroupClipSampler

        return GroupClipSampler(*args, groups=groups, **kwargs)

    def __init__(self, labels: Any, num_samples: int, strategy: str = DEFAULT_STRATEGY,
                 clip: int = DEFAULT_CLIP, alpha: float = 0.0, seed: int = 0, rank: int = 0,
                 world_size: int = 1, consumed_samples: int = 0,
                 cluster_weights: Any = None,
                 cache_dir: str | os.PathLike[str] | bool | None = None,
                 groups: None = None) -> None:
        # ---- every parameter is checked here, before any work
        if strategy not in STRATEGIES:
            raise InputError(f"unknown strategy {strategy!r}; choose one of "
                             + ", ".join(STRATEGIES))
        lab = check_labels(labels)
        T = _as_int("num_samples", num_samples, 1)
        seed = _as_int("seed", seed, 0, MAX_SEED)
        world_size = _as_int("world_size", world_size, 1)
        rank = _as_int("rank", rank, 0)
        if rank >= world_size:
            raise InputError(f"rank must be < world_size {world_size}, got {rank}")
        consumed = _as_int("consumed_samples", consumed_samples, 0)
        if consumed > T:
            raise InputError(f"consumed_samples {consumed} exceeds num_samples {T}")
        if strategy in CLIP_STRATEGIES:
            clip = _as_int("clip", clip, 1)
        else:
            clip = None
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) \
                or not math.isfinite(alpha):
            raise InputError(f"alpha must be a finite number, got {alpha!r}")
        alpha = float(alpha)
        if strategy not in ALPHA_STRATEGIES and alpha != 0.0 and cluster_weights is None:
            names = ", ".join(ALPHA_STRATEGIES[:-1]) + " and " + ALPHA_STRATEGIES[-1]
            raise InputError(f"alpha applies to {names} only, "
                             f"got alpha={alpha} with strategy {strategy}")

        K = int(lab.max()) + 1
        eligible_mask = lab >= 0
        zero_weight = None  # (clusters, documents) of weight 0
        sizes = np.bincount(lab[eligible_mask], minlength=K).astype(np.int64)
        n_eligible = int(sizes.sum())
        nonempty = sizes > 0
        weights = None
        if cluster_weights is not None:
            if strategy == "random":
                raise InputError("cluster_weights does not apply to strategy random")
            try:
                w = np.asarray(cluster_weights, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError("cluster_weights must be an array of numbers") from None
            if w.ndim != 1 or w.size < K:
                raise InputError(f"cluster_weights must be a 1-D array of length >= {K} "
                                 f"(number of cluster ids), got shape {w.shape}")
            w = w[:K].copy()
            bad = np.flatnonzero(nonempty & ~(np.isfinite(w) & (w >= 0)))
            if bad.size:
                k = int(bad[0])
                raise InputError(f"cluster_weights must be finite and >= 0 for non-empty "
                                 f"clusters, got {w[k]} for cluster {k}")
            if not (w[nonempty] > 0).any():
                raise InputError("cluster_weights: no cluster with documents has a weight > 0")
            w[~nonempty] = 0.0
            weights = w
            with np.errstate(over="ignore"):
                total = float(weights.sum())
            if not math.isfinite(total):
                raise InputError("cluster_weights: their sum overflows to infinity")
            unweighted = nonempty & (w == 0)
            if unweighted.any():
                # A cluster of weight 0 is never drawn: its documents are excluded as if
                # labelled -1 (capacity, passes and summary count only the others).
                zero_weight = (int(unweighted.sum()), int(sizes[unweighted].sum()))
                eligible_mask &= ~unweighted[np.where(eligible_mask, lab, 0)]
                sizes = np.where(unweighted, 0, sizes)
                n_eligible = int(sizes.sum())
                nonempty = sizes > 0
        elif strategy in ALPHA_STRATEGIES and alpha != 0.0:
            weights = np.zeros(K)
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
        capacity = clip * n_eligible if clip is not None else None
        if capacity is not None and T > capacity:
            from clusterclip.sampling.clip import capacity_hint

            raise InputError(f"num_samples {T} exceeds capacity {capacity} = clip {clip} x "
                             f"{n_eligible} eligible documents; "
                             f"{capacity_hint(T, n_eligible, clip)}")

        self.strategy = strategy
        self.num_samples = T
        self.clip = clip
        self.alpha = (alpha if strategy in ALPHA_STRATEGIES
                      and cluster_weights is None else None)
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.capacity = capacity
        self.num_eligible = n_eligible
        self.num_excluded = int(lab.size - n_eligible)
        self.cluster_sizes = sizes
        self._zero_weight = zero_weight
        self._labels_fp = array_fingerprint(lab.astype(np.int64, copy=False))
        self._weights_fp = None if cluster_weights is None else array_fingerprint(weights)

        if cache_dir is None or cache_dir is True:
            self._cache_dir = cache_dir_default()
        else:
            self._cache_dir = None if cache_dir is False else Path(cache_dir)
        self._seek_index: _seek.SeekIndex | None = None

        idx_dtype = np.int32 if lab.size < 2**31 else np.int64
        if strategy == "random":
            self._engine: ClusterEngine | EpochEngine = EpochEngine(
                np.flatnonzero(eligible_mask), seed)
        else:
            # One stable sort over all documents groups them by cluster in index order;
            # excluded documents get key K and sort last, so no gather is needed (a
            # radix sort of 16-bit keys, in linear time).
            docs = stable_order(np.where(eligible_mask, lab, K), K)[:n_eligible].astype(
                idx_dtype)
            if strategy == "paced":
                self._engine = PacedEngine(docs, sizes, seed, weights, clip, T)
            else:
                self._engine = ClusterEngine(docs, sizes, seed, weights, clip)
        self._set_start(consumed, None)

    # ------------------------------------------------------------- positions
    def _set_start(self, position: int, counts: np.ndarray | None) -> None:
        eng = self._engine
        if isinstance(eng, ClusterEngine):
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
        if isinstance(eng, PacedEngine):
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

    def state_dict(self) -> dict[str, Any]:
        """Small JSON-serialisable resume state (O(K)); independent of rank and world size.

        ``checksum`` is a SHA-256 over the other fields (this sampler's
        configuration included), so a state edited or corrupted after it was
        taken (e.g. counts moved between clusters) is refused on load. It
        detects accidents and careless edits, not a forger who recomputes it.
        """
        pos = self.position
        d: dict[str, Any] = {"version": STATE_VERSION, **self._config(), "position": pos}
        eng = self._engine
        if isinstance(eng, ClusterEngine):
            try:
                counts = eng.counts_at(pos)
            except LookupError:
                eng.reset(self._start, self._start_counts)
                eng.seek(pos)
                counts = eng.counts.copy()
            d["counts"] = counts.tolist()
        d["checksum"] = _state_checksum(d)
        return d

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken (any rank / world size).

        Raises :class:`InputError` for a state of another sampler (the field
        that differs is named), of the wrong types, or edited since it was
        taken (checksum). A version-1 state (no checksum) is still accepted:
        its counts are then verified by a count-only replay to its position
        (about 0.1 s per 10**7 positions).
        """
        version = state.get("version") if isinstance(state, dict) else None
        if version not in (1, STATE_VERSION) or isinstance(version, bool):
            raise InputError(f"state_dict version must be 1 or {STATE_VERSION}, got "
                             f"{version if isinstance(state, dict) else state!r}")
        pos = state.get("position")
        if isinstance(pos, bool) or not isinstance(pos, numbers.Integral) \
                or not 0 <= pos <= self.num_samples:
            raise InputError(f"state_dict position must be in [0, {self.num_samples}], got {pos!r}")
        cluster_engine = isinstance(self._engine, ClusterEngine)
        K = self.cluster_sizes.size
        raw = state.get("counts")
        if cluster_engine:
            _check_counts(raw, K)
        elif raw is not None:
            raise InputError(f"state_dict counts do not apply to strategy {self.strategy}")
        if version == STATE_VERSION and state.get("checksum") != _state_checksum(state):
            raise InputError("state_dict checksum does not match its fields: the state was "
                             "edited or corrupted after it was taken")
        for key, mine in self._config().items():
            if state.get(key) != mine:
                raise InputError(f"state_dict does not match this sampler: {key} "
                                 f"{state.get(key)!r} != {mine!r}")
        counts = None
        if cluster_engine:
            counts = np.array(raw, dtype=np.int64)
            lim = self._engine.limit
            if (int(counts.sum()) != pos or (counts < 0).any()
                    or (lim is not None and (counts > lim).any())):
                raise InputError("state_dict counts are inconsistent with its position and "
                                 "this sampler's clusters")
            if version == 1:
                replay = self._engine.fresh()
                replay.seek(int(pos))
                if not np.array_equal(replay.counts, counts):
                    raise InputError(f"state_dict (version 1) counts are not those of this "
                                     f"schedule at position {pos}")
        self._set_start(int(pos), counts)

    # --------------------------------------------------------------- summary
    def summary(self) -> dict[str, Any]:
        """JSON-able description of the whole global schedule and of this rank's share.

        For uniform, temperature and clusterclip this runs a count-only pass over
        the schedule (about 0.1 s per 10**7 positions); paced locates its capped
        clusters' last draws from the keys.
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
            eng = self._engine_at(T)
            c = eng.counts
            reps_hi = -(-c[nonempty] // sizes[nonempty])
            seen = np.minimum(c[nonempty], sizes[nonempty]).sum()
            # paced: the clusters whose quota is clip x n_k, at their last draw
            events = [[k, p] for k, p in (eng.capped_events() if isinstance(eng, PacedEngine)
                                           else eng.clip_events)]
            s.update(clusters_clipped=len(events), clip_events=events,
                     first_clip_position=events[0][1] if events else None,
                     last_clip_position=events[-1][1] if events else None,
                     max_repetition=int(reps_hi.max()),
                     min_repetition=int((c[nonempty] // sizes[nonempty]).min()),
                     documents_seen=int(seen),
                     clusters_never_drawn=int((c[nonempty] == 0).sum()))
        s.update(rank=self.rank, world_size=self.world_size, start_position=self._start,
                 samples_per_rank=self._length,
                 unserved_positions=(T - self._start) % self.world_size)
        return s

    def __repr__(self) -> str:
        return (f"ClusterClipSampler(strategy={self.strategy!r}, num_samples={self.num_samples}, "
                f"clip={self.clip}, alpha={self.alpha}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}, position={self.position})")
