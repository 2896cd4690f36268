"""Streaming schedule statistics equal the same numbers computed on the whole array."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.report.stats import (
    ScheduleStats,
    cluster_sizes,
    schedule_summary,
    size_profile,
    window_edges,
)
from clusterclip.sampling.clip import quartile_clusters


@st.composite
def labelled_schedules(draw):
    n = draw(st.integers(1, 120))
    k = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    labels = rng.integers(-1, k, n)
    labels[rng.integers(0, n)] = rng.integers(0, k)  # at least one eligible document
    eligible = np.flatnonzero(labels >= 0)
    t = draw(st.integers(1, 600))
    schedule = rng.choice(eligible, t)
    cuts = np.sort(rng.integers(0, t + 1, draw(st.integers(0, 6))))
    windows = draw(st.integers(1, 40))
    return labels, k, schedule, cuts, windows


@settings(max_examples=80, deadline=None)
@given(labelled_schedules())
def test_streamed_counts_equal_whole_array_counts(case):
    labels, k, schedule, cuts, windows = case
    stats = ScheduleStats(labels, k, schedule.size, windows)
    stats.consume(np.split(schedule, cuts))  # arbitrary block boundaries, empty blocks too
    np.testing.assert_array_equal(stats.doc_counts, np.bincount(schedule, minlength=labels.size))
    lab = labels[schedule]
    np.testing.assert_array_equal(stats.cluster_counts, np.bincount(lab, minlength=k))
    # Each window holds exactly the samples between its edges.
    edges = window_edges(schedule.size, windows)
    for w in range(edges.size - 1):
        np.testing.assert_array_equal(
            stats.window_counts[w], np.bincount(lab[edges[w]:edges[w + 1]], minlength=k))
    assert stats.window_counts.sum() == schedule.size
    sizes = cluster_sizes(labels, k)
    eligible = labels >= 0
    summary = schedule_summary(stats, sizes, eligible, clip=2)
    hist = np.bincount(np.bincount(schedule, minlength=labels.size)[eligible])
    assert summary["repetition_histogram"] == hist.tolist()
    assert sum(summary["repetition_histogram"]) == eligible.sum()
    assert summary["max_repetition"] == np.bincount(schedule).max()
    tail, head = quartile_clusters(sizes)
    assert summary["tail_quartile_share"] == pytest.approx(np.isin(lab, tail).mean())
    assert summary["head_quartile_share"] == pytest.approx(np.isin(lab, head).mean())
    pool = np.array(summary["clusters_in_pool"])
    assert pool[0] == (sizes > 0).sum()
    assert (np.diff(pool) <= 0).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10_000), st.integers(1, 200))
def test_windows_partition_the_schedule(total, windows):
    edges = window_edges(total, windows)
    assert edges[0] == 0 and edges[-1] == total
    widths = np.diff(edges)
    assert (widths >= 1).all() and widths.max() - widths.min() <= 1


def test_pool_counts_clusters_until_drawn_R_times():
    # Cluster 0 (1 doc) is drawn twice in the first window: with R=2 it is out from window 1.
    labels = np.array([0, 1, 1, 2, 2, 2])
    schedule = np.array([0, 0, 1, 2, 3, 4, 5, 1, 3, 4])
    stats = ScheduleStats(labels, 3, schedule.size, windows=5).consume([schedule])
    sizes = cluster_sizes(labels)
    pool = stats.clusters_in_pool(sizes, clip=2)
    assert pool.tolist() == [3, 2, 2, 2, 2]
    assert stats.clusters_in_pool(sizes, clip=np.inf).tolist() == [3] * 5


def test_out_of_range_index_names_its_position():
    stats = ScheduleStats(np.array([0, 1, 0]), 2, 5)
    stats.update(np.array([0, 1]))
    with pytest.raises(ValueError, match="position 3: document index 3"):
        stats.update(np.array([2, 3, 0]))
    with pytest.raises(ValueError, match="position 0: document index -1"):
        ScheduleStats(np.array([0]), 1, 1).update(np.array([-1]))


def test_overlong_and_short_schedules_are_rejected():
    stats = ScheduleStats(np.array([0, 1]), 2, 2)
    with pytest.raises(ValueError, match="longer"):
        stats.update(np.array([0, 1, 0]))
    stats.update(np.array([0]))
    with pytest.raises(ValueError, match="ended after 1 of 2"):
        stats.check_complete()


def test_excluded_documents_are_counted_not_dropped():
    labels = np.array([0, -1, 1])
    stats = ScheduleStats(labels, 2, 4).consume([np.array([0, 1, 1, 2])])
    assert stats.excluded == 2
    assert stats.cluster_counts.sum() == 2


def test_size_profile_head_and_tail():
    sizes = np.array([1000, 0, 1, 10, 100, 1, 1, 1, 1, 1, 1])  # one empty cluster
    p = size_profile(sizes)
    assert p["clusters"] == 10 and p["empty_clusters"] == 1
    assert p["head_clusters"] == 1 and p["head_share"] == pytest.approx(1000 / sizes.sum())
    assert p["tail_clusters"] == 5 and p["tail_share"] == pytest.approx(5 / sizes.sum())
    assert p["imbalance"] == 1000


def test_quartiles_are_disjoint_for_four_or_more_clusters():
    sizes = np.array([5, 1, 9, 3, 0, 7, 2, 2])
    tail, head = quartile_clusters(sizes)
    assert set(tail) == {1, 6} and set(head) == {2, 5}  # ties broken by id: 6 before 7
    assert not set(tail) & set(head)


@given(labelled_schedules(), st.integers(1, 60))
@settings(max_examples=40, deadline=None)
def test_every_stride_th_document_is_counted_exactly(case, limit):
    """Above DOC_SAMPLE documents the report keeps per-document counts for every s-th
    document only (bounded memory): those counts are the exact ones of those documents."""
    from clusterclip.report.stats import doc_stride

    labels, k, schedule, _ = case[:4]
    n = labels.size
    stride = doc_stride(n, limit)
    assert (stride == 1) == (n <= limit) and -(-n // stride) <= limit
    exact = ScheduleStats(labels, k, schedule.size, 5).consume([schedule])
    part = ScheduleStats(labels, k, schedule.size, 5, stride=stride).consume(
        [schedule[:7], schedule[7:]])
    np.testing.assert_array_equal(part.doc_counts, exact.doc_counts[::stride])
    np.testing.assert_array_equal(part.window_counts, exact.window_counts)
    eligible = labels >= 0
    sizes = cluster_sizes(labels, k)
    s = schedule_summary(part, sizes, eligible, clip=3.0)
    want = np.bincount(exact.doc_counts[::stride][eligible[::stride]], minlength=1)
    assert s["repetition_histogram"] == [int(x) for x in want]
    if stride == 1:
        assert s == schedule_summary(exact, sizes, eligible, clip=3.0)
    else:
        assert s["repetition_sample"] == int(eligible[::stride].sum())


@st.composite
def sampler_cases(draw):
    """Labels (some -1, cluster sizes skewed), a strategy's options and a budget T."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    k = draw(st.integers(1, 9))
    n = draw(st.integers(k, 300))
    labels = rng.choice(k, n, p=rng.dirichlet(np.ones(k) * 0.5)).astype(np.int32)
    labels[rng.random(n) < 0.05] = -1
    labels[0] = 0
    ne = int((labels >= 0).sum())
    strategy = draw(st.sampled_from(["uniform", "temperature", "clusterclip", "paced",
                                     "random"]))
    clip = draw(st.integers(1, 4))
    options = {"strategy": strategy}
    if strategy in ("temperature", "clusterclip", "paced"):
        options["alpha"] = draw(st.sampled_from([0.0, 0.5, -0.3]))
    if strategy in ("clusterclip", "paced"):
        options["clip"] = clip
    total = draw(st.integers(1, clip * ne if "clip" in options else 4 * ne))
    return labels, options, total, draw(st.integers(1, 30)), int(rng.integers(0, 1000))


@settings(max_examples=60, deadline=None)
@given(sampler_cases())
def test_statistics_from_clusters_drawn_equal_the_document_samplers(case):
    """Above DOC_SAMPLE documents the report draws its comparison schedules' clusters
    without their documents (bounded memory): for the cluster strategies every figure is
    the document sampler's (windows, tenths, repetition histogram, clip events); for
    random the repetition is exact and each epoch's parts add up to the corpus's clusters."""
    from clusterclip.report.stats import draw_clusters, pass_histogram
    from clusterclip.sampling import make_sampler

    labels, options, total, windows, seed = case
    k = int(labels.max()) + 1
    sizes = cluster_sizes(labels, k)
    eligible = labels >= 0
    sampler = make_sampler(labels, total, seed=seed, cache_dir=False, **options)
    docs = ScheduleStats(labels, k, total, windows).consume(sampler.blocks(97))
    passes = "corpus" if options["strategy"] == "random" else "cluster"
    drawn = ScheduleStats(labels, k, total, windows, passes=passes)
    events, _ = draw_clusters(drawn, sizes, options, seed)
    a = schedule_summary(docs, sizes, eligible, clip=3.0)
    b = schedule_summary(drawn, sizes, eligible, clip=3.0)
    assert drawn.doc_counts.size == 0 and not drawn.sampled
    for key in ("repetition_histogram", "coverage", "max_repetition", "unique_documents"):
        assert a[key] == b[key], key
    np.testing.assert_array_equal(
        pass_histogram(docs.cluster_counts, sizes) if passes == "cluster" else
        pass_histogram([total], [int(sizes.sum())]), np.bincount(docs.doc_counts[eligible]))
    if passes == "cluster":
        np.testing.assert_array_equal(drawn.window_counts, docs.window_counts)
        np.testing.assert_array_equal(drawn.tenth_counts, docs.tenth_counts)
        assert events == sampler.summary()["clip_events"]
    else:
        # epochs: every cluster's documents once per whole epoch, some of them in the last
        epochs = total // int(sizes.sum())
        counts = drawn.cluster_counts
        assert events == [] and int(counts.sum()) == total
        assert (counts >= epochs * sizes).all() and (counts <= (epochs + 1) * sizes).all()


@pytest.mark.parametrize("timing", ["paced", "clusterclip"])
def test_staged_mixture_clusters_drawn_equal_the_document_samplers(timing):
    """A staged mixture (greedy and paced stages, a cluster of weight 0 in one) drawn
    without documents: the same clusters in the same order, clip events and stages."""
    from clusterclip.sampling import make_sampler
    from clusterclip.sampling.mixture import Mixture, Stage
    from clusterclip.sampling.sampler import ClusterDraws

    rng = np.random.default_rng(2)
    k = 8
    labels = rng.choice(k, 3000, p=rng.dirichlet(np.ones(k))).astype(np.int32)
    labels[:10] = -1
    w1 = tuple(rng.random(k).tolist())
    w2 = tuple((rng.random(k) * (np.arange(k) != 3)).tolist())
    mixture = Mixture(weights=w1, clip=3, timing=timing, objective="test",
                      stages=(Stage(until=0.4, weights=w1), Stage(until=1.0, weights=w2,
                                                                  timing="clusterclip")))
    sampler = make_sampler(labels, 6000, seed=4, cache_dir=False, mixture=mixture)
    want = labels[np.concatenate(list(sampler.blocks(777)))]
    draws = ClusterDraws(cluster_sizes(labels), 6000, seed=4, mixture=mixture)
    np.testing.assert_array_equal(np.concatenate(list(draws.blocks(777))), want)
    events, stages = draws.events()
    summary = sampler.summary()
    assert events == summary["clip_events"] and stages == summary["stages"]
