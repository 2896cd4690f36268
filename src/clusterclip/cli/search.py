"""``clusterclip search``: choose the mixture of clusters for a goal with small proxy
models, and prove it on held-out data (W/search/)."""

from __future__ import annotations

import argparse

from clusterclip.cli._options import COUNT, ROUNDS, ROWS_OR_ZERO, SEED, SEED_COUNT, THREADS
from clusterclip.cli._paths import add_path

HELP = ("search cluster weights, clip and timing with small proxy LMs for a target (or "
        "balanced loss) and test the result against random (W/search/)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.experiment.config import MODEL_PRESETS
    from clusterclip.experiment.runner import DEFAULT_MAX_DOCS
    from clusterclip.search.runner import DEFAULT, QUICK

    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory (labels.npy, corpus/, centroids.npy)")
    add_path(p, "--target", role="input", nargs="+", default=None, metavar="FILE",
             help="JSONL/Parquet documents of what the model must be good at: the "
                  "objective is their held-out loss (default: macro held-out loss)")
    p.add_argument("--text-field", default="text", help="field of the target's text")
    p.add_argument("--runs", type=COUNT, default=None,
                   help=f"proxy runs in all (default {DEFAULT['runs']}; --quick {QUICK['runs']})")
    p.add_argument("--rounds", type=ROUNDS, default=None,
                   help=f"rounds, each half the proxies of the one before (default "
                        f"{DEFAULT['rounds']})")
    p.add_argument("--test-seeds", type=SEED_COUNT, default=None,
                   help=f"fresh seeds of the test verdict (default {DEFAULT['test_seeds']}; "
                        f"--quick {QUICK['test_seeds']})")
    p.add_argument("--model", choices=tuple(MODEL_PRESETS), default=None,
                   help=f"proxy model size (default {DEFAULT['model']}; --quick "
                        f"{QUICK['model']})")
    p.add_argument("--quick", action="store_true",
                   help="the tiny model, 1.5 epochs, 24 proxies, 3 test seeds: at most 10 "
                        "minutes on 2 CPU cores for 2,500 documents (docs/benchmarks.md, "
                        "\"Search\")")
    p.add_argument("--max-docs", type=ROWS_OR_ZERO, default=DEFAULT_MAX_DOCS,
                   help="cluster-stratified subsample of at most this many documents "
                        "(0 = all)")
    p.add_argument("--device", default="cpu",
                   help="torch device: cpu or cuda (under torchrun one GPU per rank)")
    p.add_argument("--threads", type=THREADS, default=None,
                   help="torch CPU threads per process (default: 1 for tiny and small)")
    p.add_argument("--seed", type=SEED, default=0, help="splits, proxies and candidates")
    p.add_argument("--no-progress", action="store_true", help="no progress output")


def run(args: argparse.Namespace) -> int:
    from clusterclip import distributed as D
    from clusterclip.errors import InputError
    from clusterclip.search.runner import SearchConfig, run_search_workdir

    if args.max_docs < 0:
        raise InputError(f"--max-docs: must be >= 0 (0 = all), got {args.max_docs}")
    config = SearchConfig.from_options(
        quick=args.quick, targets=tuple(args.target or ()), text_field=args.text_field,
        runs=args.runs, rounds=args.rounds, test_seeds=args.test_seeds, model=args.model,
        seed=args.seed, max_docs=args.max_docs or None)
    config.validate()  # before a process group exists: bad options fail alike everywhere
    with D.process_group(args.device) as main_rank:
        results = run_search_workdir(args.workdir, config, device=args.device,
                                     threads=args.threads, progress=not args.no_progress)
    if main_rank:
        from clusterclip.search.output import verdict_lines

        print("\n".join(ln for ln in verdict_lines(results) if ln))
        print(f"wrote {results['out_dir']}/mixture.json, results.md, results.json, "
              f"splits.npz and plots in {results['wall_seconds']:.0f} s")
    return 0
