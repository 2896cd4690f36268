"""Sampling: ClusterClip and its baselines (random, uniform, temperature, paced).

Arrays in, indices out; needs only numpy.
[`make_sampler`][clusterclip.sampling.make_sampler] returns the sampler for any
parameters ([`SamplerSpec`][clusterclip.sampling.SamplerSpec] checks them); every
sampler is a [`BaseSampler`][clusterclip.sampling.BaseSampler]. Mixtures (cluster
weights, clip and timing as a file) live in
[`clusterclip.sampling.mixture`][clusterclip.sampling.mixture], the torch adapter in
[`clusterclip.sampling.torch`][clusterclip.sampling.torch.ClusterClipTorchSampler]
(imports torch).
"""

from clusterclip.sampling.factory import make_sampler
from clusterclip.sampling.groups import GroupClipSampler
from clusterclip.sampling.mixture import Mixture, Stage, read_mixture, write_mixture
from clusterclip.sampling.online import OnlineMixer
from clusterclip.sampling.sampler import ClusterClipSampler
from clusterclip.sampling.schedule import write_schedule
from clusterclip.sampling.spec import STRATEGIES, SamplerSpec
from clusterclip.sampling.stream import BaseSampler

__all__ = ["STRATEGIES", "BaseSampler", "ClusterClipSampler", "GroupClipSampler", "Mixture",
           "OnlineMixer",
           "SamplerSpec", "Stage", "make_sampler", "read_mixture", "write_mixture",
           "write_schedule"]
