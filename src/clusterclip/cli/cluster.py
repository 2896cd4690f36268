"""``clusterclip cluster``: K-means over a work directory's embeddings or a bare file."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import (
    SWEEP,
    add_kmeans_options,
    kmeans_options,
    parsed,
    parsed_list,
)
from clusterclip.cli._paths import add_path
from clusterclip.errors import InputError

HELP = "cluster embeddings with K-means (work directory or a bare embeddings file)"
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"n_clusters": "--clusters", "ks": "--clusters", "sample_size": "--sweep-sample"}
# The ranges of --clusters, --sweep-sample and --silhouette-sample are SweepOptions' (and
# ClusterOptions.n_clusters' for one K): the command line only parses them.


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    add_path(src, "--workdir", role="workdir",
             help="work directory holding embeddings.npy (from embed)")
    add_path(src, "--embeddings", role="input",
             help="a bare N x d .npy embeddings file (needs --out)")
    p.add_argument("--clusters", type=parsed_list(SWEEP, "ks"), required=True,
                   help="number of clusters K; with --sweep a comma-separated list (50,200,1000)")
    add_path(p, "--out", role="output_dir", help="output directory for --embeddings")
    add_path(p, "--valid", role="input",
             help="with --embeddings: bool .npy mask of rows to cluster")
    g = p.add_argument_group("choosing K (--sweep)")
    g.add_argument("--sweep", action="store_true",
                   help="fit each K of --clusters on a seeded sample of the embeddings, write "
                        "W/sweep/ (table, plot, suggested K by the stated rule), then fit the "
                        "full data with the suggested K")
    g.add_argument("--sweep-only", action="store_true",
                   help="with --sweep: stop after the sweep (print the command for the full fit)")
    g.add_argument("--sweep-sample", type=parsed(SWEEP, "sample_size"), default=None,
                   help="rows in the sweep's sample (default: min(valid rows, 50000))")
    g.add_argument("--silhouette-sample", type=parsed(SWEEP, "silhouette_sample"), default=None,
                   help="rows the silhouette is computed on (default: 10000)")
    add_kmeans_options(p)


def run(args: argparse.Namespace) -> int:
    from clusterclip import distributed as D
    from clusterclip.stages import cluster
    from clusterclip.workdir import Workdir

    if args.embeddings and not args.out:
        raise InputError("--embeddings needs --out DIR for the outputs")
    if args.workdir and (args.out or args.valid):
        raise InputError("--out and --valid go with --embeddings; --workdir writes into W")
    if (args.sweep_only or args.sweep_sample is not None
            or args.silhouette_sample is not None) and not args.sweep:
        raise InputError("--sweep-only, --sweep-sample and --silhouette-sample go with --sweep")
    if args.sweep:
        return _sweep(args)
    if len(args.clusters) != 1:
        raise InputError(f"--clusters {','.join(map(str, args.clusters))}: a list of K needs "
                         "--sweep")
    options = cluster.ClusterOptions(n_clusters=args.clusters[0], fit_sample=args.fit_sample,
                                     progress=not args.no_progress, **kmeans_options(args))
    with D.process_group(args.kmeans_device) as main_rank:
        if args.workdir:
            result = cluster.run(Workdir(args.workdir, create=False), options)
        else:
            result = cluster.run_file(args.embeddings, args.out, options, valid_path=args.valid)
    if main_rank:
        print(summary(result))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    """``--sweep``: the sweep table and suggestion, then (unless --sweep-only) the full fit."""
    import sys

    from clusterclip.clustering.sweep import RULE, edge_note, size_note, table_text
    from clusterclip.stages import cluster
    from clusterclip.workdir import Workdir

    if not args.workdir:
        raise InputError("--sweep needs --workdir (it writes W/sweep/)")
    progress = sys.stderr.isatty() and not args.no_progress
    options = cluster.SweepOptions(ks=tuple(args.clusters), sample_size=args.sweep_sample,
                                   silhouette_sample=args.silhouette_sample,
                                   progress=progress, **kmeans_options(args))
    w = Workdir(args.workdir, create=False)
    result = cluster.sweep(w, options)
    k = result["suggested_k"]
    print(f"sweep: {result['sample_rows']:,} of {result['valid_rows']:,} valid rows, "
          f"seed {result['seed']}" + (" (up to date, reused)" if result.get("skipped") else
                                      f", {result['seconds']:.1f} s"))
    print("\n".join(table_text(result["rows"], k)))
    print(f"rule: the suggested K is {RULE}")
    print(f"suggested K = {k}: {result['reason']}")
    if edge_note(result["rows"], k):
        print(edge_note(result["rows"], k))
    print(size_note(result))
    print(f"table: {result['csv']}  report: {result['md']}  plot: {result['png']}")
    if args.sweep_only:
        print(f"full fit: {result['command']}")
        return 0
    print(summary(cluster.run(w, cluster.ClusterOptions(
        n_clusters=k, fit_sample=args.fit_sample, progress=progress, **kmeans_options(args)))))
    return 0


def summary(result: dict) -> str:
    """Human summary of a cluster result (also used by ``run``)."""
    if result.get("skipped"):
        head = "k-means: up to date, reused"
    else:
        reseeds = sum(result.get("reseeds", []))
        head = (f"k-means: {result['n_valid']} rows ({result['n_excluded']} excluded) -> "
                f"{result['n_clusters']} clusters after {result['n_iter']} iterations, "
                f"objective {result['objective']:.6f}, {reseeds} empty clusters re-seeded")
        if result.get("fit_sample_rows"):
            from clusterclip.clustering.files import sample_note

            head += "\n" + sample_note(result)
    return "\n".join([head, f"labels:    {result['labels']}", f"scores:    {result['scores']}",
                      f"centroids: {result['centroids']}"])

