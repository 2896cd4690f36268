"""The ``dedup`` stage: ``W/embeddings.npy`` + ``W/labels.npy`` -> ``W/groups.npy`` (the
near-duplicate group of each document) and ``W/dedup.json`` (the summary); and
``dedup --keep-one``, the deduplicated corpus in a folder (:func:`keep_one`).

The grouping itself is :func:`clusterclip.dedup.near_duplicate_groups` (arrays in,
arrays out).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.dedup import (
    DEFAULT_THRESHOLD,
    group_summary,
    near_duplicate_groups,
    representatives,
)
from clusterclip.errors import InputError
from clusterclip.limits import check_ranges, ranged
from clusterclip.workdir import (
    CORPUS,
    CORPUS_META,
    DEDUP,
    EMBEDDINGS,
    GROUPS,
    LABELS,
    SCORES,
    Workdir,
)

STAGE = "dedup"
OUTPUTS = (GROUPS, DEDUP)
#: What ``dedup --keep-one`` writes in its folder.
KEEP_ONE_WRITES = ("data.jsonl", "kept.npy", "keep_one.json")


@dataclass(frozen=True, kw_only=True)
class DedupOptions:
    """``threshold``: the cosine at or above which two documents of a cluster are
    near-duplicates, in (0, 1]; ``progress``: a progress bar. Checked when made."""

    threshold: float = ranged(0.0, 1.0, real=True, lo_open=True, default=DEFAULT_THRESHOLD)
    progress: bool = True

    def __post_init__(self) -> None:
        check_ranges(self)
        object.__setattr__(self, "threshold", float(self.threshold))


def workdir_threshold(w: Workdir) -> float:
    """The near-duplicate threshold of ``w``: its ``dedup`` stage's when that ran, else
    :data:`clusterclip.dedup.DEFAULT_THRESHOLD`."""
    rec = w.stage(STAGE) or {}
    return float((rec.get("params") or {}).get("threshold", DEFAULT_THRESHOLD))


def run(w: Workdir, options: DedupOptions) -> dict[str, Any]:
    """Run the ``dedup`` stage in ``w``: write ``W/groups.npy`` and ``W/dedup.json``.

    Cached like every stage (skipped when ``embed``/``cluster`` and the
    threshold are unchanged). Returns the summary (without the example texts)
    plus ``skipped``.
    """
    from clusterclip.distributed import is_main
    from clusterclip.storage.arrays import save_npy
    from clusterclip.storage.atomic import write_json

    threshold = options.threshold

    def work(run: Any) -> dict[str, Any] | None:
        if not is_main():
            return None
        t0 = time.perf_counter()
        X = w.embeddings()
        labels = w.labels(X.shape[0])
        groups, pairs = near_duplicate_groups(X, labels, threshold, progress=options.progress)
        texts = None
        if w.path(CORPUS_META).is_file():
            corpus = w.corpus()
            if len(corpus) == labels.size:
                texts = corpus.texts
        summary = group_summary(groups, labels, threshold, pairs, texts)
        save_npy(w.path(GROUPS), groups)
        write_json(w.path(DEDUP), summary)
        info = {k: v for k, v in summary.items() if k != "largest_groups"}
        info["seconds"] = round(time.perf_counter() - t0, 3)
        return info

    return w.run_stage(STAGE, key={"threshold": threshold}, reads=[EMBEDDINGS, LABELS],
                       maybe_reads=[CORPUS], outputs=OUTPUTS, work=work)


def keep_one(w: Workdir, out: Any, *, overwrite: bool = False) -> dict[str, Any]:
    """Write the deduplicated corpus to folder ``out``: ``data.jsonl`` (the input records
    of one document per group, the one nearest its cluster centroid, in corpus order;
    Parquet values JSON lacks in the form of :mod:`clusterclip.corpus.records`),
    ``kept.npy`` (their int64 indices) and ``keep_one.json``; built aside, then moved
    into place. Needs a current ``dedup`` stage and the corpus index."""
    from clusterclip.corpus.records import field_types, record_json
    from clusterclip.storage.atomic import write_json
    from clusterclip.storage.outputs import atomic_output_dir, check_output_dir, made_from

    with made_from(w.root):
        check_output_dir(out, STAGE, overwrite=overwrite, protected=w.protected(),
                         writes=KEEP_ONE_WRITES)
    with w.locked(), made_from(w.root):
        w.reload()
        w.upstream([GROUPS, SCORES, CORPUS])
        groups = w.groups()
        scores = w.scores()
        corpus = w.corpus()
        if not groups.size == scores.size == len(corpus):
            raise InputError(f"{w.root}: {GROUPS}, {SCORES} and the corpus disagree on the "
                             f"number of documents; rerun `clusterclip dedup`")
        kept = representatives(groups, scores)
        with atomic_output_dir(out, STAGE, overwrite=overwrite) as tmp:
            n = 0
            with open(tmp / "data.jsonl", "w", encoding="utf-8") as f:
                for _, rec in corpus.iter_records_at(kept):
                    f.write(record_json(rec) + "\n")
                    n += 1
            if n != kept.size:
                raise RuntimeError(f"keep-one wrote {n} records for {kept.size} documents")
            np.save(tmp / "kept.npy", kept)
            summary = {"documents": int(groups.size), "kept": int(kept.size),
                       "dropped": int((groups >= 0).sum() - kept.size),
                       "excluded": int((groups < 0).sum()),
                       "rule": "one document per near-duplicate group: the highest cosine to "
                               "its cluster centroid (W/scores.npy), ties to the smallest index",
                       "field_types": field_types(corpus.files)}
            write_json(tmp / "keep_one.json", summary)
    return summary
