"""``ClusterClipSampler``: ClusterClip and its baselines as one resumable sampler.

The global schedule (a sequence of ``num_samples`` document indices) depends
only on ``(labels, strategy, clip, alpha or cluster_weights, seed,
num_samples)``. Ranks share it out: see :class:`ClusterClipSampler`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.io import array_fingerprint
from clusterclip.io import cache_dir as cache_dir_default
from clusterclip.sampling import _seek
from clusterclip.sampling._engine import ClusterEngine, EpochEngine, PacedEngine, stable_order
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
    resolve_clusters,
    with_spec_signature,
)
from clusterclip.sampling.stream import STATE_VERSION, BaseSampler  # noqa: F401
from clusterclip.sampling.stream import state_checksum as _state_checksum  # noqa: F401

SEEK_GAP = 1 << 16  # a gap longer than this before the next index is skipped count-only


class ClusterClipSampler(BaseSampler):
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

    The parameters after ``num_samples`` are keyword-only: the fields of
    :class:`~clusterclip.sampling.spec.SamplerSpec`, which checks them. A
    sampler over near-duplicate groups comes from :func:`~clusterclip.sampling.
    make_sampler` (``groups=``), not from this class.

    Attributes, iteration, ``blocks``, ``state_dict`` / ``load_state_dict``: see
    :class:`~clusterclip.sampling.stream.BaseSampler`. Every rank computes the
    whole global schedule and keeps its share, so a rank costs O(global
    positions), not O(its positions); the schedule is then independent of the
    world size (elastic resumption).
    """

    def __init__(self, labels: Any, num_samples: int, **options: Any) -> None:
        if options.get("groups") is not None:
            raise TypeError("ClusterClipSampler takes no groups: make_sampler(labels, "
                            "num_samples, groups=groups, ...) returns the sampler over "
                            "near-duplicate groups (a GroupClipSampler)")
        spec = SamplerSpec(num_samples, **options)  # every parameter checked, before any work
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
        self._weights_fp = None if spec.cluster_weights is None else array_fingerprint(weights)
        self._state_has_counts = spec.strategy != "random"

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
            if spec.strategy == "paced":
                self._engine = PacedEngine(docs, sizes, seed, weights, clip, T)
            else:
                self._engine = ClusterEngine(docs, sizes, seed, weights, clip)
        self._set_start(spec.consumed_samples, None)

    # ------------------------------------------------------------- positions
    def _set_start(self, position: int, counts: np.ndarray | None = None) -> None:
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
        s.update(self._share_summary())
        return s

    def _repr_fields(self) -> dict[str, Any]:
        return {"alpha": self.alpha}


with_spec_signature(ClusterClipSampler.__init__, skip=("groups",))
