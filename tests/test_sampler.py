"""ClusterClipSampler: the invariants of issue 2, checked on real draws.

Every property below is stated by the issue; the hypothesis tests draw
arbitrary small label sets (with excluded documents and empty cluster ids).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from clusterclip import ClusterClipSampler
from clusterclip.errors import InputError
from clusterclip.sampling import STRATEGIES, _seek
from clusterclip.sampling._engine import passes_per_group
from clusterclip.sampling._rng import (
    CHUNK,
    TAG_PASS,
    ChoiceVariates,
    KeyedStreams,
    SFC64Lanes,
)

labels_st = st.lists(st.integers(-1, 9), min_size=1, max_size=120).filter(
    lambda xs: any(x >= 0 for x in xs)).map(lambda xs: np.array(xs, dtype=np.int64))
SETTINGS = settings(max_examples=40, deadline=None)


def _t_for(labels, strategy, clip, frac):
    ne = int((labels >= 0).sum())
    top = clip * ne if strategy in ("clusterclip", "paced") else 3 * ne + 7
    return max(1, int(frac * top))


def _per_cluster_sequences(labels, stream):
    seqs = {}
    for d in stream:
        seqs.setdefault(int(labels[d]), []).append(d)
    return seqs


# ---------------------------------------------------------------- invariants
@SETTINGS
@given(labels_st, st.sampled_from(STRATEGIES), st.integers(1, 4), st.floats(0.05, 1.0),
       st.integers(0, 3))
def test_stream_invariants(labels, strategy, clip, frac, seed):
    T = _t_for(labels, strategy, clip, frac)
    alpha = 0.7 if strategy in ("temperature", "clusterclip", "paced") and seed % 2 else 0.0
    s = ClusterClipSampler(labels, T, strategy=strategy, clip=clip, alpha=alpha, seed=seed)
    out = list(s)
    assert len(out) == len(s) == T
    assert all(isinstance(x, int) for x in out)
    arr = np.array(out)
    # excluded documents (-1) never appear
    assert (labels[arr] >= 0).all()
    sizes = np.bincount(labels[labels >= 0], minlength=labels.max() + 1)
    if strategy == "random":
        # epochs are permutations of the eligible documents, back to back
        eligible = np.flatnonzero(labels >= 0)
        ne = eligible.size
        for e in range(0, T, ne):
            part = arr[e:e + ne]
            assert np.unique(part).size == part.size
            if part.size == ne:
                assert np.array_equal(np.sort(part), eligible)
        return
    # inside a cluster: without replacement in each pass of n_k draws
    for k, seq in _per_cluster_sequences(labels, out).items():
        n = sizes[k]
        for p in range(0, len(seq), n):
            part = seq[p:p + n]
            assert len(set(part)) == len(part)
            if len(part) == n:
                assert sorted(part) == np.flatnonzero(labels == k).tolist()
    if strategy in ("clusterclip", "paced"):
        reps = np.bincount(arr, minlength=labels.size)
        assert reps.max() <= clip  # no document beyond R
        per_cluster = np.bincount(labels[arr], minlength=sizes.size)
        assert (per_cluster <= clip * sizes).all()
        # a clipped cluster never reappears: its last draw is its clip event
        summ = s.summary()
        events = dict((k, p) for k, p in summ["clip_events"])
        for k in range(sizes.size):
            if sizes[k] and per_cluster[k] == clip * sizes[k]:
                last = int(np.flatnonzero(labels[arr] == k)[-1])
                assert events[k] == last
            else:
                assert k not in events
        assert summ["max_repetition"] == reps.max()
        assert summ["clusters_clipped"] == len(events)


def _reference(labels, T, strategy, clip, alpha, seed):
    """The issue's definition, one draw at a time (slow, obviously right)."""
    labels = np.asarray(labels)
    K = labels.max() + 1
    sizes = np.bincount(labels[labels >= 0], minlength=K)
    docs = [np.flatnonzero(labels == k) for k in range(K)]
    var = ChoiceVariates(seed)
    passes = KeyedStreams(seed, TAG_PASS)
    # passes are generated in groups of G per key, G from n_k, N, K and clip
    ppg = passes_per_group(sizes, clip if strategy == "clusterclip" else None)
    counts = np.zeros(K, np.int64)
    out = []
    for t in range(T):
        alive = sizes > 0
        if strategy == "clusterclip":
            alive &= counts < clip * sizes
        pool = np.flatnonzero(alive)
        u = int(var.get(t, 1)[0])
        if alpha == 0:
            j = (u * pool.size) >> 32
        else:
            cum = np.cumsum(sizes[pool] ** alpha)
            bounds = np.minimum(np.floor(cum[:-1] / cum[-1] * 2.0**32), 2.0**32 - 1)
            j = int(np.sum(bounds <= u))
        k = pool[j]
        out.append(reference_document(docs[k], int(counts[k]), passes, k, int(ppg[k])))
        counts[k] += 1
    return out


def reference_document(docs_k, c, passes, k, G):
    """Document of cluster k's draw c: its place in pass c // n (one pass at a time).

    Passes come in groups of G keyed on (seed, k, group); docs_k: the cluster's documents.
    """
    n = len(docs_k)
    p = c // n
    if n == 1:
        perm = [0]
    else:
        rng = passes(k, p // G)
        perm = (rng.permutation(n) if G == 1 else
                rng.permuted(np.broadcast_to(np.arange(n), (G, n)), axis=1)[p % G])
    return int(docs_k[perm[c % n]])


@settings(max_examples=25, deadline=None)
@given(labels_st, st.sampled_from(["uniform", "temperature", "clusterclip"]),
       st.integers(1, 3), st.floats(0.1, 1.0), st.integers(0, 5))
def test_vectorised_engine_equals_per_draw_definition(labels, strategy, clip, frac, seed):
    T = _t_for(labels, strategy, clip, frac)
    alpha = 0.0 if strategy == "uniform" else 0.5
    got = list(ClusterClipSampler(labels, T, strategy=strategy, clip=clip, alpha=alpha,
                                  seed=seed))
    assert got == _reference(labels, T, strategy, clip, alpha, seed)


@pytest.mark.parametrize("sizes,strategy,clip,T", [
    # many small clusters clipped close together: sparse sub-blocks, several
    # candidate completions per sub-block
    ([3] * 150 + [1] * 50 + [40] * 10, "clusterclip", 2, 1800),
    # clusters above the group size (one pass per group) crossing passes mid-block
    ([2500, 30, 7], "uniform", None, 9000),
    ([4200, 3], "uniform", None, 9000),
])
def test_engine_equals_definition_on_block_edge_cases(sizes, strategy, clip, T):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(0).shuffle(labels)
    got = list(ClusterClipSampler(labels, T, strategy=strategy, clip=clip or 4, seed=1))
    assert got == _reference(labels, T, strategy, clip, 0.0, 1)


def test_many_clusters_take_the_wide_sort_path_and_match_the_definition():
    # 20,000 one-document clusters (15-bit ids): runs of 2**18 draws need 64-bit sort keys.
    # With n_k = 1 the document drawn is the cluster chosen, floor(u * m / 2**32).
    K, T = 20_000, 200_000
    out = np.concatenate(list(ClusterClipSampler(np.arange(K), T, strategy="uniform",
                                                 seed=4).blocks()))
    u = ChoiceVariates(4).get(0, T).astype(np.uint64)
    assert np.array_equal(out, ((u * np.uint64(K)) >> np.uint64(32)).astype(np.int64))


@pytest.mark.parametrize("strategy,alpha", [("uniform", 0.0), ("temperature", 0.5),
                                            ("temperature", 1.0), ("clusterclip", 0.0)])
def test_cluster_choice_matches_weights_while_pool_unchanged(strategy, alpha):
    rng = np.random.default_rng(7)
    sizes = rng.integers(30, 400, 25)
    labels = np.repeat(np.arange(25), sizes)
    rng.shuffle(labels)
    T = 20_000  # with clip 50 nobody is clipped: pool unchanged throughout
    s = ClusterClipSampler(labels, T, strategy=strategy, clip=50, alpha=alpha, seed=3)
    assert s.summary()["clusters_clipped"] == 0
    counts = np.bincount(labels[np.concatenate(list(s.blocks()))], minlength=25)
    expected = sizes ** alpha / (sizes ** alpha).sum() * T
    assert chisquare(counts, expected).pvalue > 1e-3
    # the test has power: a 10% bias on one cluster is rejected
    biased = counts.astype(float)
    biased[0] *= 1.1
    biased[1:] *= (T - biased[0]) / biased[1:].sum()
    assert chisquare(biased, expected).pvalue < chisquare(counts, expected).pvalue


def test_pool_renormalises_after_clipping():
    # two tiny clusters are clipped early; afterwards the big ones share the draws evenly
    labels = np.concatenate([np.zeros(2), np.ones(3), np.repeat([2, 3, 4], 3000)]).astype(int)
    s = ClusterClipSampler(labels, 15_000, strategy="clusterclip", clip=2, seed=1)
    out = np.concatenate(list(s.blocks()))
    last = max(p for _, p in s.summary()["clip_events"])
    tail = labels[out[last + 1:]]
    assert set(np.unique(tail)) == {2, 3, 4}
    assert chisquare(np.bincount(tail)[2:]).pvalue > 1e-3


def test_cluster_weights_replace_size_powers():
    labels = np.repeat(np.arange(4), [50, 100, 200, 400])
    w = np.array([4.0, 1.0, 1.0, 2.0])
    s = ClusterClipSampler(labels, 16_000, strategy="temperature", cluster_weights=w, seed=2)
    counts = np.bincount(labels[np.concatenate(list(s.blocks()))], minlength=4)
    assert chisquare(counts, w / w.sum() * 16_000).pvalue > 1e-3
    same = ClusterClipSampler(labels, 500, strategy="temperature", alpha=1.0, seed=2)
    by_w = ClusterClipSampler(labels, 500, strategy="temperature",
                              cluster_weights=np.array([50.0, 100, 200, 400]), seed=2)
    assert list(same) == list(by_w)


# --------------------------------------------------------------- determinism
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_same_seed_same_stream_other_seed_other_stream(strategy):
    labels = np.random.default_rng(0).integers(-1, 20, 2000)
    a = list(ClusterClipSampler(labels, 3000, strategy=strategy, seed=5))
    b = list(ClusterClipSampler(labels.astype(np.int32), 3000, strategy=strategy, seed=5))
    c = list(ClusterClipSampler(labels, 3000, strategy=strategy, seed=6))
    assert a == b
    assert a != c


def test_block_size_and_api_mix_do_not_change_the_stream():
    labels = np.random.default_rng(1).integers(0, 40, 3000)
    ref = np.concatenate(list(ClusterClipSampler(labels, 9000, seed=2).blocks()))
    s = ClusterClipSampler(labels, 9000, seed=2)
    parts, it = [], iter(s)
    for size in (1, 7, 100, 4096):
        parts.append(next(s.blocks(size)))
        parts.append(np.array([next(it) for _ in range(size % 13 + 1)]))
    parts.extend(s.blocks(333))
    assert np.array_equal(np.concatenate(parts), ref)


def test_stream_crossing_variate_chunks_resumes_exactly():
    labels = np.random.default_rng(2).integers(0, 300, 5000)
    T = CHUNK + 3000
    full = np.concatenate(list(ClusterClipSampler(labels, T, strategy="uniform").blocks()))
    c = CHUNK - 1234
    rest = np.concatenate(list(ClusterClipSampler(labels, T, strategy="uniform",
                                                  consumed_samples=c).blocks(777)))
    assert np.array_equal(rest, full[c:])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**64 - 1),
       asks=st.lists(st.tuples(st.integers(0, 4), st.integers(0, CHUNK - 1),
                               st.integers(1, 5000)), min_size=1, max_size=12),
       run=st.integers(0, 4))
def test_variates_generated_ahead_are_those_of_the_chunk_asked_for(seed, asks, run):
    """Chunks generated ahead (after two in a row) are the chunks later asked for, whatever
    the order of the asks: each ask equals the same ask of a fresh ChoiceVariates."""
    v = ChoiceVariates(seed)
    asks = [(c, 0, 64) for c in range(run)] + asks  # a stream of chunks first
    for cid, off, n in asks:
        n = min(n, CHUNK - off)
        got = v.get(cid * CHUNK + off, n)
        assert np.array_equal(got, ChoiceVariates(seed).get(cid * CHUNK + off, n))


def _stream_chunks(seed: int, n: int) -> list[bytes]:
    v = ChoiceVariates(seed)
    return [v.get(c * CHUNK, 16).tobytes() for c in range(n)]


def test_variates_ahead_come_from_one_thread_per_process_and_a_forked_child_gets_its_own():
    """Every ChoiceVariates of a process queues its chunks ahead to one thread (a thread
    started per chunk cost a scheduling wait each time): streaming from several instances
    leaves one such thread; a forked child (a DataLoader worker) starts its own and gets
    the same variates."""
    import multiprocessing
    import threading

    want = {s: [ChoiceVariates(s).get(c * CHUNK, 16).tobytes() for c in range(5)]
            for s in (1, 2, 3)}
    assert all(_stream_chunks(s, 5) == want[s] for s in (1, 2, 3))
    ahead = [t for t in threading.enumerate() if t.name == "choice_variates"]
    assert len(ahead) == 1 and ahead[0].daemon
    if "fork" in multiprocessing.get_all_start_methods():
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.apply_async(_stream_chunks, (2, 5)).get(timeout=120) == want[2]


@settings(max_examples=6, deadline=None)
@given(size=st.integers(1000, 3 * CHUNK), strategy=st.sampled_from(["clusterclip", "uniform"]))
def test_blocks_of_any_size_are_the_same_bytes_over_several_chunks(size, strategy):
    """A schedule of several variate chunks (so chunks are generated ahead) is the same
    bytes cut into blocks of any size as in blocks of one chunk."""
    labels = np.random.default_rng(3).integers(0, 50, 4000)
    T = 3 * CHUNK + 77
    ref = np.concatenate(list(ClusterClipSampler(labels, T, strategy=strategy, clip=800,
                                                 seed=5).blocks(CHUNK)))
    got = np.concatenate(list(ClusterClipSampler(labels, T, strategy=strategy, clip=800,
                                                 seed=5).blocks(size)))
    assert got.tobytes() == ref.tobytes()


# ---------------------------------------------------------------- resumption
@SETTINGS
@given(labels_st, st.sampled_from(STRATEGIES), st.integers(1, 3), st.floats(0.05, 1.0),
       st.floats(0.0, 1.0), st.integers(0, 9))
def test_resume_anywhere_equals_uninterrupted(labels, strategy, clip, frac, where, seed):
    T = _t_for(labels, strategy, clip, frac)
    kw = dict(strategy=strategy, clip=clip, seed=seed)
    full = list(ClusterClipSampler(labels, T, **kw))
    c = int(where * T)
    # Megatron style: a known count of consumed samples
    assert list(ClusterClipSampler(labels, T, consumed_samples=c, **kw)) == full[c:]
    # checkpoint style: state_dict through JSON into a fresh sampler
    s = ClusterClipSampler(labels, T, **kw)
    it = iter(s)
    head = [next(it) for _ in range(c)]
    state = json.loads(json.dumps(s.state_dict()))
    assert state["position"] == c
    s2 = ClusterClipSampler(labels, T, **kw)
    s2.load_state_dict(state)
    assert len(s2) == T - c
    assert head + list(s2) == full


@SETTINGS
@given(labels_st, st.sampled_from(STRATEGIES), st.integers(1, 4), st.integers(1, 4),
       st.floats(0.0, 0.9), st.integers(0, 3))
def test_rank_streams_interleave_to_the_global_stream_elastically(labels, strategy, w1, w2,
                                                                   where, seed):
    T = _t_for(labels, strategy, 2, 0.9)
    kw = dict(strategy=strategy, clip=2, seed=seed)
    full = list(ClusterClipSampler(labels, T, **kw))
    L = T // w1
    ranks = [ClusterClipSampler(labels, T, rank=r, world_size=w1, **kw) for r in range(w1)]
    assert all(len(r) == L for r in ranks)
    # run every rank for `i` steps, checkpoint (rank 0's state), continue with w2 ranks
    i = int(where * L)
    its = [iter(r) for r in ranks]
    heads = [[next(it) for _ in range(i)] for it in its]
    states = [r.state_dict() for r in ranks]
    assert all(st_ == states[0] for st_ in states)  # the state is rank independent
    g = states[0]["position"]
    assert g == i * w1
    for j in range(i):
        for r in range(w1):
            assert heads[r][j] == full[j * w1 + r]
    new = [ClusterClipSampler(labels, T, rank=r, world_size=w2, **kw) for r in range(w2)]
    for s in new:
        s.load_state_dict(states[0])
    tails = [list(s) for s in new]
    L2 = (T - g) // w2
    assert all(len(t) == L2 for t in tails)
    merged = [tails[j % w2][j // w2] for j in range(L2 * w2)]
    assert merged == full[g:g + L2 * w2]
    assert new[0].summary()["unserved_positions"] == (T - g) % w2


def test_rank_remainder_is_reported_and_not_served():
    labels = np.arange(10) % 3
    s = ClusterClipSampler(labels, 11, rank=2, world_size=4, strategy="uniform")
    assert len(s) == 2 and len(list(s)) == 2
    summ = s.summary()
    assert summ["samples_per_rank"] == 2 and summ["unserved_positions"] == 3


def test_exhausted_sampler_restarts_from_its_start_like_a_torch_sampler():
    labels = np.arange(50) % 5
    s = ClusterClipSampler(labels, 120, consumed_samples=20)
    first = list(s)
    assert s.state_dict()["position"] == 120
    assert len(s) == 100
    assert list(s) == first


def test_pickled_sampler_continues_identically():
    labels = np.random.default_rng(3).integers(-1, 30, 1000)
    s = ClusterClipSampler(labels, 3000, seed=4)
    it = iter(s)
    [next(it) for _ in range(777)]
    s2 = pickle.loads(pickle.dumps(s))
    assert list(s2) == list(s)


def test_state_dict_is_small_json_and_checked_on_load():
    labels = np.random.default_rng(4).integers(0, 1000, 100_000)
    s = ClusterClipSampler(labels, 250_000, seed=1, consumed_samples=123_456)
    state = s.state_dict()
    blob = json.dumps(state)
    assert len(blob) < 20 * 1000 + 500  # O(K): about a count per cluster
    assert len(state["counts"]) == 1000 and sum(state["counts"]) == 123_456
    other = ClusterClipSampler(labels, 250_000, seed=2)
    with pytest.raises(InputError, match="seed"):
        other.load_state_dict(state)
    shuffled = labels.copy()
    shuffled[:2] = shuffled[1::-1] + 1
    with pytest.raises(InputError, match="labels"):
        ClusterClipSampler(shuffled, 250_000, seed=1).load_state_dict(state)
    bad = dict(state, counts=[0] * 1000)
    with pytest.raises(InputError, match="checksum"):
        ClusterClipSampler(labels, 250_000, seed=1).load_state_dict(bad)


# ------------------------------------------------------------------ summary
def test_summary_reports_capacity_clipping_and_epochs():
    labels = np.concatenate([np.full(10, -1), np.repeat(np.arange(6), [1, 2, 5, 20, 50, 100])])
    ne = 178
    s = ClusterClipSampler(labels, 3 * ne, clip=3, seed=0)
    out = np.concatenate(list(s.blocks()))
    summ = json.loads(json.dumps(s.summary()))
    assert summ["capacity"] == 3 * ne and summ["eligible_documents"] == ne
    assert summ["excluded_documents"] == 10 and summ["clusters"] == 6
    assert summ["epochs_equivalent"] == pytest.approx(3.0)
    assert summ["clusters_clipped"] == 6  # capacity exhausted: everyone clipped
    assert summ["clip_events"][-1][1] == 3 * ne - 1
    assert summ["max_repetition"] == 3 == np.bincount(out).max()
    assert summ["documents_seen"] == ne
    assert [k for k, _ in summ["clip_events"][:2]] == [0, 1]  # small clusters first


def test_random_summary():
    s = ClusterClipSampler(np.arange(100) % 7, 250, strategy="random")
    summ = s.summary()
    assert summ["capacity"] is None and summ["max_repetition"] == 3
    assert summ["min_repetition"] == 2 and summ["documents_seen"] == 100


# --------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs,message", [
    (dict(clip=0), "clip must be >= 1, got 0"),
    (dict(num_samples=0), "num_samples must be >= 1, got 0"),
    (dict(num_samples=5000), "num_samples 5000 exceeds capacity 4000 = clip 4 x 1000 "
                             "eligible documents"),
    (dict(strategy="bogus"), "unknown strategy 'bogus'"),
    (dict(seed=-1), "seed must be >= 0, got -1"),
    (dict(rank=2, world_size=2), "rank must be < world_size 2, got 2"),
    (dict(world_size=0), "world_size must be >= 1, got 0"),
    (dict(consumed_samples=101), "consumed_samples 101 exceeds num_samples 100"),
    (dict(alpha=float("nan"), strategy="temperature"), "alpha must be a finite number"),
    (dict(alpha=0.5, strategy="uniform"), "alpha applies to temperature, clusterclip and paced"),
    (dict(cluster_weights=np.ones(3)), "cluster_weights must be a 1-D array of length >= 10"),
    (dict(cluster_weights=np.r_[-1.0, np.ones(9)]), "got -1.0 for cluster 0"),
    (dict(cluster_weights=np.zeros(10)), "no cluster with documents has a weight > 0"),
    (dict(cluster_weights=np.ones(10), strategy="random"), "does not apply to strategy random"),
    (dict(num_samples=2.5), "num_samples must be an integer, got 2.5"),
])
def test_bad_parameters_raise_input_error_naming_the_value(kwargs, message):
    labels = np.arange(1000) % 10
    args = dict(num_samples=100)
    args.update(kwargs)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ClusterClipSampler(labels, **args)


@pytest.mark.parametrize("labels,message", [
    (np.zeros((3, 2), int), "1-D array, got shape (3, 2)"),
    (np.array([0.0, 1.0]), "integers, got dtype float64"),
    (np.array([], int), "labels is empty"),
    (np.array([-1, -1]), "no eligible documents"),
    (np.array([0, -2]), "got -2 at index 1"),
])
def test_bad_labels(labels, message):
    with pytest.raises(InputError) as e:
        ClusterClipSampler(labels, 10)
    assert message in str(e.value)


def test_more_than_2_16_clusters_take_the_two_pass_radix_path():
    # 70,000 one-document clusters: cluster ids above 16 bits are grouped by a
    # stable sort on the low then the high 16 bits; n_k = 1, so the document
    # drawn is the cluster chosen, floor(u * m / 2**32).
    K, T = 70_000, 300_000
    out = np.concatenate(list(ClusterClipSampler(np.arange(K), T, strategy="uniform",
                                                 seed=2).blocks(1 << 17)))
    u = ChoiceVariates(2).get(0, T).astype(np.uint64)
    assert np.array_equal(out, ((u * np.uint64(K)) >> np.uint64(32)).astype(np.int64))


# --------------------------------------------------------------- seek index
@contextlib.contextmanager
def _seek_bits(bits):
    """Checkpoints every 2**bits positions (tiny, so small schedules use the index)."""
    old = _seek.SEEK_BITS
    _seek.SEEK_BITS = bits
    try:
        yield
    finally:
        _seek.SEEK_BITS = old


@settings(max_examples=30, deadline=None)
@given(labels_st, st.sampled_from(["uniform", "temperature", "clusterclip"]),
       st.integers(1, 3), st.floats(0.1, 1.0), st.floats(0.0, 1.0), st.integers(0, 5),
       st.integers(1, 5))
def test_resume_through_the_cached_seek_index_equals_the_definition(
        labels, strategy, clip, frac, where, seed, bits):
    T = _t_for(labels, strategy, clip, frac)
    alpha = 0.0 if strategy == "uniform" else 0.5
    c = int(where * T)
    kw = dict(strategy=strategy, clip=clip, alpha=alpha, seed=seed)
    ref = _reference(labels, T, strategy, clip, alpha, seed)
    with tempfile.TemporaryDirectory() as d, _seek_bits(bits):
        first = ClusterClipSampler(labels, T, consumed_samples=c, cache_dir=d, **kw)
        built = first._seek_index.last_build if first._seek_index else None
        assert list(first) == ref[c:]
        # a restarted process: a new sampler finds the file and replays < 2**bits
        again = ClusterClipSampler(labels, T, consumed_samples=c, cache_dir=d, **kw)
        if c >> bits:
            assert built is not None and built["to"] == (c >> bits) << bits
            assert again._seek_index.last_build is None  # read, not rebuilt
            assert [p.name for p in Path(d).iterdir()] == [Path(built["path"]).name]
        assert list(again) == ref[c:]
        plain = ClusterClipSampler(labels, T, cache_dir=False, **kw)
        assert again.summary()["clip_events"] == plain.summary()["clip_events"]


def test_corrupt_or_foreign_seek_index_is_ignored_and_rebuilt(tmp_path, capsys):
    labels = np.repeat(np.arange(6), [1, 3, 8, 20, 40, 90])
    T = 2 * labels.size
    kw = dict(strategy="clusterclip", clip=2, alpha=0.5, seed=3)
    ref = list(ClusterClipSampler(labels, T, cache_dir=False, **kw))
    c = T - 37
    with _seek_bits(4):
        s = ClusterClipSampler(labels, T, consumed_samples=c, cache_dir=tmp_path, **kw)
        path = Path(s._seek_index.path)
        assert "built the seek index" in capsys.readouterr().err
        good = path.read_bytes()
        other = ClusterClipSampler(labels, T, consumed_samples=c, cache_dir=tmp_path / "o",
                                   **{**kw, "seed": 4})
        foreign = Path(other._seek_index.path).read_bytes()
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0xFF
        for bad in (b"not an npz", bytes(flipped), foreign, good[: len(good) // 2]):
            path.write_bytes(bad)
            again = ClusterClipSampler(labels, T, consumed_samples=c, cache_dir=tmp_path, **kw)
            assert again._seek_index.last_build is not None  # not trusted: rebuilt
            assert list(again) == ref[c:]
            assert path.read_bytes() == good  # and rewritten
        assert sorted(p.name for p in tmp_path.iterdir()) == ["o", path.name]


def test_unwritable_cache_dir_costs_only_the_cache(tmp_path, capsys):
    labels = np.repeat(np.arange(4), [5, 9, 30, 60])
    blocker = tmp_path / "file"
    blocker.write_text("a user's file")
    with _seek_bits(3):
        s = ClusterClipSampler(labels, 200, strategy="uniform", consumed_samples=150,
                               cache_dir=blocker / "sub")
        assert list(s) == list(ClusterClipSampler(labels, 200, strategy="uniform",
                                                  cache_dir=False))[150:]
    assert "could not write the seek index" in capsys.readouterr().err
    assert blocker.read_text() == "a user's file"


# ------------------------------------------------------ passes in SFC64 lanes
def test_sfc64_lanes_shuffle_exactly_as_numpy():
    # Lane s shuffles G passes of n items as numpy's Generator.shuffle does with
    # stream (a_s, b_s), pass after pass (rejections, the buffered uint32 half),
    # lanes of different n and G side by side (longest first).
    rng0 = np.random.default_rng(0)
    n = np.concatenate([rng0.integers(2, 40, 150), [300, 2, 17], rng0.integers(2, 6, 50)])
    G = np.concatenate([rng0.integers(1, 5, 150), [1, 7, 40], rng0.integers(1, 30, 50)])
    order = np.argsort(-(n - 1) * G, kind="stable")
    n, G = n[order], G[order]
    S = n.size
    streams = KeyedStreams(11, TAG_PASS)
    a, b = np.arange(S) * 7 + 1, np.arange(S) + 100
    lens = n * G
    offs = np.cumsum(lens) - lens
    buf = np.concatenate([np.tile(np.arange(x) * 3 + 1, y) for x, y in zip(n, G, strict=True)])
    SFC64Lanes(streams.states(a, b)).shuffle_flat(buf, offs, n, G)
    for s in range(S):
        rng = streams(int(a[s]), int(b[s]))
        want = np.tile(np.arange(n[s]) * 3 + 1, (G[s], 1))
        for row in want:
            rng.shuffle(row)
        assert np.array_equal(buf[offs[s]:offs[s] + lens[s]], want.ravel()), s


def test_many_small_clusters_loaded_in_lanes_match_the_definition():
    # 400 clusters of 2-5 documents, clip 3: groups of 3 passes, loaded many at
    # a time in SFC64 lanes (first touch and later groups alike).
    labels = np.repeat(np.arange(400), np.random.default_rng(1).integers(2, 6, 400))
    np.random.default_rng(2).shuffle(labels)
    T = int(2.9 * labels.size)
    got = list(ClusterClipSampler(labels, T, strategy="clusterclip", clip=3, seed=5))
    assert got == _reference(labels, T, "clusterclip", 3, 0.0, 5)


@pytest.mark.slow
def test_cli_restart_reads_the_seek_index_a_first_run_built(tmp_path):
    # Two fresh `clusterclip sample` processes resuming past one checkpoint
    # interval (2**24): the first builds the index in $CLUSTERCLIP_CACHE (and
    # says so), the second reads it; both write the uninterrupted continuation.
    from _helpers import child_env, run_cli

    labels = np.random.default_rng(0).integers(0, 40, 500)
    np.save(tmp_path / "labels.npy", labels)
    start = (1 << 24) + 123
    T = start + 700
    env = child_env(CLUSTERCLIP_CACHE=str(tmp_path / "cache"))
    outs = []
    for i in range(2):
        out = tmp_path / f"s{i}.npy"
        p = run_cli("sample", "--labels", tmp_path / "labels.npy", "--strategy", "uniform",
                    "--num-samples", T, "--consumed-samples", start, "--out", out,
                    "--no-progress", env=env)
        assert p.returncode == 0, p.stderr
        assert ("built the seek index" in p.stderr) == (i == 0)
        outs.append(np.load(out))
    assert [f.name for f in (tmp_path / "cache").iterdir()][0].startswith("seek-")
    s = ClusterClipSampler(labels, T, strategy="uniform", cache_dir=False)
    s._engine.seek(start - 5)  # count-only replay, as before the index
    s._set_start(start - 5, s._engine.counts.copy())
    want = np.concatenate(list(s.blocks()))[5:]
    assert np.array_equal(outs[0], want) and np.array_equal(outs[1], want)
