"""``clusterclip demo``'s work: every stage on the bundled corpus (or ``--input``), in
``OUT/work``, then the summary table (apart from :mod:`clusterclip.cli.demo`, so that
building the command line imports none of it)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.corpus.records import renamed_note
from clusterclip.limits import MAX_CLIP, MAX_EPOCHS, MAX_ROWS, MAX_SEED, check_ranges, ranged
from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY
from clusterclip.workdir import Workdir

#: The demo's k-means: more iterations and restarts than the commands' defaults (a small
#: corpus, where they cost seconds).
DEMO_KMEANS = {"max_iter": 100, "n_init": 3, "tol": 1e-5}


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What ``clusterclip demo`` runs: ``input`` None for the bundled corpus, ``epochs``
    the schedule's length in passes over the documents with text, ``clip`` None for the
    ``strategy``'s default, ``experiment`` one of quick, full, none. Its numbers are
    checked when made (the stages it runs check the rest)."""

    out: str = "demo-out"
    input: str | None = None
    text_field: str = "text"
    label_field: str = "label"
    n_clusters: int = ranged(1, MAX_ROWS, default=64)
    embedder: str = "minilm"
    strategy: str = DEFAULT_COMMAND_STRATEGY
    clip: int | None = ranged(1, MAX_CLIP, default=None)
    epochs: float = ranged(0.0, MAX_EPOCHS, real=True, lo_open=True, default=3.0)
    seed: int = ranged(0, MAX_SEED, default=0)
    device: str = "cpu"
    overwrite: bool = False
    experiment: str = "quick"

    def __post_init__(self) -> None:
        check_ranges(self)


class _Steps:
    """The demo's steps and their seconds, each announced when done."""

    def __init__(self) -> None:
        self.done: list[tuple[str, float]] = []
        self.t0 = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.done.append((name, now - self.t0))
        self.t0 = now
        print(f"[demo] {name} done in {self.done[-1][1]:.1f}s", flush=True)


def run_demo(config: DemoConfig) -> dict[str, Any]:
    """Every stage of the demo; returns each one's result by name and ``steps`` (name,
    seconds)."""
    from clusterclip.data import pydocs_path
    from clusterclip.stages import cluster, embed, group, report, sample
    from clusterclip.storage.outputs import check_output_dir

    out = Path(config.out)
    w = Workdir(out / "work")
    corpus_path = Path(config.input) if config.input else pydocs_path()
    step = _Steps()
    # Every folder a later stage replaces is checked before the (long) embedding.
    protected = w.protected() + ((corpus_path, "the input file", False),)
    for sub, command in (("grouped", "group"), ("report", "report")):
        check_output_dir(out / sub, command, overwrite=config.overwrite, protected=protected)
    w.check_can_write(["cluster", "sample"])
    print(f"[demo] corpus: {corpus_path}", flush=True)
    emb = embed.run(w, embed.EmbedOptions(inputs=(str(corpus_path),),
                                          text_field=config.text_field,
                                          embedder=config.embedder, device=config.device),
                    n_clusters=config.n_clusters)
    step("embed")
    clu = cluster.run(w, cluster.ClusterOptions(n_clusters=config.n_clusters, seed=config.seed,
                                                device=config.device, **DEMO_KMEANS))
    step("cluster")
    eligible = int(np.count_nonzero(w.labels() >= 0))
    num_samples = max(1, int(round(config.epochs * eligible)))
    smp = sample.run(w, sample.SampleOptions(num_samples=num_samples, strategy=config.strategy,
                                             clip=config.clip, seed=config.seed))
    clip = smp["clip"]
    step("sample")
    grp = group.run(w, group.GroupOptions(out=out / "grouped", overwrite=config.overwrite))
    step("group")
    exp = None
    if config.experiment != "none":
        from clusterclip.stages.experiment import run_experiment

        exp = run_experiment(w.root, quick=config.experiment == "quick", clip=clip,
                             device=config.device)
        step("experiment")
    # After the experiment, so that report.md links its results. The report regenerates the
    # schedule of --strategy (identical to W/schedule.npy: same labels, budget, clip and seed)
    # next to the other strategies, so each curve carries its strategy name.
    rep = report.run(w, report.ReportOptions(
        label_field=config.label_field, num_samples=num_samples,
        strategies=("clusterclip", "paced", "uniform", "random"), clip=clip, seed=config.seed,
        out=out / "report", overwrite=config.overwrite))
    step("report")
    return {"embed": emb, "cluster": clu, "sample": smp, "group": grp, "report": rep,
            "experiment": exp, "steps": step.done}


def print_table(out: Any, emb: dict[str, Any], clu: dict[str, Any], smp: dict[str, Any],
                grp: dict[str, Any], rep: dict[str, Any], exp: dict[str, Any] | None,
                steps: list[tuple[str, float]], exp_size: str) -> None:
    """The demo's summary table: what each stage made, and where."""
    print()
    print("== clusterclip demo ==")
    print(f"documents        {emb.get('documents')} ({emb.get('empty')} without text)")
    print(f"clusters         {clu.get('n_clusters')}  objective {clu.get('objective', 0):.4f}")
    agree = rep.get("label_agreement")
    if agree:
        print(f"vs labels        NMI {agree['nmi']:.3f}  ARI {agree['ari']:.3f}  "
              f"purity {agree['purity']:.3f}")
    print(f"schedule         {smp.get('num_samples')} samples, {smp.get('strategy')}, "
          f"clip {smp.get('clip')}, max repetition {smp.get('max_repetition')}")
    if smp.get("clip_default"):
        print(f"                 clip {smp['clip']} by default: {smp['clip_default']}")
    print(f"grouped          {grp['documents']} documents in {grp['files']} files, "
          f"verified exactly once")
    note = renamed_note(grp["renamed_fields"])
    if note:
        print(f"                 {note}")
    if exp:
        from clusterclip.experiment import verdict_lines
        from clusterclip.experiment.output import (
            format_schedule_table,
            format_table,
            schedule_budget,
        )
        from clusterclip.experiment.verdict import seconds_per_run

        print()
        print(f"LM experiment ({exp_size}): {exp['out_dir']}/results.md")
        print("\n".join(verdict_lines(exp, seconds_per_run(exp))))
        print()
        print("Held-out loss, lower is better, mean +- std over seeds:")
        print(format_table(exp))
        print()
        print("What each strategy fed the model (the clip binds where uniform repeats most), "
              f"{schedule_budget(exp)}:")
        print(format_schedule_table(exp))
    print()
    print("time: " + ", ".join(f"{n} {s:.0f}s" for n, s in steps))
    print(f"report:     {out}/report/report.md")
    print(f"page:       {out}/report/{rep['page']}")
    print(f"grouped:    {out}/grouped/")
    if exp:
        print(f"experiment: {out}/work/experiment/results.md  (full size: clusterclip "
              f"experiment --workdir {out}/work)")
    print(f"work dir:   {out}/work/ (manifest.json lists every artifact)")
