"""The own-trainer loop at K = 64 (issue 36): ``search propose`` -> train -> ``search fit
--propose --format parquet`` -> train -> ``search fit --choose`` -> ``search propose
--verify`` -> train -> ``search fit --verdict``, with a trainer of the test's own (a byte
bigram model fitted to each exported run, in bits per byte), a target planted in the
corpus, and every refusal: one line, exit 2, nothing written."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from _helpers import rows_of, run_main, tokenizer_folder, write_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.cli import main

BUDGET = 300
K = 64


def bigram_bits_per_byte(train: list[str], evaluate: list[str]) -> float:
    """A byte bigram model (add-one counts) fitted to ``train``: its bits per byte on
    ``evaluate``."""
    counts = np.ones((256, 256))
    for t in train:
        b = np.frombuffer(t.encode("utf-8"), dtype=np.uint8)
        np.add.at(counts, (b[:-1], b[1:]), 1)
    logp = np.log2(counts / counts.sum(axis=1, keepdims=True))
    bits = n = 0.0
    for t in evaluate:
        b = np.frombuffer(t.encode("utf-8"), dtype=np.uint8)
        bits -= float(logp[b[:-1], b[1:]].sum())
        n += b.size - 1
    return bits / n


def train(folder: Path, table: str, evaluate: list[str]) -> list[list]:
    """The test's trainer on every run of ``folder/table``: reads ``runs/<run>/`` (Parquet)
    and writes the metrics rows (first column ``run``)."""
    import pyarrow.parquet as pq

    out: list[list] = [["run", "bpb"]]
    for row in rows_of(folder / table)[1:]:
        texts = pq.read_table(folder / "runs" / row[0]).column("text").to_pylist()
        out.append([row[0], repr(bigram_bits_per_byte(texts, evaluate))])
    return out


def texts_of(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def loop(tmp_path_factory, pydocs_path):
    """A work directory of 640 documents in 64 clusters (16 super-clusters) and a target
    of 30 of its documents (whitespace changed) plus 10 of its own; round 1 proposed with
    the target split in halves and exported as Parquet, trained, fitted with round 2
    proposed and exported, trained."""
    root = tmp_path_factory.mktemp("loop")
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        recs = [json.loads(next(f))["text"] for _ in range(700)]
    corpus, own = recs[:640], recs[640:650]
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": t[:600]}) + "\n"
                                             for t in corpus), encoding="utf-8")
    planted = [t[:600] for t in corpus[::21][:30]]
    (root / "t.jsonl").write_text("".join(json.dumps({"text": "  " + t.replace(" ", "  ")
                                                      + "\n"}) + "\n" for t in planted)
                                  + "".join(json.dumps({"text": t[:600]}) + "\n" for t in own),
                                  encoding="utf-8")
    w = root / "W"
    assert main(["run", str(root / "docs.jsonl"), "--workdir", str(w), "--clusters", str(K),
                 "--embedder", "fast", "--num-samples", "100", "--no-progress"]) == 0
    assert main(["search", "propose", "--workdir", str(w), "--target", str(root / "t.jsonl"),
                 "--split-target", "--runs", "12", "--num-samples", str(BUDGET),
                 "--format", "parquet", "--out", str(root / "P")]) == 0
    val = texts_of(root / "P" / "target_val.jsonl")
    m0 = write_rows(root / "M0.csv", train(root / "P", "ratios.csv", val))
    assert main(["search", "fit", "--ratios", str(root / "P" / "ratios.csv"), "--metrics",
                 str(m0), "--objective", "bpb", "--workdir", str(w), "--propose", "4",
                 "--format", "parquet", "--out", str(root / "F1")]) == 0
    m1 = write_rows(root / "M1.csv", train(root / "F1", "proposals.csv", val))
    return {"root": root, "W": w, "planted": planted, "M0": m0, "M1": m1,
            "tables": [root / "P" / "ratios.csv", root / "F1" / "proposals.csv"]}


def _same_schedule(capsys, w: Path, mixture: Path, schedule: Path, out: Path) -> np.ndarray:
    """``sample --mixture`` of ``mixture`` with its own budget and seed: equal to
    ``schedule`` byte for byte; returns it."""
    m = json.loads(mixture.read_text())
    rc, _, err = run_main(capsys, "sample", "--labels", w / "labels.npy", "--mixture", mixture,
                          "--num-samples", m["budget"]["num_samples"], "--seed", m["seed"],
                          "--out", out, "--no-progress")
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(out), np.load(schedule))
    return np.load(out)


def test_the_target_copies_are_counted_and_no_candidate_holds_one(loop, capsys):
    import pyarrow.parquet as pq

    from clusterclip.search.overlap import normalise

    root, w = loop["root"], loop["W"]
    record = json.loads((root / "P" / "round.json").read_text())
    overlap = record["target_overlap"]
    assert overlap["exact"] == 30 and overlap["target_docs"] == 40
    assert (root / "P" / "target_val.jsonl").is_file()
    assert (root / "P" / "target_test.jsonl").is_file()
    excluded = set(record["exclude"])
    planted = {normalise(t) for t in loop["planted"]}
    docs = texts_of(root / "docs.jsonl")
    assert {i for i, t in enumerate(docs) if normalise(t) in planted} <= excluded
    for folder, table in (("P", "ratios.csv"), ("F1", "proposals.csv")):
        for row in rows_of(root / folder / table)[1:]:
            t = pq.read_table(root / folder / "runs" / row[0])
            assert not planted & {normalise(x) for x in t.column("text").to_pylist()}
            mix = root / folder / "mixtures" / f"{row[0]}.json"
            assert set(json.loads(mix.read_text())["exclude"]) == excluded
            got = _same_schedule(capsys, w, mix, root / folder / "schedules" / f"{row[0]}.npy",
                                 root / "s.npy")
            assert not set(got.tolist()) & excluded
            summary = json.loads((root / folder / "runs" / row[0] / "_export.json").read_text())
            size = sum(len(x.encode("utf-8")) for x in t.column("text").to_pylist())
            assert summary["tokens"] == {"total": size, "unit": "utf-8 bytes",
                                         "method": summary["tokens"]["method"]}


def test_round_two_is_trainable_and_every_row_names_its_mixture(loop):
    import pyarrow.parquet as pq

    root = loop["root"]
    head = rows_of(root / "P" / "ratios.csv")[0]
    assert head[:2] == ["run", "super_cluster_0"] and head[-3:] == ["clip", "timing", "origin"]
    origins = [r[-1] for r in rows_of(root / "P" / "ratios.csv")[1:]]
    assert origins[:2] == ["natural", "uniform"] and "prior" in origins
    new = rows_of(root / "F1" / "proposals.csv")
    assert new[0] == head and len(new) == 5 and {r[-1] for r in new[1:]} == {"round 2"}
    for row in new[1:]:
        mix = json.loads((root / "F1" / "mixtures" / f"{row[0]}.json").read_text())
        w = np.array(mix["weights"])
        groups = np.array(json.loads((root / "F1" / "round.json").read_text())["groups"])
        g = np.bincount(groups, weights=w, minlength=16)
        np.testing.assert_allclose(g, [float(x) for x in row[1:17]], atol=1e-11)
        doc = np.array(pq.read_table(root / "F1" / "runs" / row[0]).column("doc_index"))
        np.testing.assert_array_equal(doc, np.load(root / "F1" / "schedules" / f"{row[0]}.npy"))


@pytest.mark.parametrize("round2_best", [False, True])
def test_the_chosen_mixture_is_the_trained_runs_file(loop, tmp_path, capsys, round2_best):
    """--choose writes the chosen run's own file (weights, clip, timing, exclusions, budget,
    seed) and `sample --mixture` of it reproduces the run's schedule; with metrics where
    round 2's runs are best, a round-2 run likewise."""
    root, w = loop["root"], loop["W"]
    m1 = loop["M1"]
    if round2_best:  # a metrics table in which round 2's runs are far the best
        rows = rows_of(m1)
        m1 = write_rows(tmp_path / "M1.csv", [rows[0]] + [[r[0], repr(float(r[1]) - 1.0)]
                                                          for r in rows[1:]])
    rc, out, err = run_main(capsys, "search", "fit", "--ratios", *loop["tables"], "--metrics",
                            loop["M0"], m1, "--objective", "bpb", "--workdir", w, "--choose",
                            "--out", tmp_path / "F")
    assert rc == 0, err
    assert "noise share" in out and "length scales at a bound" in out
    assert "caution: 16 runs, fewer than the 48" in out
    fit = json.loads((tmp_path / "F" / "fit.json").read_text())
    assert fit["runs"] == 16 and fit["bearing"]["caution"]
    chosen = json.loads((tmp_path / "F" / "mixture.json").read_text())
    run = fit["chosen"]["run"]
    folder = root / ("F1" if run in {r[0] for r in rows_of(loop["tables"][1])[1:]} else "P")
    if round2_best:
        assert folder.name == "F1"
    own = json.loads((folder / "mixtures" / f"{run}.json").read_text())
    for key in ("weights", "clip", "timing", "exclude", "budget", "seed", "run", "origin"):
        assert chosen[key] == own[key], key
    _same_schedule(capsys, w, tmp_path / "F" / "mixture.json",
                   folder / "schedules" / f"{run}.npy", tmp_path / "s.npy")


def test_the_verification_round_and_its_verdict_recomputed(loop, tmp_path, capsys):
    from scipy import stats

    root, w = loop["root"], loop["W"]
    rc, _, err = run_main(capsys, "search", "fit", "--ratios", *loop["tables"], "--metrics",
                          loop["M0"], loop["M1"], "--objective", "bpb", "--workdir", w,
                          "--choose", "--out", tmp_path / "F")
    assert rc == 0, err
    rc, out, err = run_main(capsys, "search", "propose", "--workdir", w, "--target",
                            root / "t.jsonl", "--verify", tmp_path / "F", "--seeds", 3,
                            "--num-samples", BUDGET, "--format", "parquet", "--out",
                            tmp_path / "V")
    assert rc == 0, err
    rows = rows_of(tmp_path / "V" / "ratios.csv")
    head = rows[0]
    arms = [r[head.index("arm")] for r in rows[1:]]
    seeds = [int(r[head.index("seed")]) for r in rows[1:]]
    assert sorted(set(arms)) == ["chosen", "natural", "prior"] and len(rows) == 10
    chosen_seed = json.loads((tmp_path / "F" / "mixture.json").read_text())["seed"]
    assert chosen_seed not in seeds and len(set(seeds)) == 3
    test = texts_of(root / "P" / "target_test.jsonl")
    mv = write_rows(tmp_path / "MV.csv", train(tmp_path / "V", "ratios.csv", test))
    rc, out, err = run_main(capsys, "search", "fit", "--verdict", "--ratios",
                            tmp_path / "V" / "ratios.csv", "--metrics", mv, "--objective", "bpb",
                            "--out", tmp_path / "VD")
    assert rc == 0, err
    verdict = json.loads((tmp_path / "VD" / "verdict.json").read_text())
    first = (tmp_path / "VD" / "verdict.md").read_text().splitlines()[0]
    assert first == verdict["decision"] and first in out
    # the target's copies in the corpus, kept out of every arm, said next to the decision
    from clusterclip.search.overlap import overlap_sentence

    overlap = json.loads((tmp_path / "V" / "round.json").read_text())["target_overlap"]
    assert overlap["exact"] + overlap["near"] > 0 and verdict["target_overlap"] == overlap
    second = (tmp_path / "VD" / "verdict.md").read_text().splitlines()[1]
    assert second == overlap_sentence(overlap) and second in out
    y = {r[0]: float(r[1]) for r in rows_of(mv)[1:]}
    by = {(a, s): y[r[0]] for a, s, r in zip(arms, seeds, rows[1:], strict=True)}
    raw = {}
    for arm in ("chosen", "prior"):
        d = np.array([by[(arm, s)] - by[("natural", s)] for s in sorted(set(seeds))])
        got = verdict["arms"][arm]
        np.testing.assert_allclose(got["differences"], d, rtol=0, atol=1e-15)
        t = stats.ttest_rel([by[(arm, s)] for s in sorted(set(seeds))],
                            [by[("natural", s)] for s in sorted(set(seeds))])
        half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
        assert got["low"] == pytest.approx(d.mean() - half) and got["p"] == pytest.approx(t.pvalue)
        raw[arm] = t.pvalue
    lo, hi = sorted(raw.values())
    holm = {a: min(1.0, 2 * p) if p == lo else max(min(1.0, 2 * lo), p) for a, p in raw.items()}
    for arm in raw:
        assert verdict["arms"][arm]["p_holm"] == pytest.approx(holm[arm])
    # the rule of every verdict: the chosen mixture against natural is the primary question,
    # decided by its own interval at 5%; the prior arm only after Holm's correction
    c, pr = verdict["arms"]["chosen"], verdict["arms"]["prior"]
    primary_measurable = c["low"] > 0 or c["high"] < 0
    assert c["measurable"] == primary_measurable
    if primary_measurable and c["mean"] < 0:
        want = "Use the chosen mixture"
    elif holm["prior"] < 0.05 and pr["mean"] < 0:
        want = "Use the prior arm's mixture"
    elif primary_measurable:
        want = "Keep natural sampling"
    else:
        want = "Not resolved at 3 seeds"
    assert first.startswith(want), first


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8), st.sampled_from([0.01, 0.05, 0.1]))
def test_holm_rejects_what_the_step_down_procedure_rejects(p, alpha):
    from clusterclip.verdict import holm

    adj = holm(p)
    order = sorted(range(len(p)), key=lambda i: (p[i], i))
    rejected = set()
    for rank, i in enumerate(order):  # Holm's procedure as published: stop at the first keep
        if p[i] > alpha / (len(p) - rank):
            break
        rejected.add(i)
    assert {i for i, a in enumerate(adj) if a <= alpha} == rejected
    assert all(a >= q for a, q in zip(adj, p, strict=True)) and max(adj) <= 1


@pytest.mark.parametrize("case", ["missing mixture file", "tables and metrics",
                                  "mismatched rounds", "verify without a fit",
                                  "clip out of range", "wide table"])
def test_loop_refusals_are_one_line_exit_2_and_write_nothing(loop, tmp_path, capsys, case):
    root, w = loop["root"], loop["W"]
    tables, metrics = list(loop["tables"]), [loop["M0"], loop["M1"]]
    args = None
    if case == "missing mixture file":  # the table copied away from its mixture files
        tables, metrics = [write_rows(tmp_path / "R.csv", rows_of(tables[0]))], metrics[:1]
        want = "has no mixture file"
    elif case == "tables and metrics":
        metrics = metrics[:1]
        want = "--ratios gives 2 tables and --metrics 1: one table of each per round"
    elif case == "mismatched rounds":  # round 2 claims other kept-out documents
        other = tmp_path / "F1"
        other.mkdir()
        (other / "proposals.csv").write_bytes((root / "F1" / "proposals.csv").read_bytes())
        rec = json.loads((root / "F1" / "round.json").read_text())
        rec["exclude"] = rec["exclude"][1:]
        (other / "round.json").write_text(json.dumps(rec))
        tables[1] = other / "proposals.csv"
        want = "the rounds do not match"
    elif case == "verify without a fit":
        (tmp_path / "empty").mkdir()
        args = ["search", "propose", "--workdir", w, "--verify", tmp_path / "empty",
                "--out", tmp_path / "F"]
        want = "no fit.json"
    elif case == "clip out of range":
        rows = rows_of(tables[0])
        rows[3][rows[0].index("clip")] = str(2**20 + 1)
        tables, metrics = [write_rows(tmp_path / "R.csv", rows)], metrics[:1]
        want = "line 4, column 'clip'"
    else:  # 100,000 columns: refused at once, before the fit
        wide = [["run", *(f"d{j}" for j in range(100_000))]] + [
            [f"r{i}", *(["1"] * 100_000)] for i in range(5)]
        args = ["search", "fit", "--ratios", write_rows(tmp_path / "R.csv", wide), "--metrics",
                write_rows(tmp_path / "M.csv", [["run", "bpb"]] + [[f"r{i}", "1"]
                                                                   for i in range(5)]),
                "--objective", "bpb", "--out", tmp_path / "F"]
        want = "100,000 weight columns"
    if args is None:
        args = ["search", "fit", "--ratios", *tables, "--metrics", *metrics, "--objective",
                "bpb", "--workdir", w, "--choose", "--out", tmp_path / "F"]
    rc, out, err = run_main(capsys, *args)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert want in err and err.startswith(f"clusterclip search {args[1]}: error: "), err
    assert not (tmp_path / "F").exists()


def test_fit_outputs_do_not_depend_on_the_rows_order(tmp_path, capsys):
    """The same runs in another row order (RegMix's published tables, shuffled) give the
    same bytes: predictions, proposals, the chosen mixture and fit.json but its paths."""
    data = Path(__file__).resolve().parent / "data" / "regmix"
    obj = "metric/the_pile_pile_cc_val_loss"
    rat, met = rows_of(data / "ratios_1m_train.csv")[:31], rows_of(data / "metrics_1m_train.csv")
    rng = np.random.default_rng(0)
    outs = []
    for name, order in (("a", np.arange(30)), ("b", rng.permutation(30))):
        (tmp_path / name).mkdir()
        r = write_rows(tmp_path / name / "R.csv", [rat[0]] + [rat[1 + i] for i in order])
        m = write_rows(tmp_path / name / "M.csv", [met[0]] + [met[1 + i] for i in order[::-1]])
        rc, _, err = run_main(capsys, "search", "fit", "--ratios", r, "--metrics", m,
                              "--objective", obj, "--predict", data / "ratios_1m_test.csv",
                              "--propose", 3, "--choose", "--out", tmp_path / name / "F")
        assert rc == 0, err
        outs.append(tmp_path / name / "F")
    for f in ("predictions.csv", "proposals.csv", "mixture.json"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    a, b = (json.loads((o / "fit.json").read_text()) for o in outs)
    for d in (a, b):
        del d["ratios"], d["metrics"]
    assert a == b


def test_propose_says_why_it_wrote_fewer_candidates_than_asked(loop, tmp_path, capsys):
    """Near the clip's capacity many draws are infeasible: the command says how many it
    wrote of those asked, and why, and round.json records both."""
    rc, out, err = run_main(capsys, "search", "propose", "--workdir", loop["W"], "--runs", 24,
                            "--num-samples", 2500, "--out", tmp_path / "P")
    assert rc == 0, err
    got = len(rows_of(tmp_path / "P" / "ratios.csv")) - 1
    record = json.loads((tmp_path / "P" / "round.json").read_text())
    assert (record["runs_asked"], record["runs"]) == (24, got)
    assert got < 24  # 2,500 of the 4 x 640 documents clip 4 allows: some draws do not fit
    assert f"{got} of the 24 candidates asked" in out and "clip" in record["short"]


@pytest.mark.parametrize("tokenizer", [False, True])
def test_a_token_budget_export_gives_its_tokens(loop, tmp_path, capsys, tokenizer):
    """With --num-tokens, a Parquet candidate's _export.json gives the tokens of its rows
    as W counts them (the counts the budget was drawn with: the estimate, or the
    tokenizer given, which a Parquet export takes for the counts alone)."""
    from clusterclip.stages.tokens import TokensOptions
    from clusterclip.stages.tokens import run as count_tokens
    from clusterclip.workdir import Workdir

    tok = None
    if tokenizer:
        tok = tokenizer_folder(tmp_path / "tok")
    rc, _, err = run_main(capsys, "search", "propose", "--workdir", loop["W"], "--runs", 3,
                          "--num-tokens", 20_000, "--format", "parquet", "--out", tmp_path / "P",
                          *(["--tokenizer", tok] if tok else []))
    assert rc == 0, err
    tokens, _ = count_tokens(Workdir(loop["W"], create=False),
                             TokensOptions(tokenizer=None if tok is None else str(tok),
                                           progress=False))
    for row in rows_of(tmp_path / "P" / "ratios.csv")[1:]:
        summary = json.loads((tmp_path / "P" / "runs" / row[0] / "_export.json").read_text())
        schedule = np.load(tmp_path / "P" / "schedules" / f"{row[0]}.npy")
        assert summary["tokens"]["unit"] == "tokens"
        assert summary["tokens"]["total"] == int(np.asarray(tokens)[schedule].sum()) >= 20_000


# -- one search: the offline search's rounds are `search propose` / `search fit --propose` --


def test_the_offline_rounds_are_what_propose_and_fit_write(loop, tmp_path, capsys):
    """The offline search's round loop (:func:`clusterclip.search.core.run_search`) on the
    work directory's space, with an objective known in place of training, against
    ``search propose`` then ``search fit --propose`` on the same work directory, budget
    and seed, the same objective in the metrics table: round 1 and round 2 are the same
    runs (ids, per-cluster weights, clip, timing), in the same order, at K = 64 (the
    super-cluster rule), and ``fit --choose`` on both rounds chooses the offline search's
    run."""
    import math

    from clusterclip.sampling.mixture import read_mixture
    from clusterclip.search.core import SearchOptions, row_id, run_search
    from clusterclip.stages.search import workdir_space

    w = loop["W"]
    ws = workdir_space(w, num_samples=BUDGET)
    best = np.random.default_rng(3).dirichlet(np.ones(len(ws.names)))

    def f(weights, clip, timing):
        g = ws.space.group_sums(weights)
        return float(np.sum((g - best) ** 2) + 0.01 * math.log2(clip)
                     + 0.02 * (timing == "paced"))

    res = run_search(ws.space, lambda cands, r: [{"objective": f(c.weights, c.clip, c.timing)}
                                                 for c in cands],
                     SearchOptions(runs=12, rounds=2, seed=5))
    assert [r["proxies"] for r in res.rounds] == [8, 4]
    rc, _, err = run_main(capsys, "search", "propose", "--workdir", w, "--runs", 8,
                          "--num-samples", BUDGET, "--seed", 5, "--out", tmp_path / "P")
    assert rc == 0, err

    def trained(folder, table, out):
        """The runs of ``folder/table`` with their mixture files, measured by ``f`` into
        the metrics table ``out``."""
        runs = [(row[0], read_mixture(tmp_path / folder / "mixtures" / f"{row[0]}.json",
                                      ws.space.num_clusters))
                for row in rows_of(tmp_path / folder / table)[1:]]
        write_rows(tmp_path / out, [["run", "loss"]] + [
            [rid, repr(f(m.weights, m.clip, m.timing))] for rid, m in runs])
        return runs

    round1 = trained("P", "ratios.csv", "M.csv")
    rc, _, err = run_main(capsys, "search", "fit", "--ratios", tmp_path / "P" / "ratios.csv",
                          "--metrics", tmp_path / "M.csv", "--objective", "loss", "--workdir",
                          w, "--propose", 4, "--seed", 5, "--out", tmp_path / "F")
    assert rc == 0, err
    for runs, r in ((round1, 0), (trained("F", "proposals.csv", "M2.csv"), 1)):
        offline = [p.candidate for p in res.proxies if p.round == r]
        assert [rid for rid, _ in runs] == [row_id(ws.space, c) for c in offline]
        for (_, m), c in zip(runs, offline, strict=True):
            assert (m.clip, m.timing) == (c.clip, c.timing)
            np.testing.assert_allclose(m.weights, c.weights, rtol=0, atol=1e-12)
    # the two rounds fitted by `search fit --choose`: the offline search's choice
    rc, _, err = run_main(capsys, "search", "fit", "--ratios", tmp_path / "P" / "ratios.csv",
                          tmp_path / "F" / "proposals.csv", "--metrics", tmp_path / "M.csv",
                          tmp_path / "M2.csv", "--objective", "loss", "--workdir", w,
                          "--choose", "--out", tmp_path / "C")
    assert rc == 0, err
    chosen = json.loads((tmp_path / "C" / "mixture.json").read_text())
    assert chosen["run"] == row_id(ws.space, res.proxies[res.chosen].candidate)
    assert chosen["observed"] == res.proxies[res.chosen].objective
    fit = json.loads((tmp_path / "C" / "fit.json").read_text())
    assert fit["loo_spearman"] == pytest.approx(res.spearman, abs=1e-9)


@given(st.lists(st.tuples(st.floats(2.0, 3.0), st.floats(2.0, 3.0), st.floats(2.0, 3.0)),
                min_size=1, max_size=6))
@settings(deadline=None)  # the first example imports scipy
def test_the_offline_verdict_is_the_own_trainer_verdict(per_seed):
    """The offline search's comparisons (``results.json``'s) and the own-trainer loop's
    ``verdict_of`` are one rule on the same per-seed losses: the same paired differences and
    intervals; the primary (searched against random; chosen against natural) decided by its
    interval alone; every other comparison measurable only when its Holm-adjusted p over
    the comparisons weighed is below 0.05."""
    from clusterclip.search.output import comparisons
    from clusterclip.search.verify import verdict_of
    from clusterclip.verdict import holm

    test = {arm: {"target": [v[i] for v in per_seed]}
            for i, arm in enumerate(("searched", "random", "prior"))}
    got = comparisons(test, "target")
    arms, _ = verdict_of({x: dict(enumerate(test[x]["target"])) for x in test},
                         base_arm="random", primary="searched")
    keys = ("mean", "n", "std", "low", "high", "p")
    for a in ("searched", "prior"):
        c = got[f"{a} - random"]["target"]
        assert [c[k] for k in keys] == [arms[a][k] for k in keys]
        assert c["mean"] == float(np.mean(np.subtract(test[a]["target"],
                                                      test["random"]["target"])))
    c, r = got["searched - random"]["target"], arms["searched"]
    assert c["primary"] and r["primary"]
    excludes = c["low"] is not None and (c["low"] > 0 or c["high"] < 0)
    assert c["measurable"] == r["measurable"] == excludes
    family = [got[k]["target"] for k in ("searched - random", "prior - random",
                                         "searched - prior")]
    for entry, adj in zip(family[1:], holm([e["p"] for e in family])[1:], strict=True):
        assert entry["p_holm"] == adj
        assert entry["measurable"] == (adj is not None and adj < 0.05)


def test_a_round_file_is_read_by_the_one_bounded_json_reader(tmp_path):
    """round.json and the rounds' mixture files go through ``jsonfile.read_json``: a key given
    twice or JSON nested too deep is refused naming the file, never taken silently."""
    from clusterclip.errors import InputError
    from clusterclip.search.rounds import read_json

    twice = tmp_path / "round.json"
    twice.write_text('{"seed": 1, "seed": 2}', encoding="utf-8")
    with pytest.raises(InputError, match="round.json") as e:
        read_json(twice, "a round record of `search propose`")
    assert "twice" in str(e.value) or "once" in str(e.value)
    deep = tmp_path / "mixture.json"
    deep.write_text('{"w": ' + "[" * 10_000 + "]" * 10_000 + "}", encoding="utf-8")
    with pytest.raises(InputError, match="nested deeper"):
        read_json(deep, "a mixture file")
    with pytest.raises(InputError, match="no such file"):
        read_json(tmp_path / "missing.json", "a mixture file")
