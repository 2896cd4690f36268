"""The ``search`` stage: ``W/labels.npy`` + ``W/corpus/`` + ``W/centroids.npy`` (+ the
target files) -> ``W/search/`` through the work directory's stage runner.

:class:`SearchStageOptions` holds everything the stage needs, checked once when made;
:func:`run` reads the work directory (and embeds the target with W's embedder) into a
:class:`~clusterclip.search.offline.SearchInputs` for
:func:`clusterclip.search.offline.search`, and writes its results. ``search propose``
(:mod:`clusterclip.stages.propose`) and ``search fit --workdir``
(:mod:`clusterclip.stages.fit`) read the work directory through :func:`workdir_space`
(its clusters' search space) and :func:`load_corpus`.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.limits import MAX_THREADS, check_ranges, ranged
from clusterclip.search import offline
from clusterclip.search.offline import SearchConfig, SearchInputs
from clusterclip.search.propose import ClusterSpace, cluster_space
from clusterclip.search.target import Target
from clusterclip.workdir import CENTROIDS, CORPUS, LABELS, SEARCH, Workdir


@dataclass(frozen=True, kw_only=True)
class SearchStageOptions:
    """The search's configuration and where and how it runs, checked when made.

    ``threads`` None: :func:`~clusterclip.lm.runs.default_threads` of the proxies' model;
    ``workers`` > 1: each rank trains its share of a batch of proxies in as many worker
    processes (the results do not depend on it). The ``device`` is tried by :func:`run`,
    inside the process group (which selects each rank's GPU first).
    """

    config: SearchConfig
    device: str = "cpu"
    threads: int | None = ranged(1, MAX_THREADS, default=None)
    workers: int = ranged(1, MAX_THREADS, default=1)
    progress: bool = True

    def __post_init__(self) -> None:
        from clusterclip.lm.data import proxy_tokenizer
        from clusterclip.lm.runs import default_threads

        check_ranges(self)  # threads and workers
        if self.config.tokenizer is not None:  # read once, before any work
            proxy_tokenizer(self.config.tokenizer)
        if self.threads is None:
            object.__setattr__(self, "threads",
                               default_threads(self.config.experiment().model))


def _target_facts(w: Workdir, corpus: Any, texts: list[str | None], target: Target,
                  tval: np.ndarray, ttest: np.ndarray, centroids: np.ndarray, device: str,
                  store: Any) -> tuple[np.ndarray, Any, str]:
    """``(histogram, overlap, key)``: the target's val histogram over W's clusters and its
    copies in the corpus, kept in the run store under ``key`` (a resumed search does not
    embed again). The val documents are embedded apart from the test documents, so the
    histogram reads the val texts alone."""
    from clusterclip.search.overlap import Overlap, find_overlap
    from clusterclip.search.target import embed_texts, target_histogram
    from clusterclip.stages.dedup import workdir_threshold
    from clusterclip.storage.digests import array_fingerprint, fingerprint

    threshold = workdir_threshold(w)
    embed = embed_record(w)
    key = fingerprint({"kind": "search target", "format": 2, "texts": fingerprint(
        list(target.texts)), "val": array_fingerprint(tval), "threshold": threshold,
        "embed": embed["fingerprint"], "cluster": w.stage("cluster")["fingerprint"],
        "device": device})

    def compute() -> tuple[np.ndarray, Overlap]:
        got = store.get(key)
        if got is not None:
            return np.array(got["histogram"], dtype=np.int64), Overlap.from_dict(got["overlap"])
        t0 = time.perf_counter()
        Xv = embed_texts(embed["params"], corpus, [target.texts[i] for i in tval], device)
        Xt = embed_texts(embed["params"], corpus, [target.texts[i] for i in ttest], device)
        h = target_histogram(Xv, centroids, cluster_metric(w), device)
        X = w.embeddings()
        rows = np.concatenate([tval, ttest])
        ov = find_overlap(target.texts, texts, np.concatenate([Xv, Xt.reshape(-1, Xv.shape[1])]),
                          X, rows, threshold)
        store.put(key, {"histogram": h.tolist(), "overlap": ov.to_dict()},
                  round(time.perf_counter() - t0, 2))
        return h, ov

    h, ov = D.on_main(compute)
    return h, ov, key


def embed_record(w: Workdir) -> dict[str, Any]:
    """W's ``embed`` stage record (its parameters make the embedder again)."""
    from clusterclip.errors import InputError

    embed = w.stage("embed")
    if embed is None:
        raise InputError(f"{w.root}: stage `embed` has not run; run `clusterclip embed` first")
    return embed


def cluster_metric(w: Workdir) -> str:
    """The metric of W's clustering (its ``cluster`` stage's; cosine by default)."""
    return (w.stage("cluster") or {}).get("params", {}).get("metric", "cosine")


def search_inputs(w: Workdir, config: SearchConfig, target: Target | None, device: str,
                  store: Any, progress: bool = True) -> SearchInputs:
    """What the search reads of ``w`` (every rank): the labels, texts, centroids and
    metric, and with a target its val histogram and its copies in the corpus."""
    from clusterclip.search.overlap import excluded_documents
    from clusterclip.search.overlap import summary as overlap_summary
    from clusterclip.search.splits import target_splits
    labels, texts, corpus = w.load_inputs()
    num_clusters = int(labels.max()) + 1
    centroids = np.asarray(w.centroids(), dtype=np.float32)
    inputs = SearchInputs(labels, texts, centroids, cluster_metric(w))
    if target is None:
        return inputs
    tval, ttest = target_splits(target.rows_per_file, target.usable, config.seed)
    offline.main_log(progress)(
        f"search: embedding the target's {tval.size + ttest.size} documents with W's "
        "embedder (its prior and its copies in the corpus; an earlier search's are reused); "
        "the estimate follows")
    histogram, ov, key = _target_facts(w, corpus, texts, target, tval, ttest,
                                       centroids[:num_clusters], device, store)
    exclude, val_kept = excluded_documents(ov, labels, tval, ttest)
    return SearchInputs(labels, texts, centroids, inputs.metric, histogram, exclude,
                        overlap_summary(ov, exclude, val_kept), (key,))


def run(w: Workdir, options: SearchStageOptions) -> dict[str, Any]:
    """Search on ``w`` and write ``W/search/`` (one atomic replacement, through the work
    directory's stage runner; the finished runs move along in ``W/search/runs/``). Every
    ``torchrun`` rank calls this. Returns the results dict plus ``out_dir`` and
    ``wall_seconds``."""
    from clusterclip.lm.runs import RunStore, check_device
    from clusterclip.search.output import write_outputs
    from clusterclip.search.target import read_target
    from clusterclip.storage.outputs import atomic_output_dir, mark_output, unmark_unused

    o, config = options, options.config
    check_device(o.device)
    t0 = time.perf_counter()
    # the target is read (and refused) before anything in W is touched
    target = read_target(list(config.targets), config.text_field) if config.targets else None
    out = w.path(SEARCH)
    store = RunStore(out / "runs")
    done: dict[str, Any] = {}

    def work(run: Any) -> dict[str, Any]:
        # ours (the stage runner checked): marked before the first run
        D.on_main(lambda: mark_output(out, "search"))
        try:
            with contextlib.ExitStack() as pools:  # the worker pools end with the search
                inputs = search_inputs(w, config, target, o.device, store, o.progress)
                results = offline.search(inputs, config, target, o.device, o.threads,
                                        o.progress, store, o.workers, pools)
        except BaseException:
            if D.is_main():  # a failure before the first run leaves no folder behind
                unmark_unused(out)
            raise

        def write() -> None:
            store.prune(set(results["run_keys"]))
            # the finished runs stay where they are, listed as ours
            with atomic_output_dir(out, "search", adopt=store.listed(out)) as tmp:
                write_outputs(results, tmp)
                offline.write_swarm(results, tmp)
        D.on_main(write)
        done.update(results)
        return {"objective": results["objective"]}

    with w.locked():
        w.run_stage("search", key={"config": config.to_dict(), "device": o.device,
                                   "threads": o.threads},
                    reads=[LABELS, CORPUS, CENTROIDS], inputs=list(config.targets),
                    outputs=[SEARCH], work=work, cache=False)
    return {**done, "wall_seconds": round(time.perf_counter() - t0, 1), "out_dir": str(out)}


# -- what search propose and search fit read of a work directory ----------------------

def workdir_space(workdir: str | os.PathLike[str], *, num_tokens: int | None = None,
                  num_samples: int | None = None, tokenizer: str | None = None,
                  histogram: np.ndarray | None = None, exclude: np.ndarray | None = None,
                  overlap: dict[str, Any] | None = None) -> ClusterSpace:
    """The search space of work directory ``workdir``
    (:func:`~clusterclip.search.propose.cluster_space` of its labels, centroids and
    clustering metric; with ``num_tokens``, its tokens per document)."""
    from clusterclip.errors import InputError

    w = Workdir(workdir, create=False)
    labels = w.labels()
    if not np.any(labels >= 0):
        raise InputError(f"{w.path(LABELS)}: no document has a cluster (all -1)")
    centroids = np.asarray(w.centroids(), dtype=np.float32)
    tokens = None
    if num_tokens is not None:
        from clusterclip.stages.tokens import TokensOptions, run

        tokens, _ = run(w, TokensOptions(tokenizer=tokenizer))
    return cluster_space(labels, centroids, cluster_metric(w), num_tokens=num_tokens,
                         num_samples=num_samples, tokens=tokens, histogram=histogram,
                         exclude=exclude, overlap=overlap)


def load_corpus(workdir: str | os.PathLike[str]) -> Any:
    """The corpus of work directory ``workdir`` (``W/corpus/``)."""
    return Workdir(workdir, create=False).corpus()
