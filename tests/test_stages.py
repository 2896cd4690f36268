"""Staged mixtures (``mixture.json`` version 2) and ``set_weights``: one clip over segments.

Every segment of the schedule (a stage, or the positions from a ``set_weights`` call on)
draws with its own weights from what the clip R left its clusters: paced takes the
water-filled quotas of its length over those remaining repetitions (checked here in exact
arithmetic), clusterclip draws greedily from them; no document passes R over the whole
schedule. A one-stage version-2 file is the version-1 file, byte for byte. Resume and seek
at and around every boundary give the same global schedule with any world size.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clusterclip import ClusterClipSampler, make_sampler
from clusterclip.cli import main
from clusterclip.errors import InputError
from clusterclip.sampling.mixture import Mixture, Stage, read_mixture, write_mixture


def _all(sampler):
    return np.concatenate([*sampler.blocks(1 << 10), np.empty(0, np.int64)])


def _exact_fill(avail, weights, n):
    """Real quotas min(avail_k, lam w_k) of the clusters with avail_k > 0 and w_k > 0,
    summing to n, in exact arithmetic (water-filling)."""
    cap = {k: Fraction(int(a)) for k, a in enumerate(avail) if a > 0 and weights[k] > 0}
    w = {k: Fraction(float(weights[k])) for k in cap}
    capped: set[int] = set()
    while True:
        free = [k for k in cap if k not in capped]
        if not free:
            return dict(cap)
        lam = (n - sum(cap[k] for k in capped)) / sum(w[k] for k in free)
        over = [k for k in free if lam * w[k] > cap[k]]
        if not over:
            return {k: cap[k] if k in capped else lam * w[k] for k in cap}
        capped.update(over)


def _case(seed, K, n):
    rng = np.random.default_rng(seed)
    labels = rng.integers(-1, K, n)
    labels[:K] = np.arange(K)
    return rng, labels


def _weights(rng, K):
    w = rng.uniform(0.05, 3.0, K) * (rng.random(K) < 0.7)
    w[rng.integers(K)] = 1.0
    return w


def _staged(rng, K, clip, timing, stages):
    untils = np.sort(rng.choice(np.arange(1, 20), stages - 1, replace=False)) / 20
    timings = [rng.choice(["paced", "clusterclip", None]) for _ in range(stages)]
    return Mixture((), clip, timing, "", tuple(
        Stage(float(u), tuple(_weights(rng, K)), t)
        for u, t in zip([*untils, 1.0], timings, strict=True)))


case_st = st.tuples(st.integers(0, 2**32), st.integers(2, 6), st.integers(40, 200))


@settings(max_examples=30, deadline=None)
@given(case_st, st.integers(1, 4), st.sampled_from(["paced", "clusterclip"]),
       st.integers(2, 3), st.floats(0.1, 0.9))
def test_each_stage_draws_the_quotas_of_its_weights_and_what_the_clip_left(
        case, clip, timing, stages, frac):
    rng, labels = _case(*case)
    K = case[1]
    m = _staged(rng, K, clip, timing, stages)
    sizes = np.bincount(labels[labels >= 0], minlength=K)
    T = max(2, int(frac * clip * sizes.sum()))
    try:  # a stage after a greedy one is checked when the schedule reaches it
        s = make_sampler(labels, T, mixture=m, seed=case[0] % 97, cache_dir=False)
        sched = _all(s)
    except InputError as e:  # a stage asks for more than its clusters have left
        assert "left under clip" in str(e) or "exceeds capacity" in str(e)
        assume(False)
    assert sched.size == T
    assert np.bincount(sched, minlength=labels.size).max() <= clip  # one clip over all
    used = np.zeros(K, np.int64)
    summary = s.summary()
    for i, (stage, info) in enumerate(zip(m.stages, summary["stages"], strict=True)):
        lo, hi = info["start"], info["stop"]
        assert hi == (T if i == len(m.stages) - 1 else math.floor(stage.until * T + 0.5))
        got = np.bincount(labels[sched[lo:hi]], minlength=K)
        w = np.array(stage.weights)
        avail = np.where(w > 0, clip * sizes - used, 0)
        assert (got[avail == 0] == 0).all() and (got <= avail).all()
        if (stage.timing or timing) == "paced" and hi > lo:
            real = _exact_fill(avail, w, hi - lo)
            for k in range(K):
                q = real.get(k, Fraction(0))
                assert math.floor(q) <= got[k] <= math.ceil(q), (i, k, got[k], q)
                # spread evenly inside the stage: about half of them in its first half
                mid = np.bincount(labels[sched[lo:(lo + hi) // 2]], minlength=K)[k]
                assert abs(mid - got[k] * ((hi - lo) // 2) / (hi - lo)) <= 2 + K
        # the clusters that reached their clip in this stage are the ones it names
        assert info["clusters_used_up"] == sorted(
            np.flatnonzero((got > 0) & (used + got == clip * sizes)).tolist())
        used += got
    assert summary["max_repetition"] <= clip


@settings(max_examples=12, deadline=None)
@given(case_st, st.sampled_from(["paced", "clusterclip"]), st.integers(0, 2**16))
def test_resume_and_seek_around_every_stage_boundary_with_any_world_size(case, timing, pick):
    rng, labels = _case(*case)
    m = _staged(rng, case[1], 3, timing, 3)
    T = int(0.5 * 3 * (labels >= 0).sum())
    try:
        ref = _all(make_sampler(labels, T, mixture=m, seed=1, cache_dir=False))
    except InputError:
        assume(False)
    ends = [st_["stop"] for st_ in make_sampler(labels, T, mixture=m, seed=1).summary()["stages"]]
    for p in sorted({max(0, min(T, e + d)) for e in ends[:-1] for d in (-1, 0, 1)}):
        W = 1 + (pick + p) % 3
        taker = make_sampler(labels, T, mixture=m, seed=1, consumed_samples=p)
        state = taker.state_dict()
        for r in range(W):
            seek = make_sampler(labels, T, mixture=m, seed=1, consumed_samples=p, rank=r,
                                world_size=W)
            n = (T - p) // W
            assert np.array_equal(_all(seek), ref[p + r:p + r + n * W:W])
            resumed = make_sampler(labels, T, mixture=m, seed=1, rank=r, world_size=W)
            resumed.load_state_dict(state)
            assert np.array_equal(_all(resumed), ref[p + r:p + r + n * W:W])


def _drive(s, calls):
    """Iterate sampler ``s``, making ``calls`` ((at, weights)) as its position reaches
    each ``at``; returns its draws and the states taken at each call."""
    got, states, it = [], [], iter(s)
    for at, w in calls:
        while s.position < at:
            got.append(next(it))
        s.set_weights(w, at=at)
        states.append(s.state_dict())
    got += list(it)
    return np.array(got, np.int64), states


def _with_calls(labels, T, calls, W=1, **kw):
    """Every rank r of W driven through ``calls`` (:func:`_drive`)."""
    return [_drive(make_sampler(labels, T, rank=r, world_size=W, **kw), calls)
            for r in range(W)]


@settings(max_examples=12, deadline=None)
@given(case_st, st.sampled_from(["paced", "clusterclip"]), st.integers(1, 3),
       st.lists(st.floats(0.0, 0.95), min_size=1, max_size=3))
def test_set_weights_changes_the_draws_from_its_position_under_the_same_clip(
        case, timing, W, fracs):
    rng, labels = _case(*case)
    K = case[1]
    T = int(0.6 * 2 * (labels >= 0).sum())
    ats = sorted({int(f * T) // W * W for f in fracs})
    calls = [(at, rng.uniform(0.2, 2.0, K) * (rng.random(K) < 0.8) + (np.arange(K) == 0))
             for at in ats]
    kw = {"strategy": timing, "clip": 2, "seed": 3, "cache_dir": False}
    plain = _all(make_sampler(labels, T, **kw))
    try:
        ranks = _with_calls(labels, T, calls, W, **kw)
    except InputError as e:
        assert "left under clip" in str(e)
        assume(False)
    n = T // W
    sched = np.empty(n * W, np.int64)
    for r, (got, _) in enumerate(ranks):  # every rank made the same calls: one schedule
        assert got.size == n
        sched[r::W] = got
    one = _with_calls(labels, T, calls, 1, **kw)[0][0]
    assert np.array_equal(sched, one[:n * W])
    assert np.array_equal(one[:ats[0]], plain[:ats[0]])  # nothing moves before the call
    assert np.bincount(one, minlength=labels.size).max() <= 2
    for at, w in calls:  # a weight of 0 draws nothing from the call on (to the next one)
        nxt = min([a for a, _ in calls if a > at] + [T])
        assert not np.isin(labels[one[at:nxt]], np.flatnonzero(w == 0)).any()
    # a state taken at a call resumes the same schedule at any W (the later calls made
    # again at their positions), and so does one a position before or after it
    states = _with_calls(labels, T, calls, 1, **kw)[0][1]
    for i, state in enumerate(states):
        for W2 in (1, 2, 3):
            p = state["position"]
            later = [(at, w) for at, w in calls[i + 1:] if (at - p) % W2 == 0]
            if len(later) < len(calls) - i - 1:
                continue  # a later call this W's positions do not stop at
            for r in range(W2):
                s = make_sampler(labels, T, rank=r, world_size=W2, **kw)
                s.load_state_dict(state)
                m = (T - p) // W2
                assert np.array_equal(_drive(s, later)[0], one[p + r:p + r + m * W2:W2])
        near = make_sampler(labels, T, consumed_samples=min(T, p + 1), **kw)
        near.load_state_dict(state)
        if p < T:
            next(iter(near))
            assert near.position == p + 1
            resumed = make_sampler(labels, T, **kw)
            resumed.load_state_dict(near.state_dict())
            assert np.array_equal(_drive(resumed, calls[i + 1:])[0], one[p + 1:])


def test_set_weights_is_refused_before_the_position_and_outside_the_clip_strategies():
    labels = np.random.default_rng(0).integers(0, 4, 100)
    s = make_sampler(labels, 200, strategy="paced", clip=3)
    it = iter(s)
    for _ in range(10):
        next(it)
    with pytest.raises(InputError, match="at 5 is before this sampler's position 10"):
        s.set_weights([1, 1, 1, 1], at=5)
    with pytest.raises(InputError, match="weights"):
        s.set_weights([1, -1, 1, 1], at=20)
    with pytest.raises(InputError, match="needs 180 draws but"):
        s.set_weights([1, 0, 0, 0], at=20)
    with pytest.raises(InputError, match="set_weights needs strategy paced or clusterclip"):
        make_sampler(labels, 200, strategy="uniform").set_weights([1, 1, 1, 1])
    excluded = make_sampler(labels, 200, strategy="paced", cluster_weights=[1, 1, 1, 0])
    with pytest.raises(InputError, match="cluster 3 was excluded"):
        excluded.set_weights([1, 1, 1, 1])
    # a state whose calls were edited is refused (checksum), a sampler's own is taken
    s.set_weights([2, 1, 1, 1], at=40)
    state = s.state_dict()
    assert state["weights_calls"] == [[40, [2.0, 1.0, 1.0, 1.0]]]
    state["weights_calls"][0][0] = 41
    with pytest.raises(InputError, match="checksum"):
        make_sampler(labels, 200, strategy="paced", clip=3).load_state_dict(state)


@pytest.mark.parametrize("timing", ["paced", "clusterclip"])
def test_a_one_stage_version_2_file_is_the_version_1_file_byte_for_byte(tmp_path, timing):
    labels = np.random.default_rng(0).integers(-1, 6, 900)
    np.save(tmp_path / "l.npy", labels)
    w = [1.0, 0.0, 2.0, 0.5, 1.0, 1.0]
    v1 = {"format_version": 1, "weights": w, "clip": 3, "timing": timing}
    v2 = {"format_version": 2, "clip": 3, "timing": "paced",
          "stages": [{"until": 1, "weights": w, "timing": timing}]}
    outs = []
    for name, data in (("v1", v1), ("v2", v2)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        out = tmp_path / f"{name}.npy"
        assert main(["sample", "--labels", str(tmp_path / "l.npy"), "--out", str(out),
                     "--num-samples", "1000", "--no-progress", "--mixture",
                     str(tmp_path / f"{name}.json")]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert read_mixture(tmp_path / "v1.json") == read_mixture(tmp_path / "v2.json")


def test_a_staged_file_round_trips_and_sample_follows_it(tmp_path, capsys):
    labels = np.random.default_rng(1).integers(0, 4, 400)
    np.save(tmp_path / "l.npy", labels)
    m = Mixture((), 4, "paced", "target", (Stage(0.75, (1.0, 1.0, 1.0, 1.0)),
                                           Stage(1.0, (0.0, 0.0, 1.0, 3.0), "clusterclip")))
    write_mixture(tmp_path / "m.json", m)
    assert json.loads((tmp_path / "m.json").read_text())["format_version"] == 2
    assert read_mixture(tmp_path / "m.json", 4) == m
    out, summ = tmp_path / "s.npy", tmp_path / "s.json"
    assert main(["sample", "--labels", str(tmp_path / "l.npy"), "--out", str(out),
                 "--num-samples", "800", "--no-progress", "--mixture", str(tmp_path / "m.json"),
                 "--summary-json", str(summ)]) == 0
    assert "stage 2 (until 1.0): positions 600 to 800 (clusterclip)" in capsys.readouterr().out
    ref = _all(ClusterClipSampler(labels, 800, mixture=m))
    assert np.array_equal(np.load(out), ref)
    assert set(labels[ref[600:]].tolist()) <= {2, 3}
    stages = json.loads(summ.read_text())["stages"]
    assert [(s["start"], s["stop"], s["timing"]) for s in stages] == [
        (0, 600, "paced"), (600, 800, "clusterclip")]


def test_the_kernel_and_numpy_paths_draw_the_same_staged_schedule(monkeypatch):
    labels = np.random.default_rng(2).integers(-1, 9, 3000)
    rng = np.random.default_rng(3)
    m = Mixture((), 3, "paced", "", (Stage(0.3, tuple(_weights(rng, 9))),
                                     Stage(0.8, tuple(_weights(rng, 9)), "clusterclip"),
                                     Stage(1.0, tuple(np.ones(9)))))
    a = _all(make_sampler(labels, 5000, mixture=m, seed=5))
    monkeypatch.setenv("CLUSTERCLIP_KERNEL", "off")
    assert np.array_equal(_all(make_sampler(labels, 5000, mixture=m, seed=5)), a)


BAD = [
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 0.5, "weights": [1] * 6}],
     "stages[1].until is 0.5, not above stages[0].until 0.5"),
    ([{"until": 0.6, "weights": [1] * 6}, {"until": 0.4, "weights": [1] * 6}],
     "stages[1].until is 0.4, not above"),
    ([{"until": 0, "weights": [1] * 6}, {"until": 1, "weights": [1] * 6}],
     "stages[0].until is 0; it must be in (0, 1]"),
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 1.5, "weights": [1] * 6}],
     "stages[1].until is 1.5; it must be in (0, 1]"),
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 0.9, "weights": [1] * 6}],
     "stages[1].until is 0.9; the last stage must end at 1"),
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 1, "weights": [1] * 5}],
     "stages[1].weights has 5 weights, not 6"),
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 1, "weights": [1, -1, 1, 1, 1, 1]}],
     "stages[1].weights[1] is -1"),
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 1, "weights": [1, 1e400, 1, 1, 1, 1]}],
     "stages[1].weights[1] is inf"),
    ([{"until": 1, "weights": [1, float("nan"), 1, 1, 1, 1]}], "stages[0].weights[1] is nan"),
    ([{"until": 0.5, "weights": [1] * 6}, {"until": 1, "weights": [0] * 6}],
     "stages[1]: every weight is 0"),
    ([{"until": 1, "weights": [1] * 6, "timing": "random"}], "stages[0]: timing must be"),
    ([], "stages must be a non-empty list"),
    ([{"weights": [1] * 6}], "stages[0] must be an object with until and weights"),
]


@pytest.mark.parametrize(("stages", "needle"), BAD)
def test_a_bad_staged_file_is_one_line_naming_the_file_and_field_exit_2(tmp_path, capsys,
                                                                          stages, needle):
    labels = np.random.default_rng(0).integers(-1, 6, 300)
    np.save(tmp_path / "l.npy", labels)
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"format_version": 2, "clip": 3, "timing": "paced",
                             "stages": stages}).replace("Infinity", "1e400"))
    out = tmp_path / "s.npy"
    assert main(["sample", "--labels", str(tmp_path / "l.npy"), "--out", str(out),
                 "--num-samples", "100", "--no-progress", "--mixture", str(m)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and str(m) in err and "\n" not in err, err
    assert not out.exists()


def test_docs_adaptive_loop_recipe_reweighs_and_resumes_after_a_crash(tmp_path, monkeypatch):
    """The recipe of docs/integrations.md, run as written: the mixer re-weighs every 40
    positions, the schedule follows its calls, and a crash mid-run resumes with exactly
    the rest."""
    torch = pytest.importorskip("torch")
    from _helpers import docs_recipe

    labels = np.random.default_rng(5).integers(0, 5, 120)
    (tmp_path / "W").mkdir()
    np.save(tmp_path / "W" / "labels.npy", labels)
    monkeypatch.chdir(tmp_path)
    dataset = [{"doc": i} for i in range(labels.size)]

    class Crash(Exception):
        pass

    model = Path("model.json")  # the "model": what each cluster has been trained on

    def run(stop_at=None):
        trained = []

        def train_step(batch):  # a loss that falls with what its cluster has seen
            if len(trained) == stop_at:
                raise Crash
            done = np.array(json.loads(model.read_text())) if model.exists() else np.zeros(5)
            trained.append(batch["doc"].tolist())
            k = torch.tensor(labels)[batch["doc"]]
            loss = 1 + (1 + k) * (torch.tensor(done)[k] + 1) ** -0.5
            model.write_text(json.dumps((done + np.bincount(k, minlength=5)).tolist()))
            return loss

        code = docs_recipe("adaptive-loop")
        try:
            exec(code, {"dataset": dataset, "train_step": train_step})
        except Crash:
            pass
        return [d for b in trained for d in b]

    whole = run()
    state = json.loads(Path("adaptive.json").read_text())["sampler"]
    calls = state["weights_calls"]
    assert [at for at, _ in calls] == list(range(40, 400, 40))  # every 5 steps of 8
    assert calls[-1][1][4] > calls[-1][1][0]  # towards the cluster whose loss falls most
    ref = make_sampler(labels, 400, strategy="paced", clip=4, seed=0)
    assert np.array_equal(_drive(ref, [(at, np.array(w)) for at, w in calls])[0], whole)
    assert len(whole) == 400 and np.bincount(whole).max() <= 4
    Path("adaptive.json").unlink()
    model.unlink()
    head = run(stop_at=13)
    rest = run()
    assert head + rest == whole


def test_a_stage_asking_more_than_its_clusters_have_left_is_refused_with_one_line(tmp_path,
                                                                                   capsys):
    labels = np.repeat(np.arange(3), [10, 10, 80])
    late = Stage(1.0, (1.0, 1.0, 0.0))  # 20 documents x clip 2 = 40 repetitions at most
    for timing in ("paced", "clusterclip"):
        m = Mixture((), 2, timing, "", (Stage(0.5, (1.0, 1.0, 1.0)), late))
        # paced: refused when made; after a greedy stage: by summary() or on reaching it
        if timing == "paced":
            with pytest.raises(InputError, match=r"stage 2 \(until 1.0\) \(positions 40 to "
                                                 r"80\) needs 40 draws but .* left under clip 2"):
                make_sampler(labels, 80, mixture=m)
        else:
            s = make_sampler(labels, 80, mixture=m)
            with pytest.raises(InputError, match="stage 2 .* left under clip 2"):
                s.summary()
            with pytest.raises(InputError, match="stage 2 .* left under clip 2"):
                _all(make_sampler(labels, 80, mixture=m))
        np.save(tmp_path / "l.npy", labels)
        write_mixture(tmp_path / "m.json", m)
        out = tmp_path / "s.npy"
        assert main(["sample", "--labels", str(tmp_path / "l.npy"), "--out", str(out),
                     "--num-samples", "80", "--no-progress", "--mixture",
                     str(tmp_path / "m.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert "stage 2" in err and "\n" not in err and not out.exists()


def test_experiment_anneal_is_natural_then_the_mixture_for_the_last_fifth():
    from clusterclip.experiment.core import ANNEAL_FROM, _anneal_spec

    labels = np.repeat(np.arange(4), [50, 100, 150, 200])
    spec = _anneal_spec(Mixture((0.0, 0.0, 1.0, 3.0), 2, "paced", ""),
                        np.bincount(labels, minlength=4))
    sched = _all(make_sampler(labels, 500, seed=0, **spec.sampler_kwargs()))
    cut = round(ANNEAL_FROM * 500)
    first = np.bincount(labels[sched[:cut]], minlength=4)
    assert np.abs(first - cut * np.array([50, 100, 150, 200]) / 500).max() <= 1  # natural
    assert set(labels[sched[cut:]].tolist()) == {2, 3}  # then the mixture's clusters
    assert np.bincount(sched).max() <= 2
    assert spec.drawn_clusters(4).all()
    with pytest.raises(InputError, match="staged already"):
        _anneal_spec(Mixture((), 2, "paced", "", (Stage(0.5, (1.0,) * 4), Stage(1.0, (1.0,) * 4))),
                     np.ones(4))


@pytest.mark.parametrize("timing", ["paced", "clusterclip"])
@pytest.mark.parametrize("at", [150, 300, 301])  # inside stage 2, at its end, just after
def test_set_weights_on_a_staged_mixture_cuts_its_stage_and_replaces_the_later_ones(timing,
                                                                                   at):
    labels = np.random.default_rng(4).integers(0, 5, 300)
    m = Mixture((), 3, timing, "", (Stage(0.2, (1.0,) * 5),
                                    Stage(0.6, (1.0, 2.0, 0.0, 1.0, 1.0)),
                                    Stage(1.0, (0.0, 0.0, 1.0, 1.0, 0.0))))
    plain = _all(make_sampler(labels, 500, mixture=m, seed=2))
    new = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
    got, states = _drive(make_sampler(labels, 500, mixture=m, seed=2), [(at, new)])
    assert np.array_equal(got[:at], plain[:at])
    assert not (labels[got[at:]] == 0).any()  # the call's weights from `at` to the end
    assert np.bincount(got, minlength=labels.size).max() <= 3
    summary = make_sampler(labels, 500, mixture=m, seed=2)
    summary.load_state_dict(states[0])
    names = [st["stage"] for st in summary.summary()["stages"]]
    assert names[-1] == f"set_weights at {at}"
    assert ("stage 3 (until 1.0)" in names) == (at > 300)  # cut, or dropped before it
    for W in (2, 3):
        for r in range(W):
            s = make_sampler(labels, 500, mixture=m, seed=2, rank=r, world_size=W)
            s.load_state_dict(states[0])
            n = (500 - at) // W
            assert np.array_equal(_all(s), got[at + r:at + r + n * W:W])
