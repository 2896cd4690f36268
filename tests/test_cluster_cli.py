"""``clusterclip cluster`` / ``assign``: outputs, work-directory caching, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clusterclip.cli import main
from clusterclip.stages.cluster import ClusterOptions
from clusterclip.stages.cluster import run as cluster_run
from clusterclip.workdir import Workdir


def blob_embeddings(n: int = 400, d: int = 12, k: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mus = rng.standard_normal((k, d))
    X = mus[rng.integers(0, k, n)] + 0.3 * rng.standard_normal((n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def workdir(tmp_path):
    W = tmp_path / "W"
    W.mkdir()
    np.save(W / "embeddings.npy", blob_embeddings())
    valid = np.ones(400, dtype=bool)
    valid[::10] = False  # documents without text
    np.save(W / "valid.npy", valid)
    return W


def test_cluster_workdir_writes_outputs_and_manifest(workdir, capsys):
    assert main(["cluster", "--workdir", str(workdir), "--clusters", "4", "--iters", "20"]) == 0
    out = capsys.readouterr().out
    assert str(workdir / "labels.npy") in out and str(workdir / "centroids.npy") in out
    labels = np.load(workdir / "labels.npy")
    scores = np.load(workdir / "scores.npy")
    centroids = np.load(workdir / "centroids.npy")
    valid = np.load(workdir / "valid.npy")
    assert labels.dtype == np.int32 and labels.shape == (400,)
    assert scores.dtype == np.float32 and centroids.dtype == np.float32
    assert centroids.shape == (4, 12)
    assert np.all(labels[~valid] == -1) and np.all(labels[valid] >= 0)
    assert set(np.unique(labels[valid])) == {0, 1, 2, 3}
    info = json.loads((workdir / "manifest.json").read_text())["stages"]["cluster"]["info"]
    assert info["n_excluded"] == 40 and info["n_valid"] == 360
    assert len(info["objective_history"]) == info["n_iter"] + 1
    assert info["objective"] == pytest.approx(float(scores[valid].astype(np.float64).mean()))


def test_second_run_is_skipped_and_changed_parameters_rerun(workdir, capsys):
    args = ["cluster", "--workdir", str(workdir), "--clusters", "4"]
    assert main(args) == 0
    mtime = (workdir / "labels.npy").stat().st_mtime_ns
    capsys.readouterr()
    assert main(args) == 0
    assert "up to date" in capsys.readouterr().out
    assert (workdir / "labels.npy").stat().st_mtime_ns == mtime
    assert main(args + ["--seed", "7"]) == 0
    assert "up to date" not in capsys.readouterr().out
    assert (workdir / "labels.npy").stat().st_mtime_ns != mtime
    # A changed input invalidates the stage too.
    mtime = (workdir / "labels.npy").stat().st_mtime_ns
    np.save(workdir / "embeddings.npy", blob_embeddings(seed=1))
    assert main(args + ["--seed", "7"]) == 0
    assert "up to date" not in capsys.readouterr().out
    assert (workdir / "labels.npy").stat().st_mtime_ns != mtime


def test_fingerprint_follows_the_embed_stage(workdir):
    wd = Workdir(workdir)
    wd.begin("embed", "embed-v1", {})
    wd.finish("embed", "embed-v1", ["embeddings.npy"])
    k3 = ClusterOptions(n_clusters=3, progress=False)
    first = cluster_run(Workdir(workdir), k3)
    assert not first["skipped"]
    assert cluster_run(Workdir(workdir), k3)["skipped"]
    wd = Workdir(workdir)
    wd.begin("embed", "embed-v2", {})
    wd.finish("embed", "embed-v2", ["embeddings.npy"])
    assert not cluster_run(Workdir(workdir), k3)["skipped"]


def test_workdir_without_valid_mask_clusters_every_row(tmp_path):
    np.save(tmp_path / "embeddings.npy", blob_embeddings(n=50))
    res = cluster_run(Workdir(tmp_path), ClusterOptions(n_clusters=2, progress=False))
    assert res["n_excluded"] == 0 and np.all(np.load(tmp_path / "labels.npy") >= 0)


def test_bare_file_cluster_then_assign(tmp_path, capsys):
    E = tmp_path / "e.npy"
    np.save(E, blob_embeddings().astype(np.float16))
    out = tmp_path / "out"
    assert main(["cluster", "--embeddings", str(E), "--clusters", "4", "--out", str(out),
                 "--chunk-rows", "64"]) == 0
    assert str(out / "labels.npy") in capsys.readouterr().out
    labels = np.load(out / "labels.npy")
    assert main(["assign", "--centroids", str(out / "centroids.npy"), "--embeddings", str(E),
                 "--out", str(tmp_path / "assigned")]) == 0
    assert str(tmp_path / "assigned" / "labels.npy") in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(tmp_path / "assigned" / "labels.npy"), labels)
    np.testing.assert_allclose(np.load(tmp_path / "assigned" / "scores.npy"),
                               np.load(out / "scores.npy"), atol=1e-6)


def _write_bad(tmp_path, kind: str) -> list[str]:
    """Arguments of a `cluster --embeddings` call whose input is bad in one way."""
    E = tmp_path / "e.npy"
    X = blob_embeddings(n=30)
    extra: list[str] = []
    clusters = "3"
    if kind == "k0":
        clusters = "0"
    elif kind == "k_too_big":
        clusters = "31"
    elif kind == "missing":
        E = tmp_path / "nope.npy"
    elif kind == "one_dim":
        X = X[:, 0].copy()
    elif kind == "int_dtype":
        X = (X * 100).astype(np.int32)
    elif kind == "float64":
        X = X.astype(np.float64)
    elif kind == "nan":
        X[17, 3] = np.nan
    elif kind == "not_npy":
        E.write_text("hello")
    elif kind == "valid_shape":
        np.save(tmp_path / "v.npy", np.ones(29, dtype=bool))
        extra = ["--valid", str(tmp_path / "v.npy")]
    elif kind == "k_gt_valid":
        v = np.zeros(30, dtype=bool)
        v[:2] = True
        np.save(tmp_path / "v.npy", v)
        extra = ["--valid", str(tmp_path / "v.npy")]
    elif kind == "bad_iters":
        extra = ["--iters", "-1"]
    if kind not in ("missing", "not_npy"):
        np.save(E, X)
    return ["cluster", "--embeddings", str(E), "--clusters", clusters,
            "--out", str(tmp_path / "out"), *extra]


@pytest.mark.parametrize("kind", ["k0", "k_too_big", "missing", "one_dim", "int_dtype", "float64",
                                  "nan", "not_npy", "valid_shape", "k_gt_valid", "bad_iters"])
def test_bad_input_exits_2_with_one_line_and_no_outputs(tmp_path, capsys, kind):
    args = _write_bad(tmp_path, kind)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clusterclip cluster: error:") and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_bad_workdir_input_leaves_no_outputs(workdir, capsys):
    X = np.load(workdir / "embeddings.npy")
    X[5] = np.inf
    np.save(workdir / "embeddings.npy", X)
    assert main(["cluster", "--workdir", str(workdir), "--clusters", "3"]) == 2
    assert "row 5" in capsys.readouterr().err
    assert not any((workdir / n).exists() for n in ("labels.npy", "scores.npy", "centroids.npy"))
    assert main(["cluster", "--workdir", str(workdir / "missing"), "--clusters", "3"]) == 2


@pytest.mark.parametrize("bad", ["dims", "missing", "nan"])
def test_assign_bad_input_exits_2(tmp_path, capsys, bad):
    E = tmp_path / "e.npy"
    np.save(E, blob_embeddings(n=20))
    C = tmp_path / "c.npy"
    cents = blob_embeddings(n=3)
    if bad == "dims":
        cents = cents[:, :5].copy()
    if bad == "nan":
        cents[1, 1] = np.nan
    if bad != "missing":
        np.save(C, cents)
    assert main(["assign", "--centroids", str(C), "--embeddings", str(E),
                 "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_fit_sample_is_in_the_key_only_when_it_samples(workdir, capsys):
    def stage():
        return json.loads((workdir / "manifest.json").read_text())["stages"]["cluster"]

    args = ["cluster", "--workdir", str(workdir), "--clusters", "4"]
    assert main(args) == 0  # 360 valid rows: the default fits on every row, as before
    full = stage()
    assert "fit_sample" not in full["params"] and "fit_sample_rows" not in full["info"]
    assert main(args + ["--fit-sample", "0"]) == 0  # every row, said explicitly: the same
    assert stage()["fingerprint"] == full["fingerprint"]
    assert main(args + ["--fit-sample", "360"]) == 0  # as many as there are: the same
    assert stage()["fingerprint"] == full["fingerprint"]
    capsys.readouterr()
    assert main(args + ["--fit-sample", "120"]) == 0
    out = capsys.readouterr().out
    assert "fitted on a seeded sample of 120 rows" in out
    s = stage()
    assert s["params"]["fit_sample"] == 120 and s["fingerprint"] != full["fingerprint"]
    info = s["info"]
    assert info["fit_sample_rows"] == 120 and info["n_valid"] == 360
    scores, valid = np.load(workdir / "scores.npy"), np.load(workdir / "valid.npy")
    assert info["objective"] == pytest.approx(float(scores[valid].astype(np.float64).mean()))
    assert info["sample_objective"] == info["objective_history"][-1]


def test_fit_sample_below_k_exits_2(workdir, capsys):
    assert main(["cluster", "--workdir", str(workdir), "--clusters", "4",
                 "--fit-sample", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fit-sample 3" in err[0] and not (workdir / "labels.npy").exists()


def test_fit_sample_resolves_to_the_default_above_the_bound():
    from clusterclip.clustering.files import resolve_fit_sample
    from clusterclip.clustering.kmeans import FULL_FIT_MAX_ROWS, default_fit_sample
    from clusterclip.errors import InputError

    n = FULL_FIT_MAX_ROWS + 1
    assert resolve_fit_sample(None, n, 10) == default_fit_sample(n, 10) < n
    assert resolve_fit_sample(None, FULL_FIT_MAX_ROWS, 10) is None  # every row
    assert resolve_fit_sample(0, n, 10) is None and resolve_fit_sample(n, n, 10) is None
    assert resolve_fit_sample(None, n, 10, backend="faiss") is None  # faiss: every row
    for bad in (5, -1, True, 2.5):
        with pytest.raises(InputError, match="fit_sample"):
            resolve_fit_sample(bad, n, 10)
    with pytest.raises(InputError, match="backend torch only"):
        resolve_fit_sample(1000, n, 10, backend="faiss")
