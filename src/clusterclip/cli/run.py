"""clusterclip run: embed, cluster and (with --num-samples) sample, in one work directory."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from clusterclip.cli._options import (
    ROWS,
    SAMPLES,
    SIMILARITY,
    TOKENS,
    add_corpus_options,
    add_embed_options,
    add_kmeans_options,
    add_sampling_options,
    add_token_options,
    check_token_options,
    resolve_mixture,
)
from clusterclip.cli._paths import add_path

if TYPE_CHECKING:
    from clusterclip.pipeline import RunConfig

HELP = ("embed + cluster (+ sample with --num-samples or --num-tokens) a corpus in one work "
        "directory")
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"n_clusters": "--clusters", "groups": "--dedup"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.dedup import DEFAULT_THRESHOLD

    add_path(p, "inputs", role="input", nargs="+", metavar="INPUT",
             help=".jsonl / .jsonl.gz / .parquet files or folders of them")
    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory for all artifacts")
    p.add_argument("--clusters", type=ROWS, required=True, help="number of clusters K")
    add_corpus_options(p)
    add_embed_options(p, backend_flag="--embed-backend")
    add_kmeans_options(p)
    g = p.add_argument_group("sampling (only with --num-samples or --num-tokens)")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--num-samples", type=SAMPLES, default=None,
                        help="length T of the training schedule written to W/schedule.npy")
    length.add_argument("--num-tokens", type=TOKENS, default=None, metavar="B",
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
    g.add_argument("--dedup-threshold", type=SIMILARITY, default=DEFAULT_THRESHOLD,
                   help=f"cosine similarity for --dedup, in (0, 1] (default: {DEFAULT_THRESHOLD})")


def run(args: argparse.Namespace) -> int:
    from clusterclip.errors import InputError
    from clusterclip.pipeline import run_pipeline

    resolve_mixture(args, args.clusters)  # checked now, not after the embedding
    sampling = args.num_samples is not None or args.num_tokens is not None
    if check_token_options(args) and not sampling:
        raise InputError("--balance-by tokens applies to sampling: add --num-samples or "
                         "--num-tokens")
    run_pipeline(config(args, sampling))
    return 0


def config(args: argparse.Namespace, sampling: bool) -> RunConfig:
    """The pipeline's typed configuration from the parsed options (``sampling``: a
    ``--num-samples`` or ``--num-tokens`` was given)."""
    from clusterclip.pipeline import EmbedOptions, KMeansOptions, RunConfig, SampleOptions

    embed = EmbedOptions(
        text_field=args.text_field, id_field=args.id_field, skip_bad_lines=args.skip_bad_lines,
        embedder=args.embedder, model=args.model, pooling=args.pooling,
        max_length=args.max_length, batch_size=args.batch_size, device=args.device,
        dtype=args.dtype, backend=args.embed_backend, precision=args.precision,
        tune=args.tune, tune_seed=args.tune_seed, progress=not args.no_progress)
    kmeans = KMeansOptions(max_iter=args.iters, n_init=args.n_init, tol=args.tol,
                           metric=args.metric, backend=args.backend, seed=args.seed,
                           device=args.kmeans_device, chunk_rows=args.chunk_rows,
                           fit_sample=args.fit_sample)
    if not sampling and args.clip is not None and args.clip < 1:
        from clusterclip.errors import InputError

        # refused as with a sampling stage (the value is wrong whatever runs)
        raise InputError(f"clip {args.clip}: must be >= 1", params=("clip",))
    sample = SampleOptions(
        num_samples=args.num_samples, num_tokens=args.num_tokens, balance_by=args.balance_by,
        tokenizer=args.tokenizer, strategy=args.strategy, clip=args.clip, alpha=args.alpha,
        seed=args.seed, mixture=args.mixture) if sampling else None
    return RunConfig(workdir=args.workdir, inputs=tuple(args.inputs), n_clusters=args.clusters,
                     embed=embed, kmeans=kmeans, sample=sample,
                     dedup_threshold=args.dedup_threshold if args.dedup else None)
