"""``clusterclip report``: clusters, schedule mixture and the choice of R, as plots and markdown."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clusterclip.cli._options import add_overwrite_option, parsed, parsed_list
from clusterclip.cli._paths import add_path
from clusterclip.workdir import REPORT, SCHEDULE

HELP = "report on clusters and training mixtures (W/report/: summary.json, plots, report.md)"
#: The options that declare the numbers' ranges (the command line parses them).
_REPORT = "clusterclip.report.build:ReportOptions"
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"clips": "--choose-clip"}


def _strategies(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip() and s.strip() != "none"]


def _recorded_clip(root: Path, schedule) -> int | None:
    """The clip that ``clusterclip sample``/``run`` recorded for W/schedule.npy, if any."""
    from clusterclip.workdir import Workdir

    if schedule is None or Path(schedule).resolve() != (root / SCHEDULE).resolve():
        return None
    from clusterclip.sampling.spec import CLIP_STRATEGIES

    rec = Workdir(root, create=False).stage("sample") or {}
    params = rec.get("params") or {}
    clip = params.get("clip")
    if rec.get("status") == "done" and params.get("strategy") in CLIP_STRATEGIES \
            and isinstance(clip, int) and clip >= 1:
        return clip
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "--workdir", role="workdir", owns=(REPORT,), required=True,
             help="work directory (labels.npy, corpus/, ...)")
    add_path(p, "--schedule", role="input", default=None,
                   help="schedule .npy to analyse (default: W/schedule.npy if it exists); "
                        "its length sets the budget")
    p.add_argument("--no-schedule", action="store_true",
                   help="ignore W/schedule.npy; compare generated schedules only")
    p.add_argument("--label-field", default=None,
                   help="corpus field with reference labels: adds NMI, ARI and purity")
    p.add_argument("--strategies", type=_strategies, default=None,
                   help="schedules to generate at the same budget, comma-separated "
                        "(clusterclip, paced, random, uniform, temperature; 'none' for none; "
                        "default: clusterclip,paced,random)")
    p.add_argument("--num-samples", type=parsed(_REPORT, "num_samples"), default=None,
                   help="budget T when no schedule is given (default: min(3, R) epochs)")
    p.add_argument("--clip", type=parsed(_REPORT, "clip"), default=None,
                   help="ClusterClip's R for generated schedules, and the R by which a given "
                        "schedule's clusters leave the pool (default: the R that wrote "
                        "W/schedule.npy per the manifest, else 4)")
    p.add_argument("--alpha", type=parsed(_REPORT, "alpha"), default=0.0,
                   help="temperature: cluster weight n_k**alpha (default: 0, uniform)")
    p.add_argument("--seed", type=parsed(_REPORT, "seed"), default=0)
    p.add_argument("--windows", type=parsed(_REPORT, "windows"), default=50,
                   help="time windows for the per-window series in summary.json (default: 50)")
    p.add_argument("--tail-floor", type=parsed(_REPORT, "tail_floor"), default=0.5,
                   help="a schedule starves the tail when the smallest 25%% of clusters get "
                        "less than this times their corpus share of the last 20%% of training; "
                        "the recommended R is the smallest R that does not (default: 0.5)")
    p.add_argument("--choose-clip", type=parsed_list(_REPORT, "clips", ranges=True), default=None,
                   metavar="RANGE",
                   help="choose-R: values of R to tabulate, 'A-B' or 'A,B,C' (default: 1-16, "
                        "extended to 7 past the smallest R that fits the budget)")
    p.add_argument("--map-sample", type=parsed(_REPORT, "map_sample"), default=None, metavar="N",
                   help="documents on the map of index.html: a seeded sample of at most N "
                        "(default: 100,000; 0: no map); projected once (UMAP), kept in W/map/")
    p.add_argument("--workers", type=parsed(_REPORT, "workers"), default=None, metavar="N",
                   help="processes reading the corpus for the top terms and --label-field "
                        "side by side (the same report for any N; default: the CPUs this "
                        "process may use, 1 below 32,768 documents to read)")
    add_path(p, "--out", role="output_dir", default=None,
             default_from=lambda a: str(Path(a.workdir) / REPORT),
                   help="report directory (default: W/report); replaced only when new, empty "
                        "or an earlier report")
    add_overwrite_option(p)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from clusterclip.errors import InputError
    from clusterclip.stages import report
    from clusterclip.workdir import Workdir

    root = Path(args.workdir)
    schedule = args.schedule
    if schedule is None and not args.no_schedule and (root / SCHEDULE).exists():
        schedule = root / SCHEDULE
    # made first, so that a number out of its range is refused before anything is read;
    # the clip is then the one recorded for W/schedule.npy when none is given
    options = report.ReportOptions(
        schedule=schedule, label_field=args.label_field, strategies=args.strategies,
        num_samples=args.num_samples, alpha=args.alpha, seed=args.seed,
        **({} if args.clip is None else {"clip": args.clip}),
        windows=args.windows, tail_floor=args.tail_floor,
        clips=args.choose_clip, out=args.out, progress=sys.stderr.isatty() and not args.no_progress,
        overwrite=args.overwrite, workers=args.workers,
        **({} if args.map_sample is None
                                     else {"map_sample": args.map_sample}))
    if not root.is_dir():
        raise InputError(f"work directory {root} does not exist")
    if args.clip is None:
        options = replace(options, clip=_recorded_clip(root, schedule) or options.clip)
    summary = report.run(Workdir(root, create=False), options)
    out = Path(args.out) if args.out else root / REPORT
    print(f"report: {out / 'report.md'}")
    print(f"page:   {out / summary['page']}")
    print(f"budget T = {summary['num_samples']:,} samples over "
          f"{summary['eligible_documents']:,} documents in {summary['clusters']['clusters']} "
          f"clusters (the repetition counts below are at this budget, over the whole corpus; "
          f"`clusterclip experiment` counts over its training split at its token budget)")
    print(f"{'schedule':<14}{'max rep':>8}{'seen':>8}{'tail 25%':>10}{'head 25%':>10}")
    for name, s in summary["schedules"].items():
        print(f"{name:<14}{s['max_repetition']:>8}{s['coverage']:>8.1%}"
              f"{s['tail_quartile_share']:>10.1%}{s['head_quartile_share']:>10.1%}")
    print(f"corpus: tail 25% = {summary['corpus_tail_share']:.1%}, "
          f"head 25% = {summary['corpus_head_share']:.1%}")
    tokens = summary.get("corpus_token_shares")
    if tokens:
        from clusterclip.tokens import describe_source

        print(f"in tokens ({describe_source(summary['token_counts'])}): corpus tail 25% = "
              f"{tokens['tail_quartile_token_share']:.1%}; " + ", ".join(
                  f"{name} {s['tail_quartile_token_share']:.1%}"
                  for name, s in summary["schedules"].items()))
    print(f"late training: {summary['tail_starvation']['sentence']}")
    agreement = summary.get("label_agreement")
    if agreement:
        print(f"vs {agreement['field']}: NMI {agreement['nmi']:.3f}, ARI {agreement['ari']:.3f}, "
              f"purity {agreement['purity']:.3f}")
    choose = summary["choose_clip"]
    print(f"recommended R = {choose['recommended_clip']}: {choose['reason']}")
    return 0
