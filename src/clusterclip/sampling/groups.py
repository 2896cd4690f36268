"""Clip by group: each near-duplicate group is one unit of the sampler.

``make_sampler(labels, T, ..., groups=g)`` returns a :class:`GroupClipSampler`.
``g`` (int[N], e.g. ``W/groups.npy`` from ``clusterclip dedup``) gives each
document's group; documents with the same id form a group and must share a
cluster. A group is represented by its smallest document index (its
*representative*).

The schedule is the plain sampler's schedule over the representatives (labels
``labels[i]`` for representatives, -1 for the other members), with each draw
of a group replaced by one of its members in rotation: the j-th draw (0-based)
of a group yields its member ``j mod size`` in ascending document order. So a
pass over a cluster visits each group once, the clip R bounds the draws of a
*group* (its documents together appear at most R times under clusterclip and
paced), members are used evenly (their counts differ by at most 1), and with
every group of size 1 the schedule is exactly the plain sampler's. Cluster
sizes n_k (alpha weights, capacity R x eligible) count groups, not documents.

Which member a draw yields depends on how often its group was drawn before, so
starting at position c (``consumed_samples``, ``load_state_dict``) replays the
group draws before c (count only; about the cost of generating c positions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.labels import check_labels
from clusterclip.sampling.sampler import ClusterClipSampler
from clusterclip.sampling.spec import (
    SamplerSpec,
    mixture_defaults,
    resolve_clusters,
    with_spec_signature,
)
from clusterclip.sampling.stream import BaseSampler
from clusterclip.storage.digests import array_fingerprint

GEN_BLOCK = 1 << 18  # global positions generated (and mapped) at a time


class GroupIndex:
    """Groups of the eligible documents, checked: representatives and members in order.

    ``rep[i]``: representative (smallest document index) of document ``i``'s group, -1
    for excluded documents; ``members``: eligible documents ordered by (group, index);
    ``start[r]``/``size[r]``: where group ``r``'s members lie in ``members``.
    """

    def __init__(self, groups: Any, labels: np.ndarray, source: str = "groups") -> None:
        g = np.asarray(groups)
        lab = labels
        if g.ndim != 1 or g.dtype.kind not in "iu":
            raise InputError(f"{source}: must be a 1-D integer array, got {g.dtype} of shape "
                             f"{g.shape}")
        if g.size != lab.size:
            raise InputError(f"{source}: {g.size} group ids but {lab.size} labels; rerun "
                             f"`clusterclip dedup` after `clusterclip cluster`")
        elig = np.flatnonzero(lab >= 0)
        ge = g[elig].astype(np.int64)
        bad = np.flatnonzero(ge < 0)
        if bad.size:
            i = int(elig[bad[0]])
            raise InputError(f"{source}: document {i} has cluster {int(lab[i])} but group "
                             f"{int(g[i])}; every document with a cluster needs a group id >= 0")
        order = np.argsort(ge, kind="stable")  # by group, ascending index inside a group
        members = elig[order].astype(np.int64)
        sg = ge[order]
        first = np.ones(sg.size, dtype=bool)
        first[1:] = sg[1:] != sg[:-1]
        starts = np.flatnonzero(first)
        sizes = np.diff(np.append(starts, sg.size))
        reps = members[starts]
        rep_of = np.repeat(reps, sizes)
        split = np.flatnonzero(lab[members] != lab[rep_of])
        if split.size:
            d, r = int(members[split[0]]), int(rep_of[split[0]])
            raise InputError(f"{source}: group {int(g[d])} spans clusters {int(lab[r])} "
                             f"(document {r}) and {int(lab[d])} (document {d}); groups must lie "
                             f"inside one cluster (run `clusterclip dedup` on these labels)")
        N = lab.size
        self.rep = np.full(N, -1, np.int64)
        self.rep[members] = rep_of
        self.members = members
        self.start = np.zeros(N, np.int64)
        self.size = np.zeros(N, np.int64)
        self.start[reps] = starts
        self.size[reps] = sizes
        self.reps = reps
        self.num_groups = int(reps.size)
        self.singletons = bool((sizes == 1).all())
        self.fingerprint = array_fingerprint(self.rep)

    def rep_labels(self, labels: np.ndarray) -> np.ndarray:
        """The labels of the sampler over groups: a group's cluster at its representative."""
        out = np.full(labels.size, -1, dtype=labels.dtype)
        out[self.reps] = labels[self.reps]
        return out


class GroupStream:
    """The global schedule of documents, from a plain sampler's schedule of groups."""

    def __init__(self, inner: ClusterClipSampler, index: GroupIndex) -> None:
        self.index = index
        self._inner = inner
        self._it = inner.blocks(GEN_BLOCK)
        self.counts = np.zeros(index.rep.size, np.int64)  # draws so far (groups of 2+)
        self.pos = 0
        self._pending = np.empty(0, np.int64)

    def _map(self, b: np.ndarray) -> np.ndarray:
        """Members for the group draws ``b`` (representatives), in order; counts updated."""
        ix = self.index
        out = b.astype(np.int64)  # a singleton's member is itself: only groups of 2+ map
        if ix.singletons:
            return out
        multi = np.flatnonzero(ix.size[out] > 1)
        if multi.size:
            out[multi] = self._rotate(out[multi])
        return out

    def _rotate(self, b: np.ndarray) -> np.ndarray:
        """Members for draws ``b`` of groups of 2+ (in order); their counts updated."""
        ix = self.index
        order = np.argsort(b, kind="stable")
        sb = b[order]
        new = np.ones(sb.size, dtype=bool)
        new[1:] = sb[1:] != sb[:-1]
        runs = np.flatnonzero(new)
        within = np.arange(sb.size) - np.repeat(runs, np.diff(np.append(runs, sb.size)))
        occ = np.empty(b.size, np.int64)
        occ[order] = within
        occ += self.counts[b]
        docs = ix.members[ix.start[b] + occ % ix.size[b]]
        self.counts[sb[runs]] += np.diff(np.append(runs, sb.size))
        return docs

    def take(self, m: int, keep: bool = True) -> np.ndarray:
        """The next ``m`` global positions (documents); ``keep=False`` only counts them."""
        out = []
        while m > 0:
            if self._pending.size == 0:
                self._pending = self._map(next(self._it))
            part, self._pending = self._pending[:m], self._pending[m:]
            if keep:
                out.append(part)
            m -= part.size
            self.pos += part.size
        return np.concatenate(out) if out else np.empty(0, np.int64)


class GroupClipSampler(BaseSampler):
    """A [`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler] over near-duplicate groups.

    Made by [`make_sampler`][clusterclip.sampling.make_sampler] with ``groups`` (or
    directly, with the same arguments). Same parameters, iteration, ``blocks``,
    ``state_dict`` / ``load_state_dict`` and ``summary`` as
    [`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler], plus
    ``groups``. Each group is one unit of the passes and of the clip.

    Parameters
    ----------
    labels : array_like
        (N,) integer cluster id (>= 0) of each document; -1 excludes it.
    num_samples : int
        Length T of the global schedule, >= 1.
    **options : Any
        Keyword-only: the fields of
        [`SamplerSpec`][clusterclip.sampling.SamplerSpec], ``groups`` required:
        (N,) integer group id of each document (e.g. ``W/groups.npy`` from
        ``clusterclip dedup``); documents with the same id form a group and must
        share a cluster.

    Attributes
    ----------
    num_groups : int
        The near-duplicate groups.
    cluster_sizes : numpy.ndarray
        (K,) int64 eligible groups per cluster (n_k counts groups, not documents).

    Raises
    ------
    InputError
        If a parameter is not valid, a group spans two clusters, or a document
        with a cluster has no group id >= 0.
    TypeError
        If ``groups`` is not given.

    Notes
    -----
    A group is represented by its smallest document index (its representative).
    The schedule is the plain sampler's schedule over the representatives (labels
    ``labels[i]`` for representatives, -1 for the other members), with each draw
    of a group replaced by one of its members in rotation: the j-th draw
    (0-based) of a group yields its member ``j mod size`` in ascending document
    order. So a pass over a cluster visits each group once, the clip R bounds the
    draws of a *group* (its documents together appear at most R times under
    ``clusterclip`` and ``paced``), members are used evenly (their counts differ
    by at most 1), and with every group of size 1 the schedule is exactly the
    plain sampler's. Cluster sizes n_k (alpha weights, capacity R x eligible)
    count groups.

    Which member a draw yields depends on how often its group was drawn before,
    so starting at position c (``consumed_samples``, ``load_state_dict``) replays
    the group draws before c (count only; about the cost of generating c
    positions).

    Examples
    --------
    >>> import numpy as np
    >>> from clusterclip.sampling import make_sampler
    >>> labels = np.array([0, 0, 0, 1, 1])
    >>> groups = np.array([0, 0, 1, 2, 3])  # documents 0 and 1: near-duplicates
    >>> sampler = make_sampler(labels, 6, clip=2, groups=groups)
    >>> type(sampler).__name__, sampler.num_groups, sampler.capacity
    ('GroupClipSampler', 4, 8)
    """

    def __init__(self, labels: Any, num_samples: int, **options: Any) -> None:
        spec = SamplerSpec(num_samples, **mixture_defaults(options))
        if spec.groups is None:
            raise TypeError("GroupClipSampler needs groups (one group id per document)")
        lab = check_labels(labels)
        self._index = GroupIndex(spec.groups, lab)
        # The plain sampler over the groups' representatives, from position 0 on one rank.
        self._inner_spec = spec.replace(rank=0, world_size=1, consumed_samples=0, groups=None)
        self._clusters = resolve_clusters(self._inner_spec, self._index.rep_labels(lab),
                                          unit="near-duplicate groups")
        inner = self._inner()
        self._init_share(spec)
        self.capacity = inner.capacity
        self.num_groups = self._index.num_groups
        # documents of clusters of weight 0 are excluded, as in the plain sampler
        drawable = inner.cluster_sizes > 0
        self.num_eligible = int(drawable[lab[lab >= 0]].sum())
        self.num_excluded = int(lab.size - self.num_eligible)
        self.cluster_sizes = inner.cluster_sizes
        self._drawable_groups = inner.num_eligible
        self._config_inner = inner._config()
        self._set_start(spec.consumed_samples)

    def _inner(self) -> ClusterClipSampler:
        return ClusterClipSampler._from_spec(self._inner_spec, self._clusters)

    # ------------------------------------------------------------- positions
    def _set_start(self, position: int, counts: np.ndarray | None = None) -> None:
        self._stream: GroupStream | None = None
        self._reset_stream(position)

    def _restart(self) -> None:
        self._set_start(self._start)

    def _global(self, p0: int, span: int) -> np.ndarray:
        if self._stream is None or self._stream.pos > p0:
            self._stream = GroupStream(self._inner(), self._index)
        s = self._stream
        s.take(p0 - s.pos, keep=False)  # the replay that a start or a seek needs
        return s.take(span)

    # ----------------------------------------------------------------- state
    def __getstate__(self) -> dict[str, Any]:
        # picklable: the running stream (a generator) is rebuilt, and replayed, on demand
        return {**self.__dict__, "_stream": None}

    def _config(self) -> dict[str, Any]:
        return {"groups": self._index.fingerprint, **self._config_inner}

    def _no_counts_reason(self) -> str:
        return "a sampler with groups"

    # --------------------------------------------------------------- summary
    def summary(self) -> dict[str, Any]:
        """The plain sampler's summary over groups, with documents counted by member.

        Returns
        -------
        dict
            The fields of
            [`ClusterClipSampler.summary`][clusterclip.sampling.ClusterClipSampler.summary],
            where ``max_repetition`` / ``min_repetition`` count draws per *group*
            (what the clip bounds), plus ``eligible_groups``, ``groups_seen``,
            ``duplicate_groups``, ``documents_in_duplicate_groups`` and
            ``max_document_repetition``; ``documents_seen`` counts documents.

        Notes
        -----
        The document counts take a pass over the whole schedule.
        """
        s = self._inner().summary()
        stream = GroupStream(self._inner(), self._index)
        seen = np.zeros(self._index.rep.size, np.int64)
        left = self.num_samples
        while left > 0:
            d = stream.take(min(left, GEN_BLOCK))
            np.add.at(seen, d, 1)
            left -= d.size
        ix = self._index
        elig = ix.members
        gs = ix.size[ix.size > 0]
        s.update(
            eligible_groups=self._drawable_groups, eligible_documents=self.num_eligible,
            excluded_documents=self.num_excluded,
            groups_seen=s["documents_seen"], documents_seen=int((seen[elig] > 0).sum()),
            duplicate_groups=int((gs > 1).sum()),
            documents_in_duplicate_groups=int(gs[gs > 1].sum()),
            max_document_repetition=int(seen.max()),
            epochs_equivalent=self.num_samples / self._drawable_groups,
            groups=self._index.fingerprint, **self._share_summary())
        if "zero_weight_documents" in s:  # the inner sampler counted representatives
            s["zero_weight_documents"] = int(elig.size) - self.num_eligible
        return s

    def _repr_fields(self) -> dict[str, Any]:
        return {"groups": self.num_groups}


with_spec_signature(GroupClipSampler.__init__)
