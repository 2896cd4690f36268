"""The ``report`` stage: ``W/report/`` (or another folder) from the labels, the corpus,
the schedule and what the other stages left (see :mod:`clusterclip.report.build`); it
runs (or reuses) the ``map`` stage for the page's map."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.report.build import ReportOptions, Sources
from clusterclip.workdir import (
    CENTROIDS,
    CORPUS,
    EXPERIMENT_RESULTS,
    LABELS,
    MAP,
    MIXTURE_FILE,
    REPORT,
    SCHEDULE,
    SCORES,
    SEARCH_RESULTS,
    Workdir,
)

__all__ = ["ReportOptions", "run"]


def run(w: Workdir, options: ReportOptions) -> dict[str, Any]:
    """Write the report of ``w`` (index.html, summary.json, clusters.csv, clusters.md, PNG
    figures, report.md) into ``options.out`` (None: ``W/report``); return the summary.

    The report directory is replaced atomically, and only when it is new, empty or an
    earlier report (or with ``overwrite``; never the work directory, an input, or a
    folder holding them). Run under the work directory's lock, refused when the labels
    (or ``W/schedule.npy``) come from a stage that did not finish or is stale, and
    reused when its inputs and parameters are unchanged.

    Raises :class:`InputError` for missing labels, a schedule with indices outside the
    corpus, an unknown label field or a budget over capacity; nothing is written then.
    """
    from clusterclip.report.build import WRITES, Counted, stage_key, write_report
    from clusterclip.stages import map as map_stage
    from clusterclip.storage.outputs import check_output_dir, made_from, refuse_protected

    opts, root = options, w.root
    target = Path(opts.out) if opts.out is not None else root / REPORT
    own = target.resolve() == (root / REPORT).resolve()
    schedule = opts.schedule
    in_w = schedule is not None and Path(schedule).resolve() == (root / SCHEDULE).resolve()
    src = sources(w)
    key = stage_key(src, opts, target)
    built: dict[str, Any] = {}
    counted: dict[str, Any] = {}

    def with_tokens() -> dict[str, Any]:
        counted.update(_token_inputs(w))
        if counted["groups"] is not None:  # repetition per near-duplicate group too
            key["groups"] = w.stage("dedup")["fingerprint"]
        if "source" in counted:
            rec = w.stage("tokens") if counted["source"]["method"] == "tokenizer" else None
            return {**key, "token_counts": {**counted["source"],
                                            "stage": rec and rec.get("fingerprint")}}
        return key

    def work(run: Any) -> dict[str, Any]:
        options = map_stage.MapOptions(sample=opts.map_sample, seed=opts.map_seed,
                                       progress=opts.progress)
        built.update(write_report(src, opts, target, Counted(
            tokens=counted.get("tokens"), source=counted.get("source"),
            groups=counted.get("groups")), lambda: map_stage.run(w, options)))
        return {"out": str(target)}

    with w.locked(), made_from(root):
        given = () if schedule is None else ((Path(schedule), "the schedule", False),)
        if own:  # W/report: the stage runner checks that it is ours; never a schedule's folder
            refuse_protected(target, given, "out")
        else:
            check_output_dir(target, "report", overwrite=opts.overwrite, writes=WRITES,
                             protected=w.protected(own=(REPORT,)) + given)
        w.run_stage("report", key=with_tokens, work=work,
                    reads=[LABELS] + ([SCHEDULE] if in_w else []),
                    maybe_reads=[CENTROIDS, CORPUS],
                    inputs=[schedule] if schedule is not None and not in_w else [],
                    outputs=[REPORT if own else str(target.resolve())],
                    overwrite=opts.overwrite)
    if built:
        return built
    from clusterclip.storage.jsonfile import read_json

    return read_json(target / "summary.json", "a report summary")


def sources(w: Workdir) -> Sources:
    """The files of ``w`` that the report reads (:class:`~clusterclip.report.build.Sources`)."""
    return Sources(root=w.root, map=w.path(MAP), labels=w.path(LABELS), centroids=w.path(CENTROIDS),
                   scores=w.path(SCORES), corpus=w.path(CORPUS), mixture=w.path(MIXTURE_FILE),
                   experiment_results=w.path(EXPERIMENT_RESULTS),
                   search_results=w.path(SEARCH_RESULTS))


def _token_inputs(w: Workdir) -> dict[str, Any]:
    """``groups`` (W/groups.npy while current, else None) and, with a corpus index,
    ``tokens`` per document (W/tokens.npy while its stage is current, else the
    estimate) and their ``source``."""
    out: dict[str, Any] = {"groups": w.current_groups()}
    if w.path(CORPUS).is_dir():
        from clusterclip.stages.tokens import recorded

        tokens, out["source"] = recorded(w)
        # int32 holds any document's token count (4 bytes per document, not 8).
        fits = tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < 2**31)
        out["tokens"] = tokens.astype(np.int32) if fits else tokens
    return out
