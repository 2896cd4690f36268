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
    ``cluster_weights`` takes a mixture's weights
    (:meth:`~clusterclip.sampling.mixture.Mixture.cluster_weights`; zeros allowed:
    those clusters are never drawn), with ``strategy=mixture.timing, clip=mixture.clip``.
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


with_spec_signature(ClusterClipTorchSampler.__init__)
