"""Hostile inputs (issue 8): each is refused with one line naming the file or value, exit
code 2 and nothing written, or (where nothing is wrong with the data) handled without loss.

CLI cases run the real command line in a subprocess, as a user would.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _helpers import child_env, cli_command
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip import ClusterClipSampler
from clusterclip.cli import main
from clusterclip.errors import InputError
from clusterclip.limits import MAX_WEIGHT_SPAN


def cli(*args: str, cwd: Path | None = None, mem_gib: int | None = None,
        file_bytes: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:  # a regression then fails the test instead of exhausting the machine
        if mem_gib is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mem_gib << 30, mem_gib << 30))
        if file_bytes is not None:  # a full disk, as a writer sees it: EFBIG past this size
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    proc = subprocess.run(cli_command(*args), capture_output=True, cwd=cwd, env=child_env(),
                          timeout=600, preexec_fn=limit)
    # not run_cli: text mode would turn a progress bar's "\r" into a line break
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                       proc.stderr.decode())


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """Exit code 2 and exactly one visible stderr line (progress bars redraw with \\r)."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    visible = [ln.rsplit("\r", 1)[-1] for ln in proc.stderr.split("\n")]
    visible = [ln for ln in visible if ln.strip()]
    assert len(visible) == 1, proc.stderr
    assert ": error: " in visible[0]
    return visible[0]


def write_jsonl(path: Path, records: list[dict] | list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def small_corpus(path: Path, n: int = 24) -> Path:
    return write_jsonl(path, [{"text": f"document {i} on topic {i % 3}: " + "word " * (i % 5)}
                              for i in range(n)])


# -- case 6: tamper-evident sampler state ---------------------------------------------
def _sampler(labels=None, **kw):
    labels = np.arange(600) % 7 if labels is None else labels
    return ClusterClipSampler(labels, 2000, seed=3, **kw)


def test_state_round_trips_through_json_and_resumes_the_same_stream():
    s = _sampler()
    it = iter(s)
    [next(it) for _ in range(345)]
    state = json.loads(json.dumps(s.state_dict()))
    other = _sampler()
    other.load_state_dict(state)
    assert list(other) == list(it)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 1999), st.integers(0, 6), st.integers(0, 6), st.integers(1, 50),
       st.sampled_from(["uniform", "temperature", "clusterclip"]))
def test_counts_moved_between_clusters_are_refused(position, src, dst, amount, strategy):
    s = _sampler(strategy=strategy, alpha=0.5 if strategy != "uniform" else 0.0,
                 consumed_samples=position)
    state = s.state_dict()
    counts = list(state["counts"])
    amount = min(amount, counts[src])
    if src == dst or amount == 0:
        return
    counts[src] -= amount
    counts[dst] += amount  # the sum (the position) is kept
    fresh = _sampler(strategy=strategy, alpha=0.5 if strategy != "uniform" else 0.0)
    with pytest.raises(InputError, match="checksum"):
        fresh.load_state_dict(dict(state, counts=counts))


@pytest.mark.parametrize("field,value", [
    ("position", 1001), ("seed", 4), ("num_samples", 2001), ("clip", 5), ("alpha", 0.1),
    ("strategy", "uniform"), ("labels", "0" * 16), ("cluster_weights", "x"),
    ("checksum", "0" * 64), ("extra", 1)])
def test_any_edited_field_is_refused(field, value):
    state = _sampler(consumed_samples=1000).state_dict()
    with pytest.raises(InputError, match="checksum"):
        _sampler().load_state_dict({**state, field: value})


@pytest.mark.parametrize("counts,message", [
    ("1,2,3", "must be a list of 7 integers, got str"),
    ([1.0] * 7, "must be integers, got 1.0 at index 0"),
    (["1"] * 7, "must be integers, got '1' at index 0"),
    ([[1]] * 7, "must be integers, got [1] at index 0"),
    ([True] * 7, "must be integers, got True at index 0"),
    ([1] * 6, "must be a list of 7 integers, got 6"),
    (None, "must be a list of 7 integers, got NoneType"),
])
def test_counts_of_the_wrong_type_are_one_clear_error(counts, message):
    state = _sampler(consumed_samples=7).state_dict()
    with pytest.raises(InputError) as e:
        _sampler().load_state_dict({**state, "counts": counts})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_version_1_state_is_accepted_only_with_the_true_counts():
    state = _sampler(consumed_samples=900).state_dict()
    v1 = {k: v for k, v in state.items() if k != "checksum"}
    v1["version"] = 1
    s = _sampler()
    s.load_state_dict(v1)  # the true counts: verified by replay and accepted
    assert list(s) == list(_sampler(consumed_samples=900))
    moved = list(v1["counts"])
    moved[0], moved[1] = moved[0] - 1, moved[1] + 1
    with pytest.raises(InputError, match="version 1"):
        _sampler().load_state_dict({**v1, "counts": moved})


# -- case 8: one line and exit 2 instead of a traceback ---------------------------------
@pytest.mark.parametrize("embedder", ["fast", "minilm"])
def test_lone_surrogate_is_a_bad_line_naming_file_and_line(tmp_path, embedder):
    corpus = small_corpus(tmp_path / "c.jsonl")
    with open(corpus, "a", encoding="utf-8") as f:
        f.write('{"text": "broken \\ud800 text"}\n')
    w = tmp_path / "W"
    line = one_error_line(cli("embed", str(corpus), "--workdir", str(w), "--embedder", embedder,
                              "--no-progress"))
    assert f"{corpus}:25: lone surrogate \\ud800 in field 'text'" in line
    assert not (w / "embeddings.npy").exists() and not (w / "corpus").exists()


@pytest.mark.slow
@pytest.mark.parametrize("embedder", ["fast", "minilm"])
def test_lone_surrogate_is_skipped_and_counted_with_skip_bad_lines(tmp_path, embedder):
    corpus = small_corpus(tmp_path / "c.jsonl")
    with open(corpus, "a", encoding="utf-8") as f:
        f.write('{"text": "broken \\udfff", "id": "\\ud83d\\ude00 a valid pair"}\n')
        f.write('{"text": "emoji \\ud83d\\ude00 is fine"}\n')
    w = tmp_path / "W"
    proc = cli("embed", str(corpus), "--workdir", str(w), "--embedder", embedder,
               "--no-progress", "--skip-bad-lines")
    assert proc.returncode == 0, proc.stderr
    assert "bad lines skipped: 1" in proc.stdout and "documents:        25" in proc.stdout
    assert np.load(w / "embeddings.npy").shape[0] == 25


def test_alpha_whose_weights_underflow_is_refused(tmp_path):
    labels = tmp_path / "labels.npy"
    np.save(labels, np.repeat(np.arange(4), [50, 100, 150, 400]))
    out = tmp_path / "s.npy"
    line = one_error_line(cli("sample", "--labels", str(labels), "--strategy", "temperature",
                              "--alpha", "-200", "--num-samples", "100", "--out", str(out)))
    assert "alpha=-200.0 underflows" in line and "cluster 0 of 50 documents" in line
    assert not out.exists()


def test_alpha_weights_are_checked_in_the_sampler_for_clipped_pools_too():
    # one weight stays > 0 (n_k = 1), the rest underflow: once cluster 0 is clipped the
    # pool would hold only zero weights
    labels = np.r_[0, np.ones(500, int), np.full(500, 2)]
    with pytest.raises(InputError, match="underflows .* for cluster 1 of 500"):
        ClusterClipSampler(labels, 100, strategy="clusterclip", alpha=-200.0)
    with pytest.raises(InputError, match="overflows"):
        # each weight 10 ** 308 is finite, their sum is not
        ClusterClipSampler(np.arange(20) % 2, 10, strategy="temperature", alpha=308.0)


@pytest.mark.parametrize("command", ["sample", "group"])
def test_huge_cluster_id_is_refused_without_allocating(tmp_path, command):
    w = _grouping_workdir(tmp_path)
    labels = np.load(w / "labels.npy")
    labels[5] = 2**31 - 2
    np.save(w / "labels.npy", labels)
    out = tmp_path / "out"
    args = (["sample", "--labels", str(w / "labels.npy"), "--num-samples", "10",
             "--out", str(out), "--strategy", "uniform"] if command == "sample" else
            ["group", "--workdir", str(w), "--out", str(out)])
    line = one_error_line(cli(*args, mem_gib=3))
    assert f"{w / 'labels.npy'}: cluster id 2147483646 at index 5 is too large" in line
    assert not out.exists()


def test_symlink_loop_in_an_input_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    small_corpus(folder / "ok.jsonl")
    os.symlink("b.jsonl", folder / "a.jsonl")
    os.symlink("a.jsonl", folder / "b.jsonl")
    w = tmp_path / "W"
    line = one_error_line(cli("embed", str(folder), "--workdir", str(w), "--embedder", "fast",
                              "--no-progress"))
    assert f"{folder / 'a.jsonl'}: symbolic link to nothing readable (a loop of links)" in line
    assert not (w / "corpus").exists()


def _grouping_workdir(tmp_path: Path, records: list[dict] | None = None) -> Path:
    from clusterclip.corpus import Corpus
    from clusterclip.workdir import Workdir

    records = records or [{"text": f"doc {i}"} for i in range(20)]
    path = write_jsonl(tmp_path / "docs.jsonl", records)
    corpus = Corpus.scan([path], progress=False)
    w = Workdir(tmp_path / "W")
    corpus.save(w.path("corpus"))
    np.save(w.path("labels.npy"), (np.arange(len(records)) % 3).astype(np.int32))
    np.save(w.path("scores.npy"), np.linspace(0, 1, len(records), dtype=np.float32))
    return w.root


def test_group_keeps_orig_score_without_score_and_says_so(tmp_path):
    from clusterclip.grouping import original

    records = [{"text": f"doc {i}", "orig_score": i} for i in range(5)]
    records += [{"text": "both", "score": 0.5, "orig_score": 1, "label": "x"}]
    w = _grouping_workdir(tmp_path, records)
    out = tmp_path / "out"
    proc = cli("group", "--workdir", str(w), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "orig_score -> orig_orig_score in 6 documents" in proc.stdout
    assert "score -> orig_score in 1 documents" in proc.stdout
    got = {}
    for f in out.glob("cluster_*/data_*.jsonl"):
        for raw in f.read_text(encoding="utf-8").splitlines():
            i, rec = original(json.loads(raw))
            got[i] = rec
    assert [got[i] for i in range(len(records))] == records  # nothing lost or altered
    summary = json.loads((out / "group.json").read_text())
    assert summary["renamed_fields"] == {"label": 1, "orig_score": 6, "score": 1}


@pytest.mark.parametrize("target", ["file", "cwd", "parent"])
def test_group_out_a_file_or_the_current_folder_is_refused_before_any_work(tmp_path, target):
    w = _grouping_workdir(tmp_path)
    (tmp_path / "docs.jsonl").unlink()  # any work (verifying the inputs) would fail on this
    cwd = tmp_path / "here"
    cwd.mkdir()
    (cwd / "keep.txt").write_text("mine")
    out = {"file": str(cwd / "keep.txt"), "cwd": ".", "parent": ".."}[target]
    line = one_error_line(cli("group", "--workdir", str(w), "--out", out, cwd=cwd))
    assert f"--out {out}: " in line
    assert sorted(p.name for p in cwd.iterdir()) == ["keep.txt"]
    assert (cwd / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W", "here"]


@pytest.mark.parametrize("labels,expect", [
    (np.array(["a", "b"] * 10), "labels must be integers, got dtype <U1"),
    (np.linspace(0, 2, 20), "labels must be integers, got dtype float64"),
    (np.array([{"a": 1}] * 20, dtype=object), "cannot read labels as .npy"),
])
def test_group_refuses_labels_of_strings_floats_or_pickles(tmp_path, labels, expect):
    w = _grouping_workdir(tmp_path)
    np.save(w / "labels.npy", labels, allow_pickle=True)
    out = tmp_path / "out"
    line = one_error_line(cli("group", "--workdir", str(w), "--out", str(out)))
    assert f"{w / 'labels.npy'}: {expect}" in line
    assert not out.exists()


@pytest.mark.parametrize("seed,expect", [
    (str(2**64), f"{2**64} is out of range (an integer in 0 .. {2**63 - 1})"),
    ("-1", f"-1 is out of range (an integer in 0 .. {2**63 - 1})")])
def test_sample_seed_out_of_range(tmp_path, seed, expect):
    labels = tmp_path / "labels.npy"
    np.save(labels, np.arange(40) % 4)
    out = tmp_path / "s.npy"
    line = one_error_line(cli("sample", "--labels", str(labels), "--num-samples", "10",
                              "--seed", seed, "--out", str(out)))
    assert expect in line and not out.exists()


@pytest.mark.parametrize("extra,expect", [
    (["--clusters", "25"], "--clusters 25: more than the 24 documents with text"),
    (["--clusters", "3", "--num-samples", "10", "--seed", str(2**64)],
     f"error: --seed: {2**64} is out of range (an integer in 0 .. {2**63 - 1})"),
    (["--clusters", "3", "--backend", "faiss", "--seed", str(2**31)],
     "seed=2147483648 must be < 2**31 with backend faiss"),
    (["--clusters", "3", "--num-samples", "1000", "--clip", "4"],
     "--num-samples 1000 exceeds capacity 96 = --clip 4 x 24 documents with text; the "
     "smallest --clip that serves it is 42, the largest --num-samples that --clip 4 allows is "
     "96 (--strategy paced); nothing was embedded"),
])
def test_run_refuses_bad_options_before_embedding(tmp_path, extra, expect):
    corpus = small_corpus(tmp_path / "c.jsonl")
    w = tmp_path / "W"
    line = one_error_line(cli("run", str(corpus), "--workdir", str(w), "--embedder", "fast",
                              *extra))
    assert expect in line
    assert not (w / "embeddings.npy").exists() and not (w / "embed").exists()


# -- one source of truth ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["pickle", "object", "npz", "strings", "2d", "empty"])
def test_load_npy_refuses_what_is_not_one_array_of_the_right_kind(tmp_path, kind):
    import pickle

    from clusterclip.storage.arrays import load_npy

    path = tmp_path / "x.npy"
    if kind == "pickle":
        path.write_bytes(pickle.dumps([1, 2, 3]))
    elif kind == "object":
        np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
    elif kind == "npz":
        with open(path, "wb") as f:
            np.savez(f, a=np.arange(3))
    elif kind == "strings":
        np.save(path, np.array(["1", "2"]))
    elif kind == "2d":
        np.save(path, np.zeros((2, 2), np.int64))
    else:
        path.write_bytes(b"")
    with pytest.raises(InputError) as e:
        load_npy(path, "labels", kinds="iu", ndim=1)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_every_command_takes_the_sampler_strategy_names():
    from clusterclip.cli import build_parser
    from clusterclip.experiment.core import STRATEGIES as EXPERIMENT
    from clusterclip.report.build import STRATEGIES as REPORT
    from clusterclip.sampling import STRATEGIES

    assert EXPERIMENT is STRATEGIES and REPORT is STRATEGIES
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ("sample", "run"):
        strategy = next(a for a in sub.choices[name]._actions if a.dest == "strategy")
        assert tuple(strategy.choices) == STRATEGIES


# -- first-run friction -------------------------------------------------------------------
def test_help_shows_every_default():
    import argparse

    from clusterclip.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        text = parser.format_help()
        for a in parser._actions:
            if (a.option_strings and not a.required and a.default is not None
                    and a.default is not False and a.default != argparse.SUPPRESS):
                assert a.help and "default" in a.help, (name, a.option_strings)
        assert "(default: %" not in text  # every placeholder was filled in


def test_a_command_has_the_same_options_when_its_parser_alone_is_built():
    """main() builds only the invoked command's options; they are the whole parser's."""
    from clusterclip.cli import COMMANDS, build_parser

    def subs(parser):
        return next(a for a in parser._actions if a.dest == "command").choices

    full = subs(build_parser())
    for name in COMMANDS:
        alone = subs(build_parser(name))
        assert list(alone) == list(full)  # every command is still there
        assert alone[name].format_help() == full[name].format_help()
        assert [a.dest for a in alone[name]._actions] == [a.dest for a in full[name]._actions]


def test_the_progress_bar_moves_per_batch_not_per_shard():
    from clusterclip.embedding.static import StaticEmbedder

    emb = StaticEmbedder(batch_size=1024, progress=False)
    texts = [f"text number {i}" for i in range(2500)]
    emb.prepare(texts[:100])
    seen: list[int] = []
    vectors = emb.encode(texts, on_batch=seen.append)
    assert seen == [1024, 1024, 452]
    assert np.array_equal(vectors, emb.encode(texts))  # reporting does not change the vectors


@pytest.mark.parametrize("text", ['{"name": "my web app"}', "[1, 2]", '{"inputs": 3}'])
def test_a_manifest_json_of_the_users_is_one_clear_error_and_kept(tmp_path, capsys, text):
    w = tmp_path / "w"
    w.mkdir()
    (w / "manifest.json").write_text(text)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {i} words"}) + "\n" for i in range(9)))
    for args in (["run", str(corpus), "--workdir", str(w), "--clusters", "2", "--embedder",
                  "fast"], ["group", "--workdir", str(w), "--out", str(tmp_path / "g")]):
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not a clusterclip manifest" in err[0], err
    assert (w / "manifest.json").read_text() == text


# -- issue 16: OS errors on outputs are one line, exit 2, nothing half-written -------------
@pytest.mark.parametrize("args", [  # Python's writes, and pyarrow's C++ writer (errno in text)
    ["dedup", "--keep-one", "{out}", "--no-progress"],
    ["export", "--format", "parquet", "--out", "{out}"]])
def test_a_write_failing_midway_is_one_line_and_leaves_nothing(tmp_path, args):
    rng = np.random.default_rng(0)  # texts that do not compress: outputs over the limit
    w = _grouping_workdir(tmp_path, [{"text": rng.bytes(3000).hex()} for _ in range(40)])
    X = rng.standard_normal((40, 8)).astype(np.float32)
    np.save(w / "embeddings.npy", X / np.linalg.norm(X, axis=1, keepdims=True))
    np.save(w / "schedule.npy", np.arange(40).repeat(20))
    # export into folders it must make: they go with the failure
    out = tmp_path / "made" / "by" / "out" if args[0] == "export" else tmp_path / "out"
    before = {p.name for p in tmp_path.iterdir()}
    argv = [a.format(out=out) for a in args[:1] + ["--workdir", str(w)] + args[1:]]
    line = one_error_line(cli(*argv, file_bytes=64 << 10))
    assert "File too large (nothing half-written is left)" in line
    assert ("--out" in line or "--keep-one" in line or str(out.name) in line), line
    assert {p.name for p in tmp_path.iterdir()} == before  # no output, no temporary


@pytest.mark.parametrize("samples", [20_000, 2_000_000])  # cut at the flush; mid-stream
def test_sample_writing_cut_short_is_one_line_and_leaves_nothing(tmp_path, samples):
    """A write of ``sample --out`` cut short (a full disk) at the last write or in the
    writer thread mid-stream is one line naming --out, exit 2, and neither the file nor a
    temporary is left."""
    np.save(tmp_path / "labels.npy", np.arange(5000) % 7)
    before = {p.name for p in tmp_path.iterdir()}
    out = tmp_path / "s.npy"
    line = one_error_line(cli("sample", "--labels", str(tmp_path / "labels.npy"),
                              "--num-samples", str(samples), "--out", str(out),
                              "--no-progress", file_bytes=64 << 10))
    assert "--out" in line and "File too large (nothing half-written is left)" in line, line
    assert {p.name for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("command", ["group", "export", "report", "dedup", "sample",
                                     "sample-summary", "cluster", "assign", "demo"])
def test_an_output_below_a_regular_file_is_refused_before_any_work(tmp_path, capsys, command):
    w = _grouping_workdir(tmp_path)
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    bad = str(mine / "x")
    labels = str(w / "labels.npy")
    argv = {"group": ["group", "--workdir", str(w), "--out", bad],
            "export": ["export", "--workdir", str(w), "--format", "parquet", "--out", bad],
            "report": ["report", "--workdir", str(w), "--out", bad],
            "dedup": ["dedup", "--workdir", str(w), "--keep-one", bad],
            "sample": ["sample", "--labels", labels, "--num-samples", "5", "--out", bad],
            "sample-summary": ["sample", "--labels", labels, "--num-samples", "5", "--out",
                               str(tmp_path / "s.npy"), "--summary-json", bad],
            "cluster": ["cluster", "--embeddings", labels, "--clusters", "2", "--out", bad],
            "assign": ["assign", "--embeddings", labels, "--centroids", labels, "--out", bad],
            "demo": ["demo", "--out", bad, "--embedder", "fast"]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}: {mine} is a file, not a folder" in err[0], err
    assert mine.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_unwritable_place_is_refused_as_a_read_only_file_system(tmp_path):
    """Tests run as root, for whom permissions do not bind (so no chmod case), and no
    read-only mount can be made here without privileges: this runs only where one exists."""
    ro = next((m for m in _mount_points() if os.statvfs(m).f_flag & os.ST_RDONLY
               and not m.startswith("/mnt/sandboxing")), None)
    if ro is None:
        pytest.skip("no read-only file system mounted on this machine")
    labels = tmp_path / "labels.npy"
    np.save(labels, np.arange(20) % 2)
    line = one_error_line(cli("sample", "--labels", str(labels), "--num-samples", "5",
                              "--out", f"{ro}/s.npy"))
    assert "(read-only file system)" in line


def _mount_points() -> list[str]:
    with open("/proc/mounts", encoding="utf-8") as f:
        return [line.split()[1] for line in f]


def test_an_export_larger_than_the_free_space_is_refused_before_writing(tmp_path):
    """The free space of tmp_path's file system, plus a margin, in MDS rows (uncompressed,
    so the texts alone bound its size). The file size limit makes a regression fail on its
    first shard instead of filling the disk."""
    big = "x" * (8 << 20)
    w = _grouping_workdir(tmp_path, [{"text": big}, {"text": "small"}])
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    n = free // len(big) + 1000
    np.save(w / "schedule.npy", np.zeros(n, dtype=np.int64))
    out = tmp_path / "out"
    line = one_error_line(cli("export", "--workdir", str(w), "--format", "mds", "--out",
                              str(out), "--rows-per-shard", "1", file_bytes=1 << 20))
    assert f"--out {out}: the export needs at least {n * len(big):,} bytes" in line
    assert not out.exists()


def test_a_refusal_in_a_folder_that_is_not_a_work_directory_leaves_no_lock(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(6)))
    # run and embed make W a work directory: refused after the corpus scan (capacity,
    # K), they leave neither their manifest nor a folder they made
    run = ["run", str(docs), "--clusters", "2", "--embedder", "fast", "--num-samples", "99",
           "--clip", "2", "--workdir"]
    for args in (["group", "--workdir", str(mine), "--out", str(tmp_path / "g")],
                 ["report", "--workdir", str(mine)],
                 ["export", "--workdir", str(mine), "--format", "parquet", "--out",
                  str(tmp_path / "e")],
                 ["dedup", "--workdir", str(mine)],
                 ["experiment", "--workdir", str(mine), "--quick"],
                 ["search", "--workdir", str(mine), "--quick"],
                 [*run, str(mine)], [*run, str(tmp_path / "new")],
                 ["run", str(docs), "--clusters", "7", "--embedder", "fast", "--workdir",
                  str(mine)]):
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip().split("\r")[-1]  # after run's scan bar
        assert len(err.splitlines()) == 1 and "error:" in err, err
        assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"], args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl", "mine"]


# -- issue 25: every number is range-checked where it enters ------------------------------
#: 2**31, 2**53, 2**62, 2**63, 10**30, 10**400, inf, nan, -0, negative, and a float.
BOUNDARY = [str(2**31), str(2**53), str(2**62), str(2**63), str(10**30), str(10**400),
            "inf", "-inf", "nan", "-0", "-1", str(-2**63), "1e400", "2.5"]


def _numeric_options() -> list[tuple[str, str, object]]:
    """(command, option, its type) of every option that takes a number."""
    from clusterclip.cli import build_parser

    return [(name, max(a.option_strings, key=len), a.type)
            for name, parser in _commands(build_parser()) for a in parser._actions
            if a.option_strings and a.type is not None and hasattr(a.type, "bounds")]


def _commands(parser, prefix: str = ""):
    """(name, parser) of every command, subcommands (``search fit``) included."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                full = f"{prefix} {name}".strip()
                yield full, sub
                yield from _commands(sub, full)


def test_no_option_takes_a_bare_int_or_float():
    """Every number goes through one of clusterclip.cli._options' checked types."""
    from clusterclip.cli import build_parser

    bare = [(name, a.option_strings) for name, parser in _commands(build_parser())
            for a in parser._actions if a.type in (int, float)]
    assert not bare
    assert len(_numeric_options()) > 60


def _accepts(kind, text: str) -> bool:
    import argparse

    try:
        kind(text)
    except argparse.ArgumentTypeError:
        return False
    return True


_REQUIRED = {  # enough for each command to parse; nothing here exists
    "embed": ["C.jsonl", "--workdir", "W"], "cluster": ["--workdir", "W", "--clusters", "2"],
    "assign": ["--centroids", "c.npy", "--embeddings", "e.npy", "--out", "O"],
    "dedup": ["--workdir", "W"], "group": ["--workdir", "W", "--out", "O"],
    "sample": ["--labels", "l.npy", "--out", "s.npy"], "run": ["C.jsonl", "--workdir", "W"],
    "export": ["--workdir", "W", "--format", "parquet", "--out", "O"],
    "report": ["--workdir", "W"], "experiment": ["--workdir", "W"],
    "search": ["--workdir", "W"], "demo": ["--out", "O"],
    "search propose": ["--workdir", "W", "--runs", "2", "--out", "O"],
    "search fit": ["--ratios", "r.csv", "--metrics", "m.csv", "--objective", "x", "--out", "O"]}


@pytest.mark.parametrize("command,option,kind", _numeric_options(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_option_refuses_huge_and_boundary_values_in_one_line(
        tmp_path, capsys, monkeypatch, command, option, kind):
    """Each value outside the option's range (documented in --help): exit 2, one line naming
    the option and the value, before any work (nothing is written), whether argparse or the
    options refuse it; each inside it parses."""
    import time

    monkeypatch.chdir(tmp_path)
    lo, hi = kind.bounds
    for text in BOUNDARY:
        try:
            value = float(text)
        except ValueError:  # pragma: no cover - every BOUNDARY entry is a number
            value = None
        integral = kind.__name__ != "real"
        above = lo < value if kind.range_text.startswith("(") else lo <= value
        inside = (value is not None and value == value and above and value <= hi
                  and (not integral or (float(value).is_integer() and "e" not in text
                                        and "." not in text and "inf" not in text)))
        if inside:  # -0, 2**31 for a seed ...: accepted as the number it is
            assert _accepts(kind, text), (option, text)
            continue
        argv = [*command.split(), *_REQUIRED[command]]
        if command in ("cluster", "run") and option != "--clusters":
            argv += ["--clusters", "2"] if command == "run" else []
        if command == "sample" and option not in ("--num-samples", "--num-tokens"):
            argv += ["--num-samples", "5"]
        if option in ("--sweep-sample", "--silhouette-sample"):  # they go with --sweep
            argv += ["--sweep"]
        argv += [f"{option}={text}"]
        capsys.readouterr()
        start = time.monotonic()
        assert main(argv) == 2  # argparse's refusal, as an exit code
        assert time.monotonic() - start < 10
        err = capsys.readouterr().err.strip().splitlines()
        # argparse's refusal of what does not parse, or the options' of a range they
        # declare (clusterclip.limits.ranged), shown in the option before any work
        assert len(err) == 1 and (f"argument {option}:" in err[0]
                                  or f"error: {option}:" in err[0]), (option, text, err)
        assert "out of range" in err[0] or "expected" in err[0], err
        assert len(err[0]) < 300
        assert list(tmp_path.iterdir()) == []


def _mixture_json(weights: str = "1, 1, 1, 1", clip: str = "4") -> str:
    return (f'{{"format_version": 1, "weights": [{weights}], "clip": {clip}, '
            f'"timing": "paced"}}')


@pytest.mark.parametrize("field", ["weight", "clip"])
@pytest.mark.parametrize("text", [str(2**31), str(2**53), str(2**62), str(2**63),
                                  str(10**30), str(10**400), "9" * 5000, "1e400", "Infinity",
                                  "-Infinity", "NaN", "-0", "-1", "-0.5", "2.5", "true"])
def test_mixture_numbers_are_range_checked_by_the_reader(tmp_path, field, text):
    from clusterclip.limits import MAX_CLIP
    from clusterclip.sampling.mixture import read_mixture

    path = tmp_path / "m.json"
    path.write_text(_mixture_json(weights=f"{text}, 1, 1, 1") if field == "weight"
                    else _mixture_json(clip=text))
    try:
        value = json.loads(text) if len(text) < 4000 else None
    except ValueError:
        value = None
    ok_weight = (field == "weight" and isinstance(value, (int, float))
                 and not isinstance(value, bool) and 0 <= value < 1e308)
    ok_clip = (field == "clip" and isinstance(value, int) and not isinstance(value, bool)
               and 1 <= value <= MAX_CLIP)
    if ok_weight or ok_clip:
        read_mixture(path, 4)
        return
    with pytest.raises(InputError) as e:
        read_mixture(path, 4)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("command", ["sample", "run", "experiment"])
@pytest.mark.parametrize("mixture", [_mixture_json(weights=f"{10**400}, 1, 1"),
                                     _mixture_json(weights="1, 1, 1", clip=str(10**30)),
                                     _mixture_json(weights="1, 1, 1", clip=str(2**62)),
                                     _mixture_json(weights="1e308, 1e308, 1"),
                                     _mixture_json(weights="1e-300, 1e300, 1")],
                         ids=["weight-10**400", "clip-10**30", "clip-2**62", "sum-inf", "span"])
def test_a_mixture_of_huge_numbers_is_one_line_before_any_work(tmp_path, capsys, command,
                                                              mixture):
    w = _grouping_workdir(tmp_path)  # 20 documents in 3 clusters
    m = tmp_path / "m.json"
    m.write_text(mixture)
    out = tmp_path / "s.npy"
    argv = {"sample": ["sample", "--labels", str(w / "labels.npy"), "--num-samples", "30",
                       "--out", str(out), "--mixture", str(m), "--no-progress"],
            "run": ["run", str(tmp_path / "docs.jsonl"), "--workdir", str(tmp_path / "R"),
                    "--clusters", "3", "--embedder", "fast", "--num-samples", "30",
                    "--mixture", str(m)],
            "experiment": ["experiment", "--workdir", str(w), "--strategies", "mixture",
                           "--mixture", str(m), "--quick", "--no-progress"]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error: {m}: " in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (w / "experiment").exists()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), min_size=1, max_size=8),
       base=st.floats(5e-324, 1e308),
       spread=st.lists(st.floats(1.0, MAX_WEIGHT_SPAN), min_size=8, max_size=8),
       clip=st.integers(1, 2**20), share=st.floats(0.0, 1.0))
def test_paced_quotas_sum_to_t_within_caps_for_extreme_weights(sizes, base, spread, clip,
                                                                share):
    """Weights anywhere in float64's range (spanning at most MAX_WEIGHT_SPAN, as the
    samplers and the mixture reader require), clips up to the largest."""
    from clusterclip.sampling._engine import paced_quotas

    sizes = np.array(sizes, np.int64)
    cap = clip * sizes
    if cap.sum() == 0:
        return
    T = max(1, int(share * int(cap.sum())))
    with np.errstate(over="ignore"):
        w = np.minimum(base * np.array(spread[:sizes.size]), np.finfo(np.float64).max)
    q = paced_quotas(sizes, w, clip, T)
    assert int(q.sum()) == T and (q >= 0).all() and (q <= cap).all()


def test_paced_quotas_refuse_a_clip_whose_capacity_overflows():
    from clusterclip.sampling._engine import paced_quotas

    with pytest.raises(ValueError, match="out of range"):
        paced_quotas(np.array([3, 4]), None, 2**62, 10)
    for strategy in ("paced", "clusterclip"):  # the samplers refuse it first, by name
        with pytest.raises(InputError, match="clip must be <= 1048576, got 4611686018427387904"):
            ClusterClipSampler(np.arange(40) % 4, 10, strategy=strategy, clip=2**62)


# -- issue 25: damaged models, Ctrl-C inside torch's import, stages that end by an error --
def _damaged_minilm(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the bundled MiniLM folder whose model.safetensors holds only its first MiB
    (the other files linked, not copied)."""
    from clusterclip.embedding.transformer import bundled_minilm_path

    src, model = bundled_minilm_path(), tmp_path / "model"
    for f in src.rglob("*"):
        if f.is_file():
            (model / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f, model / f.relative_to(src))
    weights = model / "model.safetensors"
    weights.unlink()
    with open(src / "model.safetensors", "rb") as f:
        weights.write_bytes(f.read(1 << 20))
    return model, weights


@pytest.mark.parametrize("embedder", ["minilm", "hf", "fast"])
def test_a_truncated_model_is_one_line_naming_the_file(tmp_path, capsys, embedder):
    model, weights = _damaged_minilm(tmp_path)
    corpus = small_corpus(tmp_path / "c.jsonl")
    w = tmp_path / "W"
    capsys.readouterr()
    assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", embedder,
                 "--model", str(model), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error: {weights}: truncated: 1,048,576 bytes of the " in err[0]
    assert not w.exists()


def test_model2vec_given_a_sentence_transformers_folder_says_which_embedder_reads_it(
        tmp_path, capsys):
    from clusterclip.embedding.transformer import bundled_minilm_path

    corpus = small_corpus(tmp_path / "c.jsonl")
    capsys.readouterr()
    assert main(["embed", str(corpus), "--workdir", str(tmp_path / "W"), "--embedder",
                 "model2vec", "--model", str(bundled_minilm_path()), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and (f"{bundled_minilm_path()}: a sentence-transformers model, not "
                              f"a Model2Vec one") in err[0] and "--embedder minilm" in err[0]


def test_model_naming_a_file_says_it_is_a_file(tmp_path, capsys):
    corpus = small_corpus(tmp_path / "c.jsonl")
    capsys.readouterr()
    assert main(["embed", str(corpus), "--workdir", str(tmp_path / "W"), "--model",
                 str(corpus), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{corpus}: a file, not a model folder" in err and "\n" not in err


def test_ctrl_c_while_torch_imports_exits_130_and_records_the_stage_interrupted(tmp_path):
    """KeyboardInterrupt raised inside torch's own import (deterministically: by an import
    hook on a module torch imports last); the error path must not import torch again."""
    script = tmp_path / "interrupt.py"
    script.write_text(
        "import importlib.abc, sys\n"
        "class Stop(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'torch._meta_registrations':\n"
        "            sys.meta_path.remove(self)\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from clusterclip.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    corpus = small_corpus(tmp_path / "c.jsonl")
    w = tmp_path / "W"
    proc = subprocess.run([sys.executable, str(script), "embed", str(corpus), "--workdir",
                           str(w), "--embedder", "minilm", "--backend", "torch",
                           "--no-progress"], capture_output=True, text=True, env=child_env(),
                          timeout=300)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.strip() == "clusterclip embed: interrupted"
    from clusterclip.workdir import Workdir

    assert Workdir(w, create=False).stage("embed")["status"] == "interrupted"


def test_a_stage_that_fails_is_recorded_failed_not_running(tmp_path):
    from clusterclip.workdir import Workdir

    w = Workdir(tmp_path / "W")
    w.save()  # a work directory already (a new one that a refusal leaves empty is removed)

    def work(run):
        raise InputError("the work refused")

    with pytest.raises(InputError):
        w.run_stage("toy", key={"a": 1}, outputs=["out.txt"], work=work)
    rec = Workdir(w.root, create=False).stage("toy")
    assert rec["status"] == "failed" and rec["error"] == "the work refused"
    with pytest.raises(InputError, match="status 'failed'"):
        Workdir(w.root, create=False).require("toy")


# -- issue 25: first-run friction ---------------------------------------------------------
def test_every_command_takes_no_progress():
    from clusterclip.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert all("--no-progress" in p._option_string_actions for p in sub.choices.values())


def test_cluster_after_a_killed_embed_names_the_stage_to_rerun(tmp_path, capsys):
    from clusterclip.workdir import Workdir

    corpus = small_corpus(tmp_path / "c.jsonl")
    w = tmp_path / "W"
    assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", "fast",
                 "--no-progress"]) == 0
    wd = Workdir(w, create=False)  # as kill -9 mid-embed leaves it: running, no embeddings
    wd.manifest["stages"]["embed"]["status"] = "running"
    wd.save()
    (w / "embeddings.npy").unlink()
    capsys.readouterr()
    for args in (["--clusters", "2"], ["--clusters", "2,3", "--sweep"]):
        assert main(["cluster", "--workdir", str(w), *args, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert "stage `embed` did not finish (status 'running'" in err and "\n" not in err
        assert "rerun `clusterclip embed" in err


@pytest.mark.parametrize("command", [["group", "--out", "G"], ["cluster", "--clusters", "2"],
                                     ["report"], ["dedup"], ["export", "--format", "parquet",
                                                             "--out", "E"]])
def test_a_folder_that_is_not_a_work_directory_is_named_so(tmp_path, capsys, command):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    argv = [command[0], "--workdir", str(mine),
            *[str(tmp_path / a) if a in ("G", "E") else a for a in command[1:]]]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"{mine}: not a work directory" in err and "\n" not in err, err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("command", ["run", "cluster"])
def test_as_many_clusters_as_documents_is_refused(tmp_path, capsys, command):
    corpus = small_corpus(tmp_path / "c.jsonl")  # 24 documents
    w = tmp_path / "W"
    if command == "cluster":
        assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", "fast",
                     "--no-progress"]) == 0
        argv = ["cluster", "--workdir", str(w), "--clusters", "24"]
    else:
        argv = ["run", str(corpus), "--workdir", str(w), "--embedder", "fast",
                "--clusters", "24", "--no-progress"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().split("\r")[-1]
    assert "24: as many clusters as (one" in err and "\n" not in err, err
    assert not (w / "labels.npy").exists()


@pytest.mark.parametrize("damage", ["footer", "pages"])
def test_a_corrupt_parquet_file_is_one_line(tmp_path, capsys, damage):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(50)]}), path)
    data = bytearray(path.read_bytes())
    if damage == "footer":  # the footer's metadata cut short, its length and magic kept
        data = data[:-20] + b"\0" * 12 + b"PAR1"
    else:
        data[4:60] = b"\xff" * 56
    path.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["embed", str(path), "--workdir", str(tmp_path / "W"), "--embedder", "fast",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"clusterclip embed: error: {path}: ") and "\n" not in err, err


@pytest.mark.parametrize("variable", ["CLUSTERCLIP_CACHE", "XDG_CACHE_HOME", "HOME"])
def test_an_unusable_cache_folder_is_refused_first_naming_its_variable(tmp_path, capsys,
                                                                       monkeypatch, variable):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    monkeypatch.delenv("CLUSTERCLIP_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv(variable, str(afile / "c") if variable == "CLUSTERCLIP_CACHE"
                       else str(afile))
    corpus = small_corpus(tmp_path / "c.jsonl")
    capsys.readouterr()
    assert main(["embed", str(corpus), "--workdir", str(tmp_path / "W"), "--embedder", "fast",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"(from ${variable}): {afile} is a file, not a folder" in err and "\n" not in err
    assert not (tmp_path / "W").exists() and afile.read_text() == "mine"


def test_demo_names_text_field_as_its_option(tmp_path, capsys):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"body": f"doc {i}"} for i in range(9)])
    capsys.readouterr()
    assert main(["demo", "--input", str(corpus), "--out", str(tmp_path / "D"), "--embedder",
                 "fast", "--experiment", "none"]) == 2
    err = capsys.readouterr().err.strip().split("\r")[-1]
    assert "no document has a 'text' field" in err and err.endswith("with --text-field"), err


@pytest.mark.parametrize("count", [2**33, 2**62, 2**63 - 1])
def test_a_token_count_no_document_holds_is_refused(tmp_path, capsys, count):
    labels = tmp_path / "labels.npy"
    np.save(labels, np.arange(40) % 4)
    tokens = np.full(40, 10, np.int64)
    tokens[7] = count
    np.save(tmp_path / "t.npy", tokens)
    out = tmp_path / "s.npy"
    capsys.readouterr()
    assert main(["sample", "--labels", str(labels), "--num-tokens", "500", "--tokens",
                 str(tmp_path / "t.npy"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"token count {count:,} at index 7 is more than a document holds" in err
    assert "\n" not in err and not out.exists()


def test_search_with_a_huge_runs_is_refused_before_the_manifest_changes(tmp_path):
    from clusterclip.workdir import Workdir

    w = _grouping_workdir(tmp_path)
    Workdir(w).save()
    before = (w / "manifest.json").read_bytes()
    proc = cli("search", "--workdir", str(w), "--runs", "99999999999999999999999", "--quick")
    line = one_error_line(proc)
    # the search's options refuse it (their range), shown in the option, before any work
    assert "error: --runs: 99999999999999999999999 is out of range (an integer in 1 .. " in line
    assert (w / "manifest.json").read_bytes() == before and not (w / "search").exists()


# -- issue 35 ---------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["64k", "1m"])
def test_a_full_disk_leaves_the_stage_failed_not_running(tmp_path, pydocs_path, size):
    """``embed`` into a work directory on a small tmpfs (a private mount namespace, where
    ``unshare`` may make one) that fills up: one line, exit 2, and the manifest, if any,
    never says ``running`` (its record is written over the reserved room)."""
    import gzip
    import shutil
    import subprocess

    from _helpers import child_env, cli_command

    docs = tmp_path / "docs.jsonl"
    with gzip.open(pydocs_path) as f, open(docs, "wb") as g:
        shutil.copyfileobj(f, g)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    embed = " ".join(map(str, cli_command("embed", docs, "--workdir", mnt / "W", "--embedder",
                                          "fast", "--no-progress")))
    script = (f"mount -t tmpfs -o size={size} tmpfs {mnt} && {embed} 2>{tmp_path}/err; "
              f"echo $?; cat {mnt}/W/manifest.json 2>/dev/null; true")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                       env=child_env(), timeout=300)
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip(f"no tmpfs can be mounted here ({r.stderr.strip()[:80]})")
    rc, _, manifest = r.stdout.partition("\n")
    err = (tmp_path / "err").read_text().strip().splitlines()
    assert rc == "2" and len(err) == 1 and "(nothing half-written is left)" in err[0], err
    if manifest.strip():
        stage = json.loads(manifest)["stages"]["embed"]
        assert stage["status"] == "failed" and stage["error"], stage


def test_abbreviated_options_are_refused_on_every_parser(capsys):
    """``experiment --seed 5`` is not ``--seeds 5``; nor is any prefix of an option taken
    for it, on a command or a sub-command."""
    for argv, bad in ((["experiment", "--workdir", "W", "--seed", "5"], "--seed"),
                      (["sample", "--labels", "l.npy", "--num-sam", "5", "--out", "x"],
                       "--num-samples"),
                      (["search", "fit", "--ratio", "r.csv"], "--ratios")):
        try:
            rc = main(argv)
        except SystemExit as e:  # a sub-command's parser exits itself
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and bad in err and "error" in err, err


def test_clusters_csv_writes_formula_like_text_as_text(tmp_path, capsys):
    """A document starting ``=HYPERLINK(`` or ``@SUM(`` is the nearest text of a cluster:
    clusters.csv holds it with a leading ``'``, so no spreadsheet runs it."""
    import csv

    from clusterclip.workdir import Workdir

    starts = ['=HYPERLINK("http://x","y")', "@SUM(1)", "+1", "-1", "\tx"]
    records = [{"text": f"{starts[i % 5]} doc {i} alpha beta"} for i in range(30)]
    w = Workdir(_grouping_workdir(tmp_path, records))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 8)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    labels = np.load(w.path("labels.npy"))
    C = np.stack([X[labels == k].mean(0) for k in range(3)])
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    np.save(w.path("embeddings.npy"), X)
    np.save(w.path("centroids.npy"), C.astype(np.float32))
    np.save(w.path("scores.npy"), (X * C[labels]).sum(1).astype(np.float32))
    assert main(["report", "--workdir", str(w.root), "--no-schedule", "--strategies", "random",
                 "--no-progress"]) == 0
    capsys.readouterr()
    with open(w.path("report", "clusters.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    for row in rows:
        for cell in row.values():
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), row
        assert row["nearest_text"].startswith("'") and "doc" in row["nearest_text"], row


@pytest.mark.parametrize("text,say", [
    ('{"format_version": 1, "weights": [1, 1, 1], "weights": [1, 2, 3], "clip": 4, '
     '"timing": "paced"}', "duplicate key 'weights'"),
    ('{"format_version": 1, "weights": ' + "[" * 100000 + "]" * 100000 + "}",
     "JSON nested deeper than 64 levels"),
    ('{"format_version": 1, "weights": [1, 1, 1], "clip": 4, "timing": "paced", "x": '
     + "[" * 70 + "]" * 70 + "}", "JSON nested deeper than 64 levels")],
    ids=["duplicate", "deep-100000", "deep-70"])
def test_a_mixture_with_duplicate_keys_or_deep_nesting_is_one_line(tmp_path, capsys, text,
                                                                   say):
    w = _grouping_workdir(tmp_path)
    m = tmp_path / "m.json"
    m.write_text(text)
    out = tmp_path / "s.npy"
    assert main(["sample", "--labels", str(w / "labels.npy"), "--num-samples", "30", "--out",
                 str(out), "--mixture", str(m), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error: {m}: {say}" in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("which", ["manifest", "record"])
def test_a_deep_manifest_or_record_is_one_line_and_kept(tmp_path, capsys, which):
    """A work directory's manifest or an output folder's record nested 100,000 levels deep:
    one line naming it (no RecursionError), exit 2, the file kept as it was."""
    w = _grouping_workdir(tmp_path)
    g = tmp_path / "G"
    argv = ["group", "--workdir", str(w), "--out", str(g), "--no-progress"]
    assert main(argv) == 0
    path = w / "manifest.json" if which == "manifest" else g / ".clusterclip-output"
    deep = "[" * 100000 + "]" * 100000
    path.write_text(deep)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "JSON nested deeper than 64 levels" in err[0], err
    assert str(path if which == "manifest" else g) in err[0], err
    assert path.read_text() == deep


@pytest.mark.parametrize("argv", [["export", "--workdir", "{w}", "--format", "parquet",
                                   "--out", "{w}/newsub"],
                                  ["sample", "--labels", "{w}/labels.npy", "--num-samples",
                                   "10", "--out", "{w}/x.npy", "--no-progress"]])
def test_an_output_below_the_work_directory_is_refused(tmp_path, capsys, argv):
    from clusterclip.workdir import Workdir

    w = _grouping_workdir(tmp_path)
    Workdir(w).save()  # a work directory has its manifest
    np.save(w / "schedule.npy", np.arange(10, dtype=np.int64))
    before = sorted(p.name for p in w.iterdir())
    assert main([a.format(w=w) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is inside the work directory {w}" in err[0], err
    assert sorted(p.name for p in w.iterdir()) == before


@pytest.mark.parametrize("weights,say", [([1, 1, 1, 1], "one per cluster id: 3 numbers"),
                                         (["1", "1", "1"], "must be numbers"),
                                         ([True, 1, 1], "must be numbers"),
                                         ([1, None, 1], "must be numbers")])
def test_set_weights_refuses_what_a_mixture_file_refuses(weights, say):
    s = ClusterClipSampler(np.arange(30) % 3, 60, strategy="paced", clip=4)
    with pytest.raises(InputError, match=say):
        s.set_weights(weights)


def test_sample_draws_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    w = _grouping_workdir(tmp_path)
    proc = cli("sample", "--labels", str(w / "labels.npy"), "--num-samples", "100",
               "--out", str(tmp_path / "s.npy"))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_megatron_without_a_tokenizer_is_refused_before_megatron_loads(tmp_path):
    """The refusal comes before the writer's libraries are imported (they take seconds)."""
    import subprocess
    import sys

    from _helpers import child_env

    w = _grouping_workdir(tmp_path)
    np.save(w / "schedule.npy", np.arange(10, dtype=np.int64))
    code = ("import sys; from clusterclip.cli import main; "
            f"rc = main(['export', '--workdir', {str(w)!r}, '--format', 'megatron', "
            f"'--out', {str(tmp_path / 'E')!r}]); "
            "print(rc, sorted({m.split('.')[0] for m in sys.modules} & "
            "{'megatron', 'torch', 'transformers'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.stdout.strip() == "2 []", (r.stdout, r.stderr)
    assert "--format megatron needs --tokenizer" in r.stderr


def test_a_copied_work_directory_says_why_it_embeds_again(tmp_path, capsys):
    import shutil

    docs = small_corpus(tmp_path / "docs.jsonl")
    w = tmp_path / "W"
    argv = ["embed", str(docs), "--embedder", "fast", "--no-progress", "--workdir"]
    assert main([*argv, str(w)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(w, copy, copy_function=shutil.copy, ignore=shutil.ignore_patterns(".lock"))
    capsys.readouterr()
    assert main([*argv, str(copy)]) == 0
    err = capsys.readouterr().err
    assert f"embed: {copy}/" in err and "copied without `cp -p`" in err, err
    assert main([*argv, str(copy)]) == 0  # now current: nothing said
    assert "copied without" not in capsys.readouterr().err
