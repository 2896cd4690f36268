"""The corpus scan and the input hashing shared among torchrun ranks, and the embed stage
writing every rank's rows into one file: the same bytes as one process, the same errors."""

from __future__ import annotations

import contextlib
import filecmp
import json
import multiprocessing
from pathlib import Path

import pytest
from _helpers import child_env, run_cli, torchrun, torchrun_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip import distributed as D
from clusterclip.corpus import Corpus, scan_into
from clusterclip.errors import InputError
from clusterclip.workdir import Workdir


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_bytes("".join(r if isinstance(r, str) else json.dumps(r) + "\n"
                             for r in lines).encode("utf-8"))
    return path


def docs(prefix: str, n: int, words: int = 12) -> list[dict]:
    return [{"text": " ".join(f"{prefix}{(i * 7 + j) % 23}" for j in range(words)),
             "id": f"{prefix}-{i}"} for i in range(n)]


def hostile_corpus(d: Path) -> list[str]:
    """Files of every kind, with bad, blank, empty, whitespace-only and null texts."""
    pq = pytest.importorskip("pyarrow.parquet")
    import gzip

    import pyarrow as pa

    d.mkdir()
    a = docs("alpha", 40)
    a[3]["text"] = ""
    a[9]["text"] = "   "
    a[12] = {"id": "no-text"}
    write_jsonl(d / "a.jsonl", [*a[:20], "{broken\n", "\n", *a[20:], "[1, 2]\n"])
    with gzip.open(d / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in docs("beta", 25)))
    rows = docs("gamma", 15)
    rows[4]["text"] = None
    rows[5]["text"] = ""
    rows[6]["id"] = "alpha-1"  # a duplicate id
    pq.write_table(pa.table({"text": [r["text"] for r in rows], "id": [r["id"] for r in rows]}),
                   d / "c.parquet", row_group_size=4)
    write_jsonl(d / "d.jsonl", [*docs("delta", 60, words=20), '{"text": 5}\n'])
    (d / "e.jsonl").write_bytes(b"")
    return [str(d / n) for n in ("a.jsonl", "b.jsonl.gz", "c.parquet", "d.jsonl", "e.jsonl")]


def same_tree(a: Path, b: Path) -> None:
    names = sorted(p.relative_to(a).as_posix() for p in a.rglob("*"))
    assert names == sorted(p.relative_to(b).as_posix() for p in b.rglob("*"))
    for n in names:
        if (a / n).is_file():
            assert filecmp.cmp(a / n, b / n, shallow=False), n


@given(st.lists(st.integers(0, 1000), max_size=30), st.integers(1, 6))
@settings(max_examples=200, deadline=None)
def test_balanced_shares_split_every_item_once_near_evenly(weights, world):
    shares = D.balanced_shares(weights, world)
    assert sorted(i for s in shares for i in s) == list(range(len(weights)))
    assert all(s == sorted(s) for s in shares)
    loads = [sum(max(weights[i], 1) for i in s) for s in shares]
    # greedy, heaviest first: no rank exceeds another by more than one item's weight
    assert max(loads) - min(loads) <= max([max(w, 1) for w in weights], default=0)


def test_scan_into_writes_what_scan_and_save_write(tmp_path):
    files = hostile_corpus(tmp_path / "in")
    kw = {"text_field": "text", "id_field": "id", "skip_bad_lines": True, "progress": False}
    Corpus.scan(files, **kw).save(tmp_path / "saved")
    stats = scan_into(tmp_path / "scanned", files, **kw)
    same_tree(tmp_path / "saved", tmp_path / "scanned")
    assert stats["documents"] == 140 and stats["bad_lines"] == 3
    assert stats["empty"] == 5 and stats["duplicate_ids"] == 1
    assert not list(tmp_path.glob(".*.tmp"))  # its per-file scratch is gone
    c = Corpus.load(tmp_path / "scanned")
    assert c.texts([0, 44, 80]) == [docs("alpha", 1)[0]["text"], docs("beta", 5)[4]["text"],
                                      docs("delta", 1, words=20)[0]["text"]]


def test_scan_into_errors_are_those_of_a_scan_and_write_nothing(tmp_path):
    files = hostile_corpus(tmp_path / "in")
    with pytest.raises(InputError) as e:
        Corpus.scan(files, progress=False)
    assert str(e.value).startswith(f"{files[0]}:21: invalid JSON")
    with pytest.raises(InputError) as again:
        scan_into(tmp_path / "out", files, progress=False)
    assert str(again.value) == str(e.value)

    def refuse(stats):
        raise InputError(f"refused {stats['documents']}")

    with pytest.raises(InputError, match="refused 140"):
        scan_into(tmp_path / "out", files, skip_bad_lines=True, progress=False, check=refuse)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def embed_args(files: list[str]) -> list[str]:
    return ["embed", *files, "--embedder", "fast", "--skip-bad-lines", "--id-field", "id",
            "--shard-size", "7", "--no-progress", "--keep-shards"]


def test_two_gloo_ranks_write_the_bytes_one_process_writes(tmp_path):
    pytest.importorskip("torch")
    files = hostile_corpus(tmp_path / "in")
    one, two = tmp_path / "one", tmp_path / "two"
    r = run_cli(*embed_args(files), "--workdir", one)
    assert r.returncode == 0, r.stderr
    r = torchrun_cli(*embed_args(files), "--workdir", two, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("bad lines skipped: 3") == 1  # rank 0 reports
    same_tree(one / "corpus", two / "corpus")
    for f in ("embeddings.npy", "valid.npy"):
        assert (one / f).read_bytes() == (two / f).read_bytes(), f
    a, b = Workdir(one).stage("embed"), Workdir(two).stage("embed")
    assert a["inputs"] == b["inputs"] and len(a["inputs"]) == 5  # the same hashes
    assert a["fingerprint"] == b["fingerprint"]
    assert b["info"]["processes"] == 2 and b["info"]["shards_computed"] == 20
    # every shard's record is there; the rows file moved into place
    assert len(list((two / "embed").glob("shard-*.done"))) == 20
    assert not (two / "embed" / "embeddings.npy").exists()
    assert not list(two.glob(".*.tmp"))


def test_under_torchrun_the_first_bad_line_in_file_order_stops_every_rank(tmp_path):
    pytest.importorskip("torch")
    d = tmp_path / "in"
    d.mkdir()
    # The big file goes to rank 0 and fails at line 2; the small first file goes to rank 1
    # and fails later, at line 4: the error is the small file's, the first in file order.
    small = write_jsonl(d / "a.jsonl", [*docs("a", 3), "{bad\n"])
    big = write_jsonl(d / "b.jsonl", [docs("b", 1)[0], "[]\n", *docs("b", 80)])
    assert D.balanced_shares([small.stat().st_size, big.stat().st_size], 2) == [[1], [0]]
    w = tmp_path / "W"
    r = torchrun_cli("embed", small, big, "--workdir", w, "--embedder", "fast",
                     "--no-progress", timeout=240)
    assert r.returncode != 0
    line = f"{small}:4: invalid JSON"
    assert r.stderr.count(line) == 2, r.stderr[-3000:]  # each rank's one-line error
    assert f"{big}:2" not in r.stderr
    assert "exitcode  : 2" in r.stderr and "exitcode  : 1" not in r.stderr
    # refused before any stage finished: no lock or manifest is left (rank 0 removes the W
    # it made; another rank, which opens W too, may make it again, empty)
    assert not w.exists() or not list(w.iterdir())


# -- one file in byte ranges (issue 40: the scan on every core) ----------------------------

@contextlib.contextmanager
def part_sizes(part: int, pool: int):
    """Cut a plain file into parts of at least ``part`` bytes; hand a share of at least
    ``pool`` bytes to worker processes (the thresholds, made small for small files)."""
    from clusterclip.corpus import index

    old = index.PART_MIN_BYTES, index.POOL_MIN_BYTES
    index.PART_MIN_BYTES, index.POOL_MIN_BYTES = part, pool
    try:
        yield
    finally:
        index.PART_MIN_BYTES, index.POOL_MIN_BYTES = old


@given(st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"\n")),
       st.lists(st.integers(0, 320), max_size=8))
@settings(max_examples=200, deadline=None)
def test_line_starts_are_the_first_line_start_at_or_after_each_cut(tmp_path_factory, data,
                                                                    cuts):
    from clusterclip.corpus.readers import line_starts

    path = tmp_path_factory.mktemp("cut") / "f.jsonl"
    path.write_bytes(data)
    cuts = sorted(min(c, len(data)) for c in cuts)
    starts = {0, len(data)} | {i + 1 for i, b in enumerate(data) if b == ord("\n")}
    assert line_starts(path, cuts) == [min(s for s in starts if s >= c) for c in cuts]


# A line of a corpus file: a document (text, empty, whitespace, null, missing, non-ASCII,
# with an id or a duplicate one), a blank line, or a bad one.
_LINE = st.one_of(
    st.builds(lambda t, i: json.dumps({"text": t, "id": i}, ensure_ascii=False) + "\n",
              st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
                        st.none(), st.just("   ")),
              st.integers(0, 5)),
    st.just('{"id": 9}\n'), st.just("\n"), st.just("  \r\n"), st.just("{broken\n"),
    st.just("[1, 2]\n"), st.just('{"text": 5}\n'), st.just('{"text": "crlf"}\r\n'))


@given(st.lists(st.lists(_LINE, max_size=14), min_size=1, max_size=3),
       st.booleans(), st.booleans(), st.integers(1, 60), st.integers(1, 6))
@settings(max_examples=80, deadline=None)
def test_a_scan_in_byte_ranges_writes_the_bytes_and_errors_of_one_scan(
        tmp_path_factory, files, bom, last_newline, part, pieces):
    """Plain files cut at line starts into parts of at least ``part`` bytes (up to
    ``pieces`` of them), scanned part by part: the index of one scan of the whole files,
    byte for byte (line numbers, addresses, counts, ids, bad-line examples), and the error
    of one scan, naming the file and its line."""
    d = tmp_path_factory.mktemp("parts")
    paths = []
    for j, lines in enumerate(files):
        raw = "".join(lines).encode("utf-8")
        if j == 0 and bom:
            raw = b"\xef\xbb\xbf" + raw
        if not last_newline:
            raw = raw.rstrip(b"\n")
        paths.append(d / f"f{j}.jsonl")
        paths[-1].write_bytes(raw)
    # a gzip file between them stays whole, its lines numbered from 1 again
    gz = write_jsonl(d / "g.jsonl", docs("g", 3))
    import gzip

    paths.insert(1, d / "g.jsonl.gz")
    paths[1].write_bytes(gzip.compress(gz.read_bytes(), mtime=0))
    gz.unlink()
    for skip in (True, False):
        kw = {"id_field": "id", "skip_bad_lines": skip, "progress": False}
        try:
            Corpus.scan(paths, **kw).save(d / f"one-{skip}")
            error = None
        except InputError as e:
            error = str(e)
        out = d / f"parts-{skip}"
        with part_sizes(part, 1 << 40):  # the parts scanned in this process
            if error is None:
                scan_into(out, paths, workers=pieces, **kw)
                same_tree(d / f"one-{skip}", out)
            else:
                with pytest.raises(InputError) as e:
                    scan_into(out, paths, workers=pieces, **kw)
                assert str(e.value) == error and not out.exists()


def test_only_a_large_plain_file_is_cut_and_a_small_corpus_stays_in_one_process(tmp_path):
    """Gzip and Parquet files stay whole parts, a plain one is cut at line starts into parts
    of PART_MIN_BYTES or more on average; with the default thresholds a small corpus is one part per
    file, scanned in this process (the only one that can keep the texts)."""
    from clusterclip.corpus import index

    files = [Path(f) for f in hostile_corpus(tmp_path / "in")]
    with part_sizes(100, 1 << 40):
        parts = index._parts(files, 4)
    sizes = [f.stat().st_size for f in files]
    assert [p.fid for p in parts if p.span is None] == [1, 2, 4]  # gzip, Parquet, empty
    for fid in (0, 3):
        spans = [p.span for p in parts if p.fid == fid]
        assert len(spans) == 4 and spans[0][0] == 0 and spans[-1][1] == sizes[fid]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        data = files[fid].read_bytes()
        assert all(data[lo - 1:lo] == b"\n" for lo, _ in spans[1:])  # at line starts
    assert [(p.fid, p.span) for p in index._parts(files, 4)] == [(f, None) for f in range(5)]
    kept: list = []
    scan_into(tmp_path / "ix", files, workers=2, texts=kept, skip_bad_lines=True,
              progress=False)
    assert len(kept) == 140


def test_worker_processes_scan_a_file_in_parts_into_the_bytes_of_one_scan(tmp_path):
    """A real pool of 2 processes over the parts of a file cut in 4 and the other files:
    the index of one scan, no texts kept; a bad line in a later part is named by its line
    in the file, and nothing is written."""
    files = hostile_corpus(tmp_path / "in")
    kw = {"text_field": "text", "id_field": "id", "skip_bad_lines": True, "progress": False}
    Corpus.scan(files, **kw).save(tmp_path / "one")
    kept: list = []
    with part_sizes(400, 0):
        stats = scan_into(tmp_path / "two", files, workers=2, texts=kept, **kw)
    same_tree(tmp_path / "one", tmp_path / "two")
    assert stats["documents"] == 140 and kept == []
    bad = write_jsonl(tmp_path / "bad.jsonl", [*docs("a", 30), "{bad\n", *docs("b", 30)])
    with part_sizes(400, 0), pytest.raises(InputError) as e:
        scan_into(tmp_path / "three", [files[1], bad], workers=2, progress=False)
    assert str(e.value).startswith(f"{bad}:31: invalid JSON")
    assert not (tmp_path / "three").exists() and not list(tmp_path.glob(".*.tmp"))
    assert not multiprocessing.active_children()  # the workers stopped with the error


_RANKS_SCAN = """
import os, sys
from clusterclip import distributed as D
from clusterclip.corpus import index
from clusterclip.errors import InputError

index.PART_MIN_BYTES, index.POOL_MIN_BYTES = int(os.environ["CC_PART"]), 1 << 40
created = D.init_from_env()
out, files = sys.argv[1], sys.argv[2:]
try:
    index.scan_into(out, files, id_field="id", skip_bad_lines="CC_SKIP" in os.environ,
                    progress=False)
except InputError as e:
    print(f"rank {D.rank_and_world()[0]}: {e}")
D.shutdown(created)
"""


def test_torchrun_ranks_share_the_parts_of_one_file(tmp_path):
    """Two gloo ranks, each scanning its byte ranges of a file cut in parts: the index of
    one scan; a bad line in rank 1's part stops both ranks with its line in the file."""
    pytest.importorskip("torch")
    files = hostile_corpus(tmp_path / "in")
    part = str(Path(files[3]).stat().st_size // 3)  # d.jsonl in three parts
    Corpus.scan(files, id_field="id", skip_bad_lines=True, progress=False).save(tmp_path / "one")
    script = tmp_path / "scan.py"
    script.write_text(_RANKS_SCAN)
    r = torchrun(script, tmp_path / "two", *files, env=child_env(CC_PART=part, CC_SKIP="1"),
                 timeout=240)
    assert r.returncode == 0 and "rank" not in r.stdout, r.stderr[-3000:]
    same_tree(tmp_path / "one", tmp_path / "two")
    r = torchrun(script, tmp_path / "three", files[3], env=child_env(CC_PART=part),
                 timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    said = sorted(r.stdout.splitlines())
    assert said == [f"rank {k}: {files[3]}:61: field 'text' is int, expected a string "
                    "(skip_bad_lines skips and counts such lines)" for k in (0, 1)]
    assert not (tmp_path / "three").exists()
