"""The whole pipeline in one work directory: embed -> cluster -> sample.

Each stage is skipped when the manifest says its output is current (same
inputs, same parameters), so re-running ``clusterclip run`` after a kill or
with a changed downstream parameter only does the work that is missing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from clusterclip.corpus.records import renamed_note
from clusterclip.errors import InputError
from clusterclip.io import load_npy
from clusterclip.labels import load_labels
from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY
from clusterclip.workdir import Workdir


def sample_workdir(w: Workdir, *, num_samples: int | None = None,
                   strategy: str = DEFAULT_COMMAND_STRATEGY, clip: int | None = None,
                   alpha: float = 0.0, seed: int = 0, num_tokens: int | None = None,
                   balance_by: str = "docs", tokenizer: str | None = None, groups: bool = False,
                   mixture: str | None = None, progress: bool = False) -> dict[str, Any]:
    """Write ``W/schedule.npy`` (int64 document indices) from ``W/labels.npy``.

    ``mixture``: a mixture file (:mod:`clusterclip.sampling.mixture`) whose cluster
    weights replace n_k ** alpha (``strategy`` and ``clip`` as the caller resolved them).

    ``groups``: clip by the near-duplicate groups of ``W/groups.npy`` (the
    ``dedup`` stage; see :mod:`clusterclip.sampling.groups`). ``clip`` None: the
    default of :func:`clusterclip.sampling.clip.default_clip` for these labels and
    budget (the summary's ``clip_default`` says which and why).

    ``num_samples`` positions, or a budget of ``num_tokens`` tokens; clusters
    balanced by ``balance_by`` (docs or tokens). Token counts: the estimate from
    ``W/corpus``, or ``tokenizer``'s (the cached ``tokens`` stage); see
    :mod:`clusterclip.tokens`. Returns the sampler's summary, which is also
    recorded in the manifest. Under ``torchrun`` every rank calls this and rank 0
    writes.
    """
    from clusterclip.distributed import is_main, on_main
    from clusterclip.sampling import write_schedule
    from clusterclip.tokens import workdir_tokens

    why = None
    if clip is None:
        def resolve() -> tuple[int, str]:
            from clusterclip.sampling.clip import default_clip

            w.upstream(["labels.npy"] + (["groups.npy"] if groups else []))
            labels = load_labels(w.path("labels.npy"))
            g = load_npy(w.path("groups.npy"), "groups", kinds="iu", ndim=1) if groups else None
            return default_clip(labels, num_samples, strategy, alpha=alpha,
                                groups=g if g is not None and g.size == labels.size else None)

        with w.locked():
            clip, why = on_main(resolve)
    params: dict[str, Any] = {"num_samples": num_samples, "strategy": strategy, "clip": clip,
                              "alpha": alpha, "seed": seed}
    needs = num_tokens is not None or balance_by == "tokens"
    tokens, source = workdir_tokens(w, tokenizer, progress=progress) if needs else (None, None)
    if num_tokens is not None:
        params["num_tokens"] = num_tokens
    if balance_by != "docs":
        params["balance_by"] = balance_by
    if source is not None:
        params["token_counts"] = source
    if groups:
        params["groups"] = True
    weights, staged = None, {}
    if mixture is not None:
        from clusterclip.sampling.mixture import mixture_record, read_mixture

        params["mixture"] = mixture_record(mixture)
        staged = read_mixture(mixture).sampler_options()
        weights = staged.pop("cluster_weights", None)

    def work(run: Any) -> dict[str, Any] | None:
        if not is_main():
            return None
        labels = load_labels(w.path("labels.npy"))
        g = load_npy(w.path("groups.npy"), "groups", kinds="iu", ndim=1) if groups else None
        summary = write_schedule(labels, w.path("schedule.npy"), num_samples=num_samples,
                                 num_tokens=num_tokens, doc_tokens=tokens,
                                 balance_by=balance_by, token_source=source, strategy=strategy,
                                 clip=clip, alpha=alpha, seed=seed, groups=g,
                                 cluster_weights=weights, **staged)
        if mixture is not None:
            summary["mixture"] = params["mixture"]
        if why and summary.get("clip") is not None:
            summary["clip_default"] = why
        return summary

    reads = ["labels.npy"] + (["corpus"] if needs else []) + (
        ["tokens.npy"] if needs and tokenizer is not None else []) + (
        ["groups.npy"] if groups else [])
    return w.run_stage("sample", key=params, reads=reads, outputs=["schedule.npy"],
                       work=work)


@dataclass(frozen=True)
class EmbedOptions:
    """How ``run`` embeds: the keywords of :func:`clusterclip.embedding.embed_workdir`
    (besides ``n_clusters``)."""

    text_field: str = "text"
    id_field: str | None = None
    skip_bad_lines: bool = False
    embedder: str = "minilm"
    model: str | None = None
    pooling: str = "mean"
    max_length: int | None = None  # the embedder's own (embedding.pipeline.DEFAULT_MAX_LENGTH)
    batch_size: int = 64
    device: str = "cpu"
    dtype: str = "float32"
    backend: str = "auto"
    precision: str = "auto"
    tune: int | str = "auto"  # embedding.tune.resolve_tune
    tune_seed: int = 0
    progress: bool = True  # progress bars of every stage (run --no-progress: none)


@dataclass(frozen=True)
class KMeansOptions:
    """How ``run`` clusters: the keywords of :func:`clusterclip.clustering.cluster_workdir`
    (besides ``n_clusters``)."""

    max_iter: int = 50
    n_init: int = 1
    tol: float = 1e-4
    metric: str = "cosine"
    backend: str = "torch"
    seed: int = 0
    device: str = "cpu"
    chunk_rows: int = 65536
    fit_sample: int | None = None


@dataclass(frozen=True)
class SampleOptions:
    """How ``run`` samples: the keywords of :func:`sample_workdir` (besides ``groups``);
    one of ``num_samples`` and ``num_tokens``. ``strategy`` and ``clip`` as resolved
    against the ``mixture`` (``clip`` None: the default for the labels and budget)."""

    num_samples: int | None = None
    num_tokens: int | None = None
    balance_by: str = "docs"
    tokenizer: str | None = None
    strategy: str = DEFAULT_COMMAND_STRATEGY
    clip: int | None = None
    alpha: float = 0.0
    seed: int = 0
    mixture: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """Everything :func:`run_pipeline` does, checked by :meth:`check` before any work.

    ``sample``: None for no sampling stage; ``dedup_threshold``: None for no dedup stage
    (with it, the schedule clips by the near-duplicate groups).
    """

    workdir: str
    inputs: tuple[str, ...]
    n_clusters: int
    embed: EmbedOptions = field(default_factory=EmbedOptions)
    kmeans: KMeansOptions = field(default_factory=KMeansOptions)
    sample: SampleOptions | None = None
    dedup_threshold: float | None = None

    def check(self) -> None:
        """Refuse (InputError, in the parameters' names) what would fail after the embedding."""
        from clusterclip.clustering import KMeans
        from clusterclip.sampling.budget import check_balance
        from clusterclip.sampling.spec import MAX_SEED
        from clusterclip.tokens import load_tokenizer, tokenizer_identity

        if self.n_clusters is not None and self.n_clusters < 1:
            raise InputError(f"n_clusters {self.n_clusters}: must be >= 1",
                             params=("n_clusters",))
        s = self.sample
        if s is not None:
            if s.num_samples is not None and s.num_samples <= 0:
                raise InputError(f"num_samples {s.num_samples}: must be > 0",
                                 params=("num_samples",))
            check_balance(balance_by=s.balance_by, strategy=s.strategy, alpha=s.alpha,
                          has_weights=False)
            if s.clip is not None and s.clip < 1:
                raise InputError(f"clip {s.clip}: must be >= 1", params=("clip",))
        if self.dedup_threshold is not None:
            from clusterclip.dedup import check_threshold

            check_threshold(self.dedup_threshold, "dedup_threshold")
            if s is not None and (s.num_tokens is not None or s.balance_by != "docs"):
                raise InputError("dedup works with num_samples and balance_by docs only "
                                 "(token budgets over groups are not supported yet)",
                                 params=("dedup", "num_samples", "balance_by"))
        if s is not None and s.tokenizer is not None:  # a bad path fails now
            tokenizer_identity(load_tokenizer(s.tokenizer))
        if s is not None and not 0 <= s.seed <= MAX_SEED:
            raise InputError(f"seed {s.seed}: the sampler takes 0 .. 2**64 - 1",
                             params=("seed",))
        from clusterclip.clustering.stage import check_fit_sample

        KMeans(n_clusters=self.n_clusters, **{**asdict(self.kmeans), "fit_sample": None}
               )._check_params()
        check_fit_sample(self.kmeans.fit_sample, self.n_clusters)

    def check_capacity(self, documents: int) -> None:
        """Refuse ``num_samples`` T above what an explicit ``clip`` R can serve on the
        ``documents`` with text (each gets a label; with dedup groups, at most as many),
        as soon as the corpus is scanned: before the embedding, not after the clustering."""
        from clusterclip.sampling.spec import CLIP_STRATEGIES, capacity_error

        s = self.sample
        if s is None or s.num_samples is None or s.clip is None \
                or s.strategy not in CLIP_STRATEGIES or s.num_samples <= s.clip * documents:
            return
        e = capacity_error(s.num_samples, s.clip, documents, "documents with text")
        raise InputError(f"{e} (strategy {s.strategy}); nothing was embedded",
                         params=e.params + ("strategy",))

    def later_stages(self) -> list[str]:
        """The stages after ``embed``, whose outputs this run may replace."""
        s = self.sample
        return ["cluster"] + (["dedup"] if self.dedup_threshold is not None else []) + (
            ["sample"] if s is not None else []) + (
            ["tokens"] if s is not None and s.tokenizer is not None else [])


def run_pipeline(config: RunConfig) -> dict[str, Any]:
    """``clusterclip run``: embed, cluster and optionally dedup and sample, printing where
    the outputs are."""
    from clusterclip.clustering import cluster_workdir
    from clusterclip.distributed import on_main, process_group
    from clusterclip.embedding import embed_workdir

    config.check()  # k-means, sampling and dedup options: now, not after the (long) embedding
    # before the lock: rank 0 holds it for every rank
    with process_group(config.embed.device) as main_rank:
        w = Workdir(config.workdir)
        out: dict[str, Any] = {}
        with w.locked():
            on_main(lambda: w.check_can_write(config.later_stages()))
            out["embed"] = embed_workdir(
                w, list(config.inputs), n_clusters=config.n_clusters, **asdict(config.embed),
                check_corpus=lambda stats: config.check_capacity(stats["valid"]))
            config.check_capacity(out["embed"]["valid"])  # when the embedding was current
            out["cluster"] = cluster_workdir(w, n_clusters=config.n_clusters,
                                             progress=config.embed.progress,
                                             **asdict(config.kmeans))
            if config.dedup_threshold is not None:
                from clusterclip.dedup import dedup_workdir

                out["dedup"] = dedup_workdir(w, threshold=config.dedup_threshold,
                                             progress=main_rank and config.embed.progress)
            if config.sample is not None:
                out["sample"] = sample_workdir(w, groups=config.dedup_threshold is not None,
                                               progress=main_rank and config.embed.progress,
                                               **asdict(config.sample))
    if main_rank:
        _print_summary(w, out)
    return out


def _reused(stage: dict[str, Any]) -> str:
    return "  (reused: inputs and parameters unchanged)" if stage.get("skipped") else ""


def _print_summary(w: Workdir, out: dict[str, Any]) -> None:
    e, c = out["embed"], out["cluster"]
    print(f"corpus:     {e.get('documents')} documents, {e.get('empty')} without text "
          f"(label -1), {e.get('bad_lines', 0)} bad lines skipped")
    print(f"embeddings: {w.path('embeddings.npy')} ({e.get('embedder')}, dim {e.get('dim')})"
          f"{_reused(e)}")
    print(f"clusters:   {w.path('labels.npy')}, {w.path('scores.npy')}, "
          f"{w.path('centroids.npy')}{_reused(c)}")
    print(f"k-means:    {c.get('n_clusters')} clusters (sizes {c.get('cluster_size_min')}.."
          f"{c.get('cluster_size_max')}), objective {c.get('objective', float('nan')):.4f} "
          f"after {c.get('n_iter')} iterations")
    if c.get("fit_sample_rows"):
        from clusterclip.clustering.stage import sample_note

        print(sample_note(c))
    if "dedup" in out:
        from clusterclip.dedup import format_summary

        print(f"groups:     {w.path('groups.npy')}{_reused(out['dedup'])}")
        print(f"            {format_summary(out['dedup'])}")
    if "sample" in out:
        s = out["sample"]
        print(f"schedule:   {w.path('schedule.npy')} ({s.get('num_samples')} samples, "
              f"{s.get('strategy')}, clip {s.get('clip')}, capacity {s.get('capacity')}, "
              f"{s.get('clusters_clipped')} clusters clipped, max repetition "
              f"{s.get('max_repetition')}){_reused(s)}")
        if s.get("clip_default"):
            print(f"            clip {s['clip']} by default: {s['clip_default']}")
        from clusterclip.tokens import token_summary_lines

        for line in token_summary_lines(s):
            print(f"            {line}")
    print(f"manifest:   {w.path('manifest.json')}")


@dataclass(frozen=True)
class DemoConfig:
    """What ``clusterclip demo`` runs: ``input`` None for the bundled corpus, ``epochs``
    the schedule's length in passes over the documents with text, ``clip`` None for the
    ``strategy``'s default, ``experiment`` one of quick, full, none."""

    out: str = "demo-out"
    input: str | None = None
    text_field: str = "text"
    label_field: str = "label"
    n_clusters: int = 64
    embedder: str = "minilm"
    strategy: str = DEFAULT_COMMAND_STRATEGY
    clip: int | None = None
    epochs: float = 3.0
    seed: int = 0
    device: str = "cpu"
    overwrite: bool = False
    experiment: str = "quick"


def run_demo(config: DemoConfig) -> dict[str, Any]:
    """``clusterclip demo``: every stage on the bundled corpus, then a short summary table."""
    import time
    from pathlib import Path

    from clusterclip.clustering import cluster_workdir
    from clusterclip.data import pydocs_path
    from clusterclip.embedding import embed_workdir
    from clusterclip.grouping import group_workdir
    from clusterclip.report import build_report

    out = Path(config.out)
    w = Workdir(out / "work")
    corpus_path = Path(config.input) if config.input else pydocs_path()
    steps: list[tuple[str, float]] = []
    t0 = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t0
        now = time.perf_counter()
        steps.append((name, now - t0))
        t0 = now
        print(f"[demo] {name} done in {steps[-1][1]:.1f}s", flush=True)

    # Every folder a later stage replaces is checked before the (long) embedding.
    from clusterclip.io import check_output_dir

    protected = w.protected() + ((corpus_path, "the input file", False),)
    for sub, command in (("grouped", "group"), ("report", "report")):
        check_output_dir(out / sub, command, overwrite=config.overwrite, protected=protected)
    w.check_can_write(["cluster", "sample"])
    print(f"[demo] corpus: {corpus_path}", flush=True)
    emb = embed_workdir(w, [str(corpus_path)], text_field=config.text_field, id_field=None,
                        skip_bad_lines=False, embedder=config.embedder, model=None, pooling="mean",
                        max_length=256, batch_size=64, device=config.device, dtype="float32",
                        n_clusters=config.n_clusters)
    step("embed")
    clu = cluster_workdir(w, n_clusters=config.n_clusters, max_iter=100, n_init=3, tol=1e-5,
                          seed=config.seed, device=config.device)
    step("cluster")
    eligible = int(np.count_nonzero(load_labels(w.path("labels.npy")) >= 0))
    num_samples = max(1, int(round(config.epochs * eligible)))
    smp = sample_workdir(w, num_samples=num_samples, strategy=config.strategy, clip=config.clip,
                         seed=config.seed)
    clip = smp["clip"]
    step("sample")
    grp = group_workdir(w, out / "grouped", overwrite=config.overwrite)
    step("group")
    exp = None
    if config.experiment != "none":
        from clusterclip.experiment import run_experiment

        exp = run_experiment(w.root, quick=config.experiment == "quick", clip=clip,
                             device=config.device)
        step("experiment")
    # After the experiment, so that report.md links its results. The report regenerates the
    # schedule of --strategy (identical to W/schedule.npy: same labels, budget, clip and seed)
    # next to the other strategies, so each curve carries its strategy name.
    rep = build_report(w.root, label_field=config.label_field, num_samples=num_samples,
                       strategies=("clusterclip", "paced", "uniform", "random"), clip=clip,
                       seed=config.seed, out=out / "report", overwrite=config.overwrite)
    step("report")
    _print_demo_table(out, emb, clu, smp, grp, rep, exp, steps, config.experiment)
    return {"embed": emb, "cluster": clu, "sample": smp, "group": grp, "report": rep,
            "experiment": exp}


def _print_demo_table(out: Any, emb: dict[str, Any], clu: dict[str, Any], smp: dict[str, Any],
                      grp: dict[str, Any], rep: dict[str, Any], exp: dict[str, Any] | None,
                      steps: list[tuple[str, float]], exp_size: str) -> None:
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

        print()
        print(f"LM experiment ({exp_size}): {exp['out_dir']}/results.md")
        print("\n".join(verdict_lines(exp)))
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
