"""Grouping writes every input document exactly once, in the authors' layout."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.cli import main
from clusterclip.corpus import Corpus
from clusterclip.grouping import annotate, group_corpus, original, verify_groups
from clusterclip.workdir import Workdir


def _corpus(tmp_path, n, rng):
    path = tmp_path / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = {"text": "" if i % 7 == 3 else f"document {i} é", "label": f"src{i % 3}"}
            f.write(json.dumps(rec) + "\n")
    corpus = Corpus.scan([path], progress=False)
    labels = rng.integers(0, 5, size=n).astype(np.int32)
    labels[~corpus.valid] = -1
    scores = rng.random(n).astype(np.float32)
    return corpus, labels, scores


def _read(out):
    recs = []
    for f in sorted(out.glob("*/data_*.jsonl")):
        recs += [(f.parent.name, f.name, json.loads(line)) for line in f.open(encoding="utf-8")]
    return recs


def test_every_document_exactly_once_in_its_cluster(tmp_path):
    corpus, labels, scores = _corpus(tmp_path, 50, np.random.default_rng(0))
    out = tmp_path / "grouped"
    summary = group_corpus(corpus, labels, scores, out, docs_per_file=4, progress=False)
    recs = _read(out)
    assert sorted(r["doc_index"] for _, _, r in recs) == list(range(50))
    for folder, _, r in recs:
        k = labels[r["doc_index"]]
        assert folder == (f"cluster_{k}" if k >= 0 else "excluded")
        assert r["label"] == k
        assert r["orig_label"] == f"src{r['doc_index'] % 3}"  # input field kept, not clobbered
    # files hold at most docs_per_file documents, numbered from 0 without gaps
    for folder in {f for f, _, _ in recs}:
        names = sorted(out.glob(f"{folder}/data_*.jsonl"))
        sizes = [sum(1 for _ in p.open()) for p in names]
        assert all(s <= 4 for s in sizes) and all(s == 4 for s in sizes[:-1])
        assert {p.name for p in names} == {f"data_{j}.jsonl" for j in range(len(names))}
    assert summary["documents"] == 50
    assert sum(summary["groups"].values()) == 50
    assert json.loads((out / "group.json").read_text())["verified"]["exactly_once"]


def test_same_input_gives_identical_bytes(tmp_path):
    corpus, labels, scores = _corpus(tmp_path, 30, np.random.default_rng(1))
    group_corpus(corpus, labels, scores, tmp_path / "a", buffer_bytes=64, progress=False)
    group_corpus(corpus, labels, scores, tmp_path / "b", progress=False)
    a, b = _read(tmp_path / "a"), _read(tmp_path / "b")
    assert a == b


def test_verification_catches_a_lost_and_a_repeated_document(tmp_path):
    corpus, labels, scores = _corpus(tmp_path, 20, np.random.default_rng(2))
    out = tmp_path / "g"
    group_corpus(corpus, labels, scores, out, progress=False)
    victim = sorted(out.glob("cluster_*/data_0.jsonl"))[0]
    lines = victim.read_text(encoding="utf-8").splitlines(keepends=True)
    victim.write_text("".join(lines[1:]), encoding="utf-8")
    with pytest.raises(RuntimeError, match="misses 1 of 20"):
        verify_groups(out, 20)
    victim.write_text("".join(lines + lines[:1]), encoding="utf-8")
    with pytest.raises(RuntimeError, match="repeated"):
        verify_groups(out, 20)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from(["text", "label", "score", "doc_index", "x", "orig_x",
                                        "orig_label", "orig_orig_score", "orig_doc_index",
                                        "orig_"]),
                       st.one_of(st.none(), st.integers(), st.text(max_size=5))),
       st.integers(0, 10**6), st.integers(-1, 100))
def test_annotate_round_trips_to_the_original_record(rec, index, label):
    out = annotate(index, rec, label, None if label < 0 else 0.5)
    assert out["label"] == label and out["doc_index"] == index
    assert original(json.loads(json.dumps(out))) == (index, rec)


def _workdir(tmp_path):
    corpus, labels, scores = _corpus(tmp_path, 25, np.random.default_rng(3))
    w = Workdir(tmp_path / "w")
    corpus.save(w.path("corpus"))
    np.save(w.path("labels.npy"), labels)
    np.save(w.path("scores.npy"), scores)
    return w, labels


def test_cli_groups_a_workdir(tmp_path, capsys):
    w, labels = _workdir(tmp_path)
    assert main(["group", "--workdir", str(w.root), "--out", str(tmp_path / "out")]) == 0
    assert len(_read(tmp_path / "out")) == 25
    assert str(tmp_path / "out") in capsys.readouterr().out


def test_cli_mismatched_labels_exit_2_and_leave_no_output(tmp_path, capsys):
    w, labels = _workdir(tmp_path)
    np.save(w.path("labels.npy"), labels[:-1])
    assert main(["group", "--workdir", str(w.root), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "24" in err and "25" in err
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out*"))
