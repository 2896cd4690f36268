"""A user's files are sacred, stale results are refused (issue 8, cases 1-5 and 7).

Each case: exit 2 with one line, nothing of the user's deleted, nothing half-done
used. Lock and kill cases run real processes (``python -m clusterclip.cli``).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _helpers import child_env, cli_command, run_cli, torchrun_cli

from clusterclip.cli import main
from clusterclip.workdir import Workdir


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], err
    return lines[0]


def run_main(capsys, *args: str | Path) -> tuple[int, str]:
    capsys.readouterr()
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (hidden ones too)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def corpus(tmp_path, pydocs_path) -> Path:
    """60 short real documents in their own folder."""
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        recs = [json.loads(next(f)) for _ in range(60)]
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"][:300], "label": r["label"]}) + "\n"
                            for r in recs), encoding="utf-8")
    return path


def build(corpus: Path, w: Path) -> Path:
    assert main(["run", str(corpus), "--workdir", str(w), "--clusters", "3", "--embedder",
                 "fast", "--num-samples", "100"]) == 0
    return w


# -- case 1: --out never replaces what we did not write --------------------------------
def test_out_folders_are_replaced_only_when_ours(corpus, tmp_path, capsys, monkeypatch):
    w = build(corpus, tmp_path / "w")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "keep.txt").write_text("precious")
    before_w, before_data = tree(w), tree(corpus.parent)
    for cmd in ("group", "report"):
        rc, err = run_main(capsys, cmd, "--workdir", w, "--out", user)
        assert rc == 2 and "was not written by" in one_error(err) and "--overwrite" in err
        assert tree(user) == {"keep.txt": b"precious"}
        # the work directory, an input's folder, a parent of W or part of W: never, even
        # with --overwrite
        for bad, what in [(w, "is the work directory"), (corpus.parent, "contains the input"),
                          (tmp_path, "contains the work directory"),
                          (w / "corpus", "is part of the work directory")]:
            rc, err = run_main(capsys, cmd, "--workdir", w, "--out", bad, "--overwrite")
            assert rc == 2 and what in one_error(err), err
        with monkeypatch.context() as m:
            m.chdir(w / "corpus")
            for here in (".", ".."):
                rc, err = run_main(capsys, cmd, "--workdir", w, "--out", here, "--overwrite")
                assert rc == 2 and "is the current directory" in one_error(err)
        (tmp_path / "a_file").write_text("x")
        rc, err = run_main(capsys, cmd, "--workdir", w, "--out", tmp_path / "a_file")
        assert rc == 2 and "not a directory" in one_error(err)
        assert (tmp_path / "a_file").read_text() == "x"
    after_w = tree(w)
    assert {k: v for k, v in after_w.items() if k not in ("manifest.json", ".lock")} == {
        k: v for k, v in before_w.items() if k not in ("manifest.json", ".lock")}
    assert tree(corpus.parent) == before_data
    assert not [p for p in tmp_path.iterdir() if ".clusterclip-" in p.name]

    # An earlier output of the same command is replaced; another command's output only with
    # --overwrite (and then only what that command wrote); a user's folder never.
    for cmd in ("group", "report"):
        out = tmp_path / f"{cmd}_out"
        assert main([cmd, "--workdir", str(w), "--out", str(out)]) == 0
        assert main([cmd, "--workdir", str(w), "--out", str(out), "--no-schedule"]
                    if cmd == "report" else [cmd, "--workdir", str(w), "--out", str(out)]) == 0
        rc, err = run_main(capsys, "group" if cmd == "report" else "report", "--workdir", w,
                           "--out", out)  # another command's output is not ours to replace
        assert rc == 2 and "was not written by" in one_error(err)
        assert f"says `clusterclip {cmd}`" in err and "--overwrite" in err
    (tmp_path / "report_out" / "notes.txt").write_text("mine")
    assert main(["group", "--workdir", str(w), "--out", str(tmp_path / "report_out"),
                 "--overwrite"]) == 0
    names = {p.name for p in (tmp_path / "report_out").iterdir()}
    assert {"group.json", "notes.txt"} <= names and "report.md" not in names, names
    assert (tmp_path / "report_out" / "notes.txt").read_text() == "mine"
    rc, err = run_main(capsys, "group", "--workdir", w, "--out", user, "--overwrite")
    assert rc == 2 and "never replaces a folder clusterclip did not write" in one_error(err)
    assert tree(user) == {"keep.txt": b"precious"}


# -- case 2: a corpus or a folder of the user's inside the work directory ---------------
def test_run_never_deletes_a_users_folder_inside_the_workdir(corpus, tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "corpus").mkdir(parents=True)
    mine = proj / "corpus" / "docs.jsonl"
    mine.write_bytes(corpus.read_bytes())
    before = tree(proj)
    rc, err = run_main(capsys, "run", proj / "corpus", "--workdir", proj, "--clusters", "3",
                       "--embedder", "fast")
    assert rc == 2 and "is inside" in one_error(err) and str(proj / "corpus") in err
    assert {k: v for k, v in tree(proj).items() if k != ".lock"} == before

    proj2 = tmp_path / "proj2"
    (proj2 / "embed").mkdir(parents=True)
    (proj2 / "embed" / "notes.txt").write_text("mine")
    rc, err = run_main(capsys, "run", corpus, "--workdir", proj2, "--clusters", "3",
                       "--embedder", "fast")
    assert rc == 2 and "was not written by `clusterclip embed`" in one_error(err)
    assert {k for k in tree(proj2)} <= {"embed/notes.txt", ".lock"}
    assert (proj2 / "embed" / "notes.txt").read_text() == "mine"


# -- case 3: stale or half-written labels are refused downstream ------------------------
def test_labels_older_than_the_corpus_are_refused(corpus, tmp_path, capsys):
    w = build(corpus, tmp_path / "w")
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    rec = json.loads(lines[4])
    rec["text"] = "a different document about sockets and threads " * 3
    lines[4] = json.dumps(rec) + "\n"  # same number of documents: lengths still agree
    corpus.write_text("".join(lines), encoding="utf-8")
    assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", "fast"]) == 0
    labels_before = (w / "labels.npy").read_bytes()
    for args in (["group", "--workdir", w, "--out", tmp_path / "g"],
                 ["report", "--workdir", w],
                 ["sample", "--labels", w / "labels.npy", "--num-samples", "10", "--out",
                  tmp_path / "s.npy"],
                 ["experiment", "--workdir", w, "--quick", "--seeds", "1"]):
        rc, err = run_main(capsys, *args)
        line = one_error(err)
        assert rc == 2 and "`cluster` are stale" in line and "rerun `clusterclip cluster`" in line
    assert not (tmp_path / "g").exists() and not (tmp_path / "s.npy").exists()
    assert not (w / "report").exists() and not (w / "experiment").exists()
    assert (w / "labels.npy").read_bytes() == labels_before
    # the stale schedule too (from the sample stage of the first run)
    rc, err = run_main(capsys, "report", "--workdir", w, "--schedule", w / "schedule.npy")
    assert rc == 2 and "`cluster` are stale" in one_error(err)
    assert main(["cluster", "--workdir", str(w), "--clusters", "3"]) == 0
    assert main(["group", "--workdir", str(w), "--out", str(tmp_path / "g")]) == 0


@pytest.mark.slow
def test_a_cluster_run_killed_midway_is_refused_downstream(tmp_path, capsys):
    w = tmp_path / "w"
    w.mkdir()
    X = np.random.default_rng(0).standard_normal((20000, 32)).astype(np.float32)
    np.save(w / "embeddings.npy", X / np.linalg.norm(X, axis=1, keepdims=True))
    assert main(["cluster", "--workdir", str(w), "--clusters", "4", "--iters", "2"]) == 0
    old = {n: (w / n).read_bytes() for n in ("labels.npy", "scores.npy")}
    proc = subprocess.Popen(cli_command("cluster", "--workdir", w, "--clusters", "200",
                                        "--iters", "300", "--tol", "0", "--n-init", "50"),
                            env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        rec = Workdir(w).stage("cluster")
        if rec and rec["status"] == "running":
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert Workdir(w).stage("cluster")["status"] == "running", "the run ended before the kill"
    # the old labels are still there, but the manifest says they may be mixed with new ones
    assert {n: (w / n).read_bytes() for n in old} == old
    for args in (["report", "--workdir", w],
                 ["sample", "--labels", w / "labels.npy", "--num-samples", "10", "--out",
                  tmp_path / "s.npy"]):
        rc, err = run_main(capsys, *args)
        assert rc == 2 and "stage `cluster` did not finish" in one_error(err)
    assert not (w / "report").exists() and not (tmp_path / "s.npy").exists()


# -- case 4: an edit that keeps size and mtime ------------------------------------------
def test_same_size_edit_with_mtime_kept_is_seen(corpus, tmp_path):
    from _helpers import embed_into

    w = tmp_path / "w"
    first = embed_into(w, [str(corpus)], embedder="fast", shard_size=10, keep_shards=True,
                          progress=False)
    emb_before = np.load(w / "embeddings.npy")
    st = corpus.stat()
    data = corpus.read_bytes()
    i = data.index(b'"text": "') + len(b'"text": "')
    edited = data[:i] + (b"X" if data[i:i + 1] != b"X" else b"Y") + data[i + 1:]
    assert len(edited) == len(data)
    corpus.write_bytes(edited)
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))  # what `cp -p` / `touch -r` do
    assert corpus.stat().st_size == st.st_size and corpus.stat().st_mtime_ns == st.st_mtime_ns
    # as a killed run leaves it: stage running, the old shards and plan on disk
    wd = Workdir(w)
    wd.manifest["stages"]["embed"]["status"] = "running"
    wd.save()
    again = embed_into(w, [str(corpus)], embedder="fast", shard_size=10, progress=False)
    assert not again["skipped"] and again["shards_reused"] == 0
    assert again["shards_computed"] == first["shards_computed"]
    fresh = embed_into(tmp_path / "fresh", [str(corpus)], embedder="fast", progress=False)
    assert fresh["shards_reused"] == 0
    emb = np.load(w / "embeddings.npy")
    assert np.allclose(emb, np.load(tmp_path / "fresh" / "embeddings.npy"), atol=1e-6)
    assert not np.allclose(emb[0], emb_before[0])  # document 0 was edited


# -- case 5: one command at a time per work directory ------------------------------------
HOLDER = """
import sys, time
from clusterclip.workdir import Workdir
with Workdir(sys.argv[1]).locked("holder-of-the-lock --test"):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_second_command_is_refused_and_a_dead_holders_lock_taken_over(corpus, tmp_path,
                                                                         capsys):
    w = build(corpus, tmp_path / "w")
    manifest = (w / "manifest.json").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(w)], env=child_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = run_cli("cluster", "--workdir", w, "--clusters", "2")
        line = one_error(r.stderr)
        assert r.returncode == 2 and f"in use by pid {holder.pid}" in line
        assert "holder-of-the-lock --test" in line and "since 20" in line
        for args in (["embed", corpus, "--workdir", w, "--embedder", "fast"],
                     ["group", "--workdir", w, "--out", tmp_path / "g"],
                     ["report", "--workdir", w]):
            rc, err = run_main(capsys, *args)
            assert rc == 2 and f"in use by pid {holder.pid}" in one_error(err)
        assert (w / "manifest.json").read_bytes() == manifest
        assert not (tmp_path / "g").exists() and not (w / "report").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the dead holder's lock is taken over
    assert main(["cluster", "--workdir", str(w), "--clusters", "2"]) == 0
    assert Workdir(w).stage("cluster")["status"] == "done"


# -- case 7: what a killed run leaves behind is removed, and nothing else ---------------
KILLED = """
import os, signal, sys
from pathlib import Path
from clusterclip.storage.atomic import atomic_path
target = Path(sys.argv[1])
with atomic_path(target) as tmp:
    if sys.argv[2] == "dir":
        tmp.mkdir()
        (tmp / "part.jsonl").write_text("half")
    else:
        tmp.write_bytes(b"half written")
    print(tmp.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def leave_temporary(target: Path, kind: str = "file") -> Path:
    """A real process killed (-9) while writing ``target`` through atomic_path."""
    r = subprocess.run([sys.executable, "-c", KILLED, str(target), kind], env=child_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGKILL
    tmp = target.parent / r.stdout.strip()
    assert tmp.exists()
    return tmp


def test_temporaries_of_killed_runs_are_removed_and_nothing_else(corpus, tmp_path):
    w = build(corpus, tmp_path / "w")
    in_w = leave_temporary(w / "embeddings.npy")
    (w / "embed").mkdir()
    in_shards = leave_temporary(w / "embed" / "shard-00000.npy")
    big = leave_temporary(tmp_path / "big.npy")
    grouped = leave_temporary(tmp_path / "grouped", "dir")
    decoys = [w / ".labels.npy.mine.tmp",  # not our pattern
              w / f".labels.npy.clusterclip-{os.getpid()}-abc.tmp",  # a live process's
              tmp_path / ".big.npy.notes.tmp", tmp_path / "big.npy.clusterclip-1-x.tmp"]
    for d in decoys:
        d.write_text("user")

    assert main(["cluster", "--workdir", str(w), "--clusters", "2"]) == 0  # takes the lock
    assert not in_w.exists() and not in_shards.exists()
    assert main(["sample", "--labels", str(w / "labels.npy"), "--num-samples", "50", "--out",
                 str(tmp_path / "big.npy"), "--no-progress"]) == 0
    assert not big.exists() and np.load(tmp_path / "big.npy").shape == (50,)
    assert main(["group", "--workdir", str(w), "--out", str(tmp_path / "grouped")]) == 0
    assert not grouped.exists() and (tmp_path / "grouped" / "group.json").exists()
    assert all(d.read_text() == "user" for d in decoys)


@pytest.mark.slow
def test_under_torchrun_every_rank_exits_2_when_the_lock_is_held(corpus, tmp_path):
    w = build(corpus, tmp_path / "w")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(w)], env=child_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = torchrun_cli("cluster", "--workdir", w, "--clusters", "2", timeout=240)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert r.returncode != 0  # no rank waits forever on a rank that gave up
    assert r.stderr.count(f"in use by pid {holder.pid}") == 2, r.stderr[-3000:]
    assert Workdir(w).stage("cluster")["params"]["n_clusters"] == 3  # untouched


def test_the_report_is_a_cached_stage(corpus, tmp_path, capsys):
    w = build(corpus, tmp_path / "w")
    assert main(["report", "--workdir", str(w)]) == 0
    first = tree(w / "report")
    mtime = (w / "report" / "summary.json").stat().st_mtime_ns
    assert main(["report", "--workdir", str(w)]) == 0  # unchanged inputs and parameters
    assert (w / "report" / "summary.json").stat().st_mtime_ns == mtime
    assert Workdir(w).stage("report")["status"] == "done"
    assert main(["report", "--workdir", str(w), "--seed", "1"]) == 0  # a changed parameter
    assert (w / "report" / "summary.json").stat().st_mtime_ns != mtime
    assert main(["report", "--workdir", str(w)]) == 0
    assert tree(w / "report") == first  # same inputs, same bytes


def test_run_stage_records_running_before_the_work_and_done_after(corpus, tmp_path, capsys):
    w = Workdir(tmp_path / "toy")
    seen = []

    def work(run):
        rec = json.loads((w.root / "manifest.json").read_text())["stages"]["toy"]
        seen.append((rec["status"], rec["fingerprint"] == run.fingerprint))
        (w.root / "out.txt").write_text("x")
        return {"n": 1}

    r = w.run_stage("toy", key={"a": 1}, outputs=["out.txt"], work=work)
    assert seen == [("running", True)] and not r["skipped"]
    assert Workdir(w.root).stage("toy")["status"] == "done"
    r = w.run_stage("toy", key={"a": 1}, outputs=["out.txt"], work=work)
    assert r == {"n": 1, "skipped": True} and len(seen) == 1  # current: no work
    (w.root / "out.txt").write_text("edited")
    assert not w.run_stage("toy", key={"a": 1}, outputs=["out.txt"], work=work)["skipped"]

    # Killed between two writes: new labels.npy, old scores.npy. The stage stays `running`
    # and nothing downstream uses the mix.
    big = build(corpus, tmp_path / "w")
    wd = Workdir(big)

    def killed(run):
        np.save(big / "labels.npy", np.zeros(60, dtype=np.int32))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wd.run_stage("cluster", key={"other": 1}, reads=["embeddings.npy"],
                     outputs=["labels.npy", "scores.npy", "centroids.npy"], work=killed)
    for args in (["group", "--workdir", big, "--out", tmp_path / "g"],
                 ["report", "--workdir", big],
                 ["experiment", "--workdir", big, "--quick", "--seeds", "1"]):
        rc, err = run_main(capsys, *args)
        assert rc == 2 and "stage `cluster` did not finish" in one_error(err)
    assert not (tmp_path / "g").exists() and not (big / "report").exists()


# -- found by the audit of issue 8 -------------------------------------------------------
def test_only_commands_with_overwrite_suggest_it(corpus, tmp_path, capsys):
    w = build(corpus, tmp_path / "w")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "keep.txt").write_text("precious")
    for args in (["cluster", "--embeddings", w / "embeddings.npy", "--clusters", "2"],
                 ["assign", "--centroids", w / "centroids.npy", "--embeddings",
                  w / "embeddings.npy"]):
        rc, err = run_main(capsys, *args, "--out", user)
        assert rc == 2 and "was not written by" in one_error(err), err
        assert "--overwrite" not in err  # these commands have no --overwrite
    assert tree(user) == {"keep.txt": b"precious"}


def test_run_refuses_a_users_file_at_a_later_stages_name_before_embedding(corpus, tmp_path,
                                                                          capsys):
    for name, extra in (("labels.npy", []), ("schedule.npy", ["--num-samples", "50"])):
        w = tmp_path / name.replace(".", "_")
        w.mkdir()
        np.save(w / name, np.arange(5))
        before = tree(w)
        rc, err = run_main(capsys, "run", corpus, "--workdir", w, "--clusters", "3",
                           "--embedder", "fast", *extra)
        assert rc == 2 and f"{name}: exists and was not written by" in one_error(err), err
        # refused before any work: nothing embedded, the user's file untouched
        assert {k: v for k, v in tree(w).items() if k not in (".lock", "manifest.json")} == before


def test_sample_never_writes_over_its_input_a_workdir_part_or_a_users_file(corpus, tmp_path,
                                                                          capsys):
    w = build(corpus, tmp_path / "w")
    before_w, before_data = tree(w), tree(corpus.parent)
    mine = tmp_path / "notes.txt"
    mine.write_text("precious")
    for out, what in [(w / "labels.npy", "is the --labels input"),
                      (w / "schedule.npy", "is part of the work directory"),
                      (corpus, "is the input file"),
                      (mine, "not a file clusterclip writes")]:
        rc, err = run_main(capsys, "sample", "--labels", w / "labels.npy", "--num-samples", "10",
                           "--out", out)
        assert rc == 2 and what in one_error(err), err
    rc, err = run_main(capsys, "sample", "--labels", w / "labels.npy", "--num-samples", "10",
                       "--out", tmp_path / "s.npy", "--summary-json", w / "manifest.json")
    assert rc == 2 and "is part of the work directory" in one_error(err), err
    assert mine.read_text() == "precious" and tree(corpus.parent) == before_data
    assert {k: v for k, v in tree(w).items() if k != ".lock"} == {
        k: v for k, v in before_w.items() if k != ".lock"}
    # a user's file at --summary-json is kept (exit 2 before any work)
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}\n')
    rc, err = run_main(capsys, "sample", "--labels", w / "labels.npy", "--num-samples", "10",
                       "--out", tmp_path / "s2.npy", "--summary-json", notes)
    assert rc == 2 and "not a file clusterclip writes" in one_error(err), err
    assert notes.read_text() == '{"mine": 1}\n' and not (tmp_path / "s2.npy").exists()
    # an earlier schedule and summary of ours are replaced
    for _ in range(2):
        assert main(["sample", "--labels", str(w / "labels.npy"), "--num-samples", "10",
                     "--out", str(tmp_path / "s.npy"),
                     "--summary-json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["num_samples"] == 10


def test_sample_through_a_link_to_stale_labels_is_refused(corpus, tmp_path, capsys):
    w = build(corpus, tmp_path / "w")
    link = tmp_path / "link.npy"
    link.symlink_to(w / "labels.npy")
    corpus.write_text(corpus.read_text(encoding="utf-8").split("\n", 1)[1], encoding="utf-8")
    assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", "fast"]) == 0
    rc, err = run_main(capsys, "sample", "--labels", link, "--num-samples", "10",
                       "--out", tmp_path / "s.npy")
    assert rc == 2 and "stale" in one_error(err), err
    assert not (tmp_path / "s.npy").exists()


def test_demo_refuses_a_users_folder_before_any_work_even_with_overwrite(
        corpus, tmp_path, capsys):
    out = tmp_path / "demo"
    (out / "grouped").mkdir(parents=True)
    (out / "grouped" / "keep.txt").write_text("precious")
    args = ["demo", "--out", out, "--input", corpus, "--embedder", "fast", "--clusters", "3",
            "--experiment", "none"]
    rc, err = run_main(capsys, *args)
    assert rc == 2 and "was not written by `clusterclip group`" in one_error(err), err
    assert "--overwrite" in err
    assert not (out / "work" / "embeddings.npy").exists()  # refused before any work
    assert tree(out / "grouped") == {"keep.txt": b"precious"}
    rc, err = run_main(capsys, *args, "--overwrite")  # never a folder we did not write
    assert rc == 2 and "never replaces a folder clusterclip did not write" in one_error(err)
    assert not (out / "work" / "embeddings.npy").exists()
    assert tree(out / "grouped") == {"keep.txt": b"precious"}


def test_a_group_output_inside_an_input_folder_is_not_read_as_more_documents(corpus, tmp_path):
    w = tmp_path / "w"
    n = len(corpus.read_text(encoding="utf-8").splitlines())
    assert main(["run", str(corpus.parent), "--workdir", str(w), "--clusters", "3",
                 "--embedder", "fast"]) == 0
    assert main(["group", "--workdir", str(w), "--out", str(corpus.parent / "grouped")]) == 0
    assert main(["embed", str(corpus.parent), "--workdir", str(w), "--embedder", "fast"]) == 0
    assert np.load(w / "valid.npy").shape == (n,)  # the grouped copies were skipped
    assert main(["embed", str(corpus.parent / "grouped"), "--workdir", str(tmp_path / "w2"),
                 "--embedder", "fast"]) == 0  # given by name, it is read
    assert np.load(tmp_path / "w2" / "valid.npy").shape == (n,)


def test_a_users_file_named_like_the_lock_is_not_overwritten(corpus, tmp_path, capsys):
    w = tmp_path / "w"
    w.mkdir()
    (w / ".lock").write_text("my notes")
    rc, err = run_main(capsys, "run", corpus, "--workdir", w, "--clusters", "3", "--embedder",
                       "fast")
    assert rc == 2 and ".lock: exists and was not written by clusterclip" in one_error(err)
    assert tree(w) == {".lock": b"my notes"}


def test_a_users_embed_folder_made_after_embed_finished_is_never_removed(corpus, tmp_path,
                                                                         capsys):
    w = tmp_path / "w"
    assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", "fast"]) == 0
    assert not (w / "embed").exists()  # our shards are gone once merged
    (w / "embed").mkdir()
    (w / "embed" / "notes.txt").write_text("mine")
    # embed current (skipped): the folder is not ours to clean up
    assert main(["embed", str(corpus), "--workdir", str(w), "--embedder", "fast"]) == 0
    assert (w / "embed" / "notes.txt").read_text() == "mine"
    # the corpus changed: embed must run, and refuses the user's folder before any work
    corpus.write_text(corpus.read_text(encoding="utf-8").split("\n", 1)[1], encoding="utf-8")
    rc, err = run_main(capsys, "embed", corpus, "--workdir", w, "--embedder", "fast")
    assert rc == 2 and "embed: exists and was not written by" in one_error(err), err
    assert (w / "embed" / "notes.txt").read_text() == "mine"
