"""``clusterclip search`` on a work directory: the data, the target's prior, the proxy
rounds, the test verdict and ``W/search/``.

Data flow: ``W/labels.npy`` + ``W/corpus/`` (+ the target files) -> splits
(``W/search/splits.npz``) -> the target's val documents embedded and assigned to
``W/centroids.npy`` -> the search space -> proxy rounds on val
(:mod:`~clusterclip.search.core`) -> the chosen mixture, random and the prior
trained again with fresh seeds and measured on test -> ``W/search/``
(``mixture.json``, ``results.json``, ``results.md``, ``splits.npz``, plots, and
``runs/``: every finished run, so a killed search resumes).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.errors import InputError
from clusterclip.experiment.runner import DEFAULT_MAX_DOCS, ExperimentConfig
from clusterclip.experiment.runs import ScheduleSpec
from clusterclip.search.core import SearchOptions, SearchResult, round_sizes, run_search
from clusterclip.search.overlap import Overlap, excluded_documents
from clusterclip.search.overlap import summary as overlap_summary
from clusterclip.search.proxies import EvalSet, ProxyData, ProxyTrainer, spec_of
from clusterclip.search.space import (
    DEFAULT_CLIP,
    DEFAULT_TIMING,
    SearchSpace,
    prior_mixture,
    super_clusters,
)
from clusterclip.search.splits import corpus_splits, target_splits
from clusterclip.search.target import Target, read_target

#: (runs, rounds, test seeds, model, the verification's model) of ``--quick`` and of the
#: default: the default verifies one size up, ``--quick`` only when asked. ``--quick``
#: trains ``small`` proxies (446k parameters; ``tiny``'s 44k ranked mixtures worse, issue
#: 27) in :data:`QUICK_WORKERS` processes: 24 proxies + 9 test runs of 2,500 documents are
#: 896 CPU s (15 minutes), 524 s wall on both of 2 idle cores (docs/benchmarks.md,
#: "Search").
QUICK = {"runs": 24, "rounds": 3, "test_seeds": 3, "model": "small", "verify_model": None}
#: ``--quick``'s worker processes when ``--workers`` is not given: at most the CPUs each
#: rank may use (the results are the same for every count).
QUICK_WORKERS = 2
DEFAULT = {"runs": 48, "rounds": 3, "test_seeds": 5, "model": "small", "verify_model": "base"}
#: ``--verify-model none``: no verification.
NO_VERIFY = "none"


def quick_workers(world: int = 1) -> int:
    """``--quick``'s worker processes per rank: :data:`QUICK_WORKERS`, at most the usable
    CPUs shared among ``world`` ranks, at least 1."""
    from clusterclip.experiment.runs import usable_cpus

    return max(1, min(QUICK_WORKERS, usable_cpus() // world))


def one_size_up(model: str) -> str | None:
    """The next larger preset after ``model`` (None for the largest)."""
    from clusterclip.experiment.config import MODEL_PRESETS

    names = list(MODEL_PRESETS)
    i = names.index(model) if model in names else len(names)
    return names[i + 1] if i + 1 < len(names) else None


@dataclass(frozen=True)
class SearchConfig:
    """Everything that determines a search's result (see ``clusterclip search --help``)."""

    targets: tuple[str, ...] = ()
    text_field: str = "text"
    runs: int = DEFAULT["runs"]
    rounds: int = DEFAULT["rounds"]
    test_seeds: int = DEFAULT["test_seeds"]
    model: str = DEFAULT["model"]
    quick: bool = False
    seed: int = 0
    max_docs: int | None = DEFAULT_MAX_DOCS
    tokenizer: str | None = None
    verify_model: str | None = DEFAULT["verify_model"]

    @classmethod
    def from_options(cls, *, quick: bool = False, **options: Any) -> SearchConfig:
        """``--quick``'s or the default runs, rounds, test seeds and model, those given
        (not None) replacing them."""
        base = {**(QUICK if quick else DEFAULT), "quick": quick}
        got = cls(**{**base, **{k: v for k, v in options.items() if v is not None}})
        if options.get("verify_model") is None and not quick:  # one size up, if there is one
            got = replace(got, verify_model=one_size_up(got.model))
        return replace(got, verify_model=None) if got.verify_model == NO_VERIFY else got

    def validate(self) -> None:
        for name in ("runs", "rounds", "test_seeds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"--{name.replace('_', '-')}: must be an integer >= 1, "
                                 f"got {v}")
        if self.rounds > self.runs:
            raise InputError(f"--rounds {self.rounds}: more rounds than --runs {self.runs}")
        if self.seed < 0:
            raise InputError(f"--seed: must be >= 0, got {self.seed}")
        self.experiment().validate()
        if self.verify_model is not None:
            from clusterclip.experiment.config import MODEL_PRESETS

            if self.verify_model not in MODEL_PRESETS:
                raise InputError(f"--verify-model: unknown preset {self.verify_model!r}")
            if (MODEL_PRESETS[self.verify_model][0].num_parameters()
                    <= MODEL_PRESETS[self.model][0].num_parameters()):
                raise InputError(f"--verify-model {self.verify_model}: not larger than the "
                                 f"proxies' {self.model}")
            self.verification().validate()

    def experiment(self) -> ExperimentConfig:
        """The proxies' model, training and budget: the experiment's (``--quick``: its quick
        configuration), at this model size, the split and proxy seed ``seed``."""
        base = ExperimentConfig.quick() if self.quick else ExperimentConfig()
        return replace(base.with_model(self.model), max_docs=self.max_docs,
                       split_seed=self.seed, strategies=(DEFAULT_TIMING,), seeds=1,
                       tokenizer=self.tokenizer)

    def verification(self) -> ExperimentConfig:
        """The verification's model and training: :meth:`experiment` at ``verify_model``."""
        return replace(self, model=self.verify_model).experiment()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = list(self.targets)
        if self.verify_model is None:
            del d["verify_model"]  # unverified results keep their bytes
        if self.tokenizer is None:
            del d["tokenizer"]  # byte-level results keep their bytes
        d["experiment"] = self.experiment().to_dict()
        return d


# -- data ------------------------------------------------------------------------------

def _eval_set(name: str, corpus_idx: np.ndarray, target_docs: list[np.ndarray],
              target_bytes: np.ndarray) -> EvalSet:
    from clusterclip.io import array_fingerprint, fingerprint

    return EvalSet(name, corpus_idx, tuple(target_docs), fingerprint(
        {"corpus": array_fingerprint(corpus_idx),
         "target": [array_fingerprint(d) for d in target_docs]}),
        np.asarray(target_bytes, dtype=np.int64))


def prepare(texts: list[str | None], labels: np.ndarray, target: Target | None,
            config: SearchConfig, exclude: np.ndarray | None = None
            ) -> tuple[ProxyData, dict[str, np.ndarray]]:
    """The corpus's and the target's splits and the data every run sees; the corpus
    documents ``exclude`` (bool[N]: the target's copies) are in no split."""
    from clusterclip.experiment.data import stratified_subsample
    from clusterclip.experiment.runner import _checked_labels, encode_texts
    from clusterclip.experiment.runs import Budget
    from clusterclip.io import array_fingerprint, fingerprint

    labels, _ = _checked_labels(texts, labels, None)
    if exclude is not None:
        labels[exclude] = -1
    docs, _, doc_bytes, exp = encode_texts(texts, config.experiment())
    doc_tokens = np.array([d.size for d in docs], dtype=np.int64)
    labels[doc_tokens == 0] = -1
    if not np.any(labels >= 0):
        raise InputError("labels: no document has a cluster (all -1)"
                         + (" once the target's copies are kept out" if exclude is not None
                            and exclude.any() else ""))
    if exp.max_docs is not None:
        labels[~stratified_subsample(labels, exp.max_docs, exp.split_seed)] = -1
    train, val, test = corpus_splits(labels, config.seed)
    if val.size == 0:
        raise InputError("labels: no cluster has 10 documents, so nothing can be held out")
    train_labels = np.full(labels.size, -1, dtype=np.int64)
    train_labels[train] = labels[train]
    tval = ttest = np.zeros(0, dtype=np.int64)
    tdocs: list[np.ndarray] = []
    tbytes = np.zeros(0, dtype=np.int64)
    if target is not None:
        tval, ttest = target_splits(target.rows_per_file, target.usable, config.seed)
        tdocs, _, tbytes, _ = encode_texts(list(target.texts), exp)
    train_tokens = int(doc_tokens[train].sum())
    budget = Budget.plan(exp.budget_tokens(train_tokens), exp.batch_tokens,
                         int(doc_tokens[train].min()))
    data = ProxyData(
        docs=docs, doc_tokens=doc_tokens, labels=labels, train_labels=train_labels,
        val=_eval_set("val", val, [tdocs[i] for i in tval], tbytes[tval]),
        test=_eval_set("test", test, [tdocs[i] for i in ttest], tbytes[ttest]),
        budget=budget, config=exp, doc_bytes=doc_bytes,
        fingerprint=fingerprint({"docs": fingerprint([array_fingerprint(d) for d in docs]),
                                 "labels": array_fingerprint(labels),
                                 "train": array_fingerprint(train)}))
    splits = {"corpus_train": train, "corpus_val": val, "corpus_test": test,
              "target_val": tval, "target_test": ttest}
    return data, splits


def build_space(data: ProxyData, num_clusters: int, histogram: np.ndarray | None,
                centroids: np.ndarray, metric: str, seed: int) -> SearchSpace:
    """The search space of this corpus and target (see :class:`SearchSpace`); every rank
    calls it (the super-clusters are a collective k-means under torchrun)."""
    t = data.train_labels
    use = t >= 0
    counts = np.bincount(t[use], minlength=num_clusters).astype(np.float64)
    natural = counts / counts.sum()
    prior = None
    if histogram is not None:
        try:
            prior = prior_mixture(histogram, natural)
        except ValueError:
            raise InputError("--target: its val documents fall only in clusters without "
                             "training documents, so no prior can be drawn") from None
    return SearchSpace(
        natural=natural, prior=prior,
        groups=super_clusters(centroids[:num_clusters], natural, metric, seed),
        train_tokens=np.bincount(t[use], weights=data.doc_tokens[use],
                                 minlength=num_clusters).astype(np.int64),
        needed=data.budget.needed)


# -- the verdict's runs ----------------------------------------------------------------

def test_arms(space: SearchSpace, chosen: ScheduleSpec) -> dict[str, ScheduleSpec]:
    """What the verdict compares on test: random sampling, the prior (with a target: its
    weights, paced, clip :data:`DEFAULT_CLIP`) and the searched mixture."""
    arms = {"random": ScheduleSpec("random")}
    if space.prior is not None:
        arms["prior"] = ScheduleSpec(DEFAULT_TIMING, clip=DEFAULT_CLIP,
                                     weights=tuple(float(x) for x in space.prior))
    arms["searched"] = chosen
    return arms


def test_seeds(config: SearchConfig) -> list[int]:
    """Fresh seeds for the verdict: none of them is the proxies' seed."""
    return [config.seed + 1 + i for i in range(config.test_seeds)]


def run_tests(trainer: ProxyTrainer, arms: dict[str, ScheduleSpec], seeds: list[int]
              ) -> dict[str, dict[str, list[float]]]:
    """``test[name][metric]``: per seed, in seed order (and ``fed_share``, the mean over
    seeds of each cluster's share of the fed tokens; ``coverage``, per seed, the shares
    of the training documents and tokens never drawn)."""
    jobs = [(spec, s, trainer.data.test) for spec in arms.values() for s in seeds]
    recs = trainer.run_all(jobs, "search test runs")
    out: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(arms):
        part = recs[i * len(seeds):(i + 1) * len(seeds)]
        out[name] = {m: [r[m] for r in part] for m in ("target", "micro", "macro")
                     if m in part[0]}
        out[name]["fed_share"] = np.round(np.mean([r["fed_share"] for r in part], axis=0),
                                          6).tolist()
        out[name]["coverage"] = {k: [r[k] for r in part]
                                 for k in ("docs_never_drawn", "tokens_never_drawn")}
        out[name]["bits_per_byte"] = {m: [r[f"{m}_bits_per_byte"] for r in part]
                                      for m in ("target", "micro") if m in part[0]}
    return out


# -- the estimate ----------------------------------------------------------------------

def estimate(config: SearchConfig, data: ProxyData, device: str, threads: int,
             log: Callable[[str], None], vdata: ProxyData | None = None,
             workers: int = 1) -> float:
    """Print (before any work) the number of runs and their estimated time (with
    ``vdata``, the verification's runs at the larger model too), shared among the ranks
    and each rank's ``workers``."""
    import torch

    from clusterclip.experiment.config import format_parameters as size
    from clusterclip.experiment.runs import estimate_seconds, format_seconds, torch_settings

    exp = data.config
    n_test = config.test_seeds * (3 if config.targets else 2)
    runs = config.runs + n_test
    _, world = D.rank_and_world()
    def timed(d: ProxyData, n: int) -> float:
        docs = [d.docs[i] for i in d.val.corpus_idx] + list(d.val.target_docs)
        with torch_settings(threads):
            return estimate_seconds(d.config.model, d.config.train, torch.device(device), docs,
                                    n, d.budget.steps, evals_per_run=1)

    est = timed(data, runs)
    vest = 0.0 if vdata is None else timed(vdata, n_test)
    est += vest
    est /= world * workers
    sizes = "/".join(map(str, round_sizes(config.runs, config.rounds)))
    log(f"search: {config.runs} proxies in {len(round_sizes(config.runs, config.rounds))} "
        f"rounds ({sizes}) + {n_test} test runs ({config.test_seeds} fresh seeds), "
        f"{data.budget.steps} steps each of a {size(exp.model.num_parameters())}-parameter "
        f"model; estimated {format_seconds(est)} of training on {world} process(es) x "
        f"{workers} worker(s) of {threads} thread(s) (from a "
        "few timed steps; runs stored by an earlier search are reused)"
        + ("" if vdata is None else f"; that includes {n_test} verification runs at "
           f"{config.verify_model} ({size(vdata.config.model.num_parameters())} parameters, "
           f"{vdata.budget.steps} steps each), {format_seconds(vest / (world * workers))}"))
    return est


def _target_facts(w: Any, corpus: Any, texts: list[str | None], target: Target,
                  tval: np.ndarray, ttest: np.ndarray, centroids: np.ndarray, device: str,
                  store: Any) -> tuple[np.ndarray, Overlap, str]:
    """``(histogram, overlap, key)``: the target's val histogram over W's clusters and its
    copies in the corpus, kept in the run store under ``key`` (a resumed search does not
    embed again). The val documents are embedded apart from the test documents, so the
    histogram reads the val texts alone."""
    from clusterclip.dedup import workdir_threshold
    from clusterclip.io import array_fingerprint, fingerprint, load_npy
    from clusterclip.search.overlap import find_overlap
    from clusterclip.search.target import embed_texts, target_histogram

    threshold = workdir_threshold(w)
    key = fingerprint({"kind": "search target", "format": 2, "texts": fingerprint(
        list(target.texts)), "val": array_fingerprint(tval), "threshold": threshold,
        "embed": w.stage("embed")["fingerprint"], "cluster": w.stage("cluster")["fingerprint"],
        "device": device})

    def compute() -> tuple[np.ndarray, Overlap]:
        got = store.get(key)
        if got is not None:
            return np.array(got["histogram"], dtype=np.int64), Overlap.from_dict(got["overlap"])
        t0 = time.perf_counter()
        Xv = embed_texts(w, corpus, [target.texts[i] for i in tval], device)
        Xt = embed_texts(w, corpus, [target.texts[i] for i in ttest], device)
        h = target_histogram(w, Xv, centroids, device)
        X = load_npy(w.path("embeddings.npy"), "embeddings", kinds="f", ndim=2, mmap=True)
        rows = np.concatenate([tval, ttest])
        ov = find_overlap(target.texts, texts, np.concatenate([Xv, Xt.reshape(-1, Xv.shape[1])]),
                          X, rows, threshold)
        store.put(key, {"histogram": h.tolist(), "overlap": ov.to_dict()},
                  round(time.perf_counter() - t0, 2))
        return h, ov

    h, ov = D.on_main(compute)
    return h, ov, key


def _log(progress: bool) -> Callable[[str], None]:
    def log(msg: str) -> None:
        if progress and D.is_main():
            print(msg, file=sys.stderr, flush=True)
    return log


def _search(w: Any, config: SearchConfig, target: Target | None, device: str, threads: int,
            progress: bool, store: Any, workers: int = 1,
            pools: contextlib.ExitStack | None = None) -> dict[str, Any]:
    """The search itself (every rank): data, prior, rounds, test runs; the results dict."""
    from clusterclip.experiment.runner import _load_inputs
    from clusterclip.io import load_npy
    from clusterclip.search.output import results_dict, verify_dict

    log = _log(progress)
    labels, texts, corpus = _load_inputs(w.root)
    num_clusters = int(labels.max()) + 1
    centroids = np.asarray(load_npy(w.path("centroids.npy"), "centroids"), dtype=np.float32)
    histogram = exclude = overlap = None
    keys: list[str] = []
    if target is not None:
        tval, ttest = target_splits(target.rows_per_file, target.usable, config.seed)
        log(f"search: embedding the target's {tval.size + ttest.size} documents with W's "
            "embedder (its prior and its copies in the corpus; an earlier search's are reused); "
            "the estimate follows")
        histogram, ov, key = _target_facts(w, corpus, texts, target, tval, ttest,
                                           centroids[:num_clusters], device, store)
        exclude, val_kept = excluded_documents(ov, labels, tval, ttest)
        overlap = overlap_summary(ov, exclude, val_kept)
        keys.append(key)
    data, splits = prepare(texts, labels, target, config, exclude)
    vdata = None
    if config.verify_model is not None:  # the same splits, read at the larger model's window
        vdata, _ = prepare(texts, labels, target, replace(config, model=config.verify_model),
                           exclude)
    trainer = ProxyTrainer(data, device, threads, store, progress=progress, log=log,
                           workers=workers, pools=pools)
    trainer.keys.update(keys)
    estimate(config, data, device, threads, log, vdata, workers)
    t0 = time.perf_counter()
    metric = (w.stage("cluster") or {}).get("params", {}).get("metric", "cosine")
    space = build_space(data, num_clusters, histogram, centroids, metric, config.seed)
    result: SearchResult = run_search(space, trainer.evaluate,
                                      SearchOptions(config.runs, config.rounds, config.seed),
                                      on_main=D.on_main, log=log)
    chosen = result.proxies[result.chosen].candidate
    arms = test_arms(space, spec_of(chosen))
    tests = run_tests(trainer, arms, test_seeds(config))
    verify, vtiming = None, {}
    if vdata is not None:
        vtrainer = ProxyTrainer(vdata, device, threads, store, progress=progress, log=log,
                                workers=workers, pools=pools)
        verify = verify_dict(config.verify_model, vdata, run_tests(vtrainer, arms,
                                                                   test_seeds(config)),
                             tests, "target" if space.prior is not None else "macro")
        trainer.keys |= vtrainer.keys
        vtiming = {"verify_trained_runs": vtrainer.trained,
                   "verify_reused_runs": vtrainer.reused}
    seconds = time.perf_counter() - t0
    keys = sorted(set().union(*D.gather_objects(trainer.keys)))
    return results_dict(config, data, splits, space, histogram, result, tests,
                        test_seeds(config), keys,
                        {"seconds": round(seconds, 1), "trained_runs": trainer.trained,
                         "reused_runs": trainer.reused, "run_seconds": trainer.seconds,
                         **vtiming}, overlap, verify)


def write_swarm(results: dict[str, Any], directory: Any) -> None:
    """The proxies as a swarm (``ratios.csv``, ``metrics.csv``: the layout ``search
    propose`` writes and ``search fit`` reads), so the offline search's proxies and a
    trainer's share one format and one predictor."""
    from clusterclip.search.swarm import search_tables, write_csv

    ratios, metrics = search_tables(results)
    write_csv(directory / "ratios.csv", ratios)
    write_csv(directory / "metrics.csv", metrics)


def run_search_workdir(workdir: str | os.PathLike[str], config: SearchConfig, *,
                       device: str = "cpu", threads: int | None = None,
                       progress: bool = True, workers: int = 1) -> dict[str, Any]:
    """Search on work directory ``workdir`` and write ``W/search/`` (one atomic
    replacement, through the work directory's stage runner; the finished runs move along
    in ``W/search/runs/``). Every ``torchrun`` rank calls this; each trains its share of
    a batch of proxies with ``workers`` worker processes (the results do not depend on
    it). Returns the results dict plus ``out_dir`` and ``wall_seconds``."""
    from clusterclip.experiment.pool import check_workers
    from clusterclip.experiment.runs import RunStore, check_device, default_threads
    from clusterclip.io import atomic_output_dir, mark_output, unmark_unused
    from clusterclip.search.output import write_outputs
    from clusterclip.workdir import Workdir

    config.validate()
    check_device(device)
    threads = default_threads(config.experiment().model) if threads is None else threads
    check_workers(threads, workers)
    t0 = time.perf_counter()
    # the target is read (and refused) before anything in W is touched
    target = read_target(list(config.targets), config.text_field) if config.targets else None
    w = Workdir(workdir, create=False)
    out = w.path("search")
    store = RunStore(out / "runs")
    done: dict[str, Any] = {}

    def work(run: Any) -> dict[str, Any]:
        # ours (the stage runner checked): marked before the first run
        D.on_main(lambda: mark_output(out, "search"))
        try:
            with contextlib.ExitStack() as pools:  # the worker pools end with the search
                results = _search(w, config, target, device, threads, progress, store,
                                  workers, pools)
        except BaseException:
            if D.is_main():  # a failure before the first run leaves no folder behind
                unmark_unused(out)
            raise

        def write() -> None:
            store.prune(set(results["run_keys"]))
            # the finished runs stay where they are, listed as ours
            with atomic_output_dir(out, "search", adopt=store.listed(out)) as tmp:
                write_outputs(results, tmp)
                write_swarm(results, tmp)
        D.on_main(write)
        done.update(results)
        return {"objective": results["objective"]}

    with w.locked():
        w.run_stage("search", key={"config": config.to_dict(), "device": device,
                                   "threads": threads},
                    reads=["labels.npy", "corpus", "centroids.npy"], inputs=list(config.targets),
                    outputs=["search"], work=work, cache=False)
    return {**done, "wall_seconds": round(time.perf_counter() - t0, 1), "out_dir": str(out)}
