"""Does balancing train a better model? A small byte-level LM per sampling strategy.

Data flow: ``W/labels.npy`` + ``W/corpus/`` -> stratified held-out split ->
per (strategy, seed): sampler schedule -> packed windows -> training ->
held-out loss (micro, macro, tail, head, train gap) and what the schedule fed
(repetition, clusters clipped, tail / head token share) -> ``W/experiment/``.
The budget is in epochs-equivalent of the training tokens (default 2), so
small clusters repeat and ClusterClip's clip binds.

Pure pieces (numpy in, numpy out): :mod:`~clusterclip.experiment.data`
(tokens, split, packing, token-balanced weights) and
:mod:`~clusterclip.experiment.metrics`. Torch is imported by the model and
training modules only.
"""

from __future__ import annotations

from clusterclip.experiment.data import (
    encode_documents,
    matched_train_sample,
    pack_sequences,
    stratified_split,
    token_balanced_weights,
)
from clusterclip.experiment.metrics import METRICS, mean_std, per_cluster_loss, summarize
from clusterclip.experiment.runner import (
    DEFAULT_EPOCHS,
    DEFAULT_STRATEGIES,
    QUICK_EPOCHS,
    SCHEDULE_STATS,
    STRATEGIES,
    ExperimentConfig,
    compare_strategies,
    run_experiment,
    schedule_stats,
)

__all__ = [
    "DEFAULT_EPOCHS", "DEFAULT_STRATEGIES", "METRICS", "QUICK_EPOCHS", "SCHEDULE_STATS",
    "STRATEGIES", "ExperimentConfig", "compare_strategies", "encode_documents",
    "matched_train_sample", "mean_std", "pack_sequences", "per_cluster_loss", "run_experiment",
    "schedule_stats", "stratified_split", "summarize", "token_balanced_weights",
]
