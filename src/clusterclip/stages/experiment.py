"""The ``experiment`` stage: ``W/labels.npy`` + ``W/corpus/`` (+ the mixture file) ->
``W/experiment/`` through the work directory's stage runner.

:class:`ExperimentStageOptions` holds everything the stage needs, checked once when made;
:func:`run` reads the work directory (:meth:`~clusterclip.workdir.Workdir.load_inputs`, the reader
of the labels and the corpus that the ``search`` stage shares) and hands arrays to
:func:`clusterclip.experiment.core.compare_strategies`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.experiment.core import (
    DEFAULT_MAX_DOCS,
    MIXTURE_STRATEGIES,
    ExperimentConfig,
    compare_strategies,
)
from clusterclip.limits import MAX_THREADS, check_ranges, ranged
from clusterclip.sampling.spec import DEFAULT_STRATEGIES
from clusterclip.workdir import CORPUS, EXPERIMENT, LABELS, MIXTURE_FILE, Workdir


@dataclass(frozen=True, kw_only=True)
class ExperimentStageOptions:
    """The experiment's configuration and where and how it runs, checked when made.

    ``mixture``: the mixture file of strategies ``mixture`` and ``anneal`` (None:
    ``W/search/mixture.json``); ``threads`` defaults to
    :func:`~clusterclip.lm.runs.default_threads`; ``workers`` > 1 trains runs in as many
    processes (the same results).
    """

    config: ExperimentConfig = field(default_factory=ExperimentConfig)
    device: str = "cpu"
    threads: int | None = ranged(1, MAX_THREADS, default=None)
    workers: int = ranged(1, MAX_THREADS, default=1)
    mixture: str | os.PathLike[str] | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        from clusterclip.lm.data import proxy_tokenizer
        from clusterclip.lm.runs import check_device

        check_ranges(self)  # threads and workers
        if self.config.tokenizer is not None:  # before reading anything: fail fast
            proxy_tokenizer(self.config.tokenizer)
        check_device(self.device)


def load_inputs(root: str | os.PathLike[str], texts: bool = True
                ) -> tuple[np.ndarray, list[str | None], Any]:
    """:meth:`Workdir.load_inputs <clusterclip.workdir.Workdir.load_inputs>` of the work
    directory at ``root``: ``(labels, texts, corpus)``."""
    return Workdir(root, create=False).load_inputs(texts)


def mixture_path(root: Path, config: ExperimentConfig,
                 mixture: str | os.PathLike[str] | None) -> Path | None:
    """The mixture file of strategy ``mixture`` (``mixture`` or ``W/search/mixture.json``);
    None when the strategy is not asked for (then giving a file is an error)."""
    if not set(MIXTURE_STRATEGIES) & set(config.strategies):
        if mixture is not None:
            raise InputError("mixture: a file is given but strategies has neither mixture "
                             "nor anneal to compare it", params=("strategies",))
        return None
    path = Path(mixture) if mixture is not None else root / MIXTURE_FILE
    if not path.is_file():
        raise InputError(f"{path}: no such mixture file (run `clusterclip search` first, or "
                         "give one)")
    return path


def run(w: Workdir, options: ExperimentStageOptions,
        on_run: Callable[[str, int, bool], None] | None = None) -> dict[str, Any]:
    """Run the experiment on ``w`` and write ``W/experiment/``.

    Trains one model per strategy and seed (see
    :func:`~clusterclip.experiment.core.compare_strategies`), each finished run stored
    in ``W/experiment/runs/`` and reused by a rerun with the same inputs (runs of other
    inputs are removed at the end); writes ``results.json``, ``results.md`` and the
    plots as one atomic replacement of ``W/experiment/``. Strategy ``mixture`` draws
    the mixture file with its timing and clip. ``on_run(strategy, seed, reused)`` is
    called after each run. Returns the results dict, plus ``"wall_seconds"`` and
    ``"out_dir"`` (not in results.json, byte-identical across identical runs).
    """
    from clusterclip.experiment.output import write_outputs
    from clusterclip.lm.runs import RunStore
    from clusterclip.sampling.mixture import read_mixture
    from clusterclip.storage.outputs import atomic_output_dir, mark_output, unmark_unused

    o, config = options, options.config
    t0 = time.perf_counter()
    out = w.path(EXPERIMENT)
    store = RunStore(out / "runs")
    done: dict[str, Any] = {}
    counted: dict[str, Any] = {}

    def work(run: Any) -> dict[str, Any]:
        _, texts, _ = w.load_inputs()
        mark_output(out, "experiment")  # ours (the stage runner checked): before any run
        try:
            results = compare_strategies(texts, labels, config, device=o.device,
                                         threads=o.threads, workers=o.workers,
                                         progress=o.progress, store=store, on_run=on_run,
                                         groups=counted["groups"])
        except BaseException:
            unmark_unused(out)  # a failure before the first run leaves no folder behind
            raise
        store.prune(set(results["run_keys"]))  # the runs left stay, listed as ours:
        with atomic_output_dir(out, "experiment", adopt=store.listed(out)) as tmp:
            write_outputs(results, tmp)
        done.update(results)
        return {}

    def key() -> dict[str, Any]:
        k = {"config": config.to_dict(), "device": o.device}
        counted["groups"] = w.current_groups()
        if counted["groups"] is not None:  # repetition per near-duplicate group too
            k["groups"] = w.stage("dedup")["fingerprint"]
        return k

    with w.locked():
        labels, _, _ = w.load_inputs(texts=False)
        path = mixture_path(w.root, config, o.mixture)
        if path is not None:  # seen by work() and key() too
            config = replace(config, mixture=read_mixture(path, int(labels.max()) + 1))
        w.run_stage("experiment", key=key, inputs=[path] if path is not None else [],
                    reads=[LABELS, CORPUS], outputs=[EXPERIMENT], work=work,
                    cache=False)
    return {**done, "wall_seconds": round(time.perf_counter() - t0, 1), "out_dir": str(out)}


def run_experiment(workdir: str | os.PathLike[str], *,
                   strategies: Sequence[str] = DEFAULT_STRATEGIES,
                   seeds: int | str | None = None, primary: str | None = None,
                   clip: int = 4, alpha: float = 0.0, balance_by: str = "docs",
                   quick: bool = False, model: str | None = None, device: str = "cpu",
                   epochs: float | None = None, tokens: int | None = None,
                   max_docs: int | None = DEFAULT_MAX_DOCS, threads: int | None = None,
                   workers: int = 1, progress: bool = True, config: ExperimentConfig | None = None,
                   on_run: Callable[[str, int, bool], None] | None = None,
                   mixture: str | os.PathLike[str] | None = None,
                   tokenizer: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """:func:`run` on the work directory at ``workdir`` with the options of
    :meth:`~clusterclip.experiment.core.ExperimentConfig.from_options` (``max_docs`` None
    or 0: all documents; ``seeds`` a count or ``"auto"``, None: auto, or 3 when ``quick``;
    ``primary``: ``STRATEGY:METRIC``); a full ``config`` overrides them."""
    if seeds is None:
        seeds = 3 if quick else "auto"
    auto = seeds == "auto"
    if auto:
        from clusterclip.lm.runconfig import SEED_RULE

        seeds = SEED_RULE.start
    if config is None:
        config = ExperimentConfig.from_options(
            quick=quick, model=model, epochs=epochs, tokens=tokens, strategies=tuple(strategies),
            seeds=seeds, auto_seeds=auto, primary=primary, clip=clip, alpha=alpha,
            balance_by=balance_by,
            max_docs=max_docs or None, tokenizer=tokenizer and str(tokenizer))
    options = ExperimentStageOptions(config=config, device=device, threads=threads, workers=workers,
                                     mixture=mixture, progress=progress)
    return run(Workdir(workdir, create=False), options, on_run=on_run)
