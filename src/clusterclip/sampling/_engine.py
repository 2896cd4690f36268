"""Global schedules: global position -> document index, with count-only seeking.

Three engines, all pure functions of their inputs and seed:

* :class:`ClusterEngine` (``uniform``, ``temperature``, ``clusterclip``): draw
  ``t`` picks a cluster from the pool with the uint32 variate ``t`` (see
  :mod:`._rng`), then takes the next document of that cluster's current pass.
  Its whole state is the position and the per-cluster draw counts; the pool
  and every cluster's place in its passes derive from those counts.
* :class:`PacedEngine` (``paced``): fixed per-cluster quotas, each cluster's
  draws at evenly spaced seeded keys, merged by key; documents come from the
  same passes as in :class:`ClusterEngine`. Counts at any position follow
  from the keys (no replay).
* :class:`EpochEngine` (``random``): epoch ``e`` is a permutation of the
  eligible documents keyed on ``(seed, e)``; its state is the position.

Both work in sub-blocks of vectorised numpy; the result never depends on how
a range of positions is split into calls. Where the optional C kernel
(``_kernel.c``, built by ``setup.py``) is built, the hot loops run there
instead, bit for bit the same (the numpy path is the reference and the
fallback; ``CLUSTERCLIP_KERNEL=off`` forces it).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from clusterclip.errors import InputError
from clusterclip.kernels import kernels_enabled, load_kernel
from clusterclip.limits import MAX_CLIP, MAX_ROWS
from clusterclip.pool import available_cpus
from clusterclip.sampling._rng import (
    CHUNK,
    TAG_EPOCH,
    TAG_PACED,
    TAG_PASS,
    ChoiceVariates,
    CounterUniforms,
    KeyedStreams,
    SFC64Lanes,
)

KERNEL_VERSION = 10  # the _kernel.c this code calls (its VERSION)
# the optional compiled kernel (setup.py); the numpy path below is the reference
_kernel = load_kernel("clusterclip.sampling._kernel", KERNEL_VERSION)


def kernel_enabled() -> bool:
    """Whether new engines use the compiled kernel: it is built and the environment
    variable ``CLUSTERCLIP_KERNEL`` is not ``off`` (which forces the numpy path)."""
    return _kernel is not None and kernels_enabled()

# A small cluster gets ceil(E / n_k) passes generated together from one key
# (seed, cluster, group), E = min(2048, max(16, max(2 N, 2**22) / K)): tiny
# clusters then need a new generator only every ~E draws, a sub-block rarely
# crosses a group boundary, and the pass buffer stays within N + max(2 N,
# 2**22) + 16 K entries. With a clip R, at most R passes are made together (a
# cluster never has more). Part of the schedule's definition.
GROUP_ELEMS = 2048


def load_ahead(nbytes: int) -> bool:
    """Whether the kernel's draws load each cluster's next group ahead, on a second
    thread into a second buffer of the passes' ``nbytes``: where the kernel has that
    thread, this process may use two CPUs or more, and the buffer is at most
    ``LOAD_AHEAD_MAX_BYTES``. The schedule is the same either way."""
    if _kernel is None or not _kernel.HELPER or nbytes > LOAD_AHEAD_MAX_BYTES:
        return False
    return available_cpus() >= 2


def stable_order(keys: np.ndarray, top: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of integer keys in [0, top] in linear time:
    numpy radix-sorts 16-bit keys, so one pass, or two (low half, then high half)
    below 2**32."""
    if top <= 0xFFFF:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if top <= 0xFFFFFFFF:
        order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
        high = (keys >> 16).astype(np.uint16).take(order)
        return order.take(np.argsort(high, kind="stable"))
    return np.argsort(keys, kind="stable")


def passes_per_group(sizes: np.ndarray, clip: int | None) -> np.ndarray:
    """(K,) int64: passes generated per key for clusters of ``sizes`` (n_k)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    nonempty = sizes > 0
    room = max(2 * int(sizes.sum()), 1 << 22)  # pass buffer entries beyond N
    elems = int(min(GROUP_ELEMS, max(16, room // max(1, int(nonempty.sum())))))
    ppg = np.ones(sizes.size, np.int64)
    ppg[nonempty] = np.maximum(1, -(-elems // sizes[nonempty]))
    if clip is not None:
        np.minimum(ppg, int(clip), out=ppg)
    return ppg


MAX_BLOCK = 1 << 18  # draws per sub-block: big enough to amortise O(K) work, cache friendly
MIN_BLOCK = 256
# the largest pass buffer whose groups are loaded ahead (a second buffer of its size)
LOAD_AHEAD_MAX_BYTES = 1 << 30
GUIDE_BITS = 16  # weighted choice: a guide table of up to 2**16 entries over the top bits
# Cost model (us, measured on the reference machine) choosing between SFC64 lanes and
# one numpy shuffle per cluster for loading groups of passes (see _load_groups).
LANE_MAX_STEPS = 256
LANE_STEP_US, LANE_ITEM_US = 22.5, 0.05
LOOP_CALL_US, LOOP_ITEM_US = 10.0, 0.01


class ClusterEngine:
    """Schedule of the cluster strategies.

    Parameters
    ----------
    docs_by_cluster : (N_eligible,) int32/int64, document ids grouped by cluster
        (ascending id inside each cluster).
    sizes : (K,) int64, n_k; empty clusters (n_k = 0) never enter the pool.
    seed : int >= 0.
    weights : (K,) float64 or None. Cluster-choice weight; None is uniform over
        the pool (exact integer arithmetic, the fast path).
    clip : int or None. A cluster leaves the pool once it has ``clip * n_k`` draws.
    """

    LOAD_AHEAD = True  # the kernel's draws may load groups ahead on a second thread

    def __init__(self, docs_by_cluster: np.ndarray, sizes: np.ndarray, seed: int,
                 weights: np.ndarray | None = None, clip: int | None = None) -> None:
        self.docs = docs_by_cluster
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.K = int(self.sizes.size)
        self.seed = int(seed)
        self.weights = weights
        self.clip = clip
        self.offsets = np.zeros(self.K + 1, np.int64)
        np.cumsum(self.sizes, out=self.offsets[1:])
        self.passes_per_group = passes_per_group(self.sizes, clip)
        self.group_len = self.passes_per_group * self.sizes
        self.seg_off = np.zeros(self.K + 1, np.int64)
        np.cumsum(self.group_len, out=self.seg_off[1:])
        self.limit = None if clip is None else int(clip) * self.sizes
        self._variates = ChoiceVariates(self.seed)
        self._passes = KeyedStreams(self.seed, TAG_PASS)
        self._cur: np.ndarray | None = None  # current group of passes of every cluster
        self._cur_group: np.ndarray | None = None
        self._use_kernel = kernel_enabled()
        self._kc: tuple | None = None  # the kernel's view of the arrays above
        self._spares: list[np.ndarray] = []  # blocks of documents given back
        self._handed: list[weakref.ref] = []  # the last blocks made (only those come back)
        self.reset(0, None)

    def fresh(self) -> ClusterEngine:
        """A new engine at position 0 sharing this one's read-only arrays."""
        return ClusterEngine(self.docs, self.sizes, self.seed, self.weights, self.clip)

    # ----------------------------------------------------------------- state
    def reset(self, position: int, counts: np.ndarray | None) -> None:
        """Jump to ``position`` whose per-cluster draw counts are ``counts``."""
        self.pos = int(position)
        # (cluster, global position of its last draw) of the clips since `events_from`
        self.clip_events: list[tuple[int, int]] = []
        self.events_from = self.pos
        self.counts = (np.zeros(self.K, np.int64) if counts is None
                       else np.array(counts, dtype=np.int64))
        self._blk_start = self.pos
        self._blk_choice = np.empty(0, np.uint32)
        self._own_choice = False
        self._rebuild_pool()

    def _rebuild_pool(self) -> None:
        alive = self.sizes > 0
        if self.weights is not None:  # a stage's clusters of weight 0 are not drawn
            alive &= self.weights > 0
        if self.limit is not None:
            alive &= self.counts < self.limit
        self.pool = np.flatnonzero(alive)
        # Draws left before each pool cluster is clipped (pool-local; None if unclipped).
        self._rem = None if self.limit is None else self.limit[self.pool] - self.counts[self.pool]
        self._pool32 = None
        self._shrink = 1.0
        self._pool_changed()

    def _drop_from_pool(self, j: int) -> None:
        """Cluster at pool-local index j completed its last pass: it leaves for good."""
        m = self.pool.size
        for name in ("pool", "_rem", "_pool32"):  # shift left in place: cheaper than np.delete
            a = getattr(self, name)
            a[j:m - 1] = a[j + 1:m]
            setattr(self, name, a[:m - 1])
        self._pool_changed()

    def _pool_changed(self) -> None:
        m = self.pool.size
        if getattr(self, "_pool32", None) is None or self._pool32.size != m:
            self._pool32 = self.pool.astype(np.uint32)  # compact cluster ids for gathering
        if self.weights is None or m == 0:
            self._p = None
            return
        w = self.weights[self.pool]
        cum = np.cumsum(w)
        self._p = w / cum[-1]
        # Integer boundaries on the 2**32 variate grid: cluster j owns
        # [bounds[j-1], bounds[j]); the sentinel 2**32 ends the last one.
        bounds = np.empty(m, np.uint64)
        inner = np.floor(cum[:-1] / cum[-1] * 2.0**32)
        bounds[:-1] = np.minimum(inner, 2.0**32 - 1).astype(np.uint64)
        bounds[-1] = 1 << 32
        self._bounds = bounds
        # guide[h] = number of boundaries below h << shift: the search for
        # variate u starts at guide[u >> shift] and moves right a few steps.
        bits = int(min(GUIDE_BITS, max(8, m.bit_length() + 2)))
        self._guide_shift = np.uint32(32 - bits)
        hist = np.bincount((bounds[:-1] >> np.uint64(32 - bits)).astype(np.int64),
                           minlength=1 << bits)
        self._guide = np.zeros(1 << bits, np.int64)
        np.cumsum(hist[:-1], out=self._guide[1:])

    def counts_at(self, position: int) -> np.ndarray:
        """Per-cluster draw counts at ``position`` (>= start of the last block)."""
        if position == self.pos:
            return self.counts.copy()
        if self._blk_start <= position < self.pos:
            tail = self._blk_choice[position - self._blk_start:]
            return self.counts - np.bincount(tail, minlength=self.K)
        if position > self.pos:
            self.seek(position)
            return self.counts.copy()
        raise LookupError(position)

    def seek(self, position: int) -> None:
        """Advance to ``position`` counting draws only (no documents gathered)."""
        if position < self.pos:
            raise ValueError("seek backwards")
        self.advance(position - self.pos, gather=False)

    # --------------------------------------------------------------- drawing
    def _choose(self, u: np.ndarray) -> np.ndarray:
        """Pool-local cluster index (int64) for each uint32 variate."""
        m = self.pool.size
        if self._p is None:
            local = np.multiply(u, m, dtype=np.uint64)
            local >>= np.uint64(32)
            return local.view(np.int64)
        local = self._guide[u >> self._guide_shift]
        bounds = self._bounds
        sel = np.flatnonzero(bounds[local] <= u)
        while sel.size:
            local[sel] += 1
            sel = sel[bounds[local[sel]] <= u[sel]]
        return local

    def _block_size(self, gather: bool) -> int:
        if self._rem is None:  # count-only: whole variate chunks amortise the O(K) work
            return MAX_BLOCK if gather else CHUNK
        # Draws until the next expected clip: sub-blocks about that long keep
        # the work thrown away at a clip event small in dense clip periods.
        if self._p is None:
            d = float(self._rem.min()) * self.pool.size
        else:
            d = float(np.min(self._rem / self._p))
        # `_shrink` adapts to how early clips actually came in recent
        # sub-blocks (many clusters near completion clip well before d).
        return int(min(MAX_BLOCK, max(MIN_BLOCK, self._shrink * (1.25 * d + MIN_BLOCK))))

    def _first_completion(self, local: np.ndarray, over: np.ndarray) -> tuple[int, int]:
        """Earliest draw in ``local`` completing the last pass of a cluster in ``over``.

        Returns (pool-local cluster, draw index inside the sub-block).
        """
        rem = self._rem
        if over.size == 1:
            j = int(over[0])
            return j, int(np.flatnonzero(local == j)[rem[j] - 1])
        flag = np.zeros(self.pool.size, bool)
        flag[over] = True
        sel = np.flatnonzero(flag[local])  # draws of the candidate clusters, in order
        sub = local[sel]
        # (cluster, draw) pairs in order: a stable radix sort of 16-bit pool
        # indices, else a sort of unique composite keys
        if self.pool.size <= 1 << 16:
            order = sel[np.argsort(sub.astype(np.uint16), kind="stable")]
        else:
            order = np.sort(sub * local.size + sel) % local.size
        per = np.bincount(sub, minlength=self.pool.size)[over]
        ends = order[np.cumsum(per) - per + rem[over] - 1]
        i = int(np.argmin(ends))
        return int(over[i]), int(ends[i])

    def clusters(self, n: int) -> np.ndarray:
        """The clusters (uint32 ids) of the next ``n`` draws, no documents: the same
        draws as :meth:`advance`, in O(n + K) memory (``docs`` is never read)."""
        self.advance(n, gather=False, keep=True)
        return self._blk_choice

    def advance(self, n: int, gather: bool = True, keep: bool = False) -> np.ndarray | None:
        """Process the next ``n`` global draws; return their documents (int64) if ``gather``
        (``keep``: keep their clusters, ``_blk_choice``, even without ``gather``)."""
        if self._use_kernel:
            return self._advance_kernel(n, gather, keep)
        out = self._out_buffer(n) if gather else None
        chosen: list[np.ndarray] = []  # cluster of each draw, in runs
        pending: list[np.ndarray] = []  # runs whose documents are not gathered yet
        pending_n = 0
        pending_counts = self.counts.copy() if gather else None
        pending_full = np.zeros(self.K, np.int64) if gather else None
        start, done = self.pos, 0
        while done < n:
            m = self.pool.size
            if m == 0:
                raise RuntimeError("every cluster is clipped: num_samples exceeds capacity")
            t = self.pos
            b = min(n - done, CHUNK - t % CHUNK, self._block_size(gather))
            local = self._choose(self._variates.get(t, b))
            # Per-cluster counts of the sub-block: `hit` (pool-local clusters
            # drawn, ascending) and `hits`; sparse when the sub-block is short.
            full = None
            if b * 8 < m:
                hit, hits = np.unique(local, return_counts=True)
            else:
                full = np.bincount(local, minlength=m)
            clipped = -1
            if self._rem is not None:
                if full is not None:
                    over = np.flatnonzero(full >= self._rem)
                else:
                    over = hit[hits >= self._rem[hit]]
                if over.size:
                    # Exact position of the earliest pass completion that
                    # clips a cluster; draws after it see a smaller pool.
                    clipped, last = self._first_completion(local, over)
                    if 4 * (last + 1) < b:  # most of the sub-block was wasted
                        self._shrink = max(self._shrink * 0.5, 1.0 / 64)
                    b = last + 1
                    local = local[:b]
                    if full is not None:
                        full = np.bincount(local, minlength=m)
                    else:
                        hit, hits = np.unique(local, return_counts=True)
                elif self._shrink < 1.0:
                    self._shrink = min(1.0, self._shrink * 2.0)
            if full is not None:
                hit = np.flatnonzero(full)
                hits = full[hit]
            drawn = self.pool[hit]  # their cluster ids
            if keep and not gather:
                chosen.append(self._pool32.take(local))
            elif gather:
                # Documents are gathered per run of up to MAX_BLOCK draws, not
                # per sub-block: dense clip periods make many short sub-blocks.
                if pending_n + b > MAX_BLOCK:
                    self._flush(pending, pending_counts, pending_full,
                                out[done - pending_n:done])
                    pending, pending_n = [], 0
                    pending_counts = self.counts.copy()
                    pending_full[:] = 0
                run = self._pool32.take(local)
                chosen.append(run)
                pending.append(run)
                pending_n += b
                pending_full[drawn] += hits
            self.counts[drawn] += hits
            if self._rem is not None:
                self._rem[hit] -= hits
            self.pos += b
            done += b
            if gather and done == n:
                self._flush(pending, pending_counts, pending_full, out[done - pending_n:done])
            if clipped >= 0:
                self.clip_events.append((int(self.pool[clipped]), self.pos - 1))
                self._drop_from_pool(clipped)
        self._blk_start, self._blk_choice = (start, np.concatenate(
            chosen or [np.empty(0, np.uint32)])) if gather or keep else (
            self.pos, np.empty(0, np.uint32))
        return out

    def _advance_kernel(self, n: int, gather: bool, keep: bool = False) -> np.ndarray | None:
        """:meth:`advance` by the compiled kernel: the same draws one at a time in C,
        back here only at a clip (the pool changes) and at variate chunk ends."""
        ctx = self._kctx() if gather else None
        out = self._out_buffer(n) if gather else None
        # the clusters of a gathered block are this engine's alone (for counts_at):
        # the last block's array is written over by the next block's
        choice = None
        if gather and self._own_choice and self._blk_choice.size >= n:
            choice = self._blk_choice[:n]
        elif gather or keep:
            choice = np.empty(n, np.uint32)
        self._blk_start, self._blk_choice = self.pos, np.empty(0, np.uint32)
        self._own_choice = gather
        start, done = self.pos, 0
        events = np.empty(2 * 4096, np.int64)  # clips handled in C: (cluster, draw) pairs
        while done < n:
            if self.pool.size == 0:
                raise RuntimeError("every cluster is clipped: num_samples exceeds capacity")
            t = self.pos
            b = min(n - done, CHUNK - t % CHUNK)
            weighted = self._p is not None
            got, hit, ne, at, m = _kernel.draw(
                ctx, self._variates.get(t, b), self.pool,
                self._bounds if weighted else None, self._guide if weighted else None,
                int(self._guide_shift) if weighted else 0, self._rem, self.counts,
                None if out is None else out[done:done + b],
                None if choice is None else choice[done:done + b], events)
            self.pos += got
            done += got
            if ne:  # clusters the kernel dropped from the pool (shifted in place)
                self.clip_events.extend(zip(events[0:2 * ne:2].tolist(),
                                            (events[1:2 * ne:2] + t).tolist(), strict=True))
                self.pool, self._rem = self.pool[at:at + m], self._rem[at:at + m]
                self._pool32 = None
                self._pool_changed()
            if hit >= 0:
                self.clip_events.append((int(self.pool[hit]), self.pos - 1))
                self._drop_from_pool(hit)
        if gather or keep:
            self._blk_start, self._blk_choice = start, choice
        else:
            self._blk_start, self._blk_choice = self.pos, np.empty(0, np.uint32)
        return out

    # ------------------------------------------------------------- documents
    def give_back(self, block: np.ndarray) -> None:
        """``block``, documents this engine returned, is no longer used by anyone: its
        memory may hold a later block's (fresh memory costs page faults). The caller
        keeps no reference to it or to any view of it."""
        base = block if block.base is None else block.base
        if len(self._spares) < 2 and any(r() is base for r in self._handed):
            self._spares.append(base)

    def _out_buffer(self, n: int) -> np.ndarray:
        """(n,) int64 for documents: a block given back if one is large enough."""
        try:
            spare = self._spares.pop()
        except IndexError:
            spare = None
        if spare is not None and spare.size >= n:
            return spare[:n]
        out = np.empty(n, np.int64)
        self._handed = [r for r in self._handed[-3:] if r() is not None] + [weakref.ref(out)]
        return out

    def _kctx(self) -> tuple:
        """The arrays the kernel reads and the passes it writes (see _kernel.c); with
        ``nxt`` where :func:`load_ahead` says so (a buffer like the passes', where a
        thread loads each cluster's next group while the draws run)."""
        if self._kc is None:
            cur = self._ensure_cur()
            ahead = self.LOAD_AHEAD and load_ahead(cur.nbytes)
            self._kc = (np.ascontiguousarray(self.docs), self.offsets, self.sizes,
                        self.passes_per_group, self.seg_off, self.group_len, cur,
                        self._cur_group, self.seed, TAG_PASS,
                        np.full(5 * self.K, np.iinfo(np.uint64).max, np.uint64),
                        np.empty_like(cur) if ahead else None,
                        np.full(self.K, -1, np.int64) if ahead else None,
                        self._last_group() if ahead else None)
            _kernel.ahead_fill(self._kc, self.counts)  # first loads: streams 4 at a time
        return self._kc

    def _last_group(self) -> np.ndarray:
        """(K,) int64: the last group of passes of each cluster a draw can load (all
        of them without a clip)."""
        if self.clip is None:
            return np.full(self.K, np.iinfo(np.int64).max, np.int64)
        return -(-int(self.clip) // np.maximum(self.passes_per_group, 1)) - 1

    def _ensure_cur(self) -> np.ndarray:
        if self._cur is None:
            dtype = np.int32 if self.docs.size < 2**31 else np.int64
            self._cur = np.empty(int(self.seg_off[-1]), dtype)
            self._cur_group = np.full(self.K, -1, np.int64)
        return self._cur

    def _load_group(self, k: int, g: int) -> None:
        """Materialise passes [g*G, (g+1)*G) of cluster k (G = passes_per_group[k]).

        Pass p of the group is ``docs_k`` shuffled in place by stream (k, g),
        the passes one after another (``Generator.shuffle`` of each row, which
        is what ``permuted(axis=1)`` does): ``docs_k[permutation(n)]`` without the
        index array or the gather.
        """
        n, G = int(self.sizes[k]), int(self.passes_per_group[k])
        o, so = int(self.offsets[k]), int(self.seg_off[k])
        if n == 1:
            self._cur[so:so + G] = self.docs[o]
        else:
            # int64 items: numpy's shuffle swaps 8-byte items about 2x faster
            rows = np.empty((G, n), np.int64)
            rows[:] = self.docs[o:o + n]
            rng = self._passes(k, g)
            if G == 1:
                rng.shuffle(rows[0])
            else:  # the same shuffles, row after row, in C (~3 us less per row)
                rng.permuted(rows, axis=1, out=rows)
            self._cur[so:so + G * n] = rows.reshape(-1)
        self._cur_group[k] = g

    def _flush(self, runs: list[np.ndarray], counts: np.ndarray, full: np.ndarray,
               out: np.ndarray) -> None:
        if runs:
            self._gather(runs[0] if len(runs) == 1 else np.concatenate(runs), counts, full, out)

    def _gather(self, clusters: np.ndarray, counts: np.ndarray, full: np.ndarray,
                out: np.ndarray) -> None:
        """Write into ``out`` the documents of draws of ``clusters`` (uint32 global ids).

        counts : (K,) draws per cluster before these draws; full : (K,) their bincount.
        """
        # The draws grouped by cluster, in draw order inside a cluster: one stable sort.
        order = stable_order(clusters, self.K - 1)
        k = np.flatnonzero(full)
        vals = self._docs_grouped(k, full[k], counts[k])
        out[order] = vals.astype(np.int64)  # same-dtype scatter is faster

    def _docs_grouped(self, k: np.ndarray, hits: np.ndarray, j0: np.ndarray) -> np.ndarray:
        """Documents of draws j0[i] .. j0[i]+hits[i]-1 of cluster k[i], concatenated in that order.

        k : distinct cluster ids; hits >= 1; j0 : draws of each cluster made before.
        """
        if self._use_kernel:
            hits = np.ascontiguousarray(hits, np.int64)
            vals = np.empty(int(hits.sum()), np.int64)
            _kernel.take_grouped(self._kctx(), np.ascontiguousarray(k, np.int64), hits,
                                 np.ascontiguousarray(j0, np.int64), vals)
            return vals
        cur = self._ensure_cur()
        first = np.cumsum(hits) - hits
        glen = self.group_len[k]
        g0 = j0 // glen
        g1 = (j0 + hits - 1) // glen
        wrap = np.flatnonzero((g0 != g1) | (self._cur_group[k] != g0))
        base = self.seg_off[k] + (j0 - g0 * glen) - first
        base[wrap] = -first[wrap]  # placeholder in range; overwritten below
        idx = np.repeat(base, hits)
        idx += np.arange(idx.size)
        vals = cur.take(idx, mode="clip")
        if wrap.size:
            self._fill_wrapped(k[wrap], j0[wrap], hits[wrap], first[wrap], vals)
        return vals

    def _fill_wrapped(self, k: np.ndarray, j0: np.ndarray, cnt: np.ndarray, w: np.ndarray,
                      vals: np.ndarray) -> None:
        """Draws j0[i] .. j0[i]+cnt[i]-1 of clusters k[i], which cross a group boundary
        or need a load, into vals[w[i]:w[i]+cnt[i]]: one group of each at a time."""
        end = j0 + cnt
        j = j0.copy()
        while k.size:
            glen = self.group_len[k]
            g = j // glen
            need = np.flatnonzero(self._cur_group[k] != g)
            if need.size:
                self._load_groups(k[need], g[need])
            hi = np.minimum(end, (g + 1) * glen)
            n = hi - j
            ramp = np.arange(int(n.sum()), dtype=np.int64)
            ramp -= np.repeat(np.cumsum(n) - n, n)
            src = np.repeat(self.seg_off[k] + j - g * glen, n) + ramp
            dst = np.repeat(w + j - j0, n) + ramp
            vals[dst] = self._cur[src]
            more = np.flatnonzero(hi < end)
            k, j0, end, w, j = k[more], j0[more], end[more], w[more], hi[more]

    def _load_groups(self, k: np.ndarray, g: np.ndarray) -> None:
        """:meth:`_load_group` of each (k[i], g[i]) (distinct clusters), the many
        small ones of a size together in :class:`._rng.SFC64Lanes`."""
        n = self.sizes[k]
        G = self.passes_per_group[k]
        one = n == 1
        if one.any():  # no randomness: G copies of the one document
            kk = k[one]
            reps = G[one]
            ramp = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
            self._cur[np.repeat(self.seg_off[kk], reps) + ramp] = np.repeat(
                self.docs[self.offsets[kk]], reps)
            self._cur_group[kk] = g[one]
        # Lanes (step counts within a factor 2) pay a fixed cost per Fisher-Yates
        # step of the longest and more per item than numpy's own shuffle, which
        # pays a fixed cost per cluster: lanes win for many short groups.
        steps = (n - 1) * G
        small = np.flatnonzero(~one & (steps <= LANE_MAX_STEPS))
        lanes = np.zeros(k.size, bool)
        if small.size:
            octave = np.log2(steps[small]).astype(np.int64)
            for o in np.unique(octave).tolist():
                sel = small[octave == o]
                items = float((n[sel] * G[sel]).sum())
                top = int(steps[sel].max())
                lanes_us = top * LANE_STEP_US + sel.size * top * LANE_ITEM_US
                loop_us = sel.size * LOOP_CALL_US + items * LOOP_ITEM_US
                if lanes_us < loop_us:
                    self._load_lanes(k[sel], g[sel])
                    lanes[sel] = True
        for i in np.flatnonzero(~one & ~lanes).tolist():
            self._load_group(int(k[i]), int(g[i]))

    def _load_lanes(self, k: np.ndarray, g: np.ndarray) -> None:
        """Groups g[i] of clusters k[i] (n > 1 documents each) in SFC64 lanes."""
        n = self.sizes[k]
        G = self.passes_per_group[k]
        order = np.argsort(-(n - 1) * G, kind="stable")  # longest first
        k, g, n, G = k[order], g[order], n[order], G[order]
        lens = n * G
        offs = np.cumsum(lens) - lens
        ramp = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(offs, lens)
        buf = self.docs[np.repeat(self.offsets[k], lens) + ramp % np.repeat(n, lens)].astype(
            np.int64)
        SFC64Lanes(self._passes.states(k, g)).shuffle_flat(buf, offs, n, G)
        self._cur[np.repeat(self.seg_off[k], lens) + ramp] = buf
        self._cur_group[k] = g

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cur"] = state["_cur_group"] = None  # rebuilt lazily from counts
        state["_kc"] = None
        state["_spares"], state["_handed"] = [], []
        return state


class EpochEngine:
    """Schedule of ``random``: epochs of permutations of the eligible documents.

    eligible : (N_eligible,) int64, ascending document ids.
    """

    def __init__(self, eligible: np.ndarray, seed: int) -> None:
        self.eligible = eligible
        self.seed = int(seed)
        self._streams = KeyedStreams(self.seed, TAG_EPOCH)
        self._use_kernel = kernel_enabled()
        self._epoch = -1
        self._order: np.ndarray | None = None
        self.reset(0)

    def fresh(self) -> EpochEngine:
        return EpochEngine(self.eligible, self.seed)

    def reset(self, position: int, counts: object = None) -> None:
        self.pos = int(position)

    def seek(self, position: int) -> None:
        if position < self.pos:
            raise ValueError("seek backwards")
        self.pos = int(position)

    def _epoch_order(self, e: int) -> np.ndarray:
        if e != self._epoch:
            if self._use_kernel:  # the same shuffle, prefetched, on 4-byte items if they fit
                order = self.eligible.astype(np.int32 if self.eligible.size < 2**31
                                             else np.int64)
                _kernel.shuffle(order, self.seed, TAG_EPOCH, e, 0)
            else:
                order = self.eligible.copy()
                self._streams(e).shuffle(order)
            self._order, self._epoch = order, e
        return self._order

    def advance(self, n: int, gather: bool = True) -> np.ndarray | None:
        if not gather:
            self.pos += n
            return None
        out = np.empty(n, np.int64)
        ne, done = self.eligible.size, 0
        while done < n:
            e, i = divmod(self.pos, ne)
            take = min(n - done, ne - i)
            out[done:done + take] = self._epoch_order(e)[i:i + take]
            done += take
            self.pos += take
        return out

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_order"], state["_epoch"] = None, -1
        return state


# ---------------------------------------------------------------------- paced
def paced_quotas(sizes: np.ndarray, weights: np.ndarray | None, clip: int,
                 num_samples: int) -> np.ndarray:
    """(K,) int64 draws per cluster of ``paced``: water-filling, then largest remainder.

    Real quotas ``min(clip * n_k, lam * w_k)`` with ``lam`` such that they sum
    to ``num_samples`` (``w_k`` = 1 for every non-empty cluster when
    ``weights`` is None); rounded down, then the units still missing go one
    each to the clusters with the largest fractional parts (rounded to
    multiples of 2**-32; ties: lower cluster id), never above ``clip * n_k``.
    Needs num_samples <= clip * N.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    T = int(num_samples)
    if not 1 <= int(clip) <= MAX_CLIP or (sizes.size and int(sizes.max()) > MAX_ROWS):
        raise ValueError("clip or a cluster size out of range: clip x size must fit int64")
    cap = int(clip) * sizes
    live = np.flatnonzero(sizes > 0)
    if T > int(cap.sum()):
        raise ValueError("num_samples exceeds capacity")
    w = np.ones(live.size) if weights is None else np.asarray(weights, np.float64)[live]
    if w.size:  # scaled by a power of two, so the largest is in [1, 2): exact (the same
        # quotas), and tiny weights do not overflow c / w (their span is bounded by the
        # callers: clusterclip.limits.MAX_WEIGHT_SPAN)
        w = np.ldexp(w, 1 - math.frexp(float(w.max()))[1])
    c = cap[live]
    ratio = c / w  # lam at which cluster k reaches its cap
    order = np.argsort(ratio, kind="stable")
    cs, ws, rs = c[order], w[order], ratio[order]
    cumcap = np.zeros(live.size + 1, np.int64)
    np.cumsum(cs, out=cumcap[1:])
    wtail = np.zeros(live.size + 1)
    wtail[:-1] = np.cumsum(ws[::-1])[::-1]
    # sum of the real quotas at lam = ratio[i]: clusters before i capped, the rest lam * w
    at = cumcap[:-1] + rs * wtail[:-1]
    n_capped = int(np.searchsorted(at, T, side="right"))
    real = np.empty(live.size)
    real[order[:n_capped]] = cs[:n_capped]
    if n_capped < live.size:
        lam = (T - int(cumcap[n_capped])) / float(wtail[n_capped])
        rest = order[n_capped:]
        real[rest] = np.minimum(c[rest], lam * w[rest])
    q = np.minimum(np.floor(real).astype(np.int64), c)
    q[order[:n_capped]] = cs[:n_capped]
    # Remainders on a 2**-32 grid: ties that are exact in real arithmetic stay
    # ties despite float rounding, and go to the lower cluster id.
    frac = np.rint((real - q) * 2.0**32)
    missing = T - int(q.sum())
    for _ in range(64):  # one round in exact arithmetic; more only to absorb rounding
        if missing == 0:
            break
        if missing > 0:
            cand = np.flatnonzero(q < c)
            pick = cand[np.lexsort((live[cand], -frac[cand]))][:missing]
            q[pick] += 1
        else:
            cand = np.flatnonzero(q > 0)
            pick = cand[np.lexsort((live[cand], frac[cand]))][:-missing]
            q[pick] -= 1
        frac[pick] = 0.0
        missing = T - int(q.sum())
    if missing != 0:  # bounded: a bug, never a hang
        raise ValueError(f"paced quotas: {missing} draws left unplaced")
    out = np.zeros(sizes.size, np.int64)
    out[live] = q
    return out


PACED_WINDOW = 1 << 16  # keys per generation window: offsets fit a 16-bit radix sort


class PacedEngine(ClusterEngine):
    """Schedule of ``paced``: every cluster's quota spread evenly over the whole schedule.

    Cluster k (quota q_k from :func:`paced_quotas`) has draws j = 0 .. q_k - 1;
    draw j has the integer key ``trunc((j + u_kj) * (T / q_k))`` computed in
    float64, with ``u_kj`` in [0, 1) from :class:`._rng.CounterUniforms`
    (seed, cluster, j). The schedule is all draws ordered by (key, cluster, j);
    draw j of cluster k takes the next document of its passes exactly as in
    :class:`ClusterEngine`. Keys rise with j, so the draws of cluster k before
    key x are a prefix whose length follows from O(1) keys near ``x q_k / T``;
    the counts at any position come from a binary search over x (O(K log K)),
    with no replay.
    """

    LOAD_AHEAD = False  # its windows load groups outside draw

    def __init__(self, docs_by_cluster: np.ndarray, sizes: np.ndarray, seed: int,
                 weights: np.ndarray | None, clip: int, num_samples: int,
                 stage: tuple[int, np.ndarray, np.ndarray] | None = None) -> None:
        self.num_samples = T = int(num_samples)
        self._paced_weights, self._stage = weights, stage
        if stage is None:  # the whole schedule: quotas of the clip R over n_k
            self.quotas = paced_quotas(sizes, weights, clip, T)
            caps, off, index = int(clip) * np.asarray(sizes, np.int64), None, 0
        else:  # one stage of a staged schedule (sampling._segments)
            index, caps, off = stage
            self.quotas = paced_quotas(caps, weights, 1, T)
        self._live = np.flatnonzero(self.quotas > 0)
        self._q = self.quotas[self._live]
        self._cap_live = caps[self._live]
        # draws of each live cluster before this stage: its documents continue its passes
        self._off = (np.zeros(self._live.size, np.int64) if off is None
                     else np.ascontiguousarray(off[self._live], np.int64))
        self._scale = T / self._q.astype(np.float64)  # key units per draw of each cluster
        self._inv = self._q.astype(np.float64) / T
        # stage i > 0 draws its offsets u from a stream of its own
        self._u = CounterUniforms(seed, TAG_PACED + (index << 32), int(np.asarray(sizes).size))
        super().__init__(docs_by_cluster, sizes, seed, None, clip)

    def fresh(self) -> PacedEngine:
        return PacedEngine(self.docs, self.sizes, self.seed, self._paced_weights, self.clip,
                           self.num_samples, self._stage)

    # ------------------------------------------------------------------ keys
    def _keys(self, li: np.ndarray, j: np.ndarray) -> np.ndarray:
        """int64 keys of draws ``j`` of live clusters ``li`` (local indices)."""
        t = j.astype(np.float64)
        t += self._u(self._live[li], j)
        t *= self._scale[li]
        return t.astype(np.int64)  # truncation: keys are >= 0

    def _count(self, x: np.ndarray | int, li: np.ndarray | None = None) -> np.ndarray:
        """Draws of live clusters ``li`` (default all) with key < x (x per entry or scalar)."""
        if self._use_kernel:
            xs = np.ascontiguousarray(np.asarray(x, np.int64).reshape(-1))
            if li is None:
                a, q, scale, inv = self._live, self._q, self._scale, self._inv
            else:
                a, q, scale, inv = self._live[li], self._q[li], self._scale[li], self._inv[li]
            c = np.empty(a.size, np.int64)
            _kernel.paced_count(self._u._base, a, q, scale, inv, xs, c)
            return c
        if li is None:
            li = np.arange(self._live.size)
        x = np.broadcast_to(np.asarray(x, np.int64), li.shape)
        q = self._q[li]
        c = np.floor(x * self._inv[li]).astype(np.int64)
        np.clip(c, 0, q, out=c)
        # c is within a draw or two of the answer; settle it on exact keys
        sel = np.flatnonzero(c > 0)
        while sel.size:
            sel = sel[self._keys(li[sel], c[sel] - 1) >= x[sel]]
            c[sel] -= 1
            sel = sel[c[sel] > 0]
        sel = np.flatnonzero(c < q)
        while sel.size:
            sel = sel[self._keys(li[sel], c[sel]) < x[sel]]
            c[sel] += 1
            sel = sel[c[sel] < q[sel]]
        return c

    def _locate(self, position: int) -> tuple[np.ndarray, int]:
        """(live counts at ``position``, key x with every remaining draw's key >= x)."""
        p, T, L = int(position), self.num_samples, self._live.size
        if p >= T:
            return self._q.copy(), T + 1
        # Largest x with C(x) = #{keys < x} <= p; C(x) is within about L of x.
        lo, hi = max(0, p - L - 2), min(T + 1, p + L + 3)
        if lo > 0 and int(self._count(lo).sum()) > p:
            lo = 0
        if hi <= T and int(self._count(hi).sum()) <= p:
            hi = T + 1  # every key is <= T, so C(T + 1) = T > p
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int(self._count(mid).sum()) <= p:
                lo = mid
            else:
                hi = mid
        c = self._count(lo)
        ties = self._count(lo + 1) - c  # draws with key == lo, taken in cluster order
        left = p - int(c.sum())
        if left:
            before = np.cumsum(ties) - ties
            c += np.clip(left - before, 0, ties)
        return c, lo

    def counts_at(self, position: int) -> np.ndarray:
        if position == self.pos:
            return self.counts.copy()
        counts = np.zeros(self.K, np.int64)
        counts[self._live] = self._locate(position)[0]
        return counts

    # ----------------------------------------------------------------- state
    def reset(self, position: int, counts: np.ndarray | None) -> None:
        """Jump to ``position``; ``counts``, if given, must be the counts there."""
        c, front = self._locate(position)
        full = np.zeros(self.K, np.int64)
        full[self._live] = c
        if counts is not None and not np.array_equal(np.asarray(counts, np.int64), full):
            raise InputError("state_dict counts are inconsistent with its position and this "
                             "sampler's schedule")
        self.pos, self.counts, self._front = int(position), full, front
        self._blk_start, self._blk_choice = self.pos, np.empty(0, np.uint32)

    def seek(self, position: int) -> None:
        """Jump to ``position`` (either direction) in O(K log K): no replay."""
        self.reset(position, None)

    # --------------------------------------------------------------- drawing
    def _windows(self, c: np.ndarray, front: int, n: int, out: np.ndarray | None = None):
        """The next ``n`` draws from live counts ``c`` (updated in place) and key ``front``.

        Yields, per window of keys [front, front + PACED_WINDOW): ``act`` (live
        clusters with draws there), ``ma`` (their draws), ``j0`` (their counts
        before), ``order`` (the taken draws, as indices into the draws grouped
        by cluster, in schedule order) and the new front. With ``out`` (the
        compiled kernel), the taken draws' documents go to ``out`` in schedule
        order instead, and ``order`` is None.
        """
        margin = 2 * int(np.sqrt(self._live.size)) + 16
        done = 0
        while done < n:
            need = n - done
            x1 = min(front + min(PACED_WINDOW, need + margin), self.num_samples + 1)
            hi = self._count(x1)
            m = hi - c
            act = np.flatnonzero(m)
            ma = m[act]
            j0 = c[act]
            if out is not None:
                taken = np.empty(act.size, np.int64)
                M, last = _kernel.paced_window(
                    self._kctx(), self._live[act], ma, j0, self._off[act], self._u._base,
                    self._scale[act],
                    front, need, out[done:done + min(need, int(ma.sum()))], taken)
                if M <= need:
                    c[:] = hi
                    front = x1
                else:
                    c[act] += taken
                    front += last
                done += min(M, need)
                yield act, ma, j0, None, front
                continue
            M = int(ma.sum())
            li = np.repeat(act, ma)
            j = np.arange(M, dtype=np.int64)
            j -= np.repeat(np.cumsum(ma) - ma - j0, ma)
            keys = self._keys(li, j)
            keys -= front  # in [0, PACED_WINDOW): one stable 16-bit radix sort
            order = np.argsort(keys.astype(np.uint16), kind="stable")
            if M <= need:
                c[:] = hi
                front = x1
            else:
                order = order[:need]
                c[act] += np.bincount(np.repeat(np.arange(act.size), ma)[order],
                                      minlength=act.size)
                front += int(keys[order[-1]])
            done += order.size
            yield act, ma, j0, order, front

    def _room(self, n: int) -> None:
        if self.pos + n > self.num_samples:
            raise RuntimeError("paced: past the end of the schedule")

    def _commit(self, c: np.ndarray, n: int, front: int) -> None:
        """After ``n`` draws: the live clusters' counts ``c``, the position, the front."""
        self.counts[self._live] = c
        self.pos += n
        self._front = front
        self._blk_start, self._blk_choice = self.pos, np.empty(0, np.uint32)

    def advance(self, n: int, gather: bool = True) -> np.ndarray | None:
        """The next ``n`` draws' documents (int64) if ``gather``, else just move on."""
        self._room(n)
        if not gather:
            self.seek(self.pos + n)
            return None
        out = np.empty(n, np.int64)
        c = self.counts[self._live]
        done, front = 0, self._front
        for window in self._windows(c, self._front, n, out if self._use_kernel else None):
            act, ma, j0, order, front = window
            if order is not None:
                vals = self._docs_grouped(self._live[act], ma, j0 + self._off[act])
                out[done:done + order.size] = vals[order]
                done += order.size
        self._commit(c, n, front)
        return out

    def clusters(self, n: int) -> np.ndarray:
        """The clusters (uint32 ids) of the next ``n`` draws, no documents: the order of
        :meth:`advance`, in O(n + K) memory (``docs`` is never read)."""
        self._room(n)
        out = np.empty(n, np.uint32)
        c = self.counts[self._live]
        done, front = 0, self._front
        for window in self._windows(c, self._front, n):
            act, ma, _, order, front = window
            out[done:done + order.size] = self._live[np.repeat(act, ma)[order]]
            done += order.size
        self._commit(c, n, front)
        return out

    # --------------------------------------------------------------- summary
    def capped_events(self, tail: int | None = None, floor: int = 1 << 21
                      ) -> list[tuple[int, int]]:
        """(cluster, position of its last draw) for clusters whose quota is their cap
        (clip * n_k; in a stage, what the earlier stages left).

        In order of position. A cluster's last draw lies within T / q_k + 2 K
        of the end: those in the last ``tail`` positions are read off the
        generated cluster order there; each earlier one costs O(K). The
        default ``tail`` minimises that cost (at least ``floor`` positions).
        """
        T, L = self.num_samples, self._live.size
        capped = self._q == self._cap_live
        if not capped.any():
            return []
        if tail is None:
            # tail reach of each capped cluster's last draw, ascending; covering
            # the first i + 1 of them leaves the others at O(L) each
            reach = np.sort(-(-T // self._q[capped]) + 2 * L + 2)
            cost = np.maximum(reach, floor) + (reach.size - 1 - np.arange(reach.size)) * L
            tail = int(max(reach[int(np.argmin(cost))], floor))
        start = max(0, T - tail)
        c, front = self._locate(start)
        early = np.flatnonzero(capped & (c == self._q))  # last draw before `start`
        found: list[tuple[int, int]] = []
        pos = start
        for act, ma, j0, order, _ in self._windows(c, front, T - start):
            g = np.repeat(np.arange(act.size), ma)[order]  # position -> index into act
            j = j0[g] + (order - (np.cumsum(ma) - ma)[g])
            li = act[g]
            last = np.flatnonzero((j == self._q[li] - 1) & capped[li])
            found.extend(zip((pos + last).tolist(), li[last].tolist(), strict=True))
            pos += order.size
        if early.size:
            lastkey = self._keys(early, self._q[early] - 1)
            allk = np.arange(L)
            rows = max(1, (1 << 20) // L)
            for s in range(0, early.size, rows):
                cc = early[s:s + rows]
                # draws of k' before the last of k: keys < its key, or == it if k' < k
                x = lastkey[s:s + rows, None] + (allk[None, :] < cc[:, None])
                cnt = self._count(x.ravel(), np.tile(allk, cc.size)).reshape(cc.size, L)
                cnt[np.arange(cc.size), cc] = self._q[cc] - 1
                found.extend(zip(cnt.sum(axis=1).tolist(), cc.tolist(), strict=True))
        found.sort()
        return [(int(self._live[li]), p) for p, li in found]
