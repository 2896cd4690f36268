"""The rows every export format writes: their columns, their Arrow schema and the
order-sensitive hash that checks an output re-read against what was written (used by
:mod:`clusterclip.export`, :mod:`clusterclip.export.mds` and, over its own columns,
:mod:`clusterclip.export.atlas`)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

COLUMNS = ("position", "doc_index", "label", "text", "fields")


def record_texts(corpus: Any, indices: np.ndarray) -> Any:
    """``(index, record, text)`` of each of the ascending distinct ``indices``, read through
    the corpus index (one pass per file); InputError for a document without text (the
    labels that scheduled it are not this corpus's)."""
    for i, rec in corpus.iter_records_at(indices):
        text = corpus.text_of(i, rec)
        if text is None:
            raise no_text(i)
        yield i, rec, text


def no_text(i: int) -> Any:
    """The InputError for document ``i`` scheduled but without text."""
    from clusterclip.errors import InputError

    return InputError(f"document {i} has no text; its label says it has one "
                      f"(labels do not belong to this corpus?)")


def _schema():
    import pyarrow as pa

    return pa.schema([("position", pa.int64()), ("doc_index", pa.int64()),
                      ("label", pa.int32()), ("text", pa.string()), ("fields", pa.string())])


class _RowsHash:
    """Order-sensitive hash of Arrow rows, the same however they are split into batches:
    one stream per column (integers as int64, floats as float64; strings as byte lengths
    + UTF-8 bytes), read from the Arrow buffers (no Python object per row). The columns
    are the schedule rows' (``COLUMNS``) unless given."""

    def __init__(self, ints: tuple[str, ...] = ("position", "doc_index", "label"),
                 strings: tuple[str, ...] = ("text", "fields"),
                 floats: tuple[str, ...] = ()) -> None:
        self.ints, self.strings, self.floats = ints, strings, floats
        names = [*ints, *floats, *(n for c in strings for n in (f"{c}_len", c))]
        self.parts = {name: hashlib.blake2b(digest_size=16) for name in names}

    def update(self, table: Any) -> None:
        """``table``: a pyarrow Table or RecordBatch with the hashed columns."""
        p = self.parts
        for c in self.ints:
            p[c].update(_int64(table.column(c)).tobytes())
        for c in self.floats:
            p[c].update(np.asarray(table.column(c).to_numpy(zero_copy_only=False),
                                   dtype="<f8").tobytes())
        for c in self.strings:
            col = table.column(c)
            for arr in getattr(col, "chunks", [col]):
                if arr.null_count:
                    raise RuntimeError(f"column {c} holds nulls")
                if len(arr) == 0:
                    continue
                wide = str(arr.type) == "large_string"
                _, offsets, data = arr.buffers()
                offs = np.frombuffer(offsets, dtype="<i8" if wide else "<i4")[
                    arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
                p[f"{c}_len"].update(np.diff(offs).tobytes())
                p[c].update(memoryview(data)[int(offs[0]):int(offs[-1])])

    def hexdigest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for part in self.parts.values():
            h.update(part.digest())
        return h.hexdigest()


def _int64(column: Any) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype="<i8")
