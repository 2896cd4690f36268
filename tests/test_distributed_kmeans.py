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

    emb, valid_path, out, metric, init_kind = sys.argv[1:6]
    dist.init_process_group("gloo")
    X, start, stop = load_shard(emb)
    valid = np.load(valid_path)[start:stop]
    init = "k-means++"
    if init_kind == "far":
        init = np.vstack([np.load(emb)[:1], 100 * np.eye(16, dtype=np.float32)[:5]])
    km = KMeans(6, max_iter=15, metric=metric, seed=5, chunk_rows=97, init=init).fit(X, valid)
    labels, scores = gather_rows(km.labels_), gather_rows(km.scores_)
    if dist.get_rank() == 0:
        np.save(out + "/labels.npy", labels)
        np.save(out + "/scores.npy", scores)
        np.save(out + "/centroids.npy", km.cluster_centers_)
        np.save(out + "/history.npy", np.array(km.objective_history_))
        np.save(out + "/reseeds.npy", np.array(km.reseeds_ + [0]))
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


def run_two_ranks(tmp_path, metric: str, init_kind: str) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    res = torchrun(script, tmp_path / "emb.npy", tmp_path / "valid.npy", tmp_path, metric,
                   init_kind, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("metric, init_kind", [("cosine", "kmeans++"), ("euclidean", "kmeans++"),
                                                ("euclidean", "far")])
def test_two_gloo_processes_give_the_single_process_labels(tmp_path, metric, init_kind):
    X, valid = make_inputs(tmp_path)
    # "far": five centroids no row is near, so five clusters are re-seeded at once.
    # (Not identical centroids: exact ties are broken by float rounding in the matrix
    # product, which depends on the block shape.)
    init = "k-means++"
    if init_kind == "far":
        init = np.vstack([X[:1], 100 * np.eye(16, dtype=np.float32)[:5]])
    ref = KMeans(6, max_iter=15, metric=metric, seed=5, chunk_rows=1000, init=init).fit(X, valid)
    run_two_ranks(tmp_path, metric, init_kind)
    np.testing.assert_array_equal(np.load(tmp_path / "labels.npy"), ref.labels_)
    np.testing.assert_allclose(np.load(tmp_path / "scores.npy"), ref.scores_, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "centroids.npy"), ref.cluster_centers_,
                               atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "history.npy"), ref.objective_history_,
                               rtol=1e-9)
    if init_kind == "far":  # re-seeding picked the same rows across shards
        assert np.load(tmp_path / "reseeds.npy")[0] == 5 == ref.reseeds_[0]


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
