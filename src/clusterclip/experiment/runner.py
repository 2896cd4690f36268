"""The experiment: one small LM per (strategy, seed) at the same token budget.

:func:`compare_strategies` is the core (texts and labels in, a results dict
out, no files); :func:`run_experiment` is the work-directory edge that reads
``W/labels.npy`` and ``W/corpus/`` and writes ``W/experiment/``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.experiment.config import ModelConfig, TrainConfig
from clusterclip.experiment.data import (
    encode_documents,
    matched_train_sample,
    pack_sequences,
    stratified_split,
    token_balanced_weights,
)
from clusterclip.experiment.metrics import METRICS, mean_std, summarize
from clusterclip.sampling.sampler import ALPHA_STRATEGIES, STRATEGIES

DEFAULT_STRATEGIES = ("random", "uniform", "clusterclip")
BALANCE_BY = ("docs", "tokens")
#: Default budget in epochs-equivalent of the training tokens: enough that, on the
#: demo corpus with K=64 MiniLM clusters, uniform repeats small-cluster documents
#: far beyond the default clip 4 (up to ~30 times) and ClusterClip retires about half
#: of the clusters; below the clip, so ClusterClip can always meet it (BENCHMARKS.md).
DEFAULT_EPOCHS = 3.0
#: ``--quick``: still over one epoch, so the clip binds on the smallest clusters.
QUICK_EPOCHS = 1.5
#: Torch CPU threads by default (capped at the usable CPUs): on an idle 2-core
#: machine 2 threads trained the default model 1.6x faster than 1, the quick one
#: 1.2x (BENCHMARKS.md); on a machine busy with other jobs 1 can be faster.
DEFAULT_THREADS = 2


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
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def quick(cls, **overrides: Any) -> ExperimentConfig:
        """A minute-scale configuration for tests, smoke runs and ``clusterclip demo``.

        A much smaller model (1 layer, d=48, 44 k parameters) on the first 63
        bytes of each document, so that it still sees more than one
        epoch-equivalent of the training text (small clusters repeated, the
        clip binding) in about a minute on the demo corpus.
        """
        base = cls(epochs=QUICK_EPOCHS, max_doc_tokens=64,
                   model=ModelConfig(seq_len=64, d_model=48, n_layers=1, n_heads=2),
                   train=TrainConfig(batch_size=16, lr=3e-3, eval_points=3))
        return replace(base, **overrides)

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


@contextlib.contextmanager
def _torch_settings(threads: int | None) -> Iterator[None]:
    """Fixed thread count and deterministic kernels for the duration; restored after."""
    import torch

    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    if threads is None:
        threads = min(DEFAULT_THREADS, _usable_cpus())
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


#: Per-run schedule statistics, in table order (see :func:`schedule_stats`).
SCHEDULE_STATS = ("docs_drawn", "distinct_docs", "max_repetition", "clusters_clipped",
                  "clusters_over_clip", "tail_token_share", "head_token_share")


def schedule_stats(fed: np.ndarray, labels: np.ndarray, doc_tokens: np.ndarray,
                   tail: Sequence[int], head: Sequence[int], clip: int,
                   clusters_clipped: int) -> dict[str, Any]:
    """What a run's schedule fed the model, to tell whether the clip mattered.

    ``fed``: int[D] document indices in the order packed (see
    :func:`_schedule_stream`); ``labels``: int[N]; ``doc_tokens``: int[N]
    tokens per document; ``tail`` / ``head``: the smallest / largest quarter
    of the evaluated clusters; ``clusters_clipped``: clusters that completed
    their ``clip``-th pass and left the pool (the sampler's summary; 0 for
    strategies without a clip). ``clusters_over_clip`` counts clusters with a
    document fed more than ``clip`` times (0 under ClusterClip by construction;
    for uniform, the clusters a clip would have retired). Token shares are of
    the tokens of the fed documents.
    """
    fed = np.asarray(fed, dtype=np.int64)
    reps = np.bincount(fed, minlength=labels.size)
    tok = doc_tokens[fed].astype(np.float64)
    total = max(1.0, float(tok.sum()))
    lab = labels[fed]
    over = np.unique(labels[reps > clip])
    return {
        "docs_drawn": int(fed.size),
        "distinct_docs": int(np.count_nonzero(reps)),
        "max_repetition": int(reps.max(initial=0)),
        "clusters_clipped": int(clusters_clipped),
        "clusters_over_clip": int(np.count_nonzero(over >= 0)),
        "tail_token_share": float(tok[np.isin(lab, tail)].sum() / total),
        "head_token_share": float(tok[np.isin(lab, head)].sum() / total),
    }


def compare_strategies(texts: Sequence[str | None], labels: np.ndarray,
                       config: ExperimentConfig, *, device: str = "cpu",
                       threads: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Train one model per (strategy, seed) and measure held-out loss.

    ``texts``: N documents (None = no text, excluded); ``labels``: int[N]
    cluster ids, -1 for excluded documents. Returns a JSON-serialisable dict:
    ``config``, ``data`` (split and budget figures), ``clusters``, and
    ``strategies[name] = {"metrics": {metric: {mean, std, values}},
    "schedule": {stat: {mean, std, values}}`` (see :data:`SCHEDULE_STATS`),
    ``"vs_random": {metric: {mean, std, values}} (paired by seed), "runs": [...]}``,
    and ``timing`` (seconds per run, the only part that varies between
    identical runs).
    """
    import torch
    from tqdm import tqdm

    from clusterclip import ClusterClipSampler
    from clusterclip.experiment.train import evaluate_documents, train_run

    config.validate()
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != len(texts):
        raise InputError(f"labels: expected shape ({len(texts)},), got {labels.shape}")
    labels = labels.astype(np.int64)
    docs, truncated = encode_documents(texts, config.max_doc_tokens)
    doc_tokens = np.array([d.size for d in docs], dtype=np.int64)
    no_text = (doc_tokens == 0) & (labels >= 0)
    labels[no_text] = -1  # counted below, never drawn
    if not np.any(labels >= 0):
        raise InputError("labels: no document has a cluster (all -1)")

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

    # With clip R, clusterclip can feed at most R x (training tokens): every
    # document R times. Refuse a budget it cannot meet, before any training.
    budget = config.budget_tokens(train_tokens)
    steps = budget // config.batch_tokens
    needed = budget + 1  # the stream's leading EOS plus every target
    if "clusterclip" in config.strategies and needed > config.clip * train_tokens:
        raise InputError(
            f"--clip {config.clip}: clusterclip can supply at most {config.clip} x "
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
    valid_docs = [docs[i] for i in valid_idx]
    train_eval_docs = [docs[i] for i in train_eval_idx]
    eb = config.train.eval_batch_size

    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in config.strategies}
    timing: dict[str, float] = {}  # seconds per run; kept out of results.json (not stable)
    total_steps = steps * config.seeds * len(config.strategies)
    bar = tqdm(total=total_steps, desc="experiment", unit="step", disable=not progress,
               dynamic_ncols=True)
    with _torch_settings(threads), bar:
        for seed in range(config.seeds):
            for strategy in config.strategies:
                bar.set_postfix_str(f"{strategy} seed {seed}")
                kwargs: dict[str, Any] = {"strategy": strategy, "seed": seed}
                t = num_samples
                if strategy in ALPHA_STRATEGIES:
                    kwargs["alpha"] = config.alpha
                if strategy != "random" and weights is not None:
                    kwargs["cluster_weights"] = weights  # alpha is already in them
                if strategy == "clusterclip":
                    kwargs["clip"] = config.clip
                    t = min(t, capacity)
                sampler = ClusterClipSampler(train_labels, num_samples=t, **kwargs)
                fed: list[int] = []
                windows = pack_sequences(_schedule_stream(sampler, docs, fed),
                                         config.model.seq_len)
                last: dict[str, Any] = {}

                def validate(model: Any, _last: dict[str, Any] = last) -> float:
                    ls, nt = evaluate_documents(model, valid_docs, eb, dev)
                    _last["valid"] = (ls, nt)
                    return float(ls.sum() / nt.sum())

                t0 = time.perf_counter()
                model, log = train_run(config.model, config.train, windows, steps,
                                       seed, dev, validate, on_step=bar.update)
                ls, nt = last["valid"]  # the evaluation at the last step
                val = summarize(ls, nt, labels[valid_idx], cluster_sizes)
                tls, tnt = evaluate_documents(model, train_eval_docs, eb, dev)
                train_micro = float(tls.sum() / tnt.sum())
                # The sampler's own count of retired clusters over exactly the fed
                # prefix (schedules are prefix-consistent, so a sampler of that
                # length reproduces it; count-only, no documents gathered).
                clipped = 0
                if strategy == "clusterclip":
                    clipped = ClusterClipSampler(train_labels, num_samples=len(fed),
                                                 **kwargs).summary()["clusters_clipped"]
                runs[strategy].append({
                    "seed": seed,
                    "val_micro": val["micro"], "val_macro": val["macro"],
                    "val_tail": val["tail"], "val_head": val["head"],
                    "train_micro": train_micro, "gap": val["micro"] - train_micro,
                    "per_cluster": val["per_cluster"],
                    "curve": log["curve"],
                    "schedule": schedule_stats(np.array(fed, dtype=np.int64), labels,
                                               doc_tokens, val["tail_clusters"],
                                               val["head_clusters"], config.clip, clipped),
                })
                timing[f"{strategy}/seed{seed}"] = round(time.perf_counter() - t0, 1)
                tail_clusters, head_clusters = val["tail_clusters"], val["head_clusters"]

    strategies_out: dict[str, Any] = {}
    for s, rs in runs.items():
        entry: dict[str, Any] = {
            "metrics": {m: mean_std([r[m] for r in rs]) for m in METRICS},
            "schedule": {k: mean_std([r["schedule"][k] for r in rs]) for k in SCHEDULE_STATS},
            "runs": rs}
        if s != "random" and "random" in runs:
            base = runs["random"]
            entry["vs_random"] = {m: mean_std([r[m] - b[m] for r, b in zip(rs, base,
                                                                           strict=True)])
                                  for m in METRICS}
        strategies_out[s] = entry

    valid_clusters = np.unique(labels[valid_idx])
    return {
        "config": config.to_dict(),
        "device": device,
        "data": {
            "documents": int(labels.size),
            "no_text": int(np.count_nonzero(no_text)),
            "excluded": int(np.count_nonzero(labels < 0)),
            "truncated": int(np.count_nonzero(truncated & (labels >= 0))),
            "train_docs": n_train_docs,
            "valid_docs": int(valid_idx.size),
            "train_eval_docs": int(train_eval_idx.size),
            "clusters": int(np.count_nonzero(cluster_sizes)),
            "valid_clusters": int(valid_clusters.size),
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
        "strategies": strategies_out,
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
                   quick: bool = False, device: str = "cpu", epochs: float | None = None,
                   tokens: int | None = None, threads: int | None = None, progress: bool = True,
                   config: ExperimentConfig | None = None) -> dict[str, Any]:
    """Run the experiment on work directory ``workdir`` and write ``W/experiment/``.

    Reads ``W/labels.npy`` and ``W/corpus/``; trains one model per strategy
    and seed (see :func:`compare_strategies`); writes ``results.json``,
    ``results.md``, ``val_curves.png`` and ``cluster_loss.png`` into
    ``W/experiment/`` as one atomic directory replacement. ``quick`` selects
    :meth:`ExperimentConfig.quick`; ``epochs`` replaces the default budget in
    epochs-equivalent, ``tokens`` sets an explicit token budget instead (not
    both); ``threads`` defaults to :data:`DEFAULT_THREADS` torch threads (never
    more than the CPUs this process may use); a full ``config`` overrides
    everything else. Returns the results dict, plus
    ``"wall_seconds"`` and ``"out_dir"`` (not written to results.json, which
    stays byte-identical across identical runs).
    """
    from clusterclip.experiment.output import write_outputs
    from clusterclip.io import atomic_output_dir
    from clusterclip.workdir import Workdir

    if config is None:
        base = ExperimentConfig.quick() if quick else ExperimentConfig()
        over: dict[str, Any] = {"strategies": tuple(strategies), "seeds": seeds, "clip": clip,
                                "alpha": alpha, "balance_by": balance_by}
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
        import torch

        try:
            torch.empty(1, device=device)
        except (RuntimeError, AssertionError) as e:
            raise InputError(f"--device {device}: not usable ({str(e).splitlines()[0]})") from None
    w = Workdir(workdir, create=False)
    t0 = time.perf_counter()
    out = w.path("experiment")

    def work(run: Any) -> dict[str, Any]:
        _, texts, _ = _load_inputs(w.root)
        results = compare_strategies(texts, labels, config, device=device, threads=threads,
                                     progress=progress)
        with atomic_output_dir(out, "experiment") as tmp:
            write_outputs(results, tmp)
        done.update(results)
        return {}

    done: dict[str, Any] = {}
    with w.locked():
        labels, _, _ = _load_inputs(w.root, texts=False)
        w.run_stage("experiment", key={"config": config.to_dict(), "device": device},
                    reads=["labels.npy", "corpus"], outputs=["experiment"], work=work,
                    cache=False)
    return {**done, "wall_seconds": round(time.perf_counter() - t0, 1), "out_dir": str(out)}
