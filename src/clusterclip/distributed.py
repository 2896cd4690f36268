"""The one place that talks to ``torch.distributed``: who am I, and collectives.

Under ``torchrun`` every process of a stage calls the same functions; rank 0
(:func:`is_main`) writes the outputs. Without an initialised process group
every function here acts as a world of one process, so callers never branch
on whether they are distributed. torch is imported lazily: a world of one
never needs it.

- Process group: :func:`process_group` (the one lifecycle every command uses), or
  :func:`init_from_env` / :func:`shutdown` by hand, :func:`rank_and_world`,
  :func:`is_main`, :func:`local_rank`, :func:`barrier`.
- Tensors (K-means): :func:`all_reduce_sum`, :func:`all_gather_tensor`,
  :func:`broadcast`, :func:`all_sizes`, :func:`any_rank`, and :class:`Comm`,
  the same collectives or their single-process identities.
- Python objects: :func:`broadcast_object`, :func:`gather_objects`,
  :func:`on_main` (run on rank 0, hand the result or its InputError to all),
  :func:`map_in_order` (items shared among the ranks, results and the first
  error in item order on all), :func:`balanced_shares`.
- Rows: :func:`shard_bounds`, :func:`load_shard`, :func:`gather_rows`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from clusterclip.errors import InputError
from clusterclip.storage.arrays import load_npy

T = TypeVar("T")


def _dist() -> Any | None:
    """The torch.distributed module when a process group is initialised, else None.

    Never imports anything: a group is initialised only after torch.distributed was
    imported in full, and importing here could run inside a half-imported torch (an
    import interrupted by Ctrl-C), which fails with errors of its own."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None  # never imported, so never initialised: do not pay torch's import
    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # half-imported (an interrupted import): never initialised
        return None
    return None


# -- the process group -------------------------------------------------------------

def init_from_env(device: str = "cpu") -> bool:
    """Initialise the default process group when launched by ``torchrun``.

    Uses NCCL for a CUDA ``device`` (after selecting this rank's GPU,
    ``LOCAL_RANK``) and gloo otherwise. Returns True when this call created
    the group (the caller then calls :func:`shutdown`), False when there is
    nothing to do (already initialised, or WORLD_SIZE unset or 1).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or _dist() is not None:
        return False
    import torch
    import torch.distributed as dist

    backend = "gloo"
    if device.startswith("cuda"):
        backend = "nccl"
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend=backend)
    return True


def shutdown(created: bool, wait: bool = True) -> None:
    """Destroy the process group if :func:`init_from_env` created it.

    ``wait``: meet the other ranks at a barrier first (the normal end); pass False
    on an error path, where another rank may be inside a different collective.
    """
    if not created:
        return  # (an error path must not touch a torch whose import it interrupted)
    dist = _dist()
    if dist is not None:
        if wait:
            dist.barrier()
        dist.destroy_process_group()


@contextmanager
def process_group(device: str = "cpu") -> Iterator[bool]:
    """The process group of one command: created on entry when launched by ``torchrun``
    (:func:`init_from_env`), destroyed on exit; yields :func:`is_main`, decided while the
    group exists (the caller prints after the block, on the main rank only).

    The normal end meets the other ranks at a barrier; an exception does not: another
    rank may be inside a different collective, or may never arrive, so this rank
    destroys its group and lets the error propagate (the command exits, and the other
    ranks fail on the closed connection or are stopped by ``torchrun``). The group is
    always destroyed before the process exits: a gloo group left to interpreter
    shutdown can abort (SIGABRT) a rank.
    """
    created = init_from_env(device)
    try:
        yield is_main()
    except BaseException:
        shutdown(created, wait=False)
        raise
    shutdown(created)


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` without a process group."""
    dist = _dist()
    if dist is None:
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def is_main() -> bool:
    """True on rank 0 (or when not distributed): the process that writes outputs."""
    return rank_and_world()[0] == 0


def local_rank() -> int | None:
    """This process's index on its machine as set by ``torchrun`` (None when not set)."""
    value = os.environ.get("LOCAL_RANK")
    return None if value is None else int(value)


def barrier() -> None:
    """Wait for every rank (nothing to wait for in a world of one)."""
    dist = _dist()
    if dist is not None:
        dist.barrier()


# -- tensors -------------------------------------------------------------------------

def comm_device() -> Any:
    """The torch device collectives run on (CUDA for NCCL, CPU otherwise)."""
    import torch

    dist = _dist()
    if dist is not None and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(t: Any) -> Any:
    """Sum a tensor over all ranks (returned on its original device)."""
    dist = _dist()
    if dist is None:
        return t
    moved = t.to(comm_device())
    dist.all_reduce(moved)
    return moved.to(t.device)


def all_gather_tensor(t: Any) -> list[Any]:
    """All ranks' tensors of equal shape, in rank order."""
    dist = _dist()
    if dist is None:
        return [t]
    moved = t.to(comm_device()).contiguous()
    out = [moved.new_empty(moved.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(out, moved)
    return [o.to(t.device) for o in out]


def broadcast(t: Any, src: int = 0) -> Any:
    """Rank ``src``'s value of the tensor ``t`` on every rank."""
    dist = _dist()
    if dist is None:
        return t
    moved = t.to(comm_device()).contiguous()
    dist.broadcast(moved, src)
    return moved.to(t.device)


def all_sizes(n: int) -> list[int]:
    """Every rank's value of the integer ``n``, in rank order."""
    if _dist() is None:
        return [n]
    import torch

    return [int(v) for v in all_gather_tensor(torch.tensor([n], dtype=torch.int64))]


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is true on any rank (so all ranks take the same branch)."""
    if _dist() is None:
        return flag
    import torch

    return bool(all_reduce_sum(torch.tensor([int(flag)], dtype=torch.int64)).item() > 0)


class Comm:
    """The tensor collectives, or their single-process identities.

    ``active=None`` follows whether a process group is initialised;
    ``active=False`` keeps a computation local to this rank.
    """

    def __init__(self, active: bool | None = None) -> None:
        self.active = _dist() is not None if active is None else active

    def sum(self, t: Any) -> Any:
        return all_reduce_sum(t) if self.active else t

    def gather(self, t: Any) -> list[Any]:
        return all_gather_tensor(t) if self.active else [t]

    def broadcast(self, t: Any) -> Any:
        return broadcast(t) if self.active else t

    def sizes(self, n: int) -> list[int]:
        return all_sizes(n) if self.active else [n]

    def any(self, flag: bool) -> bool:
        return any_rank(flag) if self.active else flag


# -- Python objects ----------------------------------------------------------------

def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s picklable ``obj`` on every rank."""
    dist = _dist()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: T) -> list[T]:
    """Every rank's picklable ``obj``, in rank order, on every rank."""
    dist = _dist()
    if dist is None:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and hand its result (or its InputError) to every rank.

    Any other exception is re-raised on rank 0 and becomes a RuntimeError on the
    others, so no rank waits forever for a rank 0 that failed.
    """
    if _dist() is None:
        return fn()
    result: Any = None
    crash: BaseException | None = None
    if is_main():
        try:
            result = ("ok", fn())
        except InputError as e:
            result = ("error", str(e))
        except BaseException as e:  # handed on, then re-raised below
            result, crash = ("crash", repr(e)), e
    status, value = broadcast_object(result)
    if crash is not None:
        raise crash
    if status == "error":
        raise InputError(value)
    if status == "crash":
        raise RuntimeError(f"rank 0 failed: {value}")
    return value


def balanced_shares(weights: Sequence[int], world_size: int) -> list[list[int]]:
    """Items ``0..len(weights)-1`` split among ``world_size`` ranks with near-equal total
    weight: heaviest first, each to the rank with the least so far (ties: the lower rank,
    then the lower item). Each rank's items are ascending. Deterministic."""
    import heapq

    loads = [(0, r) for r in range(world_size)]  # a heap of (load, rank)
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        load, r = loads[0]
        shares[r].append(i)
        heapq.heapreplace(loads, (load + max(int(weights[i]), 1), r))
    return [sorted(s) for s in shares]


def map_in_order(fn: Callable[[int], T], weights: Sequence[int],
                 many: Callable[[list[int]], Iterator[T]] | None = None) -> list[T]:
    """``[fn(0), fn(1), ...]`` over ``len(weights)`` items, every rank calling ``fn`` on its
    share (:func:`balanced_shares` by ``weights``, e.g. file sizes); every rank gets all
    results, in item order. ``many``: instead of ``fn`` item by item, a rank's whole share at
    once (``many(items)`` yields their results in order, e.g. from worker processes; an
    exception it raises belongs to the item whose result was due).

    Errors are those of one process going through the items in order: a rank takes its
    items in ascending order and stops at its first :class:`InputError`, and the error of
    the lowest failing item is raised on every rank. Any other exception is re-raised on
    its rank and becomes a RuntimeError on the others (no rank waits forever).
    """
    rank, world = rank_and_world()
    mine = balanced_shares(weights, world)[rank] if world > 1 else range(len(weights))
    done: list[tuple[int, Any]] = []
    failed: tuple[str, int, str] | None = None
    crash: BaseException | None = None
    results = many(list(mine)) if many is not None else (fn(i) for i in mine)
    for i in mine:
        try:
            done.append((i, next(results)))
        except InputError as e:
            if world == 1:
                raise
            failed = ("error", i, str(e))
            break
        except BaseException as e:  # handed on, then re-raised below
            if world == 1:
                raise
            failed, crash = ("crash", i, repr(e)), e
            break
    close = getattr(results, "close", None)
    if close is not None:  # a share left early stops its workers here
        close()
    everyone = gather_objects((done, failed))
    if crash is not None:
        raise crash
    crashes = [f for _, f in everyone if f is not None and f[0] == "crash"]
    if crashes:
        raise RuntimeError(f"another rank failed: {crashes[0][2]}")
    errors = sorted(f for _, f in everyone if f is not None)
    if errors:
        raise InputError(errors[0][2])
    out: list[Any] = [None] * len(weights)
    for part, _ in everyone:
        for i, value in part:
            out[i] = value
    return out


# -- rows ------------------------------------------------------------------------------

def shard_bounds(n_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """Contiguous ``[start, stop)`` of rank ``rank`` among ``world_size`` near-equal shards."""
    return n_rows * rank // world_size, n_rows * (rank + 1) // world_size


def load_shard(path: str | os.PathLike[str], rank: int | None = None,
               world_size: int | None = None) -> tuple[np.memmap, int, int]:
    """This rank's contiguous shard of a memory-mapped ``.npy`` matrix.

    Returns ``(rows, start, stop)``: ``rows`` is a read-only memmap view of
    rows ``[start, stop)`` (nothing is read into memory). ``rank`` and
    ``world_size`` default to the initialised process group (else 0 and 1).
    """
    if rank is None or world_size is None:
        rank, world_size = rank_and_world()
    X = load_npy(path, mmap=True)
    start, stop = shard_bounds(X.shape[0], rank, world_size)
    return X[start:stop], start, stop


def gather_rows(local: np.ndarray, dst: int = 0) -> np.ndarray | None:
    """Concatenate every rank's 1-D/2-D ``local`` rows in rank order on rank ``dst``.

    Returns the full array on ``dst`` and None elsewhere (the local array itself
    when not distributed). Shards may have different lengths.
    """
    dist = _dist()
    if dist is None:
        return local
    import torch

    sizes = all_sizes(len(local))
    width = max(sizes)
    padded = np.zeros((width,) + local.shape[1:], dtype=local.dtype)
    padded[: len(local)] = local
    # A gather, not an all-gather: only ``dst`` receives the N rows (the others would
    # each hold all of them for nothing: 8 bytes per document for labels and scores).
    moved = torch.from_numpy(padded).to(comm_device())
    parts = [torch.empty_like(moved) for _ in sizes] if dist.get_rank() == dst else None
    dist.gather(moved, parts, dst=dst)
    if parts is None:
        return None
    return np.concatenate([p.cpu().numpy()[:s] for p, s in zip(parts, sizes, strict=True)])
