"""Streaming forms of per-document work (issue 10, the million-document run): each one
gives exactly what the whole-corpus form it replaced gave, chunk boundaries included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.corpus import Corpus
from clusterclip.corpus import index as corpus_index
from clusterclip.embedding.pipeline import sample_indices


def _sample_indices_reference(valid: np.ndarray, size: int) -> np.ndarray:
    """The former implementation: all valid indices first, then evenly spaced ones."""
    idx = np.flatnonzero(valid)
    if len(idx) <= size:
        return idx
    return idx[np.linspace(0, len(idx) - 1, size).round().astype(np.int64)]


@settings(max_examples=200, deadline=None)
@given(bits=st.lists(st.booleans(), max_size=200), size=st.integers(1, 60),
       chunk=st.integers(1, 70))
def test_sample_indices_chunked_equals_whole(bits, size, chunk):
    valid = np.array(bits, dtype=bool)
    got = sample_indices(valid, size, chunk=chunk)
    want = _sample_indices_reference(valid, size)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


VALUES = st.one_of(st.none(), st.sampled_from(["a", "b", "", "é", "a b"]),
                   st.integers(-2, 2), st.booleans())


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _corpus(tmp: Path, values: list, split: int) -> Corpus:
    rows = [{"text": f"doc {i}"} | ({} if v == "MISSING" else {"topic": v})
            for i, v in enumerate(values)]
    files = [_write(tmp / "a.jsonl", rows[:split]), _write(tmp / "b.jsonl", rows[split:])]
    return Corpus.scan([f for f in files if f.stat().st_size], progress=False)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(VALUES, st.just("MISSING")), min_size=1, max_size=40),
       split=st.integers(0, 40), chunk=st.integers(1, 7))
def test_field_codes_and_chunked_reads_equal_field_values(tmp_path_factory, values, split,
                                                          chunk):
    tmp = tmp_path_factory.mktemp("c")
    corpus = _corpus(tmp, values, min(split, len(values)))
    whole = corpus.field_values("topic")
    texts = [t for _, t in corpus.iter_texts()]
    idx = np.arange(0, len(values), 3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(corpus_index, "_CHUNK", chunk)
        codes, names = corpus.field_codes("topic")
        assert corpus.field_values("topic") == whole
        assert [t for _, t in corpus.iter_texts()] == texts
        assert [t for _, t in corpus.iter_texts_at(idx)] == [texts[i] for i in idx]
    assert codes.dtype == np.int32 and codes.shape == (len(values),)
    assert [None if c < 0 else names[c] for c in codes.tolist()] == \
        [None if v is None else str(v) for v in whole]
    assert len(set(names)) == len(names)


def _agreement_reference(values: list, labels: np.ndarray):
    """The former ``_label_agreement`` body: one Python object per document."""
    from clusterclip.report.metrics import cluster_label_agreement

    present = np.array([v is not None for v in values], dtype=bool)
    keep = present & (labels >= 0)
    names = np.array([str(v) if v is not None else "" for v in values], dtype=object)
    classes, cls = np.unique(names[keep].astype(str), return_inverse=True)
    clusters = labels[keep]
    result = {**cluster_label_agreement(clusters, cls), "documents": int(keep.sum()),
              "classes": int(classes.size)}
    table = np.bincount(clusters * classes.size + cls,
                        minlength=(int(labels.max()) + 1) * classes.size).reshape(
        -1, classes.size)
    majority = {int(k): str(classes[int(np.argmax(table[k]))])
                for k in np.flatnonzero(table.sum(axis=1))}
    return result, majority


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_label_agreement_streamed_equals_reference(tmp_path_factory, data):
    from clusterclip.report.build import _label_agreement

    values = data.draw(st.lists(VALUES, min_size=2, max_size=40))
    if all(v is None for v in values):
        values[0] = "a"
    labels = np.array(data.draw(st.lists(st.integers(-1, 3), min_size=len(values),
                                         max_size=len(values))), dtype=np.int32)
    labels[0] = 0
    if values[0] is None:
        values[0] = "a"
    corpus = _corpus(tmp_path_factory.mktemp("r"), values, len(values) // 2)
    got, got_majority = _agreement_reference(values, labels)
    result, majority = _label_agreement(*corpus.field_codes("topic"), labels, "topic")
    assert {k: result[k] for k in got} == got
    assert majority == got_majority


def _rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_release_pages_drops_a_read_only_map_and_keeps_its_values(tmp_path):
    """A pass over a memory-mapped file that releases each chunk keeps about one chunk
    resident (the report above 2^22 documents); the values read afterwards are the file's,
    and a copy-on-write map (which may hold changes) is left alone."""
    from clusterclip.storage.arrays import load_npy, release_pages

    want = np.arange(1 << 23, dtype=np.int32)  # 32 MiB
    np.save(tmp_path / "a.npy", want)
    a = load_npy(tmp_path / "a.npy", mmap=True)
    view = np.asarray(a, dtype=np.int32)  # how the report holds its labels: a view
    before = _rss_file_kib()
    assert int(view.sum(dtype=np.int64)) == int(want.sum(dtype=np.int64))
    touched = _rss_file_kib()
    release_pages(view, 0, want.size // 2)
    half = _rss_file_kib()
    release_pages(view)
    after = _rss_file_kib()
    assert touched - before > 24 * 1024  # the pass made the file resident
    assert touched - half > 12 * 1024 and half - after > 12 * 1024
    np.testing.assert_array_equal(view[::4097], want[::4097])
    c = np.load(tmp_path / "a.npy", mmap_mode="c")
    c[0] = -5
    release_pages(c)
    assert c[0] == -5
