"""File formats of a corpus: JSON Lines (plain or gzip) and Parquet.

A reader knows how to *scan* one file (yield one record per document, or a
:class:`BadLine`) and how to *fetch* documents again by their address (byte
offset of the line for JSON Lines, row number for Parquet). The index built
from a scan lives in :mod:`clusterclip.corpus.index`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError
from clusterclip.storage.records import MARKER

# Suffix -> kind. Folders are expanded to the files with one of these suffixes.
KINDS = {".jsonl.gz": "jsonl.gz", ".jsonl": "jsonl", ".parquet": "parquet"}
_BOM = b"\xef\xbb\xbf"
# A JSON escape of a UTF-16 surrogate (\ud800-\udfff); only such a line can hold a lone one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def kind_of(path: Path) -> str | None:
    """The reader kind of ``path`` from its suffix, or None for an unknown one."""
    name = path.name.lower()
    for suffix, kind in KINDS.items():
        if name.endswith(suffix):
            return kind
    return None


def expand_inputs(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[str]]:
    """Resolve files and folders into the ordered list of corpus files.

    Files keep the order given; a folder contributes its files with a known
    suffix, recursively, sorted by relative path. Returns ``(files, ignored)``
    where ``ignored`` lists folder entries with other suffixes (reported, not
    read). Hidden files and folders (``.name``) are skipped, and so are the
    folders clusterclip wrote below a given folder (they carry its marker file,
    e.g. ``group --out data/grouped``: its copies of the corpus are not new
    documents); such a folder given by name is read.
    """

    files: list[Path] = []
    ignored: list[str] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found = []
            for root, dirs, names in os.walk(p):
                ours = [d for d in dirs if (Path(root) / d / MARKER).is_file()]
                ignored.extend(Path(root) / d for d in ours)
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ours)
                for n in names:
                    if n.startswith("."):
                        continue
                    f = Path(root) / n
                    (found if kind_of(f) else ignored).append(f)
            found.sort(key=lambda f: f.relative_to(p).as_posix())
            if not found:
                raise InputError(f"{given}: folder holds no .jsonl, .jsonl.gz or .parquet files")
            files.extend(found)
        elif p.exists():
            if kind_of(p) is None:
                raise InputError(f"{given}: unknown file type (expected .jsonl, .jsonl.gz, "
                                 f".parquet or a folder of them)")
            files.append(p)
        elif p.is_symlink():
            raise InputError(f"{given}: symbolic link to nothing readable ({_link_problem(p)})")
        else:
            raise InputError(f"{given}: no such file or folder")
    resolved = [_resolve(f) for f in files]
    seen: set[Path] = set()
    for given, r in zip(files, resolved, strict=True):
        if r in seen:
            raise InputError(f"{given}: given more than once")
        seen.add(r)
    if not resolved:
        raise InputError("no input files given")
    return resolved, sorted(str(i) for i in ignored)


def _link_problem(path: Path) -> str:
    try:
        path.resolve(strict=True)
    except FileNotFoundError:
        return "its target does not exist"
    except (OSError, RuntimeError):  # Python < 3.13 raises RuntimeError for a loop
        return "a loop of links"
    return "unreadable"


def _resolve(path: Path) -> Path:
    """The real path of an input file; InputError for a dangling link or a loop of links."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InputError(f"{path}: symbolic link to nothing readable "
                         f"({_link_problem(path)})") from None


@dataclass
class Record:
    """One scanned document. ``address`` is a byte offset (JSONL) or row (Parquet)."""

    address: int
    nbytes: int
    line: int
    text: str | None
    doc_id: Any
    has_field: bool


@dataclass
class BadLine:
    """A line that is not a document: ``reason`` says why. ``fatal``: the file cannot be
    read on from it (a read error), which skipping bad lines does not skip."""

    line: int
    reason: str
    fatal: bool = False


class Blank:
    """A whitespace-only line: neither a document nor an error (counted)."""


BLANK = Blank()


def _parse_object(raw: bytes, line: int) -> dict[str, Any] | BadLine:
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return BadLine(line, f"invalid UTF-8 at byte {e.start} of the line")
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as e:
        return BadLine(line, f"invalid JSON ({e.msg.removesuffix(' at')} at column {e.colno})")
    except RecursionError:
        return BadLine(line, "invalid JSON (nested too deeply)")
    if not isinstance(obj, dict):
        return BadLine(line, f"expected a JSON object, got {type(obj).__name__}")
    if _SURROGATE_ESCAPE.search(raw):  # rare: only then look for a lone one
        bad = _lone_surrogate(obj)
        if bad is not None:
            return BadLine(line, f"lone surrogate {bad} (a \\u escape that is not valid "
                                 f"Unicode)")
    return obj


def _lone_surrogate(obj: Any) -> str | None:
    """Where a string in ``obj`` holds a lone UTF-16 surrogate (``"\\ud800"`` parses to one,
    but it cannot be encoded, embedded or written back), as ``\\udXXX in field 'f'``."""
    todo: list[tuple[str, Any]] = [("", obj)]
    while todo:
        where, v = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                at = f" in field {where!r}" if where else ""
                return f"\\u{ord(v[e.start]):04x}{at}"
        elif isinstance(v, dict):
            todo.extend((where or str(k), x) for k, x in v.items())
            todo.extend(("", k) for k in v)
        elif isinstance(v, list):
            todo.extend((where, x) for x in v)
    return None


def _text_of(obj: dict[str, Any], text_field: str, line: int) -> tuple[str | None, bool] | BadLine:
    if text_field not in obj:
        return None, False
    t = obj[text_field]
    if t is None:
        return None, True
    if not isinstance(t, str):
        return BadLine(line, f"field {text_field!r} is {type(t).__name__}, expected a string")
    return t, True


def _open_jsonl(path: Path, kind: str):
    try:
        if kind == "jsonl.gz":
            return gzip.open(path, "rb")
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None


def scan_jsonl(path: Path, kind: str, text_field: str, id_field: str | None,
               span: tuple[int, int] | None = None) -> Iterator[Record | BadLine | Blank]:
    """Yield one item per line of a JSON Lines file (plain or gzip), streaming.

    ``span``: only the lines of a plain file that start in bytes ``[lo, hi)``, ``lo`` a
    line's start (:func:`line_starts`); their line numbers count from 1 at ``lo``, their
    addresses from the file's start. A read error ends the items with a fatal
    :class:`BadLine`.
    """
    lo, hi = span if span is not None else (0, None)
    f = _open_jsonl(path, kind)
    pos, line = lo, 0
    try:
        with f:
            if lo:
                f.seek(lo)
            while hi is None or pos < hi:
                try:
                    raw = f.readline()
                except (OSError, EOFError, zlib.error) as e:
                    yield BadLine(line + 1, f"cannot read ({e})", fatal=True)
                    return
                if not raw:
                    return
                line += 1
                start, size = pos, len(raw)
                pos += size
                if start == 0 and raw.startswith(_BOM):
                    start += len(_BOM)
                    raw = raw[len(_BOM):]
                yield _line_item(raw, line, start, text_field, id_field)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None


def _line_item(raw: bytes, line: int, start: int, text_field: str,
               id_field: str | None) -> Record | BadLine | Blank:
    """What line number ``line`` (the bytes ``raw``, at byte ``start``) holds."""
    if not raw.strip():
        return BLANK
    obj = _parse_object(raw, line)
    if isinstance(obj, BadLine):
        return obj
    got = _text_of(obj, text_field, line)
    if isinstance(got, BadLine):
        return got
    text, has = got
    doc_id = obj.get(id_field) if id_field else None
    return Record(start, len(raw), line, text, doc_id, has)


def line_starts(path: Path, cuts: Iterable[int]) -> list[int]:
    """For each byte offset in ``cuts`` (ascending, inside a plain file), the start of the
    first line that starts at or after it (the file's size when none does): where a scan
    of the file can be cut so that every line falls in one piece."""
    out: list[int] = []
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for c in cuts:
                if c <= 0:
                    out.append(0)
                    continue
                f.seek(c - 1)  # the line starts at c when byte c - 1 ends one
                at = c - 1
                while True:
                    chunk = f.read(1 << 16)
                    nl = chunk.find(b"\n")
                    if nl >= 0:
                        out.append(min(at + nl + 1, size))
                        break
                    if not chunk:
                        out.append(size)
                        break
                    at += len(chunk)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    return out


def read_jsonl_lines(path: Path, kind: str, addresses: Iterable[tuple[int, int]]
                     ) -> Iterator[bytes]:
    """Yield the raw bytes at each ``(offset, nbytes)``; offsets must not decrease.

    Plain files seek; gzip files decompress forward once (a gzip seek forward
    reads and discards), so fetching any subset costs at most one pass.
    """
    with _open_jsonl(path, kind) as f:
        for offset, nbytes in addresses:
            if f.tell() != offset:
                f.seek(offset)
            raw = f.read(nbytes)
            if len(raw) != nbytes:
                raise InputError(f"{path}: file is shorter than when it was indexed")
            yield raw


def decode_record(path: Path, raw: bytes) -> dict[str, Any]:
    """Parse a line fetched again by address (it parsed at scan time)."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        obj = None
    if not isinstance(obj, dict):
        raise InputError(f"{path}: file changed since it was indexed")
    return obj


def text_from_record(obj: dict[str, Any], text_field: str) -> str | None:
    t = obj.get(text_field)
    return t if isinstance(t, str) else None


# -- Parquet -----------------------------------------------------------------

def _parquet_file(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs pyarrow "
                         f"(pip install 'clusterclip[parquet]')") from None
    try:
        return pq.ParquetFile(path)
    except OSError as e:  # pyarrow's message may run over lines: its first one
        raise InputError(f"{path}: cannot read as Parquet ({_first_line(e)})") from None
    except Exception as e:  # pyarrow raises ArrowInvalid etc. for a corrupt footer
        raise InputError(f"{path}: not a valid Parquet file ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _check_string_column(path: Path, schema, name: str, what: str) -> None:
    import pyarrow as pa

    idx = schema.get_field_index(name)
    if idx < 0:
        raise InputError(f"{path}: no column {name!r} ({what}); columns: "
                         f"{', '.join(schema.names)}")
    t = schema.field(idx).type
    string_like = pa.types.is_string(t) or pa.types.is_large_string(t)
    if hasattr(pa.types, "is_string_view"):
        string_like = string_like or pa.types.is_string_view(t)
    if what == "text field" and not string_like:
        raise InputError(f"{path}: column {name!r} has type {t}, expected a string column")


def scan_parquet(path: Path, text_field: str, id_field: str | None,
                 batch_rows: int = 8192) -> Iterator[Record]:
    """Yield one record per Parquet row, reading only the needed columns in batches."""
    pf = _parquet_file(path)
    schema = pf.schema_arrow
    _check_string_column(path, schema, text_field, "text field")
    cols = [text_field]
    if id_field:
        _check_string_column(path, schema, id_field, "id field")
        cols.append(id_field)
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=cols):
            texts = batch.column(0).to_pylist()
            ids = batch.column(1).to_pylist() if id_field else [None] * len(texts)
            for t, i in zip(texts, ids, strict=True):
                yield Record(row, 0, row + 1, t, i, True)
                row += 1
    except (OSError, ValueError) as e:  # pyarrow's ArrowIOError, ArrowInvalid
        raise InputError(f"{path}: cannot read row {row + 1} ({_first_line(e)})") from None


def present_columns(pf, columns: list[str] | None) -> list[str] | None:
    """``columns`` that the file has; a missing column reads as None, like a missing key."""
    if columns is None:
        return None
    names = set(pf.schema_arrow.names)
    return [c for c in columns if c in names]


def parquet_row_groups(path: Path) -> list[int]:
    """Start row of each row group, plus the total row count at the end."""
    md = _parquet_file(path).metadata
    starts = [0]
    for g in range(md.num_row_groups):
        starts.append(starts[-1] + md.row_group(g).num_rows)
    return starts


def read_parquet_rows(path: Path, rows: list[int], columns: list[str] | None
                      ) -> Iterator[dict[str, Any]]:
    """Yield the rows (ascending) as dicts, reading each needed row group once."""
    import bisect

    pf = _parquet_file(path)
    columns = present_columns(pf, columns)
    starts = parquet_row_groups(path)
    i = 0
    while i < len(rows):
        g = bisect.bisect_right(starts, rows[i]) - 1
        if g >= len(starts) - 1:
            raise InputError(f"{path}: file is shorter than when it was indexed")
        j = i
        while j < len(rows) and rows[j] < starts[g + 1]:
            j += 1
        if columns == []:  # none of the asked columns exist: rows without fields
            yield from ({} for _ in range(j - i))
            i = j
            continue
        table = pf.read_row_group(g, columns=columns)
        local = [r - starts[g] for r in rows[i:j]]
        yield from table.take(local).to_pylist()
        i = j
