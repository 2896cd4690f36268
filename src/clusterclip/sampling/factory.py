"""``make_sampler``: the one way to get a sampler for any combination of parameters."""

from __future__ import annotations

from typing import Any

from clusterclip.sampling.groups import GroupClipSampler
from clusterclip.sampling.sampler import ClusterClipSampler
from clusterclip.sampling.spec import with_spec_signature
from clusterclip.sampling.stream import BaseSampler


def make_sampler(labels: Any, num_samples: int, **options: Any) -> BaseSampler:
    """The sampler of ``labels`` for any combination of parameters.

    Parameters
    ----------
    labels : array_like
        (N,) integer cluster id of each document (>= 0); -1 excludes a document.
    num_samples : int
        Length T of the global schedule.
    **options : Any
        Keyword-only: the other fields of
        [`SamplerSpec`][clusterclip.sampling.SamplerSpec] (``strategy``, ``clip``,
        ``alpha``, ``seed``, ``rank``, ``world_size``, ``consumed_samples``,
        ``cluster_weights``, ``cache_dir``, ``groups``, ``mixture``), checked there.

    Returns
    -------
    BaseSampler
        A [`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler], or with
        ``groups`` a [`GroupClipSampler`][clusterclip.sampling.GroupClipSampler]
        (each near-duplicate group one unit of the passes and of the clip); both are
        a [`BaseSampler`][clusterclip.sampling.BaseSampler].

    Raises
    ------
    InputError
        If a parameter is not valid, or ``num_samples`` exceeds the capacity of the
        clip (the message names the parameter and the smallest clip that serves).

    Examples
    --------
    >>> import numpy as np
    >>> from clusterclip.sampling import make_sampler
    >>> labels = np.array([0, 0, 0, 0, 1, 1, 2, -1])
    >>> sampler = make_sampler(labels, 12, strategy="clusterclip", clip=2, seed=0)
    >>> len(sampler), sampler.capacity
    (12, 14)
    >>> sorted(set(sampler)) == [0, 1, 2, 3, 4, 5, 6]  # document 7 is excluded
    True
    """
    if options.get("groups") is not None:
        return GroupClipSampler(labels, num_samples, **options)
    return ClusterClipSampler(labels, num_samples, **options)


with_spec_signature(make_sampler)
