"""The work directory: every artifact of a run plus ``manifest.json``.

- :mod:`~clusterclip.workdir.layout`: the name of every artifact in W, said once
  (:data:`LABELS`, :data:`CORPUS`, ...);
- :mod:`~clusterclip.workdir.manifest`: :class:`Workdir`, its manifest, the stage records
  and :meth:`Workdir.run_stage`, the one way a stage runs (locked, its upstream checked,
  skipped when current);
- :mod:`~clusterclip.workdir.lock`: the lock that lets one process at a time write W;
- :mod:`~clusterclip.workdir.loaders`: each artifact read one way, checked.

Only the stages (:mod:`clusterclip.stages`) and the command line import this package: the
algorithm packages take arrays, paths or options. The names below are those of its
modules.
"""

from clusterclip.workdir.layout import (
    CENTROIDS,
    CORPUS,
    CORPUS_META,
    DEDUP,
    EMBED_DIR,
    EMBEDDINGS,
    EXPERIMENT,
    EXPERIMENT_RESULTS,
    GROUPS,
    LABELS,
    LOCK,
    MANIFEST,
    MAP,
    MIXTURE_FILE,
    PRODUCERS,
    REPORT,
    RERUN,
    SCHEDULE,
    SCORES,
    SEARCH,
    SEARCH_RESULTS,
    SWEEP,
    TOKENS,
    VALID,
    rerun,
)
from clusterclip.workdir.lock import command_line
from clusterclip.workdir.manifest import StageRun, Workdir, library_versions

__all__ = ["CENTROIDS", "CORPUS", "CORPUS_META", "DEDUP", "EMBED_DIR", "EMBEDDINGS",
           "EXPERIMENT", "EXPERIMENT_RESULTS", "GROUPS", "LABELS", "LOCK", "MANIFEST", "MAP",
           "MIXTURE_FILE", "PRODUCERS", "REPORT", "RERUN", "SCHEDULE", "SCORES", "SEARCH",
           "SEARCH_RESULTS", "SWEEP", "TOKENS", "VALID", "StageRun", "Workdir",
           "command_line", "library_versions", "rerun"]
