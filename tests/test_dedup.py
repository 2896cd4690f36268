"""``clusterclip dedup``: near-duplicate groups against a one-pair-at-a-time reference,
the stage's caching and errors, and planted copies of real texts grouped."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clusterclip import dedup
from clusterclip.cli import main


def reference_groups(X: np.ndarray, labels: np.ndarray, t: float) -> np.ndarray:
    """Union-find over every pair of the same cluster, one pair at a time (float64)."""
    n = labels.size
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    X64 = X.astype(np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            if labels[i] >= 0 and labels[i] == labels[j] and X64[i] @ X64[j] >= t:
                a, b = find(i), find(j)
                parent[max(a, b)] = min(a, b)
    out = np.array([find(i) for i in range(n)], dtype=np.int64)
    out[labels < 0] = -1
    return out


@st.composite
def planted(draw):
    """Embeddings with copies (small noise) and chains of copies, in a few clusters."""
    n_base = draw(st.integers(1, 12))
    d = 8
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    rows = list(rng.standard_normal((n_base, d)))
    for _ in range(draw(st.integers(0, 20))):  # a copy of any earlier row (chains too)
        src = draw(st.integers(0, len(rows) - 1))
        rows.append(rows[src] + 0.05 * rng.standard_normal(d))
    X = np.array(rows)
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    perm = rng.permutation(len(rows))
    X = X[perm]
    labels = np.array(draw(st.lists(st.integers(-1, 2), min_size=len(rows),
                                    max_size=len(rows))), dtype=np.int32)
    assume((labels >= 0).any())
    return X, labels


@settings(max_examples=60, deadline=None)
@given(planted(), st.sampled_from([0.5, 0.9, 0.99]), st.booleans())
def test_groups_equal_reference_for_any_tiling(data, t, resident):
    X, labels = data
    S = X.astype(np.float64) @ X.T.astype(np.float64)
    assume(np.abs(S - t).min() > 1e-4)  # no pair at the threshold within float32 rounding
    with pytest.MonkeyPatch.context() as m:  # tiles of 3 x 5: every tile shape and edge case
        m.setattr(dedup, "TILE_ROWS", 3)
        m.setattr(dedup, "TILE_COLS", 5)
        m.setattr(dedup, "RESIDENT_BYTES", 1 << 20 if resident else 0)
        groups, pairs = dedup.near_duplicate_groups(X, labels, t)
    ref = reference_groups(X, labels, t)
    assert groups.dtype == np.int64
    assert np.array_equal(groups, ref)
    same = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
    assert pairs == int(np.triu(same & (S >= t), 1).sum())


def test_threshold_outside_range_is_refused():
    for bad in (0, -0.1, 1.5, float("nan"), True):
        with pytest.raises(dedup.InputError, match="threshold"):
            dedup.check_threshold(bad)
    assert dedup.check_threshold(1) == 1.0


@pytest.mark.parametrize("t", [0.9, 0.95, 0.9999999, 0.99999999, 1.0])
def test_summary_says_the_threshold_that_was_used(t):
    """The printed threshold reads back as the one used (0.9999999 is not "1")."""
    line = dedup.format_summary({"threshold": t, "eligible_documents": 10, "groups": 9,
                                 "duplicate_groups": 1, "documents_in_duplicate_groups": 2,
                                 "redundant_documents": 1, "largest_group_size": 2})
    assert float(re.search(r"cosine >= ([\d.e+-]+),", line).group(1)) == t


def _blobs(n: int = 300, d: int = 12, k: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((k, d))[rng.integers(0, k, n)] + 0.4 * rng.standard_normal((n, d))
    X[n - 20:] = X[:20] + 0.01 * rng.standard_normal((20, d))  # 20 planted copies
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def workdir(tmp_path):
    W = tmp_path / "W"
    W.mkdir()
    np.save(W / "embeddings.npy", _blobs())
    valid = np.ones(300, dtype=bool)
    valid[50:60] = False
    np.save(W / "valid.npy", valid)
    return W


def test_stage_writes_groups_caches_and_refuses(workdir, capsys):
    args = ["dedup", "--workdir", str(workdir), "--no-progress"]
    assert main(args) == 2  # no cluster stage yet
    assert "clusterclip cluster" in capsys.readouterr().err
    assert main(["cluster", "--workdir", str(workdir), "--clusters", "3"]) == 0
    assert main(args + ["--threshold", "1.2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --threshold: 1.2 is out of range" in err
    assert not (workdir / "groups.npy").exists()
    assert main(args) == 0
    g = np.load(workdir / "groups.npy")
    labels = np.load(workdir / "labels.npy")
    X = np.load(workdir / "embeddings.npy")
    assert np.array_equal(g, reference_groups(X, labels, 0.95))
    assert (g[50:60] == -1).all()
    copies = np.arange(280, 300)
    assert (g[copies] == g[np.arange(20)]).all()  # each planted copy with its source
    s = json.loads((workdir / "dedup.json").read_text())
    assert s["redundant_documents"] == s["eligible_documents"] - s["groups"] >= 20
    assert s["largest_groups"][0]["size"] == s["largest_group_size"] >= 2
    first_group = s["largest_groups"][0]  # the cluster id is `label`, as in every output
    assert first_group["label"] == labels[first_group["group"]] and "cluster" not in first_group
    first = (workdir / "groups.npy").read_bytes()
    capsys.readouterr()
    assert main(args) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(args + ["--threshold", "0.5"]) == 0
    assert (workdir / "groups.npy").read_bytes() != first
    assert main(args) == 0  # back to 0.95: recomputed, byte-identical
    assert (workdir / "groups.npy").read_bytes() == first


def test_planted_copies_of_real_texts_are_grouped(tmp_path, pydocs_path):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(400), f, strict=False)]
    texts, source = dedup.plant_near_duplicates(texts, 40, seed=1)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    W = tmp_path / "W"
    assert main(["run", str(corpus), "--workdir", str(W), "--clusters", "4",
                 "--embedder", "fast"]) == 0
    assert main(["dedup", "--workdir", str(W), "--no-progress"]) == 0
    g = np.load(W / "groups.npy")
    copies = 400 + np.arange(40)
    assert (g[copies] == g[source]).mean() >= 0.9  # recall of the planted copies
    s = json.loads((W / "dedup.json").read_text())
    assert all("text" in e for grp in s["largest_groups"] for e in grp["examples"])


def test_keep_one_writes_one_document_per_group_nearest_the_centroid(tmp_path, pydocs_path):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(200), f, strict=False)]
    texts, source = dedup.plant_near_duplicates(texts, 20, seed=3)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t, "n": i}) + "\n"
                              for i, t in enumerate(texts)))
    W, out = tmp_path / "W", tmp_path / "dedup_out"
    assert main(["run", str(corpus), "--workdir", str(W), "--clusters", "3",
                 "--embedder", "fast"]) == 0
    users = tmp_path / "users"
    users.mkdir()
    (users / "keep.txt").write_text("mine")
    assert main(["dedup", "--workdir", str(W), "--no-progress", "--keep-one", str(users)]) == 2
    assert (users / "keep.txt").read_text() == "mine" and not (W / "groups.npy").exists()
    assert main(["dedup", "--workdir", str(W), "--no-progress", "--keep-one", str(out)]) == 0
    g = np.load(W / "groups.npy")
    scores = np.load(W / "scores.npy")
    kept = np.load(out / "kept.npy")
    recs = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert [r["n"] for r in recs] == kept.tolist()  # input records, corpus order
    assert all(r["text"] == texts[r["n"]] for r in recs)
    assert np.array_equal(np.sort(g[kept]), np.unique(g[g >= 0]))  # one per group
    for k in kept:
        members = np.flatnonzero(g == g[k])
        assert scores[k] == scores[members].max()
        assert k == members[scores[members] == scores[k]].min()
    copies = 200 + np.arange(20)
    together = g[copies] == g[source]
    assert not (np.isin(copies[together], kept) & np.isin(source[together], kept)).any()
    assert json.loads((out / "keep_one.json").read_text())["kept"] == kept.size
    assert main(["dedup", "--workdir", str(W), "--no-progress", "--keep-one", str(out)]) == 0


def test_groups_of_older_labels_are_refused(workdir, tmp_path, capsys):
    assert main(["cluster", "--workdir", str(workdir), "--clusters", "3"]) == 0
    assert main(["dedup", "--workdir", str(workdir), "--no-progress"]) == 0
    sample = ["sample", "--labels", str(workdir / "labels.npy"), "--groups",
              str(workdir / "groups.npy"), "--num-samples", "50", "--no-progress",
              "--out", str(tmp_path / "s.npy")]
    assert main(sample) == 0
    assert main(["cluster", "--workdir", str(workdir), "--clusters", "3", "--seed", "5"]) == 0
    capsys.readouterr()
    assert main(sample) == 2  # the groups were made from the old clusters
    err = capsys.readouterr().err
    assert "`dedup` are stale" in err and "clusterclip dedup" in err


# -- issue 16: exact copies join at every allowed threshold, 1 included ---------------------
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([8, 384]), st.sampled_from(["float32", "float16"]),
       st.sampled_from([0.5, 0.95, 0.9999, 1.0]))
def test_exact_copies_join_at_every_threshold(seed, d, dtype, t):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((6, d))
    base = (base / np.linalg.norm(base, axis=1, keepdims=True)).astype(np.float32).astype(dtype)
    source = rng.permutation(np.repeat(np.arange(6), rng.integers(1, 6, 6)))
    X = base[source]  # exact copies of the stored rows, as a repeated text gives
    labels = (source % 2).astype(np.int32)  # copies share their cluster
    groups, _ = dedup.near_duplicate_groups(X, labels, t)
    for s in range(6):
        assert np.unique(groups[source == s]).size <= 1  # all copies in one group
    if t == 1.0:  # at 1 exactly the copies: random directions are far apart
        assert np.unique(groups).size == np.unique(source).size


def test_threshold_1_joins_every_copy_and_the_schedule_clips_them_as_one(tmp_path, pydocs_path):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"][:400] for _, line in zip(range(40), f, strict=False)]
    docs = texts[:30] + [t for t in texts[30:35] for _ in range(10)]  # 5 texts, 10 copies each
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    W = tmp_path / "W"
    assert main(["run", str(corpus), "--workdir", str(W), "--clusters", "2", "--embedder",
                 "fast", "--dedup", "--dedup-threshold", "1", "--num-samples", "35",
                 "--clip", "1", "--strategy", "clusterclip"]) == 0
    g = np.load(W / "groups.npy")
    for c in range(5):
        copies = 30 + 10 * c + np.arange(10)
        assert np.unique(g[copies]).size == 1, g[copies]
    assert np.unique(g).size == 35
    drawn = np.load(W / "schedule.npy")
    assert np.bincount(g[drawn], minlength=len(docs)).max() == 1  # clip 1 per group
