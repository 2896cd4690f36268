"""``clusterclip cluster``: K-means over a work directory's embeddings or a bare file."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import add_kmeans_options
from clusterclip.errors import InputError

HELP = "cluster embeddings with K-means (work directory or a bare embeddings file)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workdir", help="work directory holding embeddings.npy (from embed)")
    src.add_argument("--embeddings", help="a bare N x d .npy embeddings file (needs --out)")
    p.add_argument("--clusters", type=int, required=True, help="number of clusters K")
    p.add_argument("--out", help="output directory for --embeddings")
    p.add_argument("--valid", help="with --embeddings: bool .npy mask of rows to cluster")
    add_kmeans_options(p)


def run(args: argparse.Namespace) -> int:
    from clusterclip import distributed as D
    from clusterclip.clustering.stage import cluster_embeddings_file, cluster_workdir
    from clusterclip.workdir import Workdir

    if args.embeddings and not args.out:
        raise InputError("--embeddings needs --out DIR for the outputs")
    if args.workdir and (args.out or args.valid):
        raise InputError("--out and --valid go with --embeddings; --workdir writes into W")
    common = dict(n_clusters=args.clusters, max_iter=args.iters, n_init=args.n_init,
                  tol=args.tol, metric=args.metric, backend=args.backend, seed=args.seed,
                  device=args.kmeans_device, chunk_rows=args.chunk_rows)
    created = D.init_from_env(args.kmeans_device)
    main_rank = D.is_main()  # decided before the process group goes away
    try:
        if args.workdir:
            result = cluster_workdir(Workdir(args.workdir, create=False), **common)
        else:
            result = cluster_embeddings_file(args.embeddings, args.out, valid_path=args.valid,
                                             **common)
    finally:
        D.shutdown(created)
    if main_rank:
        print(summary(result))
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
    return "\n".join([head, f"labels:    {result['labels']}", f"scores:    {result['scores']}",
                      f"centroids: {result['centroids']}"])
