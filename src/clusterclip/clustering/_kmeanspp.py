"""Greedy k-means++ initialisation on a seeded sample of the valid rows (torch)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._passes import normalise_rows
from clusterclip.clustering._rows import RowReader
from clusterclip.errors import InputError

# Greedy k-means++ runs on a seeded sample of this many rows per cluster (at least
# _INIT_MIN_SAMPLE rows): k-means++ costs K passes over its input.
_INIT_SAMPLE_PER_CLUSTER = 8
_INIT_MIN_SAMPLE = 4096


@contextlib.contextmanager
def single_thread(dev: Any) -> Iterator[None]:
    """Run k-means++'s thousands of small tensor ops on one CPU thread: each parallel
    region costs a thread hand-off, which dominated (and was 6x slower) on a busy
    2-core machine; the ops are too small to gain from a second thread."""
    import torch

    if dev.type != "cpu":
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def init_kmeanspp(reader: RowReader, valid: np.ndarray | None, valid_sizes: list[int],
                   row_offset: int, K: int, metric: str, rng: np.random.Generator,
                   dev: Any) -> Any:
    """k-means++ on a seeded sample of the valid rows; identical on every rank.

    The sample is drawn over the global order of valid rows, so it does not
    depend on how the rows are split into shards.
    """
    import torch

    rank, _ = D.rank_and_world()
    n_valid = sum(valid_sizes)
    m = min(n_valid, max(_INIT_SAMPLE_PER_CLUSTER * K, _INIT_MIN_SAMPLE))
    picks = np.sort(rng.choice(n_valid, size=m, replace=False)) if m < n_valid \
        else np.arange(n_valid)
    lo = sum(valid_sizes[:rank])
    hi = lo + valid_sizes[rank]
    a, b = np.searchsorted(picks, [lo, hi])
    mine = picks[a:b] - lo
    if valid is not None:
        mine = np.flatnonzero(valid)[mine]
    sample = np.zeros((m, reader.d), dtype=np.float32)
    sample[a:b] = reader.take(mine)
    rows = np.zeros(m, dtype=np.int64)
    rows[a:b] = mine + row_offset
    S = D.all_reduce_sum(torch.from_numpy(sample)).to(dev)
    if not bool(torch.isfinite(S).all()):
        bad = int(torch.nonzero(~torch.isfinite(S).all(dim=1))[0, 0])
        row = int(D.all_reduce_sum(torch.from_numpy(rows))[bad])
        raise InputError(f"embeddings: row {row} holds NaN or infinite values")
    if metric == "cosine":
        S = normalise_rows(S)
    sq = (S * S).sum(dim=1)
    # Greedy k-means++ (as in scikit-learn): draw a few D^2-weighted candidates per
    # step and keep the one that lowers the total potential most. Plain k-means++
    # often starts at outliers on noisy high-dimensional embeddings.
    trials = 2 + int(math.log(K))
    chosen = [int(rng.integers(m))]
    d2 = (sq + sq[chosen[0]] - 2.0 * (S @ S[chosen[0]])).clamp_min(0.0).double()
    for _ in range(1, K):
        cum = torch.cumsum(d2, 0)
        total = float(cum[-1])
        if total > 0:
            r = torch.from_numpy(rng.random(trials) * total).to(device=dev, dtype=cum.dtype)
            cand = torch.searchsorted(cum, r).clamp_max(m - 1)
        else:  # fewer distinct rows than clusters: duplicates, re-seeded later
            cand = torch.from_numpy(rng.integers(m, size=trials)).to(dev)
        dist = (sq.unsqueeze(1) + sq[cand].unsqueeze(0) - 2.0 * (S @ S[cand].T)).clamp_min(0.0)
        pot = torch.minimum(d2.unsqueeze(1), dist.double())
        best = int(torch.argmin(pot.sum(dim=0)))
        chosen.append(int(cand[best]))
        d2 = pot[:, best].contiguous()
    return D.broadcast(S[chosen].clone())
