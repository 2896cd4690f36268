"""``clusterclip cluster --sweep``: the table recomputed independently, the stated rule for
the suggested K, the full fit with it, determinism and bad input."""

from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import silhouette_score
from test_cluster_cli import blob_embeddings

from clusterclip.cli import main
from clusterclip.clustering import KMeans
from clusterclip.clustering.sweep import SILHOUETTE_TOLERANCE, suggest_k

SWEEP = ["--clusters", "2,4,8", "--sweep", "--sweep-sample", "300", "--silhouette-sample",
         "200", "--iters", "30"]


@pytest.fixture
def workdir(tmp_path):
    """400 rows in 4 well-separated blobs; every 10th row has no text (not valid)."""
    W = tmp_path / "W"
    W.mkdir()
    np.save(W / "embeddings.npy", blob_embeddings())
    np.save(W / "valid.npy", np.arange(400) % 10 != 0)
    return W


def _table(W) -> list[dict]:
    with open(W / "sweep" / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def _reference_rule(rows):
    """The rule of docs/choosing-k.md, written out plainly."""
    rows = sorted(rows, key=lambda r: r["k"])
    sil = {r["k"]: r["silhouette"] for r in rows if r["silhouette"] is not None}
    if not sil:
        return rows[0]["k"]
    best = max(sil.values())
    ref = rows[0]["small_coherence"]
    passing = []
    for r in rows:
        close = r["silhouette"] is not None and best - r["silhouette"] <= SILHOUETTE_TOLERANCE
        coherent = ref is None or (r["small_coherence"] is not None
                                   and r["small_coherence"] >= ref)
        if close and coherent:
            passing.append(r["k"])
    return max(passing) if passing else min(k for k, s in sil.items() if s == best)


def test_sweep_table_plot_suggestion_and_full_fit(workdir, capsys):
    assert main(["cluster", "--workdir", str(workdir), *SWEEP]) == 0
    out = capsys.readouterr().out
    info = json.loads((workdir / "sweep" / "sweep.json").read_text())
    k = info["suggested_k"]
    assert k == _reference_rule(info["rows"])
    assert k == 4  # four well-separated blobs: the silhouette peaks there
    assert f"suggested K = {k}" in out and "rule: the suggested K is the largest K" in out
    md = (workdir / "sweep" / "sweep.md").read_text()
    assert info["rule"] in md and f"Suggested K = {k}" in md and "![" in md
    row = next(r for r in info["rows"] if r["k"] == k)  # sizes scaled from 300 to 360 rows
    assert f"the median cluster holds about {row['size_median'] * 360 / 300:,.0f} of" in md
    # The full fit used the suggested K.
    labels = np.load(workdir / "labels.npy")
    assert np.load(workdir / "centroids.npy").shape[0] == k
    assert set(np.unique(labels[labels >= 0])) == set(range(k))
    import matplotlib.image as mpimg

    png = mpimg.imread(workdir / "sweep" / "sweep.png")
    assert png.shape[0] > 300 and png.shape[1] > 400 and png.std() > 0.01
    # A second sweep is reused; --sweep-only fits nothing and prints the command.
    mtime = (workdir / "labels.npy").stat().st_mtime_ns
    assert main(["cluster", "--workdir", str(workdir), *SWEEP, "--sweep-only"]) == 0
    out = capsys.readouterr().out
    assert "reused" in out and f"--clusters {k}" in out
    assert (workdir / "labels.npy").stat().st_mtime_ns == mtime


def test_sweep_values_recomputed_independently(workdir):
    from clusterclip.stages.cluster import SweepOptions, sweep
    from clusterclip.workdir import Workdir

    info = sweep(Workdir(workdir, create=False), SweepOptions(
        ks=(2, 4, 8), sample_size=300, silhouette_sample=200, max_iter=30, progress=False))
    X = np.load(workdir / "embeddings.npy")
    valid = np.load(workdir / "valid.npy")
    # The documented sample: 300 of the valid rows, without replacement, seed 0, sorted.
    idx = np.sort(np.random.default_rng(0).choice(np.flatnonzero(valid), 300, replace=False))
    Xs = X[idx]
    k = 8
    km = KMeans(k, max_iter=30, seed=0).fit(Xs)
    lab = km.labels_
    sizes = np.bincount(lab, minlength=k)
    live = sorted((s, c) for c, s in enumerate(sizes) if s > 0)
    quart = [c for _, c in live[:math.ceil(len(live) / 4)]]
    coh = []
    for c in quart:
        m = Xs[lab == c].astype(np.float64)
        if len(m) >= 2:
            g = m @ m.T
            coh.append((g.sum() - np.trace(g)) / (len(m) * (len(m) - 1)))
    want = {"k": k, "objective": km.objective_,
            "silhouette": silhouette_score(Xs, lab, metric="cosine", sample_size=200,
                                           random_state=0),
            "size_min": sizes.min(), "size_median": np.median(sizes), "size_max": sizes.max(),
            "empty_clusters": int((sizes == 0).sum()),
            "smallest_decile_share": sum(s for s, _ in live[:math.ceil(len(live) / 10)]) / 300,
            "small_coherence": np.mean(coh)}
    row = next(r for r in _table(workdir) if int(r["k"]) == k)
    for name, value in want.items():
        assert float(row[name]) == pytest.approx(float(value), rel=1e-5, abs=1e-6), name
    got = next(r for r in info["rows"] if r["k"] == k)
    assert got["silhouette"] == pytest.approx(want["silhouette"], rel=1e-9)


def test_sweep_outputs_are_byte_identical(workdir, tmp_path):
    other = tmp_path / "W2"
    other.mkdir()
    for name in ("embeddings.npy", "valid.npy"):
        shutil.copy(workdir / name, other / name)
    for W in (workdir, other):
        assert main(["cluster", "--workdir", str(W), *SWEEP, "--sweep-only"]) == 0
    for name in ("sweep.csv", "sweep.md", "sweep.png"):
        a = (workdir / "sweep" / name).read_bytes()
        b = (other / "sweep" / name).read_bytes()
        if name == "sweep.md":  # names its own work directory in the command
            a, b = a.replace(bytes(workdir), b"W"), b.replace(bytes(other), b"W")
        assert a == b, name


rows_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.floats(-0.2, 0.6)),
              st.one_of(st.none(), st.floats(0.0, 1.0))),
    min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(rows_strategy)
def test_suggestion_follows_the_stated_rule(values):
    rows = [{"k": 2 ** (i + 1), "silhouette": s, "small_coherence": c}
            for i, (s, c) in enumerate(values)]
    k, reason = suggest_k(rows)
    assert k == _reference_rule(rows)
    assert reason


@pytest.mark.parametrize("args,pattern", [
    (["--clusters", "4,x", "--sweep"], "comma-separated list"),
    (["--clusters", "2,4"], "a list of K needs --sweep"),
    (["--clusters", "1,4", "--sweep"], "every K >= 2"),
    (["--clusters", "4,50", "--sweep", "--sweep-sample", "50"], "--clusters 50: not below "
                                                                 "the sample of 50 rows"),
    (["--clusters", "4", "--sweep-only"], "go with --sweep"),
    (["--clusters", "4", "--sweep", "--metric", "euclidean"], "cosine"),
    (["--clusters", "4", "--sweep", "--sweep-sample", "2"],
     "--sweep-sample: 2 is out of range (an integer in 3 .. "),
    (["--clusters", "4,0", "--sweep"], "--clusters: 0 is out of range (an integer in 1 .. "),
])
def test_bad_sweep_input_exits_2_with_one_line(workdir, capsys, args, pattern):
    try:
        rc = main(["cluster", "--workdir", str(workdir), *args])
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clusterclip cluster: error:") and "\n" not in err
    assert pattern in err, err
    assert not (workdir / "sweep").exists() and not (workdir / "labels.npy").exists()


def test_sweep_needs_a_workdir(tmp_path, capsys):
    np.save(tmp_path / "e.npy", blob_embeddings(n=50))
    assert main(["cluster", "--embeddings", str(tmp_path / "e.npy"), "--out",
                 str(tmp_path / "o"), "--clusters", "2,3", "--sweep"]) == 2
    assert "--sweep needs --workdir" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_sweep_refuses_a_users_sweep_folder(workdir, capsys):
    (workdir / "sweep").mkdir()
    (workdir / "sweep" / "notes.txt").write_text("mine")
    assert main(["cluster", "--workdir", str(workdir), *SWEEP]) == 2
    assert "was not written by" in capsys.readouterr().err
    assert (workdir / "sweep" / "notes.txt").read_text() == "mine"
    assert not (workdir / "labels.npy").exists()
