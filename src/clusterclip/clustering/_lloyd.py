"""The torch backend of :class:`~clusterclip.clustering.KMeans`: restarts of Lloyd's loop.

Each restart starts from greedy k-means++ (or given centroids), alternates
assignment passes and M-steps until the objective changes by less than
``tol`` (relative) or ``max_iter`` updates are done, then re-seeds clusters
left empty by the last assignment. The restart with the best objective is
returned as a :class:`~clusterclip.clustering._passes.Fit`.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._kmeanspp import init_kmeanspp, single_thread
from clusterclip.clustering._passes import Engine, Fit, normalise_rows, torch_device
from clusterclip.clustering._rows import RowReader

# Passes at the end that re-seed clusters left empty by the last assignment.
_MAX_REPAIRS = 10


def fit_torch(X: np.ndarray, valid: np.ndarray | None, valid_sizes: list[int], *,
              n_clusters: int, max_iter: int, n_init: int, tol: float, metric: str, seed: int,
              device: str, chunk_rows: int, init: Any, progress: bool) -> Fit:
    """Best of ``n_init`` runs of Lloyd's loop over this rank's rows ``X`` (a shard
    under torch.distributed; ``valid_sizes``: every rank's count of valid rows)."""
    import torch

    dev = torch_device(device)
    rank, _ = D.rank_and_world()
    reader = RowReader(X, chunk_rows)
    row_offset = sum(D.all_sizes(X.shape[0])[:rank])
    engine = Engine(reader, valid, row_offset, metric, dev, D.Comm())
    maximise = metric == "cosine"
    best: Fit | None = None
    init_seconds = init_cpu_seconds = 0.0
    for restart in range(n_init):
        t0, c0 = time.perf_counter(), time.process_time()
        if isinstance(init, str):
            with single_thread(dev):
                C = init_kmeanspp(reader, valid, valid_sizes, row_offset, n_clusters, metric,
                                  np.random.default_rng([seed, restart]), dev)
        else:
            C = torch.as_tensor(np.asarray(init, dtype=np.float32), device=dev)
            if metric == "cosine":
                C = normalise_rows(C)
        init_seconds += time.perf_counter() - t0
        init_cpu_seconds += time.process_time() - c0
        run = lloyd(engine, C, max_iter=max_iter, tol=tol, n_clusters=n_clusters,
                    desc=f"k-means (run {restart + 1})" if progress else None)
        better = best is None or (
            run.objective > best.objective if maximise else run.objective < best.objective)
        if better:
            best = run
    assert best is not None
    best.init_seconds, best.init_cpu_seconds = init_seconds, init_cpu_seconds
    return best


def lloyd(engine: Engine, C: Any, *, max_iter: int, tol: float, n_clusters: int,
          desc: str | None = None) -> Fit:
    """One run of Lloyd's loop from centroids ``C`` (a progress bar on rank 0 when ``desc``)."""
    history: list[float] = []
    reseeds: list[int] = []
    n_iter = 0
    bar = None
    if desc is not None and D.is_main():
        from tqdm import tqdm

        bar = tqdm(total=max_iter + 1, desc=desc, unit="pass", leave=False)
    check_finite = True
    for it in range(max_iter + 1):
        p = engine.run(C, accumulate=it < max_iter, check_finite=check_finite)
        check_finite = False
        f = p.objective_sum / p.n_valid
        history.append(f)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(objective=f"{f:.6f}")
        if it > 0 and abs(f - history[-2]) <= tol * max(abs(history[-2]), 1e-12):
            break
        if it == max_iter:
            break
        C, n_reseed = engine.update(C, p)
        reseeds.append(n_reseed)
        n_iter += 1
    # The last assignment may leave a cluster empty: re-seed and re-assign.
    repairs = 0
    while int((p.counts == 0).sum()) > 0 and repairs < _MAX_REPAIRS:
        C, n_reseed = engine.reseed_only(C, p)
        if n_reseed == 0:
            break
        reseeds.append(n_reseed)
        p = engine.run(C, accumulate=False, check_finite=False)
        history.append(p.objective_sum / p.n_valid)
        repairs += 1
    if bar is not None:
        bar.close()
    empty = int((p.counts == 0).sum())
    if empty:
        warnings.warn(f"k-means: {empty} of {n_clusters} clusters are empty (the data "
                      f"has fewer distinct rows than clusters)", stacklevel=4)
    return Fit(centroids=C.cpu().numpy().astype(np.float32), labels=p.labels, scores=p.scores,
               history=history, objective=history[-1], inertia=p.extra["inertia"],
               n_iter=n_iter, reseeds=reseeds, empty=empty)
