"""Write a sampling schedule to disk (the file edge of the sampler)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.limits import MAX_SAMPLES
from clusterclip.sampling.budget import plan_schedule
from clusterclip.sampling.factory import make_sampler
from clusterclip.sampling.spec import SamplerSpec, mixture_defaults, rank_share
from clusterclip.sampling.stream import BaseSampler
from clusterclip.storage.atomic import atomic_path, start_writeback
from clusterclip.storage.digests import HashingWriter
from clusterclip.storage.outputs import check_free_space


def write_schedule(labels: Any, path: str | os.PathLike[str], *, num_samples: int | None = None,
                   num_tokens: int | None = None, doc_tokens: Any = None,
                   balance_by: str = "docs", token_source: dict[str, Any] | None = None,
                   progress: bool = False, **options: Any) -> dict[str, Any]:
    """Write this rank's schedule as an int64 ``.npy`` at ``path``; return the summary.

    Streamed in blocks (bounded memory) to a temporary file, moved into place when complete.

    Parameters
    ----------
    labels : array_like
        (N,) integer cluster id (>= 0) of each document; -1 excludes it.
    path : str or os.PathLike
        The ``.npy`` file to write.
    num_samples, num_tokens : int or None
        Give one: the positions of the global schedule, or a token budget (the
        schedule ends at the first position whose cumulative ``doc_tokens`` reach it).
    doc_tokens : array_like or None
        (N,) tokens per document, for ``num_tokens`` and ``balance_by="tokens"``.
    balance_by : str
        ``"docs"``, or ``"tokens"``: cluster weights n_k ** alpha / mean tokens per document.
    token_source : dict or None
        Where ``doc_tokens`` came from (the summary's ``token_counts``).
    progress : bool
        Show a progress bar on stderr.
    **options : Any
        The other fields of [`SamplerSpec`][clusterclip.sampling.SamplerSpec].

    Returns
    -------
    dict
        The [`summary`][clusterclip.sampling.ClusterClipSampler.summary], with ``written``.

    Raises
    ------
    InputError
        If a parameter is not valid (the message names it), before any write.
    """
    # checked before any work (a budget's length is not known yet: no bound on it here)
    options = mixture_defaults(options)
    spec = SamplerSpec(MAX_SAMPLES if num_samples is None else num_samples, **options)
    if spec.groups is not None and (num_tokens is not None or balance_by != "docs"):
        raise InputError("groups works with num_samples and balance_by docs only "
                         "(token budgets over groups are not supported yet)",
                         params=("groups", "num_samples", "balance_by"))
    if spec.mixture is not None and spec.mixture.staged and num_tokens is not None:
        raise InputError("a staged mixture takes num_samples, not num_tokens (its stages "
                         "are fractions of the schedule's positions)",
                         params=("mixture", "num_tokens"))
    plan = plan_schedule(labels, num_samples=num_samples, num_tokens=num_tokens,
                         doc_tokens=doc_tokens, balance_by=balance_by, **options)
    stop = plan["stop"]

    def make(**share: Any) -> BaseSampler:
        return make_sampler(labels, plan["num_samples"], **{
            **options, "alpha": plan["alpha"], "cluster_weights": plan["cluster_weights"],
            **share})

    if num_tokens is not None and spec.consumed_samples > stop:
        raise InputError(f"consumed_samples {spec.consumed_samples} exceeds the {stop} "
                         f"positions of the schedule for num_tokens {num_tokens}",
                         params=("consumed_samples", "num_tokens"))
    sampler = make()
    n = rank_share(stop, spec.rank, spec.world_size, spec.consumed_samples)[1]
    check_free_space(path, 128 + 8 * n, "the schedule", option="")
    _write_npy(path, sampler.blocks(), n, progress, written=sampler._give_back)
    summary = sampler.summary()
    if stop < plan["num_samples"]:
        summary = _cut_summary(summary, labels, make(rank=0, world_size=1, consumed_samples=0),
                               stop, n, spec.consumed_samples)
    summary["written"] = n
    summary["balance_by"] = balance_by
    if num_tokens is not None:
        summary["num_tokens"] = int(num_tokens)
        summary["schedule_tokens"] = plan["schedule_tokens"]
    if token_source is not None:
        summary["token_counts"] = token_source
    return summary


def _write_npy(path: str | os.PathLike[str], blocks: Any, n: int, progress: bool,
               written: Any = None) -> None:
    """Write the first ``n`` indices of ``blocks`` (int64 arrays) as an ``.npy`` at
    ``path``, atomically, with a progress bar if ``progress``; ``written(block)`` is
    called (in the writer's thread) with each block once it is written."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="sample", unit="idx", unit_scale=True, leave=False)
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as raw:
            # The .npy header, then the blocks appended in order: the bytes of
            # np.save, with memory bounded by a block (sequential writes cost a
            # quarter of filling a memory map, whose page faults dominated). Hashed as
            # written (in the writer's thread), for the output's ownership record.
            f = HashingWriter(raw)
            np.lib.format.write_array_header_1_0(
                f, {"descr": np.lib.format.dtype_to_descr(np.dtype("<i8")),
                    "fortran_order": False, "shape": (n,)})
            # Over an existing file, ext4 flushes the new one inside the final move:
            # its disk writes are started as the blocks are written instead (a new
            # path is left to the kernel's own writeback, off this process's time).
            replacing = os.path.isfile(path)
            with _BackgroundWriter(f, written, raw.fileno() if replacing else None) as out:
                i = 0
                for block in blocks:
                    size = min(block.size, n - i)
                    out.write(np.ascontiguousarray(block[:size], "<i8"))
                    del block  # the writer's, and given back once written
                    i += size
                    if bar is not None:
                        bar.update(size)
                    if i >= n:
                        break
            if i != n:
                raise RuntimeError(f"schedule ended after {i} of {n} positions")
            f.finish()
    finally:
        if bar is not None:
            bar.close()


class _BackgroundWriter:
    """Writes arrays to ``f`` in order from one thread while the caller computes the next
    (the sampler's kernel releases the GIL; copying a block into the page cache costs about
    as much as drawing it). At most ``depth`` blocks wait; an error of the write is raised
    in the caller, at its next ``write`` or on leaving the ``with``. With ``fd`` (the file
    ``f`` writes to), the disk writes of each block are started from this thread as well
    (:func:`start_writeback`), not left to the move onto an existing file."""

    def __init__(self, f: Any, written: Any = None, fd: int | None = None,
                 depth: int = 2) -> None:
        import queue
        import threading

        self._f = f
        self._written = written
        self._q: Any = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._fd = fd
        self._started = 0  # bytes of fd whose writeback was started
        self._thread = threading.Thread(target=self._run, name="write_schedule", daemon=True)

    def _run(self) -> None:
        while (block := self._q.get()) is not None:
            if self._error is None:  # after an error, drain so that the caller never blocks
                try:
                    self._f.write(block.data)
                    if self._fd is not None:
                        stop = os.lseek(self._fd, 0, os.SEEK_CUR)  # what left the buffer
                        start_writeback(self._fd, self._started, stop)
                        self._started = stop
                    if self._written is not None:
                        self._written(block)
                except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                    self._error = e
            del block

    def write(self, block: np.ndarray) -> None:
        if self._error is not None:
            raise self._error
        self._q.put(block)

    def __enter__(self) -> _BackgroundWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._q.put(None)
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error


def _cut_summary(s: dict[str, Any], labels: Any, ref: BaseSampler, stop: int,
                 n: int, start: int) -> dict[str, Any]:
    """The summary ``s`` of a global schedule of T, made that of its first ``stop``
    positions (a token budget that ends a length-dependent schedule early), recounted
    from ``ref`` (a fresh single-rank sampler of it)."""
    lab = np.asarray(labels)
    sizes = ref.cluster_sizes
    c = np.zeros(sizes.size, np.int64)
    left = stop
    for b in ref.blocks(1 << 20):
        b = b[:left]
        c += np.bincount(lab[b], minlength=sizes.size)
        left -= b.size
        if left <= 0:
            break
    live = sizes > 0
    events = [[k, p] for k, p in s["clip_events"] if p < stop]
    ne = s["eligible_documents"]
    s.update(sampler_num_samples=s["num_samples"], num_samples=stop,
             epochs_equivalent=stop / ne, clip_events=events, clusters_clipped=len(events),
             first_clip_position=events[0][1] if events else None,
             last_clip_position=events[-1][1] if events else None,
             max_repetition=int((-(-c[live] // sizes[live])).max()),
             min_repetition=int((c[live] // sizes[live]).min()),
             documents_seen=int(np.minimum(c[live], sizes[live]).sum()),
             clusters_never_drawn=int((c[live] == 0).sum()),
             samples_per_rank=n, unserved_positions=stop - start - n * s["world_size"])
    return s


# -- the commands' path: ``clusterclip sample`` and the ``sample`` stage -----------------

def mixture_inputs(labels: Any, mixture: str | os.PathLike[str] | None, *,
                   num_clusters: int | None = None, cluster_weights: Any = None
                   ) -> tuple[Any, Any, dict[str, Any]]:
    """What the sampler takes of a mixture file: the labels less its exclusions, its
    cluster weights and the options of a staged mixture.

    Parameters
    ----------
    labels : numpy.ndarray
        (N,) integer cluster id of each document; -1 excludes it.
    mixture : str, os.PathLike or None
        A mixture file ([`read_mixture`][clusterclip.sampling.mixture.read_mixture]);
        None: no mixture.
    num_clusters : int or None
        The K its weights must have (None: not checked here).
    cluster_weights : array_like or None
        The cluster weights without a mixture (returned as given).

    Returns
    -------
    tuple
        ``(labels, weights, staged)``: ``staged`` the keyword arguments of
        [`write_schedule`][clusterclip.sampling.write_schedule] a staged mixture adds.
    """
    if mixture is None:
        return labels, cluster_weights, {}
    from clusterclip.sampling.mixture import excluding, read_exclusions, read_mixture

    staged = read_mixture(mixture, num_clusters).sampler_options()
    labels = excluding(labels, read_exclusions(mixture, labels.size))
    return labels, staged.pop("cluster_weights", None), staged


def default_clip_for(labels: Any, *, num_samples: int | None, strategy: str,
                     alpha: float = 0.0, cluster_weights: Any = None, groups: Any = None
                     ) -> tuple[int, str]:
    """The default clip R for these labels and budget, and why (when none is given).

    Parameters
    ----------
    labels : numpy.ndarray
        (N,) cluster ids after a mixture's exclusions.
    num_samples : int or None
        The schedule length T (None for a token budget).
    strategy : str
        The sampler's strategy.
    alpha : float
        The cluster-weight exponent.
    cluster_weights : array_like or None
        Weights replacing n_k ** alpha.
    groups : numpy.ndarray or None
        (N,) near-duplicate groups; used only when they match ``labels``.

    Returns
    -------
    tuple
        ``(clip, why)``: [`default_clip`][clusterclip.sampling.clip.default_clip]'s clip
        and the sentence that says why.
    """
    from clusterclip.sampling.clip import default_clip

    return default_clip(labels, num_samples, strategy, alpha=alpha,
                        cluster_weights=cluster_weights,
                        groups=groups if groups is not None and groups.size == labels.size
                        else None)


def draw_schedule(labels: Any, path: str | os.PathLike[str], *,
                  mixture: str | os.PathLike[str] | None = None,
                  num_clusters: int | None = None, cluster_weights: Any = None,
                  groups: Any = None, clip: int | None = None,
                  clip_default: str | None = None, num_samples: int | None = None,
                  strategy: str, alpha: float = 0.0,
                  **schedule: Any) -> dict[str, Any]:
    """The one schedule path of ``clusterclip sample`` and of the ``sample`` stage.

    The mixture file's exclusions and weights applied ([`mixture_inputs`]
    [clusterclip.sampling.schedule.mixture_inputs]), the clip resolved
    ([`default_clip_for`][clusterclip.sampling.schedule.default_clip_for]), the schedule
    written by [`write_schedule`][clusterclip.sampling.write_schedule], and its summary
    with the mixture file's record and the default clip's reason.

    Parameters
    ----------
    labels : numpy.ndarray
        (N,) integer cluster id of each document; -1 excludes it.
    path : str or os.PathLike
        The ``.npy`` file to write.
    mixture : str, os.PathLike or None
        A mixture file: its exclusions, weights (or stages) and record in the summary.
    num_clusters : int or None
        The K the mixture's weights must have (None: not checked here).
    cluster_weights : array_like or None
        Weights replacing n_k ** alpha, without a mixture.
    groups : numpy.ndarray or None
        (N,) near-duplicate groups: the units of the passes and of the clip.
    clip : int or None
        The clip R; None: the default (the summary's ``clip_default`` says why).
    clip_default : str or None
        Why ``clip`` is what it is, when the caller resolved the default already.
    num_samples : int or None
        The schedule length T (or give ``num_tokens`` in ``schedule``).
    strategy : str
        The sampler's strategy.
    alpha : float
        The cluster-weight exponent.
    **schedule : Any
        The other keyword arguments of [`write_schedule`][clusterclip.sampling.write_schedule].

    Returns
    -------
    dict
        The schedule's summary, with ``mixture`` and ``clip_default`` when they apply.
    """
    from clusterclip.sampling.mixture import mixture_record

    labels, weights, staged = mixture_inputs(labels, mixture, num_clusters=num_clusters,
                                             cluster_weights=cluster_weights)
    if clip is None:
        clip, clip_default = default_clip_for(labels, num_samples=num_samples,
                                              strategy=strategy, alpha=alpha,
                                              cluster_weights=weights, groups=groups)
    summary = write_schedule(labels, path, num_samples=num_samples, strategy=strategy,
                             clip=clip, alpha=alpha, groups=groups, cluster_weights=weights,
                             **schedule, **staged)
    if mixture is not None:
        summary["mixture"] = mixture_record(mixture)
    if clip_default and summary.get("clip") is not None:
        summary["clip_default"] = clip_default
    return summary
