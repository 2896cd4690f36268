"""clusterclip demo: every stage on the bundled Python-docs corpus (or ``--input``), in
``OUT/work``, with the grouped corpus, the report and a short LM experiment beside it, then
a summary table (the demo itself: :mod:`clusterclip.cli._demo`)."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import add_overwrite_option, parsed
from clusterclip.cli._paths import add_path

#: The configuration that declares the numbers' ranges (the command line parses them).
_DEMO = "clusterclip.cli._demo:DemoConfig"

HELP = ("end-to-end demo on the bundled Python-docs corpus: embed, cluster, sample, "
        "group, report and a quick LM experiment")
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"n_clusters": "--clusters"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "--out", role="container", default="demo-out",
             help="output directory (default: demo-out)")
    add_path(p, "--input", role="input", default=None,
                   help="corpus to use instead of the bundled one (.jsonl/.jsonl.gz/.parquet)")
    p.add_argument("--text-field", default="text",
                   help="field of --input holding the document text (default: text)")
    p.add_argument("--label-field", default="label",
                   help="field compared with the clusters in the report (default: label)")
    p.add_argument("--clusters", type=parsed(_DEMO, "n_clusters"), default=64,
                   help="K (default: 64)")
    p.add_argument("--embedder", choices=("minilm", "hf", "fast"), default="minilm")
    from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY
    from clusterclip.sampling.spec import DEFAULT_CLIP, STRATEGIES

    p.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_COMMAND_STRATEGY,
                   help=f"strategy of the schedule (default: {DEFAULT_COMMAND_STRATEGY}; "
                        "clusterclip is the paper's method)")
    p.add_argument("--clip", type=parsed(_DEMO, "clip"), default=None,
                   help=f"repetition clip R (default: paced {DEFAULT_CLIP}; clusterclip: the "
                        "recommended R for the budget)")
    p.add_argument("--epochs", type=parsed(_DEMO, "epochs"), default=3.0,
                   help="schedule length in epochs of the corpus (default: 3)")
    p.add_argument("--seed", type=parsed(_DEMO, "seed"), default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda (embedding, k-means, training)")
    add_overwrite_option(p, "OUT/grouped and OUT/report")
    p.add_argument("--experiment", choices=("quick", "full", "none"), default="quick",
                   help="LM experiment size: quick (minutes, default), full (~15 min on "
                        "2 cores), none")


def run(args: argparse.Namespace) -> int:
    from clusterclip.cli._demo import DemoConfig, print_table, run_demo

    out = run_demo(DemoConfig(out=args.out, input=args.input, text_field=args.text_field,
                              label_field=args.label_field,
                              n_clusters=args.clusters, embedder=args.embedder,
                              strategy=args.strategy, clip=args.clip, epochs=args.epochs,
                              seed=args.seed, device=args.device, overwrite=args.overwrite,
                              experiment=args.experiment))
    print_table(args.out, out["embed"], out["cluster"], out["sample"], out["group"],
                out["report"], out["experiment"], out["steps"], args.experiment)
    return 0
