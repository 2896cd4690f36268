"""The base of every sampler: this rank's share of a global schedule, and its state.

:class:`BaseSampler` holds what the plain sampler
(:class:`~clusterclip.sampling.ClusterClipSampler`) and the group sampler
(:class:`~clusterclip.sampling.groups.GroupClipSampler`) share: iteration
(``iter``, ``len``, ``blocks``), the rank split, and the resume state
(``state_dict`` / ``load_state_dict``: versioned, checksummed, checked against
the sampler's configuration). A subclass provides the global schedule.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.sampling.spec import SamplerSpec, as_int, rank_share

STATE_VERSION = 2  # 2: with a checksum over the other fields
ITER_BLOCK = 1 << 14  # rank indices produced at a time for Python iteration


def state_checksum(state: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of every field of ``state`` but ``checksum``."""
    fields = {k: v for k, v in state.items() if k != "checksum"}
    try:
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return ""  # not JSON: cannot be a state a sampler wrote
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


class BaseSampler:
    """A stream of this rank's document indices from a global schedule, resumable.

    Every sampler [`make_sampler`][clusterclip.sampling.make_sampler] returns is one.
    From start position c (``consumed_samples`` or the last ``load_state_dict``), rank
    r of W yields global positions c + r, c + r + W, ...: ``(T - c) // W`` of them
    ([`rank_share`][clusterclip.sampling.spec.rank_share]). ``iter`` yields Python
    ints, [`blocks`][clusterclip.sampling.BaseSampler.blocks] int64 arrays; both
    advance the same position, which
    [`state_dict`][clusterclip.sampling.BaseSampler.state_dict] saves. Once the share
    is used up, a new ``iter()`` starts again from the start position, like any
    re-iterable torch sampler; ``len()`` is what the next ``iter()`` yields.

    Attributes
    ----------
    spec : SamplerSpec
        The checked parameters ([`SamplerSpec`][clusterclip.sampling.SamplerSpec]).
    strategy : str
        The strategy.
    num_samples : int
        Length T of the global schedule.
    clip : int or None
        The repetition clip R (None outside ``clusterclip`` and ``paced``).
    alpha : float or None
        The alpha the schedule depends on (None where it does not apply).
    seed : int
        Seed of the schedule.
    rank, world_size : int
        This process's share.
    capacity : int or None
        clip x eligible units (documents, or groups), or None without a clip.
    num_eligible, num_excluded : int
        Documents the sampler may and may not draw.
    cluster_sizes : numpy.ndarray
        (K,) int64 eligible units per cluster, n_k.
    position : int
        The global position this rank has consumed up to.

    Notes
    -----
    A subclass calls ``_init_share`` and provides ``_global(p0, span)`` (global
    positions ``p0 .. p0 + span - 1``, consumed in order), ``_set_start(position,
    counts)``, ``_config()`` (the fields a state must match), ``summary()`` and,
    when its state carries per-cluster counts, ``_state_counts(position)`` and
    ``_check_state_counts(counts, position, version)``.
    """

    spec: SamplerSpec
    strategy: str
    num_samples: int
    clip: int | None
    alpha: float | None
    seed: int
    rank: int
    world_size: int
    capacity: int | None
    num_eligible: int
    num_excluded: int
    cluster_sizes: np.ndarray
    #: whether the state carries per-cluster draw counts
    _state_has_counts = False

    def _init_share(self, spec: SamplerSpec) -> None:
        self.spec = spec
        self.strategy, self.num_samples, self.clip = spec.strategy, spec.num_samples, spec.clip
        self.alpha, self.seed = spec.alpha_in_use, spec.seed
        self.rank, self.world_size = spec.rank, spec.world_size

    # ---------------------------------------------------------------- stream
    def _reset_stream(self, position: int) -> None:
        self._start = int(position)
        self._length = rank_share(self.num_samples, self.rank, self.world_size, self._start)[1]
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

    def _set_start(self, position: int, counts: np.ndarray | None = None) -> None:
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
        """This rank's indices as int64 arrays (bulk export).

        Advances the same state as ``iter``: a block counts as handed out once yielded.

        Parameters
        ----------
        block_size : int
            The most indices in one array, >= 1.

        Yields
        ------
        numpy.ndarray
            The next (at most ``block_size``,) int64 document indices of this rank's
            share, in order.

        Raises
        ------
        InputError
            If ``block_size`` is not an integer >= 1.
        """
        block_size = as_int("block_size", block_size, 1)
        self._restart_if_done()
        while self._taken < self._length:
            if self._buf_i < self._buf.size:
                blk = self._buf[self._buf_i:self._buf_i + block_size]
                self._buf_i += blk.size
            else:
                blk = self._produce(block_size)
            self._taken += blk.size
            yield blk

    def _give_back(self, block: np.ndarray) -> None:
        """``block``, yielded by :meth:`blocks`, is used no more by the caller (nor any
        view of it): a later block may be written into its memory (fresh memory costs
        page faults; the ``.npy`` writer gives back what it wrote)."""
        if self._buf.size and np.may_share_memory(block, self._buf):
            return  # still this stream's buffer
        give = getattr(getattr(self, "_engine", None), "give_back", None)
        if give is not None:
            give(block)

    # ----------------------------------------------------------------- state
    def _config(self) -> dict[str, Any]:
        raise NotImplementedError

    def _state_counts(self, position: int) -> np.ndarray:
        raise NotImplementedError

    def _check_state_counts(self, counts: np.ndarray, position: int, version: int) -> None:
        raise NotImplementedError

    def _state_extra(self) -> dict[str, Any]:
        """Fields a state carries beyond the configuration, position and counts (a
        sampler's ``set_weights`` calls)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Small JSON-serialisable resume state (O(K)); independent of rank and world size.

        Returns
        -------
        dict
            ``version``, the configuration the state must match (``strategy``,
            ``num_samples``, ``clip``, ``alpha``, ``seed``, fingerprints of the
            labels and weights), ``position``, the per-cluster ``counts`` where the
            strategy has them, and ``checksum``.

        Notes
        -----
        ``checksum`` is a SHA-256 over the other fields (this sampler's
        configuration included), so a state edited or corrupted after it was
        taken (e.g. counts moved between clusters) is refused on load. It
        detects accidents and careless edits, not a forger who recomputes it.
        """
        pos = self.position
        d: dict[str, Any] = {"version": STATE_VERSION, **self._config(), "position": pos,
                             **self._state_extra()}
        if self._state_has_counts:
            d["counts"] = self._state_counts(pos).tolist()
        d["checksum"] = state_checksum(d)
        return d

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` was taken (any rank / world size).

        A version-1 state (no checksum) is still accepted; its counts, if any, are
        then verified by a count-only replay to its position (about 0.1 s per 10**7
        positions).

        Parameters
        ----------
        state : dict
            What [`state_dict`][clusterclip.sampling.BaseSampler.state_dict] returned
            (on any rank, under any world size).

        Raises
        ------
        InputError
            For a state of another sampler (the field that differs is named), of the
            wrong types, or edited since it was taken (checksum).
        """
        version = state.get("version") if isinstance(state, dict) else None
        if version not in (1, STATE_VERSION) or isinstance(version, bool):
            raise InputError(f"state_dict version must be 1 or {STATE_VERSION}, got "
                             f"{version if isinstance(state, dict) else state!r}")
        pos = state.get("position")
        if isinstance(pos, bool) or not isinstance(pos, numbers.Integral) \
                or not 0 <= pos <= self.num_samples:
            raise InputError(f"state_dict position must be in [0, {self.num_samples}], got {pos!r}")
        raw = state.get("counts")
        if self._state_has_counts:
            _check_counts(raw, self.cluster_sizes.size)
        elif raw is not None:
            raise InputError(f"state_dict counts do not apply to {self._no_counts_reason()}")
        if version == STATE_VERSION and state.get("checksum") != state_checksum(state):
            raise InputError("state_dict checksum does not match its fields: the state was "
                             "edited or corrupted after it was taken")
        for key, mine in self._config().items():
            if state.get(key) != mine:
                raise InputError(f"state_dict does not match this sampler: {key} "
                                 f"{state.get(key)!r} != {mine!r}")
        counts = None
        if self._state_has_counts:
            counts = np.array(raw, dtype=np.int64)
            self._check_state_counts(counts, int(pos), version)
        self._set_start(int(pos), counts)

    def _no_counts_reason(self) -> str:
        return f"strategy {self.strategy}"

    # --------------------------------------------------------------- summary
    def summary(self) -> dict[str, Any]:
        raise NotImplementedError

    def _share_summary(self) -> dict[str, Any]:
        """The summary's fields on this rank's share."""
        return {"rank": self.rank, "world_size": self.world_size,
                "start_position": self._start, "samples_per_rank": self._length,
                "unserved_positions": (self.num_samples - self._start
                                       - self._length * self.world_size)}

    def __repr__(self) -> str:
        fields = {"strategy": repr(self.strategy), "num_samples": self.num_samples,
                  "clip": self.clip, **self._repr_fields(), "seed": self.seed,
                  "rank": self.rank, "world_size": self.world_size, "position": self.position}
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"

    def _repr_fields(self) -> dict[str, Any]:
        return {}
