"""MosaicML Streaming (MDS) shards of the export's rows: our writer and reader of the format.

No dependency on ``mosaicml-streaming`` (whose pins would downgrade numpy and
transformers next to ours): the format is small and is written here, and the
tests read it back with the real ``streaming.StreamingDataset`` in a separate
virtual environment (``make test`` builds it) and compare our files byte for
byte with what ``streaming.MDSWriter`` writes for the same rows.

The format (version 2, uncompressed, no hashes), as ``streaming`` reads it:

- ``index.json``: ``{"shards": [...], "version": 2}`` (keys sorted), one entry
  per shard, in order: the shard's writer settings (below) plus ``samples``
  (its row count), ``raw_data`` (``basename``, ``bytes``: the file's size,
  ``hashes``: ``{}``) and ``zip_data``: ``null``;
- ``shard.NNNNN.mds``: ``uint32`` row count ``n``, ``n+1`` ``uint32``
  offsets (from the file's start: row ``i`` is bytes ``[off[i], off[i+1])``),
  the writer settings as JSON (keys sorted: ``column_encodings``,
  ``column_names``, ``column_sizes``, ``compression``, ``format``, ``hashes``,
  ``size_limit``, ``version``), then the rows;
- a row: the columns in name order (``doc_index``, ``fields``, ``label``,
  ``position``, ``text``); first a ``uint32`` byte length for each column of
  variable size (``fields``, ``text``), then each column's bytes: ``int64`` /
  ``int32`` little-endian, ``str`` as UTF-8.

Shards close as ``streaming.MDSWriter`` closes them (before a row that would
take the file past ``size_limit`` bytes), and also after ``rows_per_shard``
rows. Integers are written little-endian; streaming reads them in the machine's byte order,
which is little-endian on x86-64 and ARM64.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

INDEX = "index.json"
#: ``streaming.MDSWriter``'s default shard size limit (64 MiB).
SIZE_LIMIT = 1 << 26
#: column -> MDS encoding; the file holds them in name order.
ENCODINGS = {"doc_index": "int64", "fields": "str", "label": "int32", "position": "int64",
             "text": "str"}
_SIZES = {"int64": 8, "int32": 4, "str": None}
_HEAD = struct.Struct("<IIq")   # len(fields), len(text), doc_index
_MID = struct.Struct("<iq")     # label, position
_MAX_SHARD = (1 << 32) - 1      # offsets are uint32


def shard_config(size_limit: int) -> dict[str, Any]:
    """The writer settings stored in each shard and in its ``index.json`` entry."""
    names = sorted(ENCODINGS)
    return {"column_encodings": [ENCODINGS[c] for c in names], "column_names": names,
            "column_sizes": [_SIZES[ENCODINGS[c]] for c in names], "compression": None,
            "format": "mds", "hashes": [], "size_limit": size_limit, "version": 2}


def shard_name(i: int) -> str:
    return f"shard.{i:05d}.mds"


def write_mds(batches: Iterator[dict[str, list[Any]]], directory: Path, rows_per_shard: int,
              size_limit: int = SIZE_LIMIT) -> tuple[list[str], int, str]:
    """Write ``shard.NNNNN.mds`` files and ``index.json``; return (file names, rows, hash).

    ``batches``: column batches as from :func:`clusterclip.export.iter_batches`;
    the hash is :class:`clusterclip.export.rows._RowsHash` of the rows written.
    Memory holds one shard's rows (at most ``size_limit`` bytes, or one row).
    """
    import pyarrow as pa

    from clusterclip.export.rows import _RowsHash, _schema

    config = json.dumps(shard_config(size_limit), sort_keys=True).encode("utf-8")
    empty = 4 + 4 + len(config)  # row count, first offset, settings: a shard's bytes before rows
    schema = _schema()
    h = _RowsHash()
    shards: list[dict[str, Any]] = []
    rows: list[bytes] = []
    size = empty

    def flush() -> None:
        nonlocal rows, size
        name = shard_name(len(shards))
        if size > _MAX_SHARD:
            raise RuntimeError(f"{name}: one row of {size - empty - 4:,} bytes is more than an "
                               f"MDS shard can hold (4 GiB)")
        sizes = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        offsets = np.empty(len(rows) + 1, dtype=np.int64)
        offsets[0] = 4 + 4 * (len(rows) + 1) + len(config)
        np.cumsum(sizes, out=offsets[1:])
        offsets[1:] += offsets[0]
        with open(directory / name, "wb") as f:
            f.write(struct.pack("<I", len(rows)))
            f.write(offsets.astype("<u4").tobytes())
            f.write(config)
            f.writelines(rows)
        shards.append({**shard_config(size_limit), "samples": len(rows), "zip_data": None,
                       "raw_data": {"basename": name, "bytes": size, "hashes": {}}})
        rows, size = [], empty

    total = 0
    for batch in batches:
        h.update(pa.Table.from_pydict(batch, schema=schema))
        for pos, doc, label, text, fields in zip(batch["position"], batch["doc_index"],
                                                 batch["label"], batch["text"],
                                                 batch["fields"], strict=True):
            t = text.encode("utf-8")
            f = fields.encode("utf-8")
            row = b"".join((_HEAD.pack(len(f), len(t), doc), f, _MID.pack(label, pos), t))
            if rows and size_limit < size + len(row) + 4:
                flush()
            rows.append(row)
            size += len(row) + 4
            total += 1
            if len(rows) == rows_per_shard:
                flush()
    if rows:
        flush()
    index = json.dumps({"shards": shards, "version": 2}, sort_keys=True).encode("utf-8")
    (directory / INDEX).write_bytes(index)
    return [s["raw_data"]["basename"] for s in shards], total, h.hexdigest()


def read_mds_batches(directory: str | Path, batch_size: int = 1 << 13) -> Iterator[Any]:
    """Arrow record batches (``COLUMNS``) of an MDS export, in order, read from its files.

    Checks what the format promises (settings, row counts, file sizes, each
    row's lengths adding up to its span); RuntimeError naming the file if not.
    Memory holds one shard file.
    """
    import pyarrow as pa

    from clusterclip.export.rows import COLUMNS

    d = Path(directory)
    index = json.loads((d / INDEX).read_text(encoding="utf-8"))
    if index.get("version") != 2:
        raise RuntimeError(f"{d / INDEX}: not an MDS index of version 2")
    for entry in index["shards"]:
        name = entry["raw_data"]["basename"]
        data = (d / name).read_bytes()
        want = shard_config(entry.get("size_limit"))
        config = json.dumps(want, sort_keys=True).encode("utf-8")
        n = entry["samples"]
        if ({k: entry.get(k) for k in want} != want or entry.get("zip_data") is not None
                or len(data) != entry["raw_data"]["bytes"] or len(data) < 4
                or struct.unpack_from("<I", data)[0] != n):
            raise RuntimeError(f"{d / name}: does not match its entry in {INDEX}")
        head = 4 + 4 * (n + 1)
        offsets = np.frombuffer(data, dtype="<u4", count=n + 1, offset=4).astype(np.int64)
        if (data[head:head + len(config)] != config or offsets[0] != head + len(config)
                or offsets[-1] != len(data) or np.any(np.diff(offsets) < _HEAD.size + _MID.size)):
            raise RuntimeError(f"{d / name}: not an MDS shard of the export's columns")
        view = memoryview(data)
        for a in range(0, n, batch_size):
            b = min(n, a + batch_size)
            cols: dict[str, list[Any]] = {c: [] for c in ("position", "doc_index", "label")}
            texts: list[bytes] = []
            fields: list[bytes] = []
            for i in range(a, b):
                start, stop = int(offsets[i]), int(offsets[i + 1])
                fl, tl, doc = _HEAD.unpack_from(data, start)
                f0 = start + _HEAD.size
                label, pos = _MID.unpack_from(data, f0 + fl)
                t0 = f0 + fl + _MID.size
                if t0 + tl != stop:
                    raise RuntimeError(f"{d / name}: row {i}'s column lengths do not add up "
                                       f"to its {stop - start} bytes")
                cols["position"].append(pos)
                cols["doc_index"].append(doc)
                cols["label"].append(label)
                fields.append(view[f0:f0 + fl])
                texts.append(view[t0:stop])
            try:
                strings = [_strings(texts), _strings(fields)]
            except pa.ArrowInvalid as e:
                raise RuntimeError(f"{d / name}: rows {a}..{b - 1}: {e}") from None
            arrays = [pa.array(cols["position"], pa.int64()),
                      pa.array(cols["doc_index"], pa.int64()),
                      pa.array(cols["label"], pa.int32()), *strings]
            yield pa.RecordBatch.from_arrays(arrays, names=list(COLUMNS))


def _strings(parts: list[Any]) -> Any:
    """A pyarrow large_string array of UTF-8 byte strings (validated)."""
    import pyarrow as pa

    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    arr = pa.LargeStringArray.from_buffers(len(parts), pa.py_buffer(offsets.tobytes()),
                                           pa.py_buffer(b"".join(parts)))
    arr.validate(full=True)
    return arr
