"""``clusterclip search propose`` and ``search fit`` (issue 26): the swarm layout as RegMix
and Olmix publish it, the loop a user's own trainer closes (propose -> train -> fit ->
propose -> choose) on a stand-in trainer with a known optimum, the exports of the
candidates read back with pyarrow, and every refusal: one line, exit 2, nothing written."""

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

DATA = Path(__file__).resolve().parent / "data" / "regmix"
OBJ = "metric/the_pile_pile_cc_val_loss"


# -- the published layouts -------------------------------------------------------------


def test_regmix_published_tables_are_read_as_they_are():
    from clusterclip.search.swarm import read_objective, read_ratios

    r = read_ratios(DATA / "ratios_1m_train.csv")
    assert r.table.layout == "regmix" and r.table.id_column == "index"
    assert len(r.ids) == 512 and r.ids[:3] == ("1", "2", "3")
    assert len(r.columns) == 17 and r.columns[11] == "train_the_pile_pile_cc"
    assert r.clip is None and r.timing is None
    np.testing.assert_allclose(r.weights.sum(axis=1), 1.0)
    raw = np.array([[float(x) for x in row[1:]]
                    for row in rows_of(DATA / "ratios_1m_train.csv")[1:]])
    assert 0.995 < raw.sum(axis=1).min() and raw.sum(axis=1).max() < 1.004  # the authors' rounding
    np.testing.assert_allclose(r.weights, raw / raw.sum(axis=1, keepdims=True))
    table, y = read_objective(DATA / "metrics_1m_train.csv", [OBJ])
    assert len(y) == 512 and table.columns[8] == OBJ
    assert y["1"] == pytest.approx(5.169477939605713)


def _subset(tmp_path: Path, n: int = 40) -> dict[str, Path]:
    """The first ``n`` runs of the published tables, lines copied verbatim (RegMix's
    layout), and the same runs in Olmix's layout (``run,name,index`` first, the weight
    columns in another order, the metrics table with the same three first columns)."""
    rat, met = rows_of(DATA / "ratios_1m_train.csv"), rows_of(DATA / "metrics_1m_train.csv")
    cand = rows_of(DATA / "ratios_1m_test.csv")
    out = {"R": write_rows(tmp_path / "R.csv", rat[:n + 1]),
           "M": write_rows(tmp_path / "M.csv", met[:n + 1]),
           "C": write_rows(tmp_path / "C.csv", cand[:21])}
    perm = [0] + list(range(len(rat[0]) - 1, 0, -1))  # id, then the weights reversed
    out["oR"] = write_rows(tmp_path / "oR.csv", [["run", "name", "index", *rat[0][1:][::-1]]]
                           + [[f"r{row[0]}", f"swarm-{row[0]}", row[0],
                               *[row[j] for j in perm[1:]]] for row in rat[1:n + 1]])
    out["oM"] = write_rows(tmp_path / "oM.csv", [["run", "name", "index", *met[0][1:]]]
                           + [[f"r{row[0]}", f"swarm-{row[0]}", row[0], *row[1:]]
                              for row in met[1:n + 1]])
    out["oC"] = write_rows(tmp_path / "oC.csv", [["run", "name", "index", *cand[0][1:][::-1]]]
                           + [[f"r{row[0]}", "c", row[0], *[row[j] for j in perm[1:]]]
                              for row in cand[1:21]])
    return out


def test_the_same_runs_in_olmix_layout_give_the_same_fit(tmp_path, capsys):
    f = _subset(tmp_path, 30)
    rc, out, err = run_main(capsys, "search", "fit", "--ratios", f["R"], "--metrics", f["M"],
                            "--objective", OBJ, "--predict", f["C"], "--choose",
                            "--out", tmp_path / "regmix")
    assert rc == 0, err
    rc, out, err = run_main(capsys, "search", "fit", "--ratios", f["oR"], "--metrics", f["oM"],
                            "--objective", OBJ, "--predict", f["oC"], "--choose",
                            "--out", tmp_path / "olmix")
    assert rc == 0, err
    a = json.loads((tmp_path / "regmix" / "fit.json").read_text())
    b = json.loads((tmp_path / "olmix" / "fit.json").read_text())
    assert (a["layout"], b["layout"]) == ("regmix", "olmix")
    assert a["runs"] == b["runs"] == 30 and a["objective"] == b["objective"]
    assert b["loo_spearman"] == pytest.approx(a["loo_spearman"], abs=1e-6)
    assert b["chosen"]["run"] == "r" + a["chosen"]["run"]
    pa = rows_of(tmp_path / "regmix" / "predictions.csv")
    pb = rows_of(tmp_path / "olmix" / "predictions.csv")
    assert pa[0] == ["index", "predicted", "predicted_std"] and pb[0][0] == "run"
    assert [r[0] for r in pb[1:]] == ["r" + r[0] for r in pa[1:]]
    # the same fit up to the optimizer's rounding (Olmix's columns come in another order)
    np.testing.assert_allclose(np.array(pb[1:])[:, 1:].astype(float),
                               np.array(pa[1:])[:, 1:].astype(float), rtol=1e-4)
    ma = json.loads((tmp_path / "regmix" / "mixture.json").read_text())
    mb = json.loads((tmp_path / "olmix" / "mixture.json").read_text())
    assert mb["columns"] == ma["columns"][::-1]
    np.testing.assert_allclose(mb["weights"], ma["weights"][::-1], atol=1e-12)


def test_rows_without_the_objective_are_skipped_and_counted(tmp_path, capsys):
    f = _subset(tmp_path, 30)
    met = rows_of(f["M"])
    j = met[0].index(OBJ)
    met[3][j] = ""           # run 3: no objective
    met[5][j] = "nan"        # run 5: NaN
    del met[7]               # run 7: no metrics row at all
    write_rows(f["M"], met)
    rc, out, err = run_main(capsys, "search", "fit", "--ratios", f["R"], "--metrics", f["M"],
                            "--objective", OBJ, "metric/the_pile_arxiv_val_loss",
                            "--maximize", "--out", tmp_path / "fit")
    assert rc == 0, err
    fit = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert fit["runs"] == 27 and fit["skipped"]["without_objective"] == 3
    assert fit["objective"]["direction"] == "maximize"
    assert fit["objective"]["value"] == "the mean of the columns"
    assert "3 without the objective skipped" in out


def test_a_killed_fit_leaves_nothing_half_written(tmp_path, capsys, monkeypatch):
    import clusterclip.search.fit as fit

    f = _subset(tmp_path, 20)
    out = tmp_path / "fit"

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fit, "_write_choice", killed)
    rc, _, err = run_main(capsys, "search", "fit", "--ratios", f["R"], "--metrics", f["M"],
                          "--objective", OBJ, "--predict", f["C"], "--choose", "--out", out)
    assert rc == 130 and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fit.")]


# -- refusals --------------------------------------------------------------------------

FIT_REFUSALS = ["objective column", "no common id", "negative weight", "nan weight",
                "inf weight", "predict columns", "workdir columns", "propose negative",
                "not a number", "format without workdir"]


@pytest.mark.parametrize("case", FIT_REFUSALS)
def test_fit_refusals_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, case, world):
    f = _subset(tmp_path, 12)
    args = {"--ratios": f["R"], "--metrics": f["M"], "--objective": OBJ, "--choose": None,
            "--out": tmp_path / "fit"}
    rat = rows_of(f["R"])
    if case == "objective column":
        args["--objective"] = "metric/no_such_loss"
    elif case == "no common id":
        args["--metrics"] = f["oM"]
    elif case in ("negative weight", "nan weight", "inf weight", "not a number"):
        rat[4][2] = {"negative weight": "-0.1", "nan weight": "nan", "inf weight": "inf",
                     "not a number": "abc"}[case]
        write_rows(f["R"], rat)
    elif case == "predict columns":
        c = rows_of(f["C"])
        c[0][3] = "train_the_pile_other"
        args["--predict"] = write_rows(tmp_path / "C2.csv", c)
    elif case == "workdir columns":
        args["--workdir"] = world["W"]
    elif case == "propose negative":
        args["--propose"] = "-1"
    elif case == "format without workdir":
        args.update({"--propose": "2", "--format": "parquet"})
    cmd = ["search", "fit", *[x for k, v in args.items() for x in ([k] if v is None else [k, v])]]
    rc, out, err = run_main(capsys, *cmd)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    # ours or argparse's (a number out of range): both named after the subcommand
    assert err.startswith("clusterclip search fit: error: ")
    assert not (tmp_path / "fit").exists()
    want = {"objective column": "metric/no_such_loss", "no common id": "no run id",
            "negative weight": "negative", "nan weight": "not finite", "inf weight": "not finite",
            "predict columns": "train_the_pile_other", "workdir columns": "do not match",
            "propose negative": "--propose", "not a number": "line 5",
            "format without workdir": "need --workdir"}[case]
    assert want in err


def test_search_without_a_subcommand_still_needs_a_work_directory(capsys):
    rc, _, err = run_main(capsys, "search", "--quick")
    assert rc == 2 and "--workdir" in err and len(err.strip().splitlines()) == 1


# -- a work directory: propose, the stand-in trainer, fit, choose -----------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory, pydocs_path):
    """A work directory of 90 real documents in 3 clusters (fast embedder)."""
    root = tmp_path_factory.mktemp("swarm")
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        recs = [json.loads(next(f)) for _ in range(90)]
    corpus = root / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": r["text"][:400]}) + "\n" for r in recs),
                      encoding="utf-8")
    w = root / "W"
    assert main(["run", str(corpus), "--workdir", str(w), "--clusters", "3", "--embedder",
                 "fast", "--num-samples", "50"]) == 0
    labels = np.load(w / "labels.npy")
    return {"W": w, "labels": labels, "root": root}


#: The stand-in trainer's optimum (over the 3 clusters) and its noise.
OPTIMUM = np.array([0.6, 0.3, 0.1])
NOISE = 0.002


def trainer(ratios: Path, seed: int) -> list[list]:
    """A known function of each mixture (squared distance to :data:`OPTIMUM`, plus a small
    price on greedy timing), with Gaussian noise: the metrics table, first column run."""
    rng = np.random.default_rng(seed)
    rows = rows_of(ratios)
    head = rows[0]
    out = [["run", "val_loss", "other"]]
    for row in rows[1:]:
        w = np.array([float(row[head.index(f"cluster_{k}")]) for k in range(3)])
        greedy = row[head.index("timing")] == "clusterclip"
        loss = 3.0 + float(np.sum((w - OPTIMUM) ** 2)) + 0.01 * greedy + rng.normal(0, NOISE)
        out.append([row[0], repr(loss), ""])
    return out


def test_propose_train_fit_propose_choose_finds_the_known_optimum(world, tmp_path, capsys):
    w = world["W"]
    rc, out, err = run_main(capsys, "search", "propose", "--workdir", w, "--runs", 10,
                            "--out", tmp_path / "P")
    assert rc == 0, err
    ratios = rows_of(tmp_path / "P" / "ratios.csv")
    assert ratios[0] == ["run", "cluster_0", "cluster_1", "cluster_2", "clip", "timing",
                         "origin"]
    ids = [r[0] for r in ratios[1:]]
    assert len(ids) == len(set(ids)) == 10
    for row in ratios[1:]:  # each row's mixture file: the same weights, clip and timing
        mix = json.loads((tmp_path / "P" / "mixtures" / f"{row[0]}.json").read_text())
        assert mix["run"] == row[0] and mix["clip"] == int(row[4]) and mix["timing"] == row[5]
        assert mix["origin"] == row[6]
        np.testing.assert_allclose(mix["weights"], [float(x) for x in row[1:4]], atol=1e-11)
    all_r = [ratios[0]] + ratios[1:]
    tables = [tmp_path / "P" / "ratios.csv"]
    metrics = [write_rows(tmp_path / "M0.csv", trainer(tables[0], 0))]
    for rnd in range(3):  # the rounds as written, one table each: no CSV edited by hand
        rc, out, err = run_main(capsys, "search", "fit", "--ratios", *tables, "--metrics",
                                *metrics, "--objective", "val_loss", "--workdir", w,
                                "--propose", 6, "--seed", rnd, "--out", tmp_path / f"F{rnd}")
        assert rc == 0, err
        new = rows_of(tmp_path / f"F{rnd}" / "proposals.csv")
        assert new[0] == ratios[0] and len(new) == 7
        assert {r[6] for r in new[1:]} == {f"round {rnd + 2}"}
        new_ids = [r[0] for r in new[1:]]
        assert not set(new_ids) & {r[0] for r in all_r[1:]}, "a proposal repeats a run"
        for row in new[1:]:  # every proposal is trainable: its own mixture file
            mix = json.loads((tmp_path / f"F{rnd}" / "mixtures" / f"{row[0]}.json").read_text())
            assert mix["clip"] == int(row[4]) and mix["timing"] == row[5]
        all_r += new[1:]
        tables.append(tmp_path / f"F{rnd}" / "proposals.csv")
        metrics.append(write_rows(tmp_path / f"M{rnd + 1}.csv", trainer(tables[-1], rnd + 1)))
    rc, out, err = run_main(capsys, "search", "fit", "--ratios", *tables, "--metrics",
                            *metrics, "--objective", "val_loss", "--workdir", w, "--choose",
                            "--out", tmp_path / "F")
    assert rc == 0, err
    fit = json.loads((tmp_path / "F" / "fit.json").read_text())
    mix = json.loads((tmp_path / "F" / "mixture.json").read_text())
    assert fit["runs"] == 28 and fit["chosen"]["run"] in {r[0] for r in all_r[1:]}
    # within 0.1 of the optimum in L1 (the first round's best is 0.2 or more away)
    first = min(np.abs(np.array([float(x) for x in r[1:4]]) - OPTIMUM).sum()
                for r in ratios[1:])
    got = np.abs(np.array(mix["weights"]) - OPTIMUM).sum()
    assert got < 0.1 < first + 0.1, (got, first)
    assert mix["timing"] == "paced" and fit["loo_spearman"] > 0.5
    # the chosen mixture is one `sample --mixture` reads
    rc, out, err = run_main(capsys, "sample", "--labels", w / "labels.npy", "--num-samples",
                            40, "--mixture", tmp_path / "F" / "mixture.json", "--out",
                            tmp_path / "s.npy", "--no-progress")
    assert rc == 0, err


def test_propose_exports_each_candidate_with_its_quotas(world, tmp_path, capsys):
    import pyarrow.parquet as pq

    from clusterclip.sampling._engine import paced_quotas

    w, labels = world["W"], world["labels"]
    T = 150
    rc, out, err = run_main(capsys, "search", "propose", "--workdir", w, "--runs", 5,
                            "--num-samples", T, "--format", "parquet", "--seed", 3,
                            "--out", tmp_path / "P")
    assert rc == 0, err
    sizes = np.bincount(labels[labels >= 0], minlength=3)
    for row in rows_of(tmp_path / "P" / "ratios.csv")[1:]:
        mix = json.loads((tmp_path / "P" / "mixtures" / f"{row[0]}.json").read_text())
        weights = np.array(mix["weights"])
        # respects the clip cluster by cluster: no cluster asked for more than R x its size
        assert np.all(weights * T <= mix["clip"] * sizes + 1e-6)
        t = pq.read_table(tmp_path / "P" / "runs" / row[0])
        assert t.num_rows == T
        got = np.bincount(np.array(t.column("label")), minlength=3)
        assert np.all(got <= mix["clip"] * sizes) and np.all(got[weights == 0] == 0)
        if mix["timing"] == "paced":
            np.testing.assert_array_equal(got, paced_quotas(sizes, weights, mix["clip"], T))
            # no quota was clipped: each cluster gets its weight's share, to rounding
            assert np.all(np.abs(got - T * weights) < 1 + 1e-9), (got, T * weights)
        doc = np.array(t.column("doc_index"))
        assert np.all(labels[doc] == np.array(t.column("label")))
        np.testing.assert_array_equal(np.load(tmp_path / "P" / "schedules" / f"{row[0]}.npy"),
                                      doc)
        # the exact schedule `sample --mixture` draws from the candidate's mixture file
        rc, _, err = run_main(capsys, "sample", "--labels", w / "labels.npy", "--num-samples",
                              T, "--seed", 3, "--mixture",
                              tmp_path / "P" / "mixtures" / f"{row[0]}.json",
                              "--out", tmp_path / "s.npy", "--no-progress")
        assert rc == 0, err
        np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), doc)


def test_propose_with_a_target_proposes_the_prior_of_its_documents_in_w(world, tmp_path,
                                                                        capsys):
    """--target: its documents embedded by W's embedder and assigned to W's centroids give
    the prior candidate (target share per cluster plus the floor x natural)."""
    from clusterclip.search.space import prior_mixture

    w, labels = world["W"], world["labels"]
    docs = (world["root"] / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    target = tmp_path / "t.jsonl"
    target.write_text("\n".join(docs[:12]) + "\n", encoding="utf-8")
    rc, out, err = run_main(capsys, "search", "propose", "--workdir", w, "--runs", 6,
                            "--target", target, "--out", tmp_path / "P")
    assert rc == 0, err
    X = np.load(w / "embeddings.npy")[:12]  # the same texts as W embedded them
    C = np.load(w / "centroids.npy")[:3]
    hist = np.bincount(np.argmax(X @ C.T, axis=1), minlength=3)
    # its 12 documents are corpus documents: the guard keeps their copies out (the prior
    # is the target's share over what is left to train on)
    record = json.loads((tmp_path / "P" / "round.json").read_text())
    assert record["target_overlap"]["exact"] == 12 and len(record["exclude"]) >= 12
    assert set(range(12)) <= set(record["exclude"])
    assert "12 exact" in out
    labels = labels.copy()
    labels[record["exclude"]] = -1
    natural = np.bincount(labels[labels >= 0], minlength=3) / np.count_nonzero(labels >= 0)
    mixes = [json.loads(p.read_text()) for p in (tmp_path / "P" / "mixtures").glob("*.json")]
    prior = [m for m in mixes if m["origin"] == "prior"]
    assert len(prior) == 1 and all(m["objective"] == "target" for m in mixes)
    np.testing.assert_allclose(prior[0]["weights"], prior_mixture(hist, natural), atol=1e-9)


@pytest.mark.parametrize("case", ["format without budget", "runs 0", "budget over capacity",
                                  "missing workdir"])
def test_propose_refusals_are_one_line_exit_2_and_write_nothing(world, tmp_path, capsys, case):
    args = ["search", "propose", "--workdir", world["W"], "--runs", "4",
            "--out", tmp_path / "P"]
    if case == "format without budget":
        args += ["--format", "parquet"]
    elif case == "runs 0":
        args[5] = "0"
    elif case == "budget over capacity":
        args += ["--num-samples", "100000"]
    else:
        args[3] = tmp_path / "nope"
    rc, out, err = run_main(capsys, *args)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("clusterclip search propose: error: "), err
    assert not (tmp_path / "P").exists()


# -- one search: the offline search's proxies are a swarm that `search fit` reads ----------


def test_the_offline_search_proxies_refit_by_search_fit_give_the_same_predictor(tmp_path,
                                                                                 capsys):
    """The in-tool search's proxies written in the swarm layout (W/search/ratios.csv,
    metrics.csv) and fitted by ``search fit``: the same features, the same predictor,
    so the same leave-one-out rank correlation and the same chosen proxy."""
    import math

    from clusterclip.search.core import SearchOptions, run_search
    from clusterclip.search.offline import write_swarm
    from clusterclip.search.space import SearchSpace

    k = 5
    space = SearchSpace(natural=np.full(k, 0.2), prior=None, groups=np.arange(k),
                        train_tokens=np.full(k, 10_000), needed=20_000)
    best = np.array([0.4, 0.3, 0.1, 0.1, 0.1])

    def evaluate(cands, round_index):
        return [{"objective": float(np.sum((np.array(c.weights) - best) ** 2)
                                    + 0.05 * math.log2(c.clip)), "macro": 1.0}
                for c in cands]

    res = run_search(space, evaluate, SearchOptions(runs=14, rounds=2, seed=1, pool=200))
    results = {"space": {"groups": list(range(k))},
               "proxies": [{"weights": list(p.candidate.weights), "clip": p.candidate.clip,
                            "timing": p.candidate.timing, "val": p.metrics}
                           for p in res.proxies]}
    write_swarm(results, tmp_path)
    rat = rows_of(tmp_path / "ratios.csv")
    assert rat[0] == ["run", *[f"cluster_{i}" for i in range(k)], "clip", "timing"]
    assert rows_of(tmp_path / "metrics.csv")[0] == ["run", "objective", "macro"]
    rc, out, err = run_main(capsys, "search", "fit", "--ratios", tmp_path / "ratios.csv",
                            "--metrics", tmp_path / "metrics.csv", "--objective", "objective",
                            "--choose", "--out", tmp_path / "F")
    assert rc == 0, err
    fit = json.loads((tmp_path / "F" / "fit.json").read_text())
    assert fit["runs"] == 14
    assert fit["loo_spearman"] == pytest.approx(res.spearman, abs=1e-9)
    assert fit["chosen"]["run"] == rat[1 + res.chosen][0]


def test_propose_blends_weigh_each_cluster_dataset_by_the_candidates_token_share(
        world, tmp_path, capsys):
    """--blend megatron: every cluster's documents once (a verified Megatron dataset), and
    per candidate a --data-path blend whose weights are the candidate's token shares."""
    IndexedDataset = pytest.importorskip(
        "megatron.core.datasets.indexed_dataset").IndexedDataset

    tok = tokenizer_folder(tmp_path / "tok")
    w, labels = world["W"], world["labels"]
    out = tmp_path / "P"
    rc, _, err = run_main(capsys, "search", "propose", "--workdir", w, "--runs", 4,
                          "--blend", "megatron", "--tokenizer", tok, "--out", out)
    assert rc == 0, err
    tokens = np.zeros(labels.size)
    for k in range(3):
        docs = np.load(out / "clusters" / f"cluster_{k}" / "documents.npy")
        np.testing.assert_array_equal(docs[:, 1], np.flatnonzero(labels == k))
        ds = IndexedDataset(str(out / "clusters" / f"cluster_{k}" / "text_document"))
        tokens[docs[:, 1]] = ds.sequence_lengths
    mean = np.bincount(labels, weights=tokens, minlength=3) / np.bincount(labels, minlength=3)
    for row in rows_of(out / "ratios.csv")[1:]:
        mix = json.loads((out / "mixtures" / f"{row[0]}.json").read_text())
        parts = (out / "blends" / f"{row[0]}.txt").read_text().split()
        got = {int(p.split("cluster_")[1].split("/")[0]): float(wt)
               for wt, p in zip(parts[::2], parts[1::2], strict=True)}
        share = np.array(mix["weights"]) * mean
        want = share / share.sum()
        assert sorted(got) == np.flatnonzero(want > 0).tolist()
        np.testing.assert_allclose([got[k] for k in sorted(got)], want[want > 0], rtol=1e-9)
        assert all(Path(p).parent.parent == out.resolve() / "clusters" for p in parts[1::2])
        rec = json.loads((out / "blends" / f"{row[0]}.json").read_text())
        assert rec["mixture_weights"] == mix["weights"] and "clip" in rec["loses"]
        np.testing.assert_allclose(rec["token_shares"], want, rtol=1e-12)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), k=st.integers(1, 12))
def test_capping_keeps_a_mixture_within_its_limits_and_its_free_shares_in_proportion(data, k):
    from clusterclip.search.propose import cap_weights

    share = st.one_of(st.just(0.0), st.floats(1e-9, 1))
    w = np.array(data.draw(st.lists(share, min_size=k, max_size=k)))
    limit = np.array(data.draw(st.lists(st.floats(0.01, 1.5), min_size=k, max_size=k)))
    if not w.sum() > 0:
        return
    live = w > 0
    try:
        got = cap_weights(w, limit)
    except ValueError:  # only when the clusters drawn cannot hold the whole
        assert limit[live].sum() < 1 + 1e-9
        return
    assert got.sum() == pytest.approx(1.0) and np.all(got <= limit + 1e-12)
    assert np.all(got[~live] == 0)
    free = live & (got < limit - 1e-12)  # below their limit: the input's proportions
    if free.sum() > 1:
        ratio = got[free] / w[free]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_natural_and_prior_counts_the_labels_and_refuses_a_target_off_the_corpus():
    """The one computation propose and search share: shares of the labelled documents,
    the prior of the target's histogram (a target entirely in clusters without training
    text still gets one, from the floor on the natural shares), and a one-line refusal
    naming the target when its histogram is empty."""
    from clusterclip.errors import InputError
    from clusterclip.search.space import natural_and_prior, prior_mixture

    labels = np.array([0, 0, 2, -1, 2, 2], dtype=np.int64)
    counts, natural, prior = natural_and_prior(labels, 4, None)
    np.testing.assert_array_equal(counts, [2, 0, 3, 0])
    np.testing.assert_allclose(natural, [0.4, 0, 0.6, 0])
    assert prior is None
    hist = np.array([1, 5, 3, 0])
    _, _, prior = natural_and_prior(labels, 4, hist)
    np.testing.assert_allclose(prior, prior_mixture(hist, natural))
    assert prior[1] == 0 and prior[3] == 0  # no training text there
    _, _, prior = natural_and_prior(labels, 4, np.array([0, 4, 0, 1]))
    np.testing.assert_allclose(prior, natural)  # only the floor is left: the natural shares
    with pytest.raises(InputError, match="no document in any cluster .its val documents") \
            as got:
        natural_and_prior(labels, 4, np.zeros(4), target_docs="val documents",
                          docs="training documents")
    assert got.value.params == ("target",)
