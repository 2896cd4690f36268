"""Assemble the report from a work directory: read, compute, plot, write ``W/report/``.

This is the edge of the report package: it reads the work directory's files,
generates comparison schedules with the sampler, and writes everything into a
temporary directory that replaces ``W/report/`` only when complete.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.io import load_npy
from clusterclip.labels import check_labels
from clusterclip.report.readable import FILE as CLUSTERS_MD
from clusterclip.report.readable import (
    csv_columns,
    csv_line,
    readable_clusters,
    render_clusters_md,
)
from clusterclip.report.stats import (
    CHUNK,
    ScheduleStats,
    cluster_sizes,
    cluster_tokens,
    quartile_shares_per_tenth,
    schedule_summary,
    size_profile,
    tail_starvation,
    token_shares,
)
from clusterclip.sampling.clip import DEFAULT_TAIL_FLOOR, choose_clip, default_clips
from clusterclip.sampling.clip import quartile_clusters as _quartiles
from clusterclip.sampling.spec import (
    CLIP_STRATEGIES,
    DEFAULT_STRATEGIES,
    STRATEGIES,
    strategy_options,
)

DEFAULT_EPOCHS = 3
EXAMPLE_CLUSTERS = 3  # largest and smallest clusters shown with their documents
EXAMPLE_DOCS = 3
EXAMPLE_CHARS = 200
# Generate measured columns for the choose-R table only while it stays cheap.
MEASURE_SAMPLE_LIMIT = 20_000_000
FIGURES = {"sizes": "cluster_sizes.png", "share": "schedule_share.png",
           "repetition": "repetition.png", "mixture": "mixture.png",
           "choose_clip": "choose_clip.png"}


# -- reading the work directory ---------------------------------------------------------
def _load_array(path: Path, what: str, required: bool = True) -> np.ndarray | None:
    if not path.exists():
        if required:
            raise InputError(f"{path}: missing ({what}); run the earlier stages first")
        return None
    return load_npy(path, what, mmap=True)


def load_labels(root: Path) -> tuple[np.ndarray, int]:
    """``W/labels.npy`` checked (1-D integers >= -1, as int32 where the ids fit) and the
    number of clusters K.

    K comes from ``W/centroids.npy`` when present (so empty clusters count),
    else from the largest label.
    """
    path = root / "labels.npy"
    labels = check_labels(_load_array(path, "labels"), path)
    k = int(labels.max()) + 1
    # Memory-mapped when the file holds int32 (4 bytes per document, page cache), else a
    # narrowed copy: int32 holds every cluster id below 2^31.
    labels = np.asarray(labels, dtype=np.int32 if k < 2**31 else np.int64)
    centroids = _load_array(root / "centroids.npy", "centroids", required=False)
    if centroids is not None:
        if centroids.ndim != 2 or centroids.shape[0] < k:
            raise InputError(f"{root / 'centroids.npy'}: shape {list(centroids.shape)} does not "
                             f"cover the {k} clusters of labels.npy")
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


def _block_size(num_docs: int) -> int:
    # Each block costs one bincount of length N, so blocks of at least N samples keep that
    # amortised to O(1) per sample.
    return max(1 << 20, num_docs)


# -- generated schedules ---------------------------------------------------------------
def current_groups(w: Any) -> np.ndarray | None:
    """``W/groups.npy`` while its ``dedup`` stage is done and current, else None."""
    rec = w.stage("dedup")
    if rec is None or not w.path("groups.npy").is_file():
        return None
    try:
        w.require("dedup")
    except InputError:
        return None
    return np.load(w.path("groups.npy"))


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
def _load_scores(root: Path, labels: np.ndarray) -> np.ndarray | None:
    scores = _load_array(root / "scores.npy", "scores", required=False)
    if scores is not None and scores.shape != labels.shape:
        raise InputError(f"{root / 'scores.npy'}: shape {list(scores.shape)} does not match "
                         f"labels.npy {list(labels.shape)}")
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


def _label_agreement(corpus, labels: np.ndarray, field: str
                     ) -> tuple[dict[str, Any], dict[int, str]]:
    from clusterclip.report.metrics import table_agreement

    codes, values = corpus.field_codes(field)  # streamed: 4 bytes per document
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
        raise InputError(f"--label-field {field}: no document has this field")
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


def experiment_link(root: Path, report_dir: Path) -> dict[str, Any]:
    """Where the experiment's results are, relative to the report directory, or how to run it.

    ``results_md`` is the relative path (POSIX separators) from ``report_dir`` to
    ``W/experiment/results.md`` when that file exists, else None; ``command``
    is the command that writes it.
    """
    results = root / "experiment" / "results.md"
    rel = None
    if results.is_file():
        rel = Path(os.path.relpath(results.resolve(), report_dir.resolve())).as_posix()
    return {"results_md": rel, "command": f"clusterclip experiment --workdir {root}"}


def build_report(
    workdir: str | os.PathLike[str],
    *,
    schedule: str | os.PathLike[str] | None = None,
    label_field: str | None = None,
    strategies: Sequence[str] | None = None,
    num_samples: int | None = None,
    clip: int = 4,
    alpha: float = 0.0,
    seed: int = 0,
    windows: int = 50,
    tail_floor: float = DEFAULT_TAIL_FLOOR,
    clips: Sequence[int] | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``W/report/`` (summary.json, clusters.csv, clusters.md, PNG figures, report.md);
    return the summary.

    ``schedule``: a schedule ``.npy`` to analyse (its length sets the budget T);
    ``strategies``: schedules to generate at the same T with the sampler
    (default: :data:`DEFAULT_STRATEGIES`); ``num_samples``: T when no schedule is
    given (default: ``min(3, clip)`` epochs of the eligible documents, which
    fits the ClusterClip capacity); ``clip``/``alpha``/``seed``: sampler
    parameters; ``windows``: time windows for the mixture series;
    ``tail_floor``: a schedule starves the tail when the smallest quartile of
    clusters gets less than ``tail_floor`` x its corpus share of the last 20%
    of the schedule (the late-training sentence and the recommended R);
    ``clips``: the values of R to tabulate; ``out``: the
    report directory (default ``W/report``), replaced atomically, and only when
    it is new, empty or an earlier report (or with ``overwrite``; never the work
    directory, an input, or a folder holding them).

    A stage of the work directory: run under its lock, refused when the labels
    (or ``W/schedule.npy``) come from a stage that did not finish or is stale,
    and reused when its inputs and parameters are unchanged.

    Raises :class:`InputError` for a missing work directory or labels, a
    schedule with indices outside the corpus, an unknown label field, a budget
    over capacity, or bad option values; nothing is written then.
    """
    import json

    from clusterclip.io import check_output_dir, refuse_protected
    from clusterclip.workdir import Workdir

    root = Path(workdir)
    if not root.is_dir():
        raise InputError(f"work directory {root} does not exist")
    w = Workdir(root, create=False)
    target = Path(out) if out is not None else root / "report"
    own = target.resolve() == (root / "report").resolve()
    in_w = schedule is not None and Path(schedule).resolve() == (root / "schedule.npy").resolve()
    key = {"schedule": None if schedule is None else str(Path(schedule).resolve()),
           "label_field": label_field,
           "strategies": list(DEFAULT_STRATEGIES if strategies is None else strategies),
           "num_samples": num_samples, "clip": clip, "alpha": alpha,
           "seed": seed, "windows": windows, "tail_floor": tail_floor,
           "clips": None if clips is None else [int(c) for c in clips],
           "out": str(target.resolve()),
           # report.md links the experiment's results once they exist.
           "experiment_link": experiment_link(root, target)}
    built: dict[str, Any] = {}
    counted: dict[str, Any] = {}

    def with_tokens() -> dict[str, Any]:
        counted["groups"] = current_groups(w)
        if counted["groups"] is not None:  # repetition per near-duplicate group too
            key["groups"] = w.stage("dedup")["fingerprint"]
        # Token counts: W/tokens.npy while its `tokens` stage is current, else the estimate.
        if (root / "corpus").is_dir():
            from clusterclip.tokens import recorded_tokens

            tokens, counted["source"] = recorded_tokens(w)
            # int32 holds any document's token count (4 bytes per document, not 8).
            fits = tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < 2**31)
            counted["tokens"] = tokens.astype(np.int32) if fits else tokens
            del tokens
            rec = w.stage("tokens") if counted["source"]["method"] == "tokenizer" else None
            return {**key, "token_counts": {**counted["source"],
                                            "stage": rec and rec.get("fingerprint")}}
        return key

    def work(run: Any) -> dict[str, Any]:
        built.update(_build_report(
            root, schedule=schedule, label_field=label_field, strategies=strategies,
            num_samples=num_samples, clip=clip, alpha=alpha, seed=seed, windows=windows,
            tail_floor=tail_floor, clips=clips, target=target,
            progress=progress, overwrite=overwrite, doc_tokens=counted.get("tokens"),
            token_source=counted.get("source"), doc_groups=counted.get("groups")))
        return {"out": str(target)}

    with w.locked():
        given = () if schedule is None else ((Path(schedule), "the schedule", False),)
        if own:  # W/report: the stage runner checks that it is ours; never a schedule's folder
            refuse_protected(target, given, "--out")
        else:
            check_output_dir(target, "report", overwrite=overwrite,
                             protected=w.protected(own=("report",)) + given)
        w.run_stage("report", key=with_tokens, work=work,
                    reads=["labels.npy"] + (["schedule.npy"] if in_w else []),
                    maybe_reads=["centroids.npy", "corpus"],
                    inputs=[schedule] if schedule is not None and not in_w else [],
                    outputs=["report" if own else str(target.resolve())], overwrite=overwrite)
    if built:
        return built
    return json.loads((target / "summary.json").read_text(encoding="utf-8"))


def _build_report(
    root: Path,
    *,
    schedule: str | os.PathLike[str] | None,
    label_field: str | None,
    strategies: Sequence[str] | None,
    num_samples: int | None,
    clip: int,
    alpha: float,
    seed: int,
    windows: int,
    tail_floor: float,
    clips: Sequence[int] | None,
    target: Path,
    progress: bool,
    overwrite: bool,
    doc_tokens: np.ndarray | None = None,
    token_source: dict[str, Any] | None = None,
    doc_groups: np.ndarray | None = None,
) -> dict[str, Any]:
    """Compute the report and write it to ``target`` (see :func:`build_report`).

    ``doc_groups``: near-duplicate groups (``W/groups.npy``): repetition is then also
    counted per group (``max_group_repetition``, ``groups_seen`` per schedule).

    ``doc_tokens``: tokens per document (None without a corpus index: no token
    shares), counted as ``token_source`` says."""
    from clusterclip.io import atomic_output_dir

    if clip < 1:
        raise InputError(f"--clip must be >= 1, got {clip}")
    if windows < 1:
        raise InputError(f"--windows must be >= 1, got {windows}")
    if not (tail_floor >= 0 and math.isfinite(tail_floor)):
        raise InputError(f"--tail-floor must be a number >= 0, got {tail_floor}")
    strategies = list(DEFAULT_STRATEGIES if strategies is None else strategies)
    for s in strategies:
        if s not in STRATEGIES:
            raise InputError(f"unknown strategy {s!r} (choose from {', '.join(STRATEGIES)})")
    labels, k = load_labels(root)
    n = int(labels.size)
    eligible = labels >= 0
    n_eligible = int(eligible.sum())
    sizes = cluster_sizes(labels, k)
    profile = size_profile(sizes)

    sched = None
    if schedule is not None:
        sched = load_schedule(Path(schedule))
        total = int(sched.size)
    elif num_samples is not None:
        if num_samples <= 0:
            raise InputError(f"--num-samples must be positive, got {num_samples}")
        total = int(num_samples)
    else:
        total = min(DEFAULT_EPOCHS, clip) * n_eligible
    if any(s in CLIP_STRATEGIES for s in strategies) and total > clip * n_eligible:
        raise InputError(f"budget T={total} exceeds the ClusterClip capacity R x N = {clip} x "
                         f"{n_eligible} = {clip * n_eligible}; raise --clip or lower the budget")
    if not strategies and sched is None:
        raise InputError("nothing to report: give --schedule or at least one strategy")

    corpus = None
    notes: list[str] = []
    if (root / "corpus").is_dir():
        from clusterclip.corpus import Corpus

        corpus = Corpus.load(root / "corpus")
        if len(corpus) != n:
            raise InputError(f"{root / 'corpus'}: {len(corpus)} documents but labels.npy has {n}")
    else:
        notes.append("no corpus index (W/corpus): top terms and example documents are not shown")
    if label_field is not None and corpus is None:
        raise InputError(f"--label-field {label_field}: needs the corpus index {root / 'corpus'}")
    agreement, majority = (_label_agreement(corpus, labels, label_field)
                           if label_field is not None else (None, None))

    scores = _load_scores(root, labels)
    readable = readable_clusters(corpus, labels, scores, k, seed=seed)
    tail, head = _quartiles(sizes)
    if doc_tokens is not None and len(doc_tokens) != n:
        raise InputError(f"token counts for {len(doc_tokens)} documents but labels.npy has {n}")
    groups = {"tail_quartile": tail, "head_quartile": head}
    if token_source and token_source.get("note"):
        notes.append(token_source["note"])
    token_parts: dict[str, np.ndarray] = {}  # per-cluster token shares, for clusters.csv

    def with_tokens(name: str, summary_s: dict[str, Any], st: ScheduleStats) -> dict[str, Any]:
        if doc_groups is not None:
            from clusterclip.dedup import group_repetition

            summary_s.update(group_repetition(st.doc_counts, doc_groups))
        if doc_tokens is not None:
            per_cluster = cluster_tokens(st.doc_counts, labels, doc_tokens, k)
            summary_s.update(token_shares(per_cluster, sizes, groups))
            token_parts[name] = per_cluster / max(1.0, float(per_cluster.sum()))
        return summary_s

    block = _block_size(n)
    schedules: dict[str, dict[str, Any]] = {}
    shares: dict[str, np.ndarray] = {}
    if sched is not None:
        st = ScheduleStats(labels, k, total, windows)
        try:
            st.consume(_progress(_blocks_of(sched, block), total, "schedule", progress))
        except ValueError as e:
            raise InputError(f"{schedule}: {e}") from None
        summary_s = schedule_summary(st, sizes, eligible, clip)
        summary_s["source"] = Path(schedule).name
        summary_s["pool_clip"] = clip  # the R by which its clusters leave the pool
        summary_s["clip_events"] = _clip_events(st, sizes, clip)
        if st.excluded:
            notes.append(f"the schedule draws {st.excluded} samples from excluded documents "
                         "(label -1)")
        schedules["schedule"] = with_tokens("schedule", summary_s, st)
        shares["schedule"] = st.cluster_counts / total
    for strategy in strategies:
        sampler = _sampler(labels, strategy, total, clip, alpha, seed)
        st = ScheduleStats(labels, k, total, windows)
        st.consume(_progress(sampler.blocks(block), total, strategy, progress))
        clipped = strategy in CLIP_STRATEGIES
        summary_s = schedule_summary(st, sizes, eligible, clip if clipped else np.inf)
        summary_s["parameters"] = {"seed": seed,
                                   **strategy_options(strategy, clip=clip, alpha=alpha)}
        if clipped:
            summary_s["clip_events"] = (_sampler_clip_events(sampler.summary())
                                        or _clip_events(st, sizes, clip))
        schedules[strategy] = with_tokens(strategy, summary_s, st)
        shares[strategy] = st.cluster_counts / total
        sampler = st = None  # freed before the next strategy's sampler is built

    tail_docs = np.isin(labels, tail)

    def measure(r: int) -> dict[str, Any]:
        st = ScheduleStats(labels, k, total, 1)
        st.consume(_sampler(labels, "clusterclip", total, r, alpha, seed).blocks(block))
        q = quartile_shares_per_tenth(st.tenth_counts, st.tenth_edges, tail, head)
        return {"measured_tail_max_repetition": int(st.doc_counts[tail_docs].max()),
                "measured_tail_share": float(st.cluster_counts[tail].sum() / total),
                "measured_tail_share_late": q["tail_quartile_share_late"]}

    grid = default_clips(math.ceil(total / n_eligible)) if clips is None else clips
    clip_grid = sorted({int(r) for r in grid if int(r) >= 1} | {clip})
    cheap = total * len(clip_grid) <= MEASURE_SAMPLE_LIMIT
    choose = choose_clip(labels, total, alpha=alpha, tail_floor=tail_floor,
                         clips=clip_grid, measure=measure if cheap else None)
    if not cheap:
        notes.append(f"choose-R: measured columns skipped (T x {len(clip_grid)} values of R "
                     f"exceeds {MEASURE_SAMPLE_LIMIT:,} samples); expected values only")

    summary: dict[str, Any] = {
        "documents": n,
        "eligible_documents": n_eligible,
        "excluded_documents": n - n_eligible,
        "num_clusters": k,
        "num_samples": total,
        "windows": len(next(iter(schedules.values()))["window_end"]),
        "clusters": profile,
        "quartile_clusters": int(tail.size),
        "corpus_tail_share": float(sizes[tail].sum() / n_eligible),
        "corpus_head_share": float(sizes[head].sum() / n_eligible),
        "token_counts": token_source,
        "corpus_token_shares": None,
        "schedules": schedules,
        "tail_starvation": tail_starvation(schedules, float(sizes[tail].sum() / n_eligible),
                                           tail_floor),
        "choose_clip": choose,
        "label_agreement": agreement,
        "examples": _examples(readable, scores, sizes, corpus, majority),
        "terms_sample": readable["terms_sample"],
        "clusters_md": CLUSTERS_MD,
        "notes": notes,
        "figures": dict(FIGURES),
    }
    if doc_tokens is not None:
        corpus_tokens = cluster_tokens(np.broadcast_to(np.int8(1), (n,)), labels, doc_tokens, k)
        summary["corpus_token_shares"] = token_shares(corpus_tokens, sizes, groups)
        token_parts["corpus"] = corpus_tokens / max(1.0, float(corpus_tokens.sum()))
    summary["experiment"] = experiment_link(root, target)
    summary = _round_floats(_jsonable(summary))

    with atomic_output_dir(target, "report", overwrite=overwrite) as tmp:
        _write_report(tmp, summary, sizes, profile, shares, token_parts, readable)
    return summary


def _write_report(directory: Path, summary: dict[str, Any], sizes: np.ndarray,
                  profile: dict[str, Any], shares: dict[str, np.ndarray],
                  token_parts: dict[str, np.ndarray], readable: dict[str, Any]) -> None:
    import json

    from clusterclip.report import plots
    from clusterclip.report.markdown import render_markdown

    plots.plot_cluster_sizes(sizes, profile, directory / FIGURES["sizes"])
    plots.plot_schedule_share(sizes, shares, directory / FIGURES["share"])
    plots.plot_repetition({name: s["repetition_histogram"]
                           for name, s in summary["schedules"].items()},
                          directory / FIGURES["repetition"])
    plots.plot_mixture(summary["schedules"], summary["corpus_tail_share"],
                       summary["corpus_head_share"], summary["tail_starvation"]["threshold"],
                       directory / FIGURES["mixture"])
    plots.plot_choose_clip(summary["choose_clip"], directory / FIGURES["choose_clip"])
    (directory / "summary.json").write_text(
        json.dumps(summary, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        encoding="utf-8")
    (directory / "report.md").write_text(render_markdown(summary, FIGURES), encoding="utf-8")
    # Per-cluster numbers: too many for summary.json when K is large. Document shares,
    # then token shares (corpus first) when token counts exist.
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
    (directory / CLUSTERS_MD).write_text(render_clusters_md(readable, sizes, shares,
                                                             token_parts), encoding="utf-8")
    (directory / "clusters.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
