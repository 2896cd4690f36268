"""``export --format megatron``: the schedule as a Megatron-LM indexed dataset (``.bin``/``.idx``).

Layout of the output folder ``OUT``:

- ``OUT/text_document.bin`` / ``OUT/text_document.idx``: written with
  ``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder``; Megatron-LM
  reads them with ``--data-path OUT/text_document``. **One Megatron document
  per schedule position** (this rank's share), in schedule order, so a document
  the schedule repeats is stored as often as it is scheduled: one epoch over the
  file has exactly the schedule's per-document and per-cluster counts.
- Each document holds ``tokenizer(text, add_special_tokens=False)["input_ids"]``
  followed by one end-of-document token (the tokenizer's ``eos_token_id``, else
  its ``sep_token_id``), as Megatron-LM's ``preprocess_data.py --append-eod``
  does: Megatron packs documents into fixed-length samples across document
  boundaries, and the EOD token is what separates them (and what
  ``--reset-position-ids``/``--eod-mask-loss`` look for).
- Token dtype chosen from the vocabulary size as Megatron-LM does
  (``DType.optimal_dtype(len(tokenizer))``: uint16 below 65500 ids, else int32).
- ``OUT/documents.npy``: int64 ``[rows, 3]``, row ``i`` = Megatron document
  ``i``: its global ``position`` in the schedule, its ``doc_index`` (corpus
  order) and its cluster ``label``, so the labels stay with the tokens.
- ``OUT/_export.json``: the summary (tokenizer, dtype, EOD id, token totals per
  cluster, the hash of all tokens written).

Streamed like the other formats (one block of positions at a time); each
distinct document of a block is tokenized once, in batched calls, and the
token ids of recently exported documents are kept for reuse up to
:data:`CACHE_TOKENS` tokens (a schedule repeats documents; tokenizing is most
of the export's time).

Built in a temporary folder, re-read with ``megatron.core``'s ``IndexedDataset``
and checked before it is moved into place: one sequence per document, the
number of documents equal to this rank's positions, the sequence lengths equal
to what was written, the documents laid end to end in the ``.bin`` and every
token re-read with megatron's reader (in large slices) hashing to the SHA-256 of
the ``.bin`` as it was written (taken while writing, also the output folder's
record of the file), and the sidecar equal to the schedule's positions,
documents and labels.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

PREFIX = "text_document"
DOCUMENTS = "documents.npy"
DOCUMENT_COLUMNS = ("position", "doc_index", "label")
#: Texts per tokenizer call: batched (the fast tokenizer's per-call overhead is paid once per
#: batch), small enough that the Python lists of token ids it returns stay small.
TOKENIZE_BATCH = 256
#: Token ids of recently exported documents kept for reuse (a schedule repeats documents,
#: tokenizing dominates the export's time): at most this many tokens, least recently used
#: evicted (64 MiB as uint16, 128 MiB as int32).
CACHE_TOKENS = 1 << 25
#: Positions from which worker processes tokenize by default (below, starting them, a
#: second or two each, would cost more than they save).
POOL_MIN_POSITIONS = 1 << 16
#: Documents per job of the worker processes: a block's documents missing from the cache go
#: out in jobs of at most this many (a fraction of a second of tokenizing each), so that no
#: worker waits long for another's last job (the first blocks hold most of the new
#: documents: one job per block left one worker tokenizing a fifth of them alone).
JOB_DOCUMENTS = 512
#: Tokens per read of the re-read check (megatron.core's reader; 8 MiB as uint16).
CHECK_TOKENS = 1 << 22


#: The module the ``.bin``/``.idx`` are written and re-read with (the ``megatron`` extra).
MODULE = "megatron.core.datasets.indexed_dataset"


def _missing() -> InputError:
    return InputError(f"format megatron needs {MODULE}; install the `megatron` extra "
                      f"(pip install 'clusterclip[megatron]')", params=("format",))


def require() -> None:
    """InputError unless :data:`MODULE`'s file is installed, found without importing
    ``megatron.core`` (seconds of imports, torch's among them, that :func:`_write` makes
    while worker processes tokenize the first blocks; :func:`indexed_dataset` raises the
    same InputError if that import fails)."""
    from importlib.util import find_spec

    try:
        spec = find_spec("megatron")  # a namespace or a regular package: not executed
    except (ImportError, ValueError):
        spec = None
    where = [] if spec is None else list(spec.submodule_search_locations or [])
    if not any((Path(p) / "core" / "datasets" / "indexed_dataset.py").is_file()
               for p in where):
        raise _missing()


def indexed_dataset() -> Any:
    """``megatron.core.datasets.indexed_dataset`` (imported without its CPU-only warnings
    about Transformer Engine and Apex, which this module does not use)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from megatron.core.datasets import indexed_dataset as m
        except ImportError:
            raise _missing() from None
    return m


def check_tokenizer_given(fmt: str, tokenizer: Any) -> None:
    """InputError unless a tokenizer is given for megatron and only for megatron (reads
    nothing, imports nothing: checked before the writer's libraries are imported)."""
    if fmt != "megatron" and tokenizer is not None:
        raise InputError(f"tokenizer is only for format megatron, not format {fmt}",
                         params=("tokenizer", "format"))
    if fmt == "megatron" and tokenizer is None:
        raise InputError("format megatron needs tokenizer PATH (a folder holding a "
                         "Hugging Face AutoTokenizer)", params=("format", "tokenizer"))


def check_tokenizer_option(fmt: str, tokenizer: Any) -> Any:
    """The tokenizer for ``fmt``: required for megatron (a path is loaded offline with
    :func:`clusterclip.tokens.load_tokenizer`), refused for every other format
    (:func:`check_tokenizer_given`)."""
    check_tokenizer_given(fmt, tokenizer)
    if fmt != "megatron":
        return None
    if isinstance(tokenizer, (str, os.PathLike)):
        from clusterclip.tokens import load_tokenizer

        tokenizer = load_tokenizer(tokenizer)
    eod_token_id(tokenizer)
    return tokenizer


def eod_token_id(tokenizer: Any) -> int:
    """The end-of-document token appended to every document: eos, else sep."""
    for attr in ("eos_token_id", "sep_token_id"):
        tid = getattr(tokenizer, attr, None)
        if tid is not None:
            return int(tid)
    raise InputError(f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)}: has "
                     f"neither an eos nor a sep token to end each document with",
                     params=("tokenizer",))


def token_dtype(tokenizer: Any) -> type:
    """The ``.bin`` token dtype Megatron-LM's ``preprocess_data.py`` picks for this vocabulary
    (``DType.optimal_dtype``'s rule, written out so that workers can start tokenizing before
    ``megatron.core``, seconds of imports, is loaded; :func:`_open_builder` checks it against
    megatron's own)."""
    return np.uint16 if len(tokenizer) < 65500 else np.int32


def token_block(encoder: Any, texts: list[str], eod: int | None, dtype: Any,
                batch: int = TOKENIZE_BATCH) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, lengths)``: the ids of each of ``texts`` (:func:`clusterclip.tokens.ids_of`,
    ``encoder`` a tokenizer or its :class:`clusterclip.tokens.BackendIds`), each followed by
    ``eod`` when given, end to end in one array of ``dtype``, and how many belong to each
    text (int64). Batched calls; each batch's ids go into the array in one conversion.
    RuntimeError if an id does not fit ``dtype``."""
    from itertools import chain

    from clusterclip.tokens import ids_of

    parts, lengths = [], []
    for a in range(0, len(texts), batch):
        ids = ids_of(encoder, texts[a:a + batch])
        if eod is not None:
            for x in ids:
                x.append(eod)
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lens.sum()))
        top = np.iinfo(dtype).max
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) > top):
            bad = int(flat[(flat < 0) | (flat > top)][0])
            raise RuntimeError(f"token id {bad} does not fit {dtype.__name__} "
                               f"(0 to {top})")
        parts.append(flat.astype(dtype))
        lengths.append(lens)
    if not parts:
        return np.zeros(0, dtype), np.zeros(0, np.int64)
    return np.concatenate(parts), np.concatenate(lengths)


def token_ids(encoder: Any, texts: list[str], eod: int | None, dtype: Any,
              batch: int = TOKENIZE_BATCH) -> list[np.ndarray]:
    """``tokenizer(text, add_special_tokens=False)["input_ids"]`` (+ ``eod``) of each text as
    an array of ``dtype`` (:func:`token_block`, one array per text)."""
    return _split(*token_block(encoder, texts, eod, dtype, batch))


def _split(tokens: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Each text's own copy of its tokens (a copy: the cache must not keep a whole block's
    array alive for one of its documents)."""
    ends = np.cumsum(lengths).tolist()
    return [tokens[e - n:e].copy() for e, n in zip(ends, lengths.tolist(), strict=True)]


class _TokenCache:
    """Token arrays by document index, at most ``budget`` tokens, least recently used out."""

    def __init__(self, budget: int) -> None:
        self.budget, self.tokens = budget, 0
        self.arrays: OrderedDict[int, np.ndarray] = OrderedDict()

    def get(self, doc: int) -> np.ndarray | None:
        arr = self.arrays.get(doc)
        if arr is not None:
            self.arrays.move_to_end(doc)
        return arr

    def put(self, doc: int, arr: np.ndarray) -> None:
        if arr.size > self.budget:
            return
        self.arrays[doc] = arr
        self.tokens += arr.size
        while self.tokens > self.budget:
            self.tokens -= self.arrays.popitem(last=False)[1].size


def _texts(corpus: Any, docs: np.ndarray) -> list[str]:
    """The texts of the ascending distinct ``docs`` (read through the corpus index)."""
    from clusterclip.export.rows import record_texts

    return [text for _, _, text in record_texts(corpus, docs)]


def _corpus_part(corpus: Any, docs: np.ndarray) -> Any:
    """A :class:`clusterclip.corpus.Corpus` of the ascending distinct ``docs`` of ``corpus``
    only (document ``k`` of the part is ``docs[k]``): what a worker process needs to read
    their texts itself, a few arrays of ``len(docs)`` and the files they are in, not the
    whole index. InputError (naming the corpus's own document) for one without text."""
    from clusterclip.corpus import Corpus
    from clusterclip.export.rows import no_text

    valid = np.asarray(corpus.valid[docs], dtype=bool)
    if not valid.all():
        raise no_text(int(docs[np.argmin(valid)]))
    fids = np.asarray(corpus.file_id[docs])
    used, local = np.unique(fids, return_inverse=True)  # docs ascending: files in order
    firsts = np.searchsorted(local, np.arange(len(used))).tolist()
    files = [{**corpus.files[f], "first": a} for f, a in zip(used.tolist(), firsts,
                                                             strict=True)]
    arrays = {"file_id": local.astype(np.int32), "address": corpus.address[docs],
              "nbytes": corpus.nbytes[docs], "line": corpus.line[docs], "valid": valid,
              "text_len": corpus.text_lengths[docs]}
    return Corpus(files, arrays, corpus.text_field, None, {})


def _block_tokens(encoder: Any, corpus: Any, docs: np.ndarray, cache: _TokenCache, eod: int,
                  dtype: Any) -> tuple[list[np.ndarray], np.ndarray]:
    """(token arrays of the block's distinct documents, index of each position's array);
    only the texts of the documents not in the cache are read."""
    uniq, inverse = np.unique(docs, return_inverse=True)
    arrays = [cache.get(d) for d in uniq.tolist()]
    missing = [k for k, a in enumerate(arrays) if a is None]
    new = token_ids(encoder, _texts(corpus, uniq[missing]), eod, dtype)
    for k, arr in zip(missing, new, strict=True):
        arrays[k] = arr
        cache.put(int(uniq[k]), arr)
    return arrays, inverse  # type: ignore[return-value]


def _tokenized(batches: Iterator[dict[str, list[Any]]], corpus: Any, encoder: Any,
               cache: _TokenCache, eod: int, dtype: Any, workers: int
               ) -> Iterator[tuple[dict[str, list[Any]], np.ndarray, list[np.ndarray],
                                   np.ndarray]]:
    """``(batch, docs, arrays, inverse)`` of each block in order (:func:`_block_tokens`).

    With ``workers`` > 1 the documents not in the cache are read and tokenized by worker
    processes (:func:`clusterclip.pool.worker_pool`, each holding a copy of ``encoder``:
    with a fast tokenizer its :class:`clusterclip.tokens.BackendIds`, so that a worker
    imports ``tokenizers``, not ``transformers``), a few jobs ahead of the block written: a
    block's documents go out in jobs of at most :data:`JOB_DOCUMENTS`, each a
    :func:`_corpus_part` from which the worker reads their texts itself, and each job's
    tokens come back as one array and its lengths (:func:`token_block`); a text's tokens
    do not depend on who tokenized it or when, so the output is the same for any number of
    workers and any job size (only which repeats the cache saves may differ)."""
    if workers <= 1:
        for batch in batches:
            docs = np.asarray(batch["doc_index"], dtype=np.int64)
            yield (batch, docs, *_block_tokens(encoder, corpus, docs, cache, eod, dtype))
        return
    from collections import deque

    from clusterclip.pool import worker_pool

    ahead: deque[tuple[Any, ...]] = deque()
    # Documents missing from the cache that a queued block sends to be tokenized, by how
    # many queued blocks need them: a later block takes them from the earlier one's result
    # (``fresh``) instead of sending them again; the last one puts them in the cache.
    wanted: dict[int, int] = {}
    fresh: dict[int, np.ndarray] = {}

    def jobs() -> Iterator[Any]:
        for batch in batches:
            docs = np.asarray(batch["doc_index"], dtype=np.int64)
            uniq, inverse = np.unique(docs, return_inverse=True)
            arrays = [cache.get(d) for d in uniq.tolist()]
            send = []
            for k in (k for k, a in enumerate(arrays) if a is None):
                d = int(uniq[k])
                if d not in wanted:
                    send.append(k)
                wanted[d] = wanted.get(d, 0) + 1
            parts = [send[a:a + JOB_DOCUMENTS] for a in range(0, len(send), JOB_DOCUMENTS)]
            ahead.append((batch, docs, uniq, arrays, send, inverse, max(1, len(parts))))
            for part in parts or [[]]:
                yield _corpus_part(corpus, uniq[part])

    with worker_pool(workers, _tokenizer_state, (encoder, eod, dtype)) as imap:
        done: list[np.ndarray] = []  # the tokens of the first queued block's jobs back so far
        taken = 0  # how many of its jobs
        for block in imap(_tokenize_job, jobs()):
            done.extend(_split(*block))
            taken += 1
            if taken < ahead[0][-1]:
                continue
            batch, docs, uniq, arrays, send, inverse, _ = ahead.popleft()
            fresh.update((int(uniq[k]), arr) for k, arr in zip(send, done, strict=True))
            done, taken = [], 0
            for k in (k for k, a in enumerate(arrays) if a is None):
                d = int(uniq[k])
                arrays[k] = fresh[d]
                wanted[d] -= 1
                if not wanted[d]:
                    del wanted[d]
                    cache.put(d, fresh.pop(d))
            yield batch, docs, arrays, inverse


def _tokenizer_state(encoder: Any, eod: int, dtype: Any) -> tuple[Any, int, Any]:
    # One process per core already: the tokenizer's own threads would only compete.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    return encoder, eod, dtype


def _tokenize_job(state: tuple[Any, int, Any], part: Any) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of every document of ``part`` (:func:`_corpus_part`), its texts read here."""
    encoder, eod, dtype = state
    return token_block(encoder, _texts(part, np.arange(len(part))), eod, dtype)


def _add_block(builder: Any, data: Any, tokens: np.ndarray, lengths: np.ndarray) -> None:
    """``builder.add_document(doc, [len(doc)])`` for each of the block's documents (``tokens``
    end to end, ``lengths``), in one write to ``data`` (the builder's ``.bin``, hashed as it
    goes): the same ``.bin`` and ``.idx``."""
    data.write(tokens.data)  # the array's own bytes, not a copy
    start = len(builder.sequence_lengths)
    builder.sequence_lengths.extend(lengths.tolist())
    builder.document_indices.extend(range(start + 1, start + len(lengths) + 1))


def _open_builder(prefix: str, tokenizer: Any, dtype: Any) -> tuple[Any, Any]:
    """megatron.core's ``IndexedDatasetBuilder`` for ``prefix`` (RuntimeError if its dtype
    for this vocabulary is not :func:`token_dtype`'s) and a
    :class:`clusterclip.storage.digests.HashingWriter` over its ``.bin``: the file's SHA-256
    as it is written, for the check and for the output folder's record (not read again)."""
    from clusterclip.storage.digests import HashingWriter

    m = indexed_dataset()
    if m.DType.optimal_dtype(len(tokenizer)) != dtype:
        raise RuntimeError(f"megatron.core picks {m.DType.optimal_dtype(len(tokenizer))} for "
                           f"{len(tokenizer)} ids, not {dtype}")
    builder = m.IndexedDatasetBuilder(m.get_bin_path(prefix), dtype=dtype)
    return builder, HashingWriter(builder.data_file)


def _write(batches: Iterator[dict[str, list[Any]]], corpus: Any, directory: Path,
           tokenizer: Any, count: int, cache_tokens: int | None = None, workers: int = 1
           ) -> dict[str, Any]:
    """Write ``PREFIX.bin/.idx`` and ``DOCUMENTS`` (the texts read from ``corpus`` as they are
    needed); return what was written (for the check).
    ``megatron.core`` is imported once the first block is tokenized: with workers, while
    they tokenize the next ones."""
    from clusterclip.tokens import backend_ids

    dtype = token_dtype(tokenizer)
    eod = eod_token_id(tokenizer)
    encoder = backend_ids(tokenizer) or tokenizer
    prefix = str(directory / PREFIX)
    docs_out = np.lib.format.open_memmap(directory / DOCUMENTS, mode="w+", dtype="<i8",
                                         shape=(count, len(DOCUMENT_COLUMNS)))
    opened = None
    h_tokens, h_lengths = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
    by_label: dict[int, int] = {}
    cache = _TokenCache(CACHE_TOKENS if cache_tokens is None else cache_tokens)
    rows = 0
    try:
        # each distinct document of a block is tokenized once (or found in the cache)
        for batch, docs, arrays, inverse in _tokenized(batches, corpus, encoder, cache, eod,
                                                       dtype, workers):
            n = len(docs)
            lengths = np.array([len(a) for a in arrays], dtype=np.int64)[inverse]
            tokens = (np.concatenate([arrays[j] for j in inverse.tolist()]) if n
                      else np.zeros(0, dtype))
            opened = opened or _open_builder(prefix, tokenizer, dtype)
            _add_block(*opened, tokens, lengths)
            h_tokens.update(tokens.data)  # the same digest as one update per document
            h_lengths.update(lengths.data)
            lab = np.asarray(batch["label"], dtype=np.int64)
            docs_out[rows:rows + n] = np.stack(
                [np.asarray(batch["position"], dtype=np.int64), docs, lab], axis=1)
            ulab, where = np.unique(lab, return_inverse=True)
            for c, t in zip(ulab.tolist(), np.bincount(where, weights=lengths).tolist(),
                            strict=True):
                by_label[c] = by_label.get(c, 0) + int(t)
            rows += n
    finally:
        builder, data = opened or _open_builder(prefix, tokenizer, dtype)
        bin_sha256 = data.finish()  # flushed: the file as it stays (finalize closes it)
        builder.finalize(indexed_dataset().get_idx_path(prefix))
        docs_out.flush()
        del docs_out
    if rows != count:
        raise RuntimeError(f"{rows} documents written, {count} positions to export")
    return {"dtype": dtype, "eod": eod, "rows": rows, "tokens_hash": h_tokens.hexdigest(),
            "bin_sha256": bin_sha256,
            "lengths_hash": h_lengths.hexdigest(),
            "tokens_by_label": {str(c): by_label[c] for c in sorted(by_label)}}


def _tokens_digest(ds: Any, lengths: np.ndarray, bin_path: Path) -> str | None:
    """The SHA-256 of every document's tokens as ``ds`` (megatron.core's ``IndexedDataset``)
    reads them, in order, or None when its pointers do not lay the documents end to end from
    the start of the ``.bin`` or the file holds anything else. Each document is read at its
    pointer, so with the pointers checked the documents' tokens are the file's bytes: read
    in slices of :data:`CHECK_TOKENS` tokens with megatron's own reader, one hash update
    each (the digest of one update per document: equal to the ``.bin``'s as written)."""
    size = np.dtype(ds.index.dtype).itemsize
    ends = np.cumsum(lengths) * size
    pointers = np.asarray(ds.index.sequence_pointers, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    if (not np.array_equal(pointers[1:], ends[:-1]) or pointers[:1].any()
            or bin_path.stat().st_size != total):
        return None
    h = hashlib.sha256()
    for a in range(0, total // size, CHECK_TOKENS):
        h.update(ds.bin_reader.read(dtype=ds.index.dtype, offset=a * size,
                                    count=min(CHECK_TOKENS, total // size - a)).data)
    return h.hexdigest()


def _check(directory: Path, written: dict[str, Any], schedule: np.ndarray, labels: np.ndarray,
           first: int, step: int, count: int) -> None:
    """RuntimeError unless the folder re-reads (megatron.core) as ``written``."""
    m = indexed_dataset()
    prefix = str(directory / PREFIX)
    ds = m.IndexedDataset(prefix, mmap=False)
    where = f"{directory}: {PREFIX}"
    if len(ds) != count or not np.array_equal(ds.document_indices, np.arange(count + 1)):
        raise RuntimeError(f"{where} holds {len(ds)} sequences in {len(ds.document_indices) - 1} "
                           f"documents, not {count} one-sequence documents")
    if ds.index.dtype != written["dtype"]:
        raise RuntimeError(f"{where} has tokens of {ds.index.dtype}, not {written['dtype']}")
    lengths = np.asarray(ds.sequence_lengths, dtype=np.int64)
    if (hashlib.blake2b(lengths.data, digest_size=16).hexdigest() != written["lengths_hash"]
            or _tokens_digest(ds, lengths, Path(m.get_bin_path(prefix)))
            != written["bin_sha256"]):
        raise RuntimeError(f"{where}: the tokens re-read are not the tokens written")
    docs = np.load(directory / DOCUMENTS, mmap_mode="r")
    want = np.arange(first, first + count * step, step, dtype=np.int64)
    if docs.shape != (count, len(DOCUMENT_COLUMNS)) or not np.array_equal(docs[:, 0], want):
        raise RuntimeError(f"{directory / DOCUMENTS}: rows are not positions {first}, "
                           f"{first + step}, ... in order")
    if not np.array_equal(docs[:, 1], schedule[want]) or not np.array_equal(
            docs[:, 2], labels[schedule[want]]):
        raise RuntimeError(f"{directory / DOCUMENTS}: rows do not hold the schedule's documents "
                           f"and labels")
    del ds


def pool_workers(workers: int | None, count: int) -> int:
    """The processes that tokenize an export of ``count`` positions: ``workers`` when given,
    else the CPUs this process may use, one below :data:`POOL_MIN_POSITIONS` positions."""
    if workers is not None:
        return workers
    from clusterclip.pool import available_cpus

    return 1 if count < POOL_MIN_POSITIONS else available_cpus()


def write_verified(batches: Iterator[dict[str, list[Any]]], directory: Path, tokenizer: Any,
                   schedule: np.ndarray, labels: np.ndarray, first: int, step: int,
                   count: int, cache_tokens: int | None = None, workers: int | None = None,
                   *, corpus: Any) -> dict[str, Any]:
    """Write ``batches`` (from :func:`clusterclip.export.iter_batches`, without texts) of
    ``corpus`` into ``directory``, re-read and check it; return the format's part of the
    summary. A block reads the texts of the documents not in the token cache only (a
    schedule repeats documents: most of a long one's are there). ``workers``: processes
    reading and tokenizing side by side (:func:`_tokenized`; the same bytes for any
    number); None: the CPUs this process may use, one below :data:`POOL_MIN_POSITIONS`
    positions."""
    workers = pool_workers(workers, count)
    written = _write(batches, corpus, directory, tokenizer, count, cache_tokens, workers)
    _check(directory, written, schedule, labels, first, step, count)
    return {"files": [f"{PREFIX}.bin", f"{PREFIX}.idx", DOCUMENTS], "data_prefix": PREFIX,
            "documents": DOCUMENTS, "documents_columns": list(DOCUMENT_COLUMNS),
            "tokenizer": str(getattr(tokenizer, "name_or_path", "")),
            "vocab_size": len(tokenizer), "token_dtype": np.dtype(written["dtype"]).name,
            "eod_token_id": written["eod"],
            "tokens": sum(written["tokens_by_label"].values()),
            "tokens_by_label": written["tokens_by_label"],
            "verified": {"every_position_once_in_order": True,
                         "tokens_hash": written["tokens_hash"],
                         "lengths_hash": written["lengths_hash"]}}
