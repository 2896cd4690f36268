"""Token budgets: ``--num-tokens``, ``--balance-by tokens``, ``--tokenizer`` (cached counts).

The budget's invariant is checked against a slow reference that walks the
sampler one index at a time; token counts against the tokenizer called on each
text alone; the cache against real reruns of ``clusterclip run``.
"""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
from _helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterclip import ClusterClipSampler
from clusterclip.cli import main
from clusterclip.sampling import write_schedule
from clusterclip.sampling.budget import token_balanced_weights
from clusterclip.sampling.sampler import LENGTH_DEPENDENT_STRATEGIES, STRATEGIES
from clusterclip.tokens import estimate_tokens

CLUSTER_STRATEGIES = tuple(s for s in STRATEGIES if s != "random")


def _reference_prefix(labels, tokens, budget, t_max, **kw):
    """Slow reference: the sampler's schedule one index at a time until the budget is met."""
    out, have = [], 0
    for i in ClusterClipSampler(labels, t_max, **kw):
        out.append(i)
        have += int(tokens[i])
        if have >= budget:
            return out
    return None


def _full_tokens(labels, tokens, t, **kw):
    return sum(int(tokens[i]) for i in ClusterClipSampler(labels, t, **kw))


@st.composite
def _case(draw):
    k = draw(st.integers(1, 6))
    n = draw(st.integers(k, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    labels = rng.integers(-1, k, n)
    labels[0] = max(labels[0], 0)  # at least one eligible document
    tokens = rng.integers(1, draw(st.integers(2, 80)), n)
    strategy = draw(st.sampled_from(STRATEGIES))
    balance = "docs" if strategy == "random" else draw(st.sampled_from(("docs", "tokens")))
    clip = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    eligible = int(tokens[labels >= 0].sum())
    budget = draw(st.integers(1, clip * eligible if strategy in ("clusterclip", "paced")
                              else 4 * eligible))
    return labels, tokens, strategy, balance, clip, seed, budget


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_budget_ends_at_the_first_position_reaching_it(tmp_path_factory, case):
    """Cumulative tokens reach B at the last position and not before; the schedule is the
    strategy's own (a prefix for strategies independent of T; for paced, T's schedule where
    T's reaches B and T - 1's does not); the summary describes what was written."""
    labels, tokens, strategy, balance, clip, seed, budget = case
    path = tmp_path_factory.mktemp("b") / "s.npy"
    s = write_schedule(labels, path, num_tokens=budget, doc_tokens=tokens, strategy=strategy,
                       balance_by=balance, clip=clip, seed=seed)
    got = np.load(path)
    cum = np.cumsum(tokens[got])
    assert cum[-1] >= budget and (got.size == 1 or cum[-2] < budget)
    assert s["num_samples"] == s["written"] == got.size and s["schedule_tokens"] == cum[-1]
    kw = {"strategy": strategy, "seed": seed}
    if strategy in ("clusterclip", "paced"):
        kw["clip"] = clip
    if balance == "tokens":
        kw["cluster_weights"] = token_balanced_weights(labels, tokens, 0.0, labels.max() + 1)
    if strategy in LENGTH_DEPENDENT_STRATEGIES:
        t = s.get("sampler_num_samples", got.size)
        full = list(ClusterClipSampler(labels, t, **kw))
        assert got.tolist() == full[:got.size]
        assert _full_tokens(labels, tokens, t, **kw) >= budget
        assert t == 1 or _full_tokens(labels, tokens, t - 1, **kw) < budget
    else:
        t_max = clip * int((labels >= 0).sum()) if strategy == "clusterclip" else 10**9
        assert got.tolist() == _reference_prefix(labels, tokens, budget, t_max, **kw)
    counts = np.bincount(got, minlength=labels.size)
    assert s["max_repetition"] == counts.max() and s["documents_seen"] == (counts > 0).sum()


def test_paced_budget_cuts_the_last_draws_of_its_length_and_says_so(tmp_path, capsys):
    """paced's T schedule reaches B only at T, but its last positions hold other draws than
    the one T added: the schedule ends at the first position reaching B (n < T)."""
    rng = np.random.default_rng(0)
    labels, tokens = rng.integers(0, 5, 120), rng.integers(1, 60, 120)
    budget = int(rng.integers(50, 3 * tokens.sum()))
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "tokens.npy", tokens)
    assert _sample(tmp_path, "--num-tokens", str(budget), "--strategy", "paced", "--clip", "3",
                   "--summary-json", str(tmp_path / "s.json")) == 0
    s = json.loads((tmp_path / "s.json").read_text())
    t, n = s["sampler_num_samples"], s["num_samples"]
    assert n < t
    got = np.load(tmp_path / "s.npy")
    full = np.array(list(ClusterClipSampler(labels, t, strategy="paced", clip=3)))
    assert got.tolist() == full[:n].tolist()
    assert tokens[full].sum() >= budget > _full_tokens(labels, tokens, t - 1, strategy="paced",
                                                       clip=3)
    assert f"the first {n:,} of a {t:,}-position paced schedule" in capsys.readouterr().out
    assert all(p < n for _, p in s["clip_events"])


def test_balance_by_tokens_equalises_cluster_tokens_through_the_sampler(tmp_path):
    """uniform + tokens: the sampler gets w_k ∝ 1 / mean tokens of k, so expected tokens per
    cluster are equal (exactly, per draw); drawn, they are equal within sampling error, and
    far from it when balancing documents."""
    rng = np.random.default_rng(3)
    sizes = [30, 300, 90, 600]
    labels = np.repeat(np.arange(4), sizes)
    tokens = rng.integers(1, 2 * np.array([40, 900, 250, 70])[labels]) + 1
    shares = {}
    for balance in ("docs", "tokens"):
        s = write_schedule(labels, tmp_path / "s.npy", num_samples=60_000, doc_tokens=tokens,
                           strategy="uniform", balance_by=balance, seed=1)
        assert s["balance_by"] == balance
        got = np.load(tmp_path / "s.npy")
        per = np.bincount(labels[got], weights=tokens[got], minlength=4)
        shares[balance] = per / per.sum()
    w = token_balanced_weights(labels, tokens)
    mean = np.bincount(labels, weights=tokens) / np.bincount(labels)
    np.testing.assert_allclose(w * mean / (w * mean).sum(), 0.25, rtol=1e-12)
    np.testing.assert_allclose(shares["tokens"], 0.25, atol=0.02)
    assert shares["docs"].max() / shares["docs"].min() > 5


# -- the command line ---------------------------------------------------------------------
@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(-1, 8, 600)
    tokens = rng.integers(1, 400, 600)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "tokens.npy", tokens)
    return tmp_path, labels, tokens


def _sample(tmp, *extra, out="s.npy"):
    try:
        return main(["sample", "--labels", str(tmp / "labels.npy"), "--tokens",
                     str(tmp / "tokens.npy"), "--out", str(tmp / out), "--no-progress", *extra])
    except SystemExit as e:  # argparse's own errors
        return e.code


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cli_budget_is_byte_deterministic_and_ranks_interleave(files, strategy, capsys):
    tmp, labels, tokens = files
    budget = int(tokens[labels >= 0].sum() * 1.5)
    args = ["--num-tokens", str(budget), "--strategy", strategy, "--seed", "7",
            *([] if strategy == "random" else ["--balance-by", "tokens"])]
    assert _sample(tmp, *args, "--summary-json", str(tmp / "a.json"), out="a.npy") == 0
    assert _sample(tmp, *args, "--summary-json", str(tmp / "b.json"), out="b.npy") == 0
    assert (tmp / "a.npy").read_bytes() == (tmp / "b.npy").read_bytes()
    assert (tmp / "a.json").read_bytes() == (tmp / "b.json").read_bytes()
    full = np.load(tmp / "a.npy")
    cum = np.cumsum(tokens[full])
    assert cum[-1] >= budget > cum[-2]
    text = capsys.readouterr().out
    assert f"budget {budget:,}, reached at global position {full.size:,}" in text
    assert f"token count: counts from {(tmp / 'tokens.npy').resolve()}" in text
    parts = []
    for r in range(3):
        assert _sample(tmp, *args, "--rank", str(r), "--world-size", "3", out=f"r{r}.npy") == 0
        parts.append(np.load(tmp / f"r{r}.npy"))
    assert np.stack(parts, axis=1).reshape(-1).tolist() == full[:full.size // 3 * 3].tolist()
    # resuming at a global position continues the same budgeted schedule
    assert _sample(tmp, *args, "--consumed-samples", "5", out="rest.npy") == 0
    assert np.load(tmp / "rest.npy").tolist() == full[5:].tolist()
    assert _sample(tmp, *args, "--consumed-samples", str(full.size + 1), out="no.npy") == 2
    assert f"exceeds the {full.size} positions of the schedule for --num-tokens {budget}" in \
        capsys.readouterr().err


@pytest.mark.parametrize("extra, pattern", [
    (["--num-tokens", "100", "--num-samples", "5"],
     "argument --num-samples: not allowed with argument --num-tokens"),
    (["--num-tokens", "10000000", "--clip", "2"], "exceeds what paced can supply with "
     "--clip 2: 2 x "),
    (["--num-tokens", "0"], "error: --num-tokens: 0 is out of range (an integer in 1 .. "),
    (["--num-samples", "50", "--balance-by", "tokens", "--strategy", "random"],
     "strategy random does not draw by cluster"),
    (["--num-tokens", "50", "--tokenizer", "/nonexistent"],
     "give one of --tokenizer and --tokens, not both"),
])
def test_cli_errors_are_one_line_exit_2_and_write_nothing(files, extra, pattern, capsys):
    tmp, _, _ = files
    assert _sample(tmp, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and pattern in err
    assert not (tmp / "s.npy").exists()


def test_capacity_error_states_the_numbers(files, capsys):
    tmp, labels, tokens = files
    total = int(tokens[labels >= 0].sum())
    assert _sample(tmp, "--num-tokens", str(2 * total + 1), "--clip", "2") == 2
    err = capsys.readouterr().err
    assert f"2 x {total:,} tokens of the {(labels >= 0).sum():,} eligible documents = " \
           f"{2 * total:,}; the smallest --clip that serves it is 3, the largest " \
           f"--num-tokens that --clip 2 allows is {2 * total:,}" in err
    assert _sample(tmp, "--num-tokens", str(2 * total), "--clip", "2") == 0  # exactly fits
    assert _sample(tmp, "--num-tokens", str(2 * total + 1), "--clip", "3") == 0


def test_token_counts_outside_a_workdir_need_tokens_file(files, capsys):
    tmp, _, _ = files
    np.save(tmp / "short.npy", np.ones(5, np.int64))
    rc = main(["sample", "--labels", str(tmp / "labels.npy"), "--num-tokens", "10",
               "--out", str(tmp / "s.npy")])
    assert rc == 2 and "give --tokens T.npy" in capsys.readouterr().err
    rc = main(["sample", "--labels", str(tmp / "labels.npy"), "--num-tokens", "10",
               "--tokens", str(tmp / "short.npy"), "--out", str(tmp / "s.npy")])
    assert rc == 2 and "5 token counts but the labels have 600" in capsys.readouterr().err
    rc = main(["sample", "--labels", str(tmp / "labels.npy"), "--num-samples", "10",
               "--tokens", str(tmp / "tokens.npy"), "--out", str(tmp / "s.npy")])
    assert rc == 2 and "--tokens applies only with --num-tokens or --balance-by tokens" in \
        capsys.readouterr().err
    assert not (tmp / "s.npy").exists()


def test_help_shows_the_defaults():
    for cmd in ("sample", "run"):
        r = run_cli(cmd, "--help")
        assert r.returncode == 0
        text = " ".join(r.stdout.split())
        assert "--balance-by {docs,tokens}" in text and "(default: docs)" in text
        assert "--num-tokens B" in text and "--tokenizer PATH" in text


# -- a real work directory ----------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory, pydocs_path):
    """60 real documents (one without text), as JSONL."""
    path = tmp_path_factory.mktemp("tok") / "docs.jsonl"
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        recs = [json.loads(line) for _, line in zip(range(60), src, strict=False)]
    recs[7]["text"] = " "
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer_path():
    from clusterclip.embedding.transformer import bundled_minilm_path

    return bundled_minilm_path()


def _run(corpus, w, *extra):
    return main(["run", str(corpus), "--workdir", str(w), "--clusters", "4", "--embedder",
                 "fast", *extra])


def test_estimate_is_characters_over_4_of_the_index(corpus, tmp_path):
    from clusterclip.corpus import Corpus

    c = Corpus.scan(corpus, progress=False)
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    want = [math.ceil(len(t) / 4) if t.strip() else 0 for t in texts]
    assert estimate_tokens(c.text_lengths, c.valid).tolist() == want


def test_run_budget_uses_the_estimate_and_equals_sample(corpus, tmp_path, capsys):
    w = tmp_path / "W"
    assert _run(corpus, w, "--num-tokens", "40000", "--strategy", "paced",
                "--balance-by", "tokens") == 0
    assert "token count: estimated as ceil(characters / 4) per document" in capsys.readouterr().out
    sched = np.load(w / "schedule.npy")
    assert main(["sample", "--labels", str(w / "labels.npy"), "--num-tokens", "40000",
                 "--strategy", "paced", "--balance-by", "tokens", "--out",
                 str(tmp_path / "s.npy"), "--no-progress"]) == 0
    assert np.array_equal(np.load(tmp_path / "s.npy"), sched)
    np.save(tmp_path / "t.npy", np.ones(len(sched), np.int64))  # one way per case
    assert main(["sample", "--labels", str(w / "labels.npy"), "--num-tokens", "100",
                 "--tokens", str(tmp_path / "t.npy"), "--out", str(tmp_path / "x.npy")]) == 2
    assert "--tokens is for labels outside a work directory" in capsys.readouterr().err
    from clusterclip.corpus import Corpus

    c = Corpus.load(w / "corpus")
    cum = np.cumsum(estimate_tokens(c.text_lengths, c.valid)[sched])
    assert cum[-1] >= 40000 > cum[-2]
    params = json.loads((w / "manifest.json").read_text())["stages"]["sample"]["params"]
    assert params["num_tokens"] == 40000 and params["balance_by"] == "tokens"
    assert params["token_counts"]["method"] == "estimate"


def test_tokenizer_counts_are_cached_and_recounted_when_the_corpus_changes(
        corpus, tmp_path, tokenizer_path, capsys):
    from clusterclip.tokens import load_tokenizer

    tok = load_tokenizer(tokenizer_path)

    def reference(path):  # each text alone, no special tokens
        return [len(tok(json.loads(line)["text"], add_special_tokens=False)["input_ids"])
                if json.loads(line)["text"].strip() else 0
                for line in path.read_text().splitlines()]

    src = tmp_path / "docs.jsonl"
    src.write_bytes(corpus.read_bytes())
    w = tmp_path / "W"
    args = ["--num-tokens", "30000", "--tokenizer", str(tokenizer_path)]
    assert _run(src, w, *args) == 0
    counts = np.load(w / "tokens.npy")
    assert counts.dtype == np.int64 and counts.tolist() == reference(src)
    sched = np.load(w / "schedule.npy")
    cum = np.cumsum(counts[sched])
    assert cum[-1] >= 30000 > cum[-2]
    out = capsys.readouterr().out
    assert f"token count: counted with the tokenizer at {tokenizer_path}" in out
    stamp = (w / "tokens.npy").stat().st_mtime_ns
    # rerun with the budget changed: the counts are reused, the schedule is not
    assert _run(src, w, "--num-tokens", "20000", "--tokenizer", str(tokenizer_path)) == 0
    assert (w / "tokens.npy").stat().st_mtime_ns == stamp
    assert np.cumsum(counts[np.load(w / "schedule.npy")])[-1] < cum[-1]
    # a changed input: the corpus is re-indexed and the counts recounted
    lines = src.read_text().splitlines()
    rec = json.loads(lines[3])
    rec["text"] += " extra words appended to change the count"
    lines[3] = json.dumps(rec)
    src.write_text("\n".join(lines) + "\n")
    assert _run(src, w, *args) == 0
    assert np.load(w / "tokens.npy").tolist() == reference(src) != counts.tolist()
    # the report counts in the same tokens and says so
    assert main(["report", "--workdir", str(w), "--strategies", "none"]) == 0
    summary = json.loads((w / "report" / "summary.json").read_text())
    assert summary["token_counts"]["method"] == "tokenizer"
    new = np.load(w / "tokens.npy")
    sched = np.load(w / "schedule.npy")
    assert summary["schedules"]["schedule"]["tokens"] == new[sched].sum()
    md = (w / "report" / "report.md").read_text()
    assert f"tokens counted with the tokenizer at {tokenizer_path}" in md


def test_report_token_shares_per_cluster(corpus, tmp_path):
    """clusters.csv: each cluster's token share in the schedule and in the corpus, equal to
    the shares computed from the schedule and the estimate; summary.json: the quartiles."""
    import csv

    from clusterclip.corpus import Corpus
    from clusterclip.sampling.clip import quartile_clusters

    w = tmp_path / "W"
    assert _run(corpus, w, "--num-samples", "150") == 0
    assert main(["report", "--workdir", str(w), "--strategies", "uniform"]) == 0
    c = Corpus.load(w / "corpus")
    tokens = estimate_tokens(c.text_lengths, c.valid)
    labels = np.load(w / "labels.npy")
    k = int(labels.max()) + 1
    with open(w / "report" / "clusters.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))  # the text columns (terms, snippets) are CSV-quoted
    table = {name: np.array([float(r[name]) for r in rows]) for name in
             ("schedule_token_share", "corpus_token_share", "uniform_token_share")}
    sched = np.load(w / "schedule.npy")
    per = np.bincount(labels[sched], weights=tokens[sched], minlength=k)
    np.testing.assert_allclose(table["schedule_token_share"], per / per.sum(), rtol=1e-5)
    keep = labels >= 0
    corpus_per = np.bincount(labels[keep], weights=tokens[keep], minlength=k)
    np.testing.assert_allclose(table["corpus_token_share"], corpus_per / corpus_per.sum(),
                               rtol=1e-5)
    assert table["uniform_token_share"].sum() == pytest.approx(1.0, abs=1e-4)
    summary = json.loads((w / "report" / "summary.json").read_text())
    assert summary["token_counts"]["method"] == "estimate"
    tail, _ = quartile_clusters(np.bincount(labels[keep], minlength=k))
    assert summary["corpus_token_shares"]["tail_quartile_token_share"] == pytest.approx(
        corpus_per[tail].sum() / corpus_per.sum(), rel=1e-5)
    assert summary["schedules"]["schedule"]["tokens"] == tokens[sched].sum()
