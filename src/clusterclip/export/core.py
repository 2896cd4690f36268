"""Export a schedule as a dataset in schedule order: Parquet shards, a Hugging Face dataset
or MosaicML Streaming (MDS) shards (:mod:`clusterclip.export.mds`); a Megatron-LM indexed
dataset: see :mod:`clusterclip.export.megatron`.

Each row is one position of the schedule (this rank's share with
``rank``/``world_size``: positions ``r, r+W, ...``, ``floor(T/W)`` of them, as
the sampler serves them) with the columns

- ``position`` (int64): the global position in the schedule file,
- ``doc_index`` (int64): the document (corpus order),
- ``label`` (int32): its cluster,
- ``text`` (string): its text,
- ``fields`` (string): the input record's other fields (all but the text
  field) as one JSON object, keys sorted (``json.loads`` gives them back);
  one column because JSON records need not share fields or types. An input
  field named ``label`` (or ``doc_index``, ``position``, ``score``) is kept as
  ``orig_label``, ...; Parquet's binary, timestamp and decimal values take the
  JSON form of :mod:`clusterclip.corpus.records` (base64, ISO 8601, strings),
  and ``_export.json`` lists those fields' types (``field_types``), with which
  :func:`clusterclip.corpus.records.decode_fields` reads them back.

``_export.json`` (the summary; its ``_`` makes folder readers such as
``pyarrow.dataset`` and ``pd.read_parquet(OUT)`` skip it, as Spark's ``_SUCCESS``).

Streamed: the schedule is read in blocks from a memory map, each block's
documents are fetched through the corpus index (one pass per input file per
block), and rows are written as they come, so memory holds one block. A gzip
input cannot seek: when the export has more than one block, each gzip JSON
Lines file is decompressed once into a scratch copy inside the temporary
output folder (deleted before the output is moved into place), instead of
being decompressed again for every block.
The output is built in a temporary folder, re-read (with the real reader,
``pyarrow.parquet`` / ``datasets.load_from_disk``; MDS with ours, the tests
read it with ``streaming.StreamingDataset`` too) and checked: every
position present once, in order, each with its document, label and text (an
order-sensitive hash of all rows written must equal the one re-read). Only
then is it moved into place.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.corpus.records import field_types, record_json, rename_reserved
from clusterclip.errors import InputError
from clusterclip.export import megatron as _megatron
from clusterclip.export.rows import COLUMNS, _int64, _RowsHash, _schema, record_texts
from clusterclip.sampling.spec import rank_share
from clusterclip.storage.digests import fingerprint
from clusterclip.storage.outputs import check_free_space

FORMATS = ("parquet", "hf", "mds", "megatron")
#: What each format may write in its folder (shell patterns; a file of the user's there is
#: refused before any work), besides SUMMARY.
WRITES = {"parquet": ("part-[0-9]*.parquet",),
          "hf": ("data-[0-9]*-of-[0-9]*.arrow", "state.json", "dataset_info.json"),
          "mds": ("shard.[0-9]*.mds", "index.json"),
          "megatron": ("text_document.bin", "text_document.idx", "documents.npy")}
#: Extra needed by each format (named in the error when its library is missing).
EXTRAS = {"parquet": ("pyarrow", "parquet"), "hf": ("datasets", "hf"),
          "mds": ("pyarrow", "mds"),
          "megatron": (_megatron.MODULE, "megatron")}
SUMMARY = "_export.json"
#: Parquet writer settings, pinned so that the same inputs give byte-identical files.
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3, "use_dictionary": False,
                   "write_statistics": True, "version": "2.6",
                   "data_page_version": "1.0"}


def _require(fmt: str) -> None:
    if fmt == "megatron":  # found without importing it (seconds), imported once needed
        _megatron.require()
        return
    module, extra = EXTRAS[fmt]
    try:
        __import__(module)
    except ImportError:
        raise InputError(f"format {fmt} needs {module}; install the `{extra}` extra "
                         f"(pip install 'clusterclip[{extra}]')", params=("format",)) from None


def check_format(fmt: str, also: tuple[str, ...] = ()) -> None:
    """InputError naming parameter ``format`` unless ``fmt`` is one of :data:`FORMATS`
    (or of ``also``)."""
    if fmt not in (*FORMATS, *also):
        raise InputError(f"format must be one of {', '.join((*FORMATS, *also))}, got {fmt!r}",
                         params=("format",))


def require(fmt: str) -> None:
    """InputError naming the extra when the library ``fmt`` writes with (and pyarrow, which
    every format reads back with) is missing."""
    _require(fmt)
    _require("parquet")


def check_schedule(schedule: np.ndarray, labels: np.ndarray, source: str,
                   block: int = 1 << 20) -> None:
    """InputError naming the first position whose document is out of range or excluded."""
    n = len(labels)
    for a in range(0, len(schedule), block):
        idx = np.asarray(schedule[a:a + block])
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            p = a + int(bad[0])
            raise InputError(f"{source}: position {p} holds document {int(schedule[p])}, "
                             f"outside the corpus of {n} documents")
        bad = np.flatnonzero(labels[idx] < 0)
        if bad.size:
            p = a + int(bad[0])
            raise InputError(f"{source}: position {p} holds document {int(schedule[p])}, "
                             f"which has no label (-1: excluded, no text)")


def iter_batches(corpus: Any, labels: np.ndarray, schedule: np.ndarray, rank: int = 0,
                 world_size: int = 1, block: int = 1 << 14, texts: bool = True
                 ) -> Iterator[dict[str, list[Any]]]:
    """Column batches (``COLUMNS``) of this rank's share of ``schedule``, in order
    (``texts=False``: only ``position``, ``doc_index`` and ``label``; the Megatron export
    reads the texts it has not tokenized yet itself).

    Each block of positions fetches its distinct documents once through the
    corpus index (ascending, one pass per file), so memory holds one block.
    """
    first, count = rank_share(len(schedule), rank, world_size)
    text_field = corpus.text_field
    for a in range(0, count, block):
        b = min(count, a + block)
        pos = np.arange(first + a * world_size, first + b * world_size, world_size,
                        dtype=np.int64)
        docs = np.asarray(schedule[pos], dtype=np.int64)
        batch = {"position": pos.tolist(), "doc_index": docs.tolist(),
                 "label": labels[docs].astype(np.int32).tolist()}
        if texts:
            got = {i: (text, record_json(rename_reserved(
                {k: v for k, v in rec.items() if k != text_field}), sort_keys=True))
                for i, rec, text in record_texts(corpus, np.unique(docs))}
            rows = [got[d] for d in docs.tolist()]
            batch.update(text=[r[0] for r in rows], fields=[r[1] for r in rows])
        yield batch


def _write_parquet(batches: Iterator[dict[str, list[Any]]], directory: Path,
                   rows_per_shard: int, row_group: int) -> tuple[list[str], int, str]:
    """Write shards ``part-00000.parquet``, ...; return (file names, rows, hash)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _schema()
    h = _RowsHash()
    names: list[str] = []
    writer = None
    in_shard = rows = 0

    def flush(part: dict[str, list[Any]]) -> None:
        nonlocal writer, in_shard
        n = len(part["position"])
        if writer is None:
            names.append(f"part-{len(names):05d}.parquet")
            writer = pq.ParquetWriter(directory / names[-1], schema, **PARQUET_OPTIONS)
        table = pa.Table.from_pydict(part, schema=schema)
        h.update(table)
        writer.write_table(table, row_group_size=row_group)
        in_shard += n
        if in_shard == rows_per_shard:
            writer.close()
            writer, in_shard = None, 0

    try:
        for batch in batches:
            n = len(batch["position"])
            rows += n
            i = 0
            while i < n:
                take = min(n - i, rows_per_shard - in_shard)
                flush({c: v[i:i + take] for c, v in batch.items()})
                i += take
    finally:
        if writer is not None:
            writer.close()
    return names, rows, h.hexdigest()


def _check_rows(batches: Iterator[Any], schedule: np.ndarray,
                labels: np.ndarray, rank: int, world_size: int, where: Path) -> tuple[int, str]:
    """Check re-read Arrow batches against the schedule; return (rows, hash of the rows)."""
    first, count = rank_share(len(schedule), rank, world_size)
    h = _RowsHash()
    seen = 0
    for batch in batches:
        n = batch.num_rows
        if seen + n > count:
            raise RuntimeError(f"{where}: more rows than the {count} positions exported")
        want = np.arange(first + seen * world_size, first + (seen + n) * world_size,
                         world_size, dtype=np.int64)
        pos = _int64(batch.column("position"))
        docs = _int64(batch.column("doc_index"))
        if not np.array_equal(pos, want):
            raise RuntimeError(f"{where}: rows {seen}..{seen + n - 1} are not positions "
                               f"{int(want[0])}, ... in order")
        if not np.array_equal(docs, schedule[want]) or not np.array_equal(
                _int64(batch.column("label")), labels[docs]):
            raise RuntimeError(f"{where}: rows {seen}..{seen + n - 1} do not hold the "
                               f"schedule's documents and labels")
        h.update(batch)
        seen += n
    if seen != count:
        raise RuntimeError(f"{where}: {seen} rows re-read, {count} exported")
    return seen, h.hexdigest()


def read_parquet_batches(directory: str | os.PathLike[str], names: list[str] | None = None,
                         batch_size: int = 1 << 13) -> Iterator[Any]:
    """Arrow record batches of exported Parquet shards, in order (``part-*.parquet`` sorted)."""
    import pyarrow.parquet as pq

    d = Path(directory)
    files = [d / n for n in names] if names is not None else sorted(d.glob("part-*.parquet"))
    for f in files:
        # without pre-buffering (and threads) the reader's memory stays at one batch; with
        # it, pyarrow 26 held ~2/3 of a 300 MB file by the end of iter_batches
        pf = pq.ParquetFile(f, pre_buffer=False)
        yield from pf.iter_batches(batch_size=batch_size, columns=list(COLUMNS),
                                   use_threads=False)


def export_workers(workers: int | None) -> int | None:
    """``workers`` checked: None (the default: the CPUs this process may use, one for a
    small export; :func:`clusterclip.export.megatron.write_verified`) or at least 1
    (InputError otherwise)."""
    if workers is not None:
        from clusterclip.pool import check_workers

        check_workers(None, workers)
    return workers


def export_schedule(corpus: Any, labels: np.ndarray, schedule: np.ndarray,
                    out: str | os.PathLike[str], *, fmt: str = "parquet", rank: int = 0,
                    world_size: int = 1, rows_per_shard: int = 1_000_000,
                    row_group: int = 1 << 14, block: int = 1 << 14, overwrite: bool = False,
                    source: str = "schedule", tokenizer: Any = None,
                    schedule_file: str | os.PathLike[str] | None = None,
                    workers: int | None = None,
                    doc_tokens: np.ndarray | None = None,
                    token_method: str = "") -> dict[str, Any]:
    """Write this rank's share of ``schedule`` as ``fmt`` into the folder ``out``
    (``doc_tokens``, ``token_method``: the size under ``tokens``, see :func:`_counting`).

    ``labels``: int[N] of the corpus; ``schedule``: int[T] document indices
    (a memory map is read in blocks). Refuses (InputError, before any work) an
    unknown format, a missing library, bad rank or sizes, an ``out`` that is
    not ours (see :func:`clusterclip.storage.outputs.check_output_dir`) and a schedule
    position outside the corpus or on an excluded document. Returns the summary
    also written to ``out/_export.json`` (with ``schedule_file``, the file ``schedule``
    was read from: its path and SHA-256 under ``"schedule"``); RuntimeError if the
    re-read output does not match (nothing is moved into place). ``workers`` (megatron):
    processes that tokenize side by side, the same bytes for any number (None: the CPUs
    this process may use, one for a small export).
    """
    from clusterclip.storage.atomic import write_json
    from clusterclip.storage.digests import sha256_file
    from clusterclip.storage.outputs import atomic_output_dir, check_output_dir

    check_format(fmt)
    require(fmt)
    tokenizer = _megatron.check_tokenizer_option(fmt, tokenizer)
    for name, v in (("rows_per_shard", rows_per_shard), ("row_group", row_group),
                    ("block", block)):
        if v < 1:
            raise InputError(f"{name} must be >= 1, got {v}", params=(name,))
    n_workers = export_workers(workers)
    first, count = rank_share(len(schedule), rank, world_size)
    if len(labels) != len(corpus):
        raise InputError(f"labels hold {len(labels)} documents, the corpus {len(corpus)}")
    check_schedule(schedule, labels, source)
    origin = {} if schedule_file is None else {"schedule": {
        "path": str(Path(schedule_file).resolve()), "sha256": sha256_file(schedule_file)}}
    out = check_output_dir(out, "export", overwrite=overwrite)
    blocks = -(-count // block)
    # worker processes read a gzip input once per job: a scratch copy, as for many blocks
    pooled = fmt == "megatron" and _megatron.pool_workers(n_workers, count) > 1
    check_free_space(out, space_needed(corpus, schedule, fmt, rank, world_size,
                                       max(blocks, 2) if pooled else blocks))
    with atomic_output_dir(out, "export", overwrite=overwrite) as tmp, \
            _seekable(corpus, tmp / ".plain", blocks=blocks, pooled=pooled) as source_corpus:
        batches = iter_batches(source_corpus, labels, schedule, rank, world_size, block,
                               texts=fmt != "megatron")
        if fmt == "megatron":
            summary = {"format": fmt, "rows": count, "schedule_length": int(len(schedule)),
                       "rank": rank, "world_size": world_size, "first_position": first,
                       "position_step": world_size, "text_field": corpus.text_field,
                       **_megatron.write_verified(batches, tmp, tokenizer, schedule, labels,
                                                  first, world_size, count,
                                                  workers=n_workers, corpus=source_corpus),
                       **origin}
            write_json(tmp / SUMMARY, summary)
            return summary
        batches, size = _counting(batches, doc_tokens, token_method)
        names, rows, digest, back = _write_rows(fmt, batches, tmp, rows_per_shard,
                                                min(row_group, rows_per_shard))
        seen, digest_back = _check_rows(back, schedule, labels, rank, world_size, tmp)
        if rows != count or seen != count or digest_back != digest:
            raise RuntimeError(f"export under {tmp} does not read back as written; nothing "
                               f"was moved to {out}")
        summary = {"format": fmt, "rows": count, "schedule_length": int(len(schedule)),
                   "rank": rank, "world_size": world_size, "first_position": first,
                   "position_step": world_size, "files": names, "columns": list(COLUMNS),
                   "text_field": corpus.text_field,
                   "field_types": rename_reserved(field_types(corpus.files,
                                                              skip=[corpus.text_field])),
                   "tokens": dict(size),
                   "verified": {"every_position_once_in_order": True, "rows_hash": digest},
                   **origin}
        write_json(tmp / SUMMARY, summary)
    return summary


def _write_rows(fmt: str, batches: Iterator[dict[str, list[Any]]], tmp: Path,
                rows_per_shard: int, row_group: int
                ) -> tuple[list[str], int, str, Iterator[dict[str, list[Any]]]]:
    """A row format's files into ``tmp``: ``(names, rows, rows hash, the files read back
    with the format's own reader)``."""
    if fmt == "parquet":
        names, rows, digest = _write_parquet(batches, tmp, rows_per_shard, row_group)
        return names, rows, digest, read_parquet_batches(tmp, names)
    if fmt == "mds":
        from clusterclip.export.mds import read_mds_batches, write_mds

        names, rows, digest = write_mds(batches, tmp, rows_per_shard)
        return names, rows, digest, read_mds_batches(tmp)
    names, rows, digest = _write_hf(batches, tmp, rows_per_shard, row_group)
    return names, rows, digest, read_hf_batches(tmp)


def _counting(batches: Iterator[dict[str, list[Any]]], doc_tokens: np.ndarray | None,
              method: str) -> tuple[Iterator[dict[str, list[Any]]], dict[str, Any]]:
    """``batches`` passed through, and the dict their size is summed into as they pass:
    ``{"total", "unit", "method"}``, what a row format's (parquet, hf, mds) summary gives
    under ``tokens`` so a trainer's ``--train-iters`` can be sized from it: with
    ``doc_tokens`` (int[N] tokens per document, counted by ``method``) their tokens, else
    the UTF-8 bytes of their texts (what a byte-level trainer reads)."""
    size: dict[str, Any] = {"total": 0, "unit": "tokens" if doc_tokens is not None else
                            "utf-8 bytes",
                            "method": method if doc_tokens is not None else
                            "the UTF-8 bytes of the texts (no tokenizer given)"}

    def gen() -> Iterator[dict[str, list[Any]]]:
        for b in batches:
            if doc_tokens is not None:
                size["total"] += int(np.asarray(doc_tokens)[np.asarray(b["doc_index"])].sum())
            else:
                size["total"] += sum(len(t.encode("utf-8", errors="surrogatepass"))
                                     for t in b["text"])
            yield b
    return gen(), size


def space_needed(corpus: Any, schedule: np.ndarray, fmt: str, rank: int, world_size: int,
                 blocks: int, block: int = 1 << 20) -> int:
    """A lower bound of the bytes an export writes, where its size is known before writing:
    the texts' characters (each at least a byte) of this rank's positions for the formats
    that store them uncompressed (``mds``, ``hf``); for ``megatron`` its sidecar and an EOD
    token per position; plus, with more than one block, the decompressed lines of the gzip
    inputs (their scratch copies). Parquet compresses (zstd): its size is not known."""
    first, count = rank_share(len(schedule), rank, world_size)
    need = 0
    if fmt in ("mds", "hf"):
        lengths = np.asarray(corpus.text_lengths, dtype=np.int64)
        for a in range(0, count, block):
            pos = np.arange(first + a * world_size, first + min(count, a + block) * world_size,
                            world_size)
            need += int(lengths[np.asarray(schedule[pos], dtype=np.int64)].sum())
    elif fmt == "megatron":
        need += count * (3 * 8 + 2)  # documents.npy rows + at least one 2-byte token
    gz = [i for i, f in enumerate(corpus.files) if f["kind"] == "jsonl.gz"]
    if blocks > 1 and gz:
        need += int(np.asarray(corpus.nbytes)[np.isin(corpus.file_id, gz)].sum())
    return need


@contextlib.contextmanager
def _seekable(corpus: Any, scratch: Path, blocks: int, pooled: bool = False
              ) -> Iterator[Any]:
    """``corpus``, with each gzip JSON Lines file decompressed once into ``scratch`` when the
    export reads more than one block or its texts are read by worker processes (``pooled``:
    a job each; a gzip file cannot seek: every read would decompress it again from its
    start); ``scratch`` is removed on the way out."""
    gz = [i for i, f in enumerate(corpus.files) if f["kind"] == "jsonl.gz"]
    if (blocks <= 1 and not pooled) or not gz:
        yield corpus
        return
    from tqdm import tqdm

    scratch.mkdir()
    try:
        files = [dict(f) for f in corpus.files]
        for i in gz:
            src = Path(files[i]["path"])
            dst = scratch / f"{i:05d}.jsonl"
            why = f"{blocks} blocks" + (", read by worker processes" if pooled else "")
            print(f"export: decompressing {src} once for random access ({why})",
                  file=sys.stderr, flush=True)
            try:
                with gzip.open(src, "rb") as fin, open(dst, "wb") as fout, \
                        tqdm(desc="decompress", unit="B", unit_scale=True, leave=False,
                             disable=not sys.stderr.isatty()) as bar:
                    while chunk := fin.read(1 << 22):
                        fout.write(chunk)
                        bar.update(len(chunk))
            except (OSError, EOFError) as e:
                raise InputError(f"{src}: cannot read ({e})") from None
            files[i].update(path=str(dst), kind="jsonl")
        plain = copy.copy(corpus)  # same index arrays; only where the lines are read from
        plain.files = files
        yield plain
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_hf(batches: Iterator[dict[str, list[Any]]], directory: Path, rows_per_shard: int,
              row_group: int) -> tuple[list[str], int, str]:
    """Parquet shards in a scratch folder -> ``datasets`` -> ``save_to_disk(directory)``."""
    import datasets

    scratch = directory / ".parquet"
    scratch.mkdir()
    names, rows, digest = _write_parquet(batches, scratch, rows_per_shard, row_group)
    try:
        datasets.disable_progress_bars()
        if names:
            ds = datasets.Dataset.from_parquet([str(scratch / n) for n in names],
                                               cache_dir=str(directory / ".cache"),
                                               keep_in_memory=False)
        else:
            ds = datasets.Dataset.from_dict({c: [] for c in COLUMNS},
                                            features=datasets.Features.from_arrow_schema(
                                                _schema()))
        ds.save_to_disk(str(directory), max_shard_size=None,
                        num_shards=max(1, -(-rows // rows_per_shard)))
        del ds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(directory / ".cache", ignore_errors=True)
    state = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    # datasets fingerprints the dataset by its (temporary) cache path: fingerprint what it
    # holds instead, so that the same export is the same bytes
    state["_fingerprint"] = fingerprint({"rows_hash": digest, "columns": list(COLUMNS),
                                         "files": state["_data_files"]})
    (directory / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True),
                                          encoding="utf-8")
    return [f["filename"] for f in state["_data_files"]], rows, digest


def read_hf_batches(directory: str | os.PathLike[str], batch_size: int = 1 << 13
                    ) -> Iterator[Any]:
    """Arrow tables of an exported Hugging Face dataset, read with ``load_from_disk``."""
    import datasets

    ds = datasets.load_from_disk(str(directory)).with_format("arrow")
    for i in range(0, len(ds), batch_size):
        yield ds[i:i + batch_size]
