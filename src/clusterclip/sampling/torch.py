"""``torch.utils.data.Sampler`` adapter (optional: imports torch).

``ClusterClipTorchSampler`` wraps :class:`~clusterclip.sampling.ClusterClipSampler`
for ``DataLoader`` (any ``num_workers``: the sampler runs in the main process)
and torchdata's ``StatefulDataLoader`` (it is ``Stateful``: the loader saves
and restores ``state_dict`` with its own). There is no ``set_epoch``: the
schedule already spans the whole run (``num_samples`` draws over all epochs).
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
    """Yields this rank's document indices as Python ints.

    Same parameters as :func:`~clusterclip.sampling.make_sampler`; ``rank`` and
    ``world_size`` default to the initialised ``torch.distributed`` process
    group (else 0 and 1). ``groups`` (``W/groups.npy``) clips by near-duplicate
    group (a :class:`~clusterclip.sampling.groups.GroupClipSampler` inside).
    ``mixture`` takes a :class:`~clusterclip.sampling.mixture.Mixture` (staged or
    not: its strategy and clip too, unless given); ``cluster_weights`` its weights
    (zeros allowed: those clusters are never drawn). ``set_weights`` changes the
    weights from a position on (adaptive mixing).
    Picklable; ``state_dict`` is plain JSON.
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
        return self.sampler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state_dict)

    def summary(self) -> dict[str, Any]:
        return self.sampler.summary()

    @property
    def position(self) -> int:
        """The global position this rank has consumed up to (the ``at`` of a
        ``set_weights`` call that changes the draws from the next one on)."""
        return self.sampler.position

    def set_weights(self, weights: Any, at: int | None = None) -> None:
        """From global position ``at`` (default :attr:`position`) on, draw with cluster
        ``weights`` under the same clip (:meth:`~clusterclip.sampling.
        ClusterClipSampler.set_weights`); ``state_dict`` records the call."""
        set_weights = getattr(self.sampler, "set_weights", None)
        if set_weights is None:
            raise TypeError(f"{type(self.sampler).__name__} has no set_weights (a sampler "
                            f"over near-duplicate groups)")
        set_weights(weights, at)


with_spec_signature(ClusterClipTorchSampler.__init__)
