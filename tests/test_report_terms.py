"""Readable clusters: c-TF-IDF top terms against a slow reference, nearest documents against
the scores, and the report's clusters.csv / clusters.md built from a real corpus index."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from _report_workdir import build_report
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.report.markdown import escape_inline
from clusterclip.report.terms import (
    count_terms,
    ctfidf,
    make_vectorizer,
    nearest_documents,
    one_line,
    round_ends,
    sample_documents,
    sample_order,
    sampled_terms,
    top_terms,
)

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta",
         "lambda_x", "os.path", "__init__"]


def _blocks(labels, texts, size):
    for s in range(0, len(texts), size):
        yield np.asarray(labels[s:s + size]), texts[s:s + size]


def _counting(read, k):
    """sampled_terms' ``count`` from a reader of ``(labels, texts)`` blocks."""
    return lambda idx: count_terms(read(idx), k, 1, None)


def _reference_top_terms(labels, texts, k, n, min_df=2):
    """One document at a time with dicts: counts, document frequency, the c-TF-IDF formula."""
    analyze = make_vectorizer().build_analyzer()
    counts = [dict() for _ in range(k)]
    df: dict[str, int] = {}
    for lab, t in zip(labels, texts, strict=True):
        if lab < 0 or t is None:
            continue
        toks = analyze(t)
        for w in toks:
            counts[lab][w] = counts[lab].get(w, 0) + 1
        for w in set(toks):
            df[w] = df.get(w, 0) + 1
    vocab = {w for w, d in df.items() if d >= min_df}
    counts = [{w: c for w, c in row.items() if w in vocab} for row in counts]
    freq = {w: sum(row.get(w, 0) for row in counts) for w in vocab}
    totals = [sum(row.values()) for row in counts]
    live = [t for t in totals if t > 0]
    avg = sum(live) / len(live) if live else 0.0
    out = []
    for c in range(k):
        scores = {w: cnt / totals[c] * math.log(1 + avg / freq[w]) for w, cnt in
                  counts[c].items()}
        out.append([w for w, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))][:n])
    return out, scores


corpora = st.integers(1, 4).flatmap(lambda k: st.lists(
    st.tuples(st.integers(-1, k - 1),
              st.lists(st.sampled_from(WORDS + ["the", "and", "x1", "9lives"]), max_size=8)),
    min_size=1, max_size=30).map(lambda docs: (k, docs)))


@settings(max_examples=60, deadline=None)
@given(corpora, st.integers(1, 7))
def test_ctfidf_matches_the_slow_reference(case, block):
    k, docs = case
    labels = [lab for lab, _ in docs]
    texts = [" ".join(words) for _, words in docs]
    want, _ = _reference_top_terms(labels, texts, k, 5)
    got = count_terms(_blocks(labels, texts, block), k)
    assert top_terms(got, 5) == want
    # The counts do not depend on the block size.
    whole = count_terms(_blocks(labels, texts, len(texts)), k)
    assert list(got.terms) == list(whole.terms)
    assert (got.counts != whole.counts).nnz == 0


def test_counts_do_not_depend_on_when_blocks_are_folded(monkeypatch):
    from clusterclip.report import terms

    rng = np.random.default_rng(5)
    labels = rng.integers(-1, 4, size=300)
    texts = [" ".join(rng.choice(WORDS, 6)) for _ in range(300)]
    whole = count_terms(_blocks(labels, texts, 300), 4)
    monkeypatch.setattr(terms, "FOLD_PAIRS", 1)  # fold as often as the rule allows
    folded = count_terms(_blocks(labels, texts, 7), 4)
    assert list(folded.terms) == list(whole.terms)
    assert (folded.counts != whole.counts).nnz == 0
    assert folded.doc_freq.tolist() == whole.doc_freq.tolist()


def test_ctfidf_scores_follow_the_formula():
    import scipy.sparse as sp

    counts = sp.csr_matrix(np.array([[4, 0, 1], [1, 3, 1], [0, 0, 0]]))
    s = ctfidf(counts).toarray()
    avg = (5 + 5) / 2  # empty cluster 2 does not count
    freq = np.array([5, 3, 2])
    want = counts.toarray() / np.array([5, 5, 1])[:, None] * np.log(1 + avg / freq)
    want[2] = 0
    np.testing.assert_allclose(s, want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_distinctive_words_are_the_top_terms(seed):
    # Each cluster's documents share three words no other cluster uses; every document also
    # holds common words and random noise. The planted words must rank first, from the data.
    rng = np.random.default_rng(seed)
    vocab = [f"w{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(26)]
    rng.shuffle(vocab)
    k = 4
    planted = [sorted(vocab[3 * c:3 * c + 3]) for c in range(k)]
    common, noise = vocab[20:24], vocab[30:]
    labels, texts = [], []
    for _ in range(120):
        c = int(rng.integers(k))
        words = planted[c] + common * 2 + list(rng.choice(noise, 6))
        rng.shuffle(words)
        labels.append(c)
        texts.append(" ".join(words))
    tops = top_terms(count_terms(_blocks(labels, texts, 16), k), 3)
    for c in range(k):
        assert sorted(tops[c]) == planted[c]


def test_vocabulary_rule():
    texts = ["the os.path module and __init__ of x9", "os.path parse 42 a", "lonely word",
             "parse parse"]
    got = count_terms(_blocks([0, 0, 1, 1], texts, 2), 2)
    # Stop words, numbers and 1-character tokens are not terms; the others are in 1 document.
    assert list(got.terms) == ["os.path", "parse"]
    assert got.doc_freq.tolist() == [2, 2]
    capped = count_terms(_blocks([0, 0, 1, 1], texts, 2), 2, max_features=1)
    assert list(capped.terms) == ["parse"]  # 3 occurrences against 2
    kept = count_terms(_blocks([0, 0, 1, 1], texts, 2), 2, min_df=1)
    assert {"__init__", "module", "lonely", "word"} <= set(kept.terms)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 4)), min_size=1, max_size=60),
       st.integers(1, 4), st.integers(1, 70))
def test_nearest_documents_are_the_highest_scores(rows, n, chunk):
    labels = np.array([r[0] for r in rows], dtype=np.int32)
    scores = np.array([r[1] / 4 for r in rows], dtype=np.float32)  # many ties
    got = nearest_documents(labels, scores, 6, n, chunk=chunk)  # streamed in chunks
    for c in range(6):
        members = [i for i in range(labels.size) if labels[i] == c]
        members.sort(key=lambda i: (-scores[i], i))
        assert got[c].tolist() == members[:n]


def _reference_sample(labels, k, m, seed):
    """One cluster at a time: its members in index order, the ranks the generator draws."""
    rng = np.random.default_rng(seed)
    chosen = []
    for c in range(k):
        members = [i for i, lab in enumerate(labels) if lab == c]
        if len(members) > m:
            ranks = np.sort(rng.choice(len(members), m, replace=False, shuffle=False))
            members = [members[r] for r in ranks.tolist()]
        chosen += members
    return sorted(chosen)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5).flatmap(lambda k: st.tuples(
    st.just(k), st.lists(st.integers(-1, k - 1), min_size=1, max_size=80))),
    st.integers(1, 12), st.integers(0, 3), st.integers(1, 90))
def test_term_sample_takes_at_most_m_documents_per_cluster(case, m, seed, chunk):
    k, labels = case
    labels = np.array(labels, dtype=np.int32)
    got, sizes, taken = sample_documents(labels, k, m, seed, chunk=chunk)
    assert got.tolist() == _reference_sample(labels.tolist(), k, m, seed)
    assert sizes.tolist() == np.bincount(labels[labels >= 0], minlength=k).tolist()
    assert taken.tolist() == np.minimum(sizes, m).tolist()
    assert np.bincount(labels[got], minlength=k).tolist() == taken.tolist()
    # The same seed gives the same sample whatever the chunk size.
    assert sample_documents(labels, k, m, seed)[0].tolist() == got.tolist()


def test_term_sample_covers_a_large_cluster_uniformly():
    # 200 draws of 10 documents of a 50-document cluster: each document is drawn about
    # 200 * 10 / 50 = 40 times (a biased sampler, e.g. one favouring the first documents,
    # would not be).
    labels = np.zeros(50, dtype=np.int64)
    hits = np.zeros(50, dtype=np.int64)
    for seed in range(200):
        hits[sample_documents(labels, 1, 10, seed)[0]] += 1
    assert hits.sum() == 2000
    assert 15 <= hits.min() and hits.max() <= 70
    assert abs(hits[:25].sum() - hits[25:].sum()) < 200


def _reference_rounds(labels, texts, k, cap, first, seed, n):
    """The rule read directly: the sample, each cluster's documents by the spawned
    generator's keys, then rounds that recount every document read from scratch."""
    chosen = _reference_sample(labels, k, cap, seed)
    keys = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]).random(len(chosen))
    queue = [sorted((i for i in chosen if labels[i] == c),
                    key=lambda i: (keys[chosen.index(i)], i)) for c in range(k)]
    sizes = np.bincount([lab for lab in labels if lab >= 0], minlength=k)
    ends = [min(first, cap)]
    while ends[-1] < cap:
        ends.append(min(2 * ends[-1], cap))
    read = [0] * k
    is_open = [bool(q) for q in queue]
    terms, rounds = [[] for _ in range(k)], 0
    for end in ends:
        if not any(is_open):
            break
        read = [min(end, len(q)) if is_open[c] else read[c] for c, q in enumerate(queue)]
        docs = sorted(i for c in range(k) for i in queue[c][:read[c]])
        counts = count_terms(_blocks([labels[i] for i in docs], [texts[i] for i in docs], 5),
                             k)
        scale = None
        if any(r < s for r, s in zip(read, sizes, strict=True)):
            scale = np.array([s / r if r else 1.0 for r, s in zip(read, sizes, strict=True)])
        now = top_terms(counts, n, scale)
        for c in range(k):
            if read[c] == len(queue[c]) or (rounds and set(now[c]) == set(terms[c])):
                is_open[c] = False
        terms, rounds = now, rounds + 1
    return terms, read, rounds


@settings(max_examples=40, deadline=None)
@given(corpora, st.integers(1, 12), st.integers(1, 6), st.integers(0, 3), st.integers(1, 7),
       st.integers(1, 4))
def test_rounds_match_the_slow_reference(case, cap, first, seed, block, n):
    k, docs = case
    labels = np.array([lab for lab, _ in docs], dtype=np.int64)
    texts = [" ".join(words) for _, words in docs]
    order = sample_order(labels, k, cap, seed, chunk=7)

    def read(indices):
        assert np.all(np.diff(indices) > 0)  # each round: one pass in file order
        return _blocks(labels[indices], [texts[i] for i in indices], block)

    got = sampled_terms(order, _counting(read, k), first, n)
    want, want_read, want_rounds = _reference_rounds(labels.tolist(), texts, k, cap, first,
                                                     seed, n)
    assert got.terms == want
    assert got.read.tolist() == want_read and got.rounds == want_rounds
    # A cluster no larger than the first round is read whole (its counts exact); none reads
    # more than the cap; the same seed gives the same result, whatever the chunk.
    small = got.sizes <= min(first, cap)
    assert (got.read[small] == got.sizes[small]).all()
    assert (got.read <= np.minimum(got.sizes, cap)).all()
    again = sampled_terms(sample_order(labels, k, cap, seed), _counting(read, k), first, n)
    assert again.terms == got.terms and again.read.tolist() == got.read.tolist()


def test_a_cluster_stops_when_its_top_set_is_unchanged_whatever_its_order():
    from clusterclip.report.terms import SampleOrder

    # Cluster 0 read in the order of its indices: after 2 documents alpha ranks above beta,
    # after 4 beta above alpha (the same set: it stops), and gamma would enter after 8.
    texts = ["alpha alpha beta"] * 2 + ["beta beta beta"] * 2 + ["gamma gamma gamma"] * 4 \
        + ["delta omega"] * 2
    labels = np.array([0] * 8 + [1] * 2, dtype=np.int64)
    order = SampleOrder(np.arange(10), labels, np.array([*range(8), 0, 1]),
                        np.array([8, 2]), np.array([8, 2]), 8)
    calls = []

    def read(indices):
        calls.append(indices.tolist())
        return _blocks(labels[indices], [texts[i] for i in indices], 3)

    first = sampled_terms(order, _counting(read, 2), 2, 2)
    assert calls == [[0, 1, 8, 9], [2, 3]]
    assert first.read.tolist() == [4, 2] and first.rounds == 2
    assert first.terms == [["beta", "alpha"], ["delta", "omega"]]


def test_one_round_is_the_fixed_sample():
    rng = np.random.default_rng(8)
    labels = rng.integers(-1, 3, size=200)
    texts = [" ".join(rng.choice(WORDS, 5)) for _ in range(200)]
    indices, sizes, taken = sample_documents(labels, 3, 20, 4)
    order = sample_order(labels, 3, 20, 4)
    assert order.indices.tolist() == indices.tolist()
    assert sorted(order.place[order.labels == 1].tolist()) == list(range(taken[1]))
    def read(idx):
        return _blocks(labels[idx], [texts[i] for i in idx], 9)

    got = sampled_terms(order, _counting(read, 3), None)
    unordered = sample_order(labels, 3, 20, 4, ordered=False)
    assert unordered.place is None and unordered.indices.tolist() == indices.tolist()
    assert sampled_terms(unordered, _counting(read, 3), None).terms == got.terms
    with pytest.raises(ValueError, match="ordered=True"):
        sampled_terms(unordered, _counting(lambda idx: iter(()), 3), 5)
    want = count_terms(_blocks(labels[indices], [texts[i] for i in indices], 9), 3)
    assert got.terms == top_terms(want, 10, sizes / taken) and got.rounds == 1
    assert round_ends(None, 20) == [20] and round_ends(50, 20) == [20]
    assert round_ends(200, 2000) == [200, 400, 800, 1600, 2000]


def test_reading_order_is_uniform():
    # 600 seeds of a 30-document cluster read whole: each document comes first about
    # 600 / 30 = 20 times (an order favouring low indices, or the same order for every
    # seed, would not).
    labels = np.zeros(30, dtype=np.int64)
    first = np.zeros(30, dtype=np.int64)
    for seed in range(600):
        order = sample_order(labels, 1, 30, seed)
        first[order.indices[order.place == 0]] += 1
    assert first.sum() == 600 and 5 <= first.min() and first.max() <= 40
    assert abs(first[:15].sum() - first[15:].sum()) < 120


def test_ctfidf_weights_scale_the_rows():
    import scipy.sparse as sp

    counts = sp.csr_matrix(np.array([[4, 0, 1], [1, 3, 1], [0, 2, 0]]))
    w = np.array([2.5, 1.0, 3.0])
    np.testing.assert_allclose(ctfidf(counts, w).toarray(),
                               ctfidf(sp.csr_matrix(counts.toarray() * w[:, None])).toarray())


# -- the report ------------------------------------------------------------------------
TOPICS = {0: "parser grammar token", 1: "socket network packet", 2: "matrix vector tensor"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    from clusterclip.corpus import Corpus

    root = tmp_path_factory.mktemp("terms_wd")
    rng = np.random.default_rng(3)
    sizes = {0: 14, 1: 7, 2: 3}
    rows, labels = [], []
    for c, n in sizes.items():
        for j in range(n):
            filler = " ".join(rng.choice(["value", "item", "thing", "stuff"], 4))
            rows.append({"text": f"Doc {c}-{j}: {TOPICS[c]} | *{filler}* <b>"})
            labels.append(c)
    rows.append({"text": ""})  # excluded
    labels.append(-1)
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    labels = np.array(labels, dtype=np.int32)[order]
    (root / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    Corpus.scan(root / "docs.jsonl", progress=False).save(root / "corpus")
    scores = np.round(rng.random(labels.size), 1).astype(np.float32)  # ties
    scores[labels < 0] = 0
    np.save(root / "labels.npy", labels)
    np.save(root / "scores.npy", scores)
    return root


def test_report_lists_every_cluster_with_terms_and_nearest_documents(workdir, tmp_path):
    out = tmp_path / "rep"
    build_report(workdir, out=out)
    labels = np.load(workdir / "labels.npy")
    scores = np.load(workdir / "scores.npy")
    texts = [json.loads(line)["text"] for line in
             (workdir / "docs.jsonl").read_text().splitlines()]
    with open(out / "clusters.csv", newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    want_terms, _ = _reference_top_terms(labels, texts, 3, 10)
    nearest = nearest_documents(labels, scores, 3)
    md = (out / "clusters.md").read_text(encoding="utf-8")
    heads = re.findall(r"^### (\d+)\. Cluster (\d+)$", md, re.M)
    sizes = np.bincount(labels[labels >= 0])
    assert [int(c) for _, c in heads] == np.argsort(-sizes, kind="stable").tolist()
    for c, row in enumerate(table):
        assert row["top_terms"].split() == want_terms[c]
        assert set(TOPICS[c].split()) <= set(want_terms[c][:3])  # the planted topic words
        docs = [int(i) for i in row["nearest_docs"].split()]
        assert docs == nearest[c].tolist()
        assert row["nearest_text"] == one_line(texts[docs[0]], 100)
        for i in docs:
            assert f"- doc {i}: {escape_inline(one_line(texts[i], 200))}\n" in md
        # The cluster's section gives its shares as clusters.csv has them.
        section = md.split(f" Cluster {c}\n", 1)[1].split("\n### ", 1)[0]
        assert f"{100 * sizes[c] / sizes.sum():.2f}% of the corpus" in section
        for name in ("clusterclip", "paced", "random"):
            assert f"{name} {100 * float(row[name + '_share']):.2f}%" in section
            assert f"{name} {100 * float(row[name + '_token_share']):.2f}%" in section
        assert f"corpus {100 * float(row['corpus_token_share']):.2f}%" in section
    report_md = (out / "report.md").read_text(encoding="utf-8")
    assert "[clusters.md](clusters.md)" in report_md


def test_report_files_are_deterministic(workdir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_report(workdir, out=a)
    build_report(workdir, out=b)
    for name in ("clusters.csv", "clusters.md", "report.md", "summary.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_readable_columns_stream_in_blocks(workdir):
    from clusterclip.corpus import Corpus
    from clusterclip.report.readable import readable_clusters

    corpus = Corpus.load(workdir / "corpus")
    labels = np.load(workdir / "labels.npy")
    scores = np.load(workdir / "scores.npy")
    small = readable_clusters(corpus, labels, scores, 3, block=2)
    big = readable_clusters(corpus, labels, scores, 3)
    assert small["terms"] == big["terms"] and small["snippets"] == big["snippets"]
    # Every cluster fits: every document read, nothing said about a sample.
    assert big["terms_sample"]["clusters_sampled"] == 0
    assert big["terms_sample"]["documents_read"] == int((labels >= 0).sum())


def test_the_reports_long_reads_show_progress_and_change_nothing(workdir, capsys):
    """The top terms and a --label-field's codes read the corpus (at 10^7 documents, minutes):
    with progress, a bar counts their documents on stderr; the results are the same."""
    from clusterclip.corpus import Corpus
    from clusterclip.report.readable import readable_clusters

    corpus = Corpus.load(workdir / "corpus")
    labels = np.load(workdir / "labels.npy")
    scores = np.load(workdir / "scores.npy")
    quiet = readable_clusters(corpus, labels, scores, 3, block=2)
    assert "top terms" not in capsys.readouterr().err
    shown = readable_clusters(corpus, labels, scores, 3, block=2, progress=True)
    err = capsys.readouterr().err
    n = int((labels >= 0).sum())
    assert re.search(rf"top terms: .*/{n}(\.0)? ", err)  # the bar's total: every document read
    assert shown["terms"] == quiet["terms"] and shown["snippets"] == quiet["snippets"]
    rec = next(iter(corpus.iter_records()))[1]
    field = sorted(rec)[0]
    codes, values = corpus.field_codes(field)
    assert "reading field" not in capsys.readouterr().err
    codes2, values2 = corpus.field_codes(field, progress=True)
    err = capsys.readouterr().err
    assert re.search(rf"reading field {field}: .*/{len(corpus)}(\.0)? ", err)
    assert np.array_equal(codes, codes2) and values == values2


def test_sampled_terms_are_the_terms_of_the_sampled_documents(workdir):
    from clusterclip.corpus import Corpus
    from clusterclip.report.readable import readable_clusters, render_clusters_md

    corpus = Corpus.load(workdir / "corpus")
    labels = np.load(workdir / "labels.npy")
    texts = [json.loads(line)["text"] for line in
             (workdir / "docs.jsonl").read_text().splitlines()]
    got = readable_clusters(corpus, labels, None, 3, per_cluster=5, seed=7)
    # Sizes 14, 7, 3: the first two clusters are sampled (5 each), the third read whole.
    assert got["terms_sample"] == {
        "rule": "at most 5 documents of each cluster, drawn without replacement",
        "per_cluster": 5, "first_round": None, "seed": 7, "rounds": 1, "documents_read": 13,
        "documents": 24, "clusters_sampled": 2,
        "read_per_cluster": {"min": 3, "median": 5.0, "max": 5}}
    chosen = _reference_sample(labels.tolist(), 3, 5, 7)
    # The reference on the chosen documents alone, each sampled cluster's counts x n_k / 5.
    sub_labels = [int(labels[i]) for i in chosen]
    want = count_terms(_blocks(sub_labels, [texts[i] for i in chosen], 100), 3)
    assert got["terms"] == top_terms(want, 10, np.array([14 / 5, 7 / 5, 1.0]))
    assert got["terms"] == readable_clusters(corpus, labels, None, 3, per_cluster=5,
                                             seed=7, block=3)["terms"]
    md = render_clusters_md(got, np.bincount(labels[labels >= 0]), {})
    assert "The top terms come from a sample drawn with seed 7: at most 5 documents of " \
           "each cluster, drawn without replacement. Read 13 of the 24 documents (per " \
           "cluster min 3, median 5, max 5; 2 clusters sampled" in md


def test_rounds_read_from_the_corpus_and_say_their_sample(workdir):
    from clusterclip.corpus import Corpus
    from clusterclip.report.readable import readable_clusters, render_clusters_md

    corpus = Corpus.load(workdir / "corpus")
    labels = np.load(workdir / "labels.npy")
    texts = [json.loads(line)["text"] for line in
             (workdir / "docs.jsonl").read_text().splitlines()]
    got = readable_clusters(corpus, labels, None, 3, per_cluster=8, first_round=2, seed=7)
    want, read, rounds = _reference_rounds(labels.tolist(), texts, 3, 8, 2, 7, 10)
    assert got["terms"] == want
    sample = got["terms_sample"]
    assert sample["documents_read"] == sum(read) and sample["rounds"] == rounds
    assert sample["read_per_cluster"] == {"min": min(read), "median": float(np.median(read)),
                                          "max": max(read)}
    assert sample["clusters_sampled"] == sum(r < n for r, n in zip(read, [14, 7, 3],
                                                                   strict=True))
    assert got["terms"] == readable_clusters(corpus, labels, None, 3, per_cluster=8,
                                             first_round=2, seed=7, block=2)["terms"]
    md = render_clusters_md(got, np.bincount(labels[labels >= 0]), {})
    assert ("The top terms come from a sample drawn with seed 7: each cluster's documents "
            "read in a random order in rounds, to 2, 4 and 8 documents in all, until a "
            "round leaves its top-10 terms unchanged (as a set)") in md
    assert f"Read {sum(read)} of the 24 documents" in md


def test_report_says_when_the_terms_come_from_a_sample(workdir, tmp_path, monkeypatch):
    import functools

    from clusterclip.report import build
    from clusterclip.report.readable import readable_clusters

    out = tmp_path / "rep"
    monkeypatch.setattr(build, "readable_clusters",
                        functools.partial(readable_clusters, per_cluster=5))
    summary = build_report(workdir, out=out, seed=3)
    assert summary["terms_sample"]["clusters_sampled"] == 2
    sentence = "The top terms come from a sample drawn with seed 3: at most 5 documents of " \
               "each cluster"
    assert sentence in (out / "report.md").read_text(encoding="utf-8")
    assert sentence in (out / "clusters.md").read_text(encoding="utf-8")
    monkeypatch.undo()
    full = build_report(workdir, out=tmp_path / "full", seed=3)
    assert full["terms_sample"]["clusters_sampled"] == 0
    full_md = (tmp_path / "full" / "report.md").read_text(encoding="utf-8")
    assert "come from a sample" not in full_md
    assert "The top terms count all 24 documents: the sample (at most 2,000 documents of " \
           "each cluster, drawn without replacement) read every cluster whole." in full_md
