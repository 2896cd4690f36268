"""clusterclip group: write the corpus out as cluster_{k}/data_{j}.jsonl."""

from __future__ import annotations

import argparse

HELP = "write the corpus grouped by cluster (cluster_{k}/data_{j}.jsonl, verified exactly-once)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True, help="work directory of embed + cluster")
    p.add_argument("--out", required=True, help="output directory (replaced atomically)")
    p.add_argument("--docs-per-file", type=int, default=100_000,
                   help="documents per data_{j}.jsonl file (default: 100000)")


def run(args: argparse.Namespace) -> int:
    from clusterclip.corpus import Corpus
    from clusterclip.errors import InputError
    from clusterclip.grouping import check_output_folder, group_corpus, renamed_note
    from clusterclip.io import load_npy
    from clusterclip.labels import load_labels
    from clusterclip.workdir import Workdir

    check_output_folder(args.out)
    w = Workdir(args.workdir, create=False)
    for name in ("labels.npy", "scores.npy"):
        if not w.path(name).exists():
            raise InputError(f"{w.path(name)}: missing; run `clusterclip cluster` first")
    corpus = Corpus.load(w.path("corpus"))
    labels = load_labels(w.path("labels.npy"), len(corpus))
    scores = load_npy(w.path("scores.npy"), "scores", kinds="f", ndim=1)
    corpus.verify_files()
    summary = group_corpus(corpus, labels, scores, args.out, docs_per_file=args.docs_per_file)
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
