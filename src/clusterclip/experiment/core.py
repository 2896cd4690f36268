"""The experiment: one small LM per (strategy, seed) at the same token budget.

:func:`compare_strategies` is the core (texts and labels in, a results dict
out, no files but an optional store of finished runs), in five steps:
:func:`prepare_data` (tokens, subsample, held-out split), :func:`plan_budget`,
:func:`run_keys` (the store's fingerprints), :func:`experiment_run` (one run,
through :mod:`~clusterclip.lm.runs`, which ``search`` shares) and
:func:`experiment_results`. The work directory's side (reading ``W/labels.npy`` and
``W/corpus/``, writing ``W/experiment/``) is the stage
:mod:`clusterclip.stages.experiment`; the configuration (:class:`ExperimentConfig`) and
the documents' encoding (:func:`encode_texts`) are :mod:`clusterclip.lm.runconfig`'s,
which ``search`` shares, re-exported here.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.lm.data import (
    checked_labels,
    matched_train_sample,
    stratified_split,
    stratified_subsample,
)
from clusterclip.lm.metrics import (
    METRICS,
    bits_per_byte,
    cluster_repetition,
    mean_std,
    per_cluster_loss,
    schedule_keys,
    schedule_stats,
    summarize,
)
from clusterclip.lm.runconfig import (  # noqa: F401  (some re-exported: their old home)
    ANNEAL,
    ANNEAL_FROM,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_DOCS,
    DEFAULT_STRATEGIES,
    EXPERIMENT_STRATEGIES,
    MIXTURE,
    MIXTURE_STRATEGIES,
    ONLINE,
    QUICK_EPOCHS,
    STRATEGIES,
    ExperimentConfig,
    encode_texts,
)
from clusterclip.lm.runs import (
    RUN_FORMAT,
    Budget,
    RunStore,
    ScheduleSpec,
    busy_cpus,
    default_threads,
    estimate_seconds,
    format_seconds,
    schedule_sampler,
    torch_settings,
    train_on_schedule,
    usable_cpus,
)
from clusterclip.pool import pooled
from clusterclip.sampling.budget import token_balanced_weights
from clusterclip.sampling.clip import quartile_clusters
from clusterclip.sampling.mixture import Mixture, Stage

#: A run's held-out micro loss in bits per byte (comparable across tokenizers).
BPB = "val_micro_bits_per_byte"


# -- data split ------------------------------------------------------------------------

@dataclass
class ExperimentData:
    """The documents of an experiment and their split, shared by every run.

    ``labels``: int64[N] cluster ids after the exclusions (no text, subsampled out: -1);
    ``train_labels``: the same with the held-out documents -1 too; ``docs`` and
    ``doc_tokens``: every document's byte tokens (EOS included) and their count.
    """

    labels: np.ndarray
    train_labels: np.ndarray
    docs: list[np.ndarray]
    doc_tokens: np.ndarray
    truncated: np.ndarray
    no_text: int
    left_out: int
    cluster_sizes: np.ndarray
    valid_idx: np.ndarray
    train_eval_idx: np.ndarray
    train_tokens: int
    valid_ids: np.ndarray
    tail_clusters: list[int]
    head_clusters: list[int]
    groups: np.ndarray | None = None
    doc_bytes: np.ndarray | None = None   # bytes each document's tokens cover (+1, its end)
    config: ExperimentConfig | None = None  # the experiment's, the model's vocabulary set

    @property
    def num_clusters(self) -> int:
        return int(self.cluster_sizes.size)

    @property
    def n_train_docs(self) -> int:
        return int(np.count_nonzero(self.train_labels >= 0))


def prepare_data(texts: Sequence[str | None], labels: np.ndarray, config: ExperimentConfig,
                 groups: np.ndarray | None = None) -> ExperimentData:
    """Tokenise, exclude documents without text, subsample (``config.max_docs``) and
    split off the cluster-stratified held-out set and its matched training sample
    (``data.config``: ``config`` with the model's vocabulary, :func:`encode_texts`)."""
    labels, groups = checked_labels(texts, labels, groups)
    docs, truncated, doc_bytes, config = encode_texts(texts, config)
    doc_tokens = np.array([d.size for d in docs], dtype=np.int64)
    no_text = (doc_tokens == 0) & (labels >= 0)
    labels[no_text] = -1  # counted below, never drawn
    if not np.any(labels >= 0):
        raise InputError("labels: no document has a cluster (all -1)")
    clustered = int(np.count_nonzero(labels >= 0))
    if config.max_docs is not None:
        labels[~stratified_subsample(labels, config.max_docs, config.split_seed)] = -1
    left_out = clustered - int(np.count_nonzero(labels >= 0))

    num_clusters = int(labels.max()) + 1
    cluster_sizes = np.bincount(labels[labels >= 0], minlength=num_clusters)
    held = stratified_split(labels, config.valid_fraction, config.min_cluster_docs,
                            config.split_seed) == 1
    if not held.any():
        raise InputError(f"labels: no cluster has {config.min_cluster_docs} documents, "
                         "so nothing can be held out for validation")
    train_labels = labels.copy()
    train_labels[held] = -1
    valid_idx = np.flatnonzero(held)
    valid_ids = np.unique(labels[valid_idx])
    tail, head = quartile_clusters(cluster_sizes, among=valid_ids)
    head = head[::-1]  # ascending by size, the order the results list
    return ExperimentData(
        labels=labels, train_labels=train_labels, docs=docs, doc_tokens=doc_tokens,
        truncated=truncated, no_text=int(np.count_nonzero(no_text)), left_out=left_out,
        cluster_sizes=cluster_sizes, valid_idx=valid_idx,
        train_eval_idx=matched_train_sample(labels, held, config.split_seed + 1),
        train_tokens=int(doc_tokens[train_labels >= 0].sum()), valid_ids=valid_ids,
        tail_clusters=tail.tolist(), head_clusters=head.tolist(), groups=groups,
        doc_bytes=doc_bytes, config=config)


# -- budget ----------------------------------------------------------------------------

def plan_budget(data: ExperimentData, config: ExperimentConfig,
                specs: dict[str, ScheduleSpec]) -> Budget:
    """Every run's token budget; refuses (before any training) a clipped strategy that
    cannot supply it: with clip R it feeds at most R x the training tokens."""
    shortest = int(data.doc_tokens[data.train_labels >= 0].min())
    budget = Budget.plan(config.budget_tokens(data.train_tokens), config.batch_tokens, shortest)
    for name, spec in specs.items():
        budget.check_capacity(spec, data.train_labels, data.doc_tokens, name)
    return budget


def strategy_specs(data: ExperimentData, config: ExperimentConfig) -> dict[str, ScheduleSpec]:
    """Each strategy's schedule (token-balanced weights with ``balance_by="tokens"``)."""
    weights = None
    if config.balance_by == "tokens":
        weights = token_balanced_weights(data.train_labels, data.doc_tokens, config.alpha,
                                         data.num_clusters)
    specs = {}
    for s in config.strategies:
        if s == ONLINE:
            specs[s] = replace(ScheduleSpec.for_strategy("paced", config.clip, config.alpha,
                                                         weights), online=True)
        elif s not in MIXTURE_STRATEGIES:
            specs[s] = ScheduleSpec.for_strategy(s, config.clip, config.alpha, weights)
        elif config.mixture is None:
            raise InputError(f"strategies {s}: no mixture given (run `clusterclip search` "
                             "or give its file)", params=("strategies",))
        else:
            m = config.mixture
            if len(m.weights) < data.num_clusters:
                raise InputError(f"mixture: {len(m.weights)} weights but the labels have "
                                 f"{data.num_clusters} cluster ids: it was made for other "
                                 "labels", params=("mixture",))
            if s == MIXTURE:
                specs[s] = ScheduleSpec(strategy=m.timing, clip=m.clip, weights=m.weights,
                                        stages=m.stages or None)
            else:
                tl = data.train_labels
                specs[s] = _anneal_spec(m, np.bincount(tl[tl >= 0],
                                                       minlength=data.num_clusters))
    return specs


def _anneal_spec(m: Mixture, sizes: np.ndarray) -> ScheduleSpec:
    """Natural (weight n_k) until :data:`ANNEAL_FROM`, then the last stage of ``m``."""
    if m.staged:
        raise InputError(f"strategies {ANNEAL}: the mixture is staged already; "
                         f"compare it as strategy {MIXTURE}", params=("strategies",))
    natural = tuple(float(n) for n in np.asarray(sizes, np.float64))
    target = tuple(m.weights) + (0.0,) * max(0, len(natural) - len(m.weights))
    stages = (Stage(ANNEAL_FROM, natural), Stage(1.0, target[:len(natural)]))
    return ScheduleSpec(strategy=m.timing, clip=m.clip, weights=natural, stages=stages)


# -- run keys --------------------------------------------------------------------------

def run_keys(data: ExperimentData, config: ExperimentConfig, device: str, threads: int
             ) -> dict[tuple[str, int], str]:
    """The store key of every (strategy, seed): a fingerprint of the documents, labels,
    groups (if any), config (but the strategy list and seed count), strategy, seed,
    device type, thread count and the clusterclip and torch versions."""
    import torch

    from clusterclip import __version__
    from clusterclip.storage.digests import array_fingerprint, fingerprint

    run_inputs = {"docs": fingerprint([array_fingerprint(d) for d in data.docs]),
                  "labels": array_fingerprint(data.labels),
                  "config": {k: v for k, v in config.to_dict().items()
                             if k not in ("strategies", "seeds", "mixture", "primary",
                                          "auto_seeds", "seed_rule")},
                  "device": device, "threads": threads,
                  "versions": {"clusterclip": __version__, "torch": torch.__version__},
                  "format": RUN_FORMAT}
    if data.groups is not None:  # counted per group too: not the same run record as without
        run_inputs["groups"] = array_fingerprint(data.groups)
    mixture = config.to_dict().get("mixture")
    return {(s, seed): fingerprint({**run_inputs, "strategy": s, "seed": seed,
                                    **({"mixture": mixture} if s in MIXTURE_STRATEGIES
                                       else {})})
            for seed in range(config.seeds) for s in config.strategies}


# -- one run ---------------------------------------------------------------------------

def experiment_run(data: ExperimentData, budget: Budget, spec: ScheduleSpec, seed: int,
                   config: ExperimentConfig, device: Any,
                   on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Train one (strategy, seed) run and measure it: held-out and training-sample loss
    (micro, macro, tail, head, gap), per-cluster loss, gap and repetition, the curve and
    what the schedule fed."""
    from clusterclip.lm.train import evaluate_documents

    valid_docs = [data.docs[i] for i in data.valid_idx]
    train_eval_docs = [data.docs[i] for i in data.train_eval_idx]
    eb = config.train.eval_batch_size
    last: dict[str, Any] = {}

    def evaluate(model: Any) -> dict[str, float]:
        # held-out and training sample measured alike, at the same point
        v = evaluate_documents(model, valid_docs, eb, device)
        tr = evaluate_documents(model, train_eval_docs, eb, device)
        last["valid"], last["train"] = v, tr
        return {"val_loss": float(v[0].sum() / v[1].sum()),
                "train_loss": float(tr[0].sum() / tr[1].sum())}

    sampler = schedule_sampler(spec, data.train_labels, data.doc_tokens, budget, seed)
    observe = None
    if spec.online:
        from clusterclip.sampling.online import OnlineMixer

        sizes = sampler.cluster_sizes
        # n_k ** alpha on the clusters with documents only (0 ** -0.5 would be inf, and
        # inf * 0 a NaN prior, for an empty cluster under a negative alpha)
        prior = (np.where(sizes > 0, np.maximum(sizes, 1).astype(np.float64) ** spec.alpha, 0.0)
                 if spec.weights is None else np.asarray(spec.weights)[:sizes.size])
        mixer = OnlineMixer(sampler, seed=seed, prior=prior)
        observe = lambda idx, losses: mixer.observe(data.train_labels[idx], losses)  # noqa: E731
    _, log, fed = train_on_schedule(config.model, config.train, data.docs, sampler,
                                    budget.steps, seed, device, evaluate, on_step, observe)
    ls, nt = last["valid"]  # the evaluations at the last step
    tls, tnt = last["train"]
    val = summarize(ls, nt, data.labels[data.valid_idx], data.cluster_sizes)
    train_micro = float(tls.sum() / tnt.sum())
    tids, tloss, _ = per_cluster_loss(tls, tnt, data.labels[data.train_eval_idx])
    train_by_id = dict(zip(tids.tolist(), tloss.tolist(), strict=True))
    ids = [int(k) for k in val["per_cluster"]]
    reps = cluster_repetition(fed, data.train_labels, ids)
    per_cluster = {}
    for k, rep in zip(ids, reps.tolist(), strict=True):
        pc = dict(val["per_cluster"][str(k)])
        pc["train_loss"] = train_by_id[k]
        pc["gap"] = pc["loss"] - train_by_id[k]
        pc["repetition"] = rep
        per_cluster[str(k)] = pc
    # The sampler's own clip events (a cluster's last allowed draw) inside the fed
    # prefix (count-only, no documents gathered).
    n_clipped = 0
    if spec.clip is not None:
        n_clipped = sum(1 for _, p in sampler.summary()["clip_events"] if p < fed.size)
    return {
        "seed": seed,
        "val_micro": val["micro"], "val_macro": val["macro"],
        BPB: bits_per_byte(ls, data.doc_bytes[data.valid_idx]),
        "val_tail": val["tail"], "val_head": val["head"],
        "train_micro": train_micro, "gap": val["micro"] - train_micro,
        "per_cluster": per_cluster,
        "curve": log["curve"],
        "schedule": schedule_stats(fed, data.labels, data.doc_tokens, data.tail_clusters,
                                   data.head_clusters,
                                   config.clip if spec.clip is None else spec.clip, n_clipped,
                                   data.groups),
    }


# -- results ---------------------------------------------------------------------------

def _aggregate(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s, rs in runs.items():
        entry: dict[str, Any] = {
            "metrics": {m: mean_std([r[m] for r in rs]) for m in METRICS},
            "schedule": {k: mean_std([r["schedule"][k] for r in rs])
                         for k in schedule_keys(rs[0]["schedule"])},
            "runs": rs}
        if all(BPB in r for r in rs):  # runs stored before bits per byte lack it
            entry["bits_per_byte"] = mean_std([r[BPB] for r in rs])
        if s != "random" and "random" in runs:
            base = runs["random"]
            entry["vs_random"] = {m: mean_std([r[m] - b[m] for r, b in zip(rs, base,
                                                                           strict=True)])
                                  for m in METRICS}
        out[s] = entry
    return out


def experiment_results(data: ExperimentData, budget: Budget, config: ExperimentConfig,
                       device: str, specs: dict[str, ScheduleSpec],
                       runs: dict[str, list[dict[str, Any]]], keys: Sequence[str],
                       timing: dict[str, Any]) -> dict[str, Any]:
    """The results dict of :func:`compare_strategies` from its finished runs."""
    labels, valid_idx = data.labels, data.valid_idx
    weights = next((s.weights for n, s in specs.items() if s.weights is not None
                    and n not in MIXTURE_STRATEGIES), None)
    from clusterclip.experiment.verdict import experiment_family

    out = {
        "config": config.to_dict(),
        "device": device,
        "data": {
            "documents": int(labels.size),
            "no_text": data.no_text,
            "subsampled_out": data.left_out,
            "excluded": int(np.count_nonzero(labels < 0)),
            "truncated": int(np.count_nonzero(data.truncated & (labels >= 0))),
            "train_docs": data.n_train_docs,
            "valid_docs": int(valid_idx.size),
            "train_eval_docs": int(data.train_eval_idx.size),
            "clusters": int(np.count_nonzero(data.cluster_sizes)),
            "valid_clusters": int(data.valid_ids.size),
            "tail_clusters": data.tail_clusters,
            "head_clusters": data.head_clusters,
            "train_tokens": data.train_tokens,
            "valid_tokens": int(data.doc_tokens[valid_idx].sum()),
            "budget_tokens": budget.tokens,
            "steps": budget.steps,
            "epochs_equivalent": budget.tokens / data.train_tokens,
            "clusterclip_capacity_docs": config.clip * data.n_train_docs,
            "cluster_weights": None if weights is None else list(weights),
        },
        "clusters": {str(k): {"size": int(data.cluster_sizes[k]),
                              "valid_docs": int(np.count_nonzero(labels[valid_idx] == k))}
                     for k in np.flatnonzero(data.cluster_sizes).tolist()},
        "strategies": _aggregate(runs),
        "run_keys": sorted(keys),
        "timing": timing,
    }
    primary = config.primary_pair()
    out["primary"] = None if primary is None else {
        "arm": primary[0], "baseline": "random", "metric": primary[1]}
    out["verdict"] = experiment_family(out)
    return out


# -- the experiment --------------------------------------------------------------------

def _announce(log: Callable[[str], None], config: ExperimentConfig, data: ExperimentData,
              dev: Any, threads: int, todo: int, reused: int, steps: int,
              workers: int = 1) -> float:
    """Print the time estimate (and a warning on a busy machine); returns the estimate."""
    eval_docs = [data.docs[i] for i in data.valid_idx] + [data.docs[i]
                                                          for i in data.train_eval_idx]
    with torch_settings(threads):
        est = estimate_seconds(config.model, config.train, dev, eval_docs, todo, steps)
    est /= max(1, min(workers, todo))
    was = f", {reused} reused from an earlier run" if reused else ""
    log(f"experiment: {todo} run(s) to train{was}, {steps} steps each, "
        f"{min(workers, todo)} worker(s) of {threads} thread(s) on {dev.type}; estimated "
        f"{format_seconds(est)} of training (from a few timed steps)")
    busy = busy_cpus()
    if threads > 1 and busy is not None and busy > usable_cpus() - threads + 0.5:
        log(f"experiment: the machine is busy (load {busy:.1f} on {usable_cpus()} CPUs); "
            f"{threads} threads may run much slower than 1 thread")
    return est


def _run_state(*state: Any) -> tuple[Any, ...]:
    return state


def _train_one(state: tuple[Any, ...], run: tuple[str, int],
               on_step: Callable[[int], None] | None = None) -> tuple[dict[str, Any], float]:
    """One (strategy, seed) run of :func:`experiment_run` at the experiment's thread count
    (in this process or a worker's): ``(record, seconds)``."""
    import torch

    data, budget, specs, config, device, threads = state
    t0 = time.perf_counter()
    with torch_settings(threads):
        rec = experiment_run(data, budget, specs[run[0]], run[1], config, torch.device(device),
                             on_step=on_step)
    return rec, round(time.perf_counter() - t0, 1)


def compare_strategies(texts: Sequence[str | None], labels: np.ndarray,
                       config: ExperimentConfig, *, device: str = "cpu",
                       threads: int | None = None, workers: int = 1, progress: bool = True,
                       store: RunStore | None = None, groups: np.ndarray | None = None,
                       on_run: Callable[[str, int, bool], None] | None = None,
                       log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train one model per (strategy, seed) and measure held-out loss.

    ``texts``: N documents (None = no text, excluded); ``labels``: int[N]
    cluster ids, -1 for excluded documents. Above ``config.max_docs``
    clustered documents a cluster-stratified subsample is used (the others
    count as excluded). Returns a JSON-serialisable dict: ``config`` (``seeds``: the
    seeds run), ``primary`` (the declared primary question), ``data`` (split and budget
    figures), ``clusters``, and
    ``strategies[name] = {"metrics": {metric: {mean, std, values}},
    "schedule": {stat: {mean, std, values}}`` (see :data:`SCHEDULE_STATS`),
    ``"vs_random": {metric: {mean, std, values}} (paired by seed), "runs": [...]}``,
    ``verdict`` (:func:`clusterclip.experiment.verdict.experiment_family`: every
    comparison's mean, paired-t 95% interval, p and Holm-adjusted p, and the decision's
    category), and ``timing`` (seconds per run, the estimate and the reused runs: the only
    part that varies between identical runs).

    ``config.auto_seeds``: seeds 0, 1, ... are added by
    :data:`~clusterclip.lm.runconfig.SEED_RULE` (fixed before any run) until the
    primary question is resolved or its cap is reached; a rerun after a kill finds the same
    runs stored and so takes the same steps to the same seeds.

    ``groups``: int[N] near-duplicate group per document (``W/groups.npy``):
    each run's schedule then also counts ``max_group_repetition``.
    ``store``: finished runs are saved there under :func:`run_keys` and reused when
    found. ``on_run(strategy, seed, reused)`` is called after each run (an exception
    there stops the experiment; finished runs stay stored). ``workers`` > 1: as many worker
    processes (:mod:`~clusterclip.pool`, the same results). ``log`` receives
    the time estimate printed before training (default: stderr when
    ``progress``).
    """
    import torch

    if log is None:
        def log(msg: str) -> None:
            if progress:
                print(msg, file=sys.stderr, flush=True)

    data = prepare_data(texts, labels, config, groups)
    config = data.config
    specs = strategy_specs(data, config)
    budget = plan_budget(data, config, specs)
    dev = torch.device(device)
    threads = default_threads(config.model) if threads is None else threads
    state = (data, budget, specs, config, dev.type, threads)
    timing: dict[str, Any] = {"reused_runs": 0, "threads": threads}
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in config.strategies}
    n = config.seeds
    while True:
        part = replace(config, seeds=n)
        keys = run_keys(data, part, dev.type, threads)
        _train_seeds(state, keys, len(runs[config.strategies[0]]), runs, timing, log,
                     workers=workers, progress=progress, store=store, on_run=on_run)
        # without random and another strategy there is no primary: the seeds stay fixed
        n = (_more_seeds(config, runs) if config.auto_seeds and config.primary_pair()
             else None)
        if n is None:
            break
    return experiment_results(data, budget, part, dev.type, specs, runs, list(keys.values()),
                              timing)


def _more_seeds(config: ExperimentConfig, runs: dict[str, list[dict[str, Any]]]
                ) -> int | None:
    """The seed count :data:`~clusterclip.lm.runconfig.SEED_RULE` asks for next, from
    the primary question's differences so far (None: stop)."""
    from clusterclip.lm.runconfig import SEED_RULE, VERDICT_METRICS

    strategy, label = config.primary_pair()
    metric = next(m for m, lab in VERDICT_METRICS.items() if lab == label)
    diffs = [a[metric] - b[metric] for a, b in zip(runs[strategy], runs["random"],
                                                   strict=True)]
    return SEED_RULE.next_count(diffs)


def _train_seeds(state: tuple[Any, ...], keys: dict[tuple[str, int], str], first: int,
                 runs: dict[str, list[dict[str, Any]]], timing: dict[str, Any],
                 log: Callable[[str], None], *, workers: int, progress: bool,
                 store: RunStore | None,
                 on_run: Callable[[str, int, bool], None] | None) -> None:
    """Train (or find stored) the runs of ``keys`` from seed ``first`` on, appending them
    to ``runs`` in seed order; their seconds (a stored run's as recorded) to ``timing``."""
    from tqdm import tqdm

    data, budget, _, config, dev_type, threads = state
    keys = {k: v for k, v in keys.items() if k[1] >= first}
    cached = {k: store.get(v) for k, v in keys.items()} if store is not None else {}
    todo = [k for k in keys if cached.get(k) is None]
    timing["reused_runs"] += len(keys) - len(todo)
    if todo:
        import torch

        est = _announce(log, config, data, torch.device(dev_type), threads, len(todo),
                        len(keys) - len(todo), budget.steps, workers)
        timing["estimated_seconds"] = round(timing.get("estimated_seconds", 0.0) + est, 1)
    bar = tqdm(total=budget.steps * len(todo), desc="experiment", unit="step",
               disable=not progress, dynamic_ncols=True)

    def here(run: tuple[str, int]) -> tuple[dict[str, Any], float]:
        bar.set_postfix_str(f"{run[0]} seed {run[1]}")
        return _train_one(state, run, on_step=bar.update)

    trained = pooled(workers, _run_state, state, _train_one, todo, here)
    with contextlib.closing(trained), bar:
        for seed in sorted({k[1] for k in keys}):
            for strategy in config.strategies:
                run = cached.get((strategy, seed))
                if run is None:
                    run, seconds = next(trained)
                    if workers > 1 and len(todo) > 1:  # a worker's run: whole, at its end
                        bar.update(budget.steps)
                    if store is not None:
                        run = store.put(keys[(strategy, seed)], run, seconds)
                else:
                    seconds = store.seconds(keys[(strategy, seed)])
                if seconds is not None:
                    timing[f"{strategy}/seed{seed}"] = seconds
                runs[strategy].append(run)
                if on_run is not None:
                    on_run(strategy, seed, (strategy, seed) not in todo)
