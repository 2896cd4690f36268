"""Choosing R: the expected course of ClusterClip and the recommendation built on it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.sampling.clip import choose_clip, expected_draws, quartile_clusters

sizes_st = st.lists(st.integers(0, 60), min_size=1, max_size=25).filter(lambda s: sum(s) > 0)


@settings(max_examples=100, deadline=None)
@given(sizes_st, st.integers(1, 8), st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.01, 1.0))
def test_expected_draws_respect_the_sampler_rules(sizes, clip, alpha, fraction):
    sizes = np.array(sizes)
    capacity = clip * sizes.sum()
    t = max(1, int(fraction * capacity))
    draws, pos = expected_draws(sizes, clip, t, alpha)
    assert draws.sum() == pytest.approx(t)  # every sample comes from some cluster
    assert (draws <= clip * sizes + 1e-9).all()  # nobody beyond R passes
    assert (draws[sizes == 0] == 0).all()
    clipped = np.isfinite(pos)
    assert (pos[clipped] <= t + 1e-6).all()
    np.testing.assert_allclose(draws[clipped], clip * sizes[clipped])
    live = (sizes > 0) & ~clipped
    if live.any():
        # Clusters still in the pool have drawn in proportion to n_k ** alpha ...
        ratio = draws[live] / sizes[live] ** alpha
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
        # ... and are not exhausted yet (a tie at exactly t counts as clipped).
        assert (draws[live] < clip * sizes[live] + 1e-9).all()
    # Clusters leave in order of R * n_k / n_k ** alpha (for alpha < 1: small ones first).
    if alpha < 1 and clipped.sum() > 1:
        order = np.argsort(pos[clipped], kind="stable")
        key = (sizes[clipped] ** (1 - alpha))[order]
        assert (np.diff(key) >= -1e-9).all()


def test_budget_over_capacity_exhausts_everything_and_no_clip_is_uniform():
    sizes = np.array([1, 5, 50, 0])
    draws, pos = expected_draws(sizes, 2, 10_000)
    np.testing.assert_allclose(draws, 2 * sizes)
    assert np.isfinite(pos[:3]).all() and np.isinf(pos[3])
    draws, pos = expected_draws(sizes, math.inf, 300)
    np.testing.assert_allclose(draws, [100, 100, 100, 0])
    assert np.isinf(pos).all()


def test_first_clip_position_alpha_zero_is_K_times_R_times_smallest():
    # With uniform cluster choice the smallest cluster runs out after K * R * n_min draws.
    sizes = np.array([3, 10, 40, 200])
    for clip in (1, 2, 5):
        _, pos = expected_draws(sizes, clip, clip * sizes.sum())
        assert pos.min() == pytest.approx(len(sizes) * clip * sizes.min())


@st.composite
def corpora(draw):
    k = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    sizes = np.maximum(1, (rng.pareto(1.2, k) * 5).astype(int))
    labels = np.repeat(np.arange(k), sizes)
    epochs = draw(st.floats(0.1, 6.0))
    return labels, max(1, int(epochs * labels.size))


def _fluid_by_steps(sizes: np.ndarray, clip: int, total: int, alpha: float) -> np.ndarray:
    """Cumulative expected draws per cluster after each position (float[T+1, K]), one step
    at a time: each sample is shared among the clusters in the pool in proportion to
    n_k ** alpha; a cluster reaching R * n_k mid-step leaves and the rest is re-shared."""
    cap = clip * sizes.astype(np.float64)
    w = np.where(sizes > 0, sizes.astype(np.float64) ** alpha, 0.0)
    d = np.zeros(sizes.size)
    out = [d.copy()]
    for _ in range(total):
        mass = 1.0
        while mass > 1e-12:
            pool = (d < cap - 1e-9) & (w > 0)
            if not pool.any():
                break
            rate = np.where(pool, w, 0.0) / w[pool].sum()
            # How much of the remaining mass until the first pool cluster is full.
            room = np.where(pool, (cap - d) / np.where(pool, rate, 1.0), np.inf)
            step = min(mass, room.min())
            d = np.minimum(d + step * rate, cap)
            mass -= step
        out.append(d.copy())
    return np.array(out)


@settings(max_examples=25, deadline=None)
@given(corpora(), st.sampled_from([0.0, 0.3]), st.sampled_from([0.25, 0.5, 1.0]))
def test_recommendation_obeys_its_rule_against_a_step_by_step_course(case, alpha, floor):
    labels, budget = case
    budget = min(budget, 1500)
    clips = range(1, 13)
    out = choose_clip(labels, budget, alpha=alpha, tail_floor=floor, clips=clips)
    sizes = np.bincount(labels)
    tail, _ = quartile_clusters(sizes)
    corpus_tail = sizes[tail].sum() / sizes.sum()
    assert out["late_threshold"] == pytest.approx(floor * corpus_tail)
    start = 8 * budget // 10 if budget >= 10 else budget - min(2, budget)
    assert out["late_start"] == start
    rows = {r["clip"]: r for r in out["rows"]}
    assert out["min_feasible_clip"] == math.ceil(budget / labels.size)
    passing = []
    for r in clips:
        row = rows[r]
        assert row["feasible"] == (r * labels.size >= budget)
        if not row["feasible"]:
            continue
        course = _fluid_by_steps(sizes, r, budget, alpha)
        late = (course[budget, tail].sum() - course[start, tail].sum()) / (budget - start)
        assert row["tail_share_late"] == pytest.approx(late, abs=1e-6)
        assert row["tail_share"] == pytest.approx(course[budget, tail].sum() / budget, abs=1e-6)
        if abs(late - out["late_threshold"]) < 1e-6:
            return  # a tie within float noise: the rule cannot be checked by brute force here
        if late >= out["late_threshold"]:
            passing.append(r)
    # The rule: the smallest R that serves T and keeps the tail at the floor late in training.
    assert out["recommended_clip"] == (min(passing) if passing else None)
    if out["recommended_clip"] is None:
        assert "No R" in out["reason"] or "needs R" in out["reason"]
    else:
        assert out["reason"].startswith(f"R={out['recommended_clip']}:")


def test_cluster_weights_replace_the_temperature():
    labels = np.repeat(np.arange(6), [1, 3, 9, 27, 81, 243])
    sizes = np.bincount(labels)
    by_alpha = choose_clip(labels, 700, alpha=0.5)
    by_weights = choose_clip(labels, 700, cluster_weights=sizes ** 0.5)
    assert by_weights["rows"] == by_alpha["rows"]
    # Weighting small clusters up makes them run out sooner.
    heavy_tail = choose_clip(labels, 700, cluster_weights=1.0 / sizes)
    assert heavy_tail["rows"][3]["first_clip_position"] < by_alpha["rows"][3]["first_clip_position"]
    with pytest.raises(ValueError, match="cluster_weights"):
        choose_clip(labels, 700, cluster_weights=np.ones(3))


def test_measured_columns_are_merged_for_feasible_rows_only():
    labels = np.repeat([0, 1, 2], [2, 5, 30])
    calls = []

    def measure(r):
        calls.append(r)
        return {"measured_tail_max_repetition": r}

    out = choose_clip(labels, 80, clips=[1, 2, 3], measure=measure)
    assert calls == [3]
    assert "measured_tail_max_repetition" not in out["rows"][0]
    assert out["rows"][2]["measured_tail_max_repetition"] == 3


def test_invalid_arguments():
    with pytest.raises(ValueError, match="no eligible"):
        choose_clip(np.array([-1, -1]), 5)
    with pytest.raises(ValueError, match="positive"):
        choose_clip(np.array([0, 1]), 0)


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_expected_draws_match_the_real_sampler(alpha):
    # The fluid model is the mean of the real sampler: average a few seeds' cluster counts.
    from clusterclip import ClusterClipSampler

    rng = np.random.default_rng(7)
    sizes = np.maximum(2, (rng.pareto(1.0, 40) * 20).astype(int))
    labels = rng.permutation(np.repeat(np.arange(sizes.size), sizes))
    clip, budget = 3, 2 * labels.size
    expected, _ = expected_draws(np.bincount(labels), clip, budget, alpha)
    runs = []
    for seed in range(4):
        s = ClusterClipSampler(labels, num_samples=budget, strategy="clusterclip", clip=clip,
                               alpha=alpha, seed=seed)
        sched = np.concatenate(list(s.blocks(4096)))
        runs.append(np.bincount(labels[sched], minlength=sizes.size))
    mean = np.mean(runs, axis=0)
    # Binomial noise of 4 runs: a few percent of the budget in total, a few samples per cluster.
    assert np.abs(mean - expected).sum() < 0.03 * budget
    tail, _ = quartile_clusters(sizes)
    assert mean[tail].sum() == pytest.approx(expected[tail].sum(), rel=0.05)
