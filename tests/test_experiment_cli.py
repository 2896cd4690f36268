"""`clusterclip experiment` end to end on a real (small) work directory, and bad input."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli import main
from clusterclip.experiment import METRICS


def _make_workdir(root: Path, pydocs_path: Path, per_label: int = 40) -> Path:
    """A work directory with a real corpus index and the pydocs folder as cluster label."""
    from clusterclip.corpus import Corpus

    rows = [json.loads(line) for line in gzip.open(pydocs_path, "rt", encoding="utf-8")]
    by_label: dict[str, list[dict]] = {}
    for r in rows:
        by_label.setdefault(r["label"], []).append(r)
    names = sorted(by_label)
    chosen = [r for name in names for r in by_label[name][:per_label]]
    src = root / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in chosen), encoding="utf-8")
    w = root / "w"
    w.mkdir()
    Corpus.scan([src], progress=False).save(w / "corpus")
    labels = np.array([names.index(r["label"]) for r in chosen], dtype=np.int32)
    np.save(w / "labels.npy", labels)
    return w


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, pydocs_path):
    return _make_workdir(tmp_path_factory.mktemp("exp"), pydocs_path)


def test_quick_experiment_reports_every_metric_and_learns(workdir, capsys):
    rc = main(["experiment", "--workdir", str(workdir), "--quick", "--seeds", "2",
               "--tokens", "24576", "--threads", "1", "--no-progress"])
    assert rc == 0
    out = workdir / "experiment"
    res = json.loads((out / "results.json").read_text())
    assert "timing" not in res  # the only unstable part stays out of the file
    assert res["config"]["strategies"] == ["random", "uniform", "clusterclip"]
    assert set(res["strategies"]) == {"random", "uniform", "clusterclip"}
    for name, entry in res["strategies"].items():
        for m in METRICS:
            v = entry["metrics"][m]
            assert len(v["values"]) == 2 and all(math.isfinite(x) for x in v["values"]), (name, m)
            assert v["mean"] == pytest.approx(np.mean(v["values"]))
        if name != "random":
            assert set(entry["vs_random"]) == set(METRICS)
        for run in entry["runs"]:
            # learns: well below the uniform-byte baseline, and below its own start
            assert run["val_micro"] < math.log(256)
            assert run["curve"][-1]["val_loss"] < run["curve"][0]["val_loss"]
            assert run["gap"] == pytest.approx(run["val_micro"] - run["train_micro"])
            assert run["schedule"]["max_repetition"] <= (4 if name == "clusterclip" else 10**9)
    d = res["data"]
    assert d["valid_docs"] > 0 and d["train_docs"] + d["valid_docs"] == d["documents"]
    for png in ("val_curves.png", "cluster_loss.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert "| clusterclip |" in md and "val_curves.png" in md
    printed = capsys.readouterr().out
    assert "clusterclip" in printed and "val micro" in printed


def test_balance_by_tokens_runs_and_is_recorded(workdir, tmp_path):
    from clusterclip.experiment import run_experiment

    res = run_experiment(workdir, strategies=("clusterclip",), seeds=1, quick=True,
                         balance_by="tokens", tokens=8192, threads=1, progress=False)
    assert res["config"]["balance_by"] == "tokens"
    w = np.array(res["data"]["cluster_weights"])
    assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    assert res["strategies"]["clusterclip"]["metrics"]["val_micro"]["mean"] < math.log(256)


def test_same_seed_gives_identical_results(workdir):
    from clusterclip.experiment import ExperimentConfig, compare_strategies
    from clusterclip.experiment.runner import _load_inputs

    labels, texts, _ = _load_inputs(workdir)
    cfg = ExperimentConfig.quick(strategies=("uniform",), seeds=1, tokens=4096)
    a = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    b = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    assert set(a.pop("timing")) == {"uniform/seed0"}
    b.pop("timing")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("args, message", [
    (["--strategies", "random,bogus"], "unknown strategy"),
    (["--clip", "0"], "--clip"),
    (["--seeds", "0"], "--seeds"),
])
def test_bad_options_exit_2_without_output(workdir, tmp_path, capsys, args, message):
    w = tmp_path / "w"
    w.mkdir()
    for name in ("labels.npy", "corpus"):
        (w / name).symlink_to(workdir / name)
    rc = main(["experiment", "--workdir", str(w), "--quick", "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1
    assert not (w / "experiment").exists()


def test_missing_workdir_or_labels_exit_2(tmp_path, capsys):
    assert main(["experiment", "--workdir", str(tmp_path / "nope"), "--quick"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["experiment", "--workdir", str(tmp_path), "--quick"]) == 2
    err = capsys.readouterr().err
    assert "labels.npy" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "experiment").exists()


def test_budget_over_clip_capacity_is_refused(workdir, tmp_path, capsys):
    # clip 1 can feed each training token once; ask for far more than the corpus holds
    rc = main(["experiment", "--workdir", str(workdir), "--quick", "--clip", "1",
               "--tokens", "10000000", "--strategies", "clusterclip", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "raise --clip" in err
