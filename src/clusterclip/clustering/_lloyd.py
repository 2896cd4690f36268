"""The torch backend of :class:`~clusterclip.clustering.KMeans`: restarts of Lloyd's loop.

Each restart starts from greedy k-means++ (or given centroids), alternates
assignment passes and M-steps until the objective changes by less than
``tol`` (relative) or ``max_iter`` updates are done, then re-seeds clusters
left empty by the last assignment. The restart with the best objective is
returned as a :class:`~clusterclip.clustering._passes.Fit`.

With ``fit_sample`` (:func:`fit_on_sample`), all of that runs on a seeded sample of
the valid rows (each rank holds the sampled rows of its shard, so the sample's
passes are sharded and all-reduced as the full fit's are), then one streamed
assignment pass labels every row with the sample's centroids.
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
from clusterclip.errors import InputError

# Passes at the end that re-seed clusters left empty by the last assignment.
_MAX_REPAIRS = 10
# Key of the fit sample's generator, beside the seed (k-means++ uses [seed, restart]).
_SAMPLE_KEY = 0x46495453  # "FITS"


def fit_torch(X: np.ndarray, valid: np.ndarray | None, valid_sizes: list[int], *,
              n_clusters: int, max_iter: int, n_init: int, tol: float, metric: str, seed: int,
              device: str, chunk_rows: int, init: Any, progress: bool,
              fit_sample: int | None = None) -> Fit:
    """Best of ``n_init`` runs of Lloyd's loop over this rank's rows ``X`` (a shard
    under torch.distributed; ``valid_sizes``: every rank's count of valid rows).
    ``fit_sample`` below the number of valid rows: :func:`fit_on_sample`."""
    import torch

    if fit_sample is not None and fit_sample < sum(valid_sizes):
        return fit_on_sample(X, valid, valid_sizes, fit_sample, n_clusters=n_clusters,
                             max_iter=max_iter, n_init=n_init, tol=tol, metric=metric,
                             seed=seed, device=device, chunk_rows=chunk_rows, init=init,
                             progress=progress)

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


def sample_rows(valid: np.ndarray | None, valid_sizes: list[int], m: int, seed: int
                ) -> np.ndarray:
    """This rank's rows (local indices, ascending) of a seeded sample of ``m`` of all ranks'
    valid rows, drawn over their global order: the same sample whatever the sharding."""
    rank, _ = D.rank_and_world()
    rng = np.random.default_rng([seed, _SAMPLE_KEY])
    picks = np.sort(rng.choice(sum(valid_sizes), size=m, replace=False))
    lo = sum(valid_sizes[:rank])
    a, b = np.searchsorted(picks, [lo, lo + valid_sizes[rank]])
    mine = picks[a:b] - lo
    return mine if valid is None else np.flatnonzero(valid)[mine]


def fit_on_sample(X: np.ndarray, valid: np.ndarray | None, valid_sizes: list[int], m: int, *,
                  seed: int, device: str, chunk_rows: int, metric: str, n_clusters: int,
                  **fit: Any) -> Fit:
    """k-means++ and Lloyd (:func:`fit_torch`) on a seeded sample of ``m`` valid rows, then
    one streamed assignment pass over every row of ``X`` with the sample's centroids.

    The returned objective, inertia, labels and scores are the full data's; ``history``
    is the sample's (its last entry is ``sample_objective``)."""
    import torch

    mine = sample_rows(valid, valid_sizes, m, seed)
    reader = RowReader(X, chunk_rows)
    rank, _ = D.rank_and_world()
    row_offset = sum(D.all_sizes(X.shape[0])[:rank])
    comm = D.Comm()
    Xs = reader.take(mine)
    bad = np.flatnonzero(~np.isfinite(Xs).all(axis=1))
    bad_row = int(mine[bad[0]]) + row_offset if bad.size else -1
    if comm.any(bad_row >= 0):  # named by its row in X, not in the sample
        raise InputError(f"embeddings: row {min(r for r in comm.sizes(bad_row) if r >= 0)} "
                         f"holds NaN or infinite values")
    t0 = time.perf_counter()
    on_sample = fit_torch(Xs, None, D.all_sizes(len(mine)), seed=seed, device=device,
                          chunk_rows=chunk_rows, metric=metric, n_clusters=n_clusters, **fit)
    sample_seconds = time.perf_counter() - t0
    del Xs
    dev = torch_device(device)
    engine = Engine(reader, valid, row_offset, metric, dev, comm)
    p = engine.run(torch.as_tensor(on_sample.centroids, device=dev), accumulate=False,
                   check_finite=True)
    empty = int((p.counts == 0).sum())
    if empty:
        warnings.warn(f"k-means: {empty} of {n_clusters} clusters are empty after labelling "
                      f"every row with the centroids of the {m}-row sample", stacklevel=4)
    return Fit(centroids=on_sample.centroids, labels=p.labels, scores=p.scores,
               history=on_sample.history, objective=p.objective_sum / p.n_valid,
               inertia=p.extra["inertia"], n_iter=on_sample.n_iter, reseeds=on_sample.reseeds,
               empty=empty, init_seconds=on_sample.init_seconds,
               init_cpu_seconds=on_sample.init_cpu_seconds, sample_rows=m,
               sample_objective=on_sample.objective, sample_seconds=sample_seconds)
