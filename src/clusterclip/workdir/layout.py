"""The work directory's layout: the name of every artifact in W, said once.

Layout (each stage owns its names)::

    W/manifest.json        inputs (size, sha256), parameters, versions, stage status
    W/.lock                the lock file (holder: pid, command, since when)
    W/corpus/              corpus index written by ``embed`` (see clusterclip.corpus)
    W/embed/               ``embed``'s resumable shards while it runs
    W/embeddings.npy       N x d float, L2-normalised, corpus order
    W/valid.npy            bool[N]: True where the document has text (else label -1)
    W/labels.npy           int32[N] cluster id, -1 for excluded documents
    W/scores.npy           float32[N] cosine similarity to the assigned centroid
    W/centroids.npy        K x d float32
    W/schedule.npy         int64 document indices (``run --num-samples``)
    W/tokens.npy           int64[N] tokens per document (``--tokenizer``, clusterclip.tokens)
    W/groups.npy           int64[N] near-duplicate group (smallest member's index; -1 excluded)
    W/dedup.json           ``dedup``'s summary (clusterclip.dedup)
    W/map/                 the report's 2D map of a document sample (clusterclip.report.projection)
    W/search/mixture.json  the mixture ``search`` chose (read by experiment, report, export)
    W/report/, W/experiment/, W/search/, W/sweep/ (``cluster --sweep``)

Every stage, loader and message reads these constants (:data:`LABELS`, :data:`CORPUS`,
...); tests/test_layers.py refuses an artifact name spelled in any other module.
"""

from __future__ import annotations

MANIFEST = "manifest.json"
LOCK = ".lock"
# The names of the artifacts in W, said once: every stage, loader and message reads these.
CORPUS = "corpus"
CORPUS_META = "corpus/corpus.json"
EMBED_DIR = "embed"
EMBEDDINGS = "embeddings.npy"
VALID = "valid.npy"
LABELS = "labels.npy"
SCORES = "scores.npy"
CENTROIDS = "centroids.npy"
SCHEDULE = "schedule.npy"
TOKENS = "tokens.npy"
GROUPS = "groups.npy"
DEDUP = "dedup.json"
MAP = "map"
REPORT = "report"
EXPERIMENT = "experiment"
SEARCH = "search"
#: the mixture the ``search`` stage chose, read by ``experiment``, ``report`` and ``export``
MIXTURE_FILE = "search/mixture.json"
#: the readable results of the ``experiment`` and ``search`` stages (the report links them)
EXPERIMENT_RESULTS = "experiment/results.md"
SEARCH_RESULTS = "search/results.md"
SWEEP = "sweep"
# Which stage writes each name in W (first path component).
PRODUCERS = {CORPUS: "embed", EMBED_DIR: "embed", EMBEDDINGS: "embed", VALID: "embed",
             LABELS: "cluster", SCORES: "cluster", CENTROIDS: "cluster", SCHEDULE: "sample",
             REPORT: "report", EXPERIMENT: "experiment", SEARCH: "search", TOKENS: "tokens",
             SWEEP: "sweep", GROUPS: "dedup", DEDUP: "dedup", MAP: "map"}
# The command that reruns a stage (for error messages).
RERUN = {"sample": "clusterclip run --num-samples", "tokens": "clusterclip run --tokenizer",
         "map": "clusterclip report"}
# A folder's identity when no stage record describes it: the hash of this file.
_IDENTITY_FILE = {CORPUS: CORPUS_META}


def rerun(stage: str) -> str:
    """The command line that reruns ``stage``."""
    return RERUN.get(stage, f"clusterclip {stage}")
