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

The sample can also be sized by what the terms need (:func:`sampled_terms`): each
cluster's sample is read in a seeded random order (:func:`sample_order`) in rounds that
double (a first round, then twice as many in all, up to the cap or the cluster's size);
after each round the top terms are computed from everything read so far, and a cluster
stops once a round leaves its top-:data:`TOP_TERMS` set unchanged. A cluster of no more
than the first round is read whole in it. Measured against the fixed sample, the rounds
kept measurably fewer of the full count's terms for little less reading (docs/scale.md),
so the report reads one round (:data:`TERMS_FIRST_ROUND` is None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
# Documents per cluster of the first round of the sample sized by what the terms need
# (:func:`sampled_terms`); None: one round of TERMS_PER_CLUSTER, the report's default, as
# rounds from 200 kept measurably fewer terms (docs/scale.md, "The report's terms").
TERMS_FIRST_ROUND = None
# What docs/scale.md measured for the rounds, for the sentence of a report that reads them
# (keep the two in step).
ROUNDS_AGREEMENT = ("on 2 x 10^5 generated documents in 200 clusters, rounds from 200 to "
                    "2,000 documents kept about 98% of a cluster's top 10 terms on average (70% in "
                    "the worst cluster), against 99% for a fixed 2,000: measurably fewer "
                    "(docs/scale.md, \"The report's terms\")")
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
        """The counts restricted to the vocabulary rule, columns in alphabetical term order
        (``min_df=1, max_features=None``: every term seen, as :func:`merge_counts` takes
        them)."""
        import scipy.sparse as sp

        self._fold()
        v = len(self._index)
        terms = np.array(sorted(self._index), dtype=object)
        if v == 0 or self._total is None:
            return TermCounts(sp.csr_matrix((self.num_clusters, 0), dtype=np.int64),
                              np.array([], dtype=object), np.zeros(0, dtype=np.int64))
        order = np.array([self._index[t] for t in terms.tolist()], dtype=np.int64)
        return _vocabulary(self._total.tocsc()[:, order], terms, self._df[order], min_df,
                           max_features)


def _vocabulary(counts, terms: np.ndarray, df: np.ndarray, min_df: int,
                max_features: int | None) -> TermCounts:
    """``counts`` (sparse CSC, K x V, columns in alphabetical ``terms`` order) restricted to
    the terms in at least ``min_df`` documents, of those the ``max_features`` most
    frequent (ties: alphabetical)."""
    freq = np.asarray(counts.sum(axis=0)).ravel()
    keep = np.flatnonzero(df >= min_df)
    if max_features is not None and keep.size > max_features:
        # Most frequent first; ties to the alphabetically first (columns are sorted).
        top = keep[np.lexsort((keep, -freq[keep]))][:max_features]
        keep = np.sort(top)
    return TermCounts(counts[:, keep].tocsr(), terms[keep], df[keep])


def merge_counts(parts: Sequence[TermCounts], num_clusters: int, min_df: int = MIN_DF,
                 max_features: int | None = MAX_FEATURES) -> TermCounts:
    """The sum of ``parts``, each the counts of its own documents with every term seen
    (:meth:`TermCounter.result` with ``min_df=1, max_features=None``), with the vocabulary
    rule applied to the sum: the counts of all their documents, as one
    :class:`TermCounter` fed them all would give, whatever the parts and their order
    (integer sums)."""
    import scipy.sparse as sp

    k = int(num_clusters)
    parts = [p for p in parts if p.terms.size]
    if not parts:
        return TermCounts(sp.csr_matrix((k, 0), dtype=np.int64),
                          np.array([], dtype=object), np.zeros(0, dtype=np.int64))
    terms = np.array(sorted(set().union(*(p.terms.tolist() for p in parts))), dtype=object)
    column = {t: j for j, t in enumerate(terms.tolist())}
    df = np.zeros(terms.size, dtype=np.int64)
    total = None
    for p in parts:
        # Both term lists are sorted, so the columns keep their order in each row: the
        # part's CSR arrays serve as they are (no copy of its counts in another layout).
        where = np.array([column[t] for t in p.terms.tolist()], dtype=np.int64)
        counts = sp.csr_matrix(p.counts, dtype=np.int64)
        counts.sort_indices()
        m = sp.csr_matrix((counts.data, where[counts.indices], counts.indptr),
                          shape=(k, terms.size))
        total = m if total is None else total + m
        df[where] += p.doc_freq
    total = total.tocsc()
    return _vocabulary(total, terms, df, min_df, max_features)


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


@dataclass
class SampleOrder:
    """A seeded sample (:func:`sample_documents`) and the order it is read in.

    ``indices`` int64 (ascending: file order), ``labels`` their clusters, ``place`` each
    document's place in its cluster's reading order (0 first; None: not ordered, read in
    one round), ``sizes`` int64[K] the clusters' documents, ``taken`` int64[K] the
    sample's and ``per_cluster`` its cap."""

    indices: np.ndarray
    labels: np.ndarray
    place: np.ndarray | None
    sizes: np.ndarray
    taken: np.ndarray
    per_cluster: int


def sample_order(labels: np.ndarray, num_clusters: int, per_cluster: int, seed: int,
                 chunk: int = CHUNK, ordered: bool = True) -> SampleOrder:
    """:func:`sample_documents`' sample, each cluster's documents in a seeded random order.

    The order comes from a second generator (``SeedSequence(seed).spawn(1)[0]``): each
    document gets a uniform key, and a cluster's documents are read by ascending key (ties
    to the lower index). So the sample is the same as :func:`sample_documents`', and
    the first ``m`` documents of a cluster's order are a uniform sample of ``m`` of them.
    ``ordered=False``: no order (``place`` None; 4 CPU-s saved at 8 x 10^6 sampled), for
    a sample read in one round.
    """
    indices, sizes, taken = sample_documents(labels, num_clusters, per_cluster, seed, chunk)
    lab = np.asarray(labels[indices], dtype=np.int64) if indices.size else \
        np.zeros(0, dtype=np.int64)
    place = None
    if ordered:
        keys = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]).random(
            indices.size)
        order = np.lexsort((keys, lab))  # stable: equal keys keep the index order
        by_cluster = lab[order]
        place = np.empty(indices.size, dtype=np.int64)
        place[order] = np.arange(order.size) - np.searchsorted(by_cluster, by_cluster,
                                                               side="left")
    return SampleOrder(indices, lab, place, sizes, taken, int(per_cluster))


def round_ends(first_round: int | None, per_cluster: int) -> list[int]:
    """Documents per cluster read by the end of each round: ``first_round``, doubling, up
    to ``per_cluster`` (``[per_cluster]`` when ``first_round`` is None or not smaller)."""
    end = per_cluster if first_round is None else min(int(first_round), per_cluster)
    if end < 1:
        raise ValueError(f"first_round must be >= 1, got {first_round}")
    ends = [end]
    while ends[-1] < per_cluster:
        ends.append(min(2 * ends[-1], per_cluster))
    return ends


@dataclass
class SampledTerms:
    """``terms`` (K lists, best first), ``read`` int64[K] documents of each cluster read,
    ``sizes`` int64[K] its documents, ``rounds`` the rounds run."""

    terms: list[list[str]]
    read: np.ndarray
    sizes: np.ndarray
    rounds: int


def sampled_terms(order: SampleOrder, count: Callable[[np.ndarray], TermCounts],
                  first_round: int | None, n: int = TOP_TERMS) -> SampledTerms:
    """Top terms from as much of the sample ``order`` as they need.

    Round r reads, of each cluster still open, its documents at places
    ``ends[r-1] .. ends[r] - 1`` (:func:`round_ends` up to the sample's cap):
    ``count(indices)`` returns the term counts of the ascending ``indices``, every term
    seen (:meth:`TermCounter.result` with ``min_df=1, max_features=None``; one pass in file
    order: :func:`clusterclip.report.reading.read_corpus`). After each round the top ``n``
    terms are computed from every document read (:func:`merge_counts`; a sampled cluster's
    counts scaled by ``n_k / m_k``); a cluster closes when its sample is read or when its
    top-``n`` set equals the one after the round before. Returns the last round's terms.
    Counting is exact whatever the rounds, so the result is :func:`top_terms` of the
    documents read.
    """
    k = order.sizes.size
    parts: list[TermCounts] = []
    read = np.zeros(k, dtype=np.int64)
    open_ = order.taken > 0
    terms: list[list[str]] = [[] for _ in range(k)]
    lo, rounds = 0, 0
    ends = round_ends(first_round, order.per_cluster)
    if order.place is None and len(ends) > 1:
        raise ValueError("reading in rounds needs sample_order(..., ordered=True)")
    for hi in ends:
        if not open_.any():
            break
        pick = open_[order.labels]
        if len(ends) > 1:
            pick &= (order.place >= lo) & (order.place < hi)
        parts = [merge_counts([*parts, count(order.indices[pick])], k, 1, None)]
        read += np.bincount(order.labels[pick], minlength=k)
        weights = None
        if (read < order.sizes).any():
            weights = np.divide(order.sizes, read, out=np.ones(k), where=read > 0)
        now = top_terms(merge_counts(parts, k), n, weights)
        if rounds:
            open_ &= np.array([set(a) != set(b) for a, b in zip(now, terms, strict=True)])
        open_ &= read < order.taken
        terms, lo, rounds = now, hi, rounds + 1
    return SampledTerms(terms, read, order.sizes, rounds)


def sample_rule(first_round: int | None, per_cluster: int) -> str:
    """The sample's rule in words (``first_round``, ``per_cluster``: see
    :func:`round_ends`)."""
    ends = round_ends(first_round, per_cluster)
    if len(ends) == 1:
        return f"at most {per_cluster:,} documents of each cluster, drawn without replacement"
    steps = ", ".join(f"{e:,}" for e in ends[:-1]) + f" and {ends[-1]:,}"
    return (f"each cluster's documents read in a random order in rounds, to {steps} "
            f"documents in all, until a round leaves its top-{TOP_TERMS} terms unchanged "
            f"(as a set) or its documents run out; a cluster of at most {ends[0]:,} "
            f"documents is read whole")


def sample_summary(got: SampledTerms, first_round: int | None, per_cluster: int,
                   seed: int) -> dict:
    """The report's ``terms_sample`` (JSON types): ``rule`` (:func:`sample_rule`),
    ``per_cluster``, ``first_round``, ``seed``, ``rounds``, ``documents_read``,
    ``documents``, ``clusters_sampled`` (read in part) and ``read_per_cluster`` (``min``,
    ``median``, ``max`` over the non-empty clusters)."""
    live = got.read[got.sizes > 0]
    spread = ({"min": int(live.min()), "median": float(np.median(live)),
               "max": int(live.max())} if live.size else None)
    return {"rule": sample_rule(first_round, per_cluster), "per_cluster": int(per_cluster),
            "first_round": None if first_round is None else int(first_round),
            "seed": int(seed), "rounds": int(got.rounds),
            "documents_read": int(got.read.sum()), "documents": int(got.sizes.sum()),
            "clusters_sampled": int((got.read < got.sizes).sum()),
            "read_per_cluster": spread}


def sample_sentence(sample: dict | None) -> str | None:
    """The sentence that says which documents the top terms count: a sample, or all of
    them (None without ``sample``: no terms). ``sample``: the ``terms_sample`` of the
    report (:func:`sample_summary`)."""
    if not sample:
        return None
    if not sample["clusters_sampled"]:
        return (f"The top terms count all {sample['documents']:,} documents: the sample "
                f"({sample['rule']}) read every cluster whole.")
    n = sample["clusters_sampled"]
    spread = sample["read_per_cluster"]
    median = f"{spread['median']:,.1f}".removesuffix(".0")
    one_round = len(round_ends(sample["first_round"], sample["per_cluster"])) == 1
    return (f"The top terms come from a sample drawn with seed {sample['seed']}: "
            f"{sample['rule']}. Read {sample['documents_read']:,} of the "
            f"{sample['documents']:,} documents (per cluster min {spread['min']:,}, median "
            f"{median}, max {spread['max']:,}; {n:,} cluster{'s' if n != 1 else ''} "
            f"sampled, the others read whole), each sampled cluster's counts scaled to its "
            f"size. Measured against counting every document: "
            f"{SAMPLE_AGREEMENT if one_round else ROUNDS_AGREEMENT}.")


# Control characters (C0 but whitespace, DEL, C1): shown as spaces, never copied (a NUL
# would make grep call a report binary).
_CONTROLS = str.maketrans({c: " " for c in [*range(0x09), *range(0x0e, 0x20),
                                            *range(0x7f, 0xa0)]})


def one_line(text: str | None, chars: int | None) -> str:
    """The first ``chars`` (None: all) characters of ``text`` with control characters and
    whitespace runs as single spaces."""
    return " ".join((text or "").translate(_CONTROLS).split())[:chars]
