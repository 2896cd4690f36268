"""``clusterclip search``: the data, the target's prior, the proxy rounds and the test
verdict, from what the stage (:mod:`clusterclip.stages.search`) reads of a work directory.

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
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.errors import InputError
from clusterclip.limits import MAX_ROWS, MAX_SEED, check_ranges, ranged
from clusterclip.lm.data import MIN_CLUSTER_DOCS
from clusterclip.lm.runconfig import DEFAULT_MAX_DOCS, MAX_SEEDS, ExperimentConfig
from clusterclip.lm.runs import ScheduleSpec
from clusterclip.search.core import SearchOptions, SearchResult, round_sizes, run_search
from clusterclip.search.proxies import EvalSet, ProxyData, ProxyTrainer, spec_of
from clusterclip.search.space import (
    DEFAULT_CLIP,
    DEFAULT_TIMING,
    SearchSpace,
    natural_and_prior,
    super_clusters,
)
from clusterclip.search.splits import corpus_splits, target_splits
from clusterclip.search.target import Target

#: ``test_seeds`` that adds seeds by the stop rule.
AUTO = "auto"
#: The most proxy runs of a search, and rounds.
MAX_RUNS = 100_000
MAX_ROUNDS = 64
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
#: The default's test seeds are ``auto``: :data:`~clusterclip.search.output.SEED_RULE`.
DEFAULT = {"runs": 48, "rounds": 3, "test_seeds": "auto", "model": "small",
           "verify_model": "base"}
#: ``--verify-model none``: no verification.
NO_VERIFY = "none"


def quick_workers(world: int = 1) -> int:
    """``--quick``'s worker processes per rank: :data:`QUICK_WORKERS`, at most the usable
    CPUs shared among ``world`` ranks, at least 1."""
    from clusterclip.lm.runs import usable_cpus

    return max(1, min(QUICK_WORKERS, usable_cpus() // world))


def one_size_up(model: str) -> str | None:
    """The next larger preset after ``model`` (None for the largest)."""
    from clusterclip.lm.config import MODEL_PRESETS

    names = list(MODEL_PRESETS)
    i = names.index(model) if model in names else len(names)
    return names[i + 1] if i + 1 < len(names) else None


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """Everything that determines a search's result (see ``clusterclip search --help``),
    checked when made: a bad value raises :class:`~clusterclip.errors.InputError` naming
    its parameter, and so does a bad proxies' (or verification's) configuration
    (:meth:`experiment`).

    Examples
    --------
    >>> SearchConfig.from_options(quick=True).runs
    24
    >>> SearchConfig(runs=2, rounds=3)
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: rounds 3: more than runs 2
    """

    targets: tuple[str, ...] = ()
    text_field: str = "text"
    runs: int = ranged(1, MAX_RUNS, default=DEFAULT["runs"])
    rounds: int = ranged(1, MAX_ROUNDS, default=DEFAULT["rounds"])
    test_seeds: int | str = ranged(1, MAX_SEEDS, words=(AUTO,), default=DEFAULT["test_seeds"])
    model: str = DEFAULT["model"]
    quick: bool = False
    seed: int = ranged(0, MAX_SEED, default=0)
    max_docs: int | None = ranged(0, MAX_ROWS, default=DEFAULT_MAX_DOCS)
    tokenizer: str | None = None
    verify_model: str | None = DEFAULT["verify_model"]

    @classmethod
    def from_options(cls, *, quick: bool = False, **options: Any) -> SearchConfig:
        """``--quick``'s or the default runs, rounds, test seeds and model, those given
        (not None) replacing them; without a ``verify_model``, one size up from the
        model (``--quick``: none); ``verify_model`` :data:`NO_VERIFY`: none."""
        given = {**(QUICK if quick else DEFAULT), "quick": quick,
                 **{k: v for k, v in options.items() if v is not None}}
        if options.get("verify_model") is None and not quick:  # one size up, if there is one
            given["verify_model"] = one_size_up(given["model"])
        if given["verify_model"] == NO_VERIFY:
            given["verify_model"] = None
        return cls(**given)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.rounds > self.runs:
            raise InputError(f"rounds {self.rounds}: more than runs {self.runs}",
                             params=("rounds", "runs"))
        self.experiment()  # the proxies' configuration, checked when made
        if self.verify_model is not None:
            from clusterclip.lm.config import MODEL_PRESETS

            if self.verify_model not in MODEL_PRESETS:
                raise InputError(f"verify_model: unknown preset {self.verify_model!r}",
                                 params=("verify_model",))
            if (MODEL_PRESETS[self.verify_model][0].num_parameters()
                    <= MODEL_PRESETS[self.model][0].num_parameters()):
                raise InputError(f"verify_model {self.verify_model}: not larger than the "
                                 f"proxies' {self.model}", params=("verify_model",))
            self.verification()

    def experiment(self) -> ExperimentConfig:
        """The proxies' model, training and budget: the experiment's (``--quick``: its quick
        configuration), at this model size, the split and proxy seed ``seed``."""
        base = ExperimentConfig.quick() if self.quick else ExperimentConfig()
        return replace(base.with_model(self.model), max_docs=self.max_docs,
                       split_seed=self.seed, strategies=(DEFAULT_TIMING,), seeds=1,
                       tokenizer=self.tokenizer)

    def verification(self) -> ExperimentConfig:
        """The verification's model and training: :meth:`experiment` at ``verify_model``."""
        return self.at_verify_model().experiment()

    def at_verify_model(self) -> SearchConfig:
        """This search with the proxies at ``verify_model`` (the verification's runs; it
        verifies nothing further itself)."""
        return replace(self, model=self.verify_model, verify_model=None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = list(self.targets)
        if self.verify_model is None:
            del d["verify_model"]  # unverified results keep their bytes
        if self.tokenizer is None:
            del d["tokenizer"]  # byte-level results keep their bytes
        if self.test_seeds == AUTO:
            from clusterclip.search.output import SEED_RULE

            d["seed_rule"] = SEED_RULE.to_dict()
        d["experiment"] = self.experiment().to_dict()
        return d


# -- data ------------------------------------------------------------------------------

def _eval_set(name: str, corpus_idx: np.ndarray, target_docs: list[np.ndarray],
              target_bytes: np.ndarray) -> EvalSet:
    from clusterclip.storage.digests import array_fingerprint, fingerprint

    return EvalSet(name, corpus_idx, tuple(target_docs), fingerprint(
        {"corpus": array_fingerprint(corpus_idx),
         "target": [array_fingerprint(d) for d in target_docs]}),
        np.asarray(target_bytes, dtype=np.int64))


def prepare(texts: list[str | None], labels: np.ndarray, target: Target | None,
            config: SearchConfig, exclude: np.ndarray | None = None
            ) -> tuple[ProxyData, dict[str, np.ndarray]]:
    """The corpus's and the target's splits and the data every run sees; the corpus
    documents ``exclude`` (bool[N]: the target's copies) are in no split."""
    from clusterclip.lm.data import checked_labels, stratified_subsample
    from clusterclip.lm.runconfig import encode_texts
    from clusterclip.lm.runs import Budget
    from clusterclip.storage.digests import array_fingerprint, fingerprint

    labels, _ = checked_labels(texts, labels, None)
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
        raise InputError(f"labels: no cluster has {MIN_CLUSTER_DOCS} documents, so nothing "
                         "can be held out")
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
    _, natural, prior = natural_and_prior(t, num_clusters, histogram,
                                          target_docs="val documents",
                                          docs="training documents")
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


def test_seeds(config: SearchConfig, count: int | None = None) -> list[int]:
    """Fresh seeds for the verdict (``count`` of them, else the configuration's; ``auto``:
    the stop rule's start): none of them is the proxies' seed."""
    from clusterclip.search.output import SEED_RULE
    from clusterclip.search.verify import fresh_seeds

    if count is None:
        count = SEED_RULE.start if config.test_seeds == AUTO else int(config.test_seeds)
    return fresh_seeds(count, config.seed)


def verdict_tests(trainer: ProxyTrainer, arms: dict[str, ScheduleSpec], config: SearchConfig,
                  objective: str) -> tuple[dict[str, dict[str, Any]], list[int]]:
    """:func:`run_tests` at :func:`test_seeds`; with ``test_seeds`` auto, more seeds by
    :data:`~clusterclip.search.output.SEED_RULE` (fixed before any run) until `searched`
    against random on ``objective`` is resolved or the cap is reached. A rerun after a kill
    finds the same runs stored and takes the same steps. Returns ``(tests, seeds)``."""
    from clusterclip.search.output import SEED_RULE

    seeds = test_seeds(config)
    recs = _test_records(trainer, arms, seeds)
    while config.test_seeds == AUTO:
        tests = summarise_tests(arms, recs)
        diffs = np.subtract(tests["searched"][objective], tests["random"][objective])
        n = SEED_RULE.next_count(diffs)
        if n is None:
            break
        more = test_seeds(config, n)[len(seeds):]
        for name, new in _test_records(trainer, arms, more).items():
            recs[name] += new
        seeds += more
    return summarise_tests(arms, recs), seeds


def _test_records(trainer: ProxyTrainer, arms: dict[str, ScheduleSpec], seeds: list[int]
                  ) -> dict[str, list[dict[str, Any]]]:
    jobs = [(spec, s, trainer.data.test) for spec in arms.values() for s in seeds]
    recs = trainer.run_all(jobs, "search test runs")
    return {name: recs[i * len(seeds):(i + 1) * len(seeds)] for i, name in enumerate(arms)}


def run_tests(trainer: ProxyTrainer, arms: dict[str, ScheduleSpec], seeds: list[int]
              ) -> dict[str, dict[str, list[float]]]:
    """``test[name][metric]``: per seed, in seed order (and ``fed_share``, the mean over
    seeds of each cluster's share of the fed tokens; ``coverage``, per seed, the shares
    of the training documents and tokens never drawn)."""
    return summarise_tests(arms, _test_records(trainer, arms, seeds))


def summarise_tests(arms: dict[str, ScheduleSpec], recs: dict[str, list[dict[str, Any]]]
                    ) -> dict[str, dict[str, Any]]:
    """:func:`run_tests`'s dict from each arm's run records, in seed order."""
    out: dict[str, dict[str, Any]] = {}
    for name in arms:
        part = recs[name]
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

    from clusterclip.lm.config import format_parameters as size
    from clusterclip.lm.runs import estimate_seconds, format_seconds, torch_settings

    exp = data.config
    n_test = len(test_seeds(config)) * (3 if config.targets else 2)
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
        f"rounds ({sizes}) + {n_test} test runs ({len(test_seeds(config))} fresh seeds"
        + (", more by the stop rule of test seeds auto until the verdict is resolved"
           if config.test_seeds == AUTO else "") + "), "
        f"{data.budget.steps} steps each of a {size(exp.model.num_parameters())}-parameter "
        f"model; estimated {format_seconds(est)} of training on {world} process(es) x "
        f"{workers} worker(s) of {threads} thread(s) (from a "
        "few timed steps; runs stored by an earlier search are reused)"
        + ("" if vdata is None else f"; that includes {n_test} verification runs at "
           f"{config.verify_model} ({size(vdata.config.model.num_parameters())} parameters, "
           f"{vdata.budget.steps} steps each), {format_seconds(vest / (world * workers))}"))
    return est


def main_log(progress: bool) -> Callable[[str], None]:
    """A log to stderr on the main rank, when ``progress``."""
    def log(msg: str) -> None:
        if progress and D.is_main():
            print(msg, file=sys.stderr, flush=True)
    return log


@dataclass
class SearchInputs:
    """What the search reads of a work directory (:mod:`clusterclip.stages.search`
    gathers it): ``labels`` int[N] and ``texts`` of the corpus, W's ``centroids`` (at least
    one row per cluster id) and clustering ``metric``; with a target, its val documents'
    ``histogram`` over the clusters, the corpus documents ``exclude`` (bool[N], its
    copies), their ``overlap`` summary and the run-store ``keys`` of these facts."""

    labels: np.ndarray
    texts: list[str | None]
    centroids: np.ndarray
    metric: str = "cosine"
    histogram: np.ndarray | None = None
    exclude: np.ndarray | None = None
    overlap: dict[str, Any] | None = None
    keys: tuple[str, ...] = ()


def search(inputs: SearchInputs, config: SearchConfig, target: Target | None, device: str,
           threads: int, progress: bool, store: Any, workers: int = 1,
           pools: contextlib.ExitStack | None = None) -> dict[str, Any]:
    """The search itself (every rank): data, prior, rounds, test runs; the results dict."""
    from clusterclip.search.output import results_dict, seed_looks, verify_dict

    log = main_log(progress)
    labels, texts, exclude = inputs.labels, inputs.texts, inputs.exclude
    num_clusters = int(labels.max()) + 1
    histogram, centroids = inputs.histogram, inputs.centroids
    data, splits = prepare(texts, labels, target, config, exclude)
    vdata = None
    if config.verify_model is not None:  # the same splits, read at the larger model's window
        vdata, _ = prepare(texts, labels, target, config.at_verify_model(), exclude)
    trainer = ProxyTrainer(data, device, threads, store, progress=progress, log=log,
                           workers=workers, pools=pools)
    trainer.keys.update(inputs.keys)
    estimate(config, data, device, threads, log, vdata, workers)
    t0 = time.perf_counter()
    space = build_space(data, num_clusters, histogram, centroids, inputs.metric, config.seed)
    result: SearchResult = run_search(space, trainer.evaluate,
                                      SearchOptions(config.runs, config.rounds, config.seed),
                                      on_main=D.on_main, log=log)
    chosen = result.proxies[result.chosen].candidate
    arms = test_arms(space, spec_of(chosen))
    objective = "target" if space.prior is not None else "macro"
    tests, seeds = verdict_tests(trainer, arms, config, objective)
    verify, vtiming = None, {}
    if vdata is not None:
        vtrainer = ProxyTrainer(vdata, device, threads, store, progress=progress, log=log,
                                workers=workers, pools=pools)
        verify = verify_dict(config.verify_model, vdata, run_tests(vtrainer, arms, seeds),
                             tests, objective, looks=seed_looks(config.to_dict()))
        trainer.keys |= vtrainer.keys
        vtiming = {"verify_trained_runs": vtrainer.trained,
                   "verify_reused_runs": vtrainer.reused}
    seconds = time.perf_counter() - t0
    keys = sorted(set().union(*D.gather_objects(trainer.keys)))
    return results_dict(config, data, splits, space, histogram, result, tests, seeds, keys,
                        {"seconds": round(seconds, 1), "trained_runs": trainer.trained,
                         "reused_runs": trainer.reused, "run_seconds": trainer.seconds,
                         **vtiming}, inputs.overlap, verify)


def write_swarm(results: dict[str, Any], directory: Any) -> None:
    """The proxies as a swarm (``ratios.csv``, ``metrics.csv``: the layout ``search
    propose`` writes and ``search fit`` reads), so the offline search's proxies and a
    trainer's share one format and one predictor."""
    from clusterclip.search.swarm import search_tables, write_csv

    ratios, metrics = search_tables(results)
    write_csv(directory / "ratios.csv", ratios)
    write_csv(directory / "metrics.csv", metrics)
