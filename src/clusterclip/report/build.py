"""Assemble the report from a work directory: read, compute, plot, write ``W/report/``.

This is the edge of the report package: it reads the work directory's files (the paths
the report stage hands it, :class:`Sources`: the layout is said in
:mod:`clusterclip.workdir` only), generates comparison schedules with the sampler, and
writes everything into a temporary directory that replaces ``W/report/`` only when
complete.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.labels import check_labels
from clusterclip.limits import (
    MAX_ALPHA,
    MAX_CLIP,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_THREADS,
    check_ranges,
    ranged,
)
from clusterclip.pool import in_background
from clusterclip.report.page import verdict_text
from clusterclip.report.projection import DEFAULT_MAP_SAMPLE
from clusterclip.report.readable import FILE as CLUSTERS_MD
from clusterclip.report.readable import (
    csv_columns,
    csv_line,
    readable_clusters,
    render_clusters_md,
)
from clusterclip.report.reading import report_workers
from clusterclip.report.stats import (
    CHUNK,
    DOC_SAMPLE,
    ScheduleStats,
    cluster_sizes,
    cluster_tokens,
    doc_stride,
    draw_clusters,
    pass_tokens,
    quartile_shares_per_tenth,
    schedule_summary,
    size_profile,
    strided,
    tail_starvation,
    token_shares,
)
from clusterclip.sampling.clip import DEFAULT_TAIL_FLOOR, choose_clip, default_clips
from clusterclip.sampling.clip import quartile_clusters as _quartiles
from clusterclip.sampling.spec import (
    CLIP_STRATEGIES,
    DEFAULT_CLIP,
    DEFAULT_STRATEGIES,
    STRATEGIES,
    strategy_options,
)
from clusterclip.storage.arrays import load_npy, release_pages

#: The strategy name of the schedule drawn from ``W/search/mixture.json`` (its weights,
#: timing and clip); shown by default whenever that file exists.
MIXTURE = "mixture"
DEFAULT_EPOCHS = 3
EXAMPLE_CLUSTERS = 3  # largest and smallest clusters shown with their documents
EXAMPLE_DOCS = 3
EXAMPLE_CHARS = 200
# Generate measured columns for the choose-R table only while it stays cheap.
MEASURE_SAMPLE_LIMIT = 20_000_000
PAGE = "index.html"
FIGURES = {"sizes": "cluster_sizes.png", "share": "schedule_share.png",
           "repetition": "repetition.png", "mixture": "mixture.png",
           "choose_clip": "choose_clip.png"}
#: What ``report`` writes in its folder (a file of the user's there is refused before any
#: work).
WRITES = ("summary.json", "report.md", "clusters.csv", CLUSTERS_MD, PAGE, *FIGURES.values())


# -- reading the work directory ---------------------------------------------------------
@dataclass(frozen=True)
class Sources:
    """The files of a work directory that the report reads, as the report stage
    (:func:`clusterclip.stages.report.run`) finds them in its layout.

    ``root``: the work directory (named in the command that runs the experiment);
    ``map``: the map's folder (read with :func:`~clusterclip.report.projection.load_map`);
    ``labels``, ``centroids``, ``scores``: the clustering's arrays; ``corpus``: the corpus
    index folder; ``mixture``: the search's mixture file; ``experiment_results`` and
    ``search_results``: the verdicts' markdown files. Any but ``root`` and ``labels``
    may be missing.
    """

    root: Path
    map: Path
    labels: Path
    centroids: Path
    scores: Path
    corpus: Path
    mixture: Path
    experiment_results: Path
    search_results: Path


def _load_array(path: Path, what: str, required: bool = True) -> np.ndarray | None:
    if not path.exists():
        if required:
            raise InputError(f"{path}: missing ({what}); run the earlier stages first")
        return None
    return load_npy(path, what, mmap=True)


def load_labels(path: Path, centroids_path: Path) -> tuple[np.ndarray, int]:
    """The labels at ``path`` (``W/labels.npy``) checked (1-D integers >= -1, as int32
    where the ids fit) and the number of clusters K.

    K comes from the centroids at ``centroids_path`` (``W/centroids.npy``) when present
    (so empty clusters count), else from the largest label.
    """
    labels = check_labels(_load_array(path, "labels"), path)
    k = int(labels.max()) + 1
    # Memory-mapped when the file holds int32 (4 bytes per document, page cache), else a
    # narrowed copy: int32 holds every cluster id below 2^31.
    labels = np.asarray(labels, dtype=np.int32 if k < 2**31 else np.int64)
    centroids = _load_array(centroids_path, "centroids", required=False)
    if centroids is not None:
        if centroids.ndim != 2 or centroids.shape[0] < k:
            raise InputError(f"{centroids_path}: shape {list(centroids.shape)} does not "
                             f"cover the {k} clusters of {path.name}")
        k = int(centroids.shape[0])
    return labels, k


def load_schedule(path: Path) -> np.ndarray:
    """A schedule file: 1-D integer ``.npy`` (memory-mapped; range checked while streaming)."""
    if not path.exists():
        raise InputError(f"{path}: schedule file does not exist")
    sched = load_npy(path, "schedule (document indices)", kinds="iu", ndim=1, mmap=True)
    if sched.size == 0:
        raise InputError(f"{path}: empty schedule")
    return sched


def _blocks_of(array: np.ndarray, block: int) -> Iterator[np.ndarray]:
    for start in range(0, array.shape[0], block):
        yield np.asarray(array[start:start + block], dtype=np.int64)
        release_pages(array, start, start + block)  # a memory map: one block resident


def _block_size(num_docs: int) -> int:
    # Each block costs one bincount of length N (of the tracked documents above DOC_SAMPLE),
    # so blocks of at least that many samples keep it amortised to O(1) per sample.
    return max(1 << 20, min(num_docs, DOC_SAMPLE))


# -- generated schedules ---------------------------------------------------------------
def _sampler(labels: np.ndarray, strategy: str, num_samples: int, clip: int, alpha: float,
             seed: int):
    from clusterclip.sampling import make_sampler

    return make_sampler(labels, num_samples, seed=seed,
                        **strategy_options(strategy, clip=clip, alpha=alpha))


def _progress(iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm import tqdm

    def gen():
        with tqdm(total=total, desc=desc, unit="sample", unit_scale=True, leave=False) as bar:
            for b in iterable:
                yield b
                bar.update(len(b))
    return gen()


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def _round_floats(obj: Any, digits: int = 6) -> Any:
    """Floats to ``digits`` significant digits: readable JSON, stable across platforms."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round_floats(v, digits) for v in obj]
    return obj


def _clip_events(stats: ScheduleStats, sizes: np.ndarray, clip: int) -> dict[str, Any]:
    """Clusters that reached R x n_k samples, with the window bounds where that happened."""
    cum = np.cumsum(stats.window_counts, axis=0)
    done = cum >= clip * sizes[None, :]
    live = sizes > 0
    clipped = done[-1] & live
    if not clipped.any():
        return {"clusters_clipped": 0}
    first_window = np.argmax(done[:, clipped], axis=0)
    ends = stats.edges[1:]
    return {"clusters_clipped": int(clipped.sum()),
            "first": int(ends[first_window.min()]), "last": int(ends[first_window.max()]),
            "resolution": "window end"}


def _sampler_clip_events(summary: dict[str, Any]) -> dict[str, Any] | None:
    """First/last clip position from the sampler's summary (``clip_events``: [[k, p], ...])."""
    positions = [int(p) for _, p in summary["clip_events"]]
    if not positions:
        return None
    return {"clusters_clipped": len(positions), "first": min(positions),
            "last": max(positions), "resolution": "exact (sampler)"}


# -- the report ------------------------------------------------------------------------
def _load_scores(src: Sources, labels: np.ndarray) -> np.ndarray | None:
    scores = _load_array(src.scores, "scores", required=False)
    if scores is not None and scores.shape != labels.shape:
        raise InputError(f"{src.scores}: shape {list(scores.shape)} does not match "
                         f"{src.labels.name} {list(labels.shape)}")
    return scores


def _examples(readable: dict[str, Any], scores: np.ndarray | None, sizes: np.ndarray,
              corpus, majority: dict[int, str] | None) -> list[dict[str, Any]] | None:
    """The largest and smallest clusters with their nearest documents (from ``readable``)."""
    if scores is None or corpus is None:
        return None
    nonempty = np.flatnonzero(sizes > 0)
    by_size = nonempty[np.lexsort((nonempty, -sizes[nonempty]))]  # largest first, then id
    m = min(EXAMPLE_CLUSTERS, by_size.size)
    chosen = [(int(k), "largest") for k in by_size[:m]]
    chosen += [(int(k), "smallest") for k in by_size[::-1][:m] if int(k) not in
               {c for c, _ in chosen}]
    out = []
    for k, group in chosen:
        docs = [{"index": int(i), "score": float(scores[i]),
                 "text": readable["snippets"].get(int(i), "")[:EXAMPLE_CHARS]}
                for i in readable["nearest"][k][:EXAMPLE_DOCS]]
        ex = {"label": k, "group": group, "size": int(sizes[k]), "documents": docs,
              "terms": readable["terms"][k]}
        if majority is not None:
            ex["majority_label"] = majority.get(k)
        out.append(ex)
    return out


def _label_agreement(codes: np.ndarray, values: list[str], labels: np.ndarray, field: str
                     ) -> tuple[dict[str, Any], dict[int, str]]:
    """NMI, ARI and purity of the clusters against ``field``, whose value of every document
    is ``values[codes[i]]`` (-1: missing; :meth:`~clusterclip.corpus.Corpus.field_codes`),
    and each cluster's majority value."""
    from clusterclip.report.metrics import table_agreement

    k = int(labels.max()) + 1
    # Documents per (cluster, value), counted a chunk at a time (no N-long temporaries).
    table = np.zeros(k * (len(values) + 1), dtype=np.int64)
    for start in range(0, labels.size, CHUNK):
        lab = np.asarray(labels[start:start + CHUNK], dtype=np.int64)
        code = codes[start:start + CHUNK]
        keep = lab >= 0
        # Column 0: the field is missing; value c is column c + 1.
        table += np.bincount(lab[keep] * (len(values) + 1) + code[keep] + 1,
                             minlength=table.size)
    table = table.reshape(k, len(values) + 1)
    missing, table = table[:, 0], table[:, 1:]
    used = np.flatnonzero(table.sum(axis=0))
    if not used.size and not (codes >= 0).any():
        raise InputError(f"label_field {field}: no document has this field",
                         params=("label_field",))
    names = np.array([values[c] for c in used.tolist()], dtype=str)
    classes, cls = np.unique(names, return_inverse=True)  # sorted as numpy sorts them
    by_class = np.zeros((k, classes.size), dtype=np.int64)
    np.add.at(by_class.T, cls.reshape(-1), table[:, used].T)  # merge values of one name
    result = {"field": field, **table_agreement(by_class),
              "documents": int(by_class.sum()), "classes": int(classes.size),
              "skipped_missing": int(missing.sum())}
    # Majority value per cluster, to help name the clusters in the examples.
    majority = {int(c): str(classes[int(np.argmax(by_class[c]))])
                for c in np.flatnonzero(by_class.sum(axis=1))}
    return result, majority


def _relative(path: Path, report_dir: Path) -> str:
    return Path(os.path.relpath(path.resolve(), report_dir.resolve())).as_posix()


def _verdict_files(src: Sources) -> list[tuple[str, Path]]:
    return [("Experiment", src.experiment_results), ("Search", src.search_results)]


def search_link(src: Sources, report_dir: Path) -> str | None:
    """The relative path (POSIX separators) from ``report_dir`` to ``W/search/results.md``
    when that file exists, else None."""
    results = src.search_results
    return _relative(results, report_dir) if results.is_file() else None


def experiment_link(src: Sources, report_dir: Path) -> dict[str, Any]:
    """Where the experiment's results are, relative to the report directory, or how to run it.

    ``results_md`` is the relative path (POSIX separators) from ``report_dir`` to
    ``W/experiment/results.md`` when that file exists, else None; ``command``
    is the command that writes it.
    """
    results = src.experiment_results
    rel = _relative(results, report_dir) if results.is_file() else None
    return {"results_md": rel, "command": f"clusterclip experiment --workdir {src.root}"}


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """What a report shows and how its schedules are drawn (see
    :func:`clusterclip.stages.report.run`); checked on construction (InputError naming
    the parameter).

    ``schedule``: a schedule ``.npy`` to analyse (its length sets the budget T);
    ``strategies``: schedules to generate at the same T with the sampler
    (None: :data:`DEFAULT_STRATEGIES`); ``num_samples``: T when no schedule is
    given (None: ``min(3, clip)`` epochs of the eligible documents, which fits
    the ClusterClip capacity); ``clip``/``alpha``/``seed``: sampler parameters;
    ``windows``: time windows for the mixture series; ``tail_floor``: a schedule
    starves the tail when the smallest quartile of clusters gets less than
    ``tail_floor`` x its corpus share of the last 20% of the schedule (the
    late-training sentence and the recommended R); ``clips``: the values of R
    to tabulate (None: :func:`~clusterclip.sampling.clip.default_clips`);
    ``out``: the report directory (None: ``W/report``); ``progress``: progress
    bars on stderr; ``overwrite``: replace an ``out`` that is not an earlier report;
    ``map_sample``: documents on the page's map (at most; 0: no map), a sample drawn
    with ``map_seed`` and projected by the ``map`` stage
    (:mod:`~clusterclip.stages.map`); a seed of its own, so that a report with
    another sampler ``seed`` reuses the map; ``workers``: processes reading the corpus
    for the top terms and ``label_field`` (None: the CPUs this process may use, one for
    a small corpus: :func:`~clusterclip.report.reading.report_workers`; the same report
    for any number).
    """

    schedule: str | os.PathLike[str] | None = None
    label_field: str | None = None
    strategies: Sequence[str] | None = None
    num_samples: int | None = ranged(1, MAX_SAMPLES, default=None)
    clip: int = ranged(1, MAX_CLIP, default=DEFAULT_CLIP)
    alpha: float = ranged(-MAX_ALPHA, MAX_ALPHA, real=True, default=0.0)
    seed: int = ranged(0, MAX_SEED, default=0)
    windows: int = ranged(1, 100_000, default=50)
    tail_floor: float = ranged(0.0, 100.0, real=True, default=DEFAULT_TAIL_FLOOR)
    clips: Sequence[int] | None = ranged(1, MAX_CLIP, each=True, default=None)
    out: str | os.PathLike[str] | None = None
    progress: bool = False
    overwrite: bool = False
    map_sample: int = ranged(0, MAX_ROWS, default=DEFAULT_MAP_SAMPLE)
    map_seed: int = 0
    workers: int | None = ranged(1, MAX_THREADS, default=None)

    def strategy_list(self) -> list[str]:
        """The strategies to generate, checked against the sampler's (and ``mixture``:
        the schedule of ``W/search/mixture.json``, CONTRACTS.md section 4)."""
        strategies = list(DEFAULT_STRATEGIES if self.strategies is None else self.strategies)
        for s in strategies:
            if s not in STRATEGIES and s != MIXTURE:
                raise InputError(f"strategies: unknown strategy {s!r} (choose from "
                                 f"{', '.join((*STRATEGIES, MIXTURE))})",
                                 params=("strategies",))
        return strategies

    def __post_init__(self) -> None:
        """InputError naming the parameter for a value out of range."""
        check_ranges(self)
        self.strategy_list()


def stage_key(src: Sources, opts: ReportOptions, target: Path) -> dict[str, Any]:
    """What determines the report written to ``target`` from the work directory's files
    ``src`` (its stage fingerprint, with the upstream stages)."""
    schedule = opts.schedule
    return {"schedule": None if schedule is None else str(Path(schedule).resolve()),
            "label_field": opts.label_field,
            "strategies": list(DEFAULT_STRATEGIES if opts.strategies is None
                               else opts.strategies),
            "num_samples": opts.num_samples, "clip": opts.clip, "alpha": opts.alpha,
            "seed": opts.seed, "windows": opts.windows, "tail_floor": opts.tail_floor,
            "clips": None if opts.clips is None else [int(c) for c in opts.clips],
            "out": str(target.resolve()),
            # report.md links the experiment's results once they exist.
            "experiment_link": experiment_link(src, target),
            "map_sample": opts.map_sample, "map_seed": opts.map_seed,
            "mixture": _mixture_identity(src.mixture),
            # the page shows the experiment's and the search's verdicts
            "verdicts": [verdict_text(path) for _, path in _verdict_files(src)]}


def _mixture_identity(path: Path) -> str | None:
    if not path.is_file():
        return None
    from clusterclip.storage.digests import sha256_file

    return sha256_file(path)


def _report_strategies(mixture: Path, opts: ReportOptions) -> list[str]:
    """The generated schedules: ``opts``'s, plus ``mixture`` by default when the
    mixture file ``mixture`` (``W/search/mixture.json``) exists."""
    names = opts.strategy_list()
    if opts.strategies is None and mixture.is_file():
        names.append(MIXTURE)
    if MIXTURE in names and not mixture.is_file():
        raise InputError(f"strategies {MIXTURE}: {mixture} does not "
                         "exist (`clusterclip search` writes it)", params=("strategies",))
    return names


@dataclass(frozen=True)
class Counted:
    """What the report counts per document besides the labels: tokens (None without a
    corpus index: no token shares), how they were counted, near-duplicate groups."""

    tokens: np.ndarray | None = None
    source: dict[str, Any] | None = None
    groups: np.ndarray | None = None


@dataclass
class _Corpus:
    """The report's view of the work directory: labels, clusters, budget and texts."""

    labels: np.ndarray
    k: int
    eligible: np.ndarray
    sizes: np.ndarray
    tail: np.ndarray
    head: np.ndarray
    total: int
    corpus: Any
    notes: list[str]
    counted: Counted
    schedule: np.ndarray | None = None
    #: per-document counts are kept for every stride-th document (doc_stride)
    stride: int = 1
    #: float64[K] tokens per cluster, once computed
    cluster_tokens: np.ndarray | None = None

    def stats(self, windows: int, passes: str | None = None) -> ScheduleStats:
        """Empty statistics of one schedule of this corpus at its budget."""
        return ScheduleStats(self.labels, self.k, self.total, windows, stride=self.stride,
                             passes=passes)

    def drawn(self, options: dict[str, Any], seed: int, windows: int, desc: str,
              progress: bool, labels: Any = None) -> tuple[ScheduleStats, Any]:
        """Statistics of the sampler's schedule for ``options`` and ``seed`` (``labels``:
        the labels it is made from, default this corpus's), and a function returning
        its summary's ``clip_events`` (and ``stages``). Up to :data:`DOC_SAMPLE`
        documents from the sampler's documents; above, from the clusters it draws
        (:func:`~clusterclip.report.stats.draw_clusters`: no per-document memory)."""
        if self.stride == 1:
            from clusterclip.sampling import make_sampler

            sampler = make_sampler(self.labels if labels is None else labels, self.total,
                                   seed=seed, **options)
            st = self.stats(windows)
            st.consume(_progress(sampler.blocks(_block_size(self.n)), self.total, desc,
                                 progress))
            return st, sampler.summary
        st = self.stats(windows, "corpus" if options["strategy"] == "random" else "cluster")
        events, stages = draw_clusters(st, self.sizes, options, seed, wrap=lambda b: _progress(
            b, self.total, desc, progress))
        return st, lambda: {"clip_events": events, **({"stages": stages} if stages else {})}

    @property
    def n(self) -> int:
        return int(self.labels.size)

    @property
    def n_eligible(self) -> int:
        return int(self.sizes.sum())


def _load(src: Sources, opts: ReportOptions, counted: Counted) -> _Corpus:
    """Labels, the given schedule, the budget T and the corpus index, checked."""
    strategies = opts.strategy_list()
    labels, k = load_labels(src.labels, src.centroids)
    n = int(labels.size)
    sizes = cluster_sizes(labels, k)
    n_eligible = int(sizes.sum())
    sched = None
    if opts.schedule is not None:
        sched = load_schedule(Path(opts.schedule))
        total = int(sched.size)
    elif opts.num_samples is not None:
        total = int(opts.num_samples)
    else:
        total = min(DEFAULT_EPOCHS, opts.clip) * n_eligible
    if any(s in CLIP_STRATEGIES for s in strategies if s != MIXTURE) \
            and total > opts.clip * n_eligible:
        raise InputError(f"budget T={total} exceeds the ClusterClip capacity R x N = "
                         f"{opts.clip} x {n_eligible} = {opts.clip * n_eligible}; raise "
                         "clip or lower the budget", params=("clip",))
    if not strategies and sched is None:
        raise InputError("nothing to report: give schedule or at least one strategy",
                         params=("schedule",))
    corpus = None
    notes: list[str] = []
    if src.corpus.is_dir():
        from clusterclip.corpus import Corpus

        corpus = Corpus.load(src.corpus)
        if len(corpus) != n:
            raise InputError(f"{src.corpus}: {len(corpus)} documents but {src.labels.name} "
                             f"has {n}")
    else:
        notes.append("no corpus index (W/corpus): top terms and example documents are not shown")
    if opts.label_field is not None and corpus is None:
        raise InputError(f"label_field {opts.label_field}: needs the corpus index "
                         f"{src.corpus}", params=("label_field",))
    if counted.tokens is not None and len(counted.tokens) != n:
        raise InputError(f"token counts for {len(counted.tokens)} documents but "
                         f"{src.labels.name} has {n}")
    tail, head = _quartiles(sizes)
    stride = doc_stride(n)
    # the documents that may be sampled: all N up to DOC_SAMPLE, else the tracked ones
    eligible = strided(labels, stride) >= 0
    if stride > 1:
        notes.append(_above_bound_note(n, stride, sched is not None, strategies))
    return _Corpus(labels=labels, k=k, eligible=eligible, sizes=sizes, tail=tail, head=head,
                   total=total, corpus=corpus, notes=notes, counted=counted, schedule=sched,
                   stride=stride)


@dataclass
class _Schedules:
    """Per schedule name: its summary, its share of samples per cluster float[K] and
    (with token counts) its share of tokens per cluster, ``corpus`` included."""

    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    shares: dict[str, np.ndarray] = field(default_factory=dict)
    token_parts: dict[str, np.ndarray] = field(default_factory=dict)
    #: float[P, K]: each cluster's share of each tenth of the schedule
    tenths: dict[str, np.ndarray] = field(default_factory=dict)
    tenth_end: list[float] = field(default_factory=list)

    def add(self, name: str, summary: dict[str, Any], st: ScheduleStats, c: _Corpus) -> None:
        """Record schedule ``name`` from its statistics (group repetition and token
        shares too, when counted)."""
        if c.counted.groups is not None and not st.sampled and not st.passes:
            from clusterclip.dedup import group_repetition

            summary.update(group_repetition(st.doc_counts, c.counted.groups))
        if c.counted.tokens is not None:
            per_cluster = _cluster_tokens(st, c)
            summary.update(token_shares(per_cluster, c.sizes, _groups(c)))
            self.token_parts[name] = per_cluster / max(1.0, float(per_cluster.sum()))
        self.summaries[name] = summary
        self.shares[name] = st.cluster_counts / c.total
        self.tenths[name] = st.tenth_counts / np.maximum(1, np.diff(st.tenth_edges))[:, None]
        self.tenth_end = (st.tenth_edges[1:] / c.total).tolist()


def _cluster_tokens(st: ScheduleStats, c: _Corpus) -> np.ndarray:
    """float64[K]: tokens each cluster gets in the schedule of ``st``; from the tracked
    documents, scaled by cluster size over tracked size, when ``st`` tracks a sample;
    estimated from each cluster's tokens when ``st`` counts passes (pass_tokens)."""
    if st.passes:
        if c.cluster_tokens is None:
            c.cluster_tokens = cluster_tokens(np.broadcast_to(np.int8(1), (c.n,)), c.labels,
                                              c.counted.tokens, c.k)
        return pass_tokens(st.cluster_counts, c.sizes, c.cluster_tokens)
    if not st.sampled:
        return cluster_tokens(st.doc_counts, c.labels, c.counted.tokens, c.k)
    lab = st.tracked(c.labels)
    part = cluster_tokens(st.doc_counts, lab, st.tracked(c.counted.tokens), c.k)
    seen = cluster_sizes(lab, c.k)
    return np.divide(part * c.sizes, seen, out=np.zeros(c.k), where=seen > 0)


def _above_bound_note(n: int, stride: int, given: bool, strategies: list[str]) -> str:
    """The note of a report over more than DOC_SAMPLE documents: what is counted how."""
    parts = []
    if given:
        parts.append(f"the given schedule's repetition and documents seen are counted on one "
                     f"document in {stride:,} ({-(-n // stride):,} of the {n:,}: above "
                     f"{DOC_SAMPLE:,} documents its per-document counts are sampled), its "
                     f"token shares per cluster estimated from them")
    if strategies:
        parts.append("the generated schedules are computed from the clusters they draw, "
                     "without their documents: their repetition, documents seen and maximum "
                     "repetition follow exactly from the draws per cluster (each cluster's "
                     "documents are drawn in passes; random's in epochs), their token shares "
                     "per cluster are estimated (the documents of an unfinished pass at their "
                     "cluster's mean)"
                     + (", and random's shares per window and per tenth come from a seeded "
                        "draw of each epoch's cluster counts (multivariate hypergeometric: the "
                        "sampler's distribution, not its order)" if "random" in strategies
                        else ""))
    return "; ".join(parts) + "; repetition per near-duplicate group is not computed"


def _repetition_sample(schedules: dict[str, dict[str, Any]]) -> int | None:
    """Documents the schedules' repetition histograms count when they count a sample."""
    return next((s["repetition_sample"] for s in schedules.values()
                 if "repetition_sample" in s), None)


def _groups(c: _Corpus) -> dict[str, np.ndarray]:
    return {"tail_quartile": c.tail, "head_quartile": c.head}


def _given_schedule(c: _Corpus, opts: ReportOptions, out: _Schedules) -> None:
    """Statistics of the schedule the user gave (``opts.schedule``), as ``schedule``."""
    st = c.stats(opts.windows)
    blocks = _blocks_of(c.schedule, _block_size(c.n))
    try:
        st.consume(_progress(blocks, c.total, "schedule", opts.progress))
    except ValueError as e:
        raise InputError(f"{opts.schedule}: {e}") from None
    summary = schedule_summary(st, c.sizes, c.eligible, opts.clip)
    summary["source"] = Path(opts.schedule).name
    summary["pool_clip"] = opts.clip  # the R by which its clusters leave the pool
    summary["clip_events"] = _clip_events(st, c.sizes, opts.clip)
    if st.excluded:
        c.notes.append(f"the schedule draws {st.excluded} samples from excluded documents "
                       "(label -1)")
    out.add("schedule", summary, st, c)


def _generated_schedule(c: _Corpus, opts: ReportOptions, strategy: str,
                        out: _Schedules) -> None:
    """Statistics of the sampler's schedule for ``strategy`` at the same budget."""
    st, drawn = c.drawn(strategy_options(strategy, clip=opts.clip, alpha=opts.alpha),
                        opts.seed, opts.windows, strategy, opts.progress)
    clipped = strategy in CLIP_STRATEGIES
    summary = schedule_summary(st, c.sizes, c.eligible, opts.clip if clipped else np.inf)
    summary["parameters"] = {"seed": opts.seed,
                             **strategy_options(strategy, clip=opts.clip, alpha=opts.alpha)}
    if clipped:
        summary["clip_events"] = (_sampler_clip_events(drawn())
                                  or _clip_events(st, c.sizes, opts.clip))
    out.add(strategy, summary, st, c)


def _mixture_schedule(path: Path, c: _Corpus, opts: ReportOptions, out: _Schedules) -> None:
    """Statistics of the schedule drawn from the mixture file at ``path``
    (``W/search/mixture.json``: its weights, timing and clip) at the same budget and seed,
    as ``mixture``. A mixture the default brought in that does not fit these labels or
    this budget becomes a note; one asked for by ``--strategies`` is an error."""
    from clusterclip.sampling.mixture import mixture_record, read_mixture

    try:
        mixture = read_mixture(path, num_clusters=c.k)
        staged = mixture.sampler_options()
        options = {**strategy_options(mixture.timing, clip=mixture.clip,
                                      cluster_weights=staged.pop("cluster_weights", None)),
                   **staged}
        st, drawn = c.drawn(options, opts.seed, opts.windows, MIXTURE, opts.progress)
    except InputError as e:
        if opts.strategies is not None:
            raise
        c.notes.append(f"mixture not shown: {e}")
        return
    summary = schedule_summary(st, c.sizes, c.eligible, mixture.clip)
    summary["parameters"] = {"strategy": MIXTURE, "timing": mixture.timing,
                             "clip": mixture.clip, "seed": opts.seed,
                             "mixture": mixture_record(path)}
    drawn = drawn()
    summary["clip_events"] = (_sampler_clip_events(drawn)
                              or _clip_events(st, c.sizes, mixture.clip))
    if drawn.get("stages"):  # a staged mixture: where each stage ends (share of training)
        summary["stage_ends"] = [st_["stop"] / c.total for st_ in drawn["stages"]]
    out.add(MIXTURE, summary, st, c)


def _choose_section(c: _Corpus, opts: ReportOptions) -> dict[str, Any]:
    """The choose-R analysis; its measured columns while T x (values of R) stays cheap."""
    block = _block_size(c.n)
    tail: list[np.ndarray] = []  # the tail quartile's documents, only when measured

    def measure(r: int) -> dict[str, Any]:
        if c.stride == 1:
            if not tail:
                tail.append(np.isin(c.labels, c.tail))
            st = c.stats(1)
            st.consume(_sampler(c.labels, "clusterclip", c.total, r, opts.alpha,
                                opts.seed).blocks(block))
            most = int(st.doc_counts[tail[0]].max(initial=0))
        else:  # from the clusters drawn: its documents are drawn in passes
            st, _ = c.drawn(strategy_options("clusterclip", clip=r, alpha=opts.alpha),
                            opts.seed, 1, "choose-R", False)
            n_tail = c.sizes[c.tail]
            most = int((-(-st.cluster_counts[c.tail][n_tail > 0] // n_tail[n_tail > 0])).max(
                initial=0))
        q = quartile_shares_per_tenth(st.tenth_counts, st.tenth_edges, c.tail, c.head)
        return {"measured_tail_max_repetition": most,
                "measured_tail_share": float(st.cluster_counts[c.tail].sum() / c.total),
                "measured_tail_share_late": q["tail_quartile_share_late"]}

    grid = default_clips(math.ceil(c.total / c.n_eligible)) if opts.clips is None else opts.clips
    clip_grid = sorted({int(r) for r in grid if int(r) >= 1} | {opts.clip})
    cheap = c.total * len(clip_grid) <= MEASURE_SAMPLE_LIMIT
    choose = choose_clip(c.labels, c.total, alpha=opts.alpha, tail_floor=opts.tail_floor,
                         clips=clip_grid, measure=measure if cheap else None)
    if not cheap:
        c.notes.append(f"choose-R: measured columns skipped (T x {len(clip_grid)} values of R "
                       f"exceeds {MEASURE_SAMPLE_LIMIT:,} samples); expected values only")
    return choose


def _summary(src: Sources, target: Path, c: _Corpus, opts: ReportOptions, sched: _Schedules,
             choose: dict[str, Any], readable: dict[str, Any], agreement: Any,
             examples: Any) -> dict[str, Any]:
    """summary.json's content (rounded, JSON types); adds the corpus's token shares."""
    tail_share = float(c.sizes[c.tail].sum() / c.n_eligible)
    summary: dict[str, Any] = {
        "documents": c.n,
        "eligible_documents": c.n_eligible,
        "excluded_documents": c.n - c.n_eligible,
        "num_clusters": c.k,
        "num_samples": c.total,
        "windows": len(next(iter(sched.summaries.values()))["window_end"]),
        "clusters": size_profile(c.sizes),
        "quartile_clusters": int(c.tail.size),
        "corpus_tail_share": tail_share,
        "corpus_head_share": float(c.sizes[c.head].sum() / c.n_eligible),
        "token_counts": c.counted.source,
        "corpus_token_shares": None,
        "schedules": sched.summaries,
        "tail_starvation": tail_starvation(sched.summaries, tail_share, opts.tail_floor),
        "choose_clip": choose,
        "label_agreement": agreement,
        "examples": examples,
        "terms_sample": readable["terms_sample"],
        "clusters_md": CLUSTERS_MD,
        "notes": c.notes,
        "figures": dict(FIGURES),
    }
    if c.counted.tokens is not None:
        corpus_tokens = cluster_tokens(np.broadcast_to(np.int8(1), (c.n,)), c.labels,
                                       c.counted.tokens, c.k)
        summary["corpus_token_shares"] = token_shares(corpus_tokens, c.sizes, _groups(c))
        sched.token_parts["corpus"] = corpus_tokens / max(1.0, float(corpus_tokens.sum()))
    summary["experiment"] = experiment_link(src, target)
    summary["search"] = {"results_md": search_link(src, target)}
    summary["page"] = PAGE
    return _round_floats(_jsonable(summary))


def write_report(src: Sources, opts: ReportOptions, target: Path, counted: Counted,
                 make_map: Callable[[], str | None]) -> dict[str, Any]:
    """Compute the report of the work directory's files ``src`` and write it to ``target``
    (replaced atomically); return the summary (see :mod:`clusterclip.stages.report`).

    ``counted.groups``: near-duplicate groups (``W/groups.npy``): repetition is then also
    counted per group (``max_group_repetition``, ``groups_seen`` per schedule).
    ``counted.tokens``: tokens per document (None without a corpus index: no token
    shares), counted as ``counted.source`` says. ``make_map``: makes (or reuses)
    ``W/map/`` for the page's map; None, or why there is no map."""
    from clusterclip.storage.outputs import atomic_output_dir

    c = _load(src, opts, counted)
    scores = _load_scores(src, c.labels)
    # The corpus pass (worker processes) runs while this process makes the map and the
    # schedules: none of them depends on another.
    read = functools.partial(readable_clusters, c.corpus, c.labels, scores, c.k,
                             seed=opts.seed, progress=opts.progress, field=opts.label_field,
                             workers=opts.workers)
    with in_background(read, c.corpus is not None and
                       report_workers(opts.workers, c.n) > 1) as readable_now:
        map_note = make_map()
        if counted.source and counted.source.get("note"):
            c.notes.append(counted.source["note"])
        sched = _Schedules()
        if c.schedule is not None:
            _given_schedule(c, opts, sched)
        for strategy in _report_strategies(src.mixture, opts):
            if strategy == MIXTURE:
                _mixture_schedule(src.mixture, c, opts, sched)
            else:
                _generated_schedule(c, opts, strategy, sched)
        choose = _choose_section(c, opts)
        points = _map_points(src, c) if map_note is None else None
        readable = readable_now()
    coded = readable.pop("field")
    agreement, majority = (_label_agreement(*coded, c.labels, opts.label_field)
                           if coded is not None else (None, None))
    examples = _examples(readable, scores, c.sizes, c.corpus, majority)
    if map_note:
        c.notes.append(map_note)
    summary = _summary(src, target, c, opts, sched, choose, readable, agreement, examples)
    summary["map"] = None if points is None else {"documents": int(points.rows.size),
                                                  "of": points.of}
    page = _page(src, target, summary, c, sched, readable, scores, points, map_note)
    with atomic_output_dir(target, "report", overwrite=opts.overwrite) as tmp:
        _write_report(tmp, summary, c.sizes, sched.shares, sched.token_parts, readable)
        (tmp / PAGE).write_text(page, encoding="utf-8")
    return summary


def _map_points(src: Sources, c: _Corpus):
    """The documents of ``W/map/`` with their clusters and first characters."""
    from clusterclip.report.page import HOVER_CHARS, MapPoints
    from clusterclip.report.projection import load_map
    from clusterclip.report.terms import one_line

    rows, coords = load_map(src.map)
    if rows.size and (rows.max() >= c.n or rows.min() < 0):
        raise InputError(f"{src.map}: documents outside the {c.n} of "
                         f"{src.labels.name}; rerun `clusterclip report`")
    texts = None
    if c.corpus is not None:
        texts = [one_line(t, HOVER_CHARS) for _, t in c.corpus.iter_texts_at(rows)]
    return MapPoints(rows=rows, coords=coords, labels=np.asarray(c.labels[rows]),
                     texts=texts, of=c.n)


def _page(src: Sources, target: Path, summary: dict[str, Any], c: _Corpus, sched: _Schedules,
          readable: dict[str, Any], scores: np.ndarray | None, points: Any,
          map_note: str | None) -> str:
    """index.html's text: the map, the clusters, the mixture and the verdicts."""
    from clusterclip.report.page import markdown_html, page_data, render_page

    cohesion = None
    if scores is not None:
        keep = c.labels >= 0
        total = np.bincount(c.labels[keep], weights=np.asarray(scores, np.float64)[keep],
                            minlength=c.k)
        cohesion = np.divide(total, c.sizes, out=np.full(c.k, np.nan), where=c.sizes > 0)
    verdicts = [{"title": title, "html": markdown_html(text), "href": _relative(path, target)}
                for title, path in _verdict_files(src)
                if (text := verdict_text(path)) is not None]
    links = [{"text": "report.md", "href": "report.md"},
             {"text": CLUSTERS_MD, "href": CLUSTERS_MD},
             {"text": "clusters.csv", "href": "clusters.csv"}]
    links += [{"text": f"{title.lower()} results", "href": v["href"]}
              for title, v in zip([v["title"] for v in verdicts], verdicts, strict=True)]
    return render_page(page_data(
        summary, sizes=c.sizes, shares=sched.shares, token_parts=sched.token_parts,
        tenths=sched.tenths, tenth_end=sched.tenth_end, readable=readable, cohesion=cohesion,
        points=points, verdicts=verdicts, links=links, map_note=map_note))


def _write_report(directory: Path, summary: dict[str, Any], sizes: np.ndarray,
                  shares: dict[str, np.ndarray], token_parts: dict[str, np.ndarray],
                  readable: dict[str, Any]) -> None:
    import json

    from clusterclip.report import plots
    from clusterclip.report.markdown import render_markdown

    plots.plot_cluster_sizes(sizes, size_profile(sizes), directory / FIGURES["sizes"])
    plots.plot_schedule_share(sizes, shares, directory / FIGURES["share"])
    plots.plot_repetition({name: s["repetition_histogram"]
                           for name, s in summary["schedules"].items()},
                          directory / FIGURES["repetition"],
                          sample=_repetition_sample(summary["schedules"]),
                          sampled=[name for name, s in summary["schedules"].items()
                                   if "repetition_sample" in s])
    plots.plot_mixture(summary["schedules"], summary["corpus_tail_share"],
                       summary["corpus_head_share"], summary["tail_starvation"]["threshold"],
                       directory / FIGURES["mixture"])
    plots.plot_choose_clip(summary["choose_clip"], directory / FIGURES["choose_clip"])
    (directory / "summary.json").write_text(
        json.dumps(summary, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        encoding="utf-8")
    (directory / "report.md").write_text(render_markdown(summary, FIGURES), encoding="utf-8")
    (directory / CLUSTERS_MD).write_text(render_clusters_md(readable, sizes, shares,
                                                             token_parts), encoding="utf-8")
    (directory / "clusters.csv").write_text(clusters_csv(sizes, shares, token_parts, readable),
                                            encoding="utf-8")


def clusters_csv(sizes: np.ndarray, shares: dict[str, np.ndarray],
                 token_parts: dict[str, np.ndarray], readable: dict[str, Any]) -> str:
    """clusters.csv: per cluster its size, document shares (corpus, each schedule), token
    shares (corpus first) when token counts exist, then top terms and nearest documents.
    Too many numbers for summary.json when K is large."""
    names = list(shares)
    corpus_share = sizes / max(1, int(sizes.sum()))
    header, text_rows = csv_columns(readable)  # top terms and nearest documents, last
    lines = [",".join(["label", "size", "corpus_share", *(f"{s}_share" for s in names),
                       *(f"{s}_token_share" for s in token_parts), *header])]
    for c in range(sizes.size):
        lines.append(",".join([str(c), str(int(sizes[c])), f"{corpus_share[c]:.6g}",
                               *(f"{shares[s][c]:.6g}" for s in names),
                               *(f"{token_parts[s][c]:.6g}" for s in token_parts),
                               csv_line(text_rows[c])]))
    return "\n".join(lines) + "\n"
