"""``clusterclip report`` end to end on a small work directory built from the bundled corpus
(``_report_workdir.py``: 600 Python-docs sections, clusters from their folders)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _report_workdir import build_report, make_report_workdir
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from clusterclip.cli import main
from clusterclip.report.markdown import escape_inline
from clusterclip.report.stats import window_edges
from clusterclip.sampling.clip import quartile_clusters

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, pydocs_path) -> Path:
    return make_report_workdir(tmp_path_factory.mktemp("report_wd"), pydocs_path)


def _sampler_schedule(labels, strategy, total, clip=4, seed=0):
    from clusterclip import ClusterClipSampler

    s = ClusterClipSampler(labels, num_samples=total, strategy=strategy, clip=clip, seed=seed)
    return np.concatenate(list(s.blocks(1 << 16))), s


def _report(args, capsys):
    rc = main(["report", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def full_report(workdir, tmp_path_factory) -> Path:
    """One CLI run with the default strategies and the label field, shared by several tests."""
    out = tmp_path_factory.mktemp("full") / "rep"
    assert main(["report", "--workdir", str(workdir), "--label-field", "label",
                 "--out", str(out)]) == 0
    return out


def _clusters_csv(report_dir: Path) -> dict[str, np.ndarray]:
    """clusters.csv as column name -> array of strings (text columns are quoted CSV)."""
    import csv

    with open(report_dir / "clusters.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {name: np.array([r[name] for r in rows]) for name in rows[0]}


def _summary(report_dir: Path) -> dict:
    return json.loads((report_dir / "summary.json").read_text(encoding="utf-8"))


def test_report_files_are_valid(full_report):
    import matplotlib.image as mpimg

    out = full_report
    summary = _summary(out)
    md = (out / "report.md").read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(images) == sorted(summary["figures"].values())
    for name in images:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC
        pixels = mpimg.imread(out / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
        assert pixels.std() > 0.01  # not a blank canvas
    # Per-cluster shares: every schedule distributes all of its samples.
    table = _clusters_csv(out)
    assert table["label"].tolist() == [str(k) for k in range(len(table["label"]))]  # cluster id
    for name in summary["schedules"]:
        assert table[f"{name}_share"].astype(float).sum() == pytest.approx(1.0, abs=1e-4)
    assert table["corpus_share"].astype(float).sum() == pytest.approx(1.0, abs=1e-4)
    from clusterclip.sampling.spec import DEFAULT_STRATEGIES

    assert sorted(summary["schedules"]) == sorted(DEFAULT_STRATEGIES)
    assert not list(out.parent.glob(".rep.*"))  # no temporary left behind


def test_generated_schedules_agree_with_the_sampler(workdir, tmp_path):
    labels = np.load(workdir / "labels.npy")
    eligible = labels >= 0
    from clusterclip.corpus import Corpus

    text_lengths = np.asarray(Corpus.load(workdir / "corpus").text_lengths, dtype=np.int64)
    from clusterclip.sampling.sampler import STRATEGIES

    # Every strategy the sampler has (the report is generic over them).
    summary = build_report(workdir, clip=3, seed=5, windows=20, out=tmp_path / "r",
                           strategies=STRATEGIES)
    assert list(summary["schedules"]) == list(STRATEGIES)
    total = 3 * int(eligible.sum())  # default budget: min(3, R) epochs
    assert summary["num_samples"] == total
    sizes = np.bincount(labels[eligible])
    tail, head = quartile_clusters(sizes)
    for strategy, s in summary["schedules"].items():
        sched, sampler = _sampler_schedule(labels, strategy, total, clip=3, seed=5)
        assert s["samples"] == sched.size == total
        if sampler.clip is not None:
            assert s["max_repetition"] <= sampler.clip
            assert s["parameters"]["clip"] == sampler.clip
        counts = np.bincount(sched, minlength=labels.size)
        assert s["repetition_histogram"] == np.bincount(counts[eligible]).tolist()
        lab = labels[sched]
        assert s["tail_quartile_share"] == pytest.approx(np.isin(lab, tail).mean(), rel=1e-5)
        assert s["head_quartile_share"] == pytest.approx(np.isin(lab, head).mean(), rel=1e-5)
        # In tokens (estimated: no tokenizer ran): each sample weighs its document's tokens.
        toks = -(-text_lengths[sched] // 4)
        assert s["tokens"] == toks.sum()
        assert s["tail_quartile_token_share"] == pytest.approx(
            toks[np.isin(lab, tail)].sum() / toks.sum(), rel=1e-5)
        edges = window_edges(total, 20)
        for w, share in enumerate(s["tail_quartile_share_per_window"]):
            want = np.isin(lab[edges[w]:edges[w + 1]], tail).mean()
            assert share == pytest.approx(want, abs=1e-5)
        for j in range(10):  # tenth j: positions j*T//10 .. (j+1)*T//10 - 1
            part = lab[j * total // 10:(j + 1) * total // 10]
            assert s["tail_quartile_share_per_tenth"][j] == pytest.approx(
                np.isin(part, tail).mean(), abs=1e-5)
            assert s["head_quartile_share_per_tenth"][j] == pytest.approx(
                np.isin(part, head).mean(), abs=1e-5)
        assert s["tail_quartile_share_late"] == pytest.approx(
            np.isin(lab[8 * total // 10:], tail).mean(), abs=1e-5)
    cc = summary["schedules"]["clusterclip"]
    assert cc["max_repetition"] <= 3
    pool = np.array(cc["clusters_in_pool"])
    assert pool[0] == (sizes > 0).sum() and (np.diff(pool) <= 0).all() and pool[-1] < pool[0]
    assert set(summary["schedules"]["random"]["clusters_in_pool"]) == {(sizes > 0).sum()}
    # ClusterClip starts balanced and drifts toward the large clusters.
    tail_series = cc["tail_quartile_share_per_window"]
    assert tail_series[0] > summary["corpus_tail_share"] > tail_series[-1]
    # report.md: the per-tenth table row and the computed sentence.
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    row = "| clusterclip | smallest 25% | " + " | ".join(
        f"{100 * x:.1f}%" for x in cc["tail_quartile_share_per_tenth"])
    assert row in md
    assert summary["tail_starvation"]["sentence"] in md


def test_given_schedule_pool_matches_clip_positions(workdir, tmp_path, capsys):
    # W/schedule.npy written as `clusterclip run` does: the report picks it up, and takes R
    # from the manifest's sample stage when --clip is not given.
    import shutil

    from clusterclip.workdir import Workdir

    wd = tmp_path / "wd"
    shutil.copytree(workdir, wd)
    labels = np.load(wd / "labels.npy")
    eligible = labels >= 0
    clip = 2
    total = 2 * int(eligible.sum())
    sched, sampler = _sampler_schedule(labels, "clusterclip", total, clip=clip, seed=1)
    np.save(wd / "schedule.npy", sched)
    w = Workdir(wd)
    w.begin("sample", "fp", {"strategy": "clusterclip", "clip": clip, "num_samples": total})
    w.finish("sample", "fp", ["schedule.npy"])
    rc, stdout, _ = _report(["--workdir", wd, "--strategies", "none", "--windows", 25], capsys)
    assert (f"budget T = {total:,} samples over {int(eligible.sum()):,} documents" in stdout
            and "the repetition counts below are at this budget, over the whole corpus" in stdout)
    assert (f"same budget T = {total:,} samples over the {int(eligible.sum()):,} eligible "
            "documents of the whole corpus" in (wd / "report" / "report.md").read_text())
    assert rc == 0
    assert str(wd / "report" / "report.md") in stdout and "recommended R" in stdout
    summary = _summary(wd / "report")
    assert f"late training: {summary['tail_starvation']['sentence']}" in stdout
    assert summary["tail_starvation"]["sentence"].startswith("schedule.npy: ")  # clip 2 starves
    assert list(summary["schedules"]) == ["schedule"]
    s = summary["schedules"]["schedule"]
    assert s["samples"] == total and s["source"] == "schedule.npy" and s["pool_clip"] == clip
    counts = np.bincount(sched, minlength=labels.size)
    assert s["repetition_histogram"] == np.bincount(counts[eligible]).tolist()
    # Independent pool: cluster k is out after the position of its (R * n_k)-th sample.
    sizes = np.bincount(labels[eligible])
    lab = labels[sched]
    out_at = np.full(sizes.size, np.inf)
    for k in range(sizes.size):
        pos = np.flatnonzero(lab == k)
        if pos.size >= clip * sizes[k]:
            out_at[k] = pos[clip * sizes[k] - 1]
    edges = window_edges(total, 25)
    want = [int(((sizes > 0) & ~(out_at < edges[w])).sum()) for w in range(25)]
    assert s["clusters_in_pool"] == want
    assert s["clip_events"]["clusters_clipped"] == sampler.summary()["clusters_clipped"]


def test_report_is_the_same_for_any_number_of_workers(workdir, full_report, tmp_path):
    """``--workers 2`` reads the corpus (terms and --label-field) in two processes: every
    file of the report has the bytes of the one-process report (600 documents: one by
    default)."""
    out = tmp_path / "rep"
    assert main(["report", "--workdir", str(workdir), "--label-field", "label",
                 "--out", str(out), "--workers", "2"]) == 0
    names = sorted(p.name for p in full_report.iterdir())
    assert names == sorted(p.name for p in out.iterdir())
    for name in names:
        assert (out / name).read_bytes() == (full_report / name).read_bytes(), name


def test_label_agreement_matches_sklearn(workdir, full_report):
    from clusterclip.corpus import Corpus

    summary = _summary(full_report)
    labels = np.load(workdir / "labels.npy")
    field = Corpus.load(workdir / "corpus").field_values("label")
    keep = labels >= 0
    classes = np.array(field, dtype=object)[keep].astype(str)
    got = summary["label_agreement"]
    assert got["documents"] == keep.sum() and got["skipped_missing"] == 0
    assert got["nmi"] == pytest.approx(normalized_mutual_info_score(classes, labels[keep]),
                                       rel=1e-5)
    assert got["ari"] == pytest.approx(adjusted_rand_score(classes, labels[keep]), rel=1e-5)
    assert 0.5 < got["nmi"] < 1.0  # the clusters differ from the folders, by construction


def test_examples_are_the_documents_nearest_the_centroid(workdir, full_report):
    summary = _summary(full_report)
    labels = np.load(workdir / "labels.npy")
    scores = np.load(workdir / "scores.npy")
    sizes = np.bincount(labels[labels >= 0])
    shown = {ex["label"]: ex for ex in summary["examples"]}
    assert int(np.argmax(sizes)) in shown and int(np.argmin(sizes)) in shown
    for k, ex in shown.items():
        members = np.flatnonzero(labels == k)
        best = members[np.argsort(-scores[members], kind="stable")][:len(ex["documents"])]
        assert [d["index"] for d in ex["documents"]] == best.tolist()
        for d in ex["documents"]:
            assert 0 < len(d["text"]) <= 200 and "\n" not in d["text"]
    md = (full_report / "report.md").read_text(encoding="utf-8")
    assert escape_inline(summary["examples"][0]["documents"][0]["text"]) in md


def test_same_input_gives_identical_bytes(workdir, full_report, tmp_path):
    again = tmp_path / "again"
    build_report(workdir, label_field="label", out=again)
    files = sorted(p.name for p in full_report.iterdir())
    assert files == sorted(p.name for p in again.iterdir())
    for f in files:
        assert (full_report / f).read_bytes() == (again / f).read_bytes(), f


def test_choose_clip_measured_agrees_with_expected(full_report):
    summary = _summary(full_report)
    choose = summary["choose_clip"]
    n, total = summary["eligible_documents"], summary["num_samples"]
    rows = [r for r in choose["rows"] if r["feasible"]]
    assert rows and all("measured_tail_share_late" in r for r in rows)
    for r in rows:
        assert abs(r["measured_tail_max_repetition"] - r["tail_max_repetition"]) <= 1
        assert r["measured_tail_share"] == pytest.approx(r["tail_share"], abs=0.02)
        assert r["measured_tail_share_late"] == pytest.approx(r["tail_share_late"], abs=0.05)
    md = (full_report / "report.md").read_text(encoding="utf-8")
    best = choose["recommended_clip"]
    if best is not None:
        assert f"**Recommended R = {best}.**" in md and best * n >= total
    else:
        assert "**No recommended R.**" in md
    assert choose["rule"] in md
    # the advice names the strategy it is for, beside the commands' default (paced)
    assert "This R is for `clusterclip`'s greedy course: `paced`, the commands' default" in md
    # Rows whose R cannot serve the budget are marked, and only those.
    for r in choose["rows"]:
        marked = f"| {r['clip']} | {r['capacity']:,} | **no: R x N < T** |" in md
        assert marked == (r["clip"] * n < total), r["clip"]
    assert any(r["clip"] * n < total for r in choose["rows"])  # the case is exercised


def _bad_schedule(workdir, tmp_path):
    labels = np.load(workdir / "labels.npy")
    sched = np.arange(50, dtype=np.int64)
    sched[40] = labels.size  # one past the last document
    np.save(tmp_path / "bad.npy", sched)
    return ["--workdir", workdir, "--schedule", tmp_path / "bad.npy"]


@pytest.mark.parametrize("case,pattern", [
    ("missing_workdir", "does not exist"),
    ("missing_labels", "empty_wd: not a work directory"),
    ("out_of_range", "position 40: document index 600"),
    ("unknown_field", "no document has this field"),
    ("over_capacity", "exceeds the ClusterClip capacity"),
    ("unknown_strategy", "unknown strategy"),
    ("negative_tail_floor", r"error: --tail-floor: -0\.5 is out of range \(a number in "
                            r"\[0, 100\]\)"),
])
def test_bad_input_exits_2_and_writes_nothing(case, pattern, workdir, tmp_path, capsys):
    if case == "missing_workdir":
        args = ["--workdir", tmp_path / "nope"]
    elif case == "missing_labels":
        empty = tmp_path / "empty_wd"
        empty.mkdir()
        args = ["--workdir", empty]
    elif case == "out_of_range":
        args = _bad_schedule(workdir, tmp_path)
    elif case == "unknown_field":
        args = ["--workdir", workdir, "--label-field", "no_such_field"]
    elif case == "over_capacity":
        args = ["--workdir", workdir, "--num-samples", 10**6, "--clip", 2]
    elif case == "negative_tail_floor":
        args = ["--workdir", workdir, "--tail-floor", "-0.5"]
    else:
        args = ["--workdir", workdir, "--strategies", "clusterclip,shuffled"]
    out = tmp_path / "report_out"
    rc, stdout, stderr = _report([*args, "--out", out], capsys)
    assert rc == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and re.search(pattern, lines[0]), stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report_out")]


def test_failed_run_keeps_the_previous_report(workdir, tmp_path, capsys):
    out = tmp_path / "report_out"
    out.mkdir()
    (out / "summary.json").write_text("{}\n", encoding="utf-8")
    rc, _, _ = _report([*_bad_schedule(workdir, tmp_path), "--out", out], capsys)
    assert rc == 2
    assert [p.name for p in out.iterdir()] == ["summary.json"]
    assert (out / "summary.json").read_text(encoding="utf-8") == "{}\n"


def test_report_links_the_experiment_iff_its_results_exist(workdir, tmp_path):
    import shutil

    wd = tmp_path / "wd"
    shutil.copytree(workdir, wd)
    link = re.compile(r"\[results\.md\]\(([^)]+)\)")

    def report_md(out):
        build_report(wd, num_samples=600, out=out)
        return (out / "report.md").read_text(encoding="utf-8")

    md = report_md(wd / "report")
    assert not link.search(md)
    assert f"`clusterclip experiment --workdir {wd}" in md
    (wd / "experiment").mkdir()
    md = report_md(wd / "report")
    assert not link.search(md)  # a directory without results.md is not an experiment
    (wd / "experiment" / "results.md").write_text("# results\n", encoding="utf-8")
    for out in (wd / "report", tmp_path / "elsewhere" / "rep"):
        md = report_md(out)
        targets = link.findall(md)
        assert targets and all(not Path(t).is_absolute() for t in targets)
        assert all((out / t).resolve() == (wd / "experiment" / "results.md").resolve()
                   for t in targets)
        assert "No experiment in this work directory" not in md
        assert _summary(out)["experiment"]["results_md"] == targets[0]
    assert link.findall(report_md(wd / "report"))[0] == "../experiment/results.md"
    # The conclusion closes the report with the computed late-training sentence.
    conclusion = md.split("## Conclusion", 1)[1]
    assert _summary(out)["tail_starvation"]["sentence"] in conclusion


def test_above_the_document_bound_repetition_says_it_is_a_sample(workdir, tmp_path,
                                                                 monkeypatch, capsys):
    """Above DOC_SAMPLE documents (here 200 of 600) a given schedule's per-document counts
    are every s-th document's: the summary, report.md and a note say so. The generated
    schedules come from the clusters they draw, without documents: their repetition is
    still every document's, exactly (their documents are drawn in passes), and the cluster
    strategies' shares per window, pool and clip events are the document sampler's; only
    random's shares per window come from a draw of its distribution (the note says so)."""
    from clusterclip.report import build, stats

    labels = np.load(workdir / "labels.npy")
    total = 2 * int((labels >= 0).sum()) + 37  # an unfinished pass in every cluster
    np.save(tmp_path / "given.npy", _sampler_schedule(labels, "clusterclip", total, seed=5)[0])
    exact = tmp_path / "exact"
    args = ["--workdir", workdir, "--map-sample", "0", "--schedule", tmp_path / "given.npy",
            "--strategies", "paced,uniform,clusterclip,random"]
    assert _report([*args, "--out", exact], capsys)[0] == 0
    monkeypatch.setattr(stats, "DOC_SAMPLE", 200)
    monkeypatch.setattr(build, "DOC_SAMPLE", 200)
    sampled = tmp_path / "sampled"
    assert _report([*args, "--out", sampled], capsys)[0] == 0
    a, b = _summary(exact), _summary(sampled)
    sa, sb = a["schedules"]["schedule"], b["schedules"]["schedule"]
    assert "repetition_sample" not in sa and 0 < sb["repetition_sample"] <= 200
    assert sb["max_repetition"] <= sa["max_repetition"]
    assert sum(sb["repetition_histogram"]) == sb["repetition_sample"]
    assert sa["tail_quartile_share_per_window"] == sb["tail_quartile_share_per_window"]
    per_document = ("repetition_histogram", "coverage", "max_repetition", "unique_documents")
    for name in ("paced", "uniform", "clusterclip", "random"):
        sa, sb = a["schedules"][name], b["schedules"][name]
        assert "repetition_sample" not in sb
        assert {k: sa[k] for k in per_document} == {k: sb[k] for k in per_document}, name
        if name != "random":
            for key in ("tail_quartile_share_per_window", "head_quartile_share_per_tenth",
                        "clusters_in_pool", "clip_events", "tail_quartile_share_late"):
                assert sa.get(key) == sb.get(key), (name, key)
    assert max(a["schedules"]["uniform"]["repetition_histogram"]) > 0
    md = (sampled / "report.md").read_text(encoding="utf-8")
    assert "`schedule`: counted on a systematic sample of" in md
    assert "systematic sample" not in (exact / "report.md").read_text(encoding="utf-8")
    assert any("on one document in 3 (200 of the 600" in n for n in b["notes"])
    assert any("multivariate hypergeometric" in n for n in b["notes"])
