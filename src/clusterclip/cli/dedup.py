"""clusterclip dedup: W/embeddings.npy + W/labels.npy -> W/groups.npy (near-duplicate groups)."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import add_overwrite_option, parsed
from clusterclip.cli._paths import add_path

#: Parameters of the code below named otherwise here (see clusterclip.cli._flags): the
#: folder of ``stages.dedup.keep_one`` (its ``out``).
PARAM_FLAGS = {"out": "--keep-one"}
HELP = ("group near-duplicate documents inside each cluster (cosine >= --threshold) into "
        "W/groups.npy, for `sample --groups` / `run --dedup`")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.dedup import DEFAULT_THRESHOLD

    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory of embed + cluster")
    p.add_argument("--threshold", type=parsed("clusterclip.stages.dedup:DedupOptions", "threshold"),
                   default=DEFAULT_THRESHOLD,
                   help="cosine similarity at or above which two documents of a cluster are "
                        f"near-duplicates, in (0, 1] (default: {DEFAULT_THRESHOLD})")
    add_path(p, "--keep-one", role="output_dir", default=None, metavar="OUT",
                   help="also write the deduplicated corpus to folder OUT: one document per "
                        "group, the one nearest its cluster centroid (OUT/data.jsonl, "
                        "OUT/kept.npy)")
    add_overwrite_option(p, "--keep-one")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from clusterclip.dedup import format_summary
    from clusterclip.stages import dedup
    from clusterclip.storage.outputs import check_output_dir, made_from
    from clusterclip.workdir import DEDUP, GROUPS, Workdir

    options = dedup.DedupOptions(threshold=args.threshold, progress=not args.no_progress)
    w = Workdir(args.workdir, create=False)
    if args.keep_one is not None:  # refused before any work
        with made_from(w.root):
            check_output_dir(args.keep_one, "dedup", overwrite=args.overwrite,
                             protected=w.protected(), option="--keep-one")
    s = dedup.run(w, options)
    print(format_summary(s) + ("  (up to date: reused)" if s.get("skipped") else ""))
    print(f"output: {w.path(GROUPS)} (summary: {w.path(DEDUP)})")
    if args.keep_one is not None:
        k = dedup.keep_one(w, args.keep_one, overwrite=args.overwrite)
        print(f"kept {k['kept']:,} documents, one per group ({k['dropped']:,} near-duplicates "
              f"dropped): {args.keep_one}/data.jsonl")
    return 0
