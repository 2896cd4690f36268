"""K-means core: invariants of the torch backend, chunking, memmaps, FAISS agreement."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

from clusterclip.clustering import KMeans, assign
from clusterclip.clustering._rows import RowReader
from clusterclip.errors import InputError

PROPS = settings(max_examples=25, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def blobs(n: int, d: int, k: int, seed: int, spread: float = 0.05,
          dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Unit rows around k random directions; returns (X, true labels)."""
    rng = np.random.default_rng(seed)
    mus = rng.standard_normal((k, d))
    mus /= np.linalg.norm(mus, axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    y[:k] = np.arange(k)  # every blob is present
    X = mus[y] + spread * rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(dtype), y


def unit(X: np.ndarray) -> np.ndarray:
    X = X.astype(np.float64)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)


class Gaussian(NamedTuple):
    X: np.ndarray  # float32 (n, d) standard normal rows
    k: int  # clusters, 1 <= k <= n
    chunk: int  # chunk_rows that usually splits the rows
    seed: int


@st.composite
def gaussian_data(draw) -> Gaussian:
    """Small gaussian data sets, with a few clusters and chunk sizes that split them."""
    seed, n, d = draw(st.integers(0, 10_000)), draw(st.integers(8, 60)), draw(st.integers(2, 6))
    k, chunk = draw(st.integers(1, 6)), draw(st.integers(1, 64))
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return Gaussian(X, k, chunk, seed)


@PROPS
@given(gaussian_data(), st.sampled_from(["cosine", "euclidean"]))
def test_labels_are_the_argmax_against_the_final_centroids(data, metric):
    X, k, chunk, seed = data
    n, d = X.shape
    km = KMeans(k, max_iter=8, metric=metric, seed=seed, chunk_rows=chunk).fit(X)
    C = km.cluster_centers_.astype(np.float64)
    if metric == "cosine":
        sims = unit(X) @ C.T
        assigned = sims[np.arange(n), km.labels_]
        np.testing.assert_allclose(km.scores_, assigned, atol=1e-5)
        assert np.all(assigned >= sims.max(axis=1) - 1e-5)
        np.testing.assert_allclose(np.linalg.norm(C, axis=1), 1.0, atol=1e-5)
    else:
        # Squared distances: float32 |x|^2 - 2x.c + |c|^2 has absolute error ~1e-6 |x|^2.
        sq = ((X[:, None, :].astype(np.float64) - C[None]) ** 2).sum(-1)
        tol = 1e-5 * max(1.0, float((X.astype(np.float64) ** 2).sum(1).max()))
        assigned = sq[np.arange(n), km.labels_]
        np.testing.assert_allclose(km.scores_.astype(np.float64) ** 2, assigned, atol=tol)
        assert np.all(km.scores_ <= 0)
        assert np.all(assigned <= sq.min(axis=1) + tol)
        np.testing.assert_allclose(km.inertia_, assigned.sum(), rtol=1e-4, atol=n * tol)
    assert km.labels_.dtype == np.int32 and km.scores_.dtype == np.float32
    assert km.cluster_centers_.dtype == np.float32 and km.cluster_centers_.shape == (k, d)


@PROPS
@given(gaussian_data())
def test_no_cluster_is_empty_when_rows_have_k_distinct_directions(data):
    # Gaussian rows have distinct directions with probability one.
    X, k, chunk, seed = data
    km = KMeans(k, max_iter=5, seed=seed, chunk_rows=chunk).fit(X)
    assert km.empty_clusters_ == 0
    assert np.bincount(km.labels_, minlength=k).min() >= 1


@PROPS
@given(gaussian_data())
def test_spherical_objective_never_decreases(data):
    X, k, chunk, seed = data
    km = KMeans(k, max_iter=15, tol=0, seed=seed, chunk_rows=chunk).fit(X)
    h = np.array(km.objective_history_)
    assert np.all(np.diff(h) >= -1e-6), h
    assert km.objective_ == pytest.approx(float(km.scores_.astype(np.float64).mean()), abs=1e-6)


@PROPS
@given(gaussian_data(), st.sampled_from(["cosine", "euclidean"]))
def test_same_seed_gives_identical_results(data, metric):
    X, k, chunk, seed = data
    a = KMeans(k, max_iter=6, metric=metric, seed=seed, chunk_rows=chunk).fit(X)
    b = KMeans(k, max_iter=6, metric=metric, seed=seed, chunk_rows=chunk).fit(X)
    assert a.labels_.tobytes() == b.labels_.tobytes()
    assert a.cluster_centers_.tobytes() == b.cluster_centers_.tobytes()
    assert a.objective_history_ == b.objective_history_


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.sampled_from(["cosine", "euclidean"]))
def test_row_order_does_not_change_the_partition_for_a_fixed_init(seed, k, metric):
    # Well-separated blobs, so no row sits within float error of two centroids.
    X, _ = blobs(120, 8, k, seed, spread=0.1)
    init = X[:k].copy()
    perm = np.random.default_rng(seed + 1).permutation(len(X))
    a = KMeans(k, max_iter=10, metric=metric, init=init, chunk_rows=64).fit(X)
    b = KMeans(k, max_iter=10, metric=metric, init=init, chunk_rows=37).fit(X[perm])
    np.testing.assert_array_equal(a.labels_[perm], b.labels_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-6)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_recovers_well_separated_clusters(metric):
    X, y = blobs(3000, 32, 12, seed=3, spread=0.04)
    km = KMeans(12, max_iter=30, metric=metric, seed=0, chunk_rows=500).fit(X)
    assert adjusted_rand_score(y, km.labels_) > 0.99
    assert km.n_iter_ < 30  # stopped on tolerance


def test_chunked_fit_equals_unchunked_fit():
    X, _ = blobs(1000, 16, 8, seed=5, spread=0.2)
    whole = KMeans(8, max_iter=12, seed=1, chunk_rows=10**6).fit(X)
    for chunk in (29, 333):
        part = KMeans(8, max_iter=12, seed=1, chunk_rows=chunk).fit(X)
        np.testing.assert_array_equal(part.labels_, whole.labels_)
        np.testing.assert_allclose(part.cluster_centers_, whole.cluster_centers_, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_memmap_input_and_views_equal_in_memory_input(tmp_path, dtype):
    X, _ = blobs(1500, 24, 6, seed=7, spread=0.2, dtype=dtype)
    np.save(tmp_path / "e.npy", X)
    mm = np.load(tmp_path / "e.npy", mmap_mode="r")
    ref = KMeans(6, max_iter=8, seed=2).fit(X)
    got = KMeans(6, max_iter=8, seed=2, chunk_rows=100).fit(mm)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    # A view that starts mid-file (how a rank sees its shard) reads the right bytes.
    ref_view = KMeans(6, max_iter=8, seed=2).fit(X[333:1201])
    got_view = KMeans(6, max_iter=8, seed=2, chunk_rows=64).fit(mm[333:1201])
    np.testing.assert_array_equal(got_view.labels_, ref_view.labels_)


def test_row_reader_reads_memmap_views_exactly(tmp_path):
    X = np.arange(5000 * 3, dtype=np.float32).reshape(5000, 3)
    np.save(tmp_path / "x.npy", X)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    for view, ref in ((mm, X), (mm[1234:4321], X[1234:4321]), (mm[4999:], X[4999:])):
        reader = RowReader(view, 97)
        assert reader._window is not None  # the pread path, not slicing
        got = np.concatenate([rows.copy() for _, rows in reader])
        np.testing.assert_array_equal(got, ref)


def test_valid_mask_excludes_rows_and_equals_clustering_the_valid_rows():
    X, _ = blobs(900, 16, 5, seed=11, spread=0.2)
    valid = np.random.default_rng(0).random(900) > 0.3
    X_bad = X.copy()
    X_bad[~valid] = np.nan  # excluded rows are never read as data
    km = KMeans(5, max_iter=10, seed=4, chunk_rows=128).fit(X_bad, valid)
    assert np.all(km.labels_[~valid] == -1) and np.all(km.scores_[~valid] == 0)
    ref = KMeans(5, max_iter=10, seed=4).fit(X[valid])
    np.testing.assert_array_equal(km.labels_[valid], ref.labels_)


def test_empty_clusters_are_reseeded_and_counted():
    X, _ = blobs(600, 8, 4, seed=2, spread=0.1)
    init = np.repeat(X[:1], 4, axis=0)  # four identical centroids: three start empty
    km = KMeans(4, max_iter=10, seed=0, init=init).fit(X)
    assert km.reseeds_[0] == 3
    assert np.bincount(km.labels_, minlength=4).min() >= 1 and km.empty_clusters_ == 0


def test_fewer_distinct_rows_than_clusters_is_reported_not_silent():
    X = np.repeat(np.eye(3, dtype=np.float32), 5, axis=0)  # 3 distinct rows, K = 5
    with pytest.warns(UserWarning, match="2 of 5 clusters are empty"):
        km = KMeans(5, max_iter=5).fit(X)
    assert km.empty_clusters_ == 2


def test_more_restarts_never_give_a_worse_objective():
    X, _ = blobs(1500, 16, 10, seed=9, spread=0.4)
    one = KMeans(10, max_iter=10, seed=3).fit(X)
    three = KMeans(10, max_iter=10, seed=3, n_init=3).fit(X)
    assert three.objective_ >= one.objective_ - 1e-9


def test_euclidean_objective_never_increases():
    X = np.random.default_rng(0).standard_normal((800, 6)).astype(np.float32) * 3
    km = KMeans(7, max_iter=20, tol=0, metric="euclidean").fit(X)
    assert np.all(np.diff(km.objective_history_) <= 1e-5)
    assert km.inertia_ == pytest.approx(km.objective_ * 800, rel=1e-5)


def test_predict_and_assign_match_fit_labels():
    X, _ = blobs(700, 12, 5, seed=1, spread=0.2)
    km = KMeans(5, max_iter=10, chunk_rows=99).fit(X)
    labels, scores = km.predict(X)
    np.testing.assert_array_equal(labels, km.labels_)
    np.testing.assert_allclose(scores, km.scores_, atol=1e-6)
    labels2, _ = assign(X, km.cluster_centers_ * 3.0, chunk_rows=50)  # scale-free in cosine
    np.testing.assert_array_equal(labels2, km.labels_)


def test_faiss_backend_agrees_with_torch_backend():
    pytest.importorskip("faiss")
    X, _ = blobs(3000, 32, 20, seed=4, spread=0.35)
    init = X[np.random.default_rng(0).choice(len(X), 20, replace=False)]
    ours = KMeans(20, max_iter=10, tol=0, init=init).fit(X)
    theirs = KMeans(20, max_iter=10, tol=0, init=init, backend="faiss").fit(X)
    # Same start, same Lloyd iterations: the same optimum up to float rounding.
    assert ours.objective_ == pytest.approx(theirs.objective_, abs=1e-4)
    assert adjusted_rand_score(ours.labels_, theirs.labels_) > 0.98
    assert theirs.labels_.dtype == np.int32 and theirs.cluster_centers_.shape == (20, 32)
    # Each with its own initialisation, ours is not worse than FAISS by more than 0.5%.
    own = KMeans(20, max_iter=10, tol=0, seed=0).fit(X)
    faiss_own = KMeans(20, max_iter=10, tol=0, seed=0, backend="faiss").fit(X)
    assert own.objective_ >= faiss_own.objective_ * (1 - 0.005)


def test_faiss_backend_missing_is_a_clear_input_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_faiss(name, *args, **kwargs):
        if name == "faiss":
            raise ImportError("No module named 'faiss'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_faiss)
    X, _ = blobs(50, 4, 2, seed=0)
    with pytest.raises(InputError, match="faiss is not installed"):
        KMeans(2, backend="faiss").fit(X)


@pytest.mark.parametrize("make, match", [
    (lambda X: KMeans(0).fit(X), "n_clusters=0"),
    (lambda X: KMeans(101).fit(X), "exceeds the number of valid rows"),
    (lambda X: KMeans(5).fit(X[:, 0]), "2-D"),
    (lambda X: KMeans(5).fit(X.astype(np.int32)), "dtype int32"),
    (lambda X: KMeans(5, metric="manhattan").fit(X), "metric"),
    (lambda X: KMeans(5).fit(X, np.ones(99, bool)), "valid mask"),
    (lambda X: KMeans(5, init=np.zeros((4, 8))).fit(X), "init"),
])
def test_bad_input_raises_input_error(make, match):
    X, _ = blobs(100, 8, 3, seed=0)
    with pytest.raises(InputError, match=match):
        make(X)


@pytest.mark.parametrize("make, param", [
    (lambda X: KMeans(0).fit(X), "n_clusters"),
    (lambda X: KMeans(101).fit(X), "n_clusters"),
    (lambda X: KMeans(5, max_iter=-1).fit(X), "max_iter"),
    (lambda X: KMeans(5, tol=float("nan")).fit(X), "tol"),
    (lambda X: KMeans(5, init=np.zeros((4, 8))).fit(X), "init"),
    (lambda X: KMeans(5, device="no-such-device").fit(X), "device"),
])
def test_bad_parameter_errors_name_it_for_the_front_end(make, param):
    """A front end renames the parameter an error names (errors.flag_message)."""
    from clusterclip.errors import flag_message

    X, _ = blobs(100, 8, 3, seed=0)
    with pytest.raises(InputError) as got:
        make(X)
    assert param in got.value.params
    assert "--the-flag" in flag_message(got.value, {param: "--the-flag"})


def test_nan_rows_are_named():
    X, _ = blobs(300, 8, 3, seed=0)
    X[123, 4] = np.nan
    with pytest.raises(InputError, match="NaN"):  # found while initialising
        KMeans(3, chunk_rows=50).fit(X)
    with pytest.raises(InputError, match="row 123 holds NaN"):
        KMeans(3, chunk_rows=50, init=X[:3]).fit(X)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_fit_sample_fits_the_sample_then_labels_every_row(metric):
    from clusterclip.clustering._lloyd import sample_rows

    X, _ = blobs(3000, 16, 6, seed=3, spread=0.3)
    valid = np.random.default_rng(1).random(3000) > 0.1
    km = KMeans(6, max_iter=20, metric=metric, seed=2, chunk_rows=256,
                fit_sample=700).fit(X, valid)
    rows = sample_rows(valid, [int(valid.sum())], 700, 2)
    assert rows.size == 700 and valid[rows].all() and (np.diff(rows) > 0).all()
    on_sample = KMeans(6, max_iter=20, metric=metric, seed=2).fit(X[rows])
    np.testing.assert_array_equal(km.cluster_centers_, on_sample.cluster_centers_)
    assert km.sample_objective_ == on_sample.objective_ and km.fit_sample_rows_ == 700
    labels, scores = assign(X, km.cluster_centers_, metric=metric, valid=valid)
    np.testing.assert_array_equal(km.labels_, labels)
    np.testing.assert_array_equal(km.scores_, scores)
    s = scores[valid].astype(np.float64)
    want = s.mean() if metric == "cosine" else (s * s).mean()  # every valid row's objective
    assert km.objective_ == pytest.approx(want, rel=1e-6)


def test_fit_sample_of_every_row_is_the_full_fit():
    X, _ = blobs(500, 8, 4, seed=5, spread=0.3)
    full = KMeans(4, seed=1).fit(X)
    for m in (500, 10_000):
        km = KMeans(4, seed=1, fit_sample=m).fit(X)
        np.testing.assert_array_equal(km.labels_, full.labels_)
        np.testing.assert_array_equal(km.cluster_centers_, full.cluster_centers_)
        assert km.fit_sample_rows_ is None and km.objective_history_ == full.objective_history_


def test_fit_sample_names_a_bad_row_of_the_data_not_of_the_sample():
    X, _ = blobs(2000, 8, 3, seed=0)
    X[1500, 2] = np.nan
    with pytest.raises(InputError, match="row 1500 holds NaN"):  # in the sample or not
        KMeans(3, fit_sample=1990, seed=0).fit(X)
    with pytest.raises(InputError, match="fit_sample"):
        KMeans(3, fit_sample=2).fit(X)


def test_the_default_fits_every_row_up_to_the_bound_and_a_sample_above():
    from clusterclip.clustering.kmeans import (
        FULL_FIT_MAX_ROWS,
        SAMPLE_MIN_ROWS,
        SAMPLE_ROWS_PER_CLUSTER,
        default_fit_sample,
    )

    assert default_fit_sample(FULL_FIT_MAX_ROWS, 10) == 0  # every row
    assert default_fit_sample(FULL_FIT_MAX_ROWS + 1, 10) == SAMPLE_MIN_ROWS
    big_k = 4096
    assert default_fit_sample(10**7, big_k) == SAMPLE_ROWS_PER_CLUSTER * big_k
    assert default_fit_sample(SAMPLE_ROWS_PER_CLUSTER * big_k, big_k) == 0  # not fewer
