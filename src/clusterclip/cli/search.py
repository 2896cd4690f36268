"""``clusterclip search``: choose the mixture of clusters for a goal with small proxy
models, and prove it on held-out data (W/search/); ``search propose`` and ``search fit``:
the same search with the user's own trainer running the proxies (the swarm layout)."""

from __future__ import annotations

import argparse
import types
from typing import Any

from clusterclip.cli._options import parsed
from clusterclip.cli._paths import add_path

HELP = ("search cluster weights, clip and timing with small proxy LMs for a target (or "
        "balanced loss) and test the result against random (W/search/)")
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"targets": "--target"}
#: The options that declare the numbers' ranges (the command line parses them).
_CONFIG = "clusterclip.search.offline:SearchConfig"
_STAGE = "clusterclip.stages.search:SearchStageOptions"
_DRAW = "clusterclip.search.propose:Draw"
_PROPOSE = "clusterclip.search.propose:ProposeRequest"
_FIT = "clusterclip.search.fit:FitRequest"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.cli._options import add_proxy_options, add_workers_option
    from clusterclip.experiment.core import DEFAULT_MAX_DOCS
    from clusterclip.lm.config import MODEL_PRESETS
    from clusterclip.search.offline import DEFAULT, NO_VERIFY, QUICK, QUICK_WORKERS

    add_path(p, "--workdir", role="workdir", default=None,
             help="work directory (labels.npy, corpus/, centroids.npy); required without "
                  "a subcommand")
    add_path(p, "--target", role="input", nargs="+", default=None, metavar="FILE",
             help="JSONL/Parquet documents of what the model must be good at: the "
                  "objective is their held-out loss (default: macro held-out loss)")
    p.add_argument("--text-field", default="text", help="field of the target's text")
    p.add_argument("--runs", type=parsed(_CONFIG, "runs"), default=None,
                   help=f"proxy runs in all (default {DEFAULT['runs']}; --quick {QUICK['runs']})")
    p.add_argument("--rounds", type=parsed(_CONFIG, "rounds"), default=None,
                   help=f"rounds, each half the proxies of the one before (default "
                        f"{DEFAULT['rounds']})")
    from clusterclip.search.output import SEED_RULE as r
    from clusterclip.verdict import percent

    conf = percent(1 - r.level).replace("%", "%%")  # argparse's escape

    p.add_argument("--test-seeds", type=parsed(_CONFIG, "test_seeds"), default=None,
                   help=f"fresh seeds of the test verdict, or auto (default "
                        f"{DEFAULT['test_seeds']}; --quick {QUICK['test_seeds']}): start with "
                        f"{r.start}, add {r.step} at a time until searched vs random on the "
                        f"objective is resolved (its paired {conf} interval "
                        f"excludes 0 or is narrower than ±{r.min_effect:g} nats/token), at "
                        f"most {r.cap}; {conf} because it looks up to "
                        f"{r.looks} times, at 5%%/{r.looks} each")
    add_proxy_options(p, DEFAULT["model"] if QUICK["model"] == DEFAULT["model"]
                      else f"{DEFAULT['model']}; --quick {QUICK['model']}")
    p.add_argument("--verify-model", choices=(*MODEL_PRESETS, NO_VERIFY), default=None,
                   help=f"train the final comparison (random, prior, searched; fresh seeds; "
                        f"test) again at this larger preset and report whether the arms keep "
                        f"their order (Spearman) and the verdict there (default "
                        f"one size up from --model; --quick: {NO_VERIFY} unless "
                        f"asked)")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['runs']} proxies of the {QUICK['model']} model, 1.5 "
                        f"epochs, {QUICK['test_seeds']} test seeds, in {QUICK_WORKERS} "
                        "workers: 2,500 documents in 9 minutes on 2 idle CPU cores, 15 CPU "
                        "minutes (so over 10 minutes in one process or beside other work; "
                        "docs/benchmarks.md, \"Search\"); with --model tiny about 3 CPU "
                        "minutes, a smoke test (its proxies ranked mixtures worse)")
    p.add_argument("--max-docs", type=parsed(_CONFIG, "max_docs"), default=DEFAULT_MAX_DOCS,
                   help="cluster-stratified subsample of at most this many documents "
                        "(0 = all)")
    p.add_argument("--device", default="cpu",
                   help="torch device: cpu or cuda (under torchrun one GPU per rank)")
    p.add_argument("--threads", type=parsed(_STAGE, "threads"), default=None,
                   help="torch CPU threads per process (default: 1 for tiny and small)")
    add_workers_option(p, "proxies", parsed(_STAGE, "workers"),
                       f"; --quick: {QUICK_WORKERS}, at most the CPUs")
    p.add_argument("--seed", type=parsed(_CONFIG, "seed"), default=0,
                   help="splits, proxies and candidates")
    p.add_argument("--no-progress", action="store_true", help="no progress output")
    sub = p.add_subparsers(dest="search_command", metavar="{propose,fit}",
                           parser_class=type(p),
                           title="with your own trainer (see docs/search-own-trainer.md)")
    for name, (helptext, adder, runner) in SUBCOMMANDS.items():
        q = sub.add_parser(name, help=helptext, description=helptext)
        adder(q)
        q.set_defaults(_module=types.SimpleNamespace(run=runner), _parser=q)


def _budget(p: argparse.ArgumentParser, what: str) -> None:
    length = p.add_mutually_exclusive_group()
    length.add_argument("--num-tokens", type=parsed(_DRAW, "num_tokens"), default=None,
                        metavar="T", help=f"token budget of one proxy run ({what})")
    length.add_argument("--num-samples", type=parsed(_DRAW, "num_samples"), default=None,
                        metavar="T",
                        help=f"documents of one proxy run ({what})")


def _propose_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.export import FORMATS

    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory of embed + cluster (labels.npy, centroids.npy, corpus/)")
    add_path(p, "--target", role="input", nargs="+", default=None, metavar="FILE",
             help="JSONL/Parquet documents of what the model must be good at: the prior "
                  "(their share per cluster) joins the candidates")
    p.add_argument("--text-field", default="text", help="field of the target's text")
    p.add_argument("--split-target", action="store_true",
                   help="split the --target in halves by --seed: OUT/target_val.jsonl (the "
                        "prior is drawn from it; fit on its loss) and OUT/target_test.jsonl "
                        "(keep it for the verdict); every half's corpus copies are kept out")
    p.add_argument("--runs", type=parsed(_PROPOSE, "runs"), default=None,
                   help="candidates (proxy runs) to propose (required without --verify)")
    add_path(p, "--verify", role="input", default=None, metavar="FIT_DIR",
             help="the verification round instead: the chosen mixture of FIT_DIR (the --out "
                  "of `search fit --choose`), natural and, with --target, the prior, each "
                  "drawn with --seeds fresh seeds; ratios.csv gains `arm` and `seed`; then "
                  "`search fit --verdict`")
    p.add_argument("--seeds", type=parsed(_PROPOSE, "seeds"), default=3,
                   help="with --verify: fresh seeds per arm (default: 3; at least 2)")
    add_path(p, "--out", role="output_dir", required=True,
             help="output folder: ratios.csv, mixtures/<run>.json, with --format runs/<run>/ "
                  "(created, or replaced when written by an earlier `search propose`)")
    _budget(p, "with it, no candidate asks a cluster for more than its clip allows, and "
               "--format exports each candidate's schedule")
    p.add_argument("--format", dest="fmt", choices=FORMATS, default=None,
                   help="export each candidate's schedule for your trainer into "
                        "OUT/runs/<run>/ as `clusterclip export --format` writes it")
    p.add_argument("--blend", choices=("megatron",), default=None,
                   help="for trainers that mix: each cluster's documents once as a Megatron "
                        "dataset (OUT/clusters/cluster_K/) and per candidate "
                        "OUT/blends/<run>.txt, its --data-path blend (its token shares; a "
                        "blend keeps neither the clip nor the pacing); needs --tokenizer")
    add_path(p, "--tokenizer", role="input", default=None, metavar="PATH",
             help="local Hugging Face tokenizer folder: --format megatron's and --blend's "
                  "token ids, and exact token counts for --num-tokens (default: the "
                  "estimate)")
    p.add_argument("--seed", type=parsed(_DRAW, "seed"), default=0,
                   help="the candidates' draws and the schedules (default: 0)")
    p.add_argument("--device", default="cpu", help="torch device embedding the --target")


def _fit_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "--ratios", role="input", required=True, metavar="R.csv", nargs="+",
             help="the runs' mixtures, one table per round in order (propose's ratios.csv, "
                  "then each fit's proposals.csv): first column the run id (RegMix `index`, "
                  "Olmix `run`/`run_id` + `name`, `index`), then one weight column per "
                  "domain (optional `clip`, `timing`; `origin`, `arm`, `seed` are not "
                  "weights)")
    add_path(p, "--metrics", role="input", required=True, metavar="M.csv", nargs="+",
             help="the runs' metrics, one table per --ratios table, same first column(s)")
    p.add_argument("--objective", nargs="+", required=True, metavar="COLUMN",
                   help="metric column(s) of M.csv to optimise (several: their mean)")
    p.add_argument("--maximize", action="store_true",
                   help="higher is better (accuracies); default: lower (losses)")
    add_path(p, "--workdir", role="workdir", default=None,
             help="work directory whose clusters (or super-clusters) the columns are: then "
                  "mixture.json is per cluster, for `sample --mixture`")
    add_path(p, "--predict", role="input", default=None, metavar="C.csv",
             help="candidates in R.csv's layout: OUT/predictions.csv ranks them")
    p.add_argument("--propose", type=parsed(_FIT, "propose"), default=0, metavar="N",
                   help="N new mixtures for the next round: OUT/proposals.csv, and with "
                        "--workdir OUT/mixtures/<run>.json and OUT/round.json (default: 0)")
    p.add_argument("--verdict", action="store_true",
                   help="the verdict of a verification round (`search propose --verify`): "
                        "each arm against natural paired by seed, Holm-corrected; writes "
                        "OUT/verdict.json and OUT/verdict.md (first line: the decision)")
    p.add_argument("--choose", action="store_true",
                   help="OUT/mixture.json: the run with the best predicted objective")
    _budget(p, "with --workdir: proposals respect the clip's capacity; default: the "
               "rounds' own, from round.json")
    from clusterclip.export import FORMATS

    p.add_argument("--format", dest="fmt", choices=FORMATS, default=None,
                   help="with --workdir and --propose: export each proposal's schedule into "
                        "OUT/runs/<run>/ as `search propose --format` does")
    add_path(p, "--tokenizer", role="input", default=None, metavar="PATH",
             help="local Hugging Face tokenizer folder (--format megatron; exact token "
                  "counts for --num-tokens)")
    p.add_argument("--seed", type=parsed(_DRAW, "seed"), default=0,
                   help="the proposals' draws (default: 0)")
    add_path(p, "--out", role="output_dir", required=True,
             help="output folder: fit.json, and predictions.csv, proposals.csv, mixture.json "
                  "as asked (created, or replaced when written by an earlier `search fit`)")


def run_propose(args: argparse.Namespace) -> int:
    from clusterclip.search.propose import ProposeRequest
    from clusterclip.stages import propose
    from clusterclip.workdir import Workdir

    req = ProposeRequest(workdir=args.workdir, runs=args.runs, out=args.out,
                         targets=tuple(args.target or ()), text_field=args.text_field,
                         num_tokens=args.num_tokens, num_samples=args.num_samples,
                         fmt=args.fmt, seed=args.seed, tokenizer=args.tokenizer,
                         device=args.device, blend=args.blend == "megatron",
                         split_target=args.split_target, verify=args.verify,
                         seeds=args.seeds)
    s = propose.run(Workdir(req.workdir, create=False), req)
    if s["target_overlap"] is not None:
        print(overlap_line(s["target_overlap"]))
    if req.verify is not None:
        print(f"verification round: arms {', '.join(s['arms'])} x seeds "
              f"{', '.join(map(str, s['seeds']))} ({s['runs']} runs): {args.out}/ratios.csv, "
              f"mixtures/<run>.json" + (f", runs/<run>/ ({args.fmt})" if args.fmt else ""))
        print(f"next: train one run per row, write metrics.csv (first column `run`), then "
              f"`clusterclip search fit --verdict --ratios {args.out}/ratios.csv --metrics "
              f"metrics.csv --objective COLUMN --out VERDICT`")
        return 0
    if s["short"]:
        print(s["short"])
    what = f"{s['groups']} {s['kind']}s"
    print(f"proposed {s['runs']} mixtures over {what}: {args.out}/ratios.csv, "
          f"mixtures/<run>.json" + (f", runs/<run>/ ({args.fmt})" if args.fmt else "")
          + (", clusters/ + blends/<run>.txt (Megatron blends)" if args.blend else ""))
    print(f"next: train one proxy per row, write metrics.csv (first column `run`), then "
          f"`clusterclip search fit --ratios {args.out}/ratios.csv --metrics metrics.csv "
          f"--objective COLUMN --workdir {args.workdir} --propose N --out FIT`")
    return 0


def overlap_line(o: dict[str, Any]) -> str:
    """The target's overlap with the corpus, in one line."""
    return (f"target overlap: {o['exact']} exact and {o['near']} near copies (cosine >= "
            f"{o['threshold']:g}) of the target's {o['target_docs']} documents in the "
            f"corpus; their {o['corpus_docs_excluded']} corpus copies are kept out of every "
            "candidate")


def _verdict_lines(r: dict[str, Any], out: str) -> None:
    """What ``search fit --verdict`` prints."""
    print(r["decision"])
    if r.get("overlap"):
        print(r["overlap"])
    print(f"wrote verdict.json, verdict.md in {out}")


def run_fit(args: argparse.Namespace) -> int:
    from clusterclip.search.fit import FitRequest
    from clusterclip.stages import fit
    from clusterclip.workdir import Workdir

    req = FitRequest(ratios=tuple(args.ratios), metrics=tuple(args.metrics),
                     objective=tuple(args.objective), out=args.out, maximize=args.maximize,
                     workdir=args.workdir, predict=args.predict, propose=args.propose,
                     choose=args.choose, seed=args.seed, num_tokens=args.num_tokens,
                     num_samples=args.num_samples, fmt=args.fmt, tokenizer=args.tokenizer,
                     verdict=args.verdict)
    r = fit.run(None if req.workdir is None else Workdir(req.workdir, create=False), req)
    if req.verdict:
        _verdict_lines(r, args.out)
        return 0
    rho = r["loo_spearman"]
    skipped = r["skipped"]["without_objective"]
    b = r["bearing"]
    print(f"fitted on {r['runs']} runs" + (f" ({skipped} without the objective skipped)"
                                           if skipped else "")
          + "; leave-one-out rank correlation "
          + ("n/a" if rho is None else f"{rho:.3f}")
          + f"; noise share {b['noise_share']:.2f}; {b['length_scales_at_bound']} of "
            f"{b['length_scales']} length scales at a bound")
    if b["caution"]:
        print(f"caution: {b['caution']}")
    if r.get("target_overlap") and args.propose:
        print(overlap_line(r["target_overlap"]))
    made = ["fit.json"] + (["predictions.csv"] if args.predict else []) \
        + ([f"proposals.csv ({r.get('proposals', 0)} mixtures)"
            + (", mixtures/<run>.json, round.json" if args.workdir else "")
            + (f", schedules/ and runs/<run>/ ({args.fmt})" if args.fmt else "")]
           if args.propose else []) \
        + ([f"mixture.json (run {r['chosen']['run']})"] if args.choose else [])
    print(f"wrote {', '.join(made)} in {args.out}")
    return 0


SUBCOMMANDS = {
    "propose": ("propose candidate mixtures for your own trainer: ratios.csv, a mixture file "
                "per run, and with --format each run's schedule exported", _propose_arguments,
                run_propose),
    "fit": ("fit the predictor to your proxies' metrics (RegMix / Olmix swarm layout); "
            "predict, propose the next round, choose", _fit_arguments, run_fit),
}


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from clusterclip import distributed as D
    from clusterclip.errors import InputError
    from clusterclip.search.offline import SearchConfig, quick_workers
    from clusterclip.stages import search as stage
    from clusterclip.workdir import Workdir

    if args.workdir is None:
        raise InputError("--workdir: required (or give a subcommand: propose, fit)")
    config = SearchConfig.from_options(
        quick=args.quick, targets=tuple(args.target or ()), text_field=args.text_field,
        runs=args.runs, rounds=args.rounds, test_seeds=args.test_seeds, model=args.model,
        seed=args.seed, max_docs=args.max_docs or None,
        tokenizer=None if args.tokenizer is None else str(args.tokenizer),
        verify_model=args.verify_model)
    # checked before a process group exists: bad options fail alike everywhere (the device
    # is tried in the group, which selects each rank's GPU first)
    options = stage.SearchStageOptions(config=config, device=args.device, threads=args.threads,
                                       workers=1 if args.workers is None else args.workers,
                                       progress=not args.no_progress)
    with D.process_group(args.device) as main_rank:
        if args.workers is None:  # --quick's own: per rank, within the CPUs ranks share
            options = replace(options, workers=quick_workers(D.rank_and_world()[1])
                              if args.quick else 1)
        results = stage.run(Workdir(args.workdir, create=False), options)
    if main_rank:
        from clusterclip.search.output import verdict_lines

        print(f"wrote {results['out_dir']}/mixture.json, results.md, results.json, "
              f"splits.npz and plots in {results['wall_seconds']:.0f} s")
        secs = results.get("timing", {}).get("run_seconds") or []
        print("\n".join(ln for ln in verdict_lines(results, sum(secs) / len(secs) if secs
                                                     else None) if ln))
    return 0
