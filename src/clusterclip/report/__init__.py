"""Report: what the clusters are and what mixture training will see.

Pure cores (arrays in, numbers out) live in :mod:`~clusterclip.report.stats`
(cluster sizes, streaming schedule statistics), :mod:`~clusterclip.report.metrics`
(NMI, ARI, purity); choosing the clip R for a budget is the sampler's rule
(:mod:`~clusterclip.sampling.clip`, also the default R of ``sample`` and ``run``).
:mod:`~clusterclip.report.plots` draws the figures and
:func:`~clusterclip.report.build.write_report` reads a work directory and writes
``W/report/`` (the ``report`` stage: :mod:`clusterclip.stages.report`).
"""

from __future__ import annotations

from clusterclip.report.build import ReportOptions
from clusterclip.report.metrics import (
    adjusted_rand_index,
    cluster_label_agreement,
    normalized_mutual_info,
    purity,
)
from clusterclip.report.stats import ScheduleStats, cluster_sizes, schedule_summary, size_profile
from clusterclip.sampling.clip import choose_clip, expected_draws, quartile_clusters

__all__ = [
    "ReportOptions",
    "ScheduleStats",
    "adjusted_rand_index",
    "choose_clip",
    "cluster_label_agreement",
    "cluster_sizes",
    "expected_draws",
    "normalized_mutual_info",
    "purity",
    "quartile_clusters",
    "schedule_summary",
    "size_profile",
]
