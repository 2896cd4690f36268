"""Clusters a person can read: ``clusters.md`` (every cluster, largest first) and the
``top_terms`` / ``nearest_docs`` / ``nearest_text`` columns of ``clusters.csv``.

Reads the corpus through its index in blocks (:meth:`Corpus.iter_texts`), so
the texts are never all in memory; the numbers come from
:mod:`clusterclip.report.terms`. ``clusters.md`` is a separate file linked
from report.md, so that report.md stays short for K = 2,000: one section per
cluster with its size, corpus share, share of each schedule, top terms and the
documents nearest its centroid, one line each.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

import numpy as np

from clusterclip.report.reading import TEXT_BLOCK, read_corpus
from clusterclip.report.terms import (
    MAX_FEATURES,
    MIN_DF,
    NEAREST_DOCS,
    TERMS_FIRST_ROUND,
    TERMS_PER_CLUSTER,
    TOKEN_PATTERN,
    nearest_documents,
    one_line,
    round_ends,
    sample_order,
    sample_sentence,
    sample_summary,
    sampled_terms,
)

SNIPPET_CHARS = 200  # per document in clusters.md (and the report's examples)
CSV_SNIPPET_CHARS = 100
FILE = "clusters.md"
VOCABULARY_RULE = (f"c-TF-IDF over lowercased tokens matching `{TOKEN_PATTERN}` (words and "
                   "dotted identifiers of 2+ characters) minus scikit-learn's English stop "
                   f"words, kept when in at least {MIN_DF} documents (at most the "
                   f"{MAX_FEATURES:,} most frequent)")


def readable_clusters(corpus, labels: np.ndarray, scores: np.ndarray | None, k: int,
                      block: int = TEXT_BLOCK, seed: int = 0,
                      per_cluster: int = TERMS_PER_CLUSTER,
                      first_round: int | None = TERMS_FIRST_ROUND,
                      progress: bool = False, field: str | None = None,
                      workers: int | None = None) -> dict[str, Any]:
    """Top terms and nearest documents of every cluster.

    ``corpus`` a :class:`~clusterclip.corpus.Corpus` (None: no terms, no texts),
    ``labels`` int[N], ``scores`` float[N] cosine to the centroid (None: no
    nearest documents). The terms come from at most ``per_cluster`` documents of
    each cluster, drawn with ``seed`` and read in rounds from ``first_round`` documents
    until the terms are stable (:func:`~clusterclip.report.terms.sampled_terms`; None: one
    round); ``progress``: a progress bar of the documents read for them. ``field``: the
    corpus field read in the same pass as the first round's texts, for every document
    (:func:`~clusterclip.report.reading.read_corpus`, by ``workers`` processes: the same
    result for any number). Returns ``terms`` (K lists of strings), ``nearest`` (K int64
    arrays of document indices), ``snippets`` (document index -> one line of at most
    :data:`SNIPPET_CHARS` characters), ``terms_sample`` (None without a corpus, else
    :func:`~clusterclip.report.terms.sample_summary`) and ``field`` (None without
    ``field``, else its ``(codes, values)`` as
    :meth:`~clusterclip.corpus.Corpus.field_codes` returns them).
    """
    terms: list[list[str]] = [[] for _ in range(k)]
    nearest = [np.zeros(0, dtype=np.int64) for _ in range(k)]
    snippets: dict[int, str] = {}
    sample = coded = None
    if corpus is not None:
        order = sample_order(labels, k, per_cluster, seed,
                             ordered=len(round_ends(first_round, per_cluster)) > 1)
        fields: list[tuple[np.ndarray | None, list[str] | None]] = []

        def count(indices: np.ndarray):
            got = read_corpus(corpus, labels, indices, k, None if fields else field,
                              workers, block, progress)
            fields.append((got.codes, got.values))
            return got.counts

        got = sampled_terms(order, count, first_round)
        if field is not None:
            if not fields:  # no round ran (no document in a cluster): the field alone
                count(np.zeros(0, dtype=np.int64))
            coded = fields[0]
        terms = got.terms
        sample = sample_summary(got, first_round, per_cluster, seed)
    if scores is not None:
        nearest = nearest_documents(labels, scores, k, NEAREST_DOCS)
        if corpus is not None:
            wanted = np.unique(np.concatenate(nearest)) if k else np.zeros(0, np.int64)
            for i, t in corpus.iter_texts_at(wanted):
                snippets[int(i)] = one_line(t, SNIPPET_CHARS)
    return {"terms": terms, "nearest": nearest, "snippets": snippets, "terms_sample": sample,
            "field": coded}


def csv_columns(readable: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and K rows of the readable columns of clusters.csv: ``top_terms``
    (space-separated, best first), ``nearest_docs`` (space-separated document
    indices, nearest first) and ``nearest_text`` (the nearest document's first
    :data:`CSV_SNIPPET_CHARS` characters)."""
    rows = []
    for terms, docs in zip(readable["terms"], readable["nearest"], strict=True):
        first = readable["snippets"].get(int(docs[0]), "") if docs.size else ""
        rows.append([" ".join(terms), " ".join(str(int(i)) for i in docs),
                     first[:CSV_SNIPPET_CHARS]])
    return ["top_terms", "nearest_docs", "nearest_text"], rows


# A cell starting with one of these is a formula to a spreadsheet (=HYPERLINK(...)).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_line(fields: list[str]) -> str:
    """One CSV line (RFC 4180 quoting where needed), without the line end; a field a
    spreadsheet would run as a formula (starting with ``= + - @``, a tab or a carriage
    return: text of the corpus) is written with a leading ``'``, as text."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(
        ["'" + f if f.startswith(_FORMULA_START) else f for f in fields])
    return buf.getvalue()


def by_size(sizes: np.ndarray) -> np.ndarray:
    """Cluster ids, largest first, ties to the lower id."""
    ids = np.arange(sizes.size)
    return ids[np.lexsort((ids, -np.asarray(sizes)))]


def render_clusters_md(readable: Mapping[str, Any], sizes: np.ndarray,
                       shares: Mapping[str, np.ndarray],
                       token_shares: Mapping[str, np.ndarray] | None = None) -> str:
    """Markdown text of ``clusters.md``: every non-empty cluster, largest first.

    ``shares``: schedule name -> float[K] share of the schedule's samples;
    ``token_shares``: name (schedules and ``corpus``) -> float[K] share of tokens."""
    from clusterclip.report.markdown import escape_inline

    sizes = np.asarray(sizes)
    total = max(1, int(sizes.sum()))
    live = by_size(sizes)
    live = live[sizes[live] > 0]
    names = list(shares)
    lines = ["# Clusters, largest first", "",
             f"{live.size:,} non-empty clusters of {int(sizes.sum()):,} documents. For each: "
             "its size, its share of the corpus and of each schedule of the report, its top "
             f"terms ({VOCABULARY_RULE}) and the {NEAREST_DOCS} documents nearest its centroid "
             f"(highest cosine similarity; first {SNIPPET_CHARS} characters). The same "
             "numbers are in `clusters.csv`.", ""]
    sampled = sample_sentence(readable.get("terms_sample"))
    if sampled:
        lines += [sampled, ""]
    if not readable["snippets"] and not any(readable["terms"]):
        lines += ["No corpus index in the work directory: no terms or documents.", ""]
    for rank, c in enumerate(live.tolist(), start=1):
        share = " · ".join(f"{name} {100 * float(shares[name][c]):.2f}%" for name in names)
        tokens = " · ".join(f"{name} {100 * float(t[c]):.2f}%"
                            for name, t in (token_shares or {}).items())
        terms = ", ".join(f"`{t}`" for t in readable["terms"][c]) or "-"
        lines += [f"### {rank}. Cluster {c}", "",
                  f"{int(sizes[c]):,} documents, {100 * sizes[c] / total:.2f}% of the corpus"
                  + (f"; share of the schedule: {share}" if share else "")
                  + (f"; share of the tokens: {tokens}" if tokens else "") + ".", "",
                  f"Top terms: {terms}", ""]
        for i in readable["nearest"][c].tolist():
            text = readable["snippets"].get(i)
            lines.append(f"- doc {i}: {escape_inline(text) if text else '(no text)'}")
        lines.append("")
    return "\n".join(lines)
