"""Bounded Lloyd passes (Hamerly, cosine on CPU): brute-force labels, fewer products."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterclip import distributed as D
from clusterclip.clustering import KMeans, _bounds
from clusterclip.clustering._passes import Engine, normalise_rows
from clusterclip.clustering._rows import RowReader

PROPS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _engine(X: np.ndarray, chunk: int, valid: np.ndarray | None = None) -> Engine:
    return Engine(RowReader(X, chunk), valid, 0, "cosine", torch.device("cpu"),
                  D.Comm(active=False))


def _same_pass(p, ref) -> None:
    """A bounded pass holds the brute-force pass's labels, counts and float64 sums."""
    np.testing.assert_array_equal(p.labels, ref.labels)
    assert torch.equal(p.counts, ref.counts)
    assert (p.sums is None) == (ref.sums is None)
    if p.sums is not None:
        assert torch.equal(p.sums, ref.sums)


@st.composite
def problems(draw):
    seed = draw(st.integers(0, 10_000))
    n, d, k = draw(st.integers(20, 400)), draw(st.integers(2, 40)), draw(st.integers(1, 12))
    rng = np.random.default_rng(seed)
    mus = rng.standard_normal((k, d))
    spread = draw(st.sampled_from([0.05, 0.3, 1.0, 3.0]))
    X = mus[rng.integers(0, k, n)] + spread * rng.standard_normal((n, d))
    X *= rng.uniform(0.0, 3.0, (n, 1)) ** draw(st.sampled_from([0, 1]))  # norms vary or not
    X[rng.random(n) < 0.02] = 0.0  # a few zero rows: no direction
    valid = rng.random(n) > 0.1 if draw(st.booleans()) else None
    return (X.astype(np.float32), valid, k, draw(st.integers(1, 200)),
            draw(st.integers(1, 3)), seed)


@PROPS
@given(problems())
def test_every_bounded_pass_equals_the_brute_force_pass(problem):
    X, valid, k, chunk, threads, seed = problem
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)  # the blocks are shared among this many threads
    try:
        engine = _engine(X, chunk, valid)
        bounds = engine.bounds()
        rng = np.random.default_rng(seed)
        C = normalise_rows(torch.from_numpy(X[rng.choice(len(X), k)] + 1e-3))
        for it in range(8):
            p = engine.run(C, accumulate=it < 7, check_finite=False, bounds=bounds)
            _same_pass(p, engine.run(C, accumulate=it < 7, check_finite=False))
            if it < 7:
                C, _ = engine.update(C, p)
    finally:
        torch.set_num_threads(saved)


@PROPS
@given(st.integers(0, 10_000), st.integers(2, 64), st.integers(2, 9), st.integers(1, 300))
def test_near_ties_and_tiny_moves_keep_the_brute_force_labels(seed, d, k, chunk):
    """Rows halfway between two centroids (up to 1e-7) while the centroids move by
    1e-6 a pass: the labels come from float32 rounding, and still equal brute force's."""
    rng = np.random.default_rng(seed)
    C0 = rng.standard_normal((k, d))
    C0 /= np.linalg.norm(C0, axis=1, keepdims=True)
    pairs = rng.integers(0, k, (300, 2))
    X = (C0[pairs[:, 0]] + C0[pairs[:, 1]] + 1e-7 * rng.standard_normal((300, d)))
    X = X.astype(np.float32)
    engine = _engine(X, chunk)
    bounds = engine.bounds()
    drift = rng.standard_normal((k, d))
    for t in range(6):
        C = normalise_rows(torch.from_numpy((C0 + 1e-6 * t * drift).astype(np.float32)))
        _same_pass(engine.run(C, accumulate=True, check_finite=False, bounds=bounds),
                   engine.run(C, accumulate=True, check_finite=False))


def _fits(monkeypatch, X: np.ndarray, **kw) -> tuple[KMeans, KMeans]:
    bounded = KMeans(**kw).fit(X)
    monkeypatch.setattr(_bounds, "_SKIP", False)
    return bounded, KMeans(**kw).fit(X)


def _same_fit(a: KMeans, b: KMeans) -> None:
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.scores_, b.scores_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.objective_history_ == b.objective_history_
    assert (a.n_iter_, a.reseeds_) == (b.n_iter_, b.reseeds_)


def test_reseeded_centroids_that_jump_keep_the_fit_identical(monkeypatch):
    """Duplicate initial centroids leave clusters empty: re-seeding moves them across the
    sphere, and the rows near them must be recomputed."""
    rng = np.random.default_rng(3)
    mus = rng.standard_normal((8, 16))
    X = (mus[rng.integers(0, 8, 3000)] + 0.4 * rng.standard_normal((3000, 16)))
    X = X.astype(np.float32)
    init = np.repeat(X[:4], 2, axis=0)  # 8 centroids, 4 of them duplicates
    bounded, brute = _fits(monkeypatch, X, n_clusters=8, init=init, max_iter=25, tol=0,
                           chunk_rows=700)
    assert bounded.reseeds_[0] == 4
    _same_fit(bounded, brute)


def test_sampled_fit_is_identical_with_and_without_bounds(monkeypatch):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((4000, 24)).astype(np.float32)
    bounded, brute = _fits(monkeypatch, X, n_clusters=20, fit_sample=2500, max_iter=30,
                           seed=2, chunk_rows=999)
    _same_fit(bounded, brute)


def test_late_passes_recompute_few_rows(monkeypatch):
    """The point of the bounds: once the clusters settle, most rows skip the product."""
    rng = np.random.default_rng(5)
    mus = rng.standard_normal((10, 32))
    X = (mus[rng.integers(0, 10, 5000)] + 1.0 * rng.standard_normal((5000, 32)))
    X = X.astype(np.float32)
    shares: list[float] = []
    run = Engine.run

    def counting(self, C, accumulate, check_finite, bounds=None):
        p = run(self, C, accumulate, check_finite, bounds)
        if bounds is not None:
            shares.append(p.extra["recomputed"] / len(X))
        return p

    monkeypatch.setattr(Engine, "run", counting)
    KMeans(10, max_iter=20, tol=0, seed=0, chunk_rows=1000).fit(X)
    assert shares[0] == 1.0  # the first pass has no bounds yet
    assert len(shares) > 3 and max(shares[-3:]) < 0.2


@pytest.mark.parametrize("metric", ["euclidean"])
def test_other_metrics_take_the_brute_force_path(metric):
    X = np.random.default_rng(6).standard_normal((50, 4)).astype(np.float32)
    engine = Engine(RowReader(X, 16), None, 0, metric, torch.device("cpu"),
                    D.Comm(active=False))
    assert engine.bounds() is None
