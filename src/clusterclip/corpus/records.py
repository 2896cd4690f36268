"""Input records as the commands write them back (``export``'s ``fields``, ``group``,
``dedup --keep-one``): one rule for the field names clusterclip adds, one JSON form for the
values JSON has no type for.

Names: the cluster id is ``label`` everywhere (the authors' layout), beside ``score``,
``doc_index`` and ``position`` (:data:`RESERVED`). An input field of one of those names
is kept as ``orig_<name>`` (and one already named ``orig_<name>`` as
``orig_orig_<name>``, and so on: one-to-one, undone by :func:`restore_reserved`).

Values (:func:`json_default`), for Parquet's binary, temporal and decimal columns:

- binary (``bytes``): base64, RFC 4648 standard alphabet with padding;
- timestamps, dates and times: ISO 8601 (``isoformat()``: ``2024-05-01T12:30:00+00:00``,
  fractional seconds to the column's precision);
- decimals: the decimal's string (``"12.50"``, every digit kept);
- durations: ISO 8601 seconds (``PT1.5S``).

JSON keeps no type, so a reader needs the column types to turn these strings back into
values: :func:`field_types` lists, for each field whose Parquet type holds such values
(top level, or a list of them), that type; :func:`decode_fields` applies it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: The field names clusterclip adds to records (the cluster id is ``label``).
RESERVED = ("label", "score", "doc_index", "position")


def is_renamed(key: str) -> bool:
    """True for the keys that :func:`rename_reserved` prefixes: ``(orig_)*`` + a reserved name."""
    while key.startswith("orig_"):
        key = key[len("orig_"):]
    return key in RESERVED


def rename_reserved(rec: Mapping[str, Any]) -> dict[str, Any]:
    """``rec`` with every reserved name (and ``orig_`` chain of one) one ``orig_`` longer."""
    return {f"orig_{k}" if is_renamed(k) else k: v for k, v in rec.items()}


def restore_reserved(rec: Mapping[str, Any], drop: Iterable[str] = ()) -> dict[str, Any]:
    """Invert :func:`rename_reserved`, leaving out the keys ``drop`` (those clusterclip added)."""
    dropped = set(drop)
    return {k[len("orig_"):] if is_renamed(k) else k: v for k, v in rec.items()
            if k not in dropped}


def renamed_note(renamed: Mapping[str, int]) -> str | None:
    """One line saying which input fields were renamed, and in how many records."""
    if not renamed:
        return None
    return ("input fields kept under a new name (clusterclip's fields took theirs): "
            + ", ".join(f"{k} -> orig_{k} in {n} documents" for k, n in renamed.items()))


def json_default(value: Any) -> Any:
    """``json.dumps(..., default=json_default)``: the JSON form (see the module) of a value
    JSON has no type for. TypeError for any other type (as without a default)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return f"PT{decimal.Decimal(value // dt.timedelta(microseconds=1)) / 1000000}S"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def record_json(rec: Mapping[str, Any], **kw: Any) -> str:
    """``rec`` as one JSON object, with :func:`json_default` (``kw``: json.dumps options)."""
    return json.dumps(rec, ensure_ascii=False, default=json_default, **kw)


def _kind(t: Any) -> str | None:
    """The type string of an Arrow type that :func:`json_default` converts, or None."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _kind(t.value_type)
        return None if inner is None else f"list<{inner}>"
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t)):
        return "binary"
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) \
            or pa.types.is_decimal(t) or pa.types.is_duration(t):
        return str(t)
    return None


def field_types(files: Iterable[Mapping[str, Any]], skip: Iterable[str] = ()) -> dict[str, str]:
    """``{field: type}`` of the Parquet columns of the corpus ``files`` (records of
    ``Corpus.files``) whose values have a JSON form here, but ``skip`` (e.g. the text
    field). A field with different types in different files keeps the first."""
    out: dict[str, str] = {}
    skipped = set(skip)
    for f in files:
        if f.get("kind") != "parquet":
            continue
        import pyarrow.parquet as pq

        for field in pq.read_schema(f["path"]):
            kind = _kind(field.type)
            if kind is not None and field.name not in skipped:
                out.setdefault(field.name, kind)
    return dict(sorted(out.items()))


def _decode(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind.startswith("list<"):
        return [_decode(v, kind[len("list<"):-1]) for v in value]
    if kind == "binary":
        return base64.b64decode(value, validate=True)
    if kind.startswith("duration"):
        seconds = decimal.Decimal(re.fullmatch(r"PT(-?[0-9.]+)S", value)[1])
        return dt.timedelta(microseconds=int(seconds * 1000000))
    if kind.startswith("time") and not kind.startswith("timestamp"):
        return dt.time.fromisoformat(value)
    import pyarrow as pa

    unit = re.fullmatch(r"timestamp\[(\w+)(?:, tz=(.+))?\]", kind)
    if unit:
        t = pa.timestamp(unit[1], unit[2])
    elif kind.startswith("date"):
        t = pa.date32()
    else:
        digits = re.fullmatch(r"decimal(\d+)\((\d+), (-?\d+)\)", kind)
        t = (pa.decimal128 if digits[1] == "128" else pa.decimal256)(int(digits[2]),
                                                                      int(digits[3]))
    return pa.array([value], pa.string()).cast(t)[0].as_py()


def decode_fields(text: str, types: Mapping[str, str]) -> dict[str, Any]:
    """The record of a ``fields`` JSON object, with the fields of ``types`` (from
    :func:`field_types`, recorded in the export's ``_export.json`` as ``field_types``)
    turned back into the values the input held (``bytes``, ``datetime``, ``Decimal``, ...,
    as pyarrow's ``to_pylist`` gives them)."""
    rec = json.loads(text)
    return {k: _decode(v, types[k]) if k in types else v for k, v in rec.items()}
