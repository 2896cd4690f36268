"""Distributed K-means with real gloo processes equals the single-process run."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from _helpers import torchrun, torchrun_cli

from clusterclip.clustering import KMeans, load_shard, shard_bounds

WORKER = textwrap.dedent("""
    import sys
    import numpy as np
    import torch.distributed as dist
    from clusterclip.clustering import KMeans, gather_rows, load_shard

    # One process group runs every (metric, init) case: each writes to its own folder.
    emb, valid_path, out = sys.argv[1:4]
    dist.init_process_group("gloo")
    X, start, stop = load_shard(emb)
    valid = np.load(valid_path)[start:stop]
    for case in sys.argv[4:]:
        metric, init_kind = case.split(":")
        init = "k-means++"
        if init_kind == "far":
            init = np.vstack([np.load(emb)[:1], 100 * np.eye(16, dtype=np.float32)[:5]])
        fit_sample = 300 if init_kind == "sample" else None
        km = KMeans(6, max_iter=15, metric=metric, seed=5, chunk_rows=97, init=init,
                    fit_sample=fit_sample).fit(X, valid)
        labels, scores = gather_rows(km.labels_), gather_rows(km.scores_)
        if dist.get_rank() == 0:
            d = f"{out}/{metric}-{init_kind}"
            np.save(d + "/labels.npy", labels)
            np.save(d + "/scores.npy", scores)
            np.save(d + "/centroids.npy", km.cluster_centers_)
            np.save(d + "/history.npy", np.array(km.objective_history_))
            np.save(d + "/reseeds.npy", np.array(km.reseeds_ + [0]))
            np.save(d + "/objective.npy", np.array([km.objective_, km.sample_objective_ or 0]))
    dist.destroy_process_group()
""")


def make_inputs(tmp_path, n: int = 1001):
    rng = np.random.default_rng(0)
    mus = rng.standard_normal((6, 16))
    X = mus[rng.integers(0, 6, n)] + 0.6 * rng.standard_normal((n, 16))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    valid = rng.random(n) > 0.2
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "valid.npy", valid)
    return X, valid


# "sample": fitted on a seeded sample of 300 of the ~800 valid rows (fit_sample), then every
# row labelled; two ranks run every case, four ranks (one more launch) the sampled ones.
CASES = [("cosine", "kmeans++"), ("euclidean", "kmeans++"), ("euclidean", "far"),
         ("cosine", "sample"), ("euclidean", "sample")]
RANKS = {2: CASES, 4: [c for c in CASES if c[1] == "sample"]}


def _launch(root, nproc: int):
    X, valid = make_inputs(root)
    for metric, init_kind in RANKS[nproc]:
        (root / f"{metric}-{init_kind}").mkdir()
    script = root / "worker.py"
    script.write_text(WORKER)
    res = torchrun(script, root / "emb.npy", root / "valid.npy", root,
                   *(f"{m}:{i}" for m, i in RANKS[nproc]), nproc=nproc, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return root, X, valid


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Every case of CASES fitted by two real gloo processes (one torchrun launch)."""
    return _launch(tmp_path_factory.mktemp("kmeans2"), 2)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """The sampled cases fitted by four real gloo processes (one torchrun launch)."""
    return _launch(tmp_path_factory.mktemp("kmeans4"), 4)


@pytest.mark.parametrize("nproc, metric, init_kind",
                         [(n, m, i) for n, cases in RANKS.items() for m, i in cases])
def test_gloo_processes_give_the_single_process_labels(request, nproc, metric, init_kind):
    root, X, valid = request.getfixturevalue({2: "two_ranks", 4: "four_ranks"}[nproc])
    got = root / f"{metric}-{init_kind}"
    # "far": five centroids no row is near, so five clusters are re-seeded at once.
    # (Not identical centroids: exact ties are broken by float rounding in the matrix
    # product, which depends on the block shape.)
    init = "k-means++"
    if init_kind == "far":
        init = np.vstack([X[:1], 100 * np.eye(16, dtype=np.float32)[:5]])
    fit_sample = 300 if init_kind == "sample" else None
    ref = KMeans(6, max_iter=15, metric=metric, seed=5, chunk_rows=1000, init=init,
                 fit_sample=fit_sample).fit(X, valid)
    assert ref.fit_sample_rows_ == fit_sample
    np.testing.assert_allclose(np.load(got / "objective.npy"),
                               [ref.objective_, ref.sample_objective_ or 0], rtol=1e-9)
    np.testing.assert_array_equal(np.load(got / "labels.npy"), ref.labels_)
    np.testing.assert_allclose(np.load(got / "scores.npy"), ref.scores_, atol=1e-6)
    np.testing.assert_allclose(np.load(got / "centroids.npy"), ref.cluster_centers_,
                               atol=1e-6)
    np.testing.assert_allclose(np.load(got / "history.npy"), ref.objective_history_,
                               rtol=1e-9)
    if init_kind == "far":  # re-seeding picked the same rows across shards
        assert np.load(got / "reseeds.npy")[0] == 5 == ref.reseeds_[0]


def test_load_shard_splits_rows_contiguously(tmp_path):
    X = np.arange(23 * 2, dtype=np.float32).reshape(23, 2)
    np.save(tmp_path / "x.npy", X)
    parts = [load_shard(tmp_path / "x.npy", r, 3) for r in range(3)]
    assert [(s, e) for _, s, e in parts] == [shard_bounds(23, r, 3) for r in range(3)]
    np.testing.assert_array_equal(np.concatenate([np.asarray(p) for p, _, _ in parts]), X)


def test_cluster_cli_under_torchrun_equals_one_process(tmp_path):
    from clusterclip.cli import main

    make_inputs(tmp_path)
    args = ["cluster", "--embeddings", str(tmp_path / "emb.npy"), "--valid",
            str(tmp_path / "valid.npy"), "--clusters", "6", "--seed", "5", "--chunk-rows", "97"]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    res = torchrun_cli(*args, "--out", tmp_path / "two", timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("labels:") == 1  # only rank 0 reports
    for name in ("labels.npy", "scores.npy", "centroids.npy"):
        a, b = np.load(tmp_path / "one" / name), np.load(tmp_path / "two" / name)
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, atol=1e-6)
