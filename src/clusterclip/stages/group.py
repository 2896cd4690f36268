"""The ``group`` stage: ``W/corpus`` grouped by ``W/labels.npy`` into a folder (see
:mod:`clusterclip.grouping` for the layout and its checks)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterclip.limits import MAX_ROWS, check_ranges, ranged
from clusterclip.workdir import CORPUS, LABELS, SCORES, Workdir


@dataclass(frozen=True, kw_only=True)
class GroupOptions:
    """``out``: the output folder; ``docs_per_file``: documents per ``data_{j}.jsonl``;
    ``overwrite``: replace a folder an earlier ``group`` did not write; ``progress``: a
    bar on stderr. Checked on construction (InputError naming the parameter)."""

    out: str | os.PathLike[str]
    docs_per_file: int = ranged(1, MAX_ROWS, default=100_000)
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        check_ranges(self)


def run(w: Workdir, options: GroupOptions) -> dict[str, Any]:
    """Group ``w``'s corpus by its labels into ``options.out``; the summary.

    Refuses (InputError, before any work) an ``out`` that is the work
    directory, part of it, an input, or a parent of one of them, or an existing
    folder that an earlier ``clusterclip group`` did not write (unless
    ``overwrite``); and labels from a ``cluster`` run that did not finish or is
    older than the corpus. Recorded in the manifest as stage ``group``.
    """
    from clusterclip.grouping import WRITES, group_corpus
    from clusterclip.storage.outputs import check_output_dir, made_from

    o = options
    out = str(Path(o.out).resolve())
    with w.locked(), made_from(w.root):
        check_output_dir(o.out, "group", overwrite=o.overwrite, protected=w.protected(),
                         writes=WRITES)

        def work(run: Any) -> dict[str, Any]:
            corpus = w.corpus()
            corpus.verify_files()
            labels = w.labels(len(corpus))
            scores = w.scores()
            return group_corpus(corpus, labels, scores, o.out, docs_per_file=o.docs_per_file,
                                overwrite=o.overwrite, progress=o.progress)

        return w.run_stage("group", key={"out": out, "docs_per_file": o.docs_per_file},
                           reads=[LABELS, SCORES, CORPUS], outputs=[out],
                           work=work, cache=False)
