"""`clusterclip search`: splits, the search loop on a known objective, and real (tiny)
searches on a work directory: outputs, target test documents that do not steer the
choice, resume after a kill, two gloo ranks equal to one process, bad input."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from _user_files import assert_kept, plant, plants, unplant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterclip.cli import main
from clusterclip.search.splits import SPLIT_KEYS, corpus_splits, load_splits, target_splits

# -- splits (pure) ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(labels=st.lists(st.integers(-1, 7), min_size=1, max_size=400),
       seed=st.integers(0, 2**31))
def test_corpus_splits_are_disjoint_stratified_and_deterministic(labels, seed):
    labels = np.array(labels, dtype=np.int64)
    train, val, test = corpus_splits(labels, seed)
    parts = np.concatenate([train, val, test])
    assert parts.size == np.unique(parts).size, "a document is in two splits"
    np.testing.assert_array_equal(np.sort(parts), np.flatnonzero(labels >= 0))
    for k in np.unique(labels[labels >= 0]):
        n = int(np.sum(labels == k))
        want = 0 if n < 10 else min((n - 1) // 2, max(1, round(0.1 * n)))
        assert np.sum(labels[val] == k) == want == np.sum(labels[test] == k), (k, n)
        assert np.sum(labels[train] == k) >= 1
    for a, b in zip((train, val, test), corpus_splits(labels, seed), strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.integers(0, 30), min_size=1, max_size=4), seed=st.integers(0, 99),
       data=st.data())
def test_target_splits_halve_each_file_and_read_no_text(rows, seed, data):
    usable = np.array(data.draw(st.lists(st.booleans(), min_size=sum(rows),
                                         max_size=sum(rows))), dtype=bool)
    val, test = target_splits(rows, usable, seed)
    assert not set(val) & set(test)
    np.testing.assert_array_equal(np.sort(np.concatenate([val, test])), np.flatnonzero(usable))
    first = 0
    for n in rows:  # stratified by file: half of each file's usable rows (val the larger)
        u = int(usable[first:first + n].sum())
        in_file = (val >= first) & (val < first + n)
        assert in_file.sum() == (u + 1) // 2
        first += n


def test_splits_file_has_the_contract_keys_and_stable_bytes(tmp_path):
    from clusterclip.search.splits import save_splits

    splits = {k: np.arange(i, i + 3, dtype=np.int64) for i, k in enumerate(SPLIT_KEYS)}
    splits["target_val"] = splits["target_test"] = np.zeros(0, np.int64)
    save_splits(tmp_path / "a.npz", splits)
    save_splits(tmp_path / "b.npz", splits)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    with np.load(tmp_path / "a.npz") as z:
        assert sorted(z.files) == sorted(SPLIT_KEYS)
        assert all(z[k].dtype == np.int64 for k in SPLIT_KEYS)
    got = load_splits(tmp_path / "a.npz")
    assert got["target_val"].size == 0 and got["corpus_test"].tolist() == [2, 3, 4]


# -- the search loop on a known objective (pure) ---------------------------------------


def test_search_finds_a_known_optimum_and_reports_its_rank_correlation():
    """An objective injected in place of training: the search must come close to its
    optimum (weights, clip and timing), far closer than any fixed candidate."""
    from clusterclip.search.core import SearchOptions, run_search
    from clusterclip.search.space import SearchSpace, fixed_candidates

    k = 8
    natural = np.array([30, 20, 15, 10, 10, 8, 5, 2], dtype=np.float64)
    natural /= natural.sum()
    space = SearchSpace(natural=natural, prior=None, groups=np.arange(k),
                        train_tokens=np.full(k, 10_000), needed=100_000)
    best = np.random.default_rng(7).dirichlet(np.ones(k))

    def f(c):
        w = np.array(c.weights)
        return float(10 * np.sum((w - best) ** 2) + 0.1 * (math.log2(c.clip) - math.log2(6)) ** 2
                     + 0.2 * (c.timing != "clusterclip"))

    def evaluate(cands, round_index):
        return [{"objective": f(c)} for c in cands]

    res = run_search(space, evaluate, SearchOptions(runs=24, rounds=3, seed=0, pool=600))
    chosen = res.proxies[res.chosen].candidate
    dist = np.abs(np.array(chosen.weights) - best).sum()
    fixed = min(np.abs(np.array(c.weights) - best).sum() for c in fixed_candidates(space))
    assert dist < fixed / 2, (dist, fixed)
    assert f(chosen) < min(f(c) for c in fixed_candidates(space)) / 3
    assert chosen.timing == "clusterclip"
    assert len(res.proxies) == 24 and [r["proxies"] for r in res.rounds] == [15, 6, 3]
    assert res.spearman is not None and res.spearman > 0.8
    # the choice is the proxy the final predictor rates best (pooled, not one proxy's luck)
    assert res.chosen == int(np.argmin(res.predicted))


def test_super_clusters_split_by_the_prior():
    """Above MAX_DIRECT_CLUSTERS the search weighs k-means super-clusters of the centroids;
    a draw in that space splits each super-cluster's weight among its clusters by the
    prior (by the natural shares where the prior has no mass); the fixed candidates stay
    exact per cluster."""
    from clusterclip.search.space import (
        MAX_DIRECT_CLUSTERS,
        SUPER_CLUSTERS,
        SearchSpace,
        dirichlet_around,
        fixed_candidates,
        prior_mixture,
        super_clusters,
    )

    rng = np.random.default_rng(0)
    k = MAX_DIRECT_CLUSTERS + 8
    centroids = rng.standard_normal((k, 16)).astype(np.float32)
    natural = rng.integers(1, 50, k).astype(np.float64)
    natural[3] = 0  # no training documents: no weight, group 0
    natural /= natural.sum()
    groups = super_clusters(centroids, natural, "cosine", seed=0)
    assert groups.max() + 1 == SUPER_CLUSTERS and groups[3] == 0
    first = [int(np.flatnonzero(groups == g)[0]) for g in range(SUPER_CLUSTERS)]
    assert first == sorted(first)  # numbered by their smallest cluster id
    assert super_clusters(np.zeros((5, 4)), np.ones(5) / 5, "cosine", 0).tolist() == \
        [0, 1, 2, 3, 4]
    hist = np.zeros(k)
    hist[np.flatnonzero(groups == groups[0])[:1]] = 5  # the target in one cluster only
    prior = prior_mixture(hist, natural)
    space = SearchSpace(natural=natural, prior=prior, groups=groups,
                        train_tokens=np.full(k, 1000), needed=1000)
    for c in dirichlet_around(space, fixed_candidates(space)[0], 20, 4.0, rng, "test"):
        w = np.array(c.weights)
        assert w[3] == 0 and w.sum() == pytest.approx(1.0)
        for g in range(SUPER_CLUSTERS):
            m = groups == g
            np.testing.assert_allclose(w[m], w[m].sum() * prior[m] / prior[m].sum(),
                                       rtol=1e-9, atol=2e-12)  # weights keep 12 digits
    nat = next(c for c in fixed_candidates(space) if c.origin == "natural")
    np.testing.assert_allclose(nat.weights, natural, atol=1e-12)


# -- real searches on a small work directory ------------------------------------------

#: ``--quick`` at the tiny model in this process: the tests' size (--quick itself trains
#: small proxies in 2 workers).
QUICK = ["--quick", "--model", "tiny", "--workers", "1", "--runs", "5", "--rounds", "2",
         "--test-seeds", "2", "--no-progress"]


def _corpus(root: Path, pydocs_path: Path) -> tuple[Path, Path]:
    """A corpus of 7 pydocs folders (40 documents each) and a target of 24 `faq` documents
    (held out of the corpus)."""
    rows = [json.loads(line) for line in gzip.open(pydocs_path, "rt", encoding="utf-8")]
    keep = ("library", "whatsnew", "howto", "c-api", "reference", "tutorial", "using")
    corpus = [r for name in keep for r in [x for x in rows if x["label"] == name][:40]]
    target = [r for r in rows if r["label"] == "faq"][:24]
    c, t = root / "corpus.jsonl", root / "target.jsonl"
    c.write_text("".join(json.dumps(r) + "\n" for r in corpus), encoding="utf-8")
    t.write_text("".join(json.dumps(r) + "\n" for r in target), encoding="utf-8")
    return c, t


def _workdir(root: Path, corpus: Path) -> Path:
    """The corpus embedded and clustered into 36 clusters: above MAX_DIRECT_CLUSTERS, so
    the search weighs super-clusters."""
    w = root / "W"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", str(corpus), "--workdir", str(w), "--clusters", "36", "--embedder",
                     "fast", "--num-samples", "100"]) == 0
    return w


def _outputs(w: Path) -> dict[str, bytes]:
    return {n: (w / "search" / n).read_bytes()
            for n in ("results.json", "mixture.json", "splits.npz", "results.md")}


def _runs(w: Path) -> dict[str, dict]:
    """The run store's entries by file name."""
    return {f.name: json.loads(f.read_text()) for f in (w / "search" / "runs").glob("*.json")}


def _search(w: Path, target: Path, *extra: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(["search", "--workdir", str(w), "--target", str(target), *QUICK, *extra])


@pytest.fixture(scope="module")
def searched(tmp_path_factory, pydocs_path):
    root = tmp_path_factory.mktemp("search")
    corpus, target = _corpus(root, pydocs_path)
    w = _workdir(root, corpus)
    assert _search(w, target) == 0
    return {"root": root, "corpus": corpus, "target": target, "w": w, "bytes": _outputs(w),
            "pydocs": pydocs_path, "runs": _runs(w)}


def test_search_writes_the_contract_outputs(searched):
    from clusterclip.sampling.mixture import read_mixture

    w = searched["w"]
    res = json.loads(searched["bytes"]["results.json"])
    k = int(np.load(w / "labels.npy").max()) + 1
    mix = read_mixture(w / "search" / "mixture.json", num_clusters=k)
    assert mix.timing in ("paced", "clusterclip") and mix.objective == "target"
    assert list(mix.weights) == res["chosen"]["weights"] and mix.clip == res["chosen"]["clip"]
    # splits: the contract's keys, disjoint, target rows of the one target file
    sp = load_splits(w / "search" / "splits.npz")
    assert set(sp) == set(SPLIT_KEYS)
    c = np.concatenate([sp["corpus_train"], sp["corpus_val"], sp["corpus_test"]])
    assert c.size == np.unique(c).size
    assert sorted(np.concatenate([sp["target_val"], sp["target_test"]]).tolist()) == \
        list(range(24))
    # every proxy with its mixture, val objective and seed; the predictor's fit
    assert len(res["proxies"]) == 5
    for p in res["proxies"]:
        assert len(p["weights"]) == k and p["seed"] == 0
        assert p["val"]["objective"] == p["val"]["target"] < math.log(256)
    assert "loo_spearman" in res["predictor"] and res["predictor"]["proxies"] == 5
    # 36 clusters: the search moved in 16 super-clusters, each split among its clusters by
    # the prior (the floored target histogram)
    groups = np.array(res["space"]["groups"])
    assert res["data"]["groups"] == 16 == groups.max() + 1
    prior = np.array(res["space"]["prior"])
    hist = np.array(res["space"]["target_val_histogram"])
    assert hist.sum() == 12 and prior.sum() == pytest.approx(1.0) and (prior > 0).all()
    # test[name][metric] per fresh seed, for random, prior and searched
    assert res["test_seeds"] == [1, 2] and set(res["test"]) == {"random", "prior", "searched"}
    for arm in res["test"].values():
        assert set(arm) == {"target", "micro", "macro"}
        assert all(len(v) == 2 and all(math.isfinite(x) for x in v) for v in arm.values())
    # the verdict: title, then the lines up to the first "## " (CONTRACTS.md 3)
    md = searched["bytes"]["results.md"].decode().splitlines()
    verdict = md[1:md.index("## Setup")]
    lead = next(ln for ln in verdict if ln.startswith("On this corpus"))
    assert md[0].startswith("# ") and lead.startswith("On this corpus and target, with 2 "
                                                      "fresh seeds of a 44k-parameter")
    # what the verdict rests on, right below the decision
    assert verdict[2].startswith("This verdict rests on a 44k-parameter byte-level LM")
    assert res["target_overlap"] == {"exact": 0, "near": 0, "target_docs": 24,
                                     "corpus_docs_excluded": 0, "threshold": 0.95,
                                     "val_copies_trained": False}
    assert "None of the target's 24 documents is in the corpus" in "\n".join(md)
    line = next(ln for ln in verdict if ln.startswith("- `searched` vs random"))
    phrases = [p for p in ("measurably better than random", "measurably worse than random",
                           "not measurably different from random") if p in line]
    assert len(phrases) == 1
    d = res["comparisons"]["searched - random"]["target"]
    assert d["primary"] and res["primary"] == {"arm": "searched", "baseline": "random",
                                               "metric": "target"}
    want = ("not measurably different from random" if not (d["low"] > 0 or d["high"] < 0)
            else "measurably better than random" if d["mean"] < 0
            else "measurably worse than random")
    assert phrases == [want] and d["call"] == want
    assert any(ln.startswith("- Smallest difference these 2 seeds can detect") for ln in verdict)
    for png in ("predicted_vs_observed.png", "objective_by_round.png", "mixture.png"):
        assert (w / "search" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_first_line_is_the_decision_from_the_per_seed_numbers(searched):
    """The decision recomputed from results.json's per-seed test losses by the rules of
    every verdict, independently of the code: the primary (searched vs random on the
    objective) alone at 5%, the other 8 comparisons after Holm; an arm recommended only on
    a measurable primary or a Holm-measurable secondary against random; else not resolved
    (or worse, or within the smallest effect of interest). The search's verdict is the one
    function the experiment's is (clusterclip.verdict.compare_family)."""
    from scipy import stats

    from clusterclip.search.output import search_family
    from clusterclip.verdict import compare_family

    res = json.loads(searched["bytes"]["results.json"])
    first = searched["bytes"]["results.md"].decode().splitlines()[2]
    t = res["test"]
    pairs = [(a, b, m) for m in ("target", "micro", "macro")
             for a, b in (("searched", "random"), ("prior", "random"), ("searched", "prior"))]
    diffs = {k: np.subtract(t[k[0]][k[2]], t[k[1]][k[2]]) for k in pairs}
    ps = [stats.ttest_1samp(d, 0.0).pvalue for d in diffs.values()]
    order = np.argsort(ps, kind="stable")
    adj = np.empty(9)
    adj[order] = np.maximum.accumulate([min(1.0, (9 - r) * ps[i]) for r, i in enumerate(order)])
    fam = res["verdict"]
    assert fam == search_family(t, "target") == compare_family(
        {k: d.tolist() for k, d in diffs.items()}, ("searched", "random", "target"))
    assert fam["family"] == 9
    assert [c["p_holm"] for c in fam["comparisons"]] == pytest.approx(list(adj))
    measurable = [ps[0] < 0.05] + [a < 0.05 for a in adj[1:]]
    # every comparison's call in results.json follows the family's rule, not its raw interval
    for (a, b, m), ok in zip(pairs, measurable, strict=True):
        d = res["comparisons"][f"{a} - {b}"][m]
        assert d["measurable"] == ok
        assert d["call"].startswith("measurably" if ok else "not measurably different")
    better = [k for k, ok in zip(pairs, measurable, strict=True)
              if ok and k[1] == "random" and diffs[k].mean() < 0]
    if better:
        arm = better[0][0]
        assert first.startswith(f"Use `{arm}`") and " is what matters: " in first
        share = res["coverage"][arm]["docs_never_drawn"]
        assert f"it never draws {share:.0%} of the corpus's training documents" in first
    elif measurable[0]:
        assert first.startswith("Keep random sampling: `searched` is measurably worse")
    elif stats.t.ppf(0.975, len(diffs[pairs[0]]) - 1) * np.std(diffs[pairs[0]], ddof=1) / \
            math.sqrt(len(diffs[pairs[0]])) < 0.005:
        assert first.startswith("Keep random sampling: `searched` differs from it by less")
    else:
        assert first.startswith(f"Not resolved at {len(res['test_seeds'])} seeds: the "
                                "smallest difference they could detect on target loss is ")
        assert "Run with --test-seeds " in first


def test_the_verdict_says_how_well_the_predictor_ranked_and_what_the_seeds_could_detect(
        searched):
    """The verdict's predictor line is the Spearman of the proxies' leave-one-out
    predictions against their observed val objective, and its detectable line is the
    half-width of each paired-t 95% interval (searched − random), both recomputed here
    from results.json's per-proxy and per-seed numbers."""
    from scipy import stats

    from clusterclip.verdict import paired_difference

    res = json.loads(searched["bytes"]["results.json"])
    md = searched["bytes"]["results.md"].decode().splitlines()
    verdict = md[1:md.index("## Setup")]
    pairs = [(p["loo_predicted"], p["val"]["objective"]) for p in res["proxies"]]
    rho = stats.spearmanr(*zip(*pairs, strict=True)).statistic
    line = next(ln for ln in verdict if ln.startswith("- Predictor: "))
    assert line.startswith(f"- Predictor: leave-one-out rank correlation {rho:.2f} over "
                           f"{len(pairs)} proxies (Spearman, predicted vs observed val")
    t = res["test"]
    n = len(res["test_seeds"])
    line = next(ln for ln in verdict if ln.startswith(f"- Smallest difference these {n} seeds"))
    for m in ("target", "micro", "macro"):
        d = paired_difference(np.subtract(t["searched"][m], t["random"][m]))
        half = stats.t.ppf(0.975, n - 1) * np.std(np.subtract(t["searched"][m], t["random"][m]),
                           ddof=1) / math.sqrt(n)
        assert d.detectable == pytest.approx(half, rel=1e-9)
        assert f"{m} ±{half:.4f}" in line
    obj = res["comparisons"]["searched - random"]["target"]
    lead = next(ln for ln in verdict if ln.startswith("On this corpus"))
    assert (f"cannot tell a difference smaller than ±{obj['detectable']:.4f}" in lead) == \
        (not obj["measurable"])


def test_quick_trains_small_proxies_in_at_most_two_workers_and_the_help_says_so(capsys):
    """``--quick``: small proxies (tiny ranked mixtures worse, issue 27), no verification,
    2 workers per rank but never more than the CPUs the ranks share; the help states it."""
    from clusterclip.lm.runs import usable_cpus
    from clusterclip.search.offline import QUICK_WORKERS, SearchConfig, quick_workers

    c = SearchConfig.from_options(quick=True)
    assert (c.model, c.runs, c.verify_model, c.experiment().epochs) == ("small", 24, None, 1.5)
    for world in (1, 2, 64):
        assert quick_workers(world) == max(1, min(QUICK_WORKERS, usable_cpus() // world))
    assert main(["search", "--help"]) == 0
    helptext = " ".join(capsys.readouterr().out.split())
    assert "24 proxies of the small model, 1.5 epochs, 3 test seeds, in 2 workers" in helptext


def test_coverage_is_a_direct_count_over_the_arms_schedules(searched):
    """Each arm's never-drawn shares at the budget, per test seed, equal a count over its
    schedule packed into the budget's windows, rebuilt here from the splits."""
    from clusterclip.lm.data import pack_sequences
    from clusterclip.lm.runs import ScheduleSpec, schedule_sampler, schedule_stream
    from clusterclip.search.offline import SearchConfig, prepare
    from clusterclip.search.target import read_target
    from clusterclip.stages.experiment import load_inputs

    w = searched["w"]
    res = json.loads(searched["bytes"]["results.json"])
    labels, texts, _ = load_inputs(w)
    config = SearchConfig.from_options(quick=True, runs=5, rounds=2, test_seeds=2,
                                       model="tiny")
    data, splits = prepare(texts, labels, read_target([str(searched["target"])], "text"),
                           config)
    train = splits["corpus_train"]
    assert (data.train_labels >= 0).sum() == train.size == res["data"]["corpus_train"]
    c = res["chosen"]
    arms = {"random": ScheduleSpec("random"),
            "searched": ScheduleSpec(c["timing"], clip=c["clip"], weights=tuple(c["weights"]))}
    exp = data.config
    for name, spec in arms.items():
        for i, seed in enumerate(res["test_seeds"]):
            fed: list[int] = []
            sampler = schedule_sampler(spec, data.train_labels, data.doc_tokens, data.budget,
                                       seed)
            windows = pack_sequences(schedule_stream(sampler, data.docs, fed),
                                     exp.model.seq_len)
            for _ in range(data.budget.steps * exp.train.batch_size):
                next(windows)
            never = np.setdiff1d(train, fed)
            tok = data.doc_tokens
            got = res["coverage"][name]["per_seed"]
            assert got["docs_never_drawn"][i] == pytest.approx(never.size / train.size,
                                                               abs=1e-6)
            assert got["tokens_never_drawn"][i] == pytest.approx(
                tok[never].sum() / tok[train].sum(), abs=1e-6)


def test_a_target_from_the_corpus_is_counted_and_kept_out_of_training(searched, tmp_path):
    """A target of 12 corpus documents (6 with their whitespace changed), 4 edited corpus
    documents (near copies) and 8 documents of its own: the overlap is counted, no corpus
    copy is in any split, and the first paragraph says so."""
    rows = [json.loads(line) for line in searched["corpus"].read_text().splitlines()]
    own = [json.loads(line) for line in searched["target"].read_text().splitlines()][:8]
    exact = [rows[i]["text"] for i in range(0, 240, 20)]
    exact[:6] = ["  " + t.replace(" ", "\n ", 3) + "\n" for t in exact[:6]]
    near = [rows[i]["text"] + " Also see the index." for i in range(5, 205, 50)]
    target = tmp_path / "overlap.jsonl"
    target.write_text("".join(json.dumps({"text": t}) + "\n" for t in
                              exact + near + [r["text"] for r in own]), encoding="utf-8")
    w = _workdir(tmp_path, searched["corpus"])
    assert _search(w, target) == 0
    res = json.loads((w / "search" / "results.json").read_text())
    o = res["target_overlap"]
    assert (o["exact"], o["near"], o["target_docs"]) == (12, 4, 24)
    assert o["corpus_docs_excluded"] >= 16 and not o["val_copies_trained"]
    sp = load_splits(w / "search" / "splits.npz")
    copies = set(range(0, 240, 20)) | set(range(5, 205, 50))
    for k in ("corpus_train", "corpus_val", "corpus_test"):
        assert not copies & set(sp[k].tolist()), k
    total = sum(res["data"][k] for k in ("corpus_train", "corpus_val", "corpus_test"))
    assert total <= 280 - o["corpus_docs_excluded"]
    md = (w / "search" / "results.md").read_text().split("\n\n")
    # the first paragraph: the decision, what it rests on, then the overlap
    assert md[1].splitlines()[1].startswith("This verdict rests on ")
    assert md[1].splitlines()[2] == (
        "The target is mostly inside the corpus: 16 of the target's 24 documents (67%) are in "
        "the corpus (12 exact, 4 near copies at "
        f"cosine >= 0.95); their {o['corpus_docs_excluded']} corpus copies were kept out of "
        "training, so no target document was trained on.")


def test_verify_model_trains_at_the_stated_size_and_resumes_after_a_kill(searched):
    """--verify-model small after a tiny search: the proxies and their test runs are
    reused, the three arms are trained again at small (its parameter count in results.json)
    on the same seeds, a kill after two of them resumes with the rest, and the order of the
    arms is compared by Spearman over their mean test target loss."""
    from scipy import stats

    from clusterclip.lm.config import MODEL_PRESETS
    from clusterclip.search import offline
    from clusterclip.search.proxies import ProxyTrainer

    w, target = searched["w"], searched["target"]
    before = json.loads(searched["bytes"]["results.json"])
    small = MODEL_PRESETS["small"][0]
    real, trained = ProxyTrainer.run, []

    def dies_after_two(self, spec, seed, where):
        if self.data.config.model == small and self.store.get(self.key(spec, seed, where)) \
                is None:
            if len(trained) == 2:
                raise KeyboardInterrupt
            trained.append(seed)
        return real(self, spec, seed, where)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ProxyTrainer, "run", dies_after_two)
        assert _search(w, target, "--verify-model", "small") == 130
    got, real_search = {}, offline.search

    def spy(*a, **kw):
        got.update(real_search(*a, **kw))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(offline, "search", spy)
        assert _search(w, target, "--verify-model", "small") == 0
    t = got["timing"]
    assert (t["trained_runs"], t["verify_trained_runs"], t["verify_reused_runs"]) == (0, 4, 2)
    res = json.loads((w / "search" / "results.json").read_text())
    v = res["verify"]
    assert v["model"] == "small" and v["parameters"] == small.num_parameters() \
        == res["parameters"]["verify"] == 446_080
    assert v["experiment"]["model"]["d_model"] == small.d_model
    assert res["parameters"]["proxy"] == MODEL_PRESETS["tiny"][0].num_parameters()
    assert res["test"] == before["test"] and res["chosen"] == before["chosen"]
    arms = list(res["test"])
    assert set(v["test"]) == set(arms) and all(len(x["target"]) == 2 for x in v["test"].values())
    proxy = [np.mean(res["test"][a]["target"]) for a in arms]
    there = [np.mean(v["test"][a]["target"]) for a in arms]
    assert v["spearman"] == pytest.approx(stats.spearmanr(proxy, there).statistic)
    first = (w / "search" / "results.md").read_text().split("\n\n")[1]
    assert "Checked one size up: trained again at `small` (446k parameters; the proxies have " \
        "44k)" in first and "## Verification at small" in (w / "search" / "results.md").read_text()


def test_exact_copies_ignore_whitespace_and_near_copies_follow_the_dedup_rule():
    """Exact: the same text once whitespace runs are one space; near: cosine >= the
    threshold less dedup's rounding slack (a float16 copy of the same vector joins at 1);
    a target row with both counts as exact, every pair is listed once."""
    from clusterclip.search.overlap import find_overlap

    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 8)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    corpus = ["alpha beta", "gamma", "delta", None]
    target = [" alpha\n\tbeta ", "gamma!", "unrelated", None, "delta"]
    T = np.stack([X[0], X[1], -X[2], X[2]])  # rows 0, 1, 2, 4 (row 3 has no text)
    ov = find_overlap(target, corpus, T, X.astype(np.float16), np.array([0, 1, 2, 4]), 1.0)
    assert ov.exact.tolist() == [True, False, False, False, True]
    assert ov.near.tolist() == [False, True, False, False, False]
    assert ov.pairs.tolist() == [[0, 0], [1, 1], [4, 2]] and ov.target_docs == 4


@settings(max_examples=40, deadline=None)
@given(n=st.integers(4, 60), share=st.floats(0.0, 1.0), seed=st.integers(0, 99))
def test_the_copies_of_every_target_document_are_kept_out_unless_that_is_most(n, share, seed):
    """Every corpus copy of a target document is out of training; when that is more than
    half the clustered corpus (the target is the corpus), the copies of the target's test
    documents still are, and the report says the val copies were trained on."""
    from clusterclip.search.overlap import MOST, Overlap, excluded_documents, overlap_sentence
    from clusterclip.search.overlap import summary as overlap_summary

    rng = np.random.default_rng(seed)
    labels = rng.integers(-1, 3, n)
    rows = np.arange(n)  # target row i is corpus document i, for a share of them
    hit = rows[rng.random(n) < share]
    ov = Overlap(np.isin(rows, hit), np.zeros(n, bool), np.stack([hit, hit], 1), n, 0.95)
    val, test = target_splits([n], np.ones(n, bool), seed)
    exclude, val_kept = excluded_documents(ov, labels, val, test)
    assert exclude[np.intersect1d(test, hit)].all()  # no test document's copy is trained on
    both = np.isin(rows, hit)
    assert val_kept == (np.count_nonzero(both & (labels >= 0))
                        > MOST * np.count_nonzero(labels >= 0))
    assert (exclude == both).all() if not val_kept else not exclude[np.setdiff1d(hit, test)].any()
    text = overlap_sentence(overlap_summary(ov, exclude, val_kept))
    if hit.size == n:
        assert text.startswith("The target is the corpus itself: ")
    assert ("val selection favoured" in text) == val_kept


@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=plants)
def test_a_rerun_keeps_every_file_of_the_users_in_w_search(searched, spec):
    """Files planted in W/search and in its runs/ survive a rerun byte for byte (issue 25);
    the rerun reuses every stored run and writes the same outputs."""
    w, target = searched["w"], searched["target"]
    planted = plant(w / "search", spec)
    try:
        assert _search(w, target) == 0
        assert_kept(w / "search", planted)
        assert _outputs(w) == searched["bytes"]
    finally:
        unplant(planted)


def test_changing_the_target_test_documents_leaves_the_choice(searched):
    """Other texts in the target's test rows (from another folder, so they would fall in
    other clusters): the same splits and mixture, every proxy reused, only the test runs
    trained again."""
    from clusterclip.search import offline

    w, target = searched["w"], searched["target"]
    sp = load_splits(w / "search" / "splits.npz")
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    others = [r for r in map(json.loads, gzip.open(searched["pydocs"], "rt"))
              if r["label"] == "extending"][:24]  # a folder apart from the corpus
    for i in sp["target_test"].tolist():
        rows[i] = {"text": others[i]["text"], "label": "changed"}
    changed = searched["root"] / "changed.jsonl"
    changed.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = {}
    real = offline.search

    def spy(*a, **kw):
        got.update(real(*a, **kw))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(offline, "search", spy)
        assert _search(w, changed) == 0
    after = _outputs(w)
    assert after["mixture.json"] == searched["bytes"]["mixture.json"]
    assert after["splits.npz"] == searched["bytes"]["splits.npz"]
    assert got["timing"]["trained_runs"] == 6 and got["timing"]["reused_runs"] == 5
    before = json.loads(searched["bytes"]["results.json"])
    assert got["proxies"] == before["proxies"] and got["test"] != before["test"]
    assert got["target_overlap"]["exact"] + got["target_overlap"]["near"] == 0


def test_a_killed_search_resumes_with_the_same_result(searched, tmp_path):
    from clusterclip.search.proxies import ProxyTrainer

    w = _workdir(tmp_path, searched["corpus"])
    real = ProxyTrainer.run
    calls = []

    def dies_after_three(self, *a, **kw):
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a user's Ctrl-C between runs
        calls.append(1)
        return real(self, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ProxyTrainer, "run", dies_after_three)
        assert _search(w, searched["target"]) == 130
    assert len(list((w / "search" / "runs").glob("*.json"))) == 3 + 1  # + the target's facts
    assert not (w / "search" / "results.json").exists()
    assert _search(w, searched["target"]) == 0
    assert _outputs(w) == searched["bytes"]


def test_test_seeds_auto_adds_seeds_by_the_declared_rule(searched, tmp_path, monkeypatch):
    """``--test-seeds auto`` on a copy of the searched work directory (its proxies and
    first test seeds reused from the store): every count it passed through left `searched`
    vs random on the objective unresolved by the rule, the last resolved or at the cap; the
    rule is in results.json and results.md."""
    import shutil

    import clusterclip.search.output as so
    from clusterclip.verdict import SeedRule

    rule = SeedRule(start=1, step=1, cap=3, min_effect=0.0)  # one seed: never resolved
    monkeypatch.setattr(so, "SEED_RULE", rule)
    w = tmp_path / "w"
    shutil.copytree(searched["w"], w)
    assert _search(w, searched["target"], "--test-seeds", "auto") == 0
    res = json.loads((w / "search" / "results.json").read_text())
    n = len(res["test_seeds"])
    assert res["test_seeds"] == [1, 2, 3][:n] and n >= 2
    assert res["config"]["test_seeds"] == "auto" and res["config"]["seed_rule"] == \
        rule.to_dict()
    t = res["test"]
    diffs = np.subtract(t["searched"]["target"], t["random"]["target"])
    for k in range(1, n):
        assert not rule.resolved(diffs[:k])
    assert rule.resolved(diffs) or n == rule.cap
    assert res["verdict"]["seeds"] == n
    # looked at after 2 and 3 seeds (1 gives no interval): 2.5% a look, 97.5% intervals
    assert (rule.looks, res["verdict"]["looks"], res["verdict"]["level"]) == (2, 2, 0.025)
    prim = res["comparisons"]["searched - random"]["target"]
    assert prim["confidence"] == 0.975 and prim["measurable"] == (prim["p"] < 0.025)
    md = (w / "search" / "results.md").read_text()
    assert ("Primary question, declared before the runs: `searched` against random on target "
            "loss, tested alone at 2.5% (5% over 2 planned looks at it); the other 8 "
            "comparisons are secondary, measurable only when their Holm-adjusted p over all 9 "
            "is below 0.025") in md
    assert "its paired 97.5% interval excludes 0" in md and "97.5% CI" in md
    assert "Test seeds: seeds chosen by the rule fixed before any run (--test-seeds auto): " \
        "start with 1, add 1 at a time" in md


def test_two_workers_give_the_serial_bytes_and_resume_after_ctrl_c(searched, tmp_path):
    """Proxies trained by 2 worker processes (``--workers 2``): killed by a Ctrl-C after
    three stored runs (exit 130, no worker left), then resumed, the search writes the bytes
    of the serial one, and every stored run equals the serial run of the same key."""
    import multiprocessing

    from clusterclip.lm.runs import RunStore

    w = _workdir(tmp_path, searched["corpus"])
    real = RunStore.put
    puts = []

    def dies_after_three(self, *a, **kw):
        if len(puts) == 3 + 1:  # + the target's facts
            raise KeyboardInterrupt  # as a user's Ctrl-C while the workers train
        puts.append(1)
        return real(self, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RunStore, "put", dies_after_three)
        assert _search(w, searched["target"], "--workers", "2") == 130
    assert multiprocessing.active_children() == []
    assert len(list((w / "search" / "runs").glob("*.json"))) == 3 + 1
    assert _search(w, searched["target"], "--workers", "2") == 0
    assert _outputs(w) == searched["bytes"]
    serial, pooled = searched["runs"], _runs(w)
    assert pooled.keys() == serial.keys()
    assert all(pooled[n]["run"] == serial[n]["run"] for n in serial)  # but the seconds


def test_two_gloo_ranks_give_the_one_process_result(searched, tmp_path):
    from _helpers import torchrun_cli

    w = _workdir(tmp_path, searched["corpus"])
    res = torchrun_cli("search", "--workdir", w, "--target", searched["target"], *QUICK,
                       timeout=280)
    assert res.returncode == 0, res.stderr[-2000:]
    assert _outputs(w) == searched["bytes"]
    assert "`searched`" in res.stdout


def test_experiment_compares_the_searched_mixture(searched, tmp_path):
    """`experiment --strategies random,mixture` draws W/search/mixture.json with its timing
    and clip; a mixture for other labels or with bad weights is refused."""
    w = searched["w"]
    mix = json.loads((w / "search" / "mixture.json").read_text())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["experiment", "--workdir", str(w), "--quick", "--strategies",
                   "random,mixture,anneal", "--seeds", "1", "--tokens", "4096",
                   "--no-progress"])
    assert rc == 0
    res = json.loads((w / "experiment" / "results.json").read_text())
    assert res["config"]["mixture"]["weights"] == mix["weights"]
    for name in ("mixture", "anneal"):  # anneal: natural, then the mixture from 80% on
        sched = res["strategies"][name]["runs"][0]["schedule"]
        assert sched["max_repetition"] <= mix["clip"] and f"| {name} |" in \
            (w / "experiment" / "results.md").read_text()


@pytest.mark.parametrize("case", ["empty target", "no text field", "missing target", "runs 0",
                                  "other labels", "nan weight", "negative weight",
                                  "mixture without the strategy"])
def test_bad_input_is_one_line_and_exit_2(searched, tmp_path, capsys, case):
    w, target = searched["w"], searched["target"]
    mix = json.loads((w / "search" / "mixture.json").read_text())
    bad = tmp_path / "bad.json"
    cmd = ["search", "--workdir", str(w), "--target", str(target), *QUICK]
    exp = ["experiment", "--workdir", str(w), "--quick", "--strategies", "random,mixture",
           "--mixture", str(bad), "--no-progress"]
    if case == "empty target":
        (tmp_path / "t.jsonl").write_text("")
        cmd[4] = str(tmp_path / "t.jsonl")
    elif case == "no text field":
        (tmp_path / "t.jsonl").write_text('{"body": "a"}\n{"body": "b"}\n')
        cmd[4] = str(tmp_path / "t.jsonl")
    elif case == "missing target":
        cmd[4] = str(tmp_path / "nope.jsonl")
    elif case == "runs 0":
        cmd += ["--runs", "0"]
    elif case == "mixture without the strategy":
        cmd = exp[:5] + ["random,paced"] + exp[6:]
        bad.write_text(json.dumps(mix))
    else:
        weights = {"other labels": mix["weights"] + [0.1],
                   "nan weight": [float("nan")] + mix["weights"][1:],
                   "negative weight": [-0.1] + mix["weights"][1:]}[case]
        bad.write_text(json.dumps({**mix, "weights": weights}))
        cmd = exp
    before = {p: p.read_bytes() for p in (w / "search").glob("*.json")}
    rc = main(cmd)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert {p: p.read_bytes() for p in (w / "search").glob("*.json")} == before


def _word_tokenizer(texts: list[str], folder: Path) -> Path:
    """A real Hugging Face fast tokenizer folder (a 300-token BPE trained on ``texts``),
    small so that its proxies train in seconds."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300,
                                                       special_tokens=["[UNK]"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_a_tokenizer_proxy_reads_its_tokens_and_reports_bits_per_byte(searched, tmp_path):
    """--tokenizer DIR: the proxies' vocabulary is the tokenizer's + 1, the documents its
    tokens, and every test loss has its bits per byte beside it; with bytes (the default)
    bits per byte are the nats per token / ln 2."""
    from transformers import AutoTokenizer

    rows = [json.loads(line) for line in searched["corpus"].read_text().splitlines()]
    folder = _word_tokenizer([r["text"] for r in rows], tmp_path / "tok")
    w = _workdir(tmp_path, searched["corpus"])
    assert _search(w, searched["target"], "--runs", "2", "--rounds", "1",
                   "--tokenizer", str(folder)) == 0
    res = json.loads((w / "search" / "results.json").read_text())
    exp = res["config"]["experiment"]
    assert exp["tokenizer"] == str(folder)
    assert exp["model"]["vocab_size"] == len(AutoTokenizer.from_pretrained(folder)) + 1
    for arm, by in res["bits_per_byte"].items():
        assert set(by) == {"target", "micro"} and all(0 < x < 8 for x in by["target"])
        # more than one byte per token: a token's loss is spread over its bytes
        assert np.mean(by["micro"]) < np.mean(res["test"][arm]["micro"]) / math.log(2)
    md = (w / "search" / "results.md").read_text()
    assert "target bits/byte" in md and f"tokens of {folder}" in md
    byte_level = json.loads(searched["bytes"]["results.json"])
    for arm, by in byte_level["bits_per_byte"].items():
        np.testing.assert_allclose(by["target"],
                                   np.array(byte_level["test"][arm]["target"]) / math.log(2))


@pytest.mark.parametrize("command", ["search", "experiment"])
def test_a_folder_that_is_not_a_tokenizer_is_one_line_and_exit_2(searched, tmp_path, capsys,
                                                                command):
    (tmp_path / "vocab.json").write_text("{}")
    cmd = {"search": ["search", "--workdir", str(searched["w"]), "--target",
                      str(searched["target"]), *QUICK],
           "experiment": ["experiment", "--workdir", str(searched["w"]), "--quick",
                          "--no-progress"]}[command]
    assert main([*cmd, "--tokenizer", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--tokenizer {tmp_path}" in err, err
