"""The experiment's verdict (by the rules of :mod:`clusterclip.verdict`), the stratified
subsample, the per-cluster repetition and the model presets: pure pieces checked against
hand-computed numbers."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.experiment.verdict import compute_verdict, verdict_lines

RANDOM = [1.50, 1.60, 1.55]
#: per-seed differences to random, one strategy per branch of the call
DIFFS = {
    "uniform": [-0.10, -0.12, -0.08],    # mean -0.10, 95% CI -0.150 to -0.050: better
    "clusterclip": [0.05, 0.07, 0.06],   # mean +0.06, 95% CI +0.035 to +0.085: worse
    "paced": [0.05, -0.04, 0.02],        # mean +0.01, 95% CI -0.104 to +0.124: no call
}


def _results(random: list[float], diffs: dict[str, list[float]],
             by_metric: dict[str, dict[str, list[float]]] | None = None) -> dict:
    """A results dict with the same per-seed values for micro, macro and tail, unless
    ``by_metric`` gives a strategy's differences on one metric (``{"val_tail": {...}}``)."""
    def runs(name: str, d: list[float]) -> list[dict]:
        out = []
        for s, r in enumerate(random):
            run = {"seed": s}
            for m in ("val_micro", "val_macro", "val_tail"):
                run[m] = r + (by_metric or {}).get(m, {}).get(name, d)[s]
            out.append(run)
        return out

    strategies = {"random": {"runs": runs("random", [0.0] * len(random))}}
    for name, d in diffs.items():
        strategies[name] = {"runs": runs(name, d)}
    model = {"seq_len": 64, "d_model": 48, "n_layers": 1, "n_heads": 2}  # the tiny preset
    return {"config": {"strategies": ["random", *diffs], "model": model, "max_doc_tokens": 64},
            "strategies": strategies}


def _ci(d, digits=3):
    from scipy import stats

    r = stats.ttest_1samp(d, 0.0)
    ci = r.confidence_interval(0.95)
    return statistics.mean(d), ci.low, ci.high, r.pvalue


def test_the_family_is_every_strategy_on_every_loss_with_scipys_intervals_and_holm():
    """9 comparisons (3 strategies x micro, macro, tail), the primary (paced on macro)
    first; each one's mean, interval and p are scipy's one-sample t test of the per-seed
    differences, and the adjusted p-values are Holm's over the 9 (recomputed here)."""
    fam = compute_verdict(_results(RANDOM, DIFFS))["family"]
    assert fam["family"] == 9 and fam["primary"] == {"arm": "paced", "baseline": "random",
                                                     "metric": "macro"}
    comps = fam["comparisons"]
    assert [(c["arm"], c["metric"]) for c in comps][:3] == [
        ("uniform", "macro"), ("clusterclip", "macro"), ("paced", "macro")]
    assert [c["primary"] for c in comps].count(True) == 1
    raw = []
    for c in comps:
        mean, low, high, p = _ci(DIFFS[c["arm"]])
        assert (c["mean"], c["low"], c["high"], c["p"]) == pytest.approx((mean, low, high, p))
        raw.append(p)
    order = np.argsort(raw, kind="stable")
    holm = np.maximum.accumulate([min(1.0, (9 - k) * raw[i]) for k, i in enumerate(order)])
    assert [c["p_holm"] for c in comps] == pytest.approx(list(holm[np.argsort(order)]))
    for c in comps:
        assert c["measurable"] == ((c["low"] > 0 or c["high"] < 0) if c["primary"]
                                   else c["p_holm"] < 0.05)


def test_a_raw_interval_that_excludes_zero_is_not_measurable_after_holm():
    """The issue's case: every strategy lower on tail, one raw interval excluding 0 (p =
    0.04), but Holm over 9 comparisons leaves it at 0.36: not resolved, and the first line
    says what the seeds could detect, the direction and how many seeds would resolve it."""
    tail = {"uniform": [-0.020, -0.012, -0.028], "clusterclip": [-0.02, 0.01, -0.05],
            "paced": [-0.024, 0.02, -0.068]}
    macro = {"uniform": [0.004, -0.003, 0.008], "clusterclip": [0.01, -0.012, 0.004],
             "paced": [0.004, -0.006, 0.014]}
    res = _results(RANDOM, {k: [0.0, 0.0, 0.001] for k in tail},
                   {"val_tail": tail, "val_macro": macro})
    fam = compute_verdict(res)["family"]
    uni = next(c for c in fam["comparisons"] if (c["arm"], c["metric"]) == ("uniform", "tail"))
    mean, low, high, p = _ci(tail["uniform"])
    assert high < 0 and p < 0.05  # measurable alone ...
    assert uni["p_holm"] > 0.05 and not uni["measurable"]  # ... not in the family of 9
    assert fam["category"] == "not resolved" and fam["recommend"] is None
    prim = next(c for c in fam["comparisons"] if c["primary"])
    need = fam["seeds_to_resolve"]
    from scipy import stats

    def resolves(n):  # narrower than 0.005, or 80% power against the observed mean
        se = prim["std"] / np.sqrt(n)
        t = stats.t.ppf(0.975, n - 1)
        nc = abs(prim["mean"]) / se
        return t * se < 0.005 or stats.nct.sf(t, n - 1, nc) + stats.nct.sf(t, n - 1, -nc) \
            >= 0.8

    assert resolves(need) and not resolves(need - 1)
    line = verdict_lines(res, seconds_per_run=30.0)[0]
    assert line == (
        f"Not resolved at 3 seeds: the smallest difference they could detect on macro is "
        f"{prim['detectable']:.3f} (`paced` − random {prim['mean']:+.3f}, 95% CI "
        f"{prim['low']:+.3f} to {prim['high']:+.3f}); the strategies all point the same way "
        f"on tail ({min(np.mean(v) for v in tail.values()):+.3f} to "
        f"{max(np.mean(v) for v in tail.values()):+.3f}). Run with --seeds {need} "
        f"({(need - 3) * 4} more runs) to resolve it. That is about "
        f"{round((need - 3) * 4 * 30 / 60)} minutes at the 30 s per run measured here.")
    # the files leave the measured time out (they stay byte-identical): the same line before
    assert line.startswith(verdict_lines(res)[0])
    assert verdict_lines(res)[0].endswith(f"Run with --seeds {need} ({(need - 3) * 4} more "
                                          "runs) to resolve it.")


def test_the_primary_alone_at_5_percent_decides_and_a_holm_secondary_can():
    """The primary (p < 0.05, not below 0.05 / 9) recommends its strategy; with a
    non-default primary the first line names the declared question; a secondary that
    survives Holm recommends its strategy and says the primary was not resolved."""
    macro = {"uniform": [0.0, 0.01, -0.01], "clusterclip": [0.0, 0.01, -0.01],
             "paced": [-0.020, -0.012, -0.028]}
    res = _results(RANDOM, {k: [0.01, -0.01, 0.0] for k in macro}, {"val_macro": macro})
    fam = compute_verdict(res)["family"]
    prim = next(c for c in fam["comparisons"] if c["primary"])
    assert 0.05 / 9 < prim["p"] < 0.05 and prim["p_holm"] > 0.05 and prim["measurable"]
    assert fam["category"] == "resolved-better" and fam["recommend"]["arm"] == "paced"
    line = verdict_lines(res)[0]
    assert line.startswith("Use `paced` sampling if balanced loss over the clusters (macro "
                           f"held-out loss) is what matters: {prim['mean']:+.3f} (95% CI "
                           f"{prim['low']:+.3f} to {prim['high']:+.3f}; p = "
                           f"{prim['p']:.2g}, the primary question) against random sampling, "
                           "at +0.000 (95% CI")
    # uniform far better on micro (survives Holm); the primary (paced on macro) is noise
    res = _results(RANDOM, {"uniform": [0.0, 0.01, -0.01], "paced": [0.01, -0.02, 0.0]},
                   {"val_micro": {"uniform": [-0.10, -0.101, -0.099]}})
    fam = compute_verdict(res)["family"]
    rec = fam["recommend"]
    assert (rec["arm"], rec["metric"], rec["primary"]) == ("uniform", "micro", False)
    assert rec["p_holm"] < 0.05
    line = verdict_lines(res)[0]
    assert line.startswith("Use `uniform` sampling if the corpus's own mix (micro held-out "
                           "loss) is what matters: -0.100 (95% CI")
    assert f"Holm-adjusted p = {rec['p_holm']:.2g} over 6 comparisons" in line
    assert "; the primary question (`paced` on macro) is not resolved (" in line


def test_worse_and_equivalent_primaries_keep_random():
    res = _results(RANDOM, {"paced": [0.05, 0.07, 0.06]})
    fam = compute_verdict(res)["family"]
    assert fam["category"] == "resolved-worse"
    assert verdict_lines(res)[0].startswith("Keep random sampling: `paced` is measurably "
                                            "worse on macro, the primary question: +0.060")
    res = _results(RANDOM, {"paced": [0.001, -0.001, 0.0]})
    fam = compute_verdict(res)["family"]
    prim = next(c for c in fam["comparisons"] if c["primary"])
    assert prim["detectable"] < 0.005 and fam["category"] == "resolved-equivalent"
    assert verdict_lines(res)[0].startswith(
        "Keep random sampling: `paced` differs from it by less than the smallest effect of "
        "interest (0.005) on macro, the primary question: +0.000")


def test_a_declared_primary_replaces_the_default():
    res = _results(RANDOM, DIFFS)
    res["config"]["primary"] = "clusterclip:tail"
    fam = compute_verdict(res)["family"]
    assert fam["primary"] == {"arm": "clusterclip", "baseline": "random", "metric": "tail"}
    assert fam["comparisons"][0]["metric"] == "tail"
    lines = verdict_lines(res)
    assert lines[2].startswith("Primary question, declared before the runs: `clusterclip` "
                               "against random on tail held-out loss: +0.0600")
    # uniform's -0.10 (p 0.013) does not survive Holm over 9: no recommendation
    assert lines[0].startswith("Keep random sampling: `clusterclip` is measurably worse on "
                               "tail")


def test_the_model_and_what_it_cannot_tell_sit_beside_the_decision():
    lines = verdict_lines(_results(RANDOM, DIFFS))
    assert lines[1] == ("This verdict rests on a 44k-parameter byte-level LM (1 layer, d=48, "
                        "window 64, reading the first 63 bytes of each document): it cannot "
                        "tell how a larger model, or one reading whole documents, would rank "
                        "these mixtures.")


def test_one_seed_gives_no_spread_and_no_call():
    from clusterclip.experiment.output import format_deltas, format_table
    from clusterclip.lm.metrics import METRICS, mean_std

    res = _results(RANDOM[:1], {k: d[:1] for k, d in DIFFS.items()})
    v = compute_verdict(res)
    assert v["seeds"] == 1
    assert all(c["std"] is None and c["p"] is None and not c["measurable"]
               for c in v["family"]["comparisons"])
    text = "\n".join(verdict_lines(res))
    assert text.startswith("No decision yet: with one seed no interval can be given")
    assert "±" not in text and "CI" not in text
    assert "measurably different" not in text and "measurably better" not in text
    # the tables never show a spread of one value either
    for entry in res["strategies"].values():
        entry["metrics"] = {m: mean_std([1.5]) for m in METRICS}
        entry["vs_random"] = {m: mean_std([0.01]) for m in METRICS}
    res["config"]["balance_by"] = "docs"
    assert "±" not in format_table(res) and "±" not in format_deltas(res)


def test_verdict_without_random_names_only_the_best():
    res = _results(RANDOM, {"uniform": [0.1, 0.1, 0.1]})
    res["config"]["strategies"] = ["uniform"]
    v = compute_verdict(res)
    assert v["metrics"]["val_tail"]["best"] == "uniform" and not v["has_random"]
    assert v["family"] is None
    assert verdict_lines(res)[0].startswith("No decision: random sampling was not run")


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 60), min_size=1, max_size=15),
       excluded=st.integers(0, 20), frac=st.floats(0.05, 1.2), seed=st.integers(0, 50))
def test_stratified_subsample_keeps_each_cluster_share(sizes, excluded, frac, seed):
    from clusterclip.lm.data import stratified_subsample

    labels = np.concatenate([np.repeat(np.arange(len(sizes)), sizes),
                             np.full(excluded, -1)]).astype(np.int64)
    labels = np.random.default_rng(seed).permutation(labels)
    n = int(sum(sizes))
    max_docs = max(1, int(frac * n))
    keep = stratified_subsample(labels, max_docs, seed)
    assert not keep[labels < 0].any()  # excluded documents are never kept
    assert keep.sum() == min(max_docs, n)
    kept = np.bincount(labels[keep], minlength=len(sizes))
    for k, size in enumerate(sizes):
        assert kept[k] <= size
        if n > max_docs:
            assert abs(kept[k] - max_docs * size / n) < 1  # its share, within rounding
    np.testing.assert_array_equal(keep, stratified_subsample(labels, max_docs, seed))


def test_cluster_repetition_counts_feeds_per_training_document():
    from clusterclip.lm.metrics import cluster_repetition

    train_labels = np.array([0, 0, 1, 1, 1, -1, 2])  # doc 5 is held out
    fed = np.array([0, 0, 1, 2, 3, 5, 5, 0])         # held-out doc 5 is not counted
    # cluster 0: 4 feeds / 2 docs; cluster 1: 2 / 3; cluster 2: 0 / 1
    np.testing.assert_allclose(cluster_repetition(fed, train_labels, [0, 1, 2]),
                               [2.0, 2 / 3, 0.0])


def test_parameter_count_without_building_the_model():
    from clusterclip.lm.config import MODEL_PRESETS, ModelConfig
    from clusterclip.lm.model import ByteLM

    # (the GPU presets' counts follow from the same formula; not built here: 60M floats)
    for cfg in [MODEL_PRESETS[n][0] for n in ("tiny", "small", "base")] + [
            ModelConfig(32, 16, 3, 2), ModelConfig(32, 16, 1, 2, vocab_size=1001)]:
        assert cfg.num_parameters() == ByteLM(cfg).num_parameters()


def test_model_presets_grow_and_set_the_window():
    from clusterclip.errors import InputError
    from clusterclip.experiment import ExperimentConfig
    from clusterclip.lm.config import MODEL_PRESETS
    from clusterclip.lm.model import ByteLM

    sizes = [m.num_parameters() for m, _ in MODEL_PRESETS.values()]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)  # one size up is larger
    assert ByteLM(MODEL_PRESETS["small"][0]).num_parameters() == sizes[1]
    # the GPU presets: about 15M and 60M parameters
    assert 13e6 < MODEL_PRESETS["medium"][0].num_parameters() < 17e6
    assert 55e6 < MODEL_PRESETS["large"][0].num_parameters() < 65e6
    assert ExperimentConfig.quick().model == MODEL_PRESETS["tiny"][0]
    assert ExperimentConfig().model == MODEL_PRESETS["small"][0]
    base = ExperimentConfig().with_model("base")
    assert base.model == MODEL_PRESETS["base"][0] and base.train.lr == MODEL_PRESETS["base"][1]
    assert base.max_doc_tokens == base.model.seq_len
    assert dataclasses.replace(base, seeds=2).seeds == 2  # made again, checked again
    with pytest.raises(InputError, match="^model: unknown preset 'huge'") as e:
        ExperimentConfig().with_model("huge")
    assert e.value.params == ("model",)  # the command line shows it as --model


def test_random_alone_is_best_and_counts_its_seeds():
    res = _results(RANDOM, {})
    v = compute_verdict(res)
    assert v["seeds"] == 3 and v["metrics"]["val_micro"]["best"] == "random"
    lines = verdict_lines(res)
    assert lines[0] == "No decision: only random sampling was run, so nothing is compared."
    assert "- micro: lowest mean random (1.5500)." in lines
    assert not any("measurabl" in ln for ln in lines)  # nothing was compared


def test_the_gap_trend_is_called_after_holm_over_the_strategies():
    """The over-fitting sentence follows the rules of every verdict: each strategy's
    per-seed excess-gap slopes get a paired-t p, and a trend is measurable only when that
    p, Holm-adjusted over the strategies tested, is below 0.05 (recomputed here)."""
    from scipy import stats

    from clusterclip.experiment.output import gap_conclusion

    reps = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    slopes = {"random": [0.0, 0.0, 0.0], "uniform": [0.010, 0.012, 0.011],
              "paced": [0.004, -0.003, 0.0005]}

    def runs(name):
        return [{"seed": s, "per_cluster": {str(k): {
            "gap": slopes[name][s] * math.log2(r), "repetition": r,
            "size": 10, "loss": 2.0} for k, r in enumerate(reps)}} for s in range(3)]

    res = {"config": {"strategies": list(slopes), "balance_by": "docs"},
           "strategies": {n: {"runs": runs(n)} for n in slopes}}
    lines = {ln.split(":")[0][2:]: ln for ln in gap_conclusion(res)}
    # random's own gap (no trend: p 1), uniform's and paced's excess over random
    ps = {"random": 1.0, **{n: stats.ttest_1samp(slopes[n], 0.0).pvalue
                            for n in ("uniform", "paced")}}
    order = sorted(ps, key=ps.get)
    adj, run = {}, 0.0
    for k, n in enumerate(order):
        run = max(run, min(1.0, (3 - k) * ps[n]))
        adj[n] = run
    assert adj["uniform"] < 0.05 < adj["paced"]
    assert lines["uniform"].startswith(
        "- uniform: the excess gap over random grows measurably with repetition "
        "(over-fitting of repeated clusters): +0.0110")
    assert f"Holm-adjusted p {adj['uniform']:.2g} over 3 strategies" in lines["uniform"]
    assert lines["paced"].startswith("- paced: the excess gap over random shows no "
                                     "measurable trend")
    assert lines["random"].startswith("- random: the gap shows no measurable trend")
