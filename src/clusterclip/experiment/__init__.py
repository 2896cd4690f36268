"""Does balancing train a better model? A small byte-level LM per sampling strategy.

Data flow: ``W/labels.npy`` + ``W/corpus/`` -> stratified held-out split ->
per (strategy, seed): sampler schedule -> packed windows -> training ->
held-out loss (micro, macro, tail, head, train gap) and what the schedule fed
(repetition, clusters clipped, tail / head token share) -> ``W/experiment/``.
The budget is in epochs-equivalent of the training tokens (default 3), so
small clusters repeat and ClusterClip's clip binds. Every finished run is
stored (``W/experiment/runs/``), so a killed experiment resumes; results.md
opens with a computed verdict (:mod:`~clusterclip.experiment.verdict`).

Pure pieces (numpy in, numpy out): :mod:`~clusterclip.experiment.data`
(tokens, split, packing; token-balanced weights live in :mod:`clusterclip.sampling.budget`) and
:mod:`~clusterclip.experiment.metrics`. Torch is imported by the model and
training modules only.
"""

from __future__ import annotations

from clusterclip.experiment.config import DEFAULT_MODEL, MODEL_PRESETS
from clusterclip.experiment.data import (
    encode_documents,
    matched_train_sample,
    pack_sequences,
    stratified_split,
    stratified_subsample,
)
from clusterclip.experiment.metrics import (
    METRICS,
    SCHEDULE_STATS,
    mean_std,
    per_cluster_loss,
    schedule_stats,
    summarize,
)
from clusterclip.experiment.runner import (
    DEFAULT_EPOCHS,
    DEFAULT_MAX_DOCS,
    DEFAULT_STRATEGIES,
    QUICK_EPOCHS,
    STRATEGIES,
    ExperimentConfig,
    RunStore,
    compare_strategies,
    run_experiment,
)
from clusterclip.experiment.verdict import compute_verdict, verdict_lines
from clusterclip.sampling.budget import token_balanced_weights

__all__ = [
    "DEFAULT_EPOCHS", "DEFAULT_MAX_DOCS", "DEFAULT_MODEL", "DEFAULT_STRATEGIES", "METRICS",
    "MODEL_PRESETS", "QUICK_EPOCHS", "SCHEDULE_STATS", "STRATEGIES", "ExperimentConfig",
    "RunStore", "compare_strategies", "compute_verdict", "encode_documents",
    "matched_train_sample", "mean_std", "pack_sequences", "per_cluster_loss", "run_experiment",
    "schedule_stats", "stratified_split", "stratified_subsample", "summarize",
    "token_balanced_weights", "verdict_lines",
]
