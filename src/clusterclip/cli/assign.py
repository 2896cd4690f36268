"""``clusterclip assign``: label new embeddings with existing centroids."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import add_chunk_rows_option
from clusterclip.cli._paths import add_path

HELP = "label embeddings with existing K-means centroids (writes labels.npy, scores.npy)"
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"device": "--kmeans-device"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "--centroids", role="input", required=True,
             help="K x d centroids.npy (from cluster)")
    add_path(p, "--embeddings", role="input", required=True,
             help="N x d .npy embeddings to label")
    add_path(p, "--out", role="output_dir", required=True, help="output directory")
    add_path(p, "--valid", role="input", help="optional bool .npy mask; False rows get label -1")
    from clusterclip.clustering.kmeans import DEFAULT_METRIC, METRICS

    p.add_argument("--metric", choices=METRICS, default=DEFAULT_METRIC)
    p.add_argument("--kmeans-device", default="cpu", help="torch device (default: cpu)")
    add_chunk_rows_option(p, "rows read at a time (bounds memory)")


def run(args: argparse.Namespace) -> int:
    from clusterclip import distributed as D
    from clusterclip.clustering.files import assign_embeddings_file
    from clusterclip.clustering.kmeans import KMeansSettings
    from clusterclip.workdir import LABELS, SCORES

    # assign's options are k-means settings: made (so checked) before any work
    k = KMeansSettings(metric=args.metric, device=args.kmeans_device,
                       chunk_rows=args.chunk_rows)
    with D.process_group(k.device) as main_rank:
        result = assign_embeddings_file(args.centroids, args.embeddings, args.out,
                                        metric=k.metric, device=k.device,
                                        chunk_rows=k.chunk_rows, valid_path=args.valid,
                                        names=(LABELS, SCORES))
    if main_rank:
        print(f"assign: {result['n_valid']} rows labelled with {result['n_clusters']} centroids "
              f"({result['n_excluded']} excluded, {result['empty_clusters']} clusters unused)")
        print(f"labels: {result['labels']}\nscores: {result['scores']}")
    return 0
