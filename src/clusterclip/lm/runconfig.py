"""The proxies' run configuration: what determines a proxy LM's numbers.

:class:`ExperimentConfig` is the configuration of the small LMs that ``clusterclip
experiment`` trains per (strategy, seed) and that ``clusterclip search`` trains as its
proxies (:meth:`clusterclip.search.offline.SearchConfig.experiment`): the budget, the
document window, the split, the model and its training, the mixture and tokenizer, and the
declared primary question with the rule that adds seeds. :func:`encode_texts` turns texts
into the documents such a model reads. Both commands import it from here, below them
(``search`` imports nothing of ``experiment``); the run store's keys are fingerprints of
:meth:`ExperimentConfig.to_dict` (:func:`clusterclip.experiment.core.run_keys`).

``clusterclip.experiment`` and ``clusterclip.experiment.core`` re-export these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.limits import (
    MAX_ALPHA,
    MAX_CLIP,
    MAX_EPOCHS,
    MAX_ROWS,
    MAX_SEED,
    MAX_TOKENS,
    check_ranges,
    ranged,
)
from clusterclip.lm.config import DEFAULT_MODEL, MODEL_PRESETS, ModelConfig, TrainConfig
from clusterclip.lm.data import (
    HOLDOUT_FRACTION,
    MIN_CLUSTER_DOCS,
    encode_documents,
    proxy_tokenizer,
    tokenize_documents,
)
from clusterclip.sampling.budget import BALANCE_BY
from clusterclip.sampling.mixture import Mixture
from clusterclip.sampling.spec import DEFAULT_CLIP, DEFAULT_STRATEGIES, STRATEGIES
from clusterclip.verdict import SeedRule

#: The strategy name of a mixture file's schedule (its weights, timing and clip;
#: ``W/search/mixture.json`` of ``clusterclip search`` unless ``--mixture FILE``).
MIXTURE = "mixture"
#: The strategy name of natural-then-anneal: the natural mixture (weight n_k: each
#: training document alike) until ``ANNEAL_FROM`` of training, then the mixture file's
#: weights (a two-stage mixture with the file's timing and one clip over both stages).
ANNEAL = "anneal"
ANNEAL_FROM = 0.8
#: The strategies that read the mixture file.
MIXTURE_STRATEGIES = (MIXTURE, ANNEAL)
#: The strategy name of online mixing: paced, re-weighed during training by an
#: :class:`~clusterclip.sampling.online.OnlineMixer` fed each document's training loss.
ONLINE = "online"
EXPERIMENT_STRATEGIES = (*STRATEGIES, MIXTURE, ANNEAL, ONLINE)
#: Default budget in epochs-equivalent of the training tokens: enough that, on the
#: demo corpus with K=64 MiniLM clusters, uniform repeats small-cluster documents
#: far beyond the default clip 4 (up to ~30 times) and ClusterClip retires about half
#: of the clusters; below the clip, so ClusterClip can always meet it
#: (docs/benchmarks.md, "Experiment").
DEFAULT_EPOCHS = 3.0
#: ``--quick``: still over one epoch, so the clip binds on the smallest clusters.
QUICK_EPOCHS = 1.5
#: Default cap on the documents an experiment uses (``--max-docs``; a cluster-stratified
#: subsample above it): the budget is in epochs, so time grows with the documents. At this
#: cap the default run (small model, 3 epochs, 3 seeds x 4 strategies, 1 thread) is about
#: 12 x 1.0 M training tokens at the measured 14.8k tokens/s plus evaluation: about 15
#: minutes on an idle 2-core machine (docs/benchmarks.md, "Experiment").
DEFAULT_MAX_DOCS = 2500
#: The most seeds per strategy (``--seeds``; ``--seeds auto`` stops by its rule's cap).
MAX_SEEDS = 1_000


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Everything that determines an experiment's numbers, checked when made.

    The budget of every run is ``tokens`` when given, else ``epochs`` times the
    training set's tokens (after truncation), so small clusters are repeated
    whatever the corpus size; :meth:`budget_tokens` resolves it. The defaults
    are sized for the bundled 4,096-document demo corpus on 2 CPU cores (about
    15 minutes for 3 strategies x 3 seeds, with the clip binding on K=64
    clusters); :meth:`quick` is the minute-scale variant for tests and the demo.

    A bad value raises :class:`~clusterclip.errors.InputError` naming its parameter
    when the configuration is made (or changed with :func:`dataclasses.replace`). The
    ``tokenizer`` folder is read where the configuration is used (the experiment's and
    the search's stage options load it before any work), not each time one is made.

    Examples
    --------
    >>> from dataclasses import replace
    >>> config = ExperimentConfig.quick(strategies=("random", "paced"), seeds=2)
    >>> config.model.seq_len == config.max_doc_tokens
    True
    >>> replace(config, seeds=0)
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: seeds: must be >= 1, got 0
    """

    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    seeds: int = ranged(1, MAX_SEEDS, default=3)
    clip: int = ranged(1, MAX_CLIP, default=DEFAULT_CLIP)
    alpha: float = ranged(-MAX_ALPHA, MAX_ALPHA, real=True, default=0.0)
    balance_by: str = "docs"
    # the budget in passes over the training tokens, unless an explicit token budget
    epochs: float = ranged(0.0, MAX_EPOCHS, real=True, lo_open=True, default=DEFAULT_EPOCHS)
    tokens: int | None = ranged(1, MAX_TOKENS, default=None)
    max_doc_tokens: int = 128         # documents are truncated to this (EOS included)
    valid_fraction: float = HOLDOUT_FRACTION
    min_cluster_docs: int = MIN_CLUSTER_DOCS
    split_seed: int = ranged(0, MAX_SEED, default=0)
    # a cluster-stratified subsample above this many documents; None: all
    max_docs: int | None = ranged(0, MAX_ROWS, default=DEFAULT_MAX_DOCS)
    model: ModelConfig = field(default_factory=lambda: MODEL_PRESETS[DEFAULT_MODEL][0])
    train: TrainConfig = field(default_factory=TrainConfig)
    mixture: Mixture | None = None    # the schedule of strategy "mixture"
    tokenizer: str | None = None      # a local Hugging Face tokenizer folder; None: bytes
    primary: str | None = None        # STRATEGY:METRIC; None: paced (or the first) on macro
    auto_seeds: bool = False          # seeds by SEED_RULE (``seeds`` is then its start)

    @classmethod
    def quick(cls, **overrides: Any) -> ExperimentConfig:
        """A minute-scale configuration for tests, smoke runs and ``clusterclip demo``.

        The ``tiny`` model (1 layer, d=48, 44 k parameters) on the first 63
        bytes of each document, so that it still sees more than one
        epoch-equivalent of the training text (small clusters repeated, the
        clip binding) in about a minute on the demo corpus.
        """
        return replace(cls(epochs=QUICK_EPOCHS).with_model("tiny"), **overrides)

    @classmethod
    def from_options(cls, *, quick: bool = False, model: str | None = None,
                     epochs: float | None = None, tokens: int | None = None,
                     **overrides: Any) -> ExperimentConfig:
        """The configuration of the command's options: :meth:`quick` or the default,
        model preset ``model``, a budget of ``epochs`` or of ``tokens`` (not both) if given,
        and the other fields from ``overrides``."""
        base = cls.quick() if quick else cls()
        if model is not None:
            base = base.with_model(model)
        if epochs is not None and tokens is not None:
            raise InputError("epochs and tokens: give one budget, not both",
                             params=("epochs", "tokens"))
        if epochs is not None:
            overrides["epochs"] = epochs
        if tokens is not None:
            overrides["tokens"] = tokens
        return replace(base, **overrides)

    def with_model(self, preset: str) -> ExperimentConfig:
        """This configuration with model size preset ``preset`` (see
        :data:`~clusterclip.lm.config.MODEL_PRESETS`): its shape and
        learning rate, documents truncated to its window."""
        if preset not in MODEL_PRESETS:
            raise InputError(f"model: unknown preset {preset!r} "
                             f"(choose from {', '.join(MODEL_PRESETS)})", params=("model",))
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

    def __post_init__(self) -> None:
        check_ranges(self)
        self._check_strategies()
        self._check_primary()
        if self.balance_by not in BALANCE_BY:
            raise InputError(f"balance_by: must be docs or tokens, got {self.balance_by!r}",
                             params=("balance_by",))
        self._check_budget()

    def _check_strategies(self) -> None:
        if not self.strategies:
            raise InputError("strategies: give at least one", params=("strategies",))
        for s in self.strategies:
            if s not in EXPERIMENT_STRATEGIES:
                raise InputError(f"strategies: unknown strategy {s!r} "
                                 f"(choose from {', '.join(EXPERIMENT_STRATEGIES)})",
                                 params=("strategies",))
        if len(set(self.strategies)) != len(self.strategies):
            raise InputError("strategies: a strategy is named twice", params=("strategies",))

    def _check_budget(self) -> None:
        if self.tokens is not None and self.tokens < self.batch_tokens:
            raise InputError(f"tokens: budget {self.tokens} is less than one batch "
                             f"({self.batch_tokens})", params=("tokens",))
        if self.max_docs is not None and self.max_docs < 2 * self.min_cluster_docs:
            raise InputError(f"max_docs: must be at least {2 * self.min_cluster_docs} "
                             f"(0 = no cap), got {self.max_docs}", params=("max_docs",))
        if self.max_doc_tokens > self.model.seq_len:
            raise InputError(f"max_doc_tokens: must not exceed the model's seq_len "
                             f"{self.model.seq_len}, got {self.max_doc_tokens}",
                             params=("max_doc_tokens",))

    def _check_primary(self) -> None:
        if self.primary is None:
            return
        strategy, _ = parse_primary(self.primary)
        if strategy == "random" or strategy not in self.strategies or \
                "random" not in self.strategies:
            raise InputError(f"primary {self.primary}: the strategy must be one of "
                             "strategies other than random, and random must be run too",
                             params=("primary",))

    def primary_pair(self) -> tuple[str, str] | None:
        """The declared primary question (strategy, metric) against random."""
        if self.primary is not None:
            return parse_primary(self.primary)
        return default_primary(self.strategies)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["strategies"] = list(self.strategies)
        for name in ("primary", "auto_seeds"):
            if not d[name]:
                del d[name]  # results without them keep their bytes
        if self.auto_seeds:
            d["seed_rule"] = SEED_RULE.to_dict()
        if self.mixture is None:
            del d["mixture"]  # results without a mixture keep their bytes
        else:
            d["mixture"]["weights"] = list(self.mixture.weights)
            if not self.mixture.staged:
                del d["mixture"]["stages"]  # a one-stage mixture keeps its bytes
        if self.tokenizer is None:
            del d["tokenizer"]  # nor do byte-level results
        return d


# -- the declared primary question -----------------------------------------------------

#: The held-out losses the verdict speaks about, in order, with their names.
VERDICT_METRICS = {"val_micro": "micro", "val_macro": "macro", "val_tail": "tail"}
#: The primary question's loss unless ``--primary`` names another.
PRIMARY_METRIC = "macro"
#: The primary question's strategy unless ``--primary`` names another (the commands'
#: default strategy); when it is not run, the first strategy run that is not random.
PRIMARY_STRATEGY = "paced"
#: The stop rule of ``--seeds auto`` (the smallest effect of interest in nats per token).
SEED_RULE = SeedRule(start=3, step=3, cap=12, min_effect=0.005)


def parse_primary(text: str) -> tuple[str, str]:
    """``STRATEGY:METRIC`` (metric micro, macro or tail) as a pair; InputError naming
    ``primary`` otherwise."""
    strategy, sep, metric = text.partition(":")
    if not sep or not strategy or metric not in VERDICT_METRICS.values():
        raise InputError(f"primary: expected STRATEGY:METRIC with METRIC one of "
                         f"{', '.join(VERDICT_METRICS.values())}, got {text!r}",
                         params=("primary",))
    return strategy, metric


def default_primary(strategies: list[str] | tuple[str, ...]) -> tuple[str, str] | None:
    """The declared primary when none is named: :data:`PRIMARY_STRATEGY` (else the first
    strategy but random) against random on :data:`PRIMARY_METRIC`; None without random
    or without another strategy."""
    others = [s for s in strategies if s != "random"]
    if "random" not in strategies or not others:
        return None
    return (PRIMARY_STRATEGY if PRIMARY_STRATEGY in others else others[0]), PRIMARY_METRIC


# -- the documents as the proxies read them ---------------------------------------------

def encode_texts(texts: Sequence[str | None], config: ExperimentConfig
                 ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, ExperimentConfig]:
    """The documents as the proxies read them: ``(docs, truncated, doc_bytes, config)``,
    bytes (:func:`encode_documents`) or, with ``config.tokenizer``, its tokens
    (:func:`tokenize_documents`); ``config`` with the model's vocabulary set to match."""
    if config.tokenizer is None:
        docs, truncated = encode_documents(texts, config.max_doc_tokens)
        return docs, truncated, np.array([d.size for d in docs], dtype=np.int64), config
    tok = proxy_tokenizer(config.tokenizer)
    vocab = len(tok) + 1  # the end-of-document token is the last id
    docs, truncated, nbytes = tokenize_documents(texts, config.max_doc_tokens, tok, vocab - 1)
    return docs, truncated, nbytes, replace(config, model=replace(config.model,
                                                                  vocab_size=vocab))
