"""``clusterclip experiment``: train a small byte-level LM per sampling strategy and
compare held-out loss (micro, macro, tail, head, train gap) over seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

from clusterclip.cli._options import parsed
from clusterclip.cli._paths import add_path
from clusterclip.workdir import MIXTURE_FILE

HELP = "train a small LM once per sampling strategy and compare held-out loss (W/experiment/)"


def _strategies(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _default_mixture(args: argparse.Namespace) -> str | None:
    """The mixture file strategy ``mixture`` reads when --mixture is not given."""
    if not {"mixture", "anneal"} & set(args.strategies or ()):
        return None
    return str(Path(args.workdir) / MIXTURE_FILE)


#: The options that declare the numbers' ranges (the command line parses them).
C = "clusterclip.lm.runconfig:ExperimentConfig"
S = "clusterclip.stages.experiment:ExperimentStageOptions"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory (labels.npy, corpus/)")
    from clusterclip.cli._options import add_proxy_options, add_workers_option
    from clusterclip.experiment.core import (
        DEFAULT_MAX_DOCS,
        DEFAULT_STRATEGIES,
        EXPERIMENT_STRATEGIES,
    )
    from clusterclip.lm.config import DEFAULT_MODEL

    p.add_argument("--strategies", type=_strategies, default=None,
                   help=f"comma-separated: {', '.join(EXPERIMENT_STRATEGIES)} "
                        f"(default: {','.join(DEFAULT_STRATEGIES)}); mixture: the schedule of "
                        "W/search/mixture.json (or --mixture FILE) with its timing and clip; "
                        "anneal: natural (each document alike) for the first 80%% of "
                        "training, then that mixture (one clip over both)")
    add_path(p, "--mixture", role="input", default=None, metavar="FILE",
             default_from=_default_mixture,
             help="the mixture file of strategies mixture and anneal (default: "
                  "W/search/mixture.json "
                  "of `clusterclip search`)")
    from clusterclip.sampling.spec import DEFAULT_CLIP

    p.add_argument("--clip", type=parsed(C, "clip"), default=DEFAULT_CLIP,
                   help=f"ClusterClip's repetition clip R (default {DEFAULT_CLIP})")
    p.add_argument("--alpha", type=parsed(C, "alpha"), default=0.0,
                   help="cluster weight n_k ** alpha for temperature and clusterclip (default 0)")
    p.add_argument("--balance-by", choices=("docs", "tokens"), default="docs",
                   help="balance clusters by documents (the paper) or by tokens: cluster "
                        "weights divided by the cluster's mean document length (default docs)")
    from clusterclip.experiment.verdict import PRIMARY_METRIC, PRIMARY_STRATEGY, SEED_RULE
    from clusterclip.verdict import percent

    r = SEED_RULE
    conf = percent(1 - r.level).replace("%", "%%")  # argparse's escape
    p.add_argument("--seeds", type=parsed(C, "seeds", words=("auto",)), default=None,
                   help="seeds per strategy (model init and schedule), or auto (the default; "
                        f"--quick: 3): start with {r.start}, add {r.step} at a time until the "
                        f"primary question is resolved (its paired {conf} "
                        f"interval excludes 0 or is narrower than ±{r.min_effect:g} "
                        f"nats/token), at most {r.cap}; {conf} because it looks "
                        f"up to {r.looks} times, at 5%%/{r.looks} each")
    p.add_argument("--primary", default=None, metavar="STRATEGY:METRIC",
                   help="the primary question, declared before the runs: STRATEGY against "
                        "random on METRIC (micro, macro or tail); tested alone at 5%%, every "
                        f"other comparison after Holm's correction (under --seeds auto at "
                        f"5%%/{r.looks} each: {conf} intervals) (default "
                        f"{PRIMARY_STRATEGY}:{PRIMARY_METRIC})")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=parsed(C, "epochs"), default=None,
                        help="training budget per run in epochs-equivalent of the training "
                             "tokens (default 3; --quick 1.5): over 1, small clusters repeat "
                             "and the clip binds")
    budget.add_argument("--tokens", type=parsed(C, "tokens"), default=None,
                        help="explicit training budget per run in tokens (instead of --epochs)")
    p.add_argument("--quick", action="store_true",
                   help="the tiny model on the first 63 bytes of each document, 1.5 epochs "
                        "(about a minute on the demo corpus), for tests and the demo")
    add_proxy_options(p, f"{DEFAULT_MODEL}; tiny with --quick; base is for --device cuda, "
                         "slow on CPU")
    p.add_argument("--max-docs", type=parsed(C, "max_docs"), default=DEFAULT_MAX_DOCS,
                   help="use a cluster-stratified subsample of at most this many documents, "
                        "each cluster keeping its share (default %(default)s, which keeps "
                        "each batch of 3 seeds of the default run near 15 minutes on 2 cores; "
                        "0 = all)")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 (default cpu)")
    p.add_argument("--threads", type=parsed(S, "threads"), default=None,
                   help="torch CPU threads (default: 1 for the tiny and small models, which "
                        "gain little from more and slow down badly on a shared machine; the "
                        "CPUs this process may use for base)")
    add_workers_option(p, "the runs", parsed(S, "workers"))
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from clusterclip.experiment import DEFAULT_STRATEGIES, verdict_lines
    from clusterclip.experiment.output import (
        format_schedule_table,
        format_table,
        schedule_budget,
    )
    from clusterclip.stages.experiment import run_experiment

    results = run_experiment(
        args.workdir, strategies=args.strategies or DEFAULT_STRATEGIES, seeds=args.seeds,
        primary=args.primary,
        clip=args.clip, alpha=args.alpha, balance_by=args.balance_by, quick=args.quick,
        model=args.model, device=args.device, epochs=args.epochs, tokens=args.tokens,
        max_docs=args.max_docs, threads=args.threads, workers=args.workers,
        progress=not args.no_progress, mixture=args.mixture, tokenizer=args.tokenizer)
    from clusterclip.experiment.verdict import seconds_per_run

    d = results["data"]
    print("\n".join(verdict_lines(results, seconds_per_run(results))))
    print()
    print(f"held-out loss, nats/token, mean ± std over {results['config']['seeds']} seed(s); "
          f"{d['budget_tokens']:,} training tokens per run "
          f"({d['epochs_equivalent']:.2f} epochs), {d['valid_docs']} held-out docs "
          f"in {d['valid_clusters']} clusters")
    print(format_table(results))
    print()
    print(f"what each strategy fed the models, {schedule_budget(results)}:")
    print(format_schedule_table(results))
    reused = results["timing"].get("reused_runs", 0)
    print(f"wrote {results['out_dir']}/results.md, results.json and plots "
          f"in {results['wall_seconds']:.0f} s"
          + (f" ({reused} finished run(s) reused)" if reused else ""))
    return 0
