"""Mixtures (``clusterclip.sampling.mixture``) and zero cluster weights in every sampler path.

A cluster of weight 0 is never drawn and its documents count as excluded: the
schedule equals the one of the same labels with those documents labelled -1.
``sample --mixture`` follows the mixture's clipped quotas (paced: min(R n_k, lam w_k)
spread evenly; clusterclip: greedy, at most R draws per document).
"""

from __future__ import annotations

import gzip
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip import ClusterClipSampler, make_sampler
from clusterclip.cli import main
from clusterclip.errors import InputError
from clusterclip.sampling import write_schedule
from clusterclip.sampling.mixture import (
    MIXTURE_FORMAT_VERSION,
    Mixture,
    read_mixture,
    write_mixture,
)
from clusterclip.storage.digests import sha256_file


def _schedule(labels, T, **kw):
    s = ClusterClipSampler(labels, T, cache_dir=False, **kw)
    return np.concatenate(list(s.blocks(1 << 12)))


def _exact_quotas(sizes, weights, clip, T):
    """Real quotas min(R n_k, lam w_k) summing to T, in exact arithmetic (water-filling:
    cap the clusters that would pass R n_k, share the rest by weight, repeat)."""
    cap = {k: Fraction(clip * int(n)) for k, n in enumerate(sizes) if n > 0 and weights[k] > 0}
    w = {k: Fraction(float(weights[k])) for k in cap}
    capped: set[int] = set()
    while True:
        free = [k for k in cap if k not in capped]
        left = T - sum(cap[k] for k in capped)
        lam = left / sum(w[k] for k in free)
        over = [k for k in free if lam * w[k] > cap[k]]
        if not over:
            return {k: (cap[k] if k in capped else lam * w[k]) for k in cap}
        capped.update(over)


def _mixture_case(data):
    rng = np.random.default_rng(data[0])
    K = data[1]
    labels = rng.integers(-1, K, data[2])
    labels[:K] = np.arange(K)  # every cluster id present
    weights = rng.uniform(0.05, 3.0, K) * (rng.random(K) < 0.7)
    weights[rng.integers(K)] = 1.0  # at least one positive
    return labels, weights


mixture_st = st.tuples(st.integers(0, 2**32), st.integers(2, 25), st.integers(60, 900))


@settings(max_examples=25, deadline=None)
@given(mixture_st, st.integers(1, 5), st.floats(0.05, 1.0))
def test_paced_follows_the_clipped_quotas_of_the_mixture(case, clip, frac):
    labels, weights = _mixture_case(case)
    K = weights.size
    sizes = np.bincount(labels[labels >= 0], minlength=K)
    drawable = int(sizes[weights > 0].sum())
    T = max(1, int(frac * clip * drawable))
    got = np.bincount(labels[_schedule(labels, T, strategy="paced", clip=clip,
                                       cluster_weights=weights)], minlength=K)
    real = _exact_quotas(sizes, weights, clip, T)
    assert got.sum() == T
    for k in range(K):
        q = real.get(k, Fraction(0))
        assert math.floor(q) <= got[k] <= math.ceil(q), (k, got[k], q)
    assert (got[weights == 0] == 0).all()


@settings(max_examples=25, deadline=None)
@given(mixture_st, st.integers(1, 4), st.sampled_from(["uniform", "temperature",
                                                       "clusterclip"]))
def test_greedy_never_draws_a_zero_weight_cluster_nor_a_document_more_than_clip(
        case, clip, strategy):
    labels, weights = _mixture_case(case)
    drawable = (labels >= 0) & (weights[np.maximum(labels, 0)] > 0)
    T = clip * int(drawable.sum()) if strategy == "clusterclip" else 2 * labels.size
    sched = _schedule(labels, T, strategy=strategy, clip=clip, cluster_weights=weights)
    assert drawable[sched].all()
    if strategy == "clusterclip":  # capacity R x drawable documents: each exactly R times
        assert (np.bincount(sched, minlength=labels.size)[drawable] == clip).all()
        with pytest.raises(InputError, match="exceeds capacity"):
            ClusterClipSampler(labels, T + 1, clip=clip, cluster_weights=weights)


@pytest.mark.parametrize("strategy", ["uniform", "temperature", "clusterclip", "paced"])
def test_a_zero_weight_is_the_same_schedule_as_excluding_its_documents(strategy):
    rng = np.random.default_rng(7)
    labels = rng.integers(-1, 12, 2000)
    weights = rng.uniform(0.2, 2.0, 12)
    weights[[2, 5, 6]] = 0.0  # not the highest id: K is the same for both labellings
    masked = np.where(np.isin(labels, [2, 5, 6]), -1, labels)
    kw = {"strategy": strategy, "clip": 3, "seed": 4, "cluster_weights": weights}
    a = ClusterClipSampler(labels, 3000, **kw)
    b = ClusterClipSampler(masked, 3000, **kw)
    assert np.array_equal(np.concatenate(list(a.blocks())), np.concatenate(list(b.blocks())))
    assert a.num_eligible == b.num_eligible == int((masked >= 0).sum())
    assert a.capacity == b.capacity == (3 * a.num_eligible if strategy in ("clusterclip",
                                                                         "paced") else None)
    sa, sb = a.summary(), b.summary()
    assert sa["zero_weight_clusters"] == 3
    assert sa["zero_weight_documents"] == int(np.isin(labels, [2, 5, 6]).sum())
    assert sa["excluded_documents"] == sb["excluded_documents"]
    # resumed at another world size from a state: the same rest
    s = ClusterClipSampler(labels, 3000, **kw)
    it = iter(s)
    for _ in range(1111):
        next(it)
    r = ClusterClipSampler(labels, 3000, rank=1, world_size=2, **kw)
    r.load_state_dict(s.state_dict())
    full = _schedule(masked, 3000, **kw)
    assert np.array_equal(np.concatenate(list(r.blocks())), full[1112::2])


def test_zero_weights_in_groups_torch_writer_and_hf_paths(tmp_path):
    rng = np.random.default_rng(9)
    labels = rng.integers(0, 8, 1500)
    weights = np.array([1.0, 0.0, 2.0, 0.5, 0.0, 1.0, 1.0, 3.0])
    kw = {"strategy": "paced", "clip": 2, "seed": 3, "cluster_weights": weights}
    plain = _schedule(labels, 1700, **kw)
    # singleton groups: exactly the plain schedule; real groups: never a zero-weight cluster
    singletons = np.concatenate(list(make_sampler(labels, 1700, groups=np.arange(labels.size),
                                                   cache_dir=False, **kw).blocks()))
    assert np.array_equal(plain, singletons)
    groups = np.arange(labels.size)
    groups[1::2] = groups[0::2][: groups[1::2].size]
    groups = np.where(labels[groups] == labels, groups, np.arange(labels.size))
    g = make_sampler(labels, 500, groups=groups, **kw)
    assert (weights[labels[np.concatenate(list(g.blocks()))]] > 0).all()
    assert g.summary()["zero_weight_documents"] == int((weights[labels] == 0).sum())
    summary = write_schedule(labels, tmp_path / "s.npy", num_samples=1700, cache_dir=False,
                             **kw)
    assert np.array_equal(np.load(tmp_path / "s.npy"), plain)
    assert summary["zero_weight_clusters"] == 2
    torch_sampler = pytest.importorskip("clusterclip.sampling.torch").ClusterClipTorchSampler
    assert list(torch_sampler(labels, 1700, rank=0, world_size=1, **kw)) == plain.tolist()
    datasets = pytest.importorskip("datasets")
    from clusterclip.sampling.hf import schedule_dataset

    ds = datasets.Dataset.from_dict({"i": list(range(labels.size))})
    assert schedule_dataset(ds, labels=labels, num_samples=1700, **kw)["i"] == plain.tolist()


def test_a_token_budget_counts_only_the_clusters_of_weight_above_zero():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 5, 400)
    tokens = rng.integers(1, 50, 400)
    weights = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    live = weights[labels] > 0
    budget = 2 * int(tokens[live].sum())  # clip 2: exactly what the live clusters hold
    from clusterclip.sampling.budget import budget_length

    t, n, held = budget_length(labels, tokens, budget, strategy="clusterclip", clip=2,
                               cluster_weights=weights, seed=0)
    assert held == budget and n == t == 2 * int(live.sum())
    with pytest.raises(InputError, match="exceeds what clusterclip can supply"):
        budget_length(labels, tokens, budget + 1, strategy="clusterclip", clip=2,
                      cluster_weights=weights, seed=0)


def test_weights_without_a_positive_one_on_a_cluster_with_documents_are_refused():
    labels = np.array([0, 0, 2, 2])
    with pytest.raises(InputError, match="no cluster with documents has a weight > 0"):
        ClusterClipSampler(labels, 3, cluster_weights=[0.0, 5.0, 0.0])
    with pytest.raises(InputError, match="finite and >= 0"):
        ClusterClipSampler(labels, 3, cluster_weights=[1.0, 0.0, -1.0])


# ---------------------------------------------------------------------- the file
def test_write_then_read_keeps_every_field_and_the_extra_keys(tmp_path):
    m = Mixture((0.5, 0.0, 2.0), clip=3, timing="paced", objective="target")
    write_mixture(tmp_path / "m.json", m, seeds=[1, 2])
    data = json.loads((tmp_path / "m.json").read_text())
    assert data == {"format_version": MIXTURE_FORMAT_VERSION, "weights": [0.5, 0.0, 2.0],
                    "clip": 3, "timing": "paced", "objective": "target", "seeds": [1, 2]}
    back = read_mixture(tmp_path / "m.json", 3)
    assert back == m
    assert back.cluster_weights().dtype == np.float64
    assert back.cluster_weights().tolist() == [0.5, 0.0, 2.0]


@pytest.fixture()
def labels_file(tmp_path):
    labels = np.random.default_rng(0).integers(-1, 6, 900)
    np.save(tmp_path / "labels.npy", labels)
    return tmp_path / "labels.npy", labels


def _mixture_file(path, **fields):
    raw = fields.pop("_raw", None)
    data = {"format_version": 1, "weights": [1.0, 0.0, 2.0, 0.5, 1.0, 1.0], "clip": 3,
            "timing": "paced", "objective": "macro", **fields}
    path.write_text(raw or json.dumps(data))
    return path


def _sample(labels_path, out, *extra):
    return main(["sample", "--labels", str(labels_path), "--out", str(out), "--num-samples",
                 "1000", "--no-progress", *map(str, extra)])


def test_sample_with_a_mixture_takes_its_timing_clip_and_weights(labels_file, tmp_path,
                                                                  capsys):
    path, labels = labels_file
    m = _mixture_file(tmp_path / "m.json")
    out, summ = tmp_path / "s.npy", tmp_path / "s.json"
    assert _sample(path, out, "--mixture", m, "--summary-json", summ) == 0
    weights = np.array(json.loads(m.read_text())["weights"])
    ref = _schedule(labels, 1000, strategy="paced", clip=3, cluster_weights=weights)
    assert np.array_equal(np.load(out), ref)
    s = json.loads(summ.read_text())
    assert s["strategy"] == "paced" and s["clip"] == 3 and s["cluster_weights"] is True
    assert s["mixture"] == {"path": str(m.resolve()), "sha256": sha256_file(m)}
    assert s["zero_weight_clusters"] == 1
    text = capsys.readouterr().out
    assert f"mixture {m.resolve()}" in text and "clusters of weight 0" in text
    # explicit flags override the file's timing and clip
    assert _sample(path, out, "--mixture", m, "--strategy", "clusterclip", "--clip", "2") == 0
    ref = _schedule(labels, 1000, strategy="clusterclip", clip=2, cluster_weights=weights)
    assert np.array_equal(np.load(out), ref)


@pytest.mark.parametrize(("fields", "needle"), [
    ({"weights": [1.0, 2.0, 3.0]}, "has 3 weights but the labels have 6 cluster ids"),
    ({"_raw": '{"format_version": 1, "weights": [1, NaN, 1, 1, 1, 1], "clip": 3, '
              '"timing": "paced"}'}, "weights[1] is nan"),
    ({"weights": [1.0, -0.5, 1.0, 1.0, 1.0, 1.0]}, "weights[1] is -0.5"),
    ({"weights": [0.0] * 6}, "every weight is 0"),
    ({"format_version": 3}, "format_version 3 is not supported"),
    ({"_raw": "weights: [1, 2]"}, "not JSON"),
    ({"clip": 0}, "clip 0 is out of range (an integer in 1 .. 1048576)"),
    ({"timing": "uniform"}, "timing must be one of paced, clusterclip"),
    ({"_args": ["--strategy", "random"]}, "strategy random"),
    ({"_args": ["--alpha", "0.5"]}, "--alpha 0.5: does not apply with --mixture"),
    ({"_args": ["--balance-by", "tokens", "--tokens", "TOKENS"]},
     "--balance-by tokens computes the cluster weights, so it does not combine with --mixture"),
])
def test_a_bad_mixture_is_one_line_exit_2_and_writes_nothing(labels_file, tmp_path, capsys,
                                                               fields, needle):
    path, labels = labels_file
    extra = fields.pop("_args", [])
    if "TOKENS" in extra:
        np.save(tmp_path / "t.npy", np.ones(labels.size, np.int64))
        extra = [tmp_path / "t.npy" if a == "TOKENS" else a for a in extra]
    m = _mixture_file(tmp_path / "m.json", **fields)
    out = tmp_path / "s.npy"
    assert _sample(path, out, "--mixture", m, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err, err
    assert not out.exists()


def test_run_with_a_mixture_samples_it_and_a_changed_mixture_resamples(pydocs_path, tmp_path,
                                                                        capsys):
    corpus = tmp_path / "docs.jsonl"
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        corpus.write_text("".join(line for _, line in zip(range(200), src, strict=False)))
    w = tmp_path / "w"
    m = tmp_path / "m.json"
    write_mixture(m, Mixture((1.0, 0.0, 1.0, 2.0), clip=4, timing="paced", objective="t"))
    args = ["run", str(corpus), "--workdir", str(w), "--clusters", "4", "--embedder", "fast",
            "--num-samples", "300", "--mixture", str(m)]
    # a mixture for another K is refused before any work
    bad = tmp_path / "bad.json"
    write_mixture(bad, Mixture((1.0, 1.0), clip=2, timing="paced", objective="t"))
    assert main([*args[:-1], str(bad)]) == 2
    assert "has 2 weights but the labels have 4 cluster ids" in capsys.readouterr().err
    assert not w.exists()
    assert main(args) == 0
    labels = np.load(w / "labels.npy")
    sched = np.load(w / "schedule.npy")
    ref = _schedule(labels, 300, strategy="paced", clip=4,
                    cluster_weights=np.array([1.0, 0.0, 1.0, 2.0]))
    assert np.array_equal(sched, ref) and not (labels[sched] == 1).any()
    stage = json.loads((w / "manifest.json").read_text())["stages"]["sample"]
    assert stage["params"]["mixture"]["sha256"] == sha256_file(m)
    capsys.readouterr()
    write_mixture(m, Mixture((1.0, 1.0, 0.0, 2.0), clip=4, timing="clusterclip",
                             objective="t"))
    assert main(args) == 0
    assert capsys.readouterr().out.count("(reused") == 2  # embed, cluster; not sample
    assert not (labels[np.load(w / "schedule.npy")] == 2).any()
