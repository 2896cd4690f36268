"""`clusterclip export --format mds`: MosaicML Streaming shards in schedule order.

Read back by the real ``streaming.StreamingDataset`` (and compared byte for byte with the real
``streaming.MDSWriter``) in the separate virtual environment that ``make test`` builds
(.venv-mds: mosaicml-streaming's pins would downgrade numpy and transformers here). Without
that environment those tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import test_export as shared
from _helpers import child_env, docs_recipe, run_cli

from clusterclip.cli import main
from clusterclip.corpus import Corpus
from clusterclip.export import export_schedule, iter_batches
from clusterclip.export import mds as mdsmod
from clusterclip.export.mds import read_mds_batches, write_mds
from clusterclip.sampling.sampler import ClusterClipSampler

pa = pytest.importorskip("pyarrow")
# test_export's inputs (the bundled corpus; three files of three kinds) and its checks
bundled, multi, workdir, _check = shared.bundled, shared.multi, shared.workdir, shared._check

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).with_name("_mds_streaming.py")


def _streaming_python() -> str:
    """The separate environment's python; skip without it, fail without it under CI."""
    py = Path(os.environ.get("CLUSTERCLIP_MDS_PYTHON") or ROOT / ".venv-mds" / "bin" / "python")
    if py.exists() and (py.parents[1] / ".ok").exists():
        return str(py)
    msg = f"no mosaicml-streaming environment at {py.parents[1]} (`make .venv-mds/.ok` builds it)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(msg)
    pytest.skip(msg)


def _run_streaming(spec: dict, tmp: Path, nproc: int = 1) -> None:
    """Run tests/_mds_streaming.py on ``spec`` in the separate environment (under torchrun)."""
    py = _streaming_python()
    (tmp / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    launch = ([py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(nproc)] if nproc > 1 else [py])
    env = child_env()
    env.pop("PYTHONPATH", None)  # nothing of ours in there: the reader sees only the files
    r = subprocess.run([*launch, str(SCRIPT), str(tmp / "spec.json")], capture_output=True,
                       text=True, env=env, timeout=600, cwd=tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _rows(folder):
    return pa.Table.from_batches(list(read_mds_batches(folder))).to_pydict()


# -- our reader: every test here runs without mosaicml-streaming ---------------------------

@pytest.mark.parametrize("data", ["bundled", "multi"])
def test_mds_round_trip_in_schedule_order(data, request, tmp_path):
    corpus, labels, schedule = request.getfixturevalue(data)
    out = tmp_path / "out"
    s = export_schedule(corpus, labels, schedule, out, fmt="mds", rows_per_shard=300,
                        block=128)
    _check(_rows(out), corpus, labels, schedule, np.arange(len(schedule)))
    index = json.loads((out / "index.json").read_text())
    n = len(schedule)
    assert [e["samples"] for e in index["shards"]] == [300] * (n // 300) + (
        [n % 300] if n % 300 else [])
    assert s["files"] == [e["raw_data"]["basename"] for e in index["shards"]] == [
        f"shard.{j:05d}.mds" for j in range(len(s["files"]))]
    assert all((out / e["raw_data"]["basename"]).stat().st_size == e["raw_data"]["bytes"]
               for e in index["shards"])
    assert s["rows"] == n and json.loads((out / "_export.json").read_text()) == s


def test_shards_close_before_the_size_limit(multi, tmp_path):
    corpus, labels, schedule = multi
    limit = 1 << 16
    names, rows, _ = write_mds(iter_batches(corpus, labels, schedule, block=64), tmp_path,
                               rows_per_shard=10**9, size_limit=limit)
    sizes = [(tmp_path / n).stat().st_size for n in names]
    assert rows == len(schedule) and len(names) > 3 and max(sizes) <= limit
    # each shard is full: the next shard's first row would not have fitted
    index = json.loads((tmp_path / "index.json").read_text())["shards"]
    for e, nxt in zip(index, index[1:], strict=False):
        data = (tmp_path / nxt["raw_data"]["basename"]).read_bytes()
        off = np.frombuffer(data, "<u4", count=2, offset=4)
        assert e["raw_data"]["bytes"] + 4 + int(off[1] - off[0]) > limit
    _check(_rows(tmp_path), corpus, labels, schedule, np.arange(len(schedule)))


def test_mds_bytes_are_deterministic(multi, tmp_path):
    corpus, labels, schedule = multi
    for name in ("x", "y"):
        export_schedule(corpus, labels, schedule, tmp_path / name, fmt="mds", rows_per_shard=170)
    a = sorted((tmp_path / "x").iterdir())
    assert [p.name for p in a] == [p.name for p in sorted((tmp_path / "y").iterdir())]
    for p in a:
        assert p.read_bytes() == (tmp_path / "y" / p.name).read_bytes(), p.name


def test_a_shard_that_does_not_read_back_is_not_moved_into_place(multi, tmp_path, monkeypatch):
    corpus, labels, schedule = multi
    real = mdsmod.write_mds

    def flip_one_text_byte(batches, directory, *a, **kw):
        got = real(batches, directory, *a, **kw)
        shard = directory / got[0][0]
        data = bytearray(shard.read_bytes())
        data[-1] = ord("#") if data[-1] != ord("#") else ord("%")  # the last row's text
        shard.write_bytes(bytes(data))
        return got

    monkeypatch.setattr(mdsmod, "write_mds", flip_one_text_byte)
    with pytest.raises(RuntimeError, match="does not read back as written"):
        export_schedule(corpus, labels, schedule, tmp_path / "out", fmt="mds")
    assert not (tmp_path / "out").exists()


def test_reader_names_a_damaged_shard(multi, tmp_path):
    corpus, labels, schedule = multi
    export_schedule(corpus, labels, schedule, tmp_path / "x", fmt="mds", rows_per_shard=200)
    shard = tmp_path / "x" / "shard.00001.mds"
    good = shard.read_bytes()
    first = int(np.frombuffer(good, "<u4", count=1, offset=4)[0])  # the first row's offset
    text_len = int.from_bytes(good[first + 4:first + 8], "little")
    longer = (text_len + 1).to_bytes(4, "little")
    damaged = {
        "does not match its entry": good[:-1],  # truncated
        "not an MDS shard": good[:4] + (1 << 31).to_bytes(4, "little") + good[8:],
        "row 0's column lengths do not add up": good[:first + 4] + longer + good[first + 8:],
        "rows 0..199: .*utf-?8": good[:-2] + b"\xff\xff",  # the last text, not UTF-8
    }
    for msg, data in damaged.items():
        shard.write_bytes(data)
        with pytest.raises(RuntimeError, match=f"(?i)shard.00001.mds: {msg}"):
            list(read_mds_batches(tmp_path / "x"))


def test_empty_share_writes_an_empty_index(multi, tmp_path):
    corpus, labels, schedule = multi
    s = export_schedule(corpus, labels, schedule[:2], tmp_path / "x", fmt="mds", rank=2,
                        world_size=3)
    assert s["rows"] == 0 and s["files"] == []
    assert json.loads((tmp_path / "x" / "index.json").read_text()) == {"shards": [],
                                                                      "version": 2}


def test_cli_mds_and_its_one_line_errors(workdir, tmp_path, capsys):
    out = tmp_path / "mds"
    assert main(["export", "--workdir", str(workdir), "--format", "mds", "--out", str(out),
                 "--rank", "1", "--world-size", "2", "--rows-per-shard", "100"]) == 0
    assert "exported 250 rows (rank 1 of 2" in capsys.readouterr().out
    corpus = Corpus.load(workdir / "corpus")
    _check(_rows(out), corpus, np.load(workdir / "labels.npy"),
           np.load(workdir / "schedule.npy"), np.arange(1, 500, 2))
    bad = tmp_path / "bad"
    for args, msg in ((["--rows-per-shard", "0"],
                       "error: --rows-per-shard: 0 is out of range (an integer in 1 .. "),
                      (["--rank", "3", "--world-size", "2"],
                       "--rank must be < --world-size 2, got 3")):
        assert main(["export", "--workdir", str(workdir), "--format", "mds", "--out", str(bad),
                     *args]) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
        assert not bad.exists()


def test_missing_extra_is_one_line_naming_it(workdir, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pyarrow.py").write_text("raise ImportError('not installed')\n")
    env = child_env(PYTHONPATH=f"{shadow}:{child_env().get('PYTHONPATH', '')}")
    out = tmp_path / "out"
    r = run_cli("export", "--workdir", workdir, "--format", "mds", "--out", out, env=env)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip() == ("clusterclip export: error: --format mds needs pyarrow; install "
                                "the `mds` extra (pip install 'clusterclip[mds]')")


# -- the real streaming.StreamingDataset and streaming.MDSWriter ---------------------------

@pytest.fixture(scope="module")
def streamed(tmp_path_factory, bundled, multi, workdir):
    """Exports of every kind, then one run in the separate environment that reads them all
    with StreamingDataset, writes the multi-file rows with MDSWriter and runs the docs'
    recipe. Returns (folder, what streaming read or wrote, inputs)."""
    d = tmp_path_factory.mktemp("mds")
    reads, inputs = [], {}

    def job(name, data, batch_size, num_workers=0, **kw):
        corpus, labels, schedule = data
        export_schedule(corpus, labels, schedule, d / name, fmt="mds", **kw)
        inputs[name] = data
        reads.append({"folder": str(d / name), "out": str(d / f"{name}.json"),
                      "batch_size": batch_size, "num_workers": num_workers})

    job("bundled", bundled, 8, rows_per_shard=400, block=128)
    job("multi", multi, 7, num_workers=2, rows_per_shard=120, block=97)  # 2 DataLoader workers
    for r in range(3):
        job(f"multi-rank{r}", multi, 16, rank=r, world_size=3, rows_per_shard=100, block=50)
    # the same rows written by streaming.MDSWriter, for a byte comparison
    corpus, labels, schedule = multi
    (d / "ours").mkdir()
    write_mds(iter_batches(corpus, labels, schedule, block=64), d / "ours", rows_per_shard=10**9,
              size_limit=1 << 16)
    (d / "rows.json").write_text(json.dumps(_rows(d / "ours")), encoding="utf-8")
    write = [{"rows": str(d / "rows.json"), "out": str(d / "theirs"), "size_limit": 1 << 16}]
    # the docs' recipe, run as written in a folder holding export/mds
    assert main(["export", "--workdir", str(workdir), "--format", "mds", "--out",
                 str(d / "recipe" / "export" / "mds"), "--rows-per-shard", "60"]) == 0
    recipe = {"code": docs_recipe("mds-streaming"), "cwd": str(d / "recipe"),
              "out": str(d / "recipe.json")}
    _run_streaming({"read": reads, "write": write, "recipe": recipe}, d)
    return d, inputs


def _read(d, name):
    return json.loads((d / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["bundled", "multi"])
def test_streaming_dataset_reads_the_schedule_in_order(streamed, name):
    d, inputs = streamed
    corpus, labels, schedule = inputs[name]
    got = _read(d, name)
    assert got["len"] == len(got["position"]) == len(schedule)
    _check(got, corpus, labels, schedule, np.arange(len(schedule)))
    bs = 8 if name == "bundled" else 7
    n = len(schedule)
    assert got["batches"] == [bs] * (n // bs) + ([n % bs] if n % bs else [])


def test_streaming_dataset_reads_each_ranks_share(streamed):
    d, inputs = streamed
    corpus, labels, schedule = inputs["multi-rank0"]
    world = 3
    for r in range(world):
        got = _read(d, f"multi-rank{r}")
        _check(got, corpus, labels, schedule, np.arange(r, world * 166, world))
        sampler = ClusterClipSampler(labels, len(schedule), seed=2, rank=r, world_size=world)
        assert got["doc_index"] == list(sampler)


def test_our_files_are_byte_identical_to_mds_writers(streamed):
    d, _ = streamed
    ours = sorted(p.name for p in (d / "ours").iterdir())
    assert len(ours) > 3 and ours == sorted(p.name for p in (d / "theirs").iterdir())
    for name in ours:
        assert (d / "ours" / name).read_bytes() == (d / "theirs" / name).read_bytes(), name


def test_docs_recipe_feeds_the_schedule_in_order(streamed, workdir):
    d, _ = streamed
    seen = json.loads((d / "recipe.json").read_text(encoding="utf-8"))
    schedule = np.load(workdir / "schedule.npy")
    assert seen == Corpus.load(workdir / "corpus").texts(schedule)


@pytest.mark.slow
def test_streaming_splits_a_whole_export_across_ranks_as_the_sampler(multi, tmp_path):
    """Every rank of a real torch.distributed job (gloo, 2 processes) reads the same export:
    StreamingDataset gives rank r positions r, r+W, ..., the sampler's (and export --rank's)."""
    corpus, labels, schedule = multi
    world = 2
    assert len(schedule) % world == 0  # else streaming repeats samples to even the ranks out
    export_schedule(corpus, labels, schedule, tmp_path / "all", fmt="mds", rows_per_shard=90)
    _run_streaming({"read": [{"folder": str(tmp_path / "all"), "batch_size": 8,
                              "out": str(tmp_path / "rank{rank}.json")}]}, tmp_path, nproc=world)
    for r in range(world):
        got = json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8"))
        _check(got, corpus, labels, schedule, np.arange(r, len(schedule), world))
        sampler = ClusterClipSampler(labels, len(schedule), seed=2, rank=r, world_size=world)
        assert got["doc_index"] == list(sampler)
