"""Local worker processes: independent items computed side by side, results in order.

Used by the fast embedder's shards (:mod:`clusterclip.embedding.pipeline`), the Megatron
export's tokenization (:mod:`clusterclip.export.megatron`) and the LM runs below.

A tiny byte-level LM does not keep two cores busy from one process (a second torch
thread mostly waits, and a thread count is part of a run's floats), so independent
runs (``search``'s proxies, ``experiment``'s strategy x seed runs) are trained by
separate worker processes, each with the run's own fixed thread count: a run's
result does not depend on how many workers trained the batch, and a pooled search
writes the bytes of a serial one. Under ``torchrun`` each rank has its own pool
for its share (:func:`clusterclip.distributed.map_in_order`).

Workers are started with ``spawn`` (no copy of the parent's torch state), receive
their state once (``init(*initargs)``), ignore Ctrl-C (the parent stops them: a
KeyboardInterrupt or any error in the parent terminates every worker before it
propagates), and hand results back in item order; only the parent writes the run
store.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: The worker's state, set once by :func:`_start` (``init``'s return value).
_STATE: Any = None


def check_workers(threads: int | None, workers: int) -> None:
    """InputError unless ``threads`` (when given) and ``workers`` are >= 1."""
    from clusterclip.errors import InputError

    for name, n in (("threads", threads), ("workers", workers)):
        if n is not None and n < 1:
            raise InputError(f"{name}: must be >= 1, got {n}", params=(name,))


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``taskset``, cgroups' cpusets),
    the default number of workers of the commands that use them."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _start(init: Callable[..., Any], initargs: tuple[Any, ...]) -> None:
    global _STATE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    _STATE = init(*initargs)


def _call(task: tuple[Callable[[Any, Any], Any], Any]) -> Any:
    fn, item = task
    return fn(_STATE, item)


@contextlib.contextmanager
def worker_pool(workers: int, init: Callable[..., Any], initargs: tuple[Any, ...]
                ) -> Iterator[Callable[[Callable[[Any, Any], T], Iterable[Any]], Iterator[T]]]:
    """``workers`` processes, each holding ``init(*initargs)`` (module-level, picklable);
    yields ``imap(fn, items)``: ``fn(state, item)`` for each item, computed by the workers,
    results in item order as they are ready (``fn`` module-level; ``items`` read lazily,
    at most ``2 * workers`` ahead of the results taken). On leaving the block by
    an exception (KeyboardInterrupt included) every worker is terminated and joined."""
    import multiprocessing

    pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_start,
                                                     initargs=(init, initargs))

    def imap(fn: Callable[[Any, Any], T], items: Iterable[Any]) -> Iterator[T]:
        # At most two items per worker in flight: ``items`` is consumed as results are
        # taken, so a long stream (the export's batches) is never read ahead in full.
        pending: deque[Any] = deque()
        for x in items:
            pending.append(pool.apply_async(_call, ((fn, x),)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    try:
        yield imap
    except BaseException:
        pool.terminate()
        pool.join()
        raise
    pool.close()
    pool.join()


def progress_queue() -> Any:
    """A queue on which worker processes report progress (pass it in their ``initargs``;
    :func:`following` hands what they put on it to a progress bar)."""
    import multiprocessing

    return multiprocessing.get_context("spawn").Queue()


@contextlib.contextmanager
def following(queue: Any, update: Callable[[Any], Any]) -> Iterator[None]:
    """What workers put on ``queue`` (:func:`progress_queue`) handed to ``update`` by a
    thread of this process until the block ends (run the workers' tasks inside the block,
    so that they are done first)."""
    import threading

    def follow() -> None:
        for n in iter(queue.get, None):
            update(n)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        yield
    finally:
        queue.put(None)
        # Bounded: a worker terminated on an error may have left the queue unusable.
        reader.join(timeout=10)


@contextlib.contextmanager
def in_background(fn: Callable[[], T], enabled: bool = True) -> Iterator[Callable[[], T]]:
    """``fn()`` computed by a thread of this process while the block runs (say, waiting on
    a :func:`worker_pool` while this process does other work); yields ``result()``, which
    waits for it and returns it (or raises its error). Not ``enabled``: ``result()`` calls
    ``fn`` itself. Leaving the block waits for the thread, unless by an exception (Ctrl-C
    included): then the thread, a daemon, is left to end with the process (a
    :func:`worker_pool` it holds is ended by ``multiprocessing`` at exit)."""
    import threading

    if not enabled:
        yield fn
        return
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller of result()
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    yield result
    thread.join()


def pooled(workers: int, init: Callable[..., Any], initargs: tuple[Any, ...],
           fn: Callable[[Any, Any], T], items: list[Any],
           serial: Callable[[Any], T]) -> Iterator[T]:
    """``fn``'s results over ``items`` in order: by a :func:`worker_pool` when there are
    ``workers`` > 1 and more than one item, else ``serial(item)`` in this process."""
    if workers <= 1 or len(items) <= 1:
        for x in items:
            yield serial(x)
        return
    with worker_pool(min(workers, len(items)), init, initargs) as imap:
        yield from imap(fn, items)
