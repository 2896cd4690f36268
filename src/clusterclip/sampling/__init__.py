"""Sampling: ClusterClip and its baselines (random, uniform, temperature).

Arrays in, indices out; needs only numpy. The torch adapter lives in
:mod:`clusterclip.sampling.torch` (imports torch).
"""

from clusterclip.sampling.sampler import STRATEGIES, ClusterClipSampler
from clusterclip.sampling.schedule import write_schedule

__all__ = ["STRATEGIES", "ClusterClipSampler", "write_schedule"]
