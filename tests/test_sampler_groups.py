"""Clip by group (``make_sampler(..., groups=g)``), against a one-draw-at-a-time
reference: the clip bounds a group's documents together, members are used evenly in
rotation, and all-singleton groups give exactly today's schedule."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip import ClusterClipSampler, make_sampler
from clusterclip.cli import main
from clusterclip.errors import InputError
from clusterclip.sampling import STRATEGIES
from clusterclip.sampling.groups import GroupClipSampler

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def labels_and_groups(draw):
    """Labels (with excluded documents) and groups inside clusters (arbitrary ids)."""
    labels = np.array(draw(st.lists(st.integers(-1, 4), min_size=1, max_size=60)), np.int64)
    if not (labels >= 0).any():
        labels[0] = 0
    n_ids = draw(st.integers(1, 6))
    sub = np.array(draw(st.lists(st.integers(0, n_ids - 1), min_size=labels.size,
                                 max_size=labels.size)), np.int64)
    groups = np.where(labels >= 0, 1000 + labels * n_ids + sub, -1)  # inside a cluster
    return labels, groups


def _t_for(n_groups, strategy, clip, frac):
    top = clip * n_groups if strategy in ("clusterclip", "paced") else 3 * n_groups + 5
    return max(1, int(frac * top))


def reference(labels, groups, T, **kw):
    """The plain sampler over representatives, one draw at a time, members in rotation."""
    members: dict[int, list[int]] = {}
    for i in range(labels.size):
        if labels[i] >= 0:
            members.setdefault(int(groups[i]), []).append(i)
    rep_labels = np.full(labels.size, -1, np.int64)
    by_rep = {}
    for ms in members.values():
        rep_labels[ms[0]] = labels[ms[0]]
        by_rep[ms[0]] = ms
    drawn: dict[int, int] = {}
    out = []
    for r in ClusterClipSampler(rep_labels, T, **kw):
        j = drawn.get(r, 0)
        out.append(by_rep[r][j % len(by_rep[r])])
        drawn[r] = j + 1
    return np.array(out, np.int64), by_rep


@SETTINGS
@given(labels_and_groups(), st.sampled_from(STRATEGIES), st.integers(1, 3),
       st.floats(0.05, 1.0), st.integers(0, 3))
def test_group_schedule_matches_reference_and_keeps_the_clip(data, strategy, clip, frac, seed):
    labels, groups = data
    n_groups = np.unique(groups[labels >= 0]).size
    T = _t_for(n_groups, strategy, clip, frac)
    alpha = 0.5 if strategy in ("temperature", "clusterclip", "paced") and seed % 2 else 0.0
    kw = dict(strategy=strategy, clip=clip, alpha=alpha, seed=seed)
    s = make_sampler(labels, T, groups=groups, **kw)
    assert isinstance(s, GroupClipSampler)
    out = np.concatenate(list(s.blocks(7)))
    ref, by_rep = reference(labels, groups, T, **kw)
    assert np.array_equal(out, ref)
    assert (labels[out] >= 0).all()
    counts = np.bincount(out, minlength=labels.size)
    for ms in by_rep.values():
        c = counts[ms]
        assert c.max() - c.min() <= 1  # members used evenly
        if strategy in ("clusterclip", "paced"):
            assert c.sum() <= clip  # the group's documents together, at most R times
    summ = s.summary()
    assert summ["max_document_repetition"] == counts.max()
    assert summ["documents_seen"] == int((counts > 0).sum())


@SETTINGS
@given(labels_and_groups(), st.sampled_from(STRATEGIES), st.integers(0, 3))
def test_singleton_groups_give_todays_schedule(data, strategy, seed):
    labels, _ = data
    singles = np.where(labels >= 0, np.arange(labels.size) * 3 + 5, -1)  # any distinct ids
    n = int((labels >= 0).sum())
    T = _t_for(n, strategy, 2, 0.9)
    kw = dict(strategy=strategy, clip=2, seed=seed,
              alpha=0.5 if strategy in ("temperature", "clusterclip", "paced") else 0.0)
    plain = np.fromiter(ClusterClipSampler(labels, T, **kw), np.int64)
    grouped = np.concatenate(list(make_sampler(labels, T, groups=singles, **kw).blocks()))
    assert plain.tobytes() == grouped.tobytes()


@SETTINGS
@given(labels_and_groups(), st.sampled_from(STRATEGIES), st.integers(1, 3),
       st.data())
def test_ranks_resume_and_state_dict_continue_the_same_schedule(data, strategy, W, d):
    labels, groups = data
    n_groups = np.unique(groups[labels >= 0]).size
    T = _t_for(n_groups, strategy, 2, 1.0)
    kw = dict(strategy=strategy, clip=2, seed=1)
    full = np.fromiter(make_sampler(labels, T, groups=groups, **kw), np.int64)
    c = d.draw(st.integers(0, T))
    for r in range(W):
        s = make_sampler(labels, T, groups=groups, rank=r, world_size=W,
                         consumed_samples=c, **kw)
        got = np.fromiter(s, np.int64)
        n = (T - c) // W
        assert np.array_equal(got, full[c + r:c + r + n * W:W])
    # a state taken part way, loaded into a fresh sampler (another world size)
    s = make_sampler(labels, T, groups=groups, **kw)
    it = iter(s)
    k = d.draw(st.integers(0, T))
    head = [next(it) for _ in range(k)]
    state = json.loads(json.dumps(s.state_dict()))
    t = make_sampler(labels, T, groups=groups, **kw)
    t.load_state_dict(state)
    assert head + list(t) == full.tolist()
    copy = pickle.loads(pickle.dumps(s))  # mid-stream
    assert copy.state_dict() == s.state_dict()
    if k < T:  # (an exhausted sampler starts over on iter, as the plain one does)
        assert head + list(copy) == full.tolist()


@settings(max_examples=25, deadline=None)
@given(labels_and_groups(), st.sampled_from(STRATEGIES), st.integers(1, 3), st.data())
def test_torch_sampler_with_groups_yields_the_group_schedule_and_resumes(data, strategy, W, d):
    """ClusterClipTorchSampler(groups=) yields GroupClipSampler's indices for its rank, and
    its state_dict resumes a fresh torch sampler where the first stopped."""
    pytest.importorskip("torch")
    from clusterclip.sampling.torch import ClusterClipTorchSampler

    labels, groups = data
    n_groups = np.unique(groups[labels >= 0]).size
    T = _t_for(n_groups, strategy, 2, 1.0)
    kw = dict(strategy=strategy, clip=2, seed=3)
    r = d.draw(st.integers(0, W - 1))
    want = list(GroupClipSampler(labels, T, groups=groups, rank=r, world_size=W, **kw))
    ts = ClusterClipTorchSampler(labels, T, groups=groups, rank=r, world_size=W, **kw)
    assert isinstance(ts.sampler, GroupClipSampler) and len(ts) == len(want)
    it = iter(ts)
    k = d.draw(st.integers(0, len(want)))
    head = [next(it) for _ in range(k)]
    state = json.loads(json.dumps(ts.state_dict()))
    fresh = ClusterClipTorchSampler(labels, T, groups=groups, rank=r, world_size=W, **kw)
    fresh.load_state_dict(state)
    assert head + list(fresh) == want
    assert all(type(i) is int for i in head)


def test_bad_groups_are_refused_with_the_document():
    labels = np.array([0, 0, 1, 1, -1])
    with pytest.raises(InputError, match="spans clusters 0 .document 0. and 1 .document 2."):
        make_sampler(labels, 3, groups=np.array([0, 0, 0, 3, -1]))
    with pytest.raises(InputError, match="document 1 has cluster 0 but group -1"):
        make_sampler(labels, 3, groups=np.array([0, -1, 2, 3, -1]))
    with pytest.raises(InputError, match="4 group ids but 5 labels"):
        make_sampler(labels, 3, groups=np.array([0, 1, 2, 3]))
    s = make_sampler(labels, 4, groups=np.array([0, 0, 2, 3, -1]))
    other = make_sampler(labels, 4, groups=np.array([0, 1, 2, 3, -1])).state_dict()
    with pytest.raises(InputError, match="groups"):
        s.load_state_dict(other)
    with pytest.raises(InputError, match="capacity 9 = clip 3 x 3 near-duplicate groups"):
        make_sampler(labels, 10, clip=3, groups=np.array([0, 0, 2, 3, -1]))


def test_run_dedup_and_sample_groups_clip_planted_copies(tmp_path, pydocs_path, capsys):
    import gzip

    from clusterclip.dedup import plant_near_duplicates

    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(300), f, strict=False)]
    texts, source = plant_near_duplicates(texts, 30, seed=2)
    for extra in range(3):  # one document copied 4 times: a group of 5
        texts.append(texts[7] + " " * (extra + 1))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    W = tmp_path / "W"
    base = ["run", str(corpus), "--workdir", str(W), "--clusters", "3", "--embedder", "fast"]
    assert main(base + ["--dedup", "--dedup-threshold", "2"]) == 2
    assert "error: --dedup-threshold: 2.0 is out of range" in capsys.readouterr().err
    assert not W.exists() or not (W / "embeddings.npy").exists()  # refused before any work
    labels_n = len(texts)
    assert main(base + ["--dedup", "--num-samples", "500", "--clip", "2",
                        "--strategy", "clusterclip"]) == 0
    assert "near-duplicates" in capsys.readouterr().out
    labels = np.load(W / "labels.npy")
    g = np.load(W / "groups.npy")
    sched = np.load(W / "schedule.npy")
    assert labels.size == labels_n and sched.size == 500
    assert (g[[labels_n - 3, labels_n - 2, labels_n - 1]] == g[7]).all()
    assert (g[300 + np.arange(30)] == g[source]).mean() >= 0.9
    drawn = np.bincount(g[sched], minlength=labels_n)
    assert drawn.max() <= 2  # the clip counts each group, copies together
    expect = np.fromiter(make_sampler(labels, 500, clip=2, groups=g), np.int64)
    assert np.array_equal(sched, expect)
    out = tmp_path / "s.npy"
    assert main(["sample", "--labels", str(W / "labels.npy"), "--groups", str(W / "groups.npy"),
                 "--num-samples", "500", "--clip", "2", "--out", str(out),
                 "--strategy", "clusterclip", "--no-progress"]) == 0
    assert "groups:" in capsys.readouterr().out
    assert np.array_equal(np.load(out), sched)
    assert main(["sample", "--labels", str(W / "labels.npy"), "--groups", str(W / "groups.npy"),
                 "--num-tokens", "5000", "--out", str(tmp_path / "t.npy"),
                 "--no-progress"]) == 2
    assert "--groups works with --num-samples" in capsys.readouterr().err
    assert not (tmp_path / "t.npy").exists()
    # the report counts repetition per group: plain clusterclip repeats the 5 copies' content
    assert main(["report", "--workdir", str(W), "--strategies", "clusterclip",
                 "--num-samples", "600", "--clip", "2"]) == 0
    summ = json.loads((W / "report" / "summary.json").read_text())
    rep = summ["schedules"]["clusterclip"]
    plain = np.fromiter(ClusterClipSampler(labels, summ["num_samples"], clip=2), np.int64)
    per_group = np.bincount(g[plain], minlength=labels_n)
    assert rep["max_group_repetition"] == per_group.max() > 2  # the clip alone does not bound it
    assert "max repetition per group" in (W / "report" / "report.md").read_text()
    assert summ["schedules"]["schedule"]["max_group_repetition"] <= 2  # W/schedule.npy, --dedup
