"""NMI, ARI and purity (numpy, from one contingency table) agree with scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

from clusterclip.report.metrics import (
    adjusted_rand_index,
    cluster_label_agreement,
    contingency,
    normalized_mutual_info,
    purity,
    table_agreement,
)


def _sklearn_purity(clusters, classes):
    table = contingency_matrix(classes, clusters)  # rows: classes, columns: clusters
    return table.max(axis=0).sum() / table.sum()


labelings = st.integers(1, 300).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 12), min_size=n, max_size=n),
        st.lists(st.integers(-3, 6), min_size=n, max_size=n),
    ))


@settings(max_examples=50, deadline=None)
@given(labelings)
def test_metrics_match_sklearn_on_random_labelings(pair):
    clusters, classes = (np.array(x) for x in pair)
    assert normalized_mutual_info(clusters, classes) == pytest.approx(
        normalized_mutual_info_score(classes, clusters), abs=1e-10)
    assert adjusted_rand_index(clusters, classes) == pytest.approx(
        adjusted_rand_score(classes, clusters), abs=1e-10)
    assert purity(clusters, classes) == pytest.approx(_sklearn_purity(clusters, classes))


@settings(max_examples=50, deadline=None)
@given(labelings)
def test_a_table_with_empty_rows_and_columns_gives_the_same_agreement(pair):
    # The report counts its table over every cluster id and every value of the field (empty
    # rows and columns included), a chunk of documents at a time: the same numbers, exactly.
    clusters, classes = (np.array(x) for x in pair)
    table = np.zeros((15, 12), dtype=np.int64)
    np.add.at(table, (clusters + 1, classes + 4), 1)
    assert table_agreement(table) == cluster_label_agreement(clusters, classes)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 2000), st.integers(1, 40), st.integers(1, 15), st.integers(0, 2**31))
def test_metrics_match_sklearn_on_correlated_labelings(n, k, c, seed):
    # Clusters that mostly follow the classes: the interesting regime (values far from 0).
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, c, n)
    clusters = np.where(rng.random(n) < 0.8, classes * 3 % max(k, 1), rng.integers(0, k, n))
    assert normalized_mutual_info(clusters, classes) == pytest.approx(
        normalized_mutual_info_score(classes, clusters), abs=1e-10)
    assert adjusted_rand_index(clusters, classes) == pytest.approx(
        adjusted_rand_score(classes, clusters), abs=1e-10)
    assert purity(clusters, classes) == pytest.approx(_sklearn_purity(clusters, classes))


def test_identical_partitions_score_one_whatever_the_names():
    classes = np.repeat(np.arange(5), [1, 10, 100, 3, 7])
    clusters = (classes * 7 + 2)[::1]  # a relabelling
    got = cluster_label_agreement(clusters, classes)
    assert got == {"nmi": pytest.approx(1.0), "ari": pytest.approx(1.0), "purity": 1.0}


def test_contingency_counts_every_pair():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 9, 500), rng.integers(0, 4, 500)
    table = contingency(a, b)
    assert table.sum() == 500
    np.testing.assert_array_equal(table, contingency_matrix(a, b))


def test_large_counts_do_not_overflow():
    # 1.5 million documents: pair counts ~ 10^12 must stay exact.
    classes = np.repeat(np.arange(3), 500_000)
    clusters = np.concatenate([classes[:1_000_000], np.zeros(500_000, np.int64)])
    assert adjusted_rand_index(clusters, classes) == pytest.approx(
        adjusted_rand_score(classes, clusters), abs=1e-12)


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_report_label_agreement_counts_chunks_like_the_arrays(tmp_path, monkeypatch, chunk):
    import json

    from clusterclip.corpus import Corpus
    from clusterclip.report import build

    rng = np.random.default_rng(chunk)
    topics = ["b", "a", None, "c", 7]
    rows = [{"text": f"doc {i}", **({} if (t := topics[rng.integers(5)]) is None else
                                     {"topic": t})} for i in range(40)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = Corpus.scan(tmp_path / "d.jsonl", progress=False)
    labels = rng.integers(-1, 4, size=40).astype(np.int32)
    monkeypatch.setattr(build, "CHUNK", chunk)
    got, majority = build._label_agreement(*corpus.field_codes("topic"), labels, "topic")
    keep = np.array(["topic" in r for r in rows]) & (labels >= 0)
    names = np.array([str(r.get("topic")) for r in rows])
    assert got == {"field": "topic", **cluster_label_agreement(labels[keep], names[keep]),
                   "documents": int(keep.sum()), "classes": len(set(names[keep])),
                   "skipped_missing": int(((labels >= 0) & ~keep).sum())}
    for c in range(4):
        values, counts = np.unique(names[keep & (labels == c)], return_counts=True)
        if values.size:
            assert majority[c] == values[np.argmax(counts)]
