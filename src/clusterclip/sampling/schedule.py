"""Write a sampling schedule to disk (the file edge of the sampler)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from clusterclip.io import atomic_path
from clusterclip.sampling.sampler import ClusterClipSampler


def write_schedule(labels: Any, path: str | os.PathLike[str], *, num_samples: int,
                   strategy: str = "clusterclip", clip: int = 4, alpha: float = 0.0,
                   seed: int = 0, rank: int = 0, world_size: int = 1,
                   consumed_samples: int = 0, cluster_weights: Any = None,
                   progress: bool = False) -> dict[str, Any]:
    """Write this rank's schedule as an int64 ``.npy`` at ``path``; return the summary.

    The parameters are validated before anything is written; the array is
    streamed block by block into a memory map (memory stays bounded for any
    ``num_samples``) and moved into place only when complete.
    """
    sampler = ClusterClipSampler(labels, num_samples, strategy=strategy, clip=clip, alpha=alpha,
                                 seed=seed, rank=rank, world_size=world_size,
                                 consumed_samples=consumed_samples,
                                 cluster_weights=cluster_weights)
    n = len(sampler)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="sample", unit="idx", unit_scale=True, leave=False)
    try:
        with atomic_path(path) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int64, shape=(n,))
            i = 0
            for block in sampler.blocks():
                out[i:i + block.size] = block
                i += block.size
                if bar is not None:
                    bar.update(block.size)
            out.flush()
            del out
    finally:
        if bar is not None:
            bar.close()
    summary = sampler.summary()
    summary["written"] = n
    return summary
