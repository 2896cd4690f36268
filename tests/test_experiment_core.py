"""Pure pieces of the experiment: split, packing, metrics, token balancing, evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.experiment import (
    encode_documents,
    matched_train_sample,
    mean_std,
    pack_sequences,
    stratified_split,
    summarize,
    token_balanced_weights,
)
from clusterclip.lm.config import EOS

label_arrays = st.lists(st.integers(-1, 6), min_size=1, max_size=300).map(
    lambda v: np.array(v, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(labels=label_arrays, frac=st.floats(0.05, 0.5), min_docs=st.integers(2, 12),
       seed=st.integers(0, 2**31))
def test_split_is_stratified_disjoint_and_deterministic(labels, frac, min_docs, seed):
    part = stratified_split(labels, frac, min_docs, seed)
    assert part.dtype == np.int8 and part.shape == labels.shape and set(part.tolist()) <= {0, 1}
    held = part == 1
    assert not held[labels < 0].any(), "an excluded document was held out"
    for k in np.unique(labels[labels >= 0]):
        n = int(np.sum(labels == k))
        got = int(np.sum(held & (labels == k)))
        want = 0 if n < min_docs else min(n - 1, max(1, round(frac * n)))
        assert got == want, (k, n, got, want)
        assert got < n, "a cluster lost all its training documents"
    np.testing.assert_array_equal(part, stratified_split(labels, frac, min_docs, seed))


def test_split_depends_on_seed_and_ignores_small_clusters():
    labels = np.repeat(np.arange(4), [3, 50, 200, 9])
    a = stratified_split(labels, 0.1, 10, seed=0) == 1
    b = stratified_split(labels, 0.1, 10, seed=1) == 1
    assert not np.array_equal(a, b)
    assert not a[labels == 0].any() and not a[labels == 3].any()
    assert a[labels == 1].sum() == 5 and a[labels == 2].sum() == 20


def test_matched_train_sample_mirrors_held_out_counts():
    rng = np.random.default_rng(3)
    labels = rng.integers(-1, 8, size=2000)
    held = stratified_split(labels, 0.1, 10, seed=0) == 1
    sample = matched_train_sample(labels, held, seed=1)
    assert not held[sample].any() and (labels[sample] >= 0).all()
    assert np.unique(sample).size == sample.size
    np.testing.assert_array_equal(np.bincount(labels[sample], minlength=8),
                                  np.bincount(labels[held], minlength=8))


def test_encode_truncates_and_appends_eos():
    texts = ["abc", "é" * 10, None, "x" * 7]
    docs, truncated = encode_documents(texts, max_doc_tokens=6)
    assert docs[0].tolist() == [97, 98, 99, EOS]
    assert docs[1].tolist() == list("é".encode() * 10)[:5] + [EOS]  # cut mid-character: bytes
    assert docs[2].size == 0
    assert docs[3].tolist() == [120] * 5 + [EOS]
    assert truncated.tolist() == [False, True, False, True]
    assert all(d.size <= 6 for d in docs)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), min_size=0, max_size=40),
       seq_len=st.integers(1, 33), seed=st.integers(0, 1000))
def test_packing_preserves_the_byte_stream_in_schedule_order(lengths, seq_len, seed):
    rng = np.random.default_rng(seed)
    docs = [np.append(rng.integers(0, 256, n), EOS).astype(np.int16) if n else
            np.zeros(0, np.int16) for n in lengths]
    stream = np.concatenate([[EOS], *[d for d in docs]]).astype(np.int64)
    windows = list(pack_sequences(iter(docs), seq_len))
    assert len(windows) == (stream.size - 1) // seq_len
    for j, w in enumerate(windows):
        assert w.dtype == np.int64 and w.shape == (seq_len + 1,)
        np.testing.assert_array_equal(w, stream[j * seq_len: j * seq_len + seq_len + 1])
    if windows:  # every stream token after the first is a target exactly once
        targets = np.concatenate([w[1:] for w in windows])
        np.testing.assert_array_equal(targets, stream[1:1 + targets.size])


def _reference_summary(loss_sum, n_tokens, clusters, sizes):
    """Plain-Python restatement of the metric definitions."""
    per = {}
    for ls, nt, c in zip(loss_sum, n_tokens, clusters, strict=True):
        s, t = per.get(int(c), (0.0, 0))
        per[int(c)] = (s + ls, t + nt)
    loss = {c: s / t for c, (s, t) in per.items()}
    ranked = sorted(loss, key=lambda c: (sizes[c], c))
    q = max(1, math.ceil(len(ranked) / 4))
    return {"micro": sum(loss_sum) / sum(n_tokens), "macro": sum(loss.values()) / len(loss),
            "tail": sum(loss[c] for c in ranked[:q]) / q,
            "head": sum(loss[c] for c in ranked[-q:]) / q, "per_cluster": loss,
            "tail_clusters": ranked[:q], "head_clusters": ranked[-q:]}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_macro_tail_head_follow_their_definitions(data):
    k = data.draw(st.integers(1, 12))
    sizes = data.draw(st.lists(st.integers(1, 50), min_size=k, max_size=k))
    d = data.draw(st.integers(1, 60))
    clusters = data.draw(st.lists(st.integers(0, k - 1), min_size=d, max_size=d))
    n_tokens = data.draw(st.lists(st.integers(1, 300), min_size=d, max_size=d))
    loss_sum = [nt * data.draw(st.floats(0.1, 6.0)) for nt in n_tokens]
    got = summarize(np.array(loss_sum), np.array(n_tokens), np.array(clusters), np.array(sizes))
    want = _reference_summary(loss_sum, n_tokens, clusters, sizes)
    for m in ("micro", "macro", "tail", "head"):
        assert got[m] == pytest.approx(want[m], rel=1e-12), m
    for m in ("tail_clusters", "head_clusters"):  # both ascending by size, then id
        assert got[m] == want[m], m
    assert {int(c): v["loss"] for c, v in got["per_cluster"].items()} == pytest.approx(
        want["per_cluster"], rel=1e-12)


def test_tail_and_head_are_the_size_quartiles():
    # 8 clusters, sizes 10..80; losses make tail and head easy to tell apart
    sizes = np.array([80, 10, 70, 20, 60, 30, 50, 40])
    clusters = np.arange(8)
    loss = sizes / 10.0
    got = summarize(loss * 5, np.full(8, 5), clusters, sizes)
    assert got["tail_clusters"] == [1, 3] and got["head_clusters"] == [2, 0]
    assert got["tail"] == pytest.approx(1.5) and got["head"] == pytest.approx(7.5)
    assert got["macro"] == pytest.approx(loss.mean())


def test_mean_std():
    r = mean_std([1.0, 2.0, 3.0])
    assert r["mean"] == 2.0 and r["std"] == pytest.approx(1.0) and r["values"] == [1.0, 2.0, 3.0]
    assert mean_std([4.0])["std"] == 0.0


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_token_balanced_weights_equalise_expected_tokens(alpha):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(5), [3, 40, 7, 300, 25])
    labels = np.append(labels, [-1, -1])
    mean_len = np.array([900, 50, 300, 120, 2000])
    tokens = np.append(rng.poisson(mean_len[labels[:-2]]) + 1, [5, 5])
    w = token_balanced_weights(labels, tokens, alpha)
    n = np.bincount(labels[labels >= 0])
    m = np.bincount(labels[labels >= 0], weights=tokens[labels >= 0]) / n
    expected_tokens = w * m  # per draw: P(cluster k) x mean tokens of a k document
    target = n ** alpha / (n ** alpha).sum()
    np.testing.assert_allclose(expected_tokens / expected_tokens.sum(), target, rtol=1e-12)
    assert w.sum() == pytest.approx(1.0)


def test_token_balanced_sampling_gives_equal_tokens_with_the_real_sampler():
    """Drawn through the real uniform sampler, each cluster gets about the same tokens."""
    from clusterclip import ClusterClipSampler

    rng = np.random.default_rng(1)
    sizes = [20, 200, 60, 500]
    labels = np.repeat(np.arange(4), sizes)
    tokens = rng.integers(1, 2 * np.array([40, 1000, 300, 80])[labels]) + 1
    w = token_balanced_weights(labels, tokens)
    share = {}
    for weights in (None, w):
        s = ClusterClipSampler(labels, num_samples=60_000, strategy="uniform", seed=0,
                               cluster_weights=weights)
        drawn = np.concatenate(list(s.blocks(10_000)))
        got = np.bincount(labels[drawn], weights=tokens[drawn], minlength=4)
        share[weights is None] = got / got.sum()
    np.testing.assert_allclose(share[False], 0.25, atol=0.02)  # balanced by tokens
    assert share[True].max() / share[True].min() > 5  # by documents: long clusters dominate


def test_evaluation_is_independent_of_batching_and_training_is_deterministic():
    import torch

    from clusterclip.lm.config import ModelConfig, TrainConfig
    from clusterclip.lm.model import ByteLM
    from clusterclip.lm.train import evaluate_documents, train_run

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the test's numbers are compared only with themselves
    cfg = ModelConfig(seq_len=32, d_model=32, n_layers=1, n_heads=2)
    docs, _ = encode_documents(["hello world", "a", "the quick brown fox jumps" * 3, "xyz"], 32)
    torch.manual_seed(0)
    model = ByteLM(cfg)
    batched, n_tok = evaluate_documents(model, docs, 4, torch.device("cpu"))
    for i, d in enumerate(docs):
        one, nt = evaluate_documents(model, [d], 1, torch.device("cpu"))
        assert nt[0] == d.size == n_tok[i]
        assert one[0] == pytest.approx(batched[i], rel=1e-5)
        # direct computation: predict d from EOS + d[:-1]
        inp = torch.tensor([[EOS, *d[:-1].tolist()]])
        with torch.no_grad():
            ref = torch.nn.functional.cross_entropy(model(inp)[0], torch.tensor(d.tolist()),
                                                    reduction="sum")
        assert float(ref) == pytest.approx(one[0], rel=1e-5)

    def run():
        win = pack_sequences(iter(docs * 40), cfg.seq_len)
        return train_run(cfg, TrainConfig(batch_size=2, eval_points=3), win, 6, seed=5,
                         device=torch.device("cpu"),
                         evaluate=lambda m: float(evaluate_documents(
                             m, docs, 4, torch.device("cpu"))[0].sum()))[1]
    try:
        a, b = run(), run()
    finally:
        torch.set_num_threads(threads)
    assert a == b
    assert a["curve"][-1]["val_loss"] < a["curve"][0]["val_loss"]


def test_budget_is_epochs_of_training_tokens_unless_tokens_given():
    from clusterclip.errors import InputError
    from clusterclip.experiment import DEFAULT_EPOCHS, ExperimentConfig

    cfg = ExperimentConfig()
    batch = cfg.train.batch_size * cfg.model.seq_len
    assert cfg.epochs == DEFAULT_EPOCHS and cfg.tokens is None
    for train_tokens in (1, batch - 1, 10 * batch + 7, 471_552):
        got = cfg.budget_tokens(train_tokens)
        assert got % batch == 0 and got >= batch  # whole batches, at least one
        assert got == max(batch, int(DEFAULT_EPOCHS * train_tokens) // batch * batch)
    assert ExperimentConfig(tokens=5 * batch + 3).budget_tokens(10**9) == 5 * batch
    assert ExperimentConfig(epochs=0.5).budget_tokens(100 * batch) == 50 * batch
    for bad in (dict(epochs=0.0), dict(epochs=float("nan")), dict(tokens=batch - 1)):
        with pytest.raises(InputError):
            ExperimentConfig(**bad)  # refused when made
    quick = ExperimentConfig.quick()
    assert quick.epochs > 1 and quick.max_doc_tokens <= quick.model.seq_len


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=2, max_size=12),
       clip=st.integers(1, 4), frac=st.floats(0.05, 1.0), seed=st.integers(0, 1000))
def test_clip_statistics_of_a_fed_prefix(sizes, clip, frac, seed):
    """The runner's figures for the documents actually fed (a prefix of the schedule).

    ``clusters_clipped`` from a sampler of the prefix's length equals the clusters
    whose every document was fed ``clip`` times in that prefix (schedules are
    prefix-consistent), and the other statistics follow their definitions.
    """
    from clusterclip import ClusterClipSampler
    from clusterclip.experiment import schedule_stats

    labels = np.repeat(np.arange(len(sizes)), sizes)
    cap = clip * labels.size
    full = np.concatenate(list(ClusterClipSampler(labels, cap, clip=clip, seed=seed).blocks(64)))
    fed = full[:max(1, int(frac * cap))]
    clipped = ClusterClipSampler(labels, fed.size, clip=clip,
                                 seed=seed).summary()["clusters_clipped"]
    per_cluster = np.bincount(labels[fed], minlength=len(sizes))
    assert clipped == int(np.sum(per_cluster == clip * np.array(sizes)))
    doc_tokens = np.arange(labels.size) % 7 + 1
    s = schedule_stats(fed, labels, doc_tokens, tail=[0], head=[len(sizes) - 1], clip=clip,
                       clusters_clipped=clipped)
    reps = np.bincount(fed, minlength=labels.size)
    assert s["max_repetition"] == reps.max() <= clip and s["clusters_over_clip"] == 0
    assert s["docs_drawn"] == fed.size and s["distinct_docs"] == np.count_nonzero(reps)
    tok = doc_tokens[fed]
    assert s["tail_token_share"] == pytest.approx(tok[labels[fed] == 0].sum() / tok.sum())
    assert s["head_token_share"] == pytest.approx(
        tok[labels[fed] == len(sizes) - 1].sum() / tok.sum())
    late = np.arange(fed.size) >= fed.size - np.ceil(0.2 * fed.size)  # last fifth by position
    assert s["late_tail_token_share"] == pytest.approx(
        tok[late & (labels[fed] == 0)].sum() / tok[late].sum())
    # the same prefix length under uniform: the clusters pushed past the clip are counted
    u = np.concatenate(list(ClusterClipSampler(labels, fed.size, strategy="uniform",
                                               seed=seed).blocks(64)))
    su = schedule_stats(u, labels, doc_tokens, [0], [1], clip, 0)
    over = np.unique(labels[np.bincount(u, minlength=labels.size) > clip])
    assert su["clusters_over_clip"] == over.size
    assert su["max_repetition"] == np.bincount(u).max()


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=2, max_size=8),
       clip=st.integers(2, 5), seed=st.integers(0, 2**16), frac=st.floats(0.2, 0.9))
def test_paced_schedule_is_sized_to_the_token_budget(sizes, clip, seed, frac):
    """paced's quotas depend on T, so the experiment sizes T to what training consumes:
    the schedule supplies the budget, and 1% fewer draws would not."""
    from clusterclip import ClusterClipSampler
    from clusterclip.sampling.budget import schedule_length_for_tokens

    labels = np.repeat(np.arange(len(sizes)), sizes)
    doc_tokens = (np.arange(labels.size) * 7919) % 50 + 5  # 5..54 tokens, mixed over clusters
    capacity = clip * labels.size

    def tokens(t):
        s = ClusterClipSampler(labels, t, strategy="paced", clip=clip, seed=seed)
        return int(sum(doc_tokens[b].sum() for b in s.blocks(1000)))

    needed = max(1, int(frac * tokens(capacity)))
    t = schedule_length_for_tokens(
        lambda n: ClusterClipSampler(labels, n, strategy="paced", clip=clip, seed=seed),
        doc_tokens, needed, capacity)
    assert 1 <= t <= capacity and tokens(t) >= needed
    shorter = t - max(1, t // 100) - 1
    if shorter >= 1:
        assert tokens(shorter) < needed


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_max_group_repetition_is_the_most_feeds_of_one_group(data):
    """``schedule_stats(..., groups=)`` adds the most times one near-duplicate group was fed
    (all its members together), equal to a one-feed-at-a-time recount; nothing else changes."""
    from clusterclip.experiment import schedule_stats
    from clusterclip.lm.metrics import SCHEDULE_STATS, schedule_keys

    n = data.draw(st.integers(1, 40))
    labels = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    groups = np.array(data.draw(st.lists(st.integers(-1, 8), min_size=n, max_size=n)))
    fed = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=80)), np.int64)
    doc_tokens = np.arange(n) % 5 + 1
    plain = schedule_stats(fed, labels, doc_tokens, [0], [1], 2, 0)
    s = schedule_stats(fed, labels, doc_tokens, [0], [1], 2, 0, groups=groups)
    per_group: dict[int, int] = {}
    for i in fed.tolist():
        if groups[i] >= 0:
            per_group[int(groups[i])] = per_group.get(int(groups[i]), 0) + 1
    assert s.pop("max_group_repetition") == max(per_group.values(), default=0)
    assert s == plain and tuple(plain) == SCHEDULE_STATS == schedule_keys(plain)
    assert schedule_keys({**plain, "max_group_repetition": 1})[-1] == "max_group_repetition"
