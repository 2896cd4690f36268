"""Does balancing train a better model? A small byte-level LM per sampling strategy.

Data flow: ``W/labels.npy`` + ``W/corpus/`` -> stratified held-out split ->
per (strategy, seed): sampler schedule -> packed windows -> training ->
held-out loss (micro, macro, tail, head, train gap) and what the schedule fed
(repetition, clusters clipped, tail / head token share) -> ``W/experiment/``.
The budget is in epochs-equivalent of the training tokens (default 3), so
small clusters repeat and ClusterClip's clip binds. Every finished run is
stored (``W/experiment/runs/``), so a killed experiment resumes; results.md
opens with a computed verdict (:mod:`~clusterclip.experiment.verdict`).

The proxy model, its data steps (tokens, split, packing), metrics, run store and run
configuration (:class:`ExperimentConfig`, :mod:`clusterclip.lm.runconfig`) live in
:mod:`clusterclip.lm` (shared with ``search``); token-balanced weights in
:mod:`clusterclip.sampling.budget`. This package is the command's own logic: the core
(:mod:`~clusterclip.experiment.core`), the verdict and the output.
"""

from __future__ import annotations

from clusterclip.experiment.core import RunStore, compare_strategies
from clusterclip.experiment.verdict import compute_verdict, verdict_lines
from clusterclip.lm.config import DEFAULT_MODEL, MODEL_PRESETS
from clusterclip.lm.data import (
    encode_documents,
    matched_train_sample,
    pack_sequences,
    stratified_split,
    stratified_subsample,
)
from clusterclip.lm.metrics import (
    METRICS,
    SCHEDULE_STATS,
    mean_std,
    per_cluster_loss,
    schedule_stats,
    summarize,
)
from clusterclip.lm.runconfig import (
    DEFAULT_EPOCHS,
    DEFAULT_MAX_DOCS,
    DEFAULT_STRATEGIES,
    QUICK_EPOCHS,
    STRATEGIES,
    ExperimentConfig,
)
from clusterclip.sampling.budget import token_balanced_weights

__all__ = [
    "DEFAULT_EPOCHS", "DEFAULT_MAX_DOCS", "DEFAULT_MODEL", "DEFAULT_STRATEGIES", "METRICS",
    "MODEL_PRESETS", "QUICK_EPOCHS", "SCHEDULE_STATS", "STRATEGIES", "ExperimentConfig",
    "RunStore", "compare_strategies", "compute_verdict", "encode_documents",
    "matched_train_sample", "mean_std", "pack_sequences", "per_cluster_loss",
    "schedule_stats", "stratified_split", "stratified_subsample", "summarize",
    "token_balanced_weights", "verdict_lines",
]
