"""clusterclip group: write the corpus out as cluster_{k}/data_{j}.jsonl."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import add_overwrite_option, parsed
from clusterclip.cli._paths import add_path

HELP = "write the corpus grouped by cluster (cluster_{k}/data_{j}.jsonl, verified exactly-once)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory of embed + cluster")
    add_path(p, "--out", role="output_dir", required=True,
                   help="output directory: created, or replaced atomically when empty or "
                        "written by an earlier `clusterclip group`")
    add_overwrite_option(p)
    p.add_argument("--docs-per-file", default=100_000,
                   type=parsed("clusterclip.stages.group:GroupOptions", "docs_per_file"),
                   help="documents per data_{j}.jsonl file (default: 100000)")


def run(args: argparse.Namespace) -> int:
    from clusterclip.corpus.records import renamed_note
    from clusterclip.stages import group
    from clusterclip.workdir import Workdir

    options = group.GroupOptions(out=args.out, docs_per_file=args.docs_per_file,
                                 overwrite=args.overwrite, progress=not args.no_progress)
    summary = group.run(Workdir(args.workdir, create=False), options)
    groups = summary["groups"]
    clusters = sum(1 for g in groups if g.startswith("cluster_"))
    print(f"grouped {summary['documents']} documents into {clusters} clusters"
          f" ({groups.get('excluded', 0)} excluded) in {summary['files']} files;"
          f" verified exactly once")
    note = renamed_note(summary["renamed_fields"])
    if note:
        print(note)
    print(f"output: {args.out}")
    return 0
