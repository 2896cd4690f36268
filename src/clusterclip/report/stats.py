"""Statistics of a corpus's clusters and of a training schedule (pure numpy).

A schedule can hold 10^8 samples, so it is consumed in blocks
(:class:`ScheduleStats`): each block costs a few ``np.bincount`` calls and
nothing is kept per sample. Everything here takes arrays and returns arrays or
plain dicts; files and plots live elsewhere in the package.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from clusterclip.labels import cluster_sizes  # noqa: F401 - this module's since the start
from clusterclip.sampling.clip import DEFAULT_TAIL_FLOOR as STARVE_FRACTION
from clusterclip.sampling.clip import LATE_TENTHS, late_start, quartile_clusters
from clusterclip.storage.arrays import release_pages

TENTHS = 10  # the quartile-share table splits training time into tenths
CHUNK = 1 << 20  # documents per pass where a per-document temporary would otherwise be N long
#: Per-document counts of a schedule (repetition, coverage, tokens) are exact up to this
#: many documents; above, they are kept for a systematic sample of at most this many
#: (every s-th document), so they cost bounded memory whatever N (the figures and tables
#: then say so).
DOC_SAMPLE = 1 << 22
#: labels looked up at random between two releases of a memory map's pages (above
#: DOC_SAMPLE documents): at most this many pages of the labels file stay resident
LOOKUP = 1 << 16
#: the stream of ``random``'s per-epoch cluster counts when drawn without documents
#: (:func:`epoch_draws`)
EPOCH_DRAWS_TAG = 0x65706F6368


def doc_stride(num_docs: int, limit: int | None = None) -> int:
    """1 (every document counted) when ``num_docs`` <= ``limit`` (default
    :data:`DOC_SAMPLE`), else the stride s of the systematic sample of documents 0, s, 2s,
    ... (at most ``limit`` of them) whose per-document counts a schedule keeps."""
    limit = DOC_SAMPLE if limit is None else int(limit)
    return 1 if num_docs <= limit else -(-int(num_docs) // limit)


def strided(values: np.ndarray, stride: int) -> np.ndarray:
    """``values[::stride]`` (as is for 1), read a chunk at a time: a memory map's pages are
    released after each chunk, so about one chunk of the file is resident."""
    if stride == 1:
        return values
    step = CHUNK * int(stride)
    parts = []
    for start in range(0, len(values), step):
        parts.append(np.asarray(values[start:start + step:stride]))
        release_pages(values, start, start + step)
    return np.concatenate(parts)


def pass_histogram(counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """int64[M+1]: entry r = documents drawn exactly r times, when unit k's ``sizes[k]``
    documents are drawn ``counts[k]`` times in passes (each pass every document of the
    unit once, in some order): q = c // n passes done, and r = c mod n documents of the
    current pass one time more, so (n - r) documents are seen q times and r, q + 1 times.
    Exact for the cluster strategies (units: clusters) and ``random`` (one unit: the
    eligible documents, in epochs), whatever the order inside a pass."""
    counts = np.asarray(counts, np.int64)
    sizes = np.asarray(sizes, np.int64)
    live = sizes > 0
    q, r = np.divmod(counts[live], sizes[live])
    hist = np.zeros(int(q.max(initial=0)) + 2, np.int64)
    np.add.at(hist, q, sizes[live] - r)
    np.add.at(hist, q + 1, r)
    return hist[:-1] if hist[-1] == 0 else hist


def pass_tokens(counts: np.ndarray, sizes: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """float64[K]: tokens of ``counts`` draws per cluster drawn in passes (see
    :func:`pass_histogram`), from each cluster's ``tokens`` (its documents' sum): its
    full passes exactly, the current pass's r documents at the cluster's mean (an
    estimate: which r documents depends on the pass's order)."""
    counts = np.asarray(counts, np.float64)
    sizes = np.asarray(sizes, np.float64)
    return np.divide(counts * np.asarray(tokens, np.float64), sizes,
                     out=np.zeros(sizes.size), where=sizes > 0)


def size_profile(sizes: np.ndarray, head_fraction: float = 0.10,
                 tail_fraction: float = 0.50) -> dict[str, Any]:
    """How skewed the clusters are.

    ``sizes`` int[K]. Returns clusters (non-empty), empty_clusters, documents,
    min/median/max size, head_share (share of documents in the largest
    ``head_fraction`` of non-empty clusters), tail_share (share in the smallest
    ``tail_fraction``), and the imbalance ratio max/min.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    live = np.sort(sizes[sizes > 0])[::-1]
    total = int(live.sum())
    k = int(live.size)
    n_head = max(1, math.ceil(head_fraction * k)) if k else 0
    n_tail = max(1, math.ceil(tail_fraction * k)) if k else 0
    return {
        "clusters": k,
        "empty_clusters": int(sizes.size - k),
        "documents": total,
        "min_size": int(live[-1]) if k else 0,
        "median_size": float(np.median(live)) if k else 0.0,
        "max_size": int(live[0]) if k else 0,
        "head_fraction": head_fraction,
        "head_clusters": n_head,
        "head_share": float(live[:n_head].sum() / total) if total else 0.0,
        "tail_fraction": tail_fraction,
        "tail_clusters": n_tail,
        "tail_share": float(live[k - n_tail:].sum() / total) if total else 0.0,
        "imbalance": float(live[0] / live[-1]) if k else 0.0,
    }


def window_edges(total: int, windows: int) -> np.ndarray:
    """Integer edges (int64[W+1]) that split positions 0..total-1 into W near-equal windows.

    W is ``min(windows, total)`` so that no window is empty.
    """
    w = max(1, min(int(windows), int(total)))
    return (np.arange(w + 1, dtype=np.int64) * int(total)) // w


def repetition_bins(max_repetition: int) -> list[tuple[int, int]]:
    """Inclusive ranges of "times seen" for the repetition figure.

    0..10 one by one, then 1-2-5 steps (11-20, 21-50, 51-100, ...), so that a
    schedule repeating a document 800 times still fits in a readable figure.
    """
    bins = [(r, r) for r in range(min(max_repetition, 10) + 1)]
    lo, steps = 11, (2, 5, 10)
    scale = 10
    while lo <= max_repetition:
        for f in steps:
            hi = f * scale
            if hi >= lo:
                bins.append((lo, hi))
                lo = hi + 1
            if lo > max_repetition:
                break
        scale *= 10
    return bins


class ScheduleStats:
    """Streaming statistics of one schedule of document indices.

    ``labels`` int[N] (cluster per document, -1 excluded), ``num_clusters`` K,
    ``total`` the schedule's length T (known up front, from the file or the
    sampler), ``windows`` how many windows to split training time into.
    Feed blocks of int64 document indices in order with :meth:`update`; each
    block must stay inside 0..N-1 (checked, see ``source``).

    ``stride`` s: per-document counts are kept for documents 0, s, 2s, ... only (1: every
    document; see :func:`doc_stride`); labels are read per block, never copied.

    ``passes`` (no per-document counts; feed clusters with :meth:`update_clusters` or
    :meth:`add_counts`): "cluster" when each cluster's documents are drawn in passes
    (the cluster strategies), "corpus" when the eligible documents are drawn in epochs
    (``random``); the repetition histogram then follows exactly from the draws per
    cluster (:func:`pass_histogram`), and nothing is kept per document.

    Accumulated (memory O(N / s + K * W), independent of T):
      - ``doc_counts`` int32[ceil(N / s)] (int64 when T >= 2^31): times each document
        (each s-th document) appears;
      - ``window_counts`` int64[W, K]: samples of each cluster per window;
      - ``tenth_counts`` int64[10, K]: samples of each cluster per tenth of the
        schedule (edges ``tenth_edges``; fewer rows when T < 10);
      - ``excluded`` int: samples of documents labelled -1.
    """

    def __init__(self, labels: np.ndarray, num_clusters: int, total: int,
                 windows: int = 50, stride: int = 1, passes: str | None = None) -> None:
        self._labels = labels  # read per block (a memory map stays one)
        self.num_docs = int(labels.shape[0])
        self.passes = passes
        self.num_clusters = int(num_clusters)
        self.total = int(total)
        self.edges = window_edges(self.total, windows)
        self.stride = int(stride)
        # int32 while no document can be drawn 2^31 times (4 bytes per document, not 8).
        self.doc_counts = np.zeros(0 if passes else -(-self.num_docs // self.stride),
                                   dtype=np.int32 if self.total < 2**31 else np.int64)
        self.window_counts = np.zeros((self.edges.size - 1, self.num_clusters), dtype=np.int64)
        self.tenth_edges = window_edges(self.total, TENTHS)
        self.tenth_counts = np.zeros((self.tenth_edges.size - 1, self.num_clusters),
                                     dtype=np.int64)
        self.excluded = 0
        self.position = 0

    def update(self, block: np.ndarray) -> None:
        """Add the next ``block`` (int[b]) of the schedule.

        Raises ValueError naming the global position of the first index outside
        0..N-1, or if more than ``total`` samples arrive.
        """
        block = np.asarray(block)
        if block.size == 0:
            return
        if block.ndim != 1 or not np.issubdtype(block.dtype, np.integer):
            raise ValueError(f"schedule blocks must be 1-D integer arrays, got {block.dtype}"
                             f"{list(block.shape)}")
        start = self.position
        if start + block.size > self.total:
            raise ValueError(f"schedule is longer than the declared {self.total} samples")
        bad = (block < 0) | (block >= self.num_docs)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"position {start + i}: document index {int(block[i])} is outside "
                             f"0..{self.num_docs - 1}")
        if self.stride == 1:
            self.doc_counts += np.bincount(block, minlength=self.num_docs)
        else:
            hit = block[block % self.stride == 0] // self.stride
            self.doc_counts += np.bincount(hit, minlength=self.doc_counts.size)
        # Excluded documents (-1) map to an extra bin K, so one bincount per window counts
        # them too.
        lab = np.asarray(self._labels[block]) if self.stride == 1 else self._lookup(block)
        lab = np.where(lab < 0, self.num_clusters, lab)
        self.excluded += self._add_windowed(self.window_counts, self.edges, lab, start)
        self._add_windowed(self.tenth_counts, self.tenth_edges, lab, start)
        self.position += block.size

    def _lookup(self, block: np.ndarray) -> np.ndarray:
        """``labels[block]`` for a large (memory-mapped) corpus: LOOKUP indices at a time,
        the map's pages released after each, so at most LOOKUP pages stay resident."""
        lab = np.empty(block.size, self._labels.dtype)
        for i in range(0, block.size, LOOKUP):
            lab[i:i + LOOKUP] = self._labels[block[i:i + LOOKUP]]
            release_pages(self._labels)
        return lab

    def update_clusters(self, block: np.ndarray) -> None:
        """Add the next ``block`` of the schedule given by its draws' clusters (int ids in
        0..K-1; a schedule without per-document counts, see ``passes``)."""
        block = np.asarray(block)
        start = self.position
        if start + block.size > self.total:
            raise ValueError(f"schedule is longer than the declared {self.total} samples")
        self._add_windowed(self.window_counts, self.edges, block, start)
        self._add_windowed(self.tenth_counts, self.tenth_edges, block, start)
        self.position += block.size

    def add_counts(self, length: int, counts: np.ndarray) -> None:
        """Add the next ``length`` positions, inside one window and one tenth, given by
        their draws per cluster ``counts`` (int[K], summing to ``length``)."""
        start = self.position
        w = int(np.searchsorted(self.edges, start, side="right")) - 1
        t = int(np.searchsorted(self.tenth_edges, start, side="right")) - 1
        if start + length > min(self.edges[w + 1], self.tenth_edges[t + 1]) \
                or int(np.sum(counts)) != length:
            raise ValueError("add_counts: positions across a window or tenth, or counts "
                             "that do not sum to their length")
        self.window_counts[w] += counts
        self.tenth_counts[t] += counts
        self.position += int(length)

    def _add_windowed(self, counts: np.ndarray, edges: np.ndarray, lab: np.ndarray,
                      start: int) -> int:
        """Add a block's bins (``lab``, from position ``start``) to ``counts`` split at ``edges``.

        Returns the block's samples of excluded documents.
        """
        first = int(np.searchsorted(edges, start, side="right")) - 1
        last = int(np.searchsorted(edges, start + lab.size - 1, side="right")) - 1
        excluded = 0
        for w in range(first, last + 1):
            lo = max(int(edges[w]), start) - start
            hi = min(int(edges[w + 1]), start + lab.size) - start
            c = np.bincount(lab[lo:hi], minlength=self.num_clusters + 1)
            excluded += int(c[-1])
            counts[w] += c[:-1]
        return excluded

    def consume(self, blocks: Iterable[np.ndarray]) -> ScheduleStats:
        """Feed every block of ``blocks``; return self."""
        for b in blocks:
            self.update(b)
        return self

    # -- results -----------------------------------------------------------
    def check_complete(self) -> None:
        if self.position != self.total:
            raise ValueError(f"schedule ended after {self.position} of {self.total} samples")

    @property
    def cluster_counts(self) -> np.ndarray:
        """int64[K]: samples of each cluster over the whole schedule."""
        return self.window_counts.sum(axis=0)

    @property
    def sampled(self) -> bool:
        """Whether ``doc_counts`` counts every ``stride``-th document only (never with
        ``passes``: the repetition then counts every document, exactly)."""
        return self.stride > 1 and not self.passes

    def tracked(self, values: np.ndarray) -> np.ndarray:
        """A per-document array (bool mask, labels, tokens) restricted to the documents
        ``doc_counts`` counts (``values`` already restricted, of that length, as is)."""
        if self.stride == 1 or len(values) == self.doc_counts.size:
            return values
        return strided(values, self.stride)

    def repetition_histogram(self, eligible: np.ndarray | None = None,
                             sizes: np.ndarray | None = None) -> np.ndarray:
        """int64[M+1]: entry r = number of (eligible, tracked) documents seen exactly r
        times (with ``passes``: of the eligible documents, ``sizes`` int[K] per cluster,
        from the draws per cluster)."""
        if self.passes == "cluster":
            return pass_histogram(self.cluster_counts, sizes)
        if self.passes == "corpus":
            return pass_histogram([self.total - self.excluded], [int(np.sum(sizes))])
        counts = self.doc_counts if eligible is None else self.doc_counts[self.tracked(eligible)]
        return np.bincount(counts) if counts.size else np.zeros(1, np.int64)

    def clusters_in_pool(self, sizes: np.ndarray, clip: float) -> np.ndarray:
        """int64[W]: clusters still in the pool at the start of each window.

        Derived from the data with ClusterClip's rule, so it works for any
        schedule: a non-empty cluster k is out once the schedule has drawn
        ``clip * n_k`` samples from it (all its documents ``clip`` times).
        ``clip = inf`` counts every non-empty cluster (no clipping). Non-increasing.
        """
        sizes = np.asarray(sizes)
        before = np.cumsum(self.window_counts, axis=0) - self.window_counts
        in_pool = (before < clip * sizes[None, :]) & (sizes > 0)[None, :]
        return in_pool.sum(axis=1).astype(np.int64)

    def group_share_per_window(self, cluster_ids: np.ndarray) -> np.ndarray:
        """float64[W]: share of each window's samples that fall in ``cluster_ids``."""
        per_window = self.window_counts.sum(axis=1)
        group = self.window_counts[:, np.asarray(cluster_ids, dtype=np.int64)].sum(axis=1)
        return np.divide(group, per_window, out=np.zeros(per_window.size), where=per_window > 0)


def epoch_draws(stats: ScheduleStats, sizes: np.ndarray, seed: int) -> None:
    """Feed ``stats`` (``passes="corpus"``) a ``random`` schedule's draws per cluster
    without its documents: epochs of the eligible documents (``sizes`` int[K] per
    cluster), each cut at the windows' and tenths' edges into parts whose cluster
    counts are drawn (seeded by ``seed``) from their exact distribution, multivariate
    hypergeometric over what the epoch has left; whole epochs inside a part add
    ``sizes``. A schedule with the sampler's distribution, not its order (which needs a
    permutation of every eligible document); memory O(K x parts)."""
    sizes = np.asarray(sizes, np.int64)
    ne, total = int(sizes.sum()), stats.total
    rng = np.random.default_rng([int(seed), EPOCH_DRAWS_TAG])
    left, pos = sizes.copy(), 0
    for stop in np.union1d(stats.edges, stats.tenth_edges)[1:].tolist():
        part = np.zeros(sizes.size, np.int64)
        start = pos
        while pos < stop:
            if pos % ne == 0 and stop - pos >= ne:  # whole epochs
                m = (stop - pos) // ne
                part += m * sizes
                pos += m * ne
                continue
            take = min(stop, (pos // ne + 1) * ne) - pos
            got = rng.multivariate_hypergeometric(left, take, method="marginals")
            left -= got
            part += got
            pos += take
            if pos % ne == 0:
                left = sizes.copy()
        stats.add_counts(stop - start, np.pad(part, (0, stats.num_clusters - part.size)))
    assert pos == total


def draw_clusters(stats: ScheduleStats, sizes: np.ndarray, options: dict[str, Any],
                  seed: int, wrap: Callable[[Iterable[np.ndarray]], Iterable[np.ndarray]]
                  | None = None) -> tuple[list[list[int]], list[dict[str, Any]] | None]:
    """Feed ``stats`` (``passes``: "cluster", or "corpus" for ``random``) the sampler's
    schedule for ``options`` (:func:`~clusterclip.sampling.spec.strategy_options`'s
    keyword arguments, a mixture's too) and ``seed`` over clusters of ``sizes`` int[K],
    from its clusters alone (:class:`~clusterclip.sampling.sampler.ClusterDraws`;
    ``random``: :func:`epoch_draws`): memory O(K + a block), whatever N. ``wrap``: a
    progress wrapper of the blocks. Returns the sampler's ``clip_events`` and ``stages``
    (see :meth:`~clusterclip.sampling.sampler.ClusterDraws.events`)."""
    if options.get("strategy") == "random":
        epoch_draws(stats, sizes, seed)
        return [], None
    from clusterclip.sampling.sampler import ClusterDraws

    # K as the sampler's labels give it (up to the largest cluster with documents)
    top = int(np.flatnonzero(np.asarray(sizes))[-1]) + 1
    draws = ClusterDraws(np.asarray(sizes)[:top], stats.total, seed=seed, **options)
    blocks = draws.blocks(CHUNK)
    for b in (blocks if wrap is None else wrap(blocks)):
        stats.update_clusters(b)
    return draws.events()


def schedule_summary(stats: ScheduleStats, sizes: np.ndarray, eligible: np.ndarray,
                     clip: float = np.inf) -> dict[str, Any]:
    """JSON-ready summary of one schedule.

    ``sizes`` int64[K] cluster sizes, ``eligible`` bool[N] documents that may
    be sampled (label >= 0; or only the tracked ones, bool[ceil(N / s)], when ``stats``
    counts every s-th document; unused with ``stats.passes``), ``clip`` the R for the
    pool series (see :meth:`ScheduleStats.clusters_in_pool`; inf: nothing leaves).
    Keys: samples, excluded_samples,
    unique_documents, coverage (share of eligible documents seen at least
    once), max_repetition, epochs_equivalent (T / eligible N),
    repetition_histogram (list, entry r = documents seen r times),
    tail_quartile_share / head_quartile_share (share of samples from the
    smallest / largest 25% of clusters), cluster_share_min/max, and the
    per-window series window_end, clusters_in_pool, tail_quartile_share_per_window,
    head_quartile_share_per_window.

    When ``stats`` counts every s-th document only (``stats.stride`` > 1), the repetition
    histogram, max_repetition and coverage are the sample's eligible documents',
    unique_documents is coverage x eligible documents, and ``repetition_sample`` says
    how many documents the histogram counts (the key is absent when it counts all).
    """
    stats.check_complete()
    hist = stats.repetition_histogram(eligible, sizes)
    n_eligible = int(np.sum(sizes))
    counted = int(stats.tracked(eligible).sum()) if stats.sampled else n_eligible
    tail, head = quartile_clusters(sizes)
    counts = stats.cluster_counts
    total = stats.total
    live = sizes > 0
    share = counts / total if total else np.zeros(counts.size)
    coverage = float((counted - hist[0]) / counted) if counted else 0.0
    sampled = {"repetition_sample": counted} if stats.sampled else {}
    return {
        **sampled,
        "samples": total,
        "excluded_samples": int(stats.excluded),
        "unique_documents": int(round(coverage * n_eligible)) if stats.sampled
        else int(n_eligible - hist[0]),
        "coverage": coverage,
        "max_repetition": int(hist.size - 1),
        "epochs_equivalent": float(total / n_eligible) if n_eligible else 0.0,
        "repetition_histogram": [int(x) for x in hist],
        "tail_quartile_share": float(counts[tail].sum() / total) if total else 0.0,
        "head_quartile_share": float(counts[head].sum() / total) if total else 0.0,
        "cluster_share_min": float(share[live].min()) if live.any() else 0.0,
        "cluster_share_max": float(share[live].max()) if live.any() else 0.0,
        "clusters_never_sampled": int((live & (counts == 0)).sum()),
        "window_end": [int(x) for x in stats.edges[1:]],
        "clusters_in_pool": [int(x) for x in stats.clusters_in_pool(sizes, clip)],
        "tail_quartile_share_per_window": [float(x) for x in stats.group_share_per_window(tail)],
        "head_quartile_share_per_window": [float(x) for x in stats.group_share_per_window(head)],
        **quartile_shares_per_tenth(stats.tenth_counts, stats.tenth_edges, tail, head),
    }


def _group_shares(counts: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> np.ndarray:
    group = counts[:, ids].sum(axis=1)
    return np.divide(group, lengths, out=np.zeros(lengths.size), where=lengths > 0)


def quartile_shares_per_tenth(tenth_counts: np.ndarray, tenth_edges: np.ndarray,
                              tail: np.ndarray, head: np.ndarray) -> dict[str, Any]:
    """The smallest / largest quartile's share of each tenth of the schedule, and of its end.

    ``tenth_counts`` int[P, K] samples per cluster in each of the P (10, or T when
    T < 10) parts split at ``tenth_edges`` int[P+1]; ``tail``/``head`` cluster ids.
    A part's share is the group's samples over the part's length (samples of
    excluded documents count in the length). ``*_late`` is the share over the
    last ``LATE_TENTHS`` parts: positions ``tenth_edges[-3]`` to T.
    """
    lengths = np.diff(tenth_edges)
    late = slice(max(0, lengths.size - LATE_TENTHS), None)
    assert tenth_edges[late.start] == late_start(int(tenth_edges[-1]))
    late_len = np.array([lengths[late].sum()])
    late_counts = tenth_counts[late].sum(axis=0, keepdims=True)
    return {
        "tenth_end": [int(x) for x in tenth_edges[1:]],
        "tail_quartile_share_per_tenth": [float(x) for x in
                                          _group_shares(tenth_counts, lengths, tail)],
        "head_quartile_share_per_tenth": [float(x) for x in
                                          _group_shares(tenth_counts, lengths, head)],
        "late_start": int(tenth_edges[late.start]),
        "tail_quartile_share_late": float(_group_shares(late_counts, late_len, tail)[0]),
        "head_quartile_share_late": float(_group_shares(late_counts, late_len, head)[0]),
    }


def tail_starvation(schedules: dict[str, dict[str, Any]], corpus_tail_share: float,
                    fraction: float = STARVE_FRACTION) -> dict[str, Any]:
    """Which schedules starve the smallest quartile of clusters late in training.

    ``schedules`` name -> summary with ``tail_quartile_share_late`` (see
    :func:`quartile_shares_per_tenth`). A schedule starves the tail when that
    share is strictly below ``fraction * corpus_tail_share``. Returns threshold,
    fraction, starving (names, in order; a schedule with a ``source`` is named by
    it), fed (the others), and sentence: one
    plain sentence for the report, computed from these numbers.
    """
    threshold = fraction * corpus_tail_share
    # A given schedule file is named by its file (e.g. schedule.npy), a generated one by its
    # strategy.
    late = {s.get("source", name): s["tail_quartile_share_late"] for name, s in schedules.items()}
    starving = [name for name, v in late.items() if v < threshold]
    fed = [name for name in late if name not in starving]
    rule = (f"a schedule starves the tail when this share is under {fraction:g} x the "
            f"quartile's share of the corpus, {fraction:g} x {_pct(corpus_tail_share)} = "
            f"{_pct(threshold)}")
    if not starving:
        lowest = min(late, key=lambda n: late[n])
        sentence = (f"No strategy starves the tail: the smallest quartile of clusters gets at "
                    f"least {_pct(threshold)} of the last {LATE_TENTHS * 10}% of every "
                    f"schedule (lowest: {lowest}, {_pct(late[lowest])}; {rule}).")
    else:
        first, *others = starving
        sentence = (f"{first}: the smallest quartile of clusters gets {_pct(late[first])} of "
                    f"the last {LATE_TENTHS * 10}% of the schedule"
                    + "".join(f", {name} {_pct(late[name])}" for name in others))
        if fed:
            sentence += "; " + ", ".join(
                f"{name} {'keeps it at' if i == 0 else 'at'} {_pct(late[name])}"
                for i, name in enumerate(fed))
        else:
            sentence += "; every strategy in this report starves it"
        sentence += f" ({rule})."
    return {"fraction": fraction, "threshold": threshold, "late_fraction": LATE_TENTHS / 10,
            "starving": starving, "fed": fed, "sentence": sentence}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def cluster_tokens(doc_counts: np.ndarray, labels: np.ndarray, doc_tokens: np.ndarray,
                   num_clusters: int) -> np.ndarray:
    """float64[K]: tokens each cluster gets when document i is drawn ``doc_counts[i]`` times
    (a schedule's counts, or ones for the corpus itself). Summed a chunk at a time: the
    sums are of integers, exact in float64 below 2^53 tokens, so chunking changes nothing."""
    out = np.zeros(num_clusters, dtype=np.float64)
    for start in range(0, len(labels), CHUNK):  # float64 temporaries of one chunk, not N
        lab = np.asarray(labels[start:start + CHUNK])
        keep = lab >= 0
        weight = np.asarray(doc_counts[start:start + CHUNK], dtype=np.float64)[keep] * \
            np.asarray(doc_tokens[start:start + CHUNK], dtype=np.float64)[keep]
        out += np.bincount(lab[keep], weights=weight, minlength=num_clusters)
    return out


def token_shares(per_cluster: np.ndarray, sizes: np.ndarray,
                 groups: dict[str, np.ndarray]) -> dict[str, Any]:
    """How text splits in *tokens* rather than documents, from per-cluster tokens.

    Returns ``tokens`` (the total, repeats counted), ``<name>_token_share`` for each
    group of cluster ids, and ``cluster_token_share_min``/``max`` over non-empty
    clusters. A training budget is counted in tokens, so a schedule balanced by
    documents can still be unbalanced in text when clusters differ in document length.
    """
    total = float(per_cluster.sum())
    share = per_cluster / total if total else np.zeros(per_cluster.size)
    live = np.asarray(sizes) > 0
    out: dict[str, Any] = {"tokens": int(round(total))}
    for name, ids in groups.items():
        out[f"{name}_token_share"] = float(share[ids].sum())
    out["cluster_token_share_min"] = float(share[live].min()) if live.any() else 0.0
    out["cluster_token_share_max"] = float(share[live].max()) if live.any() else 0.0
    return out
