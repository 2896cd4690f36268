"""Strategy ``paced`` (issue 7): ClusterClip's totals spread evenly over the schedule.

Every guarantee is checked against ``_reference``, a plain one-draw-at-a-time
implementation of the definition: water-filled quotas (exact fractions),
then at every step the cluster whose next draw has the smallest key
``trunc((j + u_kj) * (T / q_k))`` (ties: lower cluster id), then the next
document of that cluster's passes.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from _helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampler import reference_document

from clusterclip import ClusterClipSampler
from clusterclip.errors import InputError
from clusterclip.sampling._engine import passes_per_group
from clusterclip.sampling._rng import TAG_PACED, TAG_PASS, CounterUniforms, KeyedStreams
from clusterclip.sampling.sampler import _state_checksum

labels_st = st.lists(st.integers(-1, 7), min_size=1, max_size=80).filter(
    lambda xs: any(x >= 0 for x in xs)).map(lambda xs: np.array(xs, dtype=np.int64))
SETTINGS = settings(max_examples=30, deadline=None)


# ---------------------------------------------------------------- reference
def _ref_quotas(sizes, weights, clip, T):
    """Water-filling in exact fractions, then largest remainder (ties: lower id)."""
    live = [k for k in range(len(sizes)) if sizes[k] > 0]
    w = {k: Fraction(1) if weights is None else Fraction(float(weights[k])) for k in live}
    cap = {k: clip * int(sizes[k]) for k in live}
    capped: set[int] = set()
    while True:  # cap every cluster that lam * w_k would push over its cap, re-solve
        free = [k for k in live if k not in capped]
        if not free:
            real = {k: Fraction(cap[k]) for k in live}
            break
        lam = (T - sum(cap[k] for k in capped)) / sum(w[k] for k in free)
        over = [k for k in free if lam * w[k] >= cap[k]]
        if not over:
            real = {k: (Fraction(cap[k]) if k in capped else lam * w[k]) for k in live}
            break
        capped.update(over)
    q = {k: int(real[k]) for k in live}  # floor
    missing = T - sum(q.values())
    # remainders compared on a 2**-32 grid, ties to the lower cluster id
    for k in sorted(live, key=lambda k: (-round((real[k] - q[k]) * 2**32), k))[:missing]:
        q[k] += 1
    out = np.zeros(len(sizes), np.int64)
    for k in live:
        out[k] = q[k]
    return out, real


def _reference(labels, T, clip, seed, weights=None):
    labels = np.asarray(labels)
    K = int(labels.max()) + 1
    sizes = np.bincount(labels[labels >= 0], minlength=K)
    docs = [np.flatnonzero(labels == k) for k in range(K)]
    quotas, _ = _ref_quotas(sizes, weights, clip, T)
    uni = CounterUniforms(seed, TAG_PACED, K)
    passes = KeyedStreams(seed, TAG_PASS)
    ppg = passes_per_group(sizes, clip)

    def key(k, j):
        u = float(uni(np.array([k]), np.array([j]))[0])
        return int((j + u) * (T / int(quotas[k])))

    counts = [0] * K
    out = []
    for _ in range(T):
        k = min((key(k, counts[k]), k) for k in range(K) if counts[k] < quotas[k])[1]
        # inside the cluster: the passes of every cluster strategy
        out.append(reference_document(docs[k], counts[k], passes, k, int(ppg[k])))
        counts[k] += 1
    return out


def _sizes(labels):
    return np.bincount(labels[labels >= 0], minlength=labels.max() + 1)


@st.composite
def paced_case(draw):
    """(labels, T, clip, seed, weights) with T <= clip x eligible N."""
    labels = draw(labels_st)
    clip = draw(st.integers(1, 4))
    ne = int((labels >= 0).sum())
    T = draw(st.integers(1, clip * ne))
    seed = draw(st.integers(0, 2**32))
    kind = draw(st.sampled_from(["uniform", "int", "alpha"]))
    weights = None
    if kind != "uniform":
        sizes = _sizes(labels)
        weights = (draw(st.lists(st.integers(1, 9), min_size=sizes.size, max_size=sizes.size))
                   if kind == "int" else sizes.astype(float) ** 0.5)
        weights = np.asarray(weights, dtype=np.float64)
        weights[sizes == 0] = 1.0
    return labels, T, clip, seed, weights


def _sampler(labels, T, clip, seed, weights, **kw):
    return ClusterClipSampler(labels, T, strategy="paced", clip=clip, seed=seed,
                              cluster_weights=weights, **kw)


# ------------------------------------------------------------------ schedule
@SETTINGS
@given(paced_case())
def test_stream_equals_the_one_draw_at_a_time_reference(case):
    labels, T, clip, seed, weights = case
    assert list(_sampler(labels, T, clip, seed, weights)) == _reference(labels, T, clip, seed,
                                                                       weights)


@SETTINGS
@given(paced_case())
def test_quotas_are_water_filled_and_rounded_by_largest_remainder(case):
    labels, T, clip, seed, weights = case
    sizes = _sizes(labels)
    s = _sampler(labels, T, clip, seed, weights)
    out = np.concatenate(list(s.blocks()))
    counts = np.bincount(labels[out], minlength=sizes.size)
    ref, real = _ref_quotas(sizes, weights, clip, T)
    assert counts.sum() == T
    assert (counts <= clip * sizes).all()  # q_k <= R n_k: the R clip
    for k, r in real.items():  # rounding moves a quota by less than one draw
        assert abs(counts[k] - r) < 1
    if weights is None or np.all(weights == np.round(weights)):
        assert np.array_equal(counts, ref)  # exact arithmetic agrees
    # summary: clusters whose quota is R n_k, each at its last draw
    summ = s.summary()
    capped = {k for k in range(sizes.size) if sizes[k] and counts[k] == clip * sizes[k]}
    assert summ["clusters_clipped"] == len(capped)
    for k, p in summ["clip_events"]:
        assert k in capped and int(np.flatnonzero(labels[out] == k)[-1]) == p
    assert [p for _, p in summ["clip_events"]] == sorted(p for _, p in summ["clip_events"])
    # events read off the generated tail and those counted key by key agree
    for tail in (0, 1, T // 3):
        assert [list(e) for e in s._engine.capped_events(tail)] == summ["clip_events"]


@SETTINGS
@given(paced_case())
def test_inside_a_cluster_passes_without_replacement(case):
    labels, T, clip, seed, weights = case
    sizes = _sizes(labels)
    out = np.concatenate(list(_sampler(labels, T, clip, seed, weights).blocks()))
    reps = np.bincount(out, minlength=labels.size)
    assert reps.max() <= clip and (reps[labels < 0] == 0).all()
    for k in np.flatnonzero(sizes):
        r = reps[labels == k]
        assert r.max() - r.min() <= 1  # counts inside a cluster differ by at most one
        seq = out[labels[out] == k]
        for p in range(0, seq.size, sizes[k]):  # each pass is without replacement
            part = seq[p:p + sizes[k]]
            assert np.unique(part).size == part.size


def _tenth_counts(cluster_of_draw, K):
    T = cluster_of_draw.size
    edges = [T * i // 10 for i in range(11)]
    return np.array([np.bincount(cluster_of_draw[a:b], minlength=K)
                     for a, b in zip(edges[:-1], edges[1:], strict=True)])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(5, 400), min_size=1, max_size=6), st.integers(1, 4),
       st.floats(0.05, 1.0), st.integers(0, 2**32))
def test_every_tenth_gets_a_tenth_of_each_quota(sizes, clip, frac, seed):
    # The bound of issue 7: |draws in a tenth - q_k / 10| <= 0.15 q_k / 10 + 2.
    # A draw's position is within about K of its key, so it holds once T >> K.
    labels = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed % 1000).shuffle(labels)
    T = max(300 * len(sizes), int(frac * clip * labels.size))
    if T > clip * labels.size:
        return
    out = np.concatenate(list(ClusterClipSampler(labels, T, strategy="paced", clip=clip,
                                                 seed=seed).blocks()))
    per = _tenth_counts(labels[out], len(sizes))
    q = per.sum(axis=0)
    assert (np.abs(per - q / 10) <= 0.15 * q / 10 + 2).all()


def test_tenths_on_a_power_law_corpus_paced_holds_greedy_clusterclip_does_not():
    rng = np.random.default_rng(5)
    K = 200
    sizes = np.maximum(3, (3000 / np.arange(1, K + 1)).astype(int))
    labels = np.repeat(np.arange(K), sizes)
    rng.shuffle(labels)
    T = 3 * labels.size  # R = 4: the clip binds on the small clusters
    bad = {}
    for strategy in ("paced", "clusterclip"):
        out = np.concatenate(list(ClusterClipSampler(labels, T, strategy=strategy, clip=4,
                                                     seed=1).blocks()))
        per = _tenth_counts(labels[out], K)
        q = per.sum(axis=0)
        bad[strategy] = int((np.abs(per - q / 10) > 0.15 * q / 10 + 2).any(axis=0).sum())
    assert bad["paced"] == 0
    assert bad["clusterclip"] > K // 4  # the greedy rule front-loads; the test can fail


# ---------------------------------------------------------------- contract
@SETTINGS
@given(paced_case(), st.lists(st.integers(1, 50), min_size=1, max_size=8))
def test_block_sizes_do_not_change_the_stream(case, sizes):
    labels, T, clip, seed, weights = case
    ref = list(_sampler(labels, T, clip, seed, weights))
    s = _sampler(labels, T, clip, seed, weights)
    got, i = [], 0
    while len(got) < T:
        got.extend(next(s.blocks(sizes[i % len(sizes)])).tolist())
        i += 1
    assert got == ref


@SETTINGS
@given(paced_case(), st.integers(1, 4), st.integers(1, 4), st.floats(0.0, 1.0))
def test_ranks_interleave_and_resume_elastically_from_state_dict(case, w1, w2, where):
    labels, T, clip, seed, weights = case
    full = _reference(labels, T, clip, seed, weights)
    L = T // w1
    ranks = [_sampler(labels, T, clip, seed, weights, rank=r, world_size=w1) for r in range(w1)]
    i = int(where * L)
    heads = [[next(it) for _ in range(i)] for it in map(iter, ranks)]
    for j in range(i):
        assert [h[j] for h in heads] == full[j * w1:(j + 1) * w1]
    states = [json.loads(json.dumps(r.state_dict())) for r in ranks]
    assert all(s == states[0] for s in states) and states[0]["position"] == i * w1
    new = [_sampler(labels, T, clip, seed, weights, rank=r, world_size=w2) for r in range(w2)]
    for s in new:
        s.load_state_dict(states[0])
    tails = [list(s) for s in new]
    L2 = (T - i * w1) // w2
    assert [tails[j % w2][j // w2] for j in range(L2 * w2)] == full[i * w1:i * w1 + L2 * w2]


@SETTINGS
@given(paced_case(), st.floats(0.0, 1.0))
def test_consumed_samples_equals_the_uninterrupted_tail(case, where):
    labels, T, clip, seed, weights = case
    full = list(_sampler(labels, T, clip, seed, weights))
    c = int(where * T)
    s = _sampler(labels, T, clip, seed, weights, consumed_samples=c)
    # the counts found by the key search are those of the draws before c
    assert s.state_dict()["counts"] == np.bincount(
        labels[np.array(full[:c], dtype=np.int64)], minlength=labels.max() + 1).tolist()
    assert list(s) == full[c:]


@pytest.mark.parametrize("seed", [0, 1])
def test_same_seed_same_stream_other_seed_other(seed):
    labels = np.random.default_rng(0).integers(-1, 20, 2000)
    a = list(ClusterClipSampler(labels, 4000, strategy="paced", seed=seed))
    assert a == list(ClusterClipSampler(labels.astype(np.int32), 4000, strategy="paced",
                                        seed=seed))
    assert a != list(ClusterClipSampler(labels, 4000, strategy="paced", seed=seed + 7))


def test_seek_to_1e9_without_replay_lands_between_consumed_and_remaining_keys():
    # Position 10**9 of a 2 x 10**9 schedule: counts by binary search over keys.
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 300, 20_000_000 // 100)  # 300 clusters of ~670 docs
    T = 2 * 10**9 // 100 * 100
    clip = -(-T // labels.size)
    p = 10**9 + 12_345
    s = ClusterClipSampler(labels, T, strategy="paced", clip=clip, seed=2, consumed_samples=p)
    eng = s._engine
    c = np.array(s.state_dict()["counts"])[eng._live]
    assert c.sum() == p
    # every consumed draw orders before every remaining one: (key, cluster)
    li = np.arange(eng._live.size)
    had = c > 0
    last = max(zip(eng._keys(li[had], c[had] - 1), li[had], strict=True))
    left = c < eng._q
    nxt = min(zip(eng._keys(li[left], c[left]), li[left], strict=True))
    assert last < nxt
    # and the stream continues as from a nearby start run forward
    near = ClusterClipSampler(labels, T, strategy="paced", clip=clip, seed=2,
                              consumed_samples=p - 5000)
    got = next(near.blocks(5000 + 64))[5000:]
    assert np.array_equal(next(s.blocks(64)), got)


def test_capacity_and_state_errors():
    labels = np.arange(100) % 10
    with pytest.raises(InputError, match="num_samples 401 exceeds capacity 400 = clip 4"):
        ClusterClipSampler(labels, 401, strategy="paced", clip=4)
    s = ClusterClipSampler(labels, 400, strategy="paced", clip=4, consumed_samples=50)
    state = s.state_dict()
    assert sum(state["counts"]) == 50
    wrong = dict(state, counts=[5] * 10) if state["counts"] != [5] * 10 else \
        dict(state, counts=[6] + [5] * 8 + [4])
    with pytest.raises(InputError, match="checksum"):
        ClusterClipSampler(labels, 400, strategy="paced", clip=4).load_state_dict(wrong)
    # with a recomputed checksum, the counts still must be those the keys give there
    wrong["checksum"] = _state_checksum(wrong)
    with pytest.raises(InputError, match="counts are inconsistent with its position"):
        ClusterClipSampler(labels, 400, strategy="paced", clip=4).load_state_dict(wrong)


# ------------------------------------------------------------ CLI and torch
def test_cli_sample_paced_writes_the_sampler_schedule_and_its_summary(tmp_path, capsys):
    from clusterclip.cli import main

    labels = np.random.default_rng(0).integers(-1, 30, 3000)
    np.save(tmp_path / "labels.npy", labels)
    out, summ = tmp_path / "schedule.npy", tmp_path / "summary.json"
    assert main(["sample", "--labels", str(tmp_path / "labels.npy"), "--strategy", "paced",
                 "--clip", "2", "--num-samples", "5000", "--seed", "3", "--out", str(out),
                 "--summary-json", str(summ), "--no-progress"]) == 0
    got = np.load(out)
    assert got.dtype == np.int64
    assert got.tolist() == list(ClusterClipSampler(labels, 5000, strategy="paced", clip=2,
                                                   seed=3))
    s = json.loads(summ.read_text())
    assert s["strategy"] == "paced" and s["clusters_clipped"] == len(s["clip_events"]) > 0
    text = capsys.readouterr().out
    assert "clipped:" in text and "repetition:  max 2" in text


def test_cli_paced_over_capacity_exits_2_with_one_line_and_no_output(tmp_path):
    np.save(tmp_path / "labels.npy", np.arange(20) % 4)
    out = tmp_path / "out.npy"
    proc = run_cli("sample", "--labels", tmp_path / "labels.npy", "--strategy", "paced",
                   "--clip", "4", "--num-samples", "81", "--out", out, "--no-progress")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--num-samples 81 exceeds capacity 80" in lines[0]
    assert not out.exists()


def test_workdir_sample_stage_takes_paced(tmp_path):
    from clusterclip.stages.sample import SampleOptions, run
    from clusterclip.workdir import Workdir

    labels = np.random.default_rng(1).integers(0, 12, 500)
    w = Workdir(tmp_path / "w")
    np.save(w.path("labels.npy"), labels)
    summ = run(w, SampleOptions(num_samples=1200, strategy="paced", clip=3, seed=4))
    assert summ["strategy"] == "paced" and not summ["skipped"]
    assert np.load(w.path("schedule.npy")).tolist() == list(
        ClusterClipSampler(labels, 1200, strategy="paced", clip=3, seed=4))


def test_torch_stateful_dataloader_resumes_paced_mid_epoch():
    pytest.importorskip("torch")
    from torch.utils.data import Dataset
    from torchdata.stateful_dataloader import StatefulDataLoader

    from clusterclip.sampling.torch import ClusterClipTorchSampler

    labels = np.random.default_rng(0).integers(-1, 12, 400)
    ref = list(ClusterClipSampler(labels, 900, strategy="paced", clip=3, seed=1))

    class Indices(Dataset):
        def __len__(self) -> int:
            return labels.size

        def __getitem__(self, i: int) -> int:
            return i

    def loader():
        s = ClusterClipTorchSampler(labels, 900, strategy="paced", clip=3, seed=1, rank=0,
                                    world_size=1)
        return StatefulDataLoader(Indices(), batch_size=10, sampler=s)

    first = loader()
    it = iter(first)
    head = [int(x) for _ in range(17) for x in next(it)]
    state = first.state_dict()
    second = loader()
    second.load_state_dict(state)
    assert head == ref[:170]
    assert [int(x) for b in second for x in b] == ref[170:]


def test_pickled_paced_sampler_continues_identically():
    import pickle

    labels = np.random.default_rng(3).integers(-1, 30, 1000)
    s = ClusterClipSampler(labels, 3000, strategy="paced", seed=4)
    it = iter(s)
    [next(it) for _ in range(777)]
    s2 = pickle.loads(pickle.dumps(s))
    assert list(s2) == list(s)
