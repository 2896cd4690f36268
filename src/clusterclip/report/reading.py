"""The report's pass over the corpus: the texts of the terms' sample and, for
``--label-field``, that field of every document, in one pass over each file, on every core.

The documents to read are cut into pieces (a run of one file's documents; a gzip file is
one piece, as it is read from its start), the pieces dealt to worker processes
(:func:`clusterclip.pool.worker_pool`, one per CPU the process may use; one process below
:data:`POOL_MIN_DOCUMENTS` documents to read), and each worker counts the terms of its
pieces' sampled texts (:class:`~clusterclip.report.terms.TermCounter`) and codes their
field values (:class:`~clusterclip.corpus.index.FieldCoder`). The parent sums the term
counts (:func:`~clusterclip.report.terms.merge_counts`: integer sums, whatever the
split) and joins the field codes in file order (values numbered by first appearance in
the corpus), so the result is the same for any number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.report.terms import TermCounter, TermCounts, merge_counts

TEXT_BLOCK = 4096  # documents per CountVectorizer call
# Fewer documents to read than this: one process (starting workers costs about a second).
POOL_MIN_DOCUMENTS = 1 << 15
PIECES_PER_WORKER = 4  # pieces of a file per worker (balance against the other's load)


@dataclass
class Piece:
    """Documents ``start .. stop - 1`` of one file: ``indices`` (ascending) those whose
    texts are counted, ``labels`` their clusters."""

    start: int
    stop: int
    indices: np.ndarray
    labels: np.ndarray


@dataclass
class CorpusRead:
    """``counts``: the term counts of the sampled texts, every term seen
    (:func:`~clusterclip.report.terms.merge_counts` applies the vocabulary rule);
    ``codes`` int32[N] and ``values``: the field of every document
    (:meth:`~clusterclip.corpus.Corpus.field_codes`; None without a field)."""

    counts: TermCounts
    codes: np.ndarray | None
    values: list[str] | None


def report_workers(workers: int | None, documents: int) -> int:
    """Processes reading ``documents`` documents: ``workers`` when given, else the CPUs
    this process may use (:func:`clusterclip.pool.available_cpus`), 1 below
    :data:`POOL_MIN_DOCUMENTS`."""
    from clusterclip.pool import available_cpus, check_workers

    if workers is not None:
        check_workers(None, workers)
        return workers
    return 1 if documents < POOL_MIN_DOCUMENTS else available_cpus()


def pieces(corpus, indices: np.ndarray, labels: np.ndarray, whole: bool, parts: int
           ) -> list[Piece]:
    """The documents to read, in file order, as pieces of about ``1 / parts`` of them
    (``whole``: every document, else ``indices``); ``labels`` the clusters of
    ``indices``."""
    bounds = np.array([f["first"] for f in corpus.files] + [len(corpus)], dtype=np.int64)
    out = []
    per = max(1, -(-(len(corpus) if whole else indices.size) // max(1, parts)))
    for fid, f in enumerate(corpus.files):
        lo, hi = int(bounds[fid]), int(bounds[fid + 1])
        a, b = np.searchsorted(indices, [lo, hi])
        if hi == lo or (not whole and a == b):
            continue
        if f["kind"] == "jsonl.gz":  # decompressed from its start: one piece
            cuts = [lo, hi]
        elif whole:
            cuts = list(range(lo, hi, per)) + [hi]
        else:
            cuts = [lo, *indices[a:b][per::per].tolist(), hi]
        for s, e in zip(cuts[:-1], cuts[1:], strict=True):
            i, j = np.searchsorted(indices, [s, e])
            out.append(Piece(s, e, indices[i:j], labels[i:j]))
    return out


def _deal(items: list[Piece], workers: int, whole: bool) -> list[list[Piece]]:
    """``items`` dealt to ``workers`` shares of about equal documents (largest first, to
    the least loaded; ties to the lower share), each share in file order."""
    shares: list[list[Piece]] = [[] for _ in range(workers)]
    load = np.zeros(workers, dtype=np.int64)
    size = [(p.stop - p.start) if whole else p.indices.size for p in items]
    for j in sorted(range(len(items)), key=lambda j: (-size[j], j)):
        w = int(np.argmin(load))
        shares[w].append(items[j])
        load[w] += size[j]
    return [sorted(s, key=lambda p: p.start) for s in shares if s]


def _texts(corpus, piece: Piece, field: str | None, coder) -> Iterator[str | None]:
    """The texts of ``piece.indices``; with ``field``, ``coder`` gets that field of every
    document of the piece, read in the same pass."""
    if field is None:
        for _, t in corpus.iter_texts_at(piece.indices):
            yield t
        return
    wanted = piece.indices.tolist()
    at = 0
    for i, rec in corpus.iter_records(piece.start, piece.stop,
                                      columns=[corpus.text_field, field]):
        coder.add(rec.get(field))
        if at < len(wanted) and wanted[at] == i:
            at += 1
            yield corpus.text_of(i, rec)


def _read_share(state: dict[str, Any], share: list[Piece]
                ) -> tuple[TermCounts, list[tuple[np.ndarray, list[str]]]]:
    """Term counts of ``share``'s sampled texts (every term seen) and, with a field, its
    pieces' field codes (values numbered within each piece)."""
    from clusterclip.corpus.index import FieldCoder

    corpus, field, block = state["corpus"], state["field"], state["block"]
    counter = TermCounter(state["k"])
    coded = []
    for piece in share:
        coder = FieldCoder() if field is not None else None
        texts: list[str | None] = []
        at = 0
        for t in _texts(corpus, piece, field, coder):
            texts.append(t)
            if len(texts) == block:
                counter.update(piece.labels[at:at + block], texts)
                state["done"](block)
                at, texts = at + block, []
        if texts:
            counter.update(piece.labels[at:], texts)
            state["done"](len(texts))
        if coder is not None:
            coded.append(coder.result())
    return counter.result(1, None), coded


def _worker_state(corpus_dir: Path, field: str | None, k: int, block: int, queue: Any
                  ) -> dict[str, Any]:
    from clusterclip.corpus import Corpus

    return {"corpus": Corpus.load(corpus_dir), "field": field, "k": k, "block": block,
            "done": queue.put}


def _join_codes(n: int, items: list[Piece], coded: list[tuple[np.ndarray, list[str]]]
                ) -> tuple[np.ndarray, list[str]]:
    """The pieces' codes as one int32[n], values numbered by first appearance in file
    order (``items`` and ``coded`` in file order)."""
    codes = np.full(n, -1, dtype=np.int32)
    index: dict[str, int] = {}
    for piece, (local, values) in zip(items, coded, strict=True):
        glob = np.array([index.setdefault(v, len(index)) for v in values] + [-1],
                        dtype=np.int32)
        codes[piece.start:piece.stop] = glob[local]  # local -1: the appended -1
    return codes, list(index)


def read_corpus(corpus, labels: np.ndarray, indices: np.ndarray, k: int,
                field: str | None = None, workers: int | None = None,
                block: int = TEXT_BLOCK, progress: bool = False) -> CorpusRead:
    """The term counts of the texts of ``indices`` (ascending; ``labels`` int[N] their
    clusters) and, with ``field``, that field of every document, in one pass over each
    file by :func:`report_workers` processes (the same result for any number; a corpus
    that :meth:`~clusterclip.corpus.Corpus.load` did not read is read in this process).
    ``block``: texts per CountVectorizer call; ``progress``: a progress bar of the texts
    counted."""
    from tqdm import tqdm

    indices = np.asarray(indices, dtype=np.int64)
    lab = np.asarray(labels[indices], dtype=np.int64) if indices.size else \
        np.zeros(0, dtype=np.int64)
    whole = field is not None
    n = report_workers(workers, len(corpus) if whole else int(indices.size))
    if corpus.directory is None:
        n = 1
    items = pieces(corpus, indices, lab, whole, n * PIECES_PER_WORKER)
    shares = _deal(items, n, whole)
    with tqdm(total=int(indices.size), desc="top terms", unit="doc", unit_scale=True,
              leave=False, disable=not progress) as bar:
        results = _run(corpus, shares, field, k, block, bar.update)
    order = [p for s in shares for p in s]
    coded = [c for _, cs in results for c in cs]
    codes = values = None
    if whole:
        by_start = sorted(range(len(order)), key=lambda j: order[j].start)
        codes, values = _join_codes(len(corpus), [order[j] for j in by_start],
                                    [coded[j] for j in by_start])
    return CorpusRead(merge_counts([r[0] for r in results], k, 1, None), codes, values)


def _run(corpus, shares: list[list[Piece]], field: str | None, k: int, block: int,
         done: Callable[[int], Any]) -> list[tuple[TermCounts, list]]:
    """:func:`_read_share` of each share: in this process for one, else one worker each,
    their progress reported through a queue."""
    if len(shares) <= 1:
        state = {"corpus": corpus, "field": field, "k": k, "block": block, "done": done}
        return [_read_share(state, s) for s in shares]
    from clusterclip.pool import following, progress_queue, worker_pool

    queue = progress_queue()
    with following(queue, done), \
            worker_pool(len(shares), _worker_state,
                        (corpus.directory, field, k, block, queue)) as imap:
        return list(imap(_read_share, shares))
