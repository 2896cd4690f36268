"""clusterclip run: embed, cluster and (with --num-samples) sample, in one work directory."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from clusterclip.cli._options import (
    CLUSTER,
    DEDUP,
    SCHEDULE,
    add_corpus_options,
    add_embed_options,
    add_kmeans_options,
    add_sampling_options,
    add_token_options,
    check_token_options,
    parsed,
    resolve_mixture,
)
from clusterclip.cli._paths import add_path

if TYPE_CHECKING:
    from clusterclip.stages.pipeline import RunOptions
    from clusterclip.workdir import Workdir

HELP = ("embed + cluster (+ sample with --num-samples or --num-tokens) a corpus in one work "
        "directory")
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"n_clusters": "--clusters", "groups": "--dedup",
               "threshold": "--dedup-threshold", "workers": "--embed-workers"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.dedup import DEFAULT_THRESHOLD

    add_path(p, "inputs", role="input", nargs="+", metavar="INPUT",
             help=".jsonl / .jsonl.gz / .parquet files or folders of them")
    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory for all artifacts")
    p.add_argument("--clusters", type=parsed(CLUSTER, "n_clusters"), required=True,
                   help="number of clusters K")
    add_corpus_options(p)
    add_embed_options(p, backend_flag="--embed-backend")
    add_kmeans_options(p)
    g = p.add_argument_group("sampling (only with --num-samples or --num-tokens)")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--num-samples", type=parsed(SCHEDULE, "num_samples"), default=None,
                        help="length T of the training schedule written to W/schedule.npy")
    length.add_argument("--num-tokens", type=parsed(SCHEDULE, "num_tokens"), default=None,
                        metavar="B",
                        help="token budget instead: the schedule ends at the first position "
                             "whose cumulative tokens reach B")
    add_sampling_options(g, mixture_help=(
        "mixture.json (`clusterclip search`): its cluster weights (one per cluster of "
        "--clusters), and its timing and clip unless --strategy / --clip are given"))
    add_token_options(g)
    g.add_argument("--dedup", action="store_true",
                   help="group near-duplicates inside each cluster (the dedup stage, "
                        "W/groups.npy) and clip by group: each group is one unit of the passes "
                        "and of the clip")
    g.add_argument("--dedup-threshold", type=parsed(DEDUP, "threshold"), default=DEFAULT_THRESHOLD,
                   help=f"cosine similarity for --dedup, in (0, 1] (default: {DEFAULT_THRESHOLD})")


def run(args: argparse.Namespace) -> int:
    from clusterclip import distributed as D
    from clusterclip.errors import InputError
    from clusterclip.sampling.spec import ScheduleSettings
    from clusterclip.stages import pipeline
    from clusterclip.workdir import Workdir

    ScheduleSettings(num_samples=args.num_samples, num_tokens=args.num_tokens,  # ranges
                     clip=args.clip, alpha=args.alpha, seed=args.seed)  # first
    resolve_mixture(args, args.clusters)  # checked now, not after the embedding
    sampling = args.num_samples is not None or args.num_tokens is not None
    if check_token_options(args) and not sampling:
        raise InputError("--balance-by tokens applies to sampling: add --num-samples or "
                         "--num-tokens")
    # every option checked now, not after the (long) embedding
    options = config(args, sampling)
    # before the lock: rank 0 holds it for every rank
    with D.process_group(options.embed.device) as main_rank:
        w = Workdir(args.workdir)
        out = pipeline.run(w, options)
    if main_rank:
        print_summary(w, out)
    return 0


def config(args: argparse.Namespace, sampling: bool) -> RunOptions:
    """The stages' typed options from the parsed options (``sampling``: a
    ``--num-samples`` or ``--num-tokens`` was given)."""
    from clusterclip.cli._options import kmeans_options
    from clusterclip.cli.embed import embed_options
    from clusterclip.stages.cluster import ClusterOptions
    from clusterclip.stages.dedup import DedupOptions
    from clusterclip.stages.embed import EmbedOptions
    from clusterclip.stages.pipeline import RunOptions
    from clusterclip.stages.sample import SampleOptions

    progress = not args.no_progress
    # the embedding's and the k-means' first: their ranges are those --help shows
    embed = EmbedOptions(inputs=tuple(args.inputs), **embed_options(args))
    cluster = ClusterOptions(n_clusters=args.clusters, fit_sample=args.fit_sample,
                             progress=progress, **kmeans_options(args))
    sample = SampleOptions(
        num_samples=args.num_samples, num_tokens=args.num_tokens, balance_by=args.balance_by,
        tokenizer=args.tokenizer, strategy=args.strategy, clip=args.clip, alpha=args.alpha,
        seed=args.seed, mixture=args.mixture, groups=args.dedup,
        progress=progress) if sampling else None
    dedup = DedupOptions(threshold=args.dedup_threshold, progress=progress)  # checked
    return RunOptions(embed=embed, cluster=cluster, sample=sample,
                      dedup=dedup if args.dedup else None)


def _reused(stage: dict[str, Any]) -> str:
    return "  (reused: inputs and parameters unchanged)" if stage.get("skipped") else ""


def print_summary(w: Workdir, out: dict[str, Any]) -> None:
    """Where ``run``'s outputs are, stage by stage."""
    from clusterclip.workdir import (
        CENTROIDS,
        EMBEDDINGS,
        GROUPS,
        LABELS,
        MANIFEST,
        SCHEDULE,
        SCORES,
    )

    e, c = out["embed"], out["cluster"]
    print(f"corpus:     {e.get('documents')} documents, {e.get('empty')} without text "
          f"(label -1), {e.get('bad_lines', 0)} bad lines skipped")
    print(f"embeddings: {w.path(EMBEDDINGS)} ({e.get('embedder')}, dim {e.get('dim')})"
          f"{_reused(e)}")
    print(f"clusters:   {w.path(LABELS)}, {w.path(SCORES)}, {w.path(CENTROIDS)}{_reused(c)}")
    print(f"k-means:    {c.get('n_clusters')} clusters (sizes {c.get('cluster_size_min')}.."
          f"{c.get('cluster_size_max')}), objective {c.get('objective', float('nan')):.4f} "
          f"after {c.get('n_iter')} iterations")
    if c.get("fit_sample_rows"):
        from clusterclip.clustering.files import sample_note

        print(sample_note(c))
    if "dedup" in out:
        from clusterclip.dedup import format_summary

        print(f"groups:     {w.path(GROUPS)}{_reused(out['dedup'])}")
        print(f"            {format_summary(out['dedup'])}")
    if "sample" in out:
        s = out["sample"]
        print(f"schedule:   {w.path(SCHEDULE)} ({s.get('num_samples')} samples, "
              f"{s.get('strategy')}, clip {s.get('clip')}, capacity {s.get('capacity')}, "
              f"{s.get('clusters_clipped')} clusters clipped, max repetition "
              f"{s.get('max_repetition')}){_reused(s)}")
        if s.get("clip_default"):
            print(f"            clip {s['clip']} by default: {s['clip_default']}")
        from clusterclip.tokens import token_summary_lines

        for line in token_summary_lines(s):
            print(f"            {line}")
    print(f"manifest:   {w.path(MANIFEST)}")
