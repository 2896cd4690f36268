"""Staged schedules: segments of positions with weights of their own, one clip over all.

A staged mixture (``mixture.json`` version 2, ``stages``) and a sampler's
``set_weights`` calls cut the global schedule into *segments*: positions
``[start, stop)`` drawn with the segment's cluster weights and timing. The clip R
holds over the whole schedule: a segment's clusters have what earlier segments
left of their R x n_k repetitions (their remaining capacity), and draw j of
cluster k (counted over the whole schedule) takes the document of its passes at
j, so passes continue across segments.

* ``paced``: the segment's quotas are :func:`._engine.paced_quotas` of its
  length over the remaining capacities of its clusters of weight > 0 (a cluster
  whose weight asks for more than it has left takes what is left); the draws
  are spread evenly inside the segment (a :class:`._engine.PacedEngine` over
  the segment, offsets u from the segment's own stream).
* ``clusterclip``: the greedy draw by weight of :class:`._engine.ClusterEngine`
  with the segment's weights, its pool the clusters of weight > 0 not yet at
  their clip.

A segment cut short by a ``set_weights`` call keeps the length it was planned
for (its draws before the cut do not move); the draws per cluster at each
segment's start (``bases``) follow from the segments before it, so the whole
state at any position is the segment plan and O(K) counts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.sampling._engine import ClusterEngine, PacedEngine


@dataclass(frozen=True)
class Segment:
    """Positions ``[start, stop)`` drawn with ``weights`` ((K,) float64, or None:
    uniform) and ``timing`` (paced or clusterclip); ``length``: the positions it was
    planned for (``stop - start`` unless a later ``set_weights`` cut it); ``name``:
    how errors and the summary call it."""

    start: int
    stop: int
    length: int
    weights: np.ndarray | None
    timing: str
    name: str


def plan_segments(stages: list[tuple[int, np.ndarray | None, str, str]],
                  calls: list[tuple[int, np.ndarray]]) -> list[Segment]:
    """The segments of ``stages`` ((end position, weights, timing, name), ends
    non-decreasing, the last the schedule's length T) after the ``set_weights``
    ``calls`` ((position, weights), in call order): a call cuts the segment in force
    at its position there, drops the later ones and draws with its weights (and the
    timing in force there) to T."""
    segs, start = [], 0
    for end, w, timing, name in stages:
        segs.append(Segment(start, end, end - start, w, timing, name))
        start = end
    T = start
    for at, w in calls:
        timing = next(s.timing for s in reversed(segs) if s.start <= at)
        kept = [s if s.stop <= at else replace(s, stop=at) for s in segs if s.start < at]
        kept.append(Segment(at, T, T - at, w, timing, f"set_weights at {at}"))
        segs = kept
    return segs


class SegmentedEngine:
    """The schedule of ``segments`` (see the module): the engines' interface
    (``pos``, ``counts``, ``reset``, ``seek`` either way, ``advance``, ``counts_at``,
    ``fresh``, ``limit``), one engine per segment underneath, sharing their passes."""

    def __init__(self, docs: np.ndarray, sizes: np.ndarray, seed: int, clip: int,
                 segments: list[Segment], bases: list[np.ndarray | None] | None = None,
                 holder: ClusterEngine | None = None,
                 events: dict[int, list[tuple[int, int]]] | None = None) -> None:
        self.docs, self.seed, self.clip = docs, int(seed), int(clip)
        self.sizes = np.asarray(sizes, np.int64)
        self.K = int(self.sizes.size)
        self.limit = self.clip * self.sizes
        self.segments = list(segments)
        self.num_samples = self.segments[-1].stop
        self._starts = [s.start for s in self.segments]
        # the engine that owns the pass buffers every segment's engine shares
        self._holder = ClusterEngine(docs, self.sizes, seed, None, clip) if holder is None \
            else holder
        self._subs: dict[int, ClusterEngine] = {}
        # draws per cluster at each segment's start (None: not known yet) and the clip
        # events of each greedy segment, once drawn (or replayed) from its start to its stop
        S = len(self.segments)  # bases[S]: the draws per cluster at the end
        self.bases: list[np.ndarray | None] = [np.zeros(self.K, np.int64)] + [None] * S \
            if bases is None else list(bases) + [None] * (S + 1 - len(bases))
        self._events = {} if events is None else dict(events)
        # every segment is checked now while the bases are cheap (after paced segments);
        # one after a greedy segment when the schedule (or a seek) first reaches it
        i = 0
        while i < S and self.bases[i] is not None:
            self._sub(i)
            if self.bases[i + 1] is None and self.segments[i].timing == "paced":
                self.bases[i + 1] = self._end_counts(i)
            i += 1
        self.clip_events: list[tuple[int, int]] = []
        self.events_from = 0
        self.reset(0, None)

    def fresh(self) -> SegmentedEngine:
        return SegmentedEngine(self.docs, self.sizes, self.seed, self.clip, self.segments,
                               self.bases, self._holder, self._events)

    # -------------------------------------------------------------- segments
    def _base(self, i: int) -> np.ndarray:
        """(K,) draws per cluster at segment ``i``'s start (a greedy segment before it:
        a count-only replay of it, once)."""
        j = i
        while self.bases[j] is None:
            j -= 1
        while j < i:
            self.bases[j + 1] = self._end_counts(j)
            j += 1
        return self.bases[i]

    def _available(self, i: int) -> np.ndarray:
        """(K,) repetitions segment ``i``'s clusters of weight > 0 have left."""
        w = self.segments[i].weights
        left = self.limit - self._base(i)
        return left if w is None else np.where(w > 0, left, 0)

    def _sub(self, i: int) -> ClusterEngine:
        """Segment ``i``'s engine (made once; its feasibility checked then)."""
        sub = self._subs.get(i)
        if sub is not None:
            return sub
        seg, base = self.segments[i], self._base(i)
        avail = self._available(i)
        need = seg.length if seg.timing == "paced" else seg.stop - seg.start
        if need > int(avail.sum()):
            raise InputError(f"{seg.name} (positions {seg.start} to {seg.start + need}) "
                             f"needs {need} draws but its clusters of weight > 0 have "
                             f"{int(avail.sum())} left under clip {self.clip}")
        if seg.timing == "paced" and seg.length > 0:
            sub: ClusterEngine = PacedEngine(self.docs, self.sizes, self.seed, seg.weights,
                                             self.clip, seg.length, (i, avail, base))
        else:
            sub = self._greedy(i)
        self._subs[i] = sub
        return sub

    def _greedy(self, i: int) -> ClusterEngine:
        """A new greedy engine of segment ``i``, sharing the pass buffers."""
        sub = ClusterEngine(self.docs, self.sizes, self.seed, self.segments[i].weights,
                            self.clip)
        if self.docs.size:  # without documents (clusters only) there are no passes to share
            sub._cur, sub._cur_group = self._holder._ensure_cur(), self._holder._cur_group
            if sub._use_kernel:
                sub._kc = self._holder._kctx()
        return sub

    def _end_counts(self, i: int) -> np.ndarray:
        """(K,) draws per cluster at segment ``i``'s stop (a greedy one: replayed by an
        engine of its own, its clip events kept)."""
        seg, base = self.segments[i], self._base(i)
        if seg.stop == seg.start:
            return base.copy()
        if self.bases[i + 1] is not None:
            return self.bases[i + 1]
        sub = self._sub(i)
        if isinstance(sub, PacedEngine):
            return base + sub.counts_at(seg.stop - seg.start)
        self._end_counts_replay(i)
        return self.bases[i + 1]

    def _index(self, position: int) -> int:
        """The segment drawing ``position`` (the last one at T)."""
        return max(0, bisect.bisect_right(self._starts, position) - 1)

    # ----------------------------------------------------------------- state
    @property
    def counts(self) -> np.ndarray:
        if isinstance(self._cur_sub, PacedEngine):
            return self.bases[self._i] + self._cur_sub.counts
        return self._cur_sub.counts

    def reset(self, position: int, counts: np.ndarray | None) -> None:
        """Jump to ``position``; ``counts``, if given, the draws per cluster there."""
        i = self._index(int(position))
        seg, sub = self.segments[i], self._sub(i)
        if isinstance(sub, PacedEngine):
            sub.reset(position - seg.start,
                      None if counts is None else np.asarray(counts, np.int64) - self.bases[i])
        elif counts is None:
            sub.reset(seg.start, self.bases[i])
            sub.seek(position)  # its clip events are recorded from the segment's start
        else:
            sub.reset(position, counts)
        self._i, self._cur_sub, self.pos = i, sub, int(position)

    def seek(self, position: int) -> None:
        """Move to ``position`` (either way): a key search, or a count-only replay from
        the start of a greedy segment (or from here, inside the same one)."""
        i = self._index(int(position))
        if i == self._i and position >= self.pos and not isinstance(self._cur_sub,
                                                                    PacedEngine):
            self._cur_sub.seek(position)
            self.pos = int(position)
        else:
            self.reset(position, None)

    def counts_at(self, position: int) -> np.ndarray:
        """Draws per cluster at ``position`` (LookupError where only a replay tells)."""
        if position == self.pos:
            return self.counts.copy()
        i = self._index(int(position))
        sub = self._sub(i)
        if isinstance(sub, PacedEngine):
            return self.bases[i] + sub.counts_at(position - self.segments[i].start)
        if i != self._i:
            raise LookupError(position)
        if position > self.pos:  # forward in this greedy segment: count the draws there
            self.seek(position)
            return self.counts.copy()
        return sub.counts_at(position)

    # --------------------------------------------------------------- drawing
    def _spans(self, n: int) -> Iterator[tuple[int, int]]:
        """The next ``n`` draws as (offset, length) spans within one segment each, the
        segment's engine current while its span is drawn (moving on to the next segment
        at each stop); ``pos`` advanced past each span after it is drawn."""
        if self.pos + n > self.num_samples:
            raise RuntimeError("staged schedule: past its end")
        done = 0
        while done < n:
            if self.pos >= self.segments[self._i].stop:
                self._leave()
                self.reset(self.pos, None)  # the next segment, at its start
                continue
            m = min(n - done, self.segments[self._i].stop - self.pos)
            yield done, m
            done += m
            self.pos += m

    def advance(self, n: int, gather: bool = True) -> np.ndarray | None:
        """The next ``n`` draws' documents (int64) if ``gather``, else just move on."""
        if self.pos < self.segments[self._i].stop and self.pos + n <= \
                min(self.segments[self._i].stop, self.num_samples):
            got = self._cur_sub.advance(n, gather)  # inside one segment: no copy
            self.pos += n
            return got
        out = np.empty(n, np.int64) if gather else None
        for done, m in self._spans(n):
            got = self._cur_sub.advance(m, gather)
            if out is not None:
                out[done:done + m] = got
        return out

    def clusters(self, n: int) -> np.ndarray:
        """The clusters (uint32 ids) of the next ``n`` draws, no documents (the segments'
        engines' :meth:`~._engine.ClusterEngine.clusters`)."""
        out = np.empty(n, np.uint32)
        for done, m in self._spans(n):
            out[done:done + m] = self._cur_sub.clusters(m)
        return out

    def _leave(self) -> None:
        """At the stop of the current segment: keep what drawing it told (the counts at
        the next segment's start; a greedy segment's clip events, if from its start)."""
        i, sub = self._i, self._cur_sub
        if self.bases[i + 1] is None:
            self.bases[i + 1] = self.counts.copy()
        if not isinstance(sub, PacedEngine) and sub.events_from == self.segments[i].start:
            self._events.setdefault(i, list(sub.clip_events))

    # --------------------------------------------------------------- summary
    def segment_report(self) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
        """Per segment: its positions, timing, draws and the clusters whose remaining
        repetitions it used up (they asked for more than they had left, or took the
        last of them); and every (cluster, position of its last draw) of a cluster
        that reached its clip, in order of position. Free for greedy segments this
        engine drew from their start; the others are replayed (count only)."""
        if self.pos == self.num_samples:
            self._leave()
        out, events = [], []
        for i, seg in enumerate(self.segments):
            n = seg.stop - seg.start
            end = self._end_counts(i)
            drawn = end - self._base(i)
            if n and isinstance(sub := self._sub(i), PacedEngine):
                ev = [(k, seg.start + p) for k, p in sub.capped_events(floor=1 << 18)
                      if p < n]
            elif n:
                if i not in self._events:
                    self._end_counts_replay(i)
                ev = self._events[i]
            else:
                ev = []
            events.extend(ev)
            w = seg.weights
            out.append({"stage": seg.name, "start": seg.start, "stop": seg.stop,
                        "timing": seg.timing, "draws": int(drawn.sum()),
                        "clusters_drawn": int((drawn > 0).sum()),
                        "clusters_weighted": int((self.sizes > 0).sum() if w is None
                                                 else ((w > 0) & (self.sizes > 0)).sum()),
                        "clusters_used_up": sorted(k for k, _ in ev)})
        return out, events

    def _end_counts_replay(self, i: int) -> None:
        """Replay greedy segment ``i`` (count only) for its clip events."""
        seg = self.segments[i]
        replay = self._greedy(i)
        replay.reset(seg.start, self._base(i))
        replay.seek(seg.stop)
        self._events[i] = list(replay.clip_events)
        self.bases[i + 1] = replay.counts.copy()
