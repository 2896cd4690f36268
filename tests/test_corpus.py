"""Corpus scanning and reading: every document addressed by a stable index,
texts read back exactly, bad input reported with file and line."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.corpus import Corpus
from clusterclip.errors import InputError


def write_jsonl(path: Path, rows: list, gz: bool = False) -> Path:
    lines = "".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) + "\n"
                    for r in rows)
    data = lines.encode("utf-8")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def write_parquet(path: Path, rows: list[dict], row_group_size: int = 3) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    cols = sorted({k for r in rows for k in r})
    table = pa.table({c: [r.get(c) for r in rows] for c in cols})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def docs(prefix: str, n: int) -> list[dict]:
    return [{"text": f"{prefix} document {i} — ünïcode {'x' * i}", "id": f"{prefix}-{i}",
             "label": i % 3} for i in range(n)]


def test_jsonl_gz_parquet_and_folders_in_stable_order(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", docs("a", 5))
    b = write_jsonl(tmp_path / "b.jsonl.gz", docs("b", 4), gz=True)
    c = write_parquet(tmp_path / "c.parquet", docs("c", 7))
    folder = tmp_path / "dir"
    (folder / "z").mkdir(parents=True)
    write_jsonl(folder / "z" / "1.jsonl", docs("z1", 2))
    write_jsonl(folder / "y.jsonl", docs("y", 3))
    (folder / "README.md").write_text("not data")
    (folder / ".hidden.jsonl").write_text("garbage\n")

    corpus = Corpus.scan([b, folder, a, c], id_field="id", progress=False)
    expected = docs("b", 4) + docs("y", 3) + docs("z1", 2) + docs("a", 5) + docs("c", 7)
    assert len(corpus) == len(expected) == corpus.stats["documents"]
    assert corpus.stats["files"] == 5
    assert corpus.stats["ignored_files"] == [str(folder / "README.md")]
    assert corpus.valid.all()
    assert corpus.ids == [d["id"] for d in expected]
    # streaming, whole and in slices that cross file boundaries
    assert [t for _, t in corpus.iter_texts()] == [d["text"] for d in expected]
    assert [i for i, _ in corpus.iter_texts(3, 17)] == list(range(3, 17))
    assert [t for _, t in corpus.iter_texts(3, 17)] == [d["text"] for d in expected[3:17]]
    # random access, any order, repeats
    idx = [20, 0, 5, 5, 13, 3, 9, 19]
    assert corpus.texts(idx) == [expected[i]["text"] for i in idx]
    assert corpus.field_values("label") == [d["label"] for d in expected]
    assert corpus.field_values("label", idx) == [expected[i]["label"] for i in idx]
    assert corpus.field_values("nope", [0, 20]) == [None, None]
    assert corpus.text_lengths.tolist() == [len(d["text"]) for d in expected]


def test_empty_missing_and_blank_text_is_excluded_and_counted(tmp_path):
    rows = [{"text": "one"}, {"text": ""}, {"other": 1}, {"text": None}, "\n", "   \n",
            {"text": "  \n "}, {"text": "two"}]
    p = write_jsonl(tmp_path / "e.jsonl", rows)
    corpus = Corpus.scan(p, progress=False)
    assert corpus.valid.tolist() == [True, False, False, False, False, True]
    assert corpus.stats["empty"] == 4
    assert corpus.stats["valid"] == 2
    assert corpus.stats["blank_lines"] == 2
    assert corpus.texts([0, 1, 5]) == ["one", None, "two"]
    assert [t for _, t in corpus.iter_texts()] == ["one", None, None, None, None, "two"]
    assert corpus.text_lengths.tolist() == [3, 0, 0, 0, 0, 3]


BAD_LINES = [
    (b'{"text": "ok"\n', "invalid JSON"),
    (b'["text"]\n', "expected a JSON object, got list"),
    (b'"just a string"\n', "expected a JSON object, got str"),
    (b'{"text": 42}\n', "field 'text' is int, expected a string"),
    (b'{"text": ["a"]}\n', "field 'text' is list"),
    (b'{"text": "caf\xe9"}\n', "invalid UTF-8"),
]


@pytest.mark.parametrize("bad,reason", BAD_LINES)
@pytest.mark.parametrize("gz", [False, True])
def test_bad_line_names_file_and_line(tmp_path, bad, reason, gz):
    name = "bad.jsonl.gz" if gz else "bad.jsonl"
    data = b'{"text": "a"}\n{"text": "b"}\n' + bad + b'{"text": "c"}\n'
    p = tmp_path / name
    if gz:
        with gzip.open(p, "wb") as f:
            f.write(data)
    else:
        p.write_bytes(data)
    with pytest.raises(InputError) as e:
        Corpus.scan(p, progress=False)
    msg = str(e.value)
    assert msg.startswith(f"{p}:3: ")
    assert reason in msg
    assert "\n" not in msg

    corpus = Corpus.scan(p, skip_bad_lines=True, progress=False)
    assert len(corpus) == 3
    assert corpus.stats["bad_lines"] == 1
    assert corpus.stats["bad_line_examples"][0].startswith(f"{p}:3: ")
    assert [t for _, t in corpus.iter_texts()] == ["a", "b", "c"]
    assert corpus.texts([2, 0]) == ["c", "a"]
    assert corpus.line.tolist() == [1, 2, 4]


def test_bom_and_crlf_lines(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"text": "first"}\r\n{"text": "second"}\r\n')
    corpus = Corpus.scan(p, progress=False)
    assert corpus.texts([0, 1]) == ["first", "second"]


@pytest.mark.parametrize("make,fragment", [
    (lambda d: d / "notes.txt", "unknown file type"),
    (lambda d: d / "missing.jsonl", "no such file or folder"),
    (lambda d: d / "emptydir", "holds no .jsonl"),
])
def test_unusable_inputs_are_one_line_errors(tmp_path, make, fragment):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(InputError, match=fragment):
        Corpus.scan([make(tmp_path)], progress=False)


def test_same_file_twice_and_wrong_field(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"content": "x", "id": 1}])
    with pytest.raises(InputError, match="given more than once"):
        Corpus.scan([p, tmp_path / "." / "a.jsonl"], progress=False)
    with pytest.raises(InputError, match=r"no document has a 'text' field.*content"):
        Corpus.scan(p, progress=False)
    assert Corpus.scan(p, text_field="content", progress=False).texts([0]) == ["x"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable_file(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    p.chmod(0)
    try:
        with pytest.raises(InputError, match="cannot read"):
            Corpus.scan(p, progress=False)
    finally:
        p.chmod(0o644)


def test_corrupt_gzip_is_an_input_error(tmp_path):
    good = gzip.compress(b''.join(b'{"text": "doc %d"}\n' % i for i in range(2000)))
    p = tmp_path / "broken.jsonl.gz"
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError, match="broken.jsonl.gz"):
        Corpus.scan(p, progress=False)
    p.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="broken.jsonl.gz"):
        Corpus.scan(p, progress=False)


def test_parquet_text_column_checks(tmp_path):
    p = write_parquet(tmp_path / "n.parquet", [{"text": 1}, {"text": 2}])
    with pytest.raises(InputError, match="expected a string column"):
        Corpus.scan(p, progress=False)
    q = write_parquet(tmp_path / "m.parquet", [{"body": "x"}])
    with pytest.raises(InputError, match="no column 'text'"):
        Corpus.scan(q, progress=False)
    r = write_parquet(tmp_path / "ok.parquet", [{"text": "a"}, {"text": None}, {"text": ""}])
    corpus = Corpus.scan(r, progress=False)
    assert corpus.valid.tolist() == [True, False, False]
    assert corpus.stats["empty"] == 2


def test_save_load_roundtrip_and_change_detection(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", docs("a", 6))
    corpus = Corpus.scan(p, id_field="id", progress=False)
    corpus.save(tmp_path / "W" / "corpus")
    corpus.save(tmp_path / "W" / "corpus")  # replacing an existing index works
    assert sorted(os.listdir(tmp_path / "W")) == ["corpus"]  # no temporaries left
    loaded = Corpus.load(tmp_path / "W" / "corpus")
    assert len(loaded) == 6
    assert loaded.stats == corpus.stats
    assert loaded.ids == corpus.ids
    assert np.array_equal(loaded.valid, corpus.valid)
    assert loaded.texts([4, 1]) == corpus.texts([4, 1])
    loaded.verify_files()
    with open(p, "a", encoding="utf-8") as f:
        f.write(json.dumps({"text": "appended"}) + "\n")
    with pytest.raises(InputError, match="changed since the corpus was indexed"):
        loaded.verify_files()
    with pytest.raises(InputError, match="not a corpus index"):
        Corpus.load(tmp_path / "nowhere")


def test_pydocs_corpus(pydocs_path):
    corpus = Corpus.scan(pydocs_path, id_field="id", progress=False)
    assert len(corpus) == 4096
    assert corpus.stats["duplicate_ids"] == 0
    labels = corpus.field_values("label")
    assert len(set(labels)) > 5
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i in (0, 1000, 4095):
                assert corpus.texts([i]) == [json.loads(line)["text"]]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.one_of(st.text(st.characters(exclude_categories=("Cs",)),
                                           max_size=20), st.none()), max_size=6),
                min_size=1, max_size=4),
       st.lists(st.integers(0, 10**6), max_size=10))
def test_random_corpora_read_back_exactly(tmp_path_factory, files, picks):
    d = tmp_path_factory.mktemp("h")
    paths, expected = [], []
    for j, texts in enumerate(files):
        rows = [{"text": t} for t in texts]
        gz = j % 2 == 1
        paths.append(write_jsonl(d / (f"f{j}.jsonl" + (".gz" if gz else "")), rows, gz=gz))
        expected += [t if t is not None and t.strip() else None for t in texts]
    corpus = Corpus.scan(paths, progress=False)
    assert len(corpus) == len(expected)
    assert [t for _, t in corpus.iter_texts()] == expected
    assert corpus.valid.tolist() == [t is not None for t in expected]
    if expected:
        idx = [p % len(expected) for p in picks]
        assert corpus.texts(idx) == [expected[i] for i in idx]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.one_of(st.text(st.characters(exclude_categories=("Cs",)),
                                           max_size=20), st.none()), max_size=6),
                min_size=1, max_size=4),
       st.integers(0, 200))
def test_a_scan_keeps_the_texts_it_would_read_back_or_none(tmp_path_factory, files, limit):
    """``scan_into(texts=...)``: every document's text in corpus order (None where
    excluded), exactly what reading them back gives, while they total at most
    KEEP_TEXT_CHARS characters; past it, none (the stage reads them back)."""
    from clusterclip.corpus import index

    d = tmp_path_factory.mktemp("k")
    paths = []
    for j, texts in enumerate(files):
        gz = j % 2 == 1
        paths.append(write_jsonl(d / (f"f{j}.jsonl" + (".gz" if gz else "")),
                                 [{"text": t} for t in texts], gz=gz))
    kept: list[str | None] = ["stale"]
    old, index.KEEP_TEXT_CHARS = index.KEEP_TEXT_CHARS, limit
    try:
        stats = index.scan_into(d / "index", paths, progress=False, texts=kept)
    finally:
        index.KEEP_TEXT_CHARS = old
    corpus = Corpus.load(d / "index")
    read_back = corpus.texts(range(len(corpus)))
    assert stats["documents"] == len(corpus)
    if sum(len(t) for t in read_back if t is not None) <= limit:
        assert kept == read_back
        assert all(type(a) is type(b) for a, b in zip(kept, read_back, strict=True))
    else:
        assert kept == []
