"""``make_sampler``: the one way to get a sampler for any combination of parameters."""

from __future__ import annotations

from typing import Any

from clusterclip.sampling.groups import GroupClipSampler
from clusterclip.sampling.sampler import ClusterClipSampler
from clusterclip.sampling.spec import with_spec_signature
from clusterclip.sampling.stream import BaseSampler


def make_sampler(labels: Any, num_samples: int, **options: Any) -> BaseSampler:
    """The sampler of ``labels`` for these parameters (the fields of
    :class:`~clusterclip.sampling.spec.SamplerSpec`, checked there).

    Returns a :class:`~clusterclip.sampling.ClusterClipSampler`, or with ``groups``
    a :class:`~clusterclip.sampling.groups.GroupClipSampler` (each near-duplicate
    group one unit of the passes and of the clip); both are
    :class:`~clusterclip.sampling.stream.BaseSampler`.
    """
    if options.get("groups") is not None:
        return GroupClipSampler(labels, num_samples, **options)
    return ClusterClipSampler(labels, num_samples, **options)


with_spec_signature(make_sampler)
