"""Spherical (cosine) or euclidean K-means over embeddings streamed in chunks.

The torch backend runs on CPU or CUDA. Each pass over the rows reads
``chunk_rows`` rows at a time (from memory or a memory-mapped file), assigns
each row to its best centroid with one matrix product per block
(``X_block @ C.T`` and an argmax) and accumulates per-cluster sums in float64
with ``index_add_``, so the N x d matrix never has to fit in RAM or on the GPU
and the sums barely depend on the order of the rows. Under
``torch.distributed`` each process passes its own contiguous shard of rows;
sums, counts and the objective are all-reduced every iteration, so every rank
holds the same centroids and the labels equal a single-process run.

Objective: the mean cosine similarity of each row to its centroid (cosine,
maximised) or the mean squared euclidean distance (euclidean, minimised).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._rows import RowReader, check_matrix
from clusterclip.errors import InputError

METRICS = ("cosine", "euclidean")
BACKENDS = ("torch", "faiss")
# Rows per matrix product inside a chunk: the (block x K) score matrix then stays
# small enough to be re-read from cache by the argmax (measured: 16k rows beats
# both 4k and 64k on the 2-core reference machine for d=384, K=1000).
_BLOCK_ROWS = 16384
# Greedy k-means++ runs on a seeded sample of this many rows per cluster (at least
# _INIT_MIN_SAMPLE rows): k-means++ costs K passes over its input.
_INIT_SAMPLE_PER_CLUSTER = 8
_INIT_MIN_SAMPLE = 4096
# At most this many worst-fitting rows are candidates for re-seeding empty clusters.
_RESEED_POOL = 256
# Passes at the end that re-seed clusters left empty by the last assignment.
_MAX_REPAIRS = 10


@dataclass
class _Pass:
    """What one pass over the rows produces (on this rank unless reduced)."""

    labels: np.ndarray  # int32 (n_local,), -1 where not valid
    scores: np.ndarray  # float32 (n_local,)
    objective_sum: float = 0.0  # sum of cosine sims or squared distances, all ranks
    n_valid: int = 0  # all ranks
    counts: Any = None  # int64 tensor (K,), all ranks
    sums: Any = None  # float64 tensor (K, d), all ranks; None when not accumulated
    extra: dict[str, Any] = field(default_factory=dict)


class KMeans:
    """K-means over (N, d) embeddings, streamed in chunks; spherical by default.

    Parameters
    ----------
    n_clusters: number of clusters K (1 <= K <= number of valid rows).
    max_iter: maximum number of centroid updates.
    n_init: restarts from different seeds; the best objective is kept.
    tol: stop when the relative change of the objective falls below ``tol``.
    metric: ``"cosine"`` (spherical: unit-norm centroids, cosine similarity) or
        ``"euclidean"``.
    seed: seed of the initialisation; the same seed gives the same labels.
    device: torch device (``"cpu"``, ``"cuda"``, ...) for the torch backend.
    chunk_rows: rows read from the input at a time (bounds memory use).
    backend: ``"torch"`` or ``"faiss"`` (``faiss.Kmeans``; needs faiss installed,
        holds the valid rows in memory, single process only, ignores ``tol``).
    init: ``"k-means++"`` (on a seeded sample of rows) or a (K, d) array of
        initial centroids.
    progress: show a progress bar (stderr) per iteration.

    Attributes after :meth:`fit`
    ----------------------------
    cluster_centers_: float32 (K, d); unit-norm in cosine mode.
    labels_: int32 (n,), -1 for rows that are not valid.
    scores_: float32 (n,): cosine similarity to the assigned centroid (cosine) or
        minus the euclidean distance to it (euclidean); 0 for rows not valid.
    objective_history_: objective after each assignment pass (first entry: the
        initial centroids); cosine: mean similarity, euclidean: mean squared distance.
    objective_: the final objective; inertia_: sum of squared euclidean
        distances of valid rows to their centroids (rows L2-normalised in cosine mode).
    n_iter_: centroid updates done in the kept run; reseeds_: empty clusters
        re-seeded at each update of the kept run; empty_clusters_: clusters
        still empty at the end (only when there are fewer distinct rows than K).
    init_seconds_, init_cpu_seconds_: wall and CPU time spent initialising (torch).
    """

    def __init__(self, n_clusters: int, max_iter: int = 50, n_init: int = 1, tol: float = 1e-4,
                 metric: str = "cosine", seed: int = 0, device: str = "cpu",
                 chunk_rows: int = 65536, backend: str = "torch", init: Any = "k-means++",
                 progress: bool = False) -> None:
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.n_init = n_init
        self.tol = tol
        self.metric = metric
        self.seed = seed
        self.device = device
        self.chunk_rows = chunk_rows
        self.backend = backend
        self.init = init
        self.progress = progress

    # -- validation ------------------------------------------------------------
    def _check_params(self) -> None:
        def bad(name: str, why: str) -> InputError:
            return InputError(f"k-means: {name}={getattr(self, name)!r} {why}")

        if not isinstance(self.n_clusters, (int, np.integer)) or self.n_clusters < 1:
            raise bad("n_clusters", "must be an integer >= 1")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise bad("max_iter", "must be an integer >= 0")
        if not isinstance(self.n_init, (int, np.integer)) or self.n_init < 1:
            raise bad("n_init", "must be an integer >= 1")
        if not (isinstance(self.tol, (int, float)) and self.tol >= 0 and math.isfinite(self.tol)):
            raise bad("tol", "must be a finite number >= 0")
        if self.metric not in METRICS:
            raise bad("metric", f"must be one of {METRICS}")
        if self.backend not in BACKENDS:
            raise bad("backend", f"must be one of {BACKENDS}")
        if not isinstance(self.chunk_rows, (int, np.integer)) or self.chunk_rows < 1:
            raise bad("chunk_rows", "must be an integer >= 1")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise bad("seed", "must be an integer >= 0")

    def _torch_device(self) -> Any:
        import torch

        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError):
            raise InputError(f"k-means: device={self.device!r} is not a torch device") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise InputError(f"k-means: device={self.device!r} but CUDA is not available")
        return dev

    # -- public API --------------------------------------------------------------
    def fit(self, X: np.ndarray, valid: np.ndarray | None = None) -> KMeans:
        """Cluster the rows of ``X`` (float16/float32 (n, d) array or memmap).

        ``valid``: optional bool (n,) mask; rows where it is False are ignored
        (label -1). Under torch.distributed, ``X`` and ``valid`` are this rank's
        contiguous shard and every rank must call ``fit``.
        """
        self._check_params()
        check_matrix(X)
        if valid is not None:
            valid = np.asarray(valid)
            if valid.dtype != np.bool_ or valid.shape != (X.shape[0],):
                raise InputError(f"valid mask: expected bool of shape ({X.shape[0]},), "
                                 f"got {valid.dtype} of shape {valid.shape}")
        d = X.shape[1]
        dims = D.all_sizes(d)
        if len(set(dims)) != 1:
            raise InputError(f"embeddings: ranks disagree on the dimension ({dims})")
        n_valid_local = int(X.shape[0] if valid is None else valid.sum())
        valid_sizes = D.all_sizes(n_valid_local)
        n_valid = sum(valid_sizes)
        if self.n_clusters > n_valid:
            raise InputError(f"k-means: n_clusters={self.n_clusters} exceeds the number of "
                             f"valid rows ({n_valid})")
        if not (isinstance(self.init, str) and self.init == "k-means++"):
            init = np.asarray(self.init)
            if init.shape != (self.n_clusters, d) or not np.isfinite(init).all():
                raise InputError(f"k-means: init must be 'k-means++' or a finite "
                                 f"({self.n_clusters}, {d}) array, got shape {init.shape}")
        if self.backend == "faiss":
            from clusterclip.clustering._faiss import fit_faiss

            return fit_faiss(self, X, valid)
        return self._fit_torch(X, valid, valid_sizes)

    def predict(self, X: np.ndarray, valid: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """``(labels int32 (n,), scores float32 (n,))`` of ``X`` against the fitted centroids."""
        if not hasattr(self, "cluster_centers_"):
            raise RuntimeError("KMeans.predict called before fit")
        return assign(X, self.cluster_centers_, metric=self.metric, device=self.device,
                      chunk_rows=self.chunk_rows, valid=valid)

    def fit_predict(self, X: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X, valid).labels_

    # -- torch backend -----------------------------------------------------------
    def _fit_torch(self, X: np.ndarray, valid: np.ndarray | None, valid_sizes: list[int]
                   ) -> KMeans:
        import torch

        dev = self._torch_device()
        rank, _ = D.rank_and_world()
        reader = RowReader(X, self.chunk_rows)
        row_offset = sum(D.all_sizes(X.shape[0])[:rank])
        engine = _Engine(reader, valid, row_offset, self.metric, dev, D.Comm())
        maximise = self.metric == "cosine"
        best: dict[str, Any] | None = None
        self.init_seconds_ = self.init_cpu_seconds_ = 0.0
        for restart in range(self.n_init):
            t0, c0 = time.perf_counter(), time.process_time()
            if isinstance(self.init, str):
                with _single_thread(dev):
                    C = _init_kmeanspp(reader, valid, valid_sizes, row_offset, self.n_clusters,
                                       self.metric,
                                       np.random.default_rng([self.seed, restart]), dev)
            else:
                C = torch.as_tensor(np.asarray(self.init, dtype=np.float32), device=dev)
                if self.metric == "cosine":
                    C = _normalise_rows(C)
            self.init_seconds_ += time.perf_counter() - t0
            self.init_cpu_seconds_ += time.process_time() - c0
            run = self._lloyd(engine, C, restart)
            better = best is None or (
                run["objective"] > best["objective"] if maximise
                else run["objective"] < best["objective"])
            if better:
                best = run
        assert best is not None
        self.cluster_centers_ = best["centroids"].cpu().numpy().astype(np.float32)
        self.labels_ = best["labels"]
        self.scores_ = best["scores"]
        self.objective_history_ = best["history"]
        self.objective_ = best["objective"]
        self.inertia_ = best["inertia"]
        self.n_iter_ = best["n_iter"]
        self.reseeds_ = best["reseeds"]
        self.empty_clusters_ = best["empty"]
        return self

    def _lloyd(self, engine: _Engine, C: Any, restart: int) -> dict[str, Any]:
        history: list[float] = []
        reseeds: list[int] = []
        n_iter = 0
        bar = None
        if self.progress and D.is_main():
            from tqdm import tqdm

            bar = tqdm(total=self.max_iter + 1, desc=f"k-means (run {restart + 1})",
                       unit="pass", leave=False)
        check_finite = True
        for it in range(self.max_iter + 1):
            p = engine.run(C, accumulate=it < self.max_iter, check_finite=check_finite)
            check_finite = False
            f = p.objective_sum / p.n_valid
            history.append(f)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(objective=f"{f:.6f}")
            if it > 0 and abs(f - history[-2]) <= self.tol * max(abs(history[-2]), 1e-12):
                break
            if it == self.max_iter:
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
            warnings.warn(f"k-means: {empty} of {self.n_clusters} clusters are empty (the data "
                          f"has fewer distinct rows than clusters)", stacklevel=3)
        return {"centroids": C, "labels": p.labels, "scores": p.scores, "history": history,
                "objective": history[-1], "inertia": p.extra["inertia"], "n_iter": n_iter,
                "reseeds": reseeds, "empty": empty}


@contextlib.contextmanager
def _single_thread(dev: Any) -> Iterator[None]:
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


def _normalise_rows(C: Any) -> Any:
    import torch

    return C / torch.linalg.vector_norm(C, dim=1, keepdim=True).clamp_min(1e-12)


class _Engine:
    """One rank's passes over its rows for fixed centroids, plus the M-step."""

    def __init__(self, reader: RowReader, valid: np.ndarray | None, row_offset: int,
                 metric: str, device: Any, comm: D.Comm) -> None:
        self.comm = comm
        self.reader = reader
        self.valid = valid
        self.row_offset = row_offset
        self.cosine = metric == "cosine"
        self.device = device

    def _workers(self) -> int:
        """Threads that each take whole blocks (CPU only; see :meth:`run`)."""
        import torch

        return 1 if self.device.type != "cpu" else max(1, torch.get_num_threads())

    def _state(self, w: int, block: int, K: int, d: int) -> dict[str, Any]:
        """Worker ``w``'s buffers, allocated once per fit: fresh multi-MB allocations
        every pass would page-fault on first touch and cost ~10% of a pass."""
        import torch

        states = getattr(self, "_states", {})
        key = (w, block, K, d)
        if key not in states:
            dev = self.device
            states[key] = {"sim": torch.empty(block, K, dtype=torch.float32, device=dev),
                           "best": torch.empty(block, dtype=torch.float32, device=dev),
                           "arg": torch.empty(block, dtype=torch.int64, device=dev),
                           "x64": torch.empty(block, d, dtype=torch.float64, device=dev)}
            self._states = states
        return states[key]

    def run(self, C: Any, accumulate: bool, check_finite: bool) -> _Pass:
        """Assign every row to its best centroid; optionally accumulate sums.

        On CPU the blocks of a chunk are shared among ``torch.get_num_threads()``
        Python threads, each running single-threaded torch/BLAS ops (they release
        the GIL). Coarse, FAISS-style parallelism: one hand-off per block instead
        of one per tensor op, which matters on a busy machine. Each thread keeps
        its own float64 sums, added in thread order at the end.
        """
        import torch

        K, d = C.shape
        dev = self.device
        n = self.reader.n
        labels = np.full(n, -1, dtype=np.int32)
        scores = np.zeros(n, dtype=np.float32)
        T = self._workers()
        block = max(1, min(_BLOCK_ROWS, -(-self.reader.chunk_rows // T)))
        ctx = {"C": C, "CT": C.t(), "K": K, "labels": labels, "scores": scores,
               "bias": None if self.cosine else -0.5 * (C * C).sum(dim=1),
               "accumulate": accumulate, "check_finite": check_finite}
        acc = []
        for w in range(T):
            st = self._state(w, block, K, d)
            st.update(counts=torch.zeros(K, dtype=torch.int64, device=dev),
                      sums=torch.zeros(K, d, dtype=torch.float64, device=dev)
                      if accumulate else None,
                      obj=torch.zeros((), dtype=torch.float64, device=dev),
                      inertia=torch.zeros((), dtype=torch.float64, device=dev), bad_row=-1)
            acc.append(st)
        saved_threads = torch.get_num_threads()
        pool = None
        if T > 1:
            from concurrent.futures import ThreadPoolExecutor

            torch.set_num_threads(1)
            pool = ThreadPoolExecutor(T)
        try:
            for start, rows in self.reader:
                if not rows.flags.writeable:  # torch warns on read-only arrays
                    rows = rows.copy()
                x_all = torch.from_numpy(rows).to(dev)
                if x_all.dtype != torch.float32:
                    x_all = x_all.float()
                vmask = None if self.valid is None else self.valid[start:start + len(rows)]
                starts = list(range(0, len(rows), block))
                jobs = [(x_all, start, vmask, starts[w::T], acc[w], ctx) for w in range(T)]
                if pool is None:
                    for job in jobs:
                        self._blocks(*job)
                else:
                    for f in [pool.submit(self._blocks, *job) for job in jobs]:
                        f.result()
        finally:
            if pool is not None:
                pool.shutdown()
                torch.set_num_threads(saved_threads)
        bad_rows = [st["bad_row"] for st in acc if st["bad_row"] >= 0]
        bad_row = min(bad_rows) if bad_rows else -1
        if self.comm.any(bad_row >= 0):
            rows_bad = [r for r in self.comm.sizes(bad_row) if r >= 0]
            raise InputError(f"embeddings: row {min(rows_bad)} holds NaN or infinite values")
        counts = self.comm.sum(sum(st["counts"] for st in acc))
        stats = self.comm.sum(torch.stack([sum(st["obj"] for st in acc),
                                           sum(st["inertia"] for st in acc)]))
        sums = None
        if accumulate:
            sums = acc[0]["sums"].clone()
            for st in acc[1:]:
                sums += st["sums"]
            sums = self.comm.sum(sums)
        return _Pass(labels=labels, scores=scores, objective_sum=float(stats[0]),
                     n_valid=int(counts.sum()), counts=counts, sums=sums,
                     extra={"inertia": float(stats[1])})

    def _blocks(self, x_all: Any, start: int, vmask: np.ndarray | None, b0s: list[int],
                st: dict[str, Any], ctx: dict[str, Any]) -> None:
        """Process the blocks starting at rows ``b0s`` of a chunk into worker state ``st``."""
        import torch

        K = ctx["K"]
        CT, bias = ctx["CT"], ctx["bias"]
        labels, scores = ctx["labels"], ctx["scores"]
        on_cpu = self.device.type == "cpu"
        for b0 in b0s:
            x = x_all[b0:b0 + st["sim"].shape[0]]
            nb = x.shape[0]
            g0 = start + b0
            sim = st["sim"][:nb]
            if self.cosine:
                torch.mm(x, CT, out=sim)
            else:
                torch.addmm(bias, x, CT, out=sim)
            best, arg = st["best"][:nb], st["arg"][:nb]
            if on_cpu:
                # numpy's argmax over contiguous rows is SIMD-vectorised and about
                # 4x faster than torch.max(dim=1) on CPU (measured, d=384, K=1000).
                sim_np = sim.numpy()
                idx = sim_np.argmax(axis=1)
                arg.copy_(torch.from_numpy(idx))
                best.copy_(torch.from_numpy(sim_np[np.arange(nb), idx]))
            else:
                torch.max(sim, dim=1, out=(best, arg))
            norm = torch.linalg.vector_norm(x, dim=1)
            if self.cosine:
                # Scaling a row does not change its argmax, so rows need not be
                # normalised for the product; only the score is divided by the norm.
                # A zero row has no direction: its score is 0.
                inv = norm.clamp_min(1e-12).reciprocal_()
                score = best * inv
                sqdist = (2.0 - 2.0 * score).clamp_min_(0.0)
            else:
                sqdist = (norm * norm - 2.0 * best).clamp_min_(0.0)
                score = sqdist.sqrt().neg_()
            vm_np = None if vmask is None else vmask[b0:b0 + nb]
            if vm_np is not None and vm_np.all():
                vm_np = None
            if vm_np is None:
                vm = None
                arg_v, score_v, sqdist_v = arg, score, sqdist
            else:
                vm = torch.from_numpy(np.array(vm_np, dtype=bool)).to(self.device)
                arg_v, score_v, sqdist_v = arg[vm], score[vm], sqdist[vm]
            if ctx["check_finite"] and st["bad_row"] < 0:
                finite = torch.isfinite(norm if vm is None else norm[vm])
                if not bool(finite.all()):
                    first = int(torch.nonzero(~finite)[0, 0])
                    idx_v = np.arange(nb) if vm_np is None else np.flatnonzero(vm_np)
                    st["bad_row"] = self.row_offset + g0 + int(idx_v[first])
            lab_np = arg.numpy() if on_cpu else arg.cpu().numpy()
            sc_np = score.numpy() if on_cpu else score.cpu().numpy()
            if vm_np is None:
                labels[g0:g0 + nb] = lab_np
                scores[g0:g0 + nb] = sc_np
            else:
                labels[g0:g0 + nb] = np.where(vm_np, lab_np, -1)
                scores[g0:g0 + nb] = np.where(vm_np, sc_np, 0.0)
            st["counts"] += torch.bincount(arg_v, minlength=K)
            st["obj"] += (score_v if self.cosine else sqdist_v).sum(dtype=torch.float64)
            st["inertia"] += sqdist_v.sum(dtype=torch.float64)
            if ctx["accumulate"]:
                x64 = st["x64"][:nb]
                x64.copy_(x)
                # Embeddings are usually unit rows already; skip the scaling then.
                if self.cosine and float((norm - 1.0).abs().max()) > 1e-6:
                    x64.mul_(inv.unsqueeze(1))
                st["sums"].index_add_(0, arg_v, x64 if vm is None else x64[vm])

    def update(self, C: Any, p: _Pass) -> tuple[Any, int]:
        """M-step: new centroids from the pass's sums; empty clusters re-seeded."""
        import torch

        new = p.sums.clone()
        nonempty = p.counts > 0
        if self.cosine:
            norms = torch.linalg.vector_norm(new, dim=1)
            # A cluster whose members cancel out (sum ~ 0) keeps its old direction.
            ok = nonempty & (norms > 1e-12)
            new = torch.where(ok.unsqueeze(1), new / norms.clamp_min(1e-300).unsqueeze(1),
                              C.double())
        else:
            new = torch.where(nonempty.unsqueeze(1),
                              new / p.counts.clamp_min(1).unsqueeze(1).double(), C.double())
        return self._reseed(new.float(), p)

    def reseed_only(self, C: Any, p: _Pass) -> tuple[Any, int]:
        return self._reseed(C.clone(), p)

    def _reseed(self, C: Any, p: _Pass) -> tuple[Any, int]:
        """Move each empty cluster's centroid onto one of the worst-fitting rows."""
        import torch

        empty = torch.nonzero(p.counts == 0)[:, 0].tolist()
        if not empty:
            return C, 0
        vecs = self._worst_rows(p, min(_RESEED_POOL, 2 * len(empty) + 16))
        chosen: list[int] = []
        for i in range(vecs.shape[0]):
            if len(chosen) == len(empty):
                break
            # Two identical rows would give two identical centroids, one of them empty.
            if chosen and bool((torch.cdist(vecs[chosen], vecs[i][None]) <= 1e-6).any()):
                continue
            chosen.append(i)
        for j, i in zip(empty, chosen, strict=False):
            C[j] = vecs[i].to(C.device)
        # Every rank computes this from identical reduced data; broadcast for safety.
        return self.comm.broadcast(C), len(chosen)

    def _worst_rows(self, p: _Pass, k: int) -> Any:
        """(<=k, d) float32: the k lowest-scoring valid rows over all ranks, in order of
        (score, global row), so the choice does not depend on the sharding."""
        import torch

        # A row that is alone in its cluster would only empty that cluster by moving.
        sizes = p.counts.cpu().numpy()
        v = np.flatnonzero(p.labels >= 0)
        v = v[sizes[p.labels[v]] > 1]
        kk = min(k, len(v))
        if kk:
            part = v[np.argpartition(p.scores[v], kk - 1)[:kk]] if kk < len(v) else v
            part = part[np.lexsort((part, p.scores[part]))]
        else:
            part = v[:0]
        rows = torch.from_numpy(part.astype(np.int64) + self.row_offset)
        sc = torch.from_numpy(p.scores[part].astype(np.float64))
        vec = torch.from_numpy(self.reader.take(np.sort(part)))
        vec = vec[torch.from_numpy(np.argsort(np.argsort(part)))]  # back to score order
        if self.cosine:
            vec = _normalise_rows(vec)
        pad = k - kk
        sc = torch.cat([sc, torch.full((pad,), math.inf, dtype=torch.float64)])
        rows = torch.cat([rows, torch.full((pad,), -1, dtype=torch.int64)])
        vec = torch.cat([vec, torch.zeros(pad, vec.shape[1])])
        sc, rows, vec = (torch.cat(self.comm.gather(t)) for t in (sc, rows, vec))
        keep = rows >= 0
        sc, rows, vec = sc[keep], rows[keep], vec[keep]
        order = np.lexsort((rows.numpy(), sc.numpy()))[:k]
        return vec[torch.from_numpy(order)]


def _init_kmeanspp(reader: RowReader, valid: np.ndarray | None, valid_sizes: list[int],
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
        S = _normalise_rows(S)
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


def assign(X: np.ndarray, centroids: np.ndarray, *, metric: str = "cosine", device: str = "cpu",
           chunk_rows: int = 65536, valid: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Label rows with the nearest of fixed centroids.

    ``X``: (n, d) float16/float32; ``centroids``: (K, d). Returns ``(labels int32 (n,),
    scores float32 (n,))`` with the conventions of :class:`KMeans` (-1 / 0 where
    ``valid`` is False). Purely local: under torch.distributed each rank labels its rows.
    """
    import torch

    check_matrix(X)
    check_matrix(np.asarray(centroids), "centroids")
    if metric not in METRICS:
        raise InputError(f"assign: metric={metric!r} must be one of {METRICS}")
    if centroids.shape[1] != X.shape[1]:
        raise InputError(f"centroids have {centroids.shape[1]} dimensions, embeddings have "
                         f"{X.shape[1]}")
    if not np.isfinite(centroids).all():
        raise InputError("centroids hold NaN or infinite values")
    if valid is not None and (valid.dtype != np.bool_ or valid.shape != (X.shape[0],)):
        raise InputError(f"valid mask: expected bool of shape ({X.shape[0]},)")
    est = KMeans(centroids.shape[0], metric=metric, device=device, chunk_rows=chunk_rows)
    dev = est._torch_device()
    C = torch.tensor(np.asarray(centroids, dtype=np.float32), device=dev)
    if metric == "cosine":
        C = _normalise_rows(C)
    # Prediction is per row, so each rank works alone (no collectives).
    engine = _Engine(RowReader(X, chunk_rows), valid, 0, metric, dev, D.Comm(active=False))
    p = engine.run(C, accumulate=False, check_finite=True)
    return p.labels, p.scores
