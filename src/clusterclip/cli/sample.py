"""clusterclip sample: labels.npy -> schedule.npy (document indices) and a summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from clusterclip.cli._options import (
    SCHEDULE_REQUEST,
    add_sampling_options,
    add_token_options,
    check_token_options,
    parsed,
    resolve_mixture,
)
from clusterclip.cli._paths import add_path

HELP = "draw a sampling schedule (int64 document indices) from cluster labels"

#: First key of a --summary-json file (keys are written sorted, and "_" sorts before
#: the summary's lowercase keys): an existing file is replaced only if it starts so.
SUMMARY_MARK = ("_written_by", "clusterclip sample")
SUMMARY_MAGIC = f'{{\n  "{SUMMARY_MARK[0]}": "{SUMMARY_MARK[1]}"'.encode()


def add_arguments(p: argparse.ArgumentParser) -> None:
    R = SCHEDULE_REQUEST  # the options that declare the numbers' ranges
    add_path(p, "--labels", role="input", required=True,
                   help="1-D integer .npy: cluster id per document, -1 = excluded")
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--num-samples", type=parsed(R, "num_samples"), default=None,
                        help="global schedule length T")
    length.add_argument("--num-tokens", type=parsed(R, "num_tokens"), default=None, metavar="B",
                        help="token budget: the schedule ends at the first position whose "
                             "cumulative tokens reach B")
    add_token_options(p)
    p.add_argument("--seed", type=parsed(R, "seed"), default=0)
    add_path(p, "--out", role="output_file", required=True,
             help="output .npy (int64 indices of this rank)")
    p.add_argument("--rank", type=parsed(R, "rank"), default=0)
    p.add_argument("--world-size", type=parsed(R, "world_size"), default=1,
                   help="rank r writes global positions r, r+W, ...; each rank floor(T/W)")
    p.add_argument("--consumed-samples", type=parsed(R, "consumed_samples"), default=0,
                   help="start at this global position (resume)")
    weights = p.add_mutually_exclusive_group()
    add_path(weights, "--cluster-weights", role="input", default=None,
             help="optional 1-D float .npy replacing n_k ** alpha as cluster weight (>= 0; "
                  "a cluster of weight 0 is never drawn)")
    add_sampling_options(p, mixture_into=weights, mixture_help=(
        "mixture.json (e.g. W/search/mixture.json of `clusterclip search`): its cluster "
        "weights, and its timing and clip unless --strategy / --clip are given"))
    add_path(p, "--tokens", role="input", default=None, metavar="T.npy",
                   help="1-D integer .npy: tokens per document, for --num-tokens / "
                        "--balance-by tokens when --labels is not a work directory's (a work "
                        "directory's labels use its corpus: the estimate or --tokenizer)")
    add_path(p, "--groups", role="input", default=None, metavar="G.npy",
                   help="near-duplicate groups (W/groups.npy of `clusterclip dedup`): each "
                        "group is one unit of the passes and of the clip (members used in "
                        "rotation)")
    add_path(p, "--summary-json", role="output_file", default=None,
                   help="also write the full summary (all clip events) as JSON here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _stage_lines(s: dict[str, Any]) -> list[str]:
    """A staged schedule's stages, one line each: positions, timing, clusters drawn and
    those whose repetitions the stage used up (it took what they had left)."""
    lines = []
    for st in s.get("stages") or ():
        up = st["clusters_used_up"]
        lines.append(f"stage:       {st['stage']}: positions {st['start']:,} to {st['stop']:,} "
                     f"({st['timing']}), {st['clusters_drawn']:,} of "
                     f"{st['clusters_weighted']:,} weighted clusters drawn"
                     + (f"; {len(up):,} took what the clip left them ("
                        + ", ".join(map(str, up[:8])) + (", ..." if len(up) > 8 else "")
                        + ")" if up else ""))
    return lines


def format_summary(s: dict[str, Any], out: str | None = None) -> str:
    """Human-readable lines of a sampler summary."""
    from clusterclip.sampling.spec import CLIP_STRATEGIES
    from clusterclip.tokens import token_summary_lines

    lines = [f"strategy:    {s['strategy']} (seed {s['seed']}"
             + (f", clip {s['clip']}" if s.get("clip") is not None else "")
             + (f", alpha {s['alpha']}" if s.get("alpha") is not None else "")
             + (", cluster weights" if s.get("cluster_weights") and not s.get("mixture")
                else "")
             + (f", mixture {s['mixture']['path']}" if s.get("mixture") else "") + ")",
             f"samples:     {s['num_samples']:,} global; rank {s['rank']} of "
             f"{s['world_size']}: {s['samples_per_rank']:,} from position "
             f"{s['start_position']:,}"
             + (f" ({s['unserved_positions']} trailing positions served to no rank)"
                if s["unserved_positions"] else "")
             + (f" -> {out}" if out else ""),
             f"documents:   {s['eligible_documents']:,} eligible, "
             f"{s['excluded_documents']:,} excluded ("
             + (f"-1, or in the {s['zero_weight_clusters']:,} clusters of weight 0"
                if s.get("zero_weight_clusters") else "-1")
             + f"), in {s['clusters']:,} clusters "
             f"(sizes {s['cluster_size_min']:,} .. {s['cluster_size_max']:,}, "
             f"median {s['cluster_size_median']:g})"]
    if s.get("clip_default"):
        lines.append(f"clip:        {s['clip']} by default: {s['clip_default']}")
    if s.get("capacity") is not None:
        units = (f"{s['eligible_groups']:,} near-duplicate groups"
                 if s.get("eligible_groups") is not None
                 else f"{s['eligible_documents']:,} eligible documents")
        lines.append(f"capacity:    {s['capacity']:,} = clip {s['clip']} x {units}")
    if s["strategy"] in CLIP_STRATEGIES:
        ev = s["clip_events"]
        if ev:
            shown = ", ".join(f"{k}@{p:,}" for k, p in ev[:8])
            more = f", ... ({len(ev) - 8} more)" if len(ev) > 8 else ""
            if s["strategy"] == "clusterclip":
                lines.append(f"clipped:     {len(ev):,} of {s['clusters']:,} clusters, first "
                             f"at position {ev[0][1]:,}, last at {ev[-1][1]:,} "
                             f"(cluster@position: {shown}{more})")
            else:  # paced: a capped cluster's draws are spread to the end of the schedule
                lines.append(f"clipped:     {len(ev):,} of {s['clusters']:,} clusters get "
                             f"their full clip x n_k draws, spread over the schedule; last "
                             f"draws from position {ev[0][1]:,} to {ev[-1][1]:,} "
                             f"(cluster@position: {shown}{more})")
        else:
            lines.append(f"clipped:     none of {s['clusters']:,} clusters")
    lines += _stage_lines(s)
    lines.append(f"repetition:  max {s['max_repetition']} per document, min "
                 f"{s['min_repetition']}; {s['documents_seen']:,} of "
                 f"{s['eligible_documents']:,} documents drawn at least once")
    if s.get("eligible_groups") is not None:
        lines.append(f"groups:      {s['eligible_groups']:,} near-duplicate groups "
                     f"({s['duplicate_groups']:,} of 2+ hold "
                     f"{s['documents_in_duplicate_groups']:,} documents); repetition above "
                     f"counts draws per group, max {s['max_document_repetition']} per "
                     f"document; {s['groups_seen']:,} groups drawn")
        lines.append(f"epochs:      {s['epochs_equivalent']:.4g} equivalent (T / groups)")
    else:
        lines.append(f"epochs:      {s['epochs_equivalent']:.4g} equivalent "
                     f"(T / eligible N)")
    lines += token_summary_lines(s)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import contextlib

    from clusterclip.storage.outputs import check_output_file
    from clusterclip.workdir import CORPUS, GROUPS, MANIFEST, Workdir

    request(args)  # the numbers' ranges, before anything is read
    with contextlib.ExitStack() as stack:
        labels = Path(args.labels).resolve()  # a link to W/labels.npy is W's labels too
        # the inputs, and the work directories they and the outputs lie in, are refused by
        # the command line's guard (clusterclip.cli._paths), here and in check_output_file
        for option in ("--out", "--summary-json"):
            path = getattr(args, option[2:].replace("-", "_"))
            if path is not None:
                if option == "--out":  # a .npy replaced only when its record says ours
                    check_output_file(path, option=option, magic=b"\x93NUMPY", owner="sample")
                else:
                    check_output_file(path, option=option, magic=SUMMARY_MAGIC)
        resolve_mixture(args)
        needs = check_token_options(args, args.tokens)
        w = None
        if (labels.parent / MANIFEST).is_file():
            # Labels of a work directory: used only when the stage that wrote them finished
            # and is current, and under its lock (no other command rewrites them meanwhile).
            w = Workdir(labels.parent, create=False)
            stack.enter_context(w.locked())
            in_w = (args.groups is not None
                    and Path(args.groups).resolve() == w.path(GROUPS).resolve())
            w.upstream([labels.name] + ([CORPUS] if needs else []) + ([GROUPS] if in_w else []))
            w.save()  # the refreshed input-hash cache
        tokens, source = None, None
        if needs:
            tokens, source = _token_counts(args, w)
        return _run(args, tokens, source)


def request(args: argparse.Namespace) -> Any:
    """The :class:`clusterclip.sampling.spec.ScheduleRequest` of the parsed options: made
    (so checked: InputError naming the parameter, shown as its option) before any work."""
    from clusterclip.sampling.spec import ScheduleRequest

    return ScheduleRequest(num_samples=args.num_samples, num_tokens=args.num_tokens,
                           clip=args.clip, alpha=args.alpha, seed=args.seed, rank=args.rank,
                           world_size=args.world_size, consumed_samples=args.consumed_samples)


def _token_counts(args: argparse.Namespace, w: Any) -> tuple[Any, dict[str, Any]]:
    from clusterclip.errors import InputError
    from clusterclip.labels import load_labels
    from clusterclip.stages.tokens import TokensOptions
    from clusterclip.stages.tokens import run as count_tokens
    from clusterclip.tokens import load_token_counts

    if args.tokens is not None:
        if w is not None:
            raise InputError(f"--tokens: the labels of work directory {w.root} count tokens "
                             f"from its corpus (the estimate, or --tokenizer PATH); --tokens "
                             f"is for labels outside a work directory")
        n = load_labels(args.labels).size
        return (load_token_counts(args.tokens, n),
                {"method": "file", "file": str(Path(args.tokens).resolve())})
    if w is None:
        raise InputError(f"--labels {args.labels} is not in a work directory, so its corpus is "
                         f"unknown: give --tokens T.npy (tokens per document) for "
                         f"--num-tokens / --balance-by tokens")
    return count_tokens(w, TokensOptions(tokenizer=args.tokenizer,
                                         progress=sys.stderr.isatty() and not args.no_progress))


def _run(args: argparse.Namespace, tokens: Any = None,
         source: dict[str, Any] | None = None) -> int:
    from clusterclip.labels import load_labels
    from clusterclip.sampling.schedule import draw_schedule
    from clusterclip.storage.arrays import load_npy
    from clusterclip.storage.atomic import remove_stale_temporaries, write_json
    from clusterclip.storage.records import owned_file

    labels = load_labels(args.labels)
    groups = None
    if args.groups is not None:
        groups = load_npy(args.groups, "groups", kinds="iu", ndim=1)
    weights = None
    if args.cluster_weights is not None:
        weights = load_npy(args.cluster_weights, "cluster weights", kinds="iuf", ndim=1)
    out = Path(args.out).resolve()
    remove_stale_temporaries(out.parent, out.name)  # what a killed earlier run left
    with owned_file(args.out, "sample"):  # recorded as ours: a rerun may replace it
        # the sample stage's own path: the mixture, the default clip, the summary
        summary = draw_schedule(
            labels, args.out, mixture=args.mixture, num_clusters=int(labels.max()) + 1,
            cluster_weights=weights, groups=groups, clip=args.clip,
            num_samples=args.num_samples, strategy=args.strategy, alpha=args.alpha,
            num_tokens=args.num_tokens, doc_tokens=tokens, balance_by=args.balance_by,
            token_source=source, seed=args.seed, rank=args.rank,
            world_size=args.world_size, consumed_samples=args.consumed_samples,
            progress=sys.stderr.isatty() and not args.no_progress)
    if args.summary_json:
        write_json(args.summary_json, {SUMMARY_MARK[0]: SUMMARY_MARK[1], **summary})
    print(format_summary(summary, args.out))
    return 0
