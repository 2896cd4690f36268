"""Proxy runs: the experiment's trainer on a candidate mixture, measured on val or test.

Every run trains a fresh byte-level LM (:func:`~clusterclip.lm.runs.
train_on_schedule`) on the corpus's training split, drawn by the candidate's
schedule (:class:`~clusterclip.lm.runs.ScheduleSpec`), then measures
held-out loss on one evaluation set: micro and macro on the corpus documents of
the set, and the target loss (token-weighted, on the target documents of the
set). Each finished run is kept in the run store under a fingerprint of
everything it depends on (a killed search resumes); the val runs' fingerprint
never includes the test documents. Under ``torchrun`` each rank trains its
share of a batch of runs (:func:`clusterclip.distributed.map_in_order`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.lm.metrics import bits_per_byte, per_cluster_loss
from clusterclip.lm.runconfig import ExperimentConfig
from clusterclip.lm.runs import (
    RUN_FORMAT,
    Budget,
    RunStore,
    ScheduleSpec,
    schedule_sampler,
    torch_settings,
    train_on_schedule,
)
from clusterclip.search.space import Candidate

#: Version of a stored proxy run's content; part of its key.
PROXY_FORMAT = 2
#: Digits kept of a run's fed token share per cluster.
SHARE_DIGITS = 6


@dataclass(frozen=True)
class EvalSet:
    """What a run is measured on: corpus documents (indices into the corpus) and target
    documents (token arrays), with the fingerprint of both."""

    name: str
    corpus_idx: np.ndarray
    target_docs: tuple[np.ndarray, ...]
    fingerprint: str
    target_bytes: np.ndarray | None = None  # bytes each target document's tokens cover


@dataclass
class ProxyData:
    """The corpus as every run of one search sees it."""

    docs: list[np.ndarray]          # byte tokens of every corpus document (EOS included)
    doc_tokens: np.ndarray          # int64[N]
    labels: np.ndarray              # int64[N] cluster ids, -1 excluded or subsampled out
    train_labels: np.ndarray        # the same, -1 outside the training split too
    val: EvalSet
    test: EvalSet
    budget: Budget
    config: ExperimentConfig
    fingerprint: str                # of the documents, labels and training split
    doc_bytes: np.ndarray | None = None  # bytes each document's tokens cover (+1, its end)

    @property
    def has_target(self) -> bool:
        return len(self.val.target_docs) > 0


def measure(model: Any, data: ProxyData, where: EvalSet, device: Any) -> dict[str, float]:
    """Held-out loss of a trained model on one evaluation set: ``micro`` (all corpus
    tokens of the set), ``macro`` (mean of its clusters' losses) and, with a target,
    ``target`` (all target tokens of the set)."""
    from clusterclip.lm.train import evaluate_documents

    eb = data.config.train.eval_batch_size
    ls, nt = evaluate_documents(model, [data.docs[i] for i in where.corpus_idx], eb, device)
    _, loss, _ = per_cluster_loss(ls, nt, data.labels[where.corpus_idx])
    nbytes = data.doc_tokens if data.doc_bytes is None else data.doc_bytes
    out = {"micro": float(ls.sum() / nt.sum()), "macro": float(loss.mean()),
           "micro_bits_per_byte": bits_per_byte(ls, nbytes[where.corpus_idx])}
    if where.target_docs:
        ts, tn = evaluate_documents(model, list(where.target_docs), eb, device)
        out["target"] = float(ts.sum() / tn.sum())
        out["target_bits_per_byte"] = bits_per_byte(
            ts, tn if where.target_bytes is None else where.target_bytes)
    return out


def never_drawn(fed: np.ndarray, train_labels: np.ndarray, doc_tokens: np.ndarray
                ) -> dict[str, float]:
    """The training documents a schedule never drew (``fed``: the documents packed), as a
    share of the training documents and of their tokens."""
    train = np.asarray(train_labels) >= 0
    never = train.copy()
    never[np.asarray(fed, dtype=np.int64)] = False
    tok = np.asarray(doc_tokens, dtype=np.float64)
    return {"docs_never_drawn": round(float(never.sum() / max(1, train.sum())), SHARE_DIGITS),
            "tokens_never_drawn": round(float(tok[never].sum() / max(1.0, tok[train].sum())),
                                        SHARE_DIGITS)}


def spec_of(c: Candidate) -> ScheduleSpec:
    """The schedule of a candidate: its weights drawn with its timing and clip."""
    return ScheduleSpec(strategy=c.timing, clip=c.clip, weights=c.weights)


def train_proxy(data: ProxyData, device: str, threads: int, spec: ScheduleSpec, seed: int,
                where: EvalSet) -> tuple[dict[str, Any], float]:
    """Train one run at ``threads`` torch threads and measure it: ``(record, seconds)``.
    The record: ``seed``, the metrics of :func:`measure`, ``fed_share`` (each cluster's
    share of the fed tokens) and :func:`never_drawn`'s shares."""
    import torch

    dev = torch.device(device)
    t0 = time.perf_counter()
    with torch_settings(threads):
        sampler = schedule_sampler(spec, data.train_labels, data.doc_tokens, data.budget, seed)
        model, _, fed = train_on_schedule(data.config.model, data.config.train, data.docs,
                                          sampler, data.budget.steps, seed, dev, lambda m: {})
        metrics = measure(model, data, where, dev)
    lab = data.train_labels[fed]
    share = np.bincount(lab, weights=data.doc_tokens[fed].astype(np.float64),
                        minlength=int(data.labels.max()) + 1)
    run = {"seed": seed, **metrics,
           "fed_share": [round(float(x), SHARE_DIGITS) for x in share / share.sum()],
           **never_drawn(fed, data.train_labels, data.doc_tokens)}
    return run, round(time.perf_counter() - t0, 2)


def _worker_state(data: ProxyData, device: str, threads: int
                  ) -> tuple[ProxyData, str, int]:
    return data, device, threads


def _worker_run(state: tuple[ProxyData, str, int],
                job: tuple[ScheduleSpec, int, EvalSet]) -> tuple[dict[str, Any], float]:
    return train_proxy(*state, *job)


class ProxyTrainer:
    """Trains and measures runs, each once (the store keeps them); with ``workers`` > 1,
    a batch's runs are trained by that many worker processes at once
    (:mod:`clusterclip.pool`), each run at the same ``threads`` as alone."""

    def __init__(self, data: ProxyData, device: str, threads: int, store: RunStore,
                 progress: bool = True, log: Callable[[str], None] = lambda m: None,
                 workers: int = 1, pools: contextlib.ExitStack | None = None) -> None:
        self.data = data
        self.device = device
        self.threads = threads
        self.workers = workers
        self.pools = pools  # holds this trainer's pool from its first batch to the stack's end
        self._imap: Callable[..., Iterator[Any]] | None = None
        self.store = store
        self.progress = progress
        self.log = log
        self.trained = 0
        self.reused = 0
        self.seconds: list[float] = []
        self.keys: set[str] = set()  # every run this search used (the rest is pruned)

    def key(self, spec: ScheduleSpec, seed: int, where: EvalSet) -> str:
        import torch

        from clusterclip import __version__
        from clusterclip.storage.digests import fingerprint

        d = self.data
        return fingerprint({
            "kind": "search proxy", "format": [RUN_FORMAT, PROXY_FORMAT],
            "data": d.fingerprint, "eval": where.fingerprint,
            "model": d.config.model.to_dict(), "train": d.config.train.to_dict(),
            "max_doc_tokens": d.config.max_doc_tokens, "budget": d.budget.tokens,
            "spec": {"strategy": spec.strategy, "clip": spec.clip, "alpha": spec.alpha,
                     "weights": None if spec.weights is None else list(spec.weights)},
            "seed": seed, "device": self.device, "threads": self.threads,
            "versions": {"clusterclip": __version__, "torch": torch.__version__}})

    def run(self, spec: ScheduleSpec, seed: int, where: EvalSet) -> dict[str, Any]:
        """One run's record (stored, or trained now in this process): see
        :func:`train_proxy`."""
        key = self.key(spec, seed, where)
        self.keys.add(key)
        got = self.store.get(key)
        if got is not None:
            self.reused += 1
            return got
        return self._keep(key, *train_proxy(self.data, self.device, self.threads, spec, seed,
                                            where))

    def _keep(self, key: str, run: dict[str, Any], seconds: float) -> dict[str, Any]:
        self.trained += 1
        self.seconds.append(seconds)
        return self.store.put(key, run, seconds)

    def _pooled(self, jobs: list[tuple[ScheduleSpec, int, EvalSet]]
                ) -> Iterator[dict[str, Any]]:
        """The records of :meth:`run` over ``jobs``, in order, the runs not stored trained
        by up to ``workers`` worker processes at once (each run once, even when two jobs
        are the same run; only this process writes the store)."""
        keys = [self.key(*j) for j in jobs]
        self.keys.update(keys)
        have: dict[str, dict[str, Any]] = {}
        todo: dict[str, tuple[ScheduleSpec, int, EvalSet]] = {}
        for k, job in zip(keys, jobs, strict=True):
            got = None if k in have or k in todo else self.store.get(k)
            if got is not None:
                have[k] = got
            elif k not in have:
                todo.setdefault(k, job)
        trained = self._train(list(todo.values()))
        with contextlib.closing(trained):
            for k in keys:
                if k in have:
                    self.reused += 1
                else:
                    have[k] = self._keep(k, *next(trained))
                yield have[k]

    def _train(self, jobs: list[tuple[ScheduleSpec, int, EvalSet]]
               ) -> Iterator[tuple[dict[str, Any], float]]:
        """:func:`train_proxy` over ``jobs``, in order: by this trainer's worker pool (started
        at its first batch of more than one run and kept in ``pools``; without ``pools``,
        a pool for this batch), else in this process."""
        from clusterclip.pool import pooled, worker_pool

        state = (self.data, self.device, self.threads)
        if self.pools is None or self.workers <= 1 or len(jobs) <= 1:
            yield from pooled(self.workers, _worker_state, state, _worker_run, jobs,
                              lambda job: _worker_run(state, job))
            return
        if self._imap is None:
            self._imap = self.pools.enter_context(worker_pool(self.workers, _worker_state,
                                                              state))
        yield from self._imap(_worker_run, jobs)

    def run_all(self, jobs: Sequence[tuple[ScheduleSpec, int, EvalSet]], what: str
                ) -> list[dict[str, Any]]:
        """Every job's record, in order; under torchrun each rank trains its share, with
        ``workers`` worker processes when more than one."""
        from tqdm import tqdm

        rank, world = D.rank_and_world()
        mine = len(jobs) // world + (rank < len(jobs) % world)
        bar = tqdm(total=mine, desc=what if world == 1 else f"{what} (rank 0)", unit="run",
                   disable=not (self.progress and rank == 0), dynamic_ncols=True)

        def one(i: int) -> dict[str, Any]:
            rec = self.run(*jobs[i])
            bar.update(1)
            return rec

        def many(items: list[int]) -> Iterator[dict[str, Any]]:
            with contextlib.closing(self._pooled([jobs[i] for i in items])) as recs:
                for rec in recs:
                    bar.update(1)
                    yield rec

        with bar:
            return D.map_in_order(one, [1] * len(jobs), many=many if self.workers > 1 else None)

    def evaluate(self, cands: list[Candidate], round_index: int) -> list[dict[str, float]]:
        """The search's objective on val for each candidate (one seed, the search's)."""
        seed = self.data.config.split_seed
        recs = self.run_all([(spec_of(c), seed, self.data.val) for c in cands],
                            f"search round {round_index + 1}")
        return [{"objective": r["target"] if self.data.has_target else r["macro"],
                 **{k: r[k] for k in ("target", "micro", "macro") if k in r},
                 "seed": r["seed"]} for r in recs]
