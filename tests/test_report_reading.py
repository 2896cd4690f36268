"""The report's one pass over the corpus (clusterclip.report.reading): the term counts of the
sampled texts and the field codes of every document are those of reading each separately,
however the files are cut into pieces and however many worker processes read them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.corpus import Corpus
from clusterclip.report import reading
from clusterclip.report.terms import TermCounts, count_terms

WORDS = ["alpha", "beta", "gamma", "delta", "os.path", "__init__", "the", "x1"]
TOPICS = st.one_of(st.none(), st.just("MISSING"), st.sampled_from(["a", "b", "c"]),
                   st.integers(0, 2))
DOCS = st.lists(st.tuples(st.lists(st.sampled_from(WORDS), max_size=5), TOPICS,
                          st.integers(-1, 2), st.booleans()), min_size=1, max_size=30)


def _write(path: Path, rows: list[dict]) -> Path:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def _corpus(tmp: Path, docs, cuts: list[int], gz: list[bool]) -> Corpus:
    """``docs`` (words, topic, label, sampled) in files cut at ``cuts``, saved and loaded
    (so that worker processes can load it too)."""
    rows = [{"text": " ".join(w), **({} if t == "MISSING" else {"topic": t})}
            for w, t, _, _ in docs]
    bounds = [0, *sorted(set(cuts)), len(rows)]
    files = [_write(tmp / f"f{j}.jsonl{'.gz' if gz[j % len(gz)] else ''}", rows[a:b])
             for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)) if b > a]
    Corpus.scan(files, progress=False).save(tmp / "corpus")
    return Corpus.load(tmp / "corpus")


def _same_counts(got: TermCounts, want: TermCounts) -> None:
    assert got.terms.tolist() == want.terms.tolist()
    assert got.doc_freq.tolist() == want.doc_freq.tolist()
    assert (got.counts != want.counts).nnz == 0 and got.counts.shape == want.counts.shape


def _expected(corpus: Corpus, labels: np.ndarray, indices: np.ndarray, k: int) -> TermCounts:
    texts = [t for _, t in corpus.iter_texts_at(indices)]
    return count_terms([(labels[indices], texts)], k, 1, None)


def _case(docs):
    labels = np.array([lab for _, _, lab, _ in docs], dtype=np.int64)
    indices = np.array([i for i, (_, _, lab, s) in enumerate(docs) if s and lab >= 0],
                       dtype=np.int64)
    return labels, indices


@settings(max_examples=40, deadline=None)
@given(docs=DOCS, cuts=st.lists(st.integers(0, 30), max_size=2),
       gz=st.lists(st.booleans(), min_size=1, max_size=3), parts=st.integers(1, 6),
       block=st.integers(1, 5), field=st.booleans())
def test_one_pass_equals_separate_reads_however_cut(tmp_path_factory, docs, cuts, gz, parts,
                                                    block, field):
    corpus = _corpus(tmp_path_factory.mktemp("r"), docs, [c for c in cuts if c < len(docs)],
                     gz)
    labels, indices = _case(docs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reading, "PIECES_PER_WORKER", parts)
        got = reading.read_corpus(corpus, labels, indices, 3, "topic" if field else None,
                                  workers=1, block=block)
    _same_counts(got.counts, _expected(corpus, labels, indices, 3))
    if field:
        codes, values = corpus.field_codes("topic")
        assert got.codes.tolist() == codes.tolist() and got.values == values
    else:
        assert got.codes is None and got.values is None


def test_pieces_cover_the_documents_in_file_order_and_shares_balance(tmp_path):
    docs = [(["alpha"], "a", i % 3, i % 2 == 0) for i in range(40)]
    corpus = _corpus(tmp_path, docs, [10, 25], [False, True, False])
    labels, indices = _case(docs)
    whole = reading.pieces(corpus, indices, labels[indices], True, 6)
    assert [p.start for p in whole][0] == 0 and whole[-1].stop == 40
    assert all(a.stop == b.start for a, b in zip(whole[:-1], whole[1:], strict=True))
    # the gzip file (documents 10-24) is one piece: it is decompressed from its start
    assert any(p.start == 10 and p.stop == 25 for p in whole)
    some = reading.pieces(corpus, indices, labels[indices], False, 6)
    assert np.concatenate([p.indices for p in some]).tolist() == indices.tolist()
    assert reading.report_workers(None, reading.POOL_MIN_DOCUMENTS - 1) == 1
    assert reading.report_workers(3, 1) == 3


def test_worker_processes_give_the_one_process_result(tmp_path):
    rng = np.random.default_rng(5)
    docs = [(list(rng.choice(WORDS, 4)), ["a", "b", None, 7, "MISSING"][i % 5],
             int(rng.integers(-1, 3)), bool(rng.random() < 0.6)) for i in range(300)]
    corpus = _corpus(tmp_path, docs, [120, 200], [False, True, False])
    labels, indices = _case(docs)
    one = reading.read_corpus(corpus, labels, indices, 3, "topic", workers=1)
    two = reading.read_corpus(corpus, labels, indices, 3, "topic", workers=2, block=7)
    _same_counts(two.counts, one.counts)
    _same_counts(one.counts, _expected(corpus, labels, indices, 3))
    assert two.codes.tolist() == one.codes.tolist() and two.values == one.values
    codes, values = corpus.field_codes("topic")
    assert one.codes.tolist() == codes.tolist() and one.values == values


@pytest.mark.parametrize("enabled", [True, False])
def test_in_background_returns_the_result_or_its_error(enabled):
    import threading

    from clusterclip.pool import in_background

    ran_in = []

    def work():
        ran_in.append(threading.current_thread() is threading.main_thread())
        return 42

    with in_background(work, enabled) as result:
        assert result() == 42
    assert ran_in == [not enabled]

    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"), in_background(fail, enabled) as result:
        result()
    # Leaving the block normally waits for the thread; by an error (Ctrl-C) it does not.
    done = threading.Event()
    with in_background(lambda: done.wait(0.2) or done.set(), enabled):
        pass
    assert done.is_set() == enabled
    release, finished = threading.Event(), threading.Event()

    def slow():
        release.wait(10)
        finished.set()

    with pytest.raises(KeyError), in_background(slow, enabled):
        raise KeyError("main")
    assert not finished.is_set()  # it would be, had the block waited for the thread
    release.set()
