"""``torch.utils.data.Sampler`` adapter (optional: imports torch).

``ClusterClipTorchSampler`` wraps
[`ClusterClipSampler`][clusterclip.sampling.ClusterClipSampler] for ``DataLoader``
(any ``num_workers``: the sampler runs in the main process) and torchdata's
``StatefulDataLoader`` (it is ``Stateful``: the loader saves and restores
``state_dict`` with its own). There is no ``set_epoch``: the schedule already spans
the whole run (``num_samples`` draws over all epochs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from clusterclip import distributed as D
from clusterclip.sampling.factory import make_sampler
from clusterclip.sampling.spec import with_spec_signature
from clusterclip.sampling.stream import BaseSampler


class ClusterClipTorchSampler(Sampler[int]):
    """Yields this rank's document indices as Python ints (a ``torch`` ``Sampler``).

    For ``DataLoader`` (any ``num_workers``: the sampler runs in the main process)
    and torchdata's ``StatefulDataLoader`` (``state_dict`` / ``load_state_dict``,
    plain JSON). Picklable. There is no ``set_epoch``: the schedule spans the whole
    run.

    Parameters
    ----------
    labels : array_like
        (N,) integer cluster id (>= 0) of each document; -1 excludes it.
    num_samples : int
        Length T of the global schedule (all epochs).
    rank : int or None
        This process's rank; default (None): that of the initialised
        ``torch.distributed`` process group, else 0.
    world_size : int or None
        Number of ranks; default (None): that of the process group, else 1.
    **options : Any
        Keyword-only: the other parameters of
        [`make_sampler`][clusterclip.sampling.make_sampler] (the fields of
        [`SamplerSpec`][clusterclip.sampling.SamplerSpec]). ``groups``
        (``W/groups.npy``) clips by near-duplicate group (a
        [`GroupClipSampler`][clusterclip.sampling.GroupClipSampler] inside);
        ``mixture`` takes a [`Mixture`][clusterclip.sampling.mixture.Mixture]
        (staged or not: its strategy and clip too, unless given);
        ``cluster_weights`` its weights (zeros allowed: those clusters are never
        drawn).

    Attributes
    ----------
    sampler : BaseSampler
        The sampler inside, from [`make_sampler`][clusterclip.sampling.make_sampler].

    Raises
    ------
    InputError
        If a parameter is not valid (as ``make_sampler``).

    Examples
    --------
    >>> import numpy as np
    >>> from torch.utils.data import DataLoader
    >>> from clusterclip.sampling.torch import ClusterClipTorchSampler
    >>> labels = np.array([0, 0, 0, 1, 1, 2])
    >>> sampler = ClusterClipTorchSampler(labels, 8, strategy="paced", clip=2)
    >>> batches = DataLoader(list(range(6)), batch_size=4, sampler=sampler)
    >>> [len(b) for b in batches]
    [4, 4]
    """

    def __init__(self, labels: Any, num_samples: int, *, rank: int | None = None,
                 world_size: int | None = None, **options: Any) -> None:
        group_rank, group_world = D.rank_and_world()
        rank = group_rank if rank is None else rank
        world_size = group_world if world_size is None else world_size
        self.sampler: BaseSampler = make_sampler(labels, num_samples, rank=rank,
                                                 world_size=world_size, **options)

    def __iter__(self) -> Iterator[int]:
        return iter(self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's resume state, plain JSON (the loader saves it with its own).

        Returns
        -------
        dict
            As [`BaseSampler.state_dict`][clusterclip.sampling.BaseSampler.state_dict].
        """
        return self.sampler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue exactly where ``state_dict`` was taken (any rank or world size).

        Parameters
        ----------
        state_dict : dict
            What [`state_dict`][clusterclip.sampling.torch.ClusterClipTorchSampler.state_dict]
            returned.

        Raises
        ------
        InputError
            As [`BaseSampler.load_state_dict`][clusterclip.sampling.BaseSampler.load_state_dict].
        """
        self.sampler.load_state_dict(state_dict)

    def summary(self) -> dict[str, Any]:
        """JSON-able description of the global schedule and of this rank's share.

        Returns
        -------
        dict
            As [`ClusterClipSampler.summary`][clusterclip.sampling.ClusterClipSampler.summary].
        """
        return self.sampler.summary()

    @property
    def position(self) -> int:
        """The global position this rank has consumed up to.

        The ``at`` of a
        [`set_weights`][clusterclip.sampling.torch.ClusterClipTorchSampler.set_weights]
        call that changes the draws from the next one on.
        """
        return self.sampler.position

    def set_weights(self, weights: Any, at: int | None = None) -> None:
        """From global position ``at`` on, draw with cluster ``weights``, same clip.

        As [`ClusterClipSampler.set_weights`][clusterclip.sampling.ClusterClipSampler.set_weights]
        (adaptive mixing); ``state_dict`` records the call.

        Parameters
        ----------
        weights : array_like
            One weight per cluster id, finite and >= 0.
        at : int or None
            The global position the weights apply from; default (None):
            [`position`][clusterclip.sampling.torch.ClusterClipTorchSampler.position].

        Raises
        ------
        TypeError
            If the sampler inside is over near-duplicate groups (it has no
            ``set_weights``).
        InputError
            If ``at`` or ``weights`` are not valid (see ``ClusterClipSampler``).
        """
        set_weights = getattr(self.sampler, "set_weights", None)
        if set_weights is None:
            raise TypeError(f"{type(self.sampler).__name__} has no set_weights (a sampler "
                            f"over near-duplicate groups)")
        set_weights(weights, at)


with_spec_signature(ClusterClipTorchSampler.__init__)
