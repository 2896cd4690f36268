"""The ``export`` stage: this rank's share of a schedule with its documents as Parquet, a
Hugging Face dataset, MDS shards or a Megatron-LM indexed dataset
(:mod:`clusterclip.export`), or the report's map as one Parquet file for Embedding Atlas
(:mod:`clusterclip.export.atlas`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError
from clusterclip.limits import MAX_ROWS, MAX_THREADS, MAX_WORLD, check_ranges, ranged
from clusterclip.workdir import CORPUS, LABELS, MAP, MIXTURE_FILE, SCHEDULE, Workdir

#: The format that writes the report's map, not a schedule.
ATLAS = "atlas"


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """``out``: the output folder; ``format``: one of :data:`clusterclip.export.FORMATS` or
    :data:`ATLAS`; ``schedule``: a schedule ``.npy`` (None: ``W/schedule.npy``);
    ``rank``/``world_size``: the share exported; ``rows_per_shard``: rows per output file;
    ``overwrite``: replace a folder an earlier ``export`` did not write; ``tokenizer``
    (megatron only): a tokenizer or the folder of one; ``workers`` (megatron only): processes
    tokenizing side by side (None: the CPUs this process may use; the same bytes for any
    number). Checked on construction (InputError naming the parameter); the rank, the
    tokenizer and the libraries when run."""

    out: str | os.PathLike[str]
    format: str = "parquet"
    schedule: str | os.PathLike[str] | None = None
    rank: int = ranged(0, MAX_WORLD - 1, default=0)
    world_size: int = ranged(1, MAX_WORLD, default=1)
    rows_per_shard: int = ranged(1, MAX_ROWS, default=1_000_000)
    overwrite: bool = False
    tokenizer: Any = None
    workers: int | None = ranged(1, MAX_THREADS, default=None)

    def __post_init__(self) -> None:
        from clusterclip.export import check_format

        check_ranges(self)
        check_format(self.format, also=(ATLAS,))


def run(w: Workdir, options: ExportOptions) -> dict[str, Any]:
    """Export from ``w`` into ``options.out``; the summary (also ``out/_export.json``).

    Goes through :meth:`Workdir.run_stage`: refused when the labels, corpus or
    ``W/schedule.npy`` (``W/map/`` for the atlas) are missing, from a stage that did not
    finish, or stale (e.g. the schedule is older than the labels). Recorded as stage
    ``export``.
    """
    if options.format == ATLAS:
        return _run_atlas(w, options)
    from clusterclip.export import SUMMARY, WRITES, require
    from clusterclip.export.megatron import check_tokenizer_given, check_tokenizer_option
    from clusterclip.storage.outputs import check_output_dir, made_from

    o = options
    check_tokenizer_given(o.format, o.tokenizer)  # before the writer's libraries load
    tok_path = str(o.tokenizer) if isinstance(o.tokenizer, (str, os.PathLike)) else None
    sched = Path(o.schedule).resolve() if o.schedule is not None else None
    protected = w.protected()
    if sched is not None:
        protected += ((sched, "the schedule", False),)
    if tok_path is not None:
        protected += ((Path(tok_path), "the tokenizer", False),)
    writes = (SUMMARY, *WRITES[o.format])
    with made_from(w.root):
        check_output_dir(o.out, "export", overwrite=o.overwrite, protected=protected,
                         writes=writes)
    require(o.format)
    tokenizer = check_tokenizer_option(o.format, o.tokenizer)
    with w.locked(), made_from(w.root):
        check_output_dir(o.out, "export", overwrite=o.overwrite, protected=protected,
                         writes=writes)
        reads = [LABELS, CORPUS] + ([SCHEDULE] if sched is None else [])
        out = str(Path(o.out).resolve())
        key = {"out": out, "format": o.format, "rank": o.rank, "world_size": o.world_size,
               "rows_per_shard": o.rows_per_shard,
               **({"tokenizer": tok_path} if tok_path else {})}
        return w.run_stage("export", key=key, reads=reads,
                           inputs=[sched] if sched is not None else [], outputs=[out],
                           work=lambda run: _export(w, o, sched, tokenizer), cache=False)


def older_schedule_warning(workdir: str | os.PathLike[str]) -> str | None:
    """A warning line when ``W/schedule.npy`` (what ``export`` exports by default) is older
    than ``W/search/mixture.json``: the search's mixture came after it, so it was not
    sampled from it. Not a refusal: exporting the earlier schedule (a baseline) is a
    legitimate use, and a mixture sampled into another file leaves no trace in ``W``."""
    root = Path(workdir)
    sched, mix = root / SCHEDULE, root / MIXTURE_FILE
    try:
        if sched.stat().st_mtime_ns >= mix.stat().st_mtime_ns:
            return None
    except OSError:
        return None
    return (f"warning: exporting {sched}, older than {mix} (so not sampled from it); to "
            f"export the mixture's schedule: `clusterclip sample --labels "
            f"{root / LABELS} --mixture {mix} --num-samples T --out S.npy`, then "
            f"`clusterclip export --schedule S.npy ...`")


def _export(w: Workdir, o: ExportOptions, sched: Path | None, tokenizer: Any
            ) -> dict[str, Any]:
    from clusterclip.export import export_schedule
    from clusterclip.storage.arrays import load_npy

    corpus = w.corpus()
    corpus.verify_files()
    labels = w.labels(len(corpus))
    path = sched if sched is not None else w.path(SCHEDULE)
    s = load_npy(path, "schedule", kinds="iu", ndim=1, mmap=True)
    return export_schedule(corpus, labels, s, o.out, fmt=o.format, rank=o.rank,
                           world_size=o.world_size, rows_per_shard=o.rows_per_shard,
                           overwrite=o.overwrite, source=str(path), tokenizer=tokenizer,
                           schedule_file=path, workers=o.workers)


def _run_atlas(w: Workdir, o: ExportOptions) -> dict[str, Any]:
    """``format`` atlas: ``W/map/`` with its documents' clusters, terms and texts."""
    from clusterclip.export.atlas import WRITES, atlas_table, require_pyarrow, write_atlas
    from clusterclip.report.projection import load_map
    from clusterclip.storage.outputs import check_output_dir, made_from

    require_pyarrow()
    protected = w.protected()
    with made_from(w.root):
        check_output_dir(o.out, "export", overwrite=o.overwrite, protected=protected,
                         writes=WRITES)
    if not w.path(MAP, "coords.npy").is_file():
        raise InputError(f"{w.path(MAP)}: no map yet; run `clusterclip report --workdir "
                         f"{w.root}` first (its `--map-sample` sets the documents drawn)")

    def work(run: Any) -> dict[str, Any]:
        corpus = w.corpus()
        labels = w.labels(len(corpus))
        rows, coords = load_map(w.path(MAP))
        table = atlas_table(corpus, labels, rows, coords, source=str(w.path(MAP)))
        return write_atlas(table, o.out, overwrite=o.overwrite)

    with w.locked(), made_from(w.root):
        check_output_dir(o.out, "export", overwrite=o.overwrite, protected=protected,
                         writes=WRITES)
        out = str(Path(o.out).resolve())
        return w.run_stage("export", key={"out": out, "format": ATLAS},
                           reads=[MAP, LABELS, CORPUS], outputs=[out], work=work,
                           cache=False)
