"""clusterclip export: a schedule + the corpus -> Parquet shards, a Hugging Face dataset,
MosaicML Streaming (MDS) shards or a Megatron-LM indexed dataset; or the report's map ->
one Parquet file for Embedding Atlas (``--format atlas``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clusterclip.cli._options import add_overwrite_option, parsed
from clusterclip.cli._paths import add_path
from clusterclip.workdir import SCHEDULE

HELP = ("write the schedule's documents in schedule order as Parquet shards, a Hugging Face "
        "dataset, MDS shards or a Megatron-LM indexed dataset (one rank's share with "
        "--rank/--world-size), or the report's map for Embedding Atlas; verified after "
        "writing")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clusterclip.export import FORMATS
    from clusterclip.stages.export import ATLAS

    add_path(p, "--workdir", role="workdir", required=True,
             help="work directory of embed + cluster")
    p.add_argument("--format", required=True, choices=(*FORMATS, ATLAS),
                   help="parquet: part-NNNNN.parquet shards (pyarrow); hf: a Hugging Face "
                        "dataset for datasets.load_from_disk (the `hf` extra); mds: "
                        "shard.NNNNN.mds + index.json for streaming.StreamingDataset (the `mds` "
                        "extra; written without mosaicml-streaming); megatron: "
                        "OUT/text_document.bin/.idx for Megatron-LM's --data-path, one "
                        "document per position, tokenized with --tokenizer (the `megatron` "
                        "extra); atlas: OUT/atlas.parquet, the documents of the report's map "
                        "(run `clusterclip report` first) with x, y, cluster, its top terms "
                        "and the text, for `embedding-atlas OUT/atlas.parquet --x x --y y "
                        "--text text`")
    add_path(p, "--out", role="output_dir", required=True,
                   help="output directory: created, or replaced atomically when empty or "
                        "written by an earlier `clusterclip export`")
    add_path(p, "--schedule", role="input", default=None,
             default_from=lambda a: str(Path(a.workdir) / SCHEDULE),
                   help="int64 .npy of document indices (default: WORKDIR/schedule.npy)")
    E = "clusterclip.stages.export:ExportOptions"  # the options that declare the ranges
    p.add_argument("--rank", type=parsed(E, "rank"), default=0,
                   help="export positions RANK, RANK+W, ... (floor(T/W) of them), as the "
                        "sampler serves rank RANK of W")
    p.add_argument("--world-size", type=parsed(E, "world_size"), default=1,
                   help="W (default: 1, everything)")
    p.add_argument("--rows-per-shard", type=parsed(E, "rows_per_shard"), default=None,
                   help="rows per output file (default: 1000000; mds shards also close "
                        "before 64 MiB, as streaming.MDSWriter's; not for megatron, which "
                        "writes one .bin/.idx pair)")
    add_path(p, "--tokenizer", role="input", default=None, metavar="PATH",
                   help="--format megatron only (required there): a folder holding a Hugging "
                        "Face tokenizer, loaded offline; each document becomes its token ids "
                        "(no special tokens) + the tokenizer's eos (else sep) token")
    p.add_argument("--workers", type=parsed(E, "workers"), default=None, metavar="N",
                   help="--format megatron: processes tokenizing side by side (the same "
                        "bytes for any N; default: the CPUs this process may use)")
    add_overwrite_option(p)


def run(args: argparse.Namespace) -> int:
    from clusterclip.errors import InputError
    from clusterclip.stages import export
    from clusterclip.workdir import Workdir

    if args.format == export.ATLAS:
        return _run_atlas(args)
    rows = {} if args.rows_per_shard is None else {"rows_per_shard": args.rows_per_shard}
    options = export.ExportOptions(out=args.out, format=args.format, schedule=args.schedule,
                                   rank=args.rank, world_size=args.world_size,
                                   overwrite=args.overwrite, tokenizer=args.tokenizer,
                                   workers=args.workers, **rows)  # their ranges, first
    stale = export.older_schedule_warning(args.workdir) if args.schedule is None else None
    if stale:
        print(stale, file=sys.stderr)
    if args.format == "megatron" and args.rows_per_shard is not None:
        raise InputError("--rows-per-shard does not apply to --format megatron "
                         "(it writes one .bin/.idx pair)")
    if args.format != "megatron" and args.workers is not None:
        raise InputError(f"--workers applies to --format megatron only (it tokenizes), not "
                         f"--format {args.format}")
    s = export.run(Workdir(args.workdir, create=False), options)
    share = (f"rank {s['rank']} of {s['world_size']}: positions {s['first_position']}, "
             f"{s['first_position'] + s['world_size']}, ... of "
             if s["world_size"] > 1 else "all of ")
    print(f"exported {s['rows']:,} rows ({share}a schedule of {s['schedule_length']:,}) "
          f"as {s['format']} in {len(s['files'])} files; verified every position once, "
          f"in order")
    if "schedule" in s:  # the file exported (an export recorded by an older version: none)
        print(f"schedule: {s['schedule']['path']} (sha256 {s['schedule']['sha256']})")
    print(f"output: {args.out}")
    if s["format"] == "megatron":
        print(f"{s['tokens']:,} tokens; Megatron-LM: --data-path "
              f"{args.out.rstrip('/')}/{s['data_prefix']}")
    return 0


def _run_atlas(args: argparse.Namespace) -> int:
    """``--format atlas``: the map, not a schedule; the schedule's options are refused."""
    from clusterclip.errors import InputError
    from clusterclip.export.atlas import FILE
    from clusterclip.stages import export
    from clusterclip.workdir import Workdir

    given = [o for o, v, default in (
        ("--schedule", args.schedule, None),
        ("--rank", args.rank, 0), ("--world-size", args.world_size, 1),
        ("--rows-per-shard", args.rows_per_shard, None),
        ("--tokenizer", args.tokenizer, None), ("--workers", args.workers, None))
        if v != default]
    if given:
        raise InputError(f"{', '.join(given)} does not apply to --format atlas (it writes the "
                         "documents of the report's map, not a schedule)")
    s = export.run(Workdir(args.workdir, create=False),
                   export.ExportOptions(out=args.out, format=export.ATLAS,
                                        overwrite=args.overwrite))
    print(f"exported the map's {s['rows']:,} documents (x, y, cluster, terms, text) as "
          f"{FILE}; verified every row")
    print(f"output: {args.out}")
    print(f"open it: embedding-atlas {Path(args.out) / FILE} --x x --y y --text text")
    return 0
