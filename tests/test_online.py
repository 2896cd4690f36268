"""OnlineMixer: exact, resumable, rank-independent re-weighing under the sampler's clip, and
what it does on a simulated learner with known per-cluster power-law loss curves."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from _helpers import torchrun
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip import OnlineMixer
from clusterclip.errors import InputError
from clusterclip.lm.runs import DocumentLosses
from clusterclip.sampling import ClusterClipSampler
from clusterclip.sampling.online import allocate

# a small world: 6 clusters of unequal size, each with its own loss curve
SIZES = np.array([40, 12, 25, 60, 8, 30])
LABELS = np.repeat(np.arange(SIZES.size), SIZES)
EPS = np.array([2.0, 1.5, 2.5, 1.0, 2.0, 1.8])
BETA = np.array([1.0, 3.0, 0.5, 2.0, 4.0, 1.0])
ALPHA = np.array([0.3, 0.8, 0.2, 0.5, 0.9, 0.4])


def _loss(docs: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The loss of documents ``docs`` given what their clusters have seen (deterministic,
    a per-document offset on the cluster's curve)."""
    k = LABELS[docs]
    return EPS[k] + BETA[k] * (seen[k] + 1.0) ** -ALPHA[k] + (docs * 0.618) % 1 * 0.2


class _AllReduce:
    """The sum over W threads of each one's array: a stand-in for all_reduce that
    blocks like it (each rank's call returns once all W have called)."""

    def __init__(self, world_size: int) -> None:
        self.barrier = threading.Barrier(world_size)
        self.parts: list[np.ndarray | None] = [None] * world_size

    def rank(self, r: int):
        def reduce(values: np.ndarray) -> np.ndarray:
            self.parts[r] = values
            self.barrier.wait()
            total = np.sum(self.parts, axis=0)
            self.barrier.wait()
            return total
        return reduce


T, G, CLIP = 300, 12, 3  # schedule length, global batch, clip


def _make(rank=0, world_size=1, reduce=None, **options):
    sampler = ClusterClipSampler(LABELS, T, strategy="paced", clip=CLIP, seed=4, rank=rank,
                                 world_size=world_size)
    mixer = OnlineMixer(sampler, every=24, min_count=8, reduce=reduce, **options)
    return sampler, mixer


def _train(sampler, mixer, steps, batch):
    """``steps`` batches of ``batch`` documents from ``sampler``, each observed."""
    it, out = iter(sampler), []
    for _ in range(steps):
        idx = np.array([next(it) for _ in range(batch)])
        mixer.observe(LABELS[idx], _loss(idx, mixer.counts))
        out.append(idx)
    return out


def _run_ranks(world_size, steps, states=None):
    """W ranks in lock-step threads; returns each rank's batches and final states."""
    red = _AllReduce(world_size)
    result = [None] * world_size

    def work(r):
        sampler, mixer = _make(r, world_size, red.rank(r))
        if states is not None:
            sampler.load_state_dict(states[r][0])
            mixer.load_state_dict(states[r][1])
        batches = _train(sampler, mixer, steps, G // world_size)
        result[r] = (batches, json.loads(json.dumps(sampler.state_dict())),
                     json.loads(json.dumps(mixer.state_dict())))

    threads = [threading.Thread(target=work, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return result


def _global(result, world_size):
    """The global schedule the ranks consumed (rank r holds positions r, r + W, ...)."""
    steps = len(result[0][0])
    out = np.empty(steps * G, np.int64)
    for r, (batches, _, _) in enumerate(result):
        if batches:
            out[r::world_size] = np.concatenate(batches)
    return out


STEPS = T // G  # 25 steps: the whole schedule


@pytest.fixture(scope="module")
def uninterrupted():
    (batches, state, mixer_state), = _run_ranks(1, STEPS)
    return np.concatenate(batches), state, mixer_state


@settings(max_examples=12, deadline=None)
@given(world_size=st.integers(1, 3), stop=st.integers(0, STEPS))
def test_any_world_size_stopped_anywhere_resumes_to_the_uninterrupted_schedule(
        uninterrupted, world_size, stop):
    whole, state, mixer_state = uninterrupted
    assert len(state["weights_calls"]) >= 5  # it does re-weigh
    head = _run_ranks(world_size, stop)
    # every rank set the same weights at the same positions and holds the same mixer
    assert all(h[1].get("weights_calls") == head[0][1].get("weights_calls") for h in head)
    assert all(h[2] == head[0][2] for h in head)
    tail = _run_ranks(world_size, STEPS - stop, [(h[1], h[2]) for h in head])
    got = np.concatenate([_global(head, world_size), _global(tail, world_size)])
    assert np.array_equal(got, whole)
    assert all(t[1]["weights_calls"] == state["weights_calls"] for t in tail)
    assert all(t[2] == mixer_state for t in tail)


_GLOO_WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch.distributed as dist
    sys.path.insert(0, sys.argv[2])
    import test_online as t

    dist.init_process_group("gloo")
    r, W = dist.get_rank(), dist.get_world_size()
    sampler, mixer = t._make(r, W)  # the default reduce: all_reduce over the group
    batches = t._train(sampler, mixer, t.STEPS, t.G // W)
    with open(f"{sys.argv[1]}/rank{r}.json", "w") as f:
        json.dump({"batches": [b.tolist() for b in batches],
                   "calls": sampler.state_dict()["weights_calls"],
                   "mixer": mixer.state_dict()}, f)
    dist.barrier()
    dist.destroy_process_group()
""")


def test_two_gloo_ranks_reduce_with_all_reduce_and_draw_the_one_process_schedule(
        uninterrupted, tmp_path):
    pytest.importorskip("torch")
    whole, state, mixer_state = uninterrupted
    script = tmp_path / "worker.py"
    script.write_text(_GLOO_WORKER)
    res = torchrun(script, tmp_path, Path(__file__).parent, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    got = np.empty(T, np.int64)
    for r, rank in enumerate(ranks):
        got[r::2] = np.concatenate(rank["batches"])
        assert rank["calls"] == state["weights_calls"] and rank["mixer"] == mixer_state
    assert np.array_equal(got, whole)


def test_the_same_losses_give_the_same_schedule_and_other_losses_another(uninterrupted):
    whole, state, _ = uninterrupted
    (again, state2, _), = _run_ranks(1, STEPS)
    assert np.array_equal(np.concatenate(again), whole) and state2 == state
    sampler, mixer = _make()
    it = iter(sampler)
    for _ in range(STEPS):
        idx = np.array([next(it) for _ in range(G)])
        mixer.observe(LABELS[idx], _loss(idx, mixer.counts)[::-1])  # other losses
    assert sampler.state_dict()["weights_calls"] != state["weights_calls"]


@pytest.mark.parametrize("floor", [0.05, 0.3])
def test_the_clip_holds_the_weights_are_finite_and_every_cluster_keeps_its_floor(floor):
    """A mixer pushed hard towards one cluster (its loss keeps falling, the others are
    flat): no document passes the clip, every weight set is finite and > 0, and each
    cluster keeps at least floor x its prior share."""
    sampler = ClusterClipSampler(LABELS, T, strategy="paced", clip=CLIP, seed=1)
    mixer = OnlineMixer(sampler, every=12, min_count=4, floor=floor, smoothing=0.0)
    it, fed, weights = iter(sampler), [], []
    for _ in range(STEPS):
        idx = np.array([next(it) for _ in range(G)])
        k = LABELS[idx]
        loss = np.where(k == 4, 1 + 5 * (mixer.counts[k] + 1.0) ** -1.5, 2.0)
        if mixer.observe(k, loss):
            weights.append(mixer.weights.copy())
        fed.extend(idx.tolist())
    assert len(fed) == T and np.bincount(fed).max() <= CLIP
    assert len(weights) >= 5
    prior = 1 / SIZES.size
    for w in weights:
        assert np.isfinite(w).all() and (w > 0).all()
        assert w.min() >= floor * prior * (1 - 1e-9)
    assert max(w[4] for w in weights) > 0.5  # it did move weight to the learning cluster
    calls = sampler.state_dict()["weights_calls"]
    assert all(np.allclose(w, c) for w, (_, c) in zip(weights, calls, strict=True))


def test_a_thin_cluster_borrows_its_pool_and_is_never_starved():
    """K = 400 clusters seen a few times each: none has enough observations of its own,
    so they are fitted through their pools; every cluster keeps the floor."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 400, 4000)
    sampler = ClusterClipSampler(labels, 6000, strategy="paced", clip=8, seed=0)
    pools = np.arange(400) % 8
    mixer = OnlineMixer(sampler, every=500, pools=pools, floor=0.2, min_count=64)
    fast = pools == 3  # one pool learns much faster than the rest
    it, shares = iter(sampler), []
    for _ in range(6000 // 50):
        idx = np.array([next(it) for _ in range(50)])
        k = labels[idx]
        seen = mixer.counts[k] + 1.0
        loss = np.where(fast[k], 1 + 4 * seen ** -0.8, 2 + 0.2 * seen ** -0.1)
        if mixer.observe(k, loss):
            shares.append(mixer.weights.copy())
    assert shares and mixer.counts.max() < mixer.min_count  # no cluster fits on its own
    last = shares[-1]
    assert last[fast].sum() > 2 * fast.mean()  # the fast pool gets more than its share
    assert last.min() >= 0.2 / 400 * (1 - 1e-9)


def test_bad_input_is_refused_naming_the_parameter():
    sampler = ClusterClipSampler(LABELS, T, strategy="paced", clip=CLIP)
    with pytest.raises(InputError, match="strategy paced or clusterclip"):
        OnlineMixer(ClusterClipSampler(LABELS, T, strategy="random"))
    with pytest.raises(InputError, match="floor must be in"):
        OnlineMixer(sampler, floor=1.0)
    with pytest.raises(InputError, match="method must be one of"):
        OnlineMixer(sampler, method="exp3")
    mixer = OnlineMixer(sampler)
    with pytest.raises(InputError, match="losses must be finite"):
        mixer.observe([0, 1], [1.0, float("nan")])
    with pytest.raises(InputError, match=r"cluster ids must be integers in \[0, 6\)"):
        mixer.observe([0, 6], [1.0, 1.0])
    with pytest.raises(InputError, match="saved with another floor"):
        OnlineMixer(sampler, floor=0.2).load_state_dict(mixer.state_dict())


# -- the simulated learner ------------------------------------------------------------------

def _simulate(K, T_sim, seed, online, clip=4, batch=32):
    """Final macro loss of a learner whose cluster k loss after n of its samples is
    e_k + b_k (n + 1) ** -a_k (plus noise in what the mixer sees), under paced balanced
    sampling, with or without the mixer; and the draws per cluster."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 120, K)
    a, b, e = rng.uniform(0.1, 1.0, K), rng.uniform(0.5, 4.0, K), rng.uniform(1, 3, K)
    labels = np.repeat(np.arange(K), sizes)
    sampler = ClusterClipSampler(labels, T_sim, strategy="paced", clip=clip, seed=seed)
    mixer = OnlineMixer(sampler) if online else None
    seen, noise, it = np.zeros(K), np.random.default_rng(seed + 1), iter(sampler)
    while idx := [i for _, i in zip(range(batch), it, strict=False)]:
        k = labels[idx]
        loss = e[k] + b[k] * (seen[k] + 1) ** -a[k] + noise.normal(0, 0.3, k.size).clip(-1, 1)
        np.add.at(seen, k, 1)
        if mixer is not None:
            mixer.observe(k, np.maximum(loss, 0))
    best = allocate(a * b, a, np.zeros(K), clip * sizes.astype(float), T_sim)
    macro = (e + b * (seen + 1) ** -a).mean()
    return macro, (e + b * (best + 1) ** -a).mean(), seen, a * b * (seen + 1) ** -(a + 1)


def test_on_a_simulated_learner_the_mixer_closes_part_of_the_gap_to_the_oracle():
    for seed in range(2):
        static, oracle, seen_static, gain = _simulate(30, 6000, seed, online=False)
        online, _, seen_online, _ = _simulate(30, 6000, seed, online=True)
        assert oracle < static
        assert (static - online) / (static - oracle) > 0.3
        # direction: more draws to the clusters with the highest marginal gain under
        # the static schedule (those whose loss still falls fastest), fewer to the lowest
        fast = gain > np.quantile(gain, 0.75)
        slow = gain < np.quantile(gain, 0.25)
        assert seen_online[fast].sum() > 1.2 * seen_static[fast].sum()
        assert seen_online[slow].sum() < seen_static[slow].sum()


@given(st.lists(st.integers(0, 9), min_size=1, max_size=30), st.integers(1, 7),
       st.integers(1, 3))
@settings(max_examples=40, deadline=None)
def test_document_losses_of_packed_windows_are_each_documents_mean(lengths, seq_len, batch):
    """With the stream position as each target's loss, every complete document is
    reported once, with the mean of its own positions, in stream order."""
    docs = [np.zeros(n) for n in lengths]
    fed = list(range(len(docs)))
    got: list[tuple[int, float]] = []
    dl = DocumentLosses(docs, fed, lambda i, v: got.extend(zip(i.tolist(), v.tolist(),
                                                                  strict=True)))
    total = sum(lengths)
    steps = total // (seq_len * batch)
    for s in range(steps):
        pos = 1 + s * seq_len * batch + np.arange(seq_len * batch, dtype=np.float64)
        dl(s, pos.reshape(batch, seq_len))
    trained = steps * seq_len * batch
    starts = 1 + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    want = [(i, float(np.mean(np.arange(starts[i], starts[i] + n))))
            for i, n in enumerate(lengths) if n and starts[i] + n - 1 <= trained]
    assert [i for i, _ in got] == [i for i, _ in want]
    assert np.allclose([v for _, v in got], [v for _, v in want])
