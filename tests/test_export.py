"""`clusterclip export`: the schedule's documents, in schedule order, read back by the real readers
(pyarrow.parquet, datasets.load_from_disk): equal order, equal texts, exact counts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _helpers import child_env, docs_recipe, run_cli

from clusterclip.cli import main
from clusterclip.corpus import Corpus
from clusterclip.export import export_schedule, read_parquet_batches
from clusterclip.export.core import _check_rows
from clusterclip.export.rows import _RowsHash
from clusterclip.sampling.sampler import ClusterClipSampler

datasets = pytest.importorskip("datasets")


def _labels(corpus, k, seed=0):
    labels = np.random.default_rng(seed).integers(0, k, size=len(corpus)).astype(np.int32)
    labels[~np.asarray(corpus.valid)] = -1
    return labels


def _schedule(labels, t, seed=0):
    return np.concatenate(list(ClusterClipSampler(labels, t, seed=seed).blocks()))


def _records(corpus):
    return dict(corpus.iter_records())


def _read_parquet(out):
    files = sorted(Path(out).glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pydict(), files


def _read_hf(out):
    ds = datasets.load_from_disk(str(out))
    return ds[:], ds


def _check(rows, corpus, labels, schedule, positions):
    """Rows are exactly `positions` of `schedule`, in order, with their documents."""
    recs = _records(corpus)
    docs = schedule[positions]
    assert rows["position"] == positions.tolist()
    assert rows["doc_index"] == docs.tolist()
    assert rows["label"] == labels[docs].tolist()
    assert rows["text"] == corpus.texts(docs)
    # the input's own `label` is kept as `orig_label` (`label` is the cluster id)
    want_fields = [{("orig_label" if k == "label" else k): v for k, v in recs[d].items()
                    if k != corpus.text_field} for d in docs.tolist()]
    assert not any("orig_label" in recs[d] for d in docs.tolist())
    assert [json.loads(f) for f in rows["fields"]] == want_fields


@pytest.fixture(scope="module")
def bundled(pydocs_path):
    corpus = Corpus.scan([pydocs_path], progress=False)
    labels = _labels(corpus, 7)
    return corpus, labels, _schedule(labels, 1500)


@pytest.fixture(scope="module")
def multi(tmp_path_factory, pydocs_path):
    """Three input files of three kinds (plain, gzip, Parquet) with extra fields and a gap."""
    d = tmp_path_factory.mktemp("multi")
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        recs = [json.loads(line) for _, line in zip(range(150), src, strict=False)]
    for i, r in enumerate(recs):
        r["n"] = i
        r["tags"] = ["a", "é"][: i % 3]
    recs[5]["text"] = ""  # no text: label -1, never scheduled
    with open(d / "a.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs[:50])
    with gzip.open(d / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs[50:100])
    pq.write_table(pa.Table.from_pylist([{"text": r["text"], "n": r["n"], "id": r["id"]}
                                         for r in recs[100:]]), d / "c.parquet")
    corpus = Corpus.scan([d / "a.jsonl", d / "b.jsonl.gz", d / "c.parquet"], progress=False)
    labels = _labels(corpus, 4, seed=1)
    assert labels[5] == -1
    return corpus, labels, _schedule(labels, 500, seed=2)


@pytest.mark.parametrize("data", ["bundled", "multi"])
def test_parquet_round_trip_in_schedule_order(data, request, tmp_path):
    corpus, labels, schedule = request.getfixturevalue(data)
    out = tmp_path / "out"
    s = export_schedule(corpus, labels, schedule, out, rows_per_shard=300, block=128,
                        row_group=100)
    rows, files = _read_parquet(out)
    _check(rows, corpus, labels, schedule, np.arange(len(schedule)))
    n = len(schedule)
    assert [pq.ParquetFile(f).metadata.num_rows for f in files] == (
        [300] * (n // 300) + ([n % 300] if n % 300 else []))
    assert [f.name for f in files] == s["files"] == [f"part-{j:05d}.parquet"
                                                    for j in range(len(files))]
    assert s["rows"] == n and json.loads((out / "_export.json").read_text()) == s


@pytest.mark.parametrize("data", ["bundled", "multi"])
def test_hf_round_trip_in_schedule_order(data, request, tmp_path):
    corpus, labels, schedule = request.getfixturevalue(data)
    out = tmp_path / "out"
    s = export_schedule(corpus, labels, schedule, out, fmt="hf", rows_per_shard=400, block=97)
    rows, ds = _read_hf(out)
    assert len(ds) == s["rows"] == len(schedule)
    assert ds.num_rows == len(schedule) and len(s["files"]) == -(-len(schedule) // 400)
    _check(rows, corpus, labels, schedule, np.arange(len(schedule)))
    assert not (out / ".cache").exists() and not (out / ".parquet").exists()


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_rank_shares_are_the_samplers_and_interleave_back(multi, tmp_path, fmt):
    corpus, labels, schedule = multi
    world = 3  # 500 = 3 x 166 + 2: the last two positions are served to no rank, as by the sampler
    shares = []
    for r in range(world):
        out = tmp_path / f"rank{r}"
        export_schedule(corpus, labels, schedule, out, fmt=fmt, rank=r, world_size=world,
                        rows_per_shard=100, block=50)
        rows = _read_parquet(out)[0] if fmt == "parquet" else _read_hf(out)[0]
        _check(rows, corpus, labels, schedule, np.arange(r, world * 166, world))
        sampler = ClusterClipSampler(labels, len(schedule), seed=2, rank=r, world_size=world)
        assert rows["doc_index"] == list(sampler)
        shares.append(rows)
    merged = [d for step in zip(*(s["doc_index"] for s in shares), strict=True) for d in step]
    assert merged == schedule[: world * 166].tolist()


def test_parquet_bytes_are_deterministic(multi, tmp_path):
    corpus, labels, schedule = multi
    for name in ("x", "y"):
        export_schedule(corpus, labels, schedule, tmp_path / name, rows_per_shard=250)
    a = sorted((tmp_path / "x").iterdir())
    assert [p.name for p in a] == [p.name for p in sorted((tmp_path / "y").iterdir())]
    for p in a:
        assert p.read_bytes() == (tmp_path / "y" / p.name).read_bytes(), p.name


def test_gzip_input_is_decompressed_once_whatever_the_number_of_blocks(bundled, tmp_path,
                                                                       monkeypatch):
    """A gzip file cannot seek: read per block, the bundled .jsonl.gz would be decompressed
    once per block (94 here). The export decompresses it once into a scratch copy, which is
    gone afterwards, and the rows are those of a one-block export (which reads it directly)."""
    corpus, labels, schedule = bundled
    assert [f["kind"] for f in corpus.files] == ["jsonl.gz"]
    export_schedule(corpus, labels, schedule, tmp_path / "one", rows_per_shard=10**6)
    opened = []
    real_open = gzip.open

    def counting_open(path, *args, **kwargs):
        opened.append(Path(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(gzip, "open", counting_open)
    export_schedule(corpus, labels, schedule, tmp_path / "many", rows_per_shard=10**6, block=16)
    assert opened == [Path(corpus.files[0]["path"])]
    names = sorted(p.name for p in (tmp_path / "many").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "one").iterdir())
    assert ".plain" not in names
    assert _read_parquet(tmp_path / "many")[0] == _read_parquet(tmp_path / "one")[0]


def test_verification_catches_swapped_texts_and_misordered_rows(multi, tmp_path):
    corpus, labels, schedule = multi
    export_schedule(corpus, labels, schedule, tmp_path / "x")
    table = pa.Table.from_batches(list(read_parquet_batches(tmp_path / "x", batch_size=64)))
    whole, split = _RowsHash(), _RowsHash()
    whole.update(table)
    for rb in table.to_batches(max_chunksize=37):
        split.update(rb)
    assert whole.hexdigest() == split.hexdigest()  # batching does not change the hash
    i, j = next((i, j) for i in range(len(schedule)) for j in range(i + 1, len(schedule))
                if schedule[i] != schedule[j])
    texts = table.column("text").to_pylist()
    texts[i], texts[j] = texts[j], texts[i]
    swapped = _RowsHash()
    swapped.update(table.set_column(3, "text", pa.array(texts, pa.string())))
    assert swapped.hexdigest() != whole.hexdigest()
    assert _check_rows(iter([table]), schedule, labels, 0, 1, tmp_path)[1] == whole.hexdigest()
    order = list(range(len(schedule)))
    order[i], order[j] = j, i
    with pytest.raises(RuntimeError, match="not positions"):
        _check_rows(iter([table.take(order)]), schedule, labels, 0, 1, tmp_path)
    with pytest.raises(RuntimeError, match="re-read"):
        _check_rows(iter([table.slice(0, 10)]), schedule, labels, 0, 1, tmp_path)


def test_empty_share_writes_an_empty_verified_dataset(multi, tmp_path):
    corpus, labels, schedule = multi
    for fmt in ("parquet", "hf"):
        out = tmp_path / fmt
        s = export_schedule(corpus, labels, schedule[:2], out, fmt=fmt, rank=2, world_size=3)
        assert s["rows"] == 0
        if fmt == "hf":
            assert len(datasets.load_from_disk(str(out))) == 0


# -- the command line on a work directory ------------------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory, pydocs_path):
    d = tmp_path_factory.mktemp("w")
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        lines = [line for _, line in zip(range(200), src, strict=False)]
    lines[7] = '{"text": "", "id": "empty"}\n'  # label -1: a schedule holding it is refused
    (d / "docs.jsonl").write_text("".join(lines), encoding="utf-8")
    assert main(["run", str(d / "docs.jsonl"), "--workdir", str(d / "w"), "--clusters", "4",
                 "--embedder", "fast", "--num-samples", "500"]) == 0
    return d / "w"


def test_cli_exports_the_workdir_schedule(workdir, tmp_path, capsys):
    out = tmp_path / "pq"
    assert main(["export", "--workdir", str(workdir), "--format", "parquet", "--out", str(out),
                 "--rank", "1", "--world-size", "2", "--rows-per-shard", "100"]) == 0
    assert "exported 250 rows (rank 1 of 2" in capsys.readouterr().out
    corpus = Corpus.load(workdir / "corpus")
    _check(_read_parquet(out)[0], corpus, np.load(workdir / "labels.npy"),
           np.load(workdir / "schedule.npy"), np.arange(1, 500, 2))
    stage = json.loads((workdir / "manifest.json").read_text())["stages"]["export"]
    assert stage["status"] == "done"
    # an earlier export's folder is replaced without --overwrite
    assert main(["export", "--workdir", str(workdir), "--format", "hf", "--out", str(out)]) == 0
    assert len(datasets.load_from_disk(str(out))) == 500


def test_cli_refuses_bad_requests_before_writing(workdir, tmp_path, capsys):
    n = len(Corpus.load(workdir / "corpus"))
    labels = np.load(workdir / "labels.npy")
    out = tmp_path / "out"
    base = ["export", "--workdir", str(workdir), "--format", "parquet", "--out", str(out)]
    cases = {
        "missing.npy: cannot read": ["--schedule", str(tmp_path / "missing.npy")],
        f"position 3 holds document {n}, outside the corpus of {n}": ["--schedule", "range"],
        "position 1 holds document 7, which has no label": ["--schedule", "excluded"],
        "--rank must be < --world-size 2, got 2": ["--rank", "2", "--world-size", "2"],
        "error: --world-size: 0 is out of range": ["--world-size", "0"],
        "not written by `clusterclip export`": ["--schedule", "ok"],
    }
    ok = np.arange(20, dtype=np.int64)
    ok = ok[labels[ok] >= 0]
    bad = ok.copy()
    bad[3] = n
    np.save(tmp_path / "range.npy", bad)
    np.save(tmp_path / "ok.npy", ok)
    assert labels[7] == -1
    exc = ok.copy()
    exc[1] = 7
    np.save(tmp_path / "excluded.npy", exc)
    for msg, extra in cases.items():
        args = [str(tmp_path / f"{a}.npy") if a in ("range", "excluded", "ok") else a
                for a in extra]
        if msg.startswith("not written"):
            out.mkdir()
            (out / "mine.txt").write_text("user data")
        assert main([*base, *args]) == 2, msg
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
        if msg.startswith("not written"):
            assert [p.name for p in out.iterdir()] == ["mine.txt"]
        else:
            assert not out.exists()
    # --overwrite never takes a folder clusterclip did not write
    assert main([*base, "--schedule", str(tmp_path / "ok.npy"), "--overwrite"]) == 2
    assert "never replaces a folder clusterclip did not write" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    (out / "mine.txt").unlink()
    assert main([*base, "--schedule", str(tmp_path / "ok.npy")]) == 0
    assert _read_parquet(out)[0]["doc_index"] == ok.tolist()


def test_cli_refuses_a_schedule_older_than_the_labels(tmp_path, pydocs_path, capsys):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        lines = [line for _, line in zip(range(120), src, strict=False)]
    (tmp_path / "docs.jsonl").write_text("".join(lines), encoding="utf-8")
    w = tmp_path / "w"
    assert main(["run", str(tmp_path / "docs.jsonl"), "--workdir", str(w), "--clusters", "3",
                 "--embedder", "fast", "--num-samples", "100"]) == 0
    assert main(["cluster", "--workdir", str(w), "--clusters", "4"]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["export", "--workdir", str(w), "--format", "parquet", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "stale" in err and "sample" in err and not out.exists()
    assert main(["run", str(tmp_path / "docs.jsonl"), "--workdir", str(w), "--clusters", "4",
                 "--embedder", "fast", "--num-samples", "100"]) == 0
    assert main(["export", "--workdir", str(w), "--format", "parquet", "--out", str(out)]) == 0
    (w / "schedule.npy").unlink()
    capsys.readouterr()
    assert main(["export", "--workdir", str(w), "--format", "parquet", "--out",
                 str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err
    assert "schedule.npy: changed or gone" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out2").exists()


def test_a_schedule_older_than_the_search_mixture_is_exported_with_a_warning(
        workdir, tmp_path, capsys):
    """Not refused (exporting the earlier schedule is legitimate): one warning line naming
    both files and the command that samples the mixture; none with --schedule given or
    once the schedule is the newer."""
    import os

    mix = workdir / "search" / "mixture.json"
    mix.parent.mkdir()
    try:
        mix.write_text("{}")
        sched = workdir / "schedule.npy"
        t = sched.stat().st_mtime_ns
        os.utime(mix, ns=(t + 10**9, t + 10**9))
        base = ["export", "--workdir", str(workdir), "--format", "parquet"]
        capsys.readouterr()
        assert main([*base, "--out", str(tmp_path / "a")]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("warning:"), err
        assert str(sched) in err[0] and str(mix) in err[0]
        assert f"clusterclip sample --labels {workdir / 'labels.npy'} --mixture {mix}" in err[0]
        assert main([*base, "--out", str(tmp_path / "b"), "--schedule", str(sched)]) == 0
        assert capsys.readouterr().err == ""
        os.utime(mix, ns=(t - 10**9, t - 10**9))
        assert main([*base, "--out", str(tmp_path / "c")]) == 0
        assert capsys.readouterr().err == ""
    finally:
        mix.unlink()
        mix.parent.rmdir()


def test_missing_extra_is_one_line_naming_it(workdir, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "datasets.py").write_text("raise ImportError('not installed')\n")
    env = child_env(PYTHONPATH=f"{shadow}:{child_env().get('PYTHONPATH', '')}")
    out = tmp_path / "out"
    r = run_cli("export", "--workdir", workdir, "--format", "hf", "--out", out, env=env)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip() == ("clusterclip export: error: --format hf needs datasets; install "
                                "the `hf` extra (pip install 'clusterclip[hf]')")


# -- the recipes of docs/integrations.md, run as written ----------------------------------

def test_docs_training_recipes_consume_the_schedule_in_order(workdir, tmp_path, monkeypatch):
    recipes = [docs_recipe("export-parquet"), docs_recipe("export-hf")]
    monkeypatch.chdir(tmp_path)
    schedule = np.load(workdir / "schedule.npy")
    corpus = Corpus.load(workdir / "corpus")
    for fmt, code in zip(("parquet", "hf"), recipes, strict=True):
        folder = tmp_path / "export" / fmt
        assert main(["export", "--workdir", str(workdir), "--format", fmt, "--out", str(folder),
                     "--rank", "0", "--world-size", "2", "--rows-per-shard", "60"]) == 0
        seen: list[str] = []
        exec(code, {"train_step": seen.extend})
        assert seen == corpus.texts(schedule[0:500:2]), fmt


# -- issue 16: typed Parquet values, folder readers, one vocabulary -------------------------
@pytest.fixture(scope="module")
def typed(tmp_path_factory, pydocs_path):
    """A Parquet corpus with binary, timestamp, date, time, decimal and list<binary> columns
    and its own `label` field, embedded, clustered, deduplicated and sampled."""
    import datetime as dt
    from decimal import Decimal

    d = tmp_path_factory.mktemp("typed")
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        recs = [json.loads(line) for _, line in zip(range(80), src, strict=False)]
    utc = dt.timezone.utc
    table = pa.table({
        "text": [r["text"][:300] for r in recs],
        "label": [r["label"] for r in recs],
        "blob": pa.array([bytes([i, 255 - i, 0]) * (i % 4) for i in range(80)], pa.binary()),
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=utc) + dt.timedelta(seconds=7 * i + 0.5)
                        for i in range(80)], pa.timestamp("us", tz="UTC")),
        "ns": pa.array([1_700_000_000_123_456_789 + i for i in range(80)], pa.timestamp("ns")),
        "day": pa.array([dt.date(2020, 2, 1 + i % 28) for i in range(80)], pa.date32()),
        "at": pa.array([dt.time(i % 24, 30, 15, 250000) for i in range(80)], pa.time64("us")),
        "price": pa.array([Decimal(f"{i}.{i % 100:02d}") for i in range(80)],
                          pa.decimal128(10, 2)),
        "blobs": pa.array([[b"\x00", bytes([i])] for i in range(80)], pa.list_(pa.binary())),
        "n": list(range(80)),
    })
    pq.write_table(table, d / "typed.parquet")
    w = d / "W"
    assert main(["run", str(d / "typed.parquet"), "--workdir", str(w), "--clusters", "3",
                 "--embedder", "fast", "--num-samples", "120", "--dedup"]) == 0
    return w, table.to_pylist()


def test_fields_read_back_to_the_values_of_the_input(typed, tmp_path):
    from clusterclip.corpus.records import decode_fields

    w, recs = typed
    out = tmp_path / "pq"
    assert main(["export", "--workdir", str(w), "--format", "parquet", "--out", str(out)]) == 0
    s = json.loads((out / "_export.json").read_text())
    assert s["field_types"] == {"at": "time64[us]", "blob": "binary", "blobs": "list<binary>",
                                "day": "date32[day]", "ns": "timestamp[ns]",
                                "price": "decimal128(10, 2)", "ts": "timestamp[us, tz=UTC]"}
    rows, _ = _read_parquet(out)
    assert len(rows["doc_index"]) == 120
    for d, fields in zip(rows["doc_index"], rows["fields"], strict=True):
        want = {("orig_label" if k == "label" else k): v for k, v in recs[d].items()
                if k != "text"}
        assert decode_fields(fields, s["field_types"]) == want
    one = json.loads(rows["fields"][0])  # the stated JSON forms
    d0 = recs[rows["doc_index"][0]]
    import base64

    assert base64.b64decode(one["blob"]) == d0["blob"]
    assert one["ts"] == d0["ts"].isoformat() and one["price"] == str(d0["price"])


def test_a_parquet_export_reads_as_a_folder(typed, tmp_path):
    import pandas as pd
    import pyarrow.dataset as pds

    w, _ = typed
    out = tmp_path / "pq"
    assert main(["export", "--workdir", str(w), "--format", "parquet", "--out", str(out),
                 "--rows-per-shard", "50"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".clusterclip-output", "_export.json", "part-00000.parquet", "part-00001.parquet",
        "part-00002.parquet"]
    schedule = np.load(w / "schedule.npy")
    frame = pd.read_parquet(out)
    table = pds.dataset(out, format="parquet").to_table()
    for got in (frame["doc_index"].tolist(), table.column("doc_index").to_pylist(),
                pq.read_table(out).column("doc_index").to_pylist()):
        assert sorted(got) == sorted(schedule.tolist())
    assert table.sort_by("position").column("doc_index").to_pylist() == schedule.tolist()


def test_keep_one_and_group_write_typed_values_in_the_same_json_form(typed, tmp_path):
    from clusterclip.corpus.records import decode_fields
    from clusterclip.grouping import original

    w, recs = typed
    keep = tmp_path / "keep"
    assert main(["dedup", "--workdir", str(w), "--keep-one", str(keep), "--no-progress"]) == 0
    kept = np.load(keep / "kept.npy")
    types = json.loads((keep / "keep_one.json").read_text())["field_types"]
    lines = (keep / "data.jsonl").read_text(encoding="utf-8").splitlines()
    assert [decode_fields(line, types) for line in lines] == [recs[k] for k in kept.tolist()]
    g = tmp_path / "g"
    assert main(["group", "--workdir", str(w), "--out", str(g)]) == 0
    summary = json.loads((g / "group.json").read_text())
    assert summary["renamed_fields"] == {"label": 80}
    assert summary["field_types"] == types
    for f in g.glob("cluster_*/data_*.jsonl"):
        for line in f.read_text(encoding="utf-8").splitlines():
            i, rec = original(json.loads(line))
            assert decode_fields(json.dumps(rec), types) == recs[i]
