"""One training run on one schedule, and the store of finished runs.

Shared by ``experiment`` (one run per strategy and seed) and ``search`` (one run
per proxy mixture): a :class:`ScheduleSpec` says what the sampler draws, a
:class:`Budget` how much is trained, :func:`train_on_schedule` trains a fresh
model on that schedule, and :class:`RunStore` keeps each finished run under a
fingerprint of its inputs, so a killed experiment or search resumes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.lm.config import MODEL_PRESETS, ModelConfig, TrainConfig
from clusterclip.lm.data import pack_sequences
from clusterclip.pool import available_cpus as usable_cpus  # the same count, one place
from clusterclip.sampling.spec import LENGTH_DEPENDENT_STRATEGIES, strategy_options
from clusterclip.storage.jsonfile import read_json

#: Torch CPU threads by default per model preset, from measurement on the 2-core
#: machine (docs/benchmarks.md, "Experiment"): the small models gain little from a
#: second thread when idle and collapse when another process holds a core, so they use 1; ``base``
#: uses every CPU this process may run on.
PRESET_THREADS = {"tiny": 1, "small": 1, "base": None, "medium": None, "large": None}
#: An online run's schedule is this much longer than its starting schedule's (within the
#: clip's capacity), so that re-weighing towards longer documents cannot exhaust it.
ONLINE_MARGIN = 1.25
#: Version of a stored run's content and of how its schedule is built; part of its key.
#: 2: paced sized to the budget, late tail share recorded.
RUN_FORMAT = 2


def busy_cpus() -> float | None:
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
    return PRESET_THREADS[name] or usable_cpus()


@contextlib.contextmanager
def torch_settings(threads: int) -> Iterator[None]:
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


def check_device(device: str) -> None:
    """InputError when torch cannot use ``device``; sets deterministic cuBLAS for CUDA
    (it must precede CUDA's start)."""
    if device == "cpu":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as e:
        raise InputError(f"device {device}: not usable ({str(e).splitlines()[0]})",
                         params=("device",)) from None


# -- what a run trains on --------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleSpec:
    """What the sampler draws for one run: a strategy, its clip R (clip strategies
    only), alpha (alpha strategies only) and optional cluster weights (one per cluster
    id; they replace ``n_k ** alpha``; a weight of 0 draws nothing from that cluster)."""

    strategy: str
    clip: int | None = None
    alpha: float = 0.0
    weights: tuple[float, ...] | None = None
    #: a staged mixture's stages (``Stage``: until, weights, timing), or None
    stages: tuple[Any, ...] | None = None
    #: re-weighed during training by an online mixer (``strategy`` is where it starts)
    online: bool = False

    @classmethod
    def for_strategy(cls, strategy: str, clip: int, alpha: float,
                     weights: np.ndarray | None = None) -> ScheduleSpec:
        """The options of the experiment's shared ``clip``, ``alpha`` and (token-balanced)
        ``weights`` that apply to ``strategy`` (the sampler's one rule,
        :func:`~clusterclip.sampling.spec.strategy_options`)."""
        opts = strategy_options(strategy, clip=clip, alpha=alpha, cluster_weights=weights)
        w = opts.get("cluster_weights")
        return cls(strategy=strategy, clip=opts.get("clip"), alpha=opts.get("alpha", 0.0),
                   weights=None if w is None else tuple(float(x) for x in w))

    def sampler_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~clusterclip.sampling.make_sampler` (but labels,
        num_samples and seed)."""
        if self.stages:
            from clusterclip.sampling.mixture import Mixture

            return {"strategy": self.strategy, "clip": self.clip,
                    "mixture": Mixture((), self.clip, self.strategy, "", self.stages)}
        w = None if self.weights is None else np.asarray(self.weights, dtype=np.float64)
        return strategy_options(self.strategy, clip=self.clip, alpha=self.alpha,
                                cluster_weights=w)

    def drawn_clusters(self, num_clusters: int) -> np.ndarray:
        """bool[num_clusters]: the clusters this schedule may draw from (weight > 0 in
        its weights, or in any of its stages)."""
        if self.weights is None and not self.stages:
            return np.ones(num_clusters, dtype=bool)
        out = np.zeros(num_clusters, dtype=bool)
        for weights in [st.weights for st in self.stages or ()] or [self.weights]:
            k = min(num_clusters, len(weights))
            out[:k] |= np.asarray(weights[:k], dtype=np.float64) > 0
        return out


@dataclass(frozen=True)
class Budget:
    """Training tokens of every run and the schedule length that supplies them."""

    tokens: int        # trained tokens per run, whole batches
    steps: int         # optimiser steps
    needed: int        # tokens the packed stream must hold: the leading EOS plus every target
    num_samples: int   # draws enough for ``needed`` even if every draw were the shortest doc

    @classmethod
    def plan(cls, tokens: int, batch_tokens: int, shortest_doc: int) -> Budget:
        needed = tokens + 1
        return cls(tokens=tokens, steps=tokens // batch_tokens, needed=needed,
                   num_samples=math.ceil(needed / max(1, shortest_doc)) + 1)

    def check_capacity(self, spec: ScheduleSpec, train_labels: np.ndarray,
                       doc_tokens: np.ndarray, name: str) -> None:
        """Refuse (InputError) a clipped schedule that cannot supply the budget: with clip R
        it feeds at most R x the training tokens of the clusters it draws from."""
        if spec.clip is None:
            return
        k = int(train_labels.max()) + 1
        drawn = spec.drawn_clusters(k)
        use = train_labels >= 0
        use[use] = drawn[train_labels[use]]
        have = int(doc_tokens[use].sum())
        if self.needed > spec.clip * have:
            smallest = -(-self.needed // max(1, have))
            raise InputError(
                f"clip {spec.clip}: {name} can supply at most {spec.clip} x {have:,} = "
                f"{spec.clip * have:,} training tokens, but the budget needs {self.needed:,}; "
                f"the smallest clip that serves it is {smallest:,} (or give a smaller "
                "budget)", params=("clip",))


def schedule_sampler(spec: ScheduleSpec, train_labels: np.ndarray, doc_tokens: np.ndarray,
                     budget: Budget, seed: int) -> Any:
    """The run's sampler over the training documents (``train_labels``, -1 elsewhere).

    Length: ``budget.num_samples``, at most the clip's capacity; a strategy whose
    schedule depends on its length (paced) gets the length whose own schedule supplies
    the budget, so that training ends where the schedule does.
    """
    from clusterclip.sampling import make_sampler
    from clusterclip.sampling.budget import schedule_length_for_tokens

    kwargs = {**spec.sampler_kwargs(), "seed": seed}
    t = budget.num_samples
    if spec.clip is not None:
        drawn = spec.drawn_clusters(int(train_labels.max()) + 1)
        eligible = train_labels >= 0
        eligible[eligible] = drawn[train_labels[eligible]]
        t = min(t, spec.clip * int(np.count_nonzero(eligible)))
    cap = t
    if spec.strategy in LENGTH_DEPENDENT_STRATEGIES or spec.stages:  # stages: shares of T
        t = schedule_length_for_tokens(
            lambda n: make_sampler(train_labels, n, **kwargs),
            np.where(train_labels >= 0, doc_tokens, 0), budget.needed, t)
    if spec.online:  # re-weighed towards other documents: room for longer ones
        t = min(cap, math.ceil(t * ONLINE_MARGIN))
    return make_sampler(train_labels, num_samples=t, **kwargs)


def schedule_stream(sampler: Any, docs: Sequence[np.ndarray], fed: list[int],
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


def train_on_schedule(model_cfg: ModelConfig, train_cfg: TrainConfig, docs: Sequence[np.ndarray],
                      sampler: Any, steps: int, seed: int, device: Any,
                      evaluate: Callable[[Any], dict[str, float]],
                      on_step: Callable[[int], None] | None = None,
                      observe: Callable[[np.ndarray, np.ndarray], Any] | None = None
                      ) -> tuple[Any, dict[str, Any], np.ndarray]:
    """Train a fresh model (initialised from ``seed``) on ``steps`` batches packed from
    ``sampler``'s schedule of ``docs``. Returns ``(model, log, fed)``: the trained model,
    :func:`~clusterclip.lm.train.train_run`'s log (``evaluate`` draws the curve)
    and int64 indices of the documents packed, in order.

    ``observe(indices, losses)``, when given, gets after each step the documents whose
    last token that step trained and each one's training loss (mean nats per token over
    all its tokens, from the steps that trained them; :class:`DocumentLosses`), e.g. an
    online mixer's ``observe``; the sampler is then read one index at a time, so that a
    ``set_weights`` there applies from the next document packed."""
    from clusterclip.lm.train import train_run

    fed: list[int] = []
    windows = pack_sequences(schedule_stream(sampler, docs, fed, 1 if observe else 256),
                             model_cfg.seq_len, model_cfg.eos)
    on_batch = None if observe is None else DocumentLosses(docs, fed, observe)
    model, log = train_run(model_cfg, train_cfg, windows, steps, seed, device, evaluate,
                           on_step=on_step, on_batch=on_batch)
    return model, log, np.array(fed, dtype=np.int64)


class DocumentLosses:
    """Per-document training losses from per-token ones, for packed windows.

    Called as ``on_batch(step, token_losses)`` of :func:`~clusterclip.lm.train.train_run`
    with the (batch, seq_len) losses of consecutive windows of the stream that
    :func:`~clusterclip.lm.data.pack_sequences` packs from ``docs[fed[0]], docs[fed[1]],
    ...`` (``fed`` grows as the packer pulls documents). A document that spans windows or
    steps is reported once, when its last token is trained: ``observe(indices,
    losses)`` with its mean loss per token.
    """

    def __init__(self, docs: Sequence[np.ndarray], fed: list[int],
                 observe: Callable[[np.ndarray, np.ndarray], Any]) -> None:
        self.docs, self.fed, self.observe = docs, fed, observe
        self.next_doc, self.doc_start, self.pos = 0, 1, 1  # stream positions (targets)
        self.acc_sum, self.acc_n = 0.0, 0  # the current document's tokens so far

    def __call__(self, step: int, token_losses: np.ndarray) -> None:
        flat = np.asarray(token_losses, np.float64).ravel()
        p0 = cur = self.pos
        p1 = self.pos = p0 + flat.size
        idx: list[int] = []
        losses: list[float] = []
        while self.next_doc < len(self.fed) and cur < p1:
            i = self.fed[self.next_doc]
            end = self.doc_start + self.docs[i].size
            upto = min(end, p1)
            if upto > cur:
                self.acc_sum += float(flat[cur - p0:upto - p0].sum())
                self.acc_n += upto - cur
                cur = upto
            if upto < end:
                break
            if self.acc_n:
                idx.append(i)
                losses.append(self.acc_sum / self.acc_n)
            self.next_doc, self.doc_start = self.next_doc + 1, end
            self.acc_sum, self.acc_n = 0.0, 0
        if idx:
            self.observe(np.array(idx, np.int64), np.array(losses))


def estimate_seconds(model_cfg: ModelConfig, train_cfg: TrainConfig, device: Any,
                     eval_docs: Sequence[np.ndarray], runs: int, steps: int,
                     evals_per_run: int | None = None) -> float:
    """Seconds that ``runs`` runs of ``steps`` steps will take, from a few timed steps
    and one timed evaluation pass of ``eval_docs`` on a throwaway model;
    ``evals_per_run`` such passes per run (default: the curve's ``eval_points``)."""
    import torch
    import torch.nn.functional as F

    from clusterclip.lm.model import ByteLM
    from clusterclip.lm.train import evaluate_documents

    gen = torch.Generator().manual_seed(0)
    model = ByteLM(model_cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=train_cfg.lr)
    data = torch.randint(0, model_cfg.vocab_size, (train_cfg.batch_size, model_cfg.seq_len + 1),
                         generator=gen).to(device)
    timed = 3
    for i in range(timed + 1):
        if i == 1:  # the first step warms up
            t0 = time.perf_counter()
        loss = F.cross_entropy(model(data[:, :-1]).reshape(-1, model_cfg.vocab_size),
                               data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
    per_step = (time.perf_counter() - t0) / timed
    t0 = time.perf_counter()
    evaluate_documents(model, eval_docs, train_cfg.eval_batch_size, device)
    per_eval = time.perf_counter() - t0
    evals = max(2, train_cfg.eval_points) if evals_per_run is None else evals_per_run
    return runs * (steps * per_step + evals * per_eval)


def format_seconds(s: float) -> str:
    """``42 s`` below 90 seconds, else ``3.5 min``."""
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


# -- finished runs ---------------------------------------------------------------------

class RunStore:
    """Finished runs as ``DIR/<key>.json``, each written atomically.

    ``key`` is a fingerprint of everything that determines the run, so a stored
    run is reused only for identical inputs; :meth:`prune` removes the runs of
    other inputs.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            rec = read_json(self._path(key))
        except (OSError, InputError):
            return None  # missing or unreadable: train it again
        return rec.get("run") if isinstance(rec, dict) and rec.get("key") == key else None

    def put(self, key: str, run: dict[str, Any], seconds: float) -> dict[str, Any]:
        """Store ``run``; returns it as read back (through JSON), so that a fresh run
        and a reused one are the same object."""
        from clusterclip.storage.atomic import write_json

        self.dir.mkdir(parents=True, exist_ok=True)
        run = json.loads(json.dumps(run))
        write_json(self._path(key), {"key": key, "run": run, "seconds": seconds})
        return run

    def seconds(self, key: str) -> float | None:
        """The training seconds recorded with a stored run."""
        try:
            rec = read_json(self._path(key))
            return float(rec["seconds"])
        except (OSError, InputError, ValueError, KeyError, TypeError):
            return None

    def _stored(self) -> list[str]:
        """The keys of the runs stored in the folder (files of ours: named by the key they
        hold; any other file there is left alone)."""
        keys = []
        for f in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            try:
                rec = read_json(f)
            except (OSError, InputError):
                continue
            if len(f.stem) == 16 and isinstance(rec, dict) and rec.get("key") == f.stem:
                keys.append(f.stem)
        return keys

    def prune(self, keep: set[str]) -> list[str]:
        """Remove stored runs whose key is not in ``keep``; returns their keys."""
        gone = [k for k in self._stored() if k not in keep]
        for k in gone:
            self._path(k).unlink()
        return gone

    def listed(self, root: str | os.PathLike[str]) -> list[str]:
        """The stored runs' paths relative to ``root`` (for the output folder's marker)."""
        return [self._path(k).relative_to(root).as_posix() for k in self._stored()]
