"""The corpus index: every document addressed by a stable integer index.

A scan reads each input once, streaming, and keeps only small per-document
arrays (which file, where in it, whether it has text, its length); the text
itself stays on disk and is read again by address when a stage needs it.
Document ``i`` is the ``i``-th document line (or Parquet row) over the input
files in the order given, folders expanded in sorted order.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.corpus import readers
from clusterclip.errors import InputError

INDEX_VERSION = 1
_ARRAYS = ("file_id", "address", "nbytes", "line", "valid", "text_len")
#: The index's record (counts, options, the files it read).
META = "corpus.json"
#: Every file an index folder holds (written by :meth:`Corpus.save` and :func:`scan_into`).
INDEX_FILES = frozenset({*(f"{k}.npy" for k in _ARRAYS), "ids.jsonl", META})
_MAX_EXAMPLES = 20
# Documents converted to Python objects at a time when streaming records by index.
_CHUNK = 65536
# Characters of text a scan asked to keep its texts holds at most (else it keeps none).
KEEP_TEXT_CHARS = 1 << 26


def foreign_files(directory: str | os.PathLike[str]) -> list[str]:
    """The files under an index folder that no index write makes (a user's), sorted; a
    re-index replaces the folder whole, so they must be moved away first."""
    from clusterclip.storage.records import files_under

    d = Path(directory)
    return [f for f in files_under(d) if f not in INDEX_FILES] if d.is_dir() else []


def _has_text(t: str | None) -> bool:
    # Whitespace-only text carries nothing to embed: it is excluded like missing text.
    return t is not None and not t.isspace() and t != ""


class Corpus:
    """An indexed, read-on-demand collection of text documents.

    Arrays (length N = ``len(corpus)``, corpus order):

    - ``valid``: bool[N], True where the document has non-empty text.
    - ``text_lengths``: int32[N], text length in characters (0 when not valid).
    - ``file_id``: int32[N] index into ``files``; ``address``: int64[N] byte
      offset of the line (JSONL; decompressed offset for gzip) or row (Parquet);
      ``nbytes``: int64[N] line length in bytes; ``line``: int64[N] 1-based line
      (or row) number in its file, for messages.

    Build one with :meth:`scan`; persist with :meth:`save` / :meth:`load`.
    """

    def __init__(self, files: list[dict[str, Any]], arrays: dict[str, np.ndarray],
                 text_field: str, id_field: str | None, stats: dict[str, Any],
                 ids: list[Any] | None = None) -> None:
        self.files = files
        self.text_field = text_field
        self.id_field = id_field
        self.stats = stats
        self._ids = ids
        self._ids_path: Path | None = None
        #: The folder :meth:`load` read the index from (None: built by :meth:`scan`), for
        #: worker processes that load it again.
        self.directory: Path | None = None
        self.file_id = arrays["file_id"]
        self.address = arrays["address"]
        self.nbytes = arrays["nbytes"]
        self.line = arrays["line"]
        self.valid = arrays["valid"]
        self.text_lengths = arrays["text_len"]
        # first document index of each file, plus N at the end
        self._file_start = np.array([f["first"] for f in files] + [len(self.valid)],
                                    dtype=np.int64)

    @property
    def ids(self) -> list[Any] | None:
        """The ``id_field`` value of every document (None without an id field).

        A loaded index reads ``ids.jsonl`` on first use only: no stage needs it, and it
        is one Python object per document.
        """
        if self._ids is None and self._ids_path is not None:
            with open(self._ids_path, encoding="utf-8") as fh:
                self._ids = [json.loads(line) for line in fh]
        return self._ids

    def __len__(self) -> int:
        return int(self.valid.shape[0])

    def __repr__(self) -> str:
        return (f"Corpus({len(self)} documents, {self.stats['valid']} with text, "
                f"{len(self.files)} files)")

    # -- building ------------------------------------------------------------
    @classmethod
    def scan(cls, paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
             text_field: str = "text", id_field: str | None = None,
             skip_bad_lines: bool = False, progress: bool = True) -> Corpus:
        """Index ``paths`` (files or folders) in one streaming pass.

        A malformed line raises :class:`InputError` naming file and line,
        unless ``skip_bad_lines`` (then it is counted in ``stats['bad_lines']``
        and is not a document). Empty, whitespace-only, null or missing text
        makes a document with ``valid`` False (counted in ``stats['empty']``).
        :func:`scan_into` writes the same index with the files shared among
        ``torchrun`` ranks.
        """
        from tqdm import tqdm

        files_in, ignored = _inputs(paths, text_field)
        cols = _columns()
        ids: list[Any] | None = [] if id_field else None
        scans: list[_FileScan] = []
        bar = tqdm(desc="scanning corpus", unit="doc", disable=not progress, leave=False)
        try:
            for fid, path in enumerate(files_in):
                scans.append(_scan_file(fid, path, None, text_field, id_field, skip_bad_lines,
                                        cols, ids, bar,
                                        want_keys=all(f.keys is None for f in scans)))
                _raise_failure(path, scans[-1], 0)
        finally:
            bar.close()  # also on error, so the message starts on a clean line
        files, stats = _combine(scans, ignored, text_field, id_field)
        if ids is not None:
            stats.update(_id_stats(ids))
        dtypes = {"i": np.int32, "q": np.int64, "b": np.int8}
        # Views of the columns' buffers, not copies: the scan's peak stays at one copy.
        arrays = {k: np.frombuffer(v, dtype=dtypes[v.typecode]) for k, v in cols.items()}
        arrays["valid"] = arrays["valid"].astype(bool)
        return cls(files, arrays, text_field, id_field, stats, ids)

    # -- reading -------------------------------------------------------------
    def _file_of(self, index: int) -> int:
        return int(np.searchsorted(self._file_start, index, side="right") - 1)

    def _check_range(self, start: int, stop: int | None) -> tuple[int, int]:
        n = len(self)
        stop = n if stop is None else stop
        if not (0 <= start <= stop <= n):
            raise IndexError(f"range [{start}, {stop}) outside the corpus of {n} documents")
        return start, stop

    def iter_records(self, start: int = 0, stop: int | None = None,
                     columns: list[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield ``(index, record)`` for documents ``start..stop-1`` in corpus order.

        ``record`` is the whole JSON object (or the Parquet row, restricted to
        ``columns`` when given). Streams: memory holds one line / row group.
        """
        start, stop = self._check_range(start, stop)
        yield from self._records(range(start, stop), columns)

    def _records(self, indices: Iterable[int], columns: list[str] | None
                 ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Records for ascending ``indices``, grouped by file (one pass per file)."""
        if isinstance(indices, range):
            idx = None
        else:
            idx = np.asarray(indices if isinstance(indices, np.ndarray)
                             else np.fromiter(indices, dtype=np.int64), dtype=np.int64)
        if idx is None:
            r = indices  # a range: walk files by slices without materialising it
            assert isinstance(r, range)
            lo, hi = r.start, r.stop
            pieces = []
            for fid in range(len(self.files)):
                a = max(lo, int(self._file_start[fid]))
                b = min(hi, int(self._file_start[fid + 1]))
                if a < b:
                    pieces.append((fid, a, b, None))
        else:
            pieces = []
            fids = np.searchsorted(self._file_start, idx, side="right") - 1
            bounds = np.flatnonzero(np.diff(fids)) + 1
            for part, fpart in zip(np.split(idx, bounds), np.split(fids, bounds), strict=True):
                if len(part):
                    pieces.append((int(fpart[0]), 0, 0, part))
        for fid, a, b, part in pieces:
            f = self.files[fid]
            path = Path(f["path"])
            sel = np.arange(a, b) if part is None else part
            if f["kind"] == "parquet":
                rows = self.address[sel]
                if part is None:
                    gen = _parquet_range(path, int(rows[0]), int(rows[-1]) + 1, columns)
                else:
                    gen = readers.read_parquet_rows(path, rows.tolist(), columns)
                for i, rec in zip(sel.tolist(), gen, strict=True):
                    yield i, rec
            else:
                raws = readers.read_jsonl_lines(path, f["kind"], self._addresses(sel))
                for i, raw in zip(_int_chunks(sel), raws, strict=True):
                    yield i, readers.decode_record(path, raw)

    def _addresses(self, sel: np.ndarray) -> Iterator[tuple[int, int]]:
        """``(address, nbytes)`` of documents ``sel``, as Python ints a chunk at a time
        (a file can hold millions of documents: no list per document of the whole file)."""
        for a in range(0, len(sel), _CHUNK):
            part = sel[a:a + _CHUNK]
            yield from zip(self.address[part].tolist(), self.nbytes[part].tolist(), strict=True)

    def iter_texts(self, start: int = 0, stop: int | None = None
                   ) -> Iterator[tuple[int, str | None]]:
        """Yield ``(index, text)`` for ``start..stop-1`` in corpus order; None when excluded."""
        for i, rec in self.iter_records(start, stop, columns=[self.text_field]):
            yield i, self.text_of(i, rec)

    def iter_texts_at(self, indices: Sequence[int] | np.ndarray
                      ) -> Iterator[tuple[int, str | None]]:
        """Yield ``(index, text)`` for ascending ``indices``, streaming, one pass per file.

        For a gzip file this decompresses once up to the last index asked for,
        however many separate ranges ``indices`` covers.
        """
        for i, rec in self.iter_records_at(indices, columns=[self.text_field]):
            yield i, self.text_of(i, rec)

    def iter_records_at(self, indices: Sequence[int] | np.ndarray,
                        columns: list[str] | None = None
                        ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield ``(index, record)`` for ascending ``indices``, streaming, one pass per file
        (see :meth:`iter_texts_at`; ``columns`` as in :meth:`iter_records`)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size:
            if np.any(np.diff(idx) < 0):
                raise ValueError("iter_records_at needs ascending indices")
            if idx[0] < 0 or idx[-1] >= len(self):
                raise IndexError(f"document index out of range [0, {len(self)})")
        yield from self._records(idx, columns)

    def text_of(self, i: int, rec: dict[str, Any]) -> str | None:
        """The text of document ``i`` from its ``record``; None when excluded."""
        if not self.valid[i]:
            return None
        t = readers.text_from_record(rec, self.text_field)
        if t is None:
            raise InputError(f"{self.files[self._file_of(i)]['path']}:{int(self.line[i])}: "
                             f"file changed since it was indexed")
        return t

    def texts(self, indices: Sequence[int] | np.ndarray) -> list[str | None]:
        """Texts of arbitrary ``indices`` (any order, repeats allowed); None when excluded."""
        return self._values_at(indices, self.text_field, text=True)

    def field_values(self, name: str, indices: Sequence[int] | np.ndarray | None = None
                     ) -> list[Any]:
        """Values of field ``name`` (None when missing), for ``indices`` or all documents."""
        if indices is None:
            return [rec.get(name) for _, rec in self.iter_records(columns=[name])]
        return self._values_at(indices, name, text=False)

    def field_codes(self, name: str, progress: bool = False) -> tuple[np.ndarray, list[str]]:
        """Field ``name`` of every document as integer codes, streaming (a progress bar
        with ``progress``).

        Returns ``codes`` int32[N] (-1 where the field is missing or null) and
        ``values``, the distinct values as strings (``str(v)``) in order of first
        appearance: ``values[codes[i]]``. Memory: 4 bytes per document plus the
        distinct values, instead of one Python object per document.
        """
        from tqdm import tqdm

        coder = FieldCoder()
        records = tqdm(self.iter_records(columns=[name]), total=len(self), unit="doc",
                       desc=f"reading field {name}", unit_scale=True, leave=False,
                       disable=not progress, mininterval=0.5)
        for _, rec in records:
            coder.add(rec.get(name))
        return coder.result()

    def _values_at(self, indices: Sequence[int] | np.ndarray, name: str, text: bool
                   ) -> list[Any]:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"document index out of range [0, {len(self)})")
        uniq = np.unique(idx)
        if text:
            uniq = uniq[self.valid[uniq]]
        got: dict[int, Any] = {}
        for i, rec in self._records(uniq, columns=[name]):
            got[i] = self.text_of(i, rec) if text else rec.get(name)
        return [got.get(int(i)) for i in idx]

    # -- integrity -----------------------------------------------------------
    def verify_files(self) -> None:
        """Raise InputError if an input file changed (size or mtime) since the scan."""
        for f in self.files:
            try:
                st = os.stat(f["path"])
            except OSError as e:
                raise InputError(f"{f['path']}: cannot read ({e.strerror})") from None
            if st.st_size != f["size"] or st.st_mtime_ns != f["mtime_ns"]:
                raise InputError(f"{f['path']}: changed since the corpus was indexed; "
                                 f"re-run embed")

    # -- persistence ---------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the index to ``directory`` (replaced atomically as a whole)."""
        from clusterclip.storage.atomic import atomic_path

        with atomic_path(directory) as tmp:
            tmp.mkdir()
            arrays = {"file_id": self.file_id, "address": self.address, "nbytes": self.nbytes,
                      "line": self.line, "valid": self.valid, "text_len": self.text_lengths}
            for k, a in arrays.items():
                np.save(tmp / f"{k}.npy", np.ascontiguousarray(a), allow_pickle=False)
            if self.ids is not None:
                with open(tmp / "ids.jsonl", "w", encoding="utf-8") as fh:
                    for i in self.ids:
                        fh.write(_id_line(i))
            _write_meta(tmp, self.text_field, self.id_field, self.files, self.stats)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], mmap: bool = True) -> Corpus:
        """Read an index written by :meth:`save` (arrays memory-mapped when ``mmap``)."""
        from clusterclip.storage.jsonfile import read_json

        d = Path(directory)
        try:
            meta = read_json(d / META, "a corpus index")
            arrays = {k: np.load(d / f"{k}.npy", mmap_mode="r" if mmap else None,
                                 allow_pickle=False) for k in _ARRAYS}
        except InputError:  # the JSON reader's own one line, naming corpus.json
            raise
        except (OSError, ValueError) as e:
            raise InputError(f"{d}: not a corpus index ({e})") from None
        if meta.get("version") != INDEX_VERSION:
            raise InputError(f"{d}: corpus index version {meta.get('version')} "
                             f"is not {INDEX_VERSION}; re-run embed")
        corpus = cls(meta["files"], arrays, meta["text_field"], meta["id_field"], meta["stats"])
        corpus.directory = d
        if meta.get("id_field"):
            if not (d / "ids.jsonl").is_file():
                raise InputError(f"{d}: not a corpus index (ids.jsonl is missing)")
            corpus._ids_path = d / "ids.jsonl"
        return corpus


class FieldCoder:
    """The values of one field, document after document, as integer codes (see
    :meth:`Corpus.field_codes`): 4 bytes per document plus the distinct values."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._codes = array.array("i")

    def add(self, value: Any) -> None:
        """The next document's value (None: missing)."""
        if value is None:
            self._codes.append(-1)
            return
        key = str(value)
        code = self._index.get(key)
        if code is None:
            code = self._index[key] = len(self._index)
        self._codes.append(code)

    def result(self) -> tuple[np.ndarray, list[str]]:
        """``codes`` int32 (-1: missing) and the distinct ``values`` (``str(v)``) in order
        of first appearance (the last call: no value is added after it)."""
        return np.frombuffer(self._codes, dtype=np.int32), list(self._index)


# -- scanning ------------------------------------------------------------------------

_TYPECODES = {"file_id": "i", "address": "q", "nbytes": "q", "line": "q", "valid": "b",
              "text_len": "i"}
# A file's counts in its record, summed over its parts.
_COUNTS = ("documents", "empty", "bad_lines", "blank_lines")
_DTYPES = {"file_id": np.int32, "address": np.int64, "nbytes": np.int64, "line": np.int64,
           "valid": np.bool_, "text_len": np.int32}


@dataclass
class _FileScan:
    """What a scan learnt about one file (or one byte range of one: a part of
    :func:`scan_into`) besides its documents' columns; line numbers count from the first
    line it read."""

    record: dict[str, Any]  # the file's entry in ``Corpus.files`` ("first" set later)
    bad_examples: list[tuple[int, str]]  # its first bad lines (up to _MAX_EXAMPLES)
    field_seen: bool  # some document has the text field
    keys: list[str] | None  # fields of its first document without the text field
    lines: int = 0  # lines read
    # Why it stopped short: (line, or None when the message names no line; message; params)
    failure: tuple[int | None, str, tuple[str, ...]] | None = None


class _NoBar:
    """A progress bar that shows nothing (a worker process's scan)."""

    def update(self, n: int = 1) -> None:
        pass


def _raise_failure(path: Path, scan: _FileScan, line0: int) -> None:
    """The InputError that stopped ``scan`` of ``path`` (a part whose first line is line
    ``line0 + 1`` of the file), if any."""
    if scan.failure is not None:
        line, message, params = scan.failure
        where = "" if line is None else f"{path}:{line0 + line}: "
        raise InputError(where + message, params=params)


def _inputs(paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
            text_field: str) -> tuple[list[Path], list[str]]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not text_field:
        raise InputError("text_field must not be empty", params=("text_field",))
    return readers.expand_inputs(paths)


def _columns() -> dict[str, array.array]:
    return {k: array.array(t) for k, t in _TYPECODES.items()}


class _KeptTexts:
    """The texts a scan keeps (corpus order, None where excluded) while they total at most
    ``limit`` characters; past it, none (``out`` is emptied and stays empty)."""

    def __init__(self, out: list[str | None], limit: int) -> None:
        self.out, self.left, self.on = out, limit, True

    def add(self, text: str | None) -> None:
        if self.on:
            self.left -= len(text) if text is not None else 0
            if self.left < 0:
                self.on = False
                self.out.clear()
            else:
                self.out.append(text)


def _scan_file(fid: int, path: Path, span: tuple[int, int] | None, text_field: str,
               id_field: str | None, skip_bad_lines: bool, cols: dict[str, array.array],
               ids: list[Any] | None, bar: Any, want_keys: bool,
               texts: _KeptTexts | None = None) -> _FileScan:
    """Scan file number ``fid`` (only the lines starting in bytes ``span`` when given:
    :func:`clusterclip.corpus.readers.scan_jsonl`), appending its documents to ``cols``
    (and ``ids``, and their texts to ``texts``). A line or file it cannot take stops it:
    the returned scan's ``failure`` says why (:func:`_raise_failure`)."""
    kind = readers.kind_of(path)
    rec = {"path": str(path), "kind": kind, "size": 0, "mtime_ns": 0,
           "documents": 0, "empty": 0, "bad_lines": 0, "blank_lines": 0}
    out = _FileScan(rec, [], False, None)
    try:
        try:
            st = path.stat()
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})") from None
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: cannot read (permission denied)")
        rec["size"], rec["mtime_ns"] = st.st_size, st.st_mtime_ns
        if kind == "parquet":
            items: Iterator[Any] = readers.scan_parquet(path, text_field, id_field)
        else:
            items = readers.scan_jsonl(path, kind, text_field, id_field, span)
        _take_items(out, items, path, kind, fid, skip_bad_lines, cols, ids, bar, want_keys,
                    texts)
    except InputError as e:
        out.failure = (None, str(e), e.params)
    return out


def _take_items(out: _FileScan, items: Iterator[Any], path: Path, kind: str | None, fid: int,
                skip_bad_lines: bool, cols: dict[str, array.array], ids: list[Any] | None,
                bar: Any, want_keys: bool, texts: _KeptTexts | None) -> None:
    """:func:`_scan_file`'s loop over one file's ``items``."""
    rec = out.record
    for item in items:
        if isinstance(item, readers.Blank):
            rec["blank_lines"] += 1
            out.lines += 1
            continue
        out.lines = item.line
        if isinstance(item, readers.BadLine):
            if item.fatal:
                out.failure = (item.line, item.reason, ())
                return
            if not skip_bad_lines:
                out.failure = (item.line, f"{item.reason} (skip_bad_lines skips and counts "
                                          "such lines)", ("skip_bad_lines",))
                return
            rec["bad_lines"] += 1
            if len(out.bad_examples) < _MAX_EXAMPLES:
                out.bad_examples.append((item.line, item.reason))
            continue
        ok = _has_text(item.text)
        out.field_seen = out.field_seen or item.has_field
        if want_keys and out.keys is None and not item.has_field and kind != "parquet":
            out.keys = _keys_at(path, kind, item.address, item.nbytes)
        cols["file_id"].append(fid)
        cols["address"].append(item.address)
        cols["nbytes"].append(item.nbytes)
        cols["line"].append(item.line)
        cols["valid"].append(1 if ok else 0)
        cols["text_len"].append(min(len(item.text), 2**31 - 1) if ok else 0)
        if ids is not None:
            ids.append(item.doc_id)
        if texts is not None:
            texts.add(item.text if ok else None)
        rec["documents"] += 1
        if not ok:
            rec["empty"] += 1
        bar.update()


def _combine(scans: list[_FileScan], ignored: list[str], text_field: str,
             id_field: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The files' records (with ``first``) and the corpus stats from the per-file scans, in
    file order; InputError when no document has the text field."""
    files, n = [], 0
    totals = {"bad_lines": 0, "blank_lines": 0, "empty": 0}
    for f in scans:
        files.append({**f.record, "first": n})
        n += f.record["documents"]
        for k in totals:
            totals[k] += f.record[k]
    if n and not any(f.field_seen for f in scans):
        first_keys = next((f.keys for f in scans if f.keys is not None), None)
        keys = ", ".join(first_keys or []) or "none"
        raise InputError(f"no document has a {text_field!r} field (fields of the first "
                         f"document: {keys}); choose the field with text_field",
                         params=("text_field",))
    stats = {
        "files": len(files),
        "documents": n,
        "valid": n - totals["empty"],
        "empty": totals["empty"],
        "bad_lines": totals["bad_lines"],
        "blank_lines": totals["blank_lines"],
        "bad_line_examples": [f"{f.record['path']}:{line}: {reason}" for f in scans
                              for line, reason in f.bad_examples][:_MAX_EXAMPLES],
        "ignored_files": ignored,
        "text_field": text_field,
        "id_field": id_field,
    }
    return files, stats


def _id_stats(ids: Iterable[Any]) -> dict[str, int]:
    missing, seen, total = 0, set(), 0
    for i in ids:
        missing += i is None
        seen.add(json.dumps(i, sort_keys=True, default=str))
        total += 1
    return {"missing_ids": missing, "duplicate_ids": total - len(seen)}


def _id_line(doc_id: Any) -> str:
    return json.dumps(doc_id, default=str, ensure_ascii=False) + "\n"


def _write_meta(directory: Path, text_field: str, id_field: str | None,
                files: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    meta = {"version": INDEX_VERSION, "text_field": text_field, "id_field": id_field,
            "files": files, "stats": stats}
    (directory / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n",
                                           encoding="utf-8")


def scan_into(directory: str | os.PathLike[str],
              paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str], *,
              text_field: str = "text", id_field: str | None = None,
              skip_bad_lines: bool = False, progress: bool = True,
              check: Callable[[dict[str, Any]], None] | None = None,
              texts: list[str | None] | None = None, workers: int = 1) -> dict[str, Any]:
    """Index ``paths`` into ``directory``: the files :meth:`Corpus.scan` then
    :meth:`Corpus.save` write, byte for byte, with the work shared among worker processes
    and ``torchrun`` ranks.

    The work is in parts: a file each, but a plain JSON Lines file of at least twice
    :data:`PART_MIN_BYTES` is cut at line starts into up to ``workers`` x ranks near-equal
    byte ranges of about that size or more (a gzip file cannot be entered midway: it stays
    whole, as does a Parquet file). Under ``torchrun`` every rank calls this (a
    collective) and scans its share of the parts (balanced by size), with ``workers``
    worker processes when it holds more than one part and at least :data:`POOL_MIN_BYTES`
    (else alone), each part into a folder of
    its own beside ``directory`` (``.NAME.clusterclip-PID-scan.tmp``, PID of rank 0: a
    killed run's is removed by the next one). Then rank 0 computes the stats, calls
    ``check(stats)`` (which may raise InputError: nothing is written then) and concatenates
    the parts' columns into ``directory``, replaced atomically, each part's line numbers
    moved on by the lines of the parts before it in its file. Errors are those of
    :meth:`Corpus.scan`: the first bad line in file order, named by its line in the file,
    as an InputError on every rank. Returns the stats on every rank.

    ``texts``: an empty list the scan fills with every document's text in corpus order
    (None where excluded), so that a stage that reads them next need not read the files
    again, when one process scanned every part and they total at most
    :data:`KEEP_TEXT_CHARS` characters; otherwise it stays empty.
    """
    from tqdm import tqdm

    from clusterclip import distributed as D
    from clusterclip.pool import pooled

    out = Path(directory)
    files_in, ignored = D.on_main(lambda: _inputs(paths, text_field))
    scratch = out.parent / f".{out.name}.clusterclip-{D.on_main(os.getpid)}-scan.tmp"
    rank, world = D.rank_and_world()

    def fresh() -> list[_Part]:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        return _parts(files_in, world * max(1, workers))

    parts = D.on_main(fresh)
    desc = "scanning corpus" if world == 1 else f"scanning corpus (rank {rank})"
    bar = tqdm(desc=desc, unit="doc", disable=not progress, leave=False)
    if texts is not None:
        texts.clear()
    # One process scans the parts in order: their texts append in corpus order.
    kept = _KeptTexts(texts, KEEP_TEXT_CHARS) if texts is not None and world == 1 else None
    options = (text_field, id_field, skip_bad_lines)

    def one(i: int) -> _FileScan:
        return _scan_part(options, (parts[i], files_in[parts[i].fid], scratch), bar, kept)

    def many(items: list[int]) -> Iterator[_FileScan]:
        big = sum(parts[i].size for i in items) >= POOL_MIN_BYTES
        jobs = [(parts[i], files_in[parts[i].fid], scratch) for i in items]
        done = pooled(workers if big else 1, _scan_options, options, _scan_job, jobs,
                      serial=lambda job: _scan_part(options, job, bar, kept))
        if big and workers > 1 and len(items) > 1:
            done = _counted(done, bar)  # from workers: the bar moves a part at a time
        # One process holds every part: it raises the first failure in order, at once.
        return _checked(parts, files_in, done) if world == 1 else done

    try:
        try:
            scans = list(_checked(parts, files_in,
                                  D.map_in_order(one, [p.size for p in parts], many=many)))
        finally:
            bar.close()

        return D.on_main(lambda: _write_index(out, scratch, parts, scans, ignored, text_field,
                                              id_field, check))
    finally:
        D.barrier()  # every rank is done with the scratch folder
        if D.is_main():
            shutil.rmtree(scratch, ignore_errors=True)


#: The least bytes of a part of :func:`scan_into` cut from one plain JSON Lines file
#: (a quarter of a second of scanning or so on one core).
PART_MIN_BYTES = 1 << 25
#: The least bytes of its share of the corpus a process hands to worker processes (each
#: starts in a fraction of a second: below this, one process is as quick).
POOL_MIN_BYTES = 2 * PART_MIN_BYTES


@dataclass(frozen=True)
class _Part:
    """One piece of :func:`scan_into`'s work: file ``fid`` (``size`` bytes to scan), or
    only its lines starting in bytes ``span``; ``name``: its folder in the scratch."""

    fid: int
    span: tuple[int, int] | None
    size: int
    name: str


def _parts(files_in: list[Path], pieces: int) -> list[_Part]:
    """The parts of :func:`scan_into` over ``files_in``, in corpus order: a plain JSON
    Lines file in up to ``pieces`` near-equal byte ranges, :data:`PART_MIN_BYTES` or more
    each before they are cut at line starts
    (:func:`~clusterclip.corpus.readers.line_starts`; ranges left empty by a long line are
    dropped), any other file whole."""
    out: list[_Part] = []
    for fid, path in enumerate(files_in):
        size = _size(path)
        n = min(pieces, size // PART_MIN_BYTES) if readers.kind_of(path) == "jsonl" else 1
        if n < 2:
            out.append(_Part(fid, None, size, f"{len(out):07d}"))
            continue
        starts = [0, *readers.line_starts(path, [size * k // n for k in range(1, n)]), size]
        for lo, hi in zip(starts, starts[1:], strict=False):
            if hi > lo:
                out.append(_Part(fid, (lo, hi), hi - lo, f"{len(out):07d}"))
    return out


def _scan_options(*options: Any) -> tuple[Any, ...]:
    """A scan worker's state (:func:`clusterclip.pool.worker_pool`): the scan's options."""
    return options


def _scan_job(options: tuple[Any, ...], job: tuple[_Part, Path, Path]) -> _FileScan:
    """A worker process's scan of one part (no progress bar, no texts kept)."""
    return _scan_part(options, job, _NoBar(), None)


def _scan_part(options: tuple[Any, ...], job: tuple[_Part, Path, Path], bar: Any,
               kept: _KeptTexts | None) -> _FileScan:
    """Scan one part of :func:`scan_into` (``job``: the part, its file, the scratch folder)
    into its own folder in the scratch (a column ``.npy`` each, and ``ids.jsonl`` with
    ``id_field``); nothing is written when it fails."""
    text_field, id_field, skip_bad_lines = options
    part, path, scratch = job
    cols = _columns()
    ids: list[Any] | None = [] if id_field else None
    got = _scan_file(part.fid, path, part.span, text_field, id_field, skip_bad_lines, cols,
                     ids, bar, want_keys=True, texts=kept)
    if got.failure is not None:
        return got
    folder = scratch / part.name
    folder.mkdir()
    for k, c in cols.items():
        raw = np.frombuffer(c, dtype=np.int8 if k == "valid" else _DTYPES[k])
        np.save(folder / f"{k}.npy", raw.astype(_DTYPES[k], copy=False))
    if ids is not None:
        with open(folder / "ids.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(_id_line(i) for i in ids)
    return got


def _counted(scans: Iterable[_FileScan], bar: Any) -> Iterator[_FileScan]:
    with _closing(scans):
        for got in scans:
            bar.update(got.record["documents"])
            yield got


def _checked(parts: list[_Part], files_in: list[Path], scans: Iterable[_FileScan]
             ) -> Iterator[_FileScan]:
    """``scans`` of ``parts`` (in order, from the first), raising the first one's failure
    as the InputError a scan of its whole file raises (its line numbered in the file)."""
    line0 = 0
    with _closing(scans):
        for i, got in enumerate(scans):
            if i and parts[i].fid != parts[i - 1].fid:
                line0 = 0
            _raise_failure(files_in[parts[i].fid], got, line0)
            line0 += got.lines
            yield got


@contextlib.contextmanager
def _closing(scans: Iterable[Any]) -> Iterator[None]:
    """Close the generator ``scans`` on leaving (its worker processes stop at once when an
    error leaves early, not when the error's traceback is freed)."""
    try:
        yield
    finally:
        close = getattr(scans, "close", None)
        if close is not None:
            close()


def _by_file(parts: list[_Part], scans: list[_FileScan]) -> tuple[list[_FileScan], list[int]]:
    """The scans of whole files from those of their ``parts``, and the lines of its file
    before each part."""
    files: list[_FileScan] = []
    line0: list[int] = []
    for i, (part, got) in enumerate(zip(parts, scans, strict=True)):
        if i == 0 or part.fid != parts[i - 1].fid:
            files.append(_FileScan({**got.record, **dict.fromkeys(_COUNTS, 0)}, [], False, None))
        f = files[-1]
        line0.append(f.lines)
        for k in _COUNTS:
            f.record[k] += got.record[k]
        room = _MAX_EXAMPLES - len(f.bad_examples)
        f.bad_examples.extend((f.lines + line, why) for line, why in got.bad_examples[:room])
        f.field_seen = f.field_seen or got.field_seen
        f.keys = f.keys if f.keys is not None else got.keys
        f.lines += got.lines
    return files, line0


def _write_index(out: Path, scratch: Path, parts: list[_Part], scans: list[_FileScan],
                 ignored: list[str], text_field: str, id_field: str | None,
                 check: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
    """On rank 0: the stats of every part's scan, ``check(stats)``, then the parts'
    folders in ``scratch`` concatenated into the index ``out`` (replaced atomically)."""
    from clusterclip.storage.atomic import atomic_path

    file_scans, line0 = _by_file(parts, scans)
    files, stats = _combine(file_scans, ignored, text_field, id_field)
    folders = [scratch / p.name for p in parts]
    if id_field:
        stats.update(_id_stats(_read_ids(folders)))
    if check is not None:
        check(stats)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for k in _ARRAYS:
            _concatenate([p / f"{k}.npy" for p in folders], tmp / f"{k}.npy",
                         np.dtype(_DTYPES[k]), stats["documents"],
                         line0 if k == "line" else None)
        if id_field:
            with open(tmp / "ids.jsonl", "wb") as fh:
                for p in folders:
                    with open(p / "ids.jsonl", "rb") as src:
                        shutil.copyfileobj(src, fh)
        _write_meta(tmp, text_field, id_field, files, stats)
    return stats


def _read_ids(parts: list[Path]) -> Iterator[Any]:
    for p in parts:
        with open(p / "ids.jsonl", encoding="utf-8") as fh:
            yield from (json.loads(line) for line in fh)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the scan itself says why it cannot read it


def _concatenate(parts: list[Path], out: Path, dtype: np.dtype, n: int,
                 plus: list[int] | None = None) -> None:
    """Write the 1-D ``.npy`` files ``parts`` one after another as one ``.npy`` of ``n``
    values, streaming (the bytes ``np.save`` writes for their concatenation), ``plus[j]``
    added to every value of part ``j`` when given."""
    with open(out, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                 "shape": (n,)})
        for j, p in enumerate(parts):
            a = np.load(p, allow_pickle=False)  # one part's column: 8 B per document at most
            if plus is not None and plus[j]:
                a += plus[j]
            if a.size:
                fh.write(memoryview(np.ascontiguousarray(a)).cast("B"))


def _int_chunks(a: np.ndarray) -> Iterator[int]:
    """The values of ``a`` as Python ints, converted a chunk at a time."""
    for s in range(0, len(a), _CHUNK):
        yield from a[s:s + _CHUNK].tolist()


def _keys_at(path: Path, kind: str, address: int, nbytes: int) -> list[str]:
    raw = next(readers.read_jsonl_lines(path, kind, [(address, nbytes)]))
    return sorted(readers.decode_record(path, raw))[:10]


def _parquet_range(path: Path, lo: int, hi: int, columns: list[str] | None
                   ) -> Iterator[dict[str, Any]]:
    """Rows ``lo..hi-1`` of a Parquet file, one row group in memory at a time."""
    pf = readers._parquet_file(path)
    columns = readers.present_columns(pf, columns)
    starts = readers.parquet_row_groups(path)
    for g in range(len(starts) - 1):
        a, b = max(lo, starts[g]), min(hi, starts[g + 1])
        if a >= b:
            continue
        if columns == []:  # none of the asked columns exist: rows without fields
            yield from ({} for _ in range(b - a))
            continue
        table = pf.read_row_group(g, columns=columns)
        yield from table.slice(a - starts[g], b - a).to_pylist()
