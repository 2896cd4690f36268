"""`clusterclip run` and `clusterclip demo`: every stage chained in one work directory."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from _helpers import check_same_code, code_fingerprint, torchrun_cli

from clusterclip import ClusterClipSampler
from clusterclip.cli import main


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, pydocs_path):
    """240 real documents, one without text and one malformed line."""
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        recs = [json.loads(line) for _, line in zip(range(240), src, strict=False)]
    recs[17]["text"] = "   "
    lines = [json.dumps(r) for r in recs]
    lines.insert(100, '{"text": "broken')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(corpus, workdir, *extra):
    return main(["run", str(corpus), "--workdir", str(workdir), "--clusters", "6",
                 "--embedder", "fast", "--skip-bad-lines", "--num-samples", "600", *extra])


def test_run_chains_every_stage_and_reuses_current_ones(small_corpus, tmp_path, capsys):
    w = tmp_path / "w"
    assert _run(small_corpus, w) == 0
    out = capsys.readouterr().out
    assert "240 documents, 1 without text" in out and "1 bad lines skipped" in out
    labels = np.load(w / "labels.npy")
    schedule = np.load(w / "schedule.npy")
    assert labels.shape == (240,) and labels[17] == -1 and (labels[labels != 17] >= -1).all()
    assert set(np.unique(labels[labels >= 0])) == set(range(6))
    assert schedule.dtype == np.int64 and schedule.shape == (600,)
    assert (labels[schedule] >= 0).all()  # excluded documents are never scheduled
    assert np.bincount(schedule, minlength=240).max() <= 4  # the default clip
    # the default strategy is paced at R = 4 (the setting of its evidence), and says why
    assert schedule.tolist() == list(ClusterClipSampler(labels, 600, strategy="paced", clip=4))
    assert "paced, clip 4, capacity 956" in out and "clip 4 by default: paced's default" in out
    manifest = json.loads((w / "manifest.json").read_text())
    assert manifest["stages"]["sample"]["params"]["strategy"] == "paced"
    assert {s: manifest["stages"][s]["status"] for s in ("embed", "cluster", "sample")} == {
        "embed": "done", "cluster": "done", "sample": "done"}

    # Unchanged inputs and parameters: every stage is reused, outputs untouched.
    mtimes = {p.name: p.stat().st_mtime_ns for p in w.glob("*.npy")}
    assert _run(small_corpus, w) == 0
    assert capsys.readouterr().out.count("(reused") == 3
    assert mtimes == {p.name: p.stat().st_mtime_ns for p in w.glob("*.npy")}

    # A changed downstream parameter re-runs only what depends on it.
    assert _run(small_corpus, w, "--clip", "3") == 0
    out = capsys.readouterr().out
    reps = np.bincount(np.load(w / "schedule.npy"), minlength=240).max()
    assert out.count("(reused") == 2 and f"max repetition {reps})" in out and reps <= 3

    # A changed input invalidates everything downstream of it.
    small_corpus.write_text(small_corpus.read_text() + '{"text": "one more document"}\n')
    try:
        assert _run(small_corpus, w) == 0
        assert "(reused" not in capsys.readouterr().out
        assert np.load(w / "labels.npy").shape == (241,)
    finally:
        small_corpus.write_text("".join(small_corpus.read_text().splitlines(True)[:-1]))


def test_run_is_byte_deterministic(small_corpus, tmp_path):
    for name in ("a", "b"):
        assert _run(small_corpus, tmp_path / name, "--seed", "3") == 0
    for f in ("embeddings.npy", "valid.npy", "labels.npy", "scores.npy", "centroids.npy",
              "schedule.npy"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_run_fits_k_means_on_a_sample_with_fit_sample(small_corpus, tmp_path, capsys):
    w = tmp_path / "w"
    assert _run(small_corpus, w, "--fit-sample", "3") == 2  # below K: before the embedding
    err = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(err) == 1 and "--fit-sample 3" in err[0], err
    assert not (w / "embeddings.npy").exists()
    assert _run(small_corpus, w, "--fit-sample", "100") == 0
    assert "fitted on a seeded sample of 100 rows" in capsys.readouterr().out
    stage = json.loads((w / "manifest.json").read_text())["stages"]["cluster"]
    assert stage["params"]["fit_sample"] == 100 and stage["info"]["fit_sample_rows"] == 100
    labels = np.load(w / "labels.npy")
    assert (labels[np.load(w / "valid.npy")] >= 0).all() and (w / "schedule.npy").exists()


def test_run_bad_input_exits_2_with_one_line_and_no_outputs(small_corpus, tmp_path, capsys):
    w = tmp_path / "w"
    assert main(["run", str(small_corpus), "--workdir", str(w), "--clusters", "6",
                 "--embedder", "fast"]) == 2  # the malformed line, without --skip-bad-lines
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(errors) == 1 and f"{small_corpus}:101: invalid JSON" in errors[0]
    assert not (w / "embeddings.npy").exists() and not (w / "labels.npy").exists()
    assert _run(small_corpus, w, "--clip", "0") == 2
    assert "clip" in capsys.readouterr().err
    assert not (w / "schedule.npy").exists()
    assert main(["run", str(small_corpus), "--workdir", str(w), "--clusters", "0"]) == 2


@pytest.mark.slow
def test_demo_runs_end_to_end_on_a_small_corpus(small_corpus, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--input", str(small_corpus), "--embedder", "fast",
                 "--clusters", "6", "--experiment", "none"]) == 2  # malformed line: exit 2
    capsys.readouterr()
    good = tmp_path / "good.jsonl"
    good.write_text("".join(ln for ln in small_corpus.read_text().splitlines(True)
                            if '"broken' not in ln))
    assert main(["demo", "--out", str(out), "--input", str(good), "--embedder", "fast",
                 "--clusters", "6", "--experiment", "none"]) == 0
    printed = capsys.readouterr().out
    assert "== clusterclip demo ==" in printed and "NMI" in printed
    assert (out / "report" / "report.md").exists()
    assert (out / "report" / "summary.json").exists()
    assert (out / "grouped" / "group.json").exists()
    assert np.load(out / "work" / "schedule.npy").shape == (3 * 239,)


@pytest.mark.slow
def test_clusters_of_the_real_corpus_agree_with_its_doc_folders(pydocs_path, tmp_path, capsys):
    """Our embedder + our K-means on all 4,096 pydocs sections: the clusters carry the topic
    signal of the documentation folders (NMI well above a shuffled baseline)."""
    from clusterclip.corpus import Corpus
    from clusterclip.report import normalized_mutual_info

    w = tmp_path / "w"
    assert main(["run", str(pydocs_path), "--workdir", str(w), "--clusters", "15",
                 "--embedder", "fast", "--n-init", "2"]) == 0
    labels = np.load(w / "labels.npy")
    folders = Corpus.load(w / "corpus").field_values("label")
    _, truth = np.unique(np.array(folders), return_inverse=True)
    nmi = normalized_mutual_info(labels, truth)
    rng = np.random.default_rng(0)
    shuffled = max(normalized_mutual_info(rng.permutation(labels), truth) for _ in range(5))
    assert nmi > 0.08 and nmi > 5 * shuffled, (nmi, shuffled)


@pytest.mark.slow
def test_a_child_process_never_runs_other_code_than_the_test(tmp_path):
    """The schedule is a pure function of the labels and the parameters, so equal labels and
    a different schedule.npy (torchrun vs one process, seen once in a 24-minute serial run)
    meant that the two sides ran different code: the child read the package from disk after
    it was edited, the test process kept what it had imported. A child is launched only
    while the code on disk is still the code the test process imported."""
    pkg = tmp_path / "pkg"
    (pkg / "sampling").mkdir(parents=True)
    (pkg / "sampling" / "clip.py").write_text('DEFAULT_COMMAND_STRATEGY = "paced"\n')
    (pkg / "notes.txt").write_text("not code\n")
    at_import = code_fingerprint(pkg)
    check_same_code(pkg, at_import)
    (pkg / "notes.txt").write_text("still not code\n")
    check_same_code(pkg, at_import)
    (pkg / "sampling" / "clip.py").write_text('DEFAULT_COMMAND_STRATEGY = "clusterclip"\n')
    with pytest.raises(pytest.fail.Exception, match="changed after this test process"):
        check_same_code(pkg, at_import)


def test_run_under_torchrun_equals_one_process(small_corpus, tmp_path):
    """Two real gloo processes chain every stage and write what one process writes."""
    good = tmp_path / "good.jsonl"
    good.write_text("".join(ln for ln in small_corpus.read_text().splitlines(True)
                            if '"broken' not in ln))
    args = ["run", str(good), "--clusters", "6", "--embedder", "fast", "--num-samples", "500"]
    proc = torchrun_cli(*args, "--workdir", tmp_path / "two", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("schedule:") == 1  # only rank 0 reports
    assert main([*args, "--workdir", str(tmp_path / "one")]) == 0
    for f in ("valid.npy", "labels.npy", "schedule.npy"):
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "two" / f).read_bytes(), f
    # Centroids: float64 cluster sums all-reduced across ranks are added in another
    # order than one process adds them (clustering/_passes.py), so the float32
    # centroids may differ in the last bit; labels and schedule above stay identical.
    c1, c2 = (np.load(tmp_path / d / "centroids.npy") for d in ("one", "two"))
    np.testing.assert_allclose(c1, c2, rtol=0, atol=1e-6)
    one, two = (np.load(tmp_path / d / "embeddings.npy") for d in ("one", "two"))
    np.testing.assert_allclose(one, two, atol=1e-6)
