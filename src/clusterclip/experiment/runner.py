"""The experiment: one small LM per (strategy, seed) at the same token budget.

:func:`compare_strategies` is the core (texts and labels in, a results dict
out, no files but an optional store of finished runs); :func:`run_experiment`
is the work-directory edge that reads ``W/labels.npy`` and ``W/corpus/`` and
writes ``W/experiment/`` (each finished run saved in ``W/experiment/runs/``,
so a killed experiment resumes where it stopped).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.experiment.config import DEFAULT_MODEL, MODEL_PRESETS, ModelConfig, TrainConfig
from clusterclip.experiment.data import (
    encode_documents,
    matched_train_sample,
    pack_sequences,
    stratified_split,
    stratified_subsample,
)
from clusterclip.experiment.metrics import (
    METRICS,
    cluster_repetition,
    mean_std,
    per_cluster_loss,
    quartile_clusters,
    schedule_keys,
    schedule_stats,
    summarize,
)
from clusterclip.experiment.output import write_outputs
from clusterclip.sampling.budget import (
    BALANCE_BY,
    schedule_length_for_tokens,
    token_balanced_weights,
)
from clusterclip.sampling.spec import (
    CLIP_STRATEGIES,
    DEFAULT_STRATEGIES,
    LENGTH_DEPENDENT_STRATEGIES,
    STRATEGIES,
    strategy_options,
)

#: Default budget in epochs-equivalent of the training tokens: enough that, on the
#: demo corpus with K=64 MiniLM clusters, uniform repeats small-cluster documents
#: far beyond the default clip 4 (up to ~30 times) and ClusterClip retires about half
#: of the clusters; below the clip, so ClusterClip can always meet it (BENCHMARKS.md).
DEFAULT_EPOCHS = 3.0
#: ``--quick``: still over one epoch, so the clip binds on the smallest clusters.
QUICK_EPOCHS = 1.5
#: Default cap on the documents an experiment uses (``--max-docs``; a cluster-stratified
#: subsample above it): the budget is in epochs, so time grows with the documents. At this
#: cap the default run (small model, 3 epochs, 3 seeds x 4 strategies, 1 thread) is about
#: 12 x 1.0 M training tokens at the measured 14.8k tokens/s plus evaluation: about 15
#: minutes on an idle 2-core machine (BENCHMARKS.md).
DEFAULT_MAX_DOCS = 2500
#: Torch CPU threads by default per model preset, from measurement on the 2-core
#: machine (BENCHMARKS.md): the small models gain little from a second thread when
#: idle and collapse when another process holds a core, so they use 1; ``base``
#: uses every CPU this process may run on.
PRESET_THREADS = {"tiny": 1, "small": 1, "base": None}


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines an experiment's numbers.

    The budget of every run is ``tokens`` when given, else ``epochs`` times the
    training set's tokens (after truncation), so small clusters are repeated
    whatever the corpus size; :meth:`budget_tokens` resolves it. The defaults
    are sized for the bundled 4,096-document demo corpus on 2 CPU cores (about
    15 minutes for 3 strategies x 3 seeds, with the clip binding on K=64
    clusters); :meth:`quick` is the minute-scale variant for tests and the demo.
    """

    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    seeds: int = 3
    clip: int = 4
    alpha: float = 0.0
    balance_by: str = "docs"
    epochs: float = DEFAULT_EPOCHS    # budget in passes over the training tokens ...
    tokens: int | None = None         # ... unless an explicit token budget is given
    max_doc_tokens: int = 128         # documents are truncated to this (EOS included)
    valid_fraction: float = 0.1
    min_cluster_docs: int = 10
    split_seed: int = 0
    max_docs: int | None = DEFAULT_MAX_DOCS  # cluster-stratified subsample above this
    model: ModelConfig = field(default_factory=lambda: MODEL_PRESETS[DEFAULT_MODEL][0])
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def quick(cls, **overrides: Any) -> ExperimentConfig:
        """A minute-scale configuration for tests, smoke runs and ``clusterclip demo``.

        The ``tiny`` model (1 layer, d=48, 44 k parameters) on the first 63
        bytes of each document, so that it still sees more than one
        epoch-equivalent of the training text (small clusters repeated, the
        clip binding) in about a minute on the demo corpus.
        """
        return replace(cls(epochs=QUICK_EPOCHS).with_model("tiny"), **overrides)

    def with_model(self, preset: str) -> ExperimentConfig:
        """This configuration with model size preset ``preset`` (see
        :data:`~clusterclip.experiment.config.MODEL_PRESETS`): its shape and
        learning rate, documents truncated to its window."""
        if preset not in MODEL_PRESETS:
            raise InputError(f"--model: unknown preset {preset!r} "
                             f"(choose from {', '.join(MODEL_PRESETS)})")
        model, lr = MODEL_PRESETS[preset]
        return replace(self, model=model, max_doc_tokens=model.seq_len,
                       train=replace(self.train, lr=lr))

    @property
    def batch_tokens(self) -> int:
        """Tokens in one training batch (batch size x window length)."""
        return self.train.batch_size * self.model.seq_len

    def budget_tokens(self, train_tokens: int) -> int:
        """Training tokens per run for a training set of ``train_tokens`` tokens.

        ``tokens`` if given, else ``epochs * train_tokens``; rounded down to
        whole batches, at least one batch.
        """
        want = self.tokens if self.tokens is not None else int(self.epochs * train_tokens)
        return max(1, want // self.batch_tokens) * self.batch_tokens

    def validate(self) -> None:
        """Raise :class:`InputError` naming the first bad value."""
        if not self.strategies:
            raise InputError("--strategies: give at least one strategy")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise InputError(f"--strategies: unknown strategy {s!r} "
                                 f"(choose from {', '.join(STRATEGIES)})")
        if len(set(self.strategies)) != len(self.strategies):
            raise InputError("--strategies: a strategy is named twice")
        if int(self.clip) != self.clip or self.clip < 1:
            raise InputError(f"--clip: must be an integer >= 1, got {self.clip}")
        if self.seeds < 1:
            raise InputError(f"--seeds: must be >= 1, got {self.seeds}")
        if not math.isfinite(self.alpha):
            raise InputError(f"--alpha: must be a finite number, got {self.alpha}")
        if self.balance_by not in BALANCE_BY:
            raise InputError(f"--balance-by: must be docs or tokens, got {self.balance_by!r}")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise InputError(f"--epochs: must be a positive number, got {self.epochs}")
        if self.tokens is not None and self.tokens < self.batch_tokens:
            raise InputError(f"--tokens: budget {self.tokens} is less than one batch "
                             f"({self.batch_tokens} tokens)")
        if self.max_docs is not None and self.max_docs < 2 * self.min_cluster_docs:
            raise InputError(f"--max-docs: must be at least {2 * self.min_cluster_docs} "
                             f"(0 = no cap), got {self.max_docs}")
        if self.max_doc_tokens > self.model.seq_len:
            raise InputError("max_doc_tokens must not exceed the model's seq_len")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["strategies"] = list(self.strategies)
        return d


def _usable_cpus() -> int:
    """CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _busy_cpus() -> float | None:
    """The 1-minute load average (runnable processes), None where unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def default_threads(model: ModelConfig) -> int:
    """Torch threads for ``model`` when ``--threads`` is not given (see
    :data:`PRESET_THREADS`); a model that is no preset counts as ``base``.

    Deliberately not from the load average: the thread count changes the floats
    (reduction order), and same inputs must give the same results.
    """
    name = next((n for n, (m, _) in MODEL_PRESETS.items() if m == model), "base")
    return PRESET_THREADS[name] or _usable_cpus()


@contextlib.contextmanager
def _torch_settings(threads: int) -> Iterator[None]:
    """Fixed thread count and deterministic kernels for the duration; restored after."""
    import torch

    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(max(1, threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def _schedule_stream(sampler: Any, docs: Sequence[np.ndarray], fed: list[int],
                     block: int = 256) -> Iterator[np.ndarray]:
    """Documents in schedule order; appends each index to ``fed`` as it is handed out.

    Only documents actually pulled into packing are recorded (not the rest of
    a sampler block), so ``fed`` is what the model's windows came from (the
    last one possibly in part: a window ends mid-document).
    """
    for idx in sampler.blocks(block):
        for i in idx.tolist():
            fed.append(i)
            yield docs[i]


#: Version of a stored run's content and of how its schedule is built; part of its key.
#: 2: paced sized to the budget, late tail share recorded.
RUN_FORMAT = 2


class RunStore:
    """Finished runs as ``DIR/<key>.json``, each written atomically.

    ``key`` is a fingerprint of everything that determines the run (see
    :func:`compare_strategies`), so a stored run is reused only for identical
    inputs; :meth:`prune` removes the runs of other inputs.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            rec = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # missing or unreadable: train it again
        return rec.get("run") if isinstance(rec, dict) and rec.get("key") == key else None

    def put(self, key: str, run: dict[str, Any], seconds: float) -> None:
        from clusterclip.io import write_json

        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self._path(key), {"key": key, "run": run, "seconds": seconds})

    def prune(self, keep: set[str]) -> list[str]:
        """Remove stored runs whose key is not in ``keep``; returns their keys."""
        gone = []
        for f in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            if f.stem not in keep and len(f.stem) == 16:
                f.unlink()
                gone.append(f.stem)
        return gone


def _estimate_seconds(config: ExperimentConfig, device: Any, eval_docs: Sequence[np.ndarray],
                      runs: int, steps: int) -> float:
    """Seconds that ``runs`` runs of ``steps`` steps will take, from a few timed steps
    and one timed evaluation pass of ``eval_docs`` on a throwaway model."""
    import torch
    import torch.nn.functional as F

    from clusterclip.experiment.config import VOCAB_SIZE
    from clusterclip.experiment.model import ByteLM
    from clusterclip.experiment.train import evaluate_documents

    gen = torch.Generator().manual_seed(0)
    model = ByteLM(config.model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=config.train.lr)
    data = torch.randint(0, VOCAB_SIZE, (config.train.batch_size, config.model.seq_len + 1),
                         generator=gen).to(device)
    timed = 3
    for i in range(timed + 1):
        if i == 1:  # the first step warms up
            t0 = time.perf_counter()
        loss = F.cross_entropy(model(data[:, :-1]).reshape(-1, VOCAB_SIZE),
                               data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
    per_step = (time.perf_counter() - t0) / timed
    t0 = time.perf_counter()
    evaluate_documents(model, eval_docs, config.train.eval_batch_size, device)
    per_eval = time.perf_counter() - t0
    return runs * (steps * per_step + max(2, config.train.eval_points) * per_eval)


def _aggregate(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s, rs in runs.items():
        entry: dict[str, Any] = {
            "metrics": {m: mean_std([r[m] for r in rs]) for m in METRICS},
            "schedule": {k: mean_std([r["schedule"][k] for r in rs])
                         for k in schedule_keys(rs[0]["schedule"])},
            "runs": rs}
        if s != "random" and "random" in runs:
            base = runs["random"]
            entry["vs_random"] = {m: mean_std([r[m] - b[m] for r, b in zip(rs, base,
                                                                           strict=True)])
                                  for m in METRICS}
        out[s] = entry
    return out


def compare_strategies(texts: Sequence[str | None], labels: np.ndarray,
                       config: ExperimentConfig, *, device: str = "cpu",
                       threads: int | None = None, progress: bool = True,
                       store: RunStore | None = None, groups: np.ndarray | None = None,
                       on_run: Callable[[str, int, bool], None] | None = None,
                       log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train one model per (strategy, seed) and measure held-out loss.

    ``texts``: N documents (None = no text, excluded); ``labels``: int[N]
    cluster ids, -1 for excluded documents. Above ``config.max_docs``
    clustered documents a cluster-stratified subsample is used (the others
    count as excluded). Returns a JSON-serialisable dict: ``config``,
    ``data`` (split and budget figures), ``clusters``, and
    ``strategies[name] = {"metrics": {metric: {mean, std, values}},
    "schedule": {stat: {mean, std, values}}`` (see :data:`SCHEDULE_STATS`),
    ``"vs_random": {metric: {mean, std, values}} (paired by seed), "runs": [...]}``,
    and ``timing`` (seconds per run, the estimate and the reused runs: the only
    part that varies between identical runs).

    ``groups``: int[N] near-duplicate group per document (``W/groups.npy``):
    each run's schedule then also counts ``max_group_repetition``.
    ``store``: finished runs are saved there under a fingerprint of the
    documents, labels, groups (if any), config (but the strategy list and seed
    count), strategy, seed, device type, thread count and the clusterclip and
    torch versions, and reused when found.
    ``on_run(strategy, seed, reused)`` is called after each run (an exception
    there stops the experiment; finished runs stay stored). ``log`` receives
    the time estimate printed before training (default: stderr when
    ``progress``).
    """
    import torch
    from tqdm import tqdm

    from clusterclip import ClusterClipSampler, __version__
    from clusterclip.experiment.train import evaluate_documents, train_run
    from clusterclip.io import array_fingerprint, fingerprint

    if log is None:
        def log(msg: str) -> None:
            if progress:
                print(msg, file=sys.stderr, flush=True)

    config.validate()
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != len(texts):
        raise InputError(f"labels: expected shape ({len(texts)},), got {labels.shape}")
    labels = labels.astype(np.int64)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != labels.shape or groups.dtype.kind not in "iu":
            raise InputError(f"groups: expected int[{labels.size}], got {groups.dtype} of shape "
                             f"{groups.shape}; rerun `clusterclip dedup`")
        groups = groups.astype(np.int64)
    docs, truncated = encode_documents(texts, config.max_doc_tokens)
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
                            config.split_seed)
    if not held.any():
        raise InputError(f"labels: no cluster has {config.min_cluster_docs} documents, "
                         "so nothing can be held out for validation")
    train_labels = labels.copy()
    train_labels[held] = -1
    valid_idx = np.flatnonzero(held)
    train_eval_idx = matched_train_sample(labels, held, config.split_seed + 1)
    train_tokens = int(doc_tokens[train_labels >= 0].sum())
    valid_ids = np.unique(labels[valid_idx])
    tail_clusters, head_clusters = (a.tolist() for a in
                                    quartile_clusters(valid_ids, cluster_sizes[valid_ids]))

    # With clip R, a clipped strategy can feed at most R x (training tokens): every
    # document R times. Refuse a budget it cannot meet, before any training.
    budget = config.budget_tokens(train_tokens)
    steps = budget // config.batch_tokens
    needed = budget + 1  # the stream's leading EOS plus every target
    clipped = {s: s in CLIP_STRATEGIES for s in config.strategies}
    for s in config.strategies:
        if clipped[s] and needed > config.clip * train_tokens:
            raise InputError(
                f"--clip {config.clip}: {s} can supply at most {config.clip} x "
                f"{train_tokens:,} = {config.clip * train_tokens:,} training tokens, but the "
                f"budget needs {needed:,}; raise --clip or lower --epochs / --tokens")
    n_train_docs = int(np.count_nonzero(train_labels >= 0))
    capacity = config.clip * n_train_docs
    # Enough draws for the budget even if every draw were the shortest document.
    shortest = int(doc_tokens[train_labels >= 0].min())
    num_samples = math.ceil(needed / shortest) + 1

    weights = None
    if config.balance_by == "tokens":
        weights = token_balanced_weights(train_labels, doc_tokens, config.alpha, num_clusters)

    dev = torch.device(device)
    if threads is None:
        threads = default_threads(config.model)
    valid_docs = [docs[i] for i in valid_idx]
    train_eval_docs = [docs[i] for i in train_eval_idx]
    eb = config.train.eval_batch_size

    # Everything a run's numbers depend on besides (strategy, seed).
    tokens_fp = fingerprint([array_fingerprint(d) for d in docs])
    run_inputs = {"docs": tokens_fp, "labels": array_fingerprint(labels),
                  "config": {k: v for k, v in config.to_dict().items()
                             if k not in ("strategies", "seeds")},
                  "device": dev.type, "threads": threads,
                  "versions": {"clusterclip": __version__, "torch": torch.__version__},
                  "format": RUN_FORMAT}
    if groups is not None:  # counted per group too: not the same run record as without
        run_inputs["groups"] = array_fingerprint(groups)
    keys = {(s, seed): fingerprint({**run_inputs, "strategy": s, "seed": seed})
            for seed in range(config.seeds) for s in config.strategies}
    cached = {k: store.get(v) for k, v in keys.items()} if store is not None else {}
    todo = [k for k in keys if cached.get(k) is None]
    timing: dict[str, Any] = {"reused_runs": len(keys) - len(todo), "threads": threads}
    if todo:
        with _torch_settings(threads):
            est = _estimate_seconds(config, dev, valid_docs + train_eval_docs, len(todo), steps)
        timing["estimated_seconds"] = round(est, 1)
        n_reused = len(keys) - len(todo)
        reused = f", {n_reused} reused from an earlier run" if n_reused else ""
        log(f"experiment: {len(todo)} run(s) to train{reused}, {steps} steps each, "
            f"{threads} thread(s) on {dev.type}; estimated "
            f"{f'{est:.0f} s' if est < 90 else f'{est / 60:.1f} min'} of training "
            "(from a few timed steps)")

        busy = _busy_cpus()
        if threads > 1 and busy is not None and busy > _usable_cpus() - threads + 0.5:
            log(f"experiment: the machine is busy (load {busy:.1f} on {_usable_cpus()} CPUs); "
                f"{threads} threads may run much slower than --threads 1")

    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in config.strategies}
    bar = tqdm(total=steps * len(todo), desc="experiment", unit="step", disable=not progress,
               dynamic_ncols=True)
    with _torch_settings(threads), bar:
        for seed in range(config.seeds):
            for strategy in config.strategies:
                got = cached.get((strategy, seed))
                if got is not None:
                    runs[strategy].append(got)
                    if on_run is not None:
                        on_run(strategy, seed, True)
                    continue
                bar.set_postfix_str(f"{strategy} seed {seed}")
                # with token-balanced weights, alpha is already in them
                kwargs: dict[str, Any] = {"seed": seed, **strategy_options(
                    strategy, clip=config.clip, alpha=config.alpha, cluster_weights=weights)}
                t = num_samples
                if clipped[strategy]:
                    t = min(t, capacity)
                if strategy in LENGTH_DEPENDENT_STRATEGIES:
                    # paced spreads its quotas over T: T must end where training ends
                    t = schedule_length_for_tokens(
                        lambda n, kw=kwargs: ClusterClipSampler(train_labels, n, **kw),
                        np.where(train_labels >= 0, doc_tokens, 0), needed, t)
                sampler = ClusterClipSampler(train_labels, num_samples=t, **kwargs)
                fed: list[int] = []
                windows = pack_sequences(_schedule_stream(sampler, docs, fed),
                                         config.model.seq_len)
                last: dict[str, Any] = {}

                def evaluate(model: Any, _last: dict[str, Any] = last) -> dict[str, float]:
                    # held-out and training sample measured alike, at the same point
                    v = evaluate_documents(model, valid_docs, eb, dev)
                    tr = evaluate_documents(model, train_eval_docs, eb, dev)
                    _last["valid"], _last["train"] = v, tr
                    return {"val_loss": float(v[0].sum() / v[1].sum()),
                            "train_loss": float(tr[0].sum() / tr[1].sum())}

                t0 = time.perf_counter()
                _, log_ = train_run(config.model, config.train, windows, steps, seed, dev,
                                    evaluate, on_step=bar.update)
                ls, nt = last["valid"]  # the evaluations at the last step
                tls, tnt = last["train"]
                val = summarize(ls, nt, labels[valid_idx], cluster_sizes)
                train_micro = float(tls.sum() / tnt.sum())
                tids, tloss, _ = per_cluster_loss(tls, tnt, labels[train_eval_idx])
                train_by_id = dict(zip(tids.tolist(), tloss.tolist(), strict=True))
                fed_a = np.array(fed, dtype=np.int64)
                ids = [int(k) for k in val["per_cluster"]]
                reps = cluster_repetition(fed_a, train_labels, ids)
                per_cluster = {}
                for k, rep in zip(ids, reps.tolist(), strict=True):
                    pc = dict(val["per_cluster"][str(k)])
                    pc["train_loss"] = train_by_id[k]
                    pc["gap"] = pc["loss"] - train_by_id[k]
                    pc["repetition"] = rep
                    per_cluster[str(k)] = pc
                # The sampler's own clip events (a cluster's last allowed draw) inside
                # the fed prefix (count-only, no documents gathered).
                n_clipped = 0
                if clipped[strategy]:
                    n_clipped = sum(1 for _, p in sampler.summary()["clip_events"]
                                    if p < len(fed))
                run = {
                    "seed": seed,
                    "val_micro": val["micro"], "val_macro": val["macro"],
                    "val_tail": val["tail"], "val_head": val["head"],
                    "train_micro": train_micro, "gap": val["micro"] - train_micro,
                    "per_cluster": per_cluster,
                    "curve": log_["curve"],
                    "schedule": schedule_stats(fed_a, labels, doc_tokens, tail_clusters,
                                               head_clusters, config.clip, n_clipped,
                                               groups),
                }
                seconds = round(time.perf_counter() - t0, 1)
                timing[f"{strategy}/seed{seed}"] = seconds
                if store is not None:
                    # through JSON, so a fresh run and a reused one are the same object
                    run = json.loads(json.dumps(run))
                    store.put(keys[(strategy, seed)], run, seconds)
                runs[strategy].append(run)
                if on_run is not None:
                    on_run(strategy, seed, False)

    return {
        "config": config.to_dict(),
        "device": dev.type,
        "data": {
            "documents": int(labels.size),
            "no_text": int(np.count_nonzero(no_text)),
            "subsampled_out": left_out,
            "excluded": int(np.count_nonzero(labels < 0)),
            "truncated": int(np.count_nonzero(truncated & (labels >= 0))),
            "train_docs": n_train_docs,
            "valid_docs": int(valid_idx.size),
            "train_eval_docs": int(train_eval_idx.size),
            "clusters": int(np.count_nonzero(cluster_sizes)),
            "valid_clusters": int(valid_ids.size),
            "tail_clusters": tail_clusters,
            "head_clusters": head_clusters,
            "train_tokens": train_tokens,
            "valid_tokens": int(doc_tokens[valid_idx].sum()),
            "budget_tokens": budget,
            "steps": steps,
            "epochs_equivalent": budget / train_tokens,
            "clusterclip_capacity_docs": capacity,
            "cluster_weights": None if weights is None else weights.tolist(),
        },
        "clusters": {str(k): {"size": int(cluster_sizes[k]),
                              "valid_docs": int(np.count_nonzero(labels[valid_idx] == k))}
                     for k in np.flatnonzero(cluster_sizes).tolist()},
        "strategies": _aggregate(runs),
        "run_keys": sorted(keys.values()),
        "timing": timing,
    }


def _load_inputs(root: Path, texts: bool = True
                 ) -> tuple[np.ndarray, list[str | None], Any]:
    """``W/labels.npy`` (checked) and the texts of ``W/corpus/`` (none unless ``texts``)."""
    from clusterclip.corpus import Corpus
    from clusterclip.labels import load_labels

    labels_path = root / "labels.npy"
    if not labels_path.is_file():
        raise InputError(f"{labels_path}: missing (run `clusterclip cluster` first)")
    labels = load_labels(labels_path)
    corpus_dir = root / "corpus"
    if not corpus_dir.is_dir():
        raise InputError(f"{corpus_dir}: missing (run `clusterclip embed` first)")
    corpus = Corpus.load(corpus_dir)
    if len(corpus) != labels.size:
        raise InputError(f"{corpus_dir}: {len(corpus)} documents but labels.npy has "
                         f"{labels.size}")
    out: list[str | None] = [None] * len(corpus)
    for i, text in corpus.iter_texts() if texts else ():
        out[i] = text
    return labels, out, corpus


def run_experiment(workdir: str | os.PathLike[str], *,
                   strategies: Sequence[str] = DEFAULT_STRATEGIES, seeds: int = 3,
                   clip: int = 4, alpha: float = 0.0, balance_by: str = "docs",
                   quick: bool = False, model: str | None = None, device: str = "cpu",
                   epochs: float | None = None, tokens: int | None = None,
                   max_docs: int | None = DEFAULT_MAX_DOCS, threads: int | None = None,
                   progress: bool = True, config: ExperimentConfig | None = None,
                   on_run: Callable[[str, int, bool], None] | None = None) -> dict[str, Any]:
    """Run the experiment on work directory ``workdir`` and write ``W/experiment/``.

    Reads ``W/labels.npy`` and ``W/corpus/``; trains one model per strategy
    and seed (see :func:`compare_strategies`), each finished run stored in
    ``W/experiment/runs/`` and reused by a rerun with the same inputs (runs of
    other inputs are removed at the end); writes ``results.json``,
    ``results.md`` and the plots as one atomic replacement of ``W/experiment/``
    (through the work directory's stage runner). ``quick`` selects :meth:`ExperimentConfig.quick`;
    ``model`` a size preset (tiny, small, base; default small, tiny with
    ``quick``); ``epochs`` replaces the default budget in epochs-equivalent,
    ``tokens`` sets an explicit token budget instead (not both); ``max_docs``
    caps the documents (a cluster-stratified subsample; None or 0 = all);
    ``threads`` defaults to :func:`default_threads`; a full ``config``
    overrides everything else. Returns the results dict, plus
    ``"wall_seconds"`` and ``"out_dir"`` (not written to results.json, which
    stays byte-identical across identical runs).
    """
    from clusterclip.io import atomic_output_dir, write_marker
    from clusterclip.workdir import Workdir

    if config is None:
        base = ExperimentConfig.quick() if quick else ExperimentConfig()
        if model is not None:
            base = base.with_model(model)
        over: dict[str, Any] = {"strategies": tuple(strategies), "seeds": seeds, "clip": clip,
                                "alpha": alpha, "balance_by": balance_by,
                                "max_docs": max_docs or None}
        if epochs is not None and tokens is not None:
            raise InputError("--epochs and --tokens: give one budget, not both")
        if epochs is not None:
            over["epochs"] = epochs
        if tokens is not None:
            over["tokens"] = tokens
        config = replace(base, **over)
    config.validate()  # before reading anything: bad options fail fast
    if threads is not None and threads < 1:
        raise InputError(f"--threads: must be >= 1, got {threads}")
    if device != "cpu":
        # deterministic cuBLAS (with use_deterministic_algorithms); must precede CUDA's start
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch

        try:
            torch.empty(1, device=device)
        except (RuntimeError, AssertionError) as e:
            raise InputError(f"--device {device}: not usable ({str(e).splitlines()[0]})") from None
    w = Workdir(workdir, create=False)
    t0 = time.perf_counter()
    out = w.path("experiment")
    store = RunStore(out / "runs")

    def work(run: Any) -> dict[str, Any]:
        _, texts, _ = _load_inputs(w.root)
        # W/experiment is ours here (the stage runner checked it before any work): mark it
        # before the first stored run, so a killed experiment's folder stays replaceable
        out.mkdir(exist_ok=True)
        write_marker(out, "experiment")
        results = compare_strategies(texts, labels, config, device=device, threads=threads,
                                     progress=progress, store=store, on_run=on_run,
                                     groups=counted["groups"])
        store.prune(set(results["run_keys"]))
        with atomic_output_dir(out, "experiment") as tmp:
            write_outputs(results, tmp)
            if store.dir.is_dir():  # the finished runs move along with the results
                os.replace(store.dir, tmp / "runs")
        done.update(results)
        return {}

    done: dict[str, Any] = {}
    counted: dict[str, Any] = {}

    def key() -> dict[str, Any]:
        from clusterclip.report.build import current_groups

        k = {"config": config.to_dict(), "device": device}
        counted["groups"] = current_groups(w)
        if counted["groups"] is not None:  # repetition per near-duplicate group too
            k["groups"] = w.stage("dedup")["fingerprint"]
        return k

    with w.locked():
        labels, _, _ = _load_inputs(w.root, texts=False)
        w.run_stage("experiment", key=key,
                    reads=["labels.npy", "corpus"], outputs=["experiment"], work=work,
                    cache=False)
    return {**done, "wall_seconds": round(time.perf_counter() - t0, 1), "out_dir": str(out)}
