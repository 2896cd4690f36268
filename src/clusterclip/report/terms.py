"""What each cluster is about: top terms by class-based TF-IDF and the documents nearest
its centroid (pure: arrays and text blocks in, arrays and lists out).

c-TF-IDF (as in BERTopic) treats every cluster as one long document. With
``count[c, t]`` the times term ``t`` occurs in cluster ``c``'s documents,
``f_t = sum_c count[c, t]`` and ``A`` the mean number of (vocabulary) words per
non-empty cluster::

    score[c, t] = count[c, t] / sum_t' count[c, t']  *  log(1 + A / f_t)

so a term scores high when it is frequent in the cluster and rare across
clusters. Counting is scikit-learn's :class:`~sklearn.feature_extraction.text.CountVectorizer`
(its analyzer: lowercasing, token pattern, stop words), applied to blocks of
texts: the counts are accumulated into a sparse K x V matrix and no more than
one block of texts is ever in memory.

Vocabulary rule (:data:`TOKEN_PATTERN`, :data:`MIN_DF`, :data:`MAX_FEATURES`):
lowercased tokens that start with a letter or underscore, are at least two
characters long and may be dotted (``os.path.join``, ``__init__``,
``valueerror``), minus scikit-learn's English stop-word list; a term must occur
in at least ``MIN_DF`` documents; of those, the ``MAX_FEATURES`` most frequent
over the corpus are kept (ties: alphabetical). Ties in a cluster's ranking go to
the alphabetically first term, so the result is deterministic and independent of
the block size.

At scale the terms come from a sample (:func:`sample_documents`): at most
:data:`TERMS_PER_CLUSTER` documents of each cluster, drawn without replacement
with a seeded generator; a cluster with no more documents is read whole. A
sampled cluster's counts are scaled by ``n_k / m_k`` (its documents over those
read) before the c-TF-IDF (:func:`ctfidf`'s ``weights``), so that the
across-cluster frequencies ``f_t`` and ``A`` estimate the full counts'.
The vocabulary rule applies to the documents read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

TOKEN_PATTERN = r"(?u)\b[^\W\d]\w+(?:\.[^\W\d]\w*)*\b"
MIN_DF = 2
MAX_FEATURES = 50_000
TOP_TERMS = 10
NEAREST_DOCS = 3
# Documents per cluster read for the top terms (docs/benchmarks.md, "Scale": the top-10
# terms' agreement with the full count at this size).
TERMS_PER_CLUSTER = 2000
# What the measurement in docs/benchmarks.md found, for the sentence the report prints when it
# samples (keep the two in step).
SAMPLE_AGREEMENT = ("on a generated corpus of 10^6 documents in 2,000 clusters, a sampled "
                    "cluster kept 8 of its 10 top terms on average (4 in the worst case), and "
                    "94% of the sample's top 10 were among the full count's top 20 "
                    "(docs/benchmarks.md, \"Scale\")")
CHUNK = 1 << 20  # documents per pass over the per-document arrays
FOLD_PAIRS = 1 << 21  # (cluster, term) pairs of counted blocks held before folding them


def make_vectorizer():
    """The CountVectorizer of the vocabulary rule (its analyzer is what counts)."""
    from sklearn.feature_extraction.text import CountVectorizer

    return CountVectorizer(lowercase=True, token_pattern=TOKEN_PATTERN, stop_words="english",
                           dtype=np.int64)


@dataclass
class TermCounts:
    """``counts`` int64 sparse CSR (K, V): occurrences of term v in cluster k;
    ``terms`` the V terms (sorted); ``doc_freq`` int64[V]: documents containing
    each term (over all clusters)."""

    counts: object
    terms: np.ndarray
    doc_freq: np.ndarray


class TermCounter:
    """Accumulate per-cluster term counts over blocks of ``(labels, texts)``.

    Feed blocks with :meth:`update` (``labels`` int[b], -1 skipped; ``texts``
    the b texts, None skipped); :meth:`result` applies the vocabulary rule.
    Memory: the sparse counts (at most one entry per (cluster, term) pair seen),
    the blocks' pairs not yet folded into them (no more than the counts hold, or
    :data:`FOLD_PAIRS`) and one block.
    """

    def __init__(self, num_clusters: int) -> None:
        self.num_clusters = int(num_clusters)
        self._index: dict[str, int] = {}
        self._df = np.zeros(0, dtype=np.int64)  # documents per term (index order), grown
        self._parts: list[object] = []
        self._pending = 0  # pairs in _parts
        self._total = None

    def update(self, labels: Sequence[int] | np.ndarray, texts: Sequence[str | None]) -> None:
        import scipy.sparse as sp

        labels = np.asarray(labels, dtype=np.int64)
        keep = [i for i, t in enumerate(texts) if labels[i] >= 0 and t is not None]
        if not keep:
            return
        vec = make_vectorizer()
        try:
            X = vec.fit_transform([texts[i] for i in keep])  # (b, V_block) CSR
        except ValueError:  # every token of the block is a stop word or too short
            return
        block_terms = vec.get_feature_names_out()
        cols = np.empty(block_terms.size, dtype=np.int64)
        for j, t in enumerate(block_terms.tolist()):
            cols[j] = self._index.setdefault(t, len(self._index))
        lab = labels[keep]
        onehot = sp.csr_matrix((np.ones(lab.size, dtype=np.int64), (lab, np.arange(lab.size))),
                               shape=(self.num_clusters, lab.size))
        per_cluster = (onehot @ X).tocoo()
        self._parts.append((per_cluster.row, cols[per_cluster.col], per_cluster.data))
        self._pending += per_cluster.nnz
        if len(self._index) > self._df.size:  # grow by doubling: O(1) per new term
            grown = np.zeros(max(len(self._index), 2 * self._df.size), dtype=np.int64)
            grown[:self._df.size] = self._df
            self._df = grown
        self._df[cols] += np.diff(X.tocsc().indptr)  # cols: distinct terms of the block
        # Fold the blocks so far into one matrix once their pairs outnumber its entries (or
        # FOLD_PAIRS): the pending pairs never exceed the matrix, and each fold's cost is
        # paid for by as many new pairs.
        nnz = 0 if self._total is None else self._total.nnz
        if self._pending >= max(FOLD_PAIRS, nnz) or len(self._parts) >= 64:
            self._fold()

    def _fold(self) -> None:
        import scipy.sparse as sp

        v = len(self._index)
        if not self._parts:
            return
        rows = np.concatenate([p[0] for p in self._parts])
        cols = np.concatenate([p[1] for p in self._parts])
        data = np.concatenate([p[2] for p in self._parts])
        m = sp.coo_matrix((data, (rows, cols)), shape=(self.num_clusters, v)).tocsr()
        if self._total is not None:
            prev = self._total
            prev.resize((self.num_clusters, v))
            m = m + prev
        self._total = m
        self._parts = []
        self._pending = 0

    def result(self, min_df: int = MIN_DF, max_features: int | None = MAX_FEATURES
               ) -> TermCounts:
        """The counts restricted to the vocabulary rule, columns in alphabetical term order."""
        import scipy.sparse as sp

        self._fold()
        v = len(self._index)
        terms = np.array(sorted(self._index), dtype=object)
        if v == 0 or self._total is None:
            return TermCounts(sp.csr_matrix((self.num_clusters, 0), dtype=np.int64),
                              np.array([], dtype=object), np.zeros(0, dtype=np.int64))
        order = np.array([self._index[t] for t in terms.tolist()], dtype=np.int64)
        counts = self._total.tocsc()[:, order]
        df = self._df[order]
        freq = np.asarray(counts.sum(axis=0)).ravel()
        keep = np.flatnonzero(df >= min_df)
        if max_features is not None and keep.size > max_features:
            # Most frequent first; ties to the alphabetically first (columns are sorted).
            top = keep[np.lexsort((keep, -freq[keep]))][:max_features]
            keep = np.sort(top)
        return TermCounts(counts[:, keep].tocsr(), terms[keep], df[keep])


def count_terms(blocks: Iterable[tuple[np.ndarray, Sequence[str | None]]], num_clusters: int,
                min_df: int = MIN_DF, max_features: int | None = MAX_FEATURES) -> TermCounts:
    """Per-cluster term counts over ``blocks`` of ``(labels, texts)`` (see :class:`TermCounter`)."""
    counter = TermCounter(num_clusters)
    for labels, texts in blocks:
        counter.update(labels, texts)
    return counter.result(min_df, max_features)


def ctfidf(counts, weights: np.ndarray | None = None) -> object:
    """c-TF-IDF scores (float64 sparse CSR, same shape and pattern as ``counts``).

    ``counts`` sparse (K, V) term counts per cluster. Empty clusters get no scores.
    ``weights`` float[K] (None: all 1): row k's counts are multiplied by ``weights[k]``
    first (a sampled cluster's ``n_k / m_k``).
    """
    import scipy.sparse as sp

    counts = sp.csr_matrix(counts, dtype=np.float64)
    if weights is not None:
        counts = sp.diags(np.asarray(weights, dtype=np.float64)) @ counts
    row_total = np.asarray(counts.sum(axis=1)).ravel()
    freq = np.asarray(counts.sum(axis=0)).ravel()
    live = row_total > 0
    avg = float(row_total[live].mean()) if live.any() else 0.0
    idf = np.log1p(np.divide(avg, freq, out=np.zeros_like(freq), where=freq > 0))
    inv_total = np.divide(1.0, row_total, out=np.zeros_like(row_total), where=live)
    return sp.diags(inv_total) @ counts @ sp.diags(idf)


def top_terms(counts: TermCounts, n: int = TOP_TERMS, weights: np.ndarray | None = None
              ) -> list[list[str]]:
    """For each cluster, its ``n`` terms with the highest c-TF-IDF (ties: alphabetical);
    only terms that occur in the cluster. ``weights``: see :func:`ctfidf`."""
    scores = ctfidf(counts.counts, weights).tocsr()
    out = []
    for c in range(scores.shape[0]):
        lo, hi = scores.indptr[c], scores.indptr[c + 1]
        cols, vals = scores.indices[lo:hi], scores.data[lo:hi]
        pick = np.lexsort((cols, -vals))[:n]  # columns are in alphabetical term order
        out.append([str(counts.terms[j]) for j in cols[pick]])
    return out


def nearest_documents(labels: np.ndarray, scores: np.ndarray, num_clusters: int,
                      n: int = NEAREST_DOCS, chunk: int = CHUNK) -> list[np.ndarray]:
    """For each cluster, the indices (int64) of its ``n`` documents with the highest score
    (cosine to the centroid), highest first; ties to the lower document index.

    ``labels`` int[N] (-1 excluded), ``scores`` float[N]. Streams ``chunk`` documents at a
    time, keeping each cluster's best ``n`` so far: memory O(chunk + K n), not O(N).
    """
    best_idx = np.zeros(0, dtype=np.int64)
    best_lab = np.zeros(0, dtype=np.int64)
    best_score = np.zeros(0, dtype=np.float64)
    for start in range(0, int(np.shape(labels)[0]), chunk):
        lab = np.asarray(labels[start:start + chunk], dtype=np.int64)
        keep = np.flatnonzero(lab >= 0)
        idx = np.concatenate([best_idx, keep + start])
        lab = np.concatenate([best_lab, lab[keep]])
        sc = np.concatenate([best_score, np.asarray(scores[start:start + chunk],
                                                    dtype=np.float64)[keep]])
        order = np.lexsort((idx, -sc, lab))
        lab = lab[order]
        # Each row's place in its cluster: its position minus its cluster's first row's.
        within = np.arange(lab.size) - np.searchsorted(lab, lab, side="left") < n
        top = order[within]
        best_idx, best_lab, best_score = idx[top], lab[within], sc[top]
    starts = np.searchsorted(best_lab, np.arange(num_clusters), side="left")
    ends = np.searchsorted(best_lab, np.arange(num_clusters), side="right")
    return [best_idx[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


def sample_documents(labels: np.ndarray, num_clusters: int, per_cluster: int, seed: int,
                     chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded sample of at most ``per_cluster`` documents of each cluster.

    ``labels`` int[N] (-1 excluded). For each cluster k of ``n_k > per_cluster``
    documents, ``per_cluster`` of its documents are drawn without replacement
    (``numpy.random.default_rng(seed)``, one draw of within-cluster ranks per such
    cluster, in cluster order); smaller clusters are taken whole. Returns ``indices``
    (int64, ascending: file order), ``sizes`` int64[K] (n_k) and ``taken`` int64[K]
    (m_k = min(n_k, per_cluster)). The same labels and seed give the same sample,
    whatever ``chunk``. Memory: the sample and one chunk of labels.
    """
    if per_cluster < 1:
        raise ValueError(f"per_cluster must be >= 1, got {per_cluster}")
    k = int(num_clusters)
    n = int(np.shape(labels)[0])
    sizes = np.zeros(k, dtype=np.int64)
    for start in range(0, n, chunk):
        lab = np.asarray(labels[start:start + chunk])
        sizes += np.bincount(lab[lab >= 0], minlength=k)
    taken = np.minimum(sizes, per_cluster)
    whole = sizes <= per_cluster
    # Chosen documents as positions in the cluster-major order (cluster k's documents in
    # index order occupy offset[k] .. offset[k] + n_k - 1).
    offset = np.cumsum(sizes) - sizes
    rng = np.random.default_rng(seed)
    picks = [offset[c] + np.sort(rng.choice(int(sizes[c]), per_cluster, replace=False,
                                            shuffle=False))
             for c in np.flatnonzero(~whole).tolist()]
    chosen = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    seen = np.zeros(k, dtype=np.int64)  # documents of each cluster before this chunk
    out = []
    for start in range(0, n, chunk):
        lab = np.asarray(labels[start:start + chunk], dtype=np.int64)
        keep = np.flatnonzero(lab >= 0)
        order = np.argsort(lab[keep], kind="stable")
        doc, lab = keep[order], lab[keep][order]
        rank = seen[lab] + np.arange(lab.size) - np.searchsorted(lab, lab, side="left")
        pos = offset[lab] + rank
        hit = np.searchsorted(chosen, pos)
        sel = whole[lab] | (chosen[np.minimum(hit, chosen.size - 1)] == pos if chosen.size
                            else np.zeros(lab.size, dtype=bool))
        out.append(np.sort(doc[sel]) + start)
        seen += np.bincount(lab, minlength=k)
    indices = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return indices.astype(np.int64, copy=False), sizes, taken


def sample_sentence(sample: dict | None) -> str | None:
    """The sentence that says the top terms come from a sample (None when every document
    was read). ``sample``: the ``terms_sample`` of the report (see ``readable_clusters``)."""
    if not sample or not sample["clusters_sampled"]:
        return None
    n = sample["clusters_sampled"]
    return (f"The top terms come from a sample: at most {sample['per_cluster']:,} documents "
            f"of each cluster, drawn with seed {sample['seed']} ({sample['documents_read']:,} "
            f"of the {sample['documents']:,} documents read; {n:,} cluster"
            f"{'s' if n != 1 else ''} sampled, the others read whole), each sampled "
            f"cluster's counts scaled to its size. Measured against counting every "
            f"document: {SAMPLE_AGREEMENT}.")


# Control characters (C0 but whitespace, DEL, C1): shown as spaces, never copied (a NUL
# would make grep call a report binary).
_CONTROLS = str.maketrans({c: " " for c in [*range(0x09), *range(0x0e, 0x20),
                                            *range(0x7f, 0xa0)]})


def one_line(text: str | None, chars: int | None) -> str:
    """The first ``chars`` (None: all) characters of ``text`` with control characters and
    whitespace runs as single spaces."""
    return " ".join((text or "").translate(_CONTROLS).split())[:chars]
