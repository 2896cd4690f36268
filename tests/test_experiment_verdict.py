"""The experiment's verdict, the stratified subsample, the per-cluster repetition and the
model presets: pure pieces checked against hand-computed numbers."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.experiment.verdict import (
    BETTER,
    ONE_SEED,
    SAME,
    WORSE,
    compute_verdict,
    verdict_lines,
)

RANDOM = [1.50, 1.60, 1.55]
#: per-seed differences to random, one strategy per branch of the call
DIFFS = {
    "uniform": [-0.10, -0.12, -0.08],    # mean -0.10, 95% CI -0.150 to -0.050: better
    "clusterclip": [0.05, 0.07, 0.06],   # mean +0.06, 95% CI +0.035 to +0.085: worse
    "paced": [0.05, -0.04, 0.02],        # mean +0.01, 95% CI -0.104 to +0.124: no call
}


def _results(random: list[float], diffs: dict[str, list[float]]) -> dict:
    """A results dict with the same per-seed values for micro, macro and tail."""
    def runs(values: list[float]) -> list[dict]:
        return [{"seed": s, "val_micro": v, "val_macro": v, "val_tail": v}
                for s, v in enumerate(values)]

    strategies = {"random": {"runs": runs(random)}}
    for name, d in diffs.items():
        strategies[name] = {"runs": runs([r + x for r, x in zip(random, d, strict=True)])}
    model = {"seq_len": 64, "d_model": 48, "n_layers": 1, "n_heads": 2}  # the tiny preset
    return {"config": {"strategies": ["random", *diffs], "model": model, "max_doc_tokens": 64},
            "strategies": strategies}


def test_verdict_calls_each_difference_by_its_paired_t_interval():
    """The one rule: measurable when the paired-t 95% interval of the per-seed differences
    excludes 0 (checked against scipy's one-sample t test of the same differences)."""
    from scipy import stats

    v = compute_verdict(_results(RANDOM, DIFFS))
    assert v["seeds"] == 3 and v["has_random"]
    expected = {"uniform": BETTER, "clusterclip": WORSE, "paced": SAME}
    for metric in ("val_micro", "val_macro", "val_tail"):
        m = v["metrics"][metric]
        assert m["best"] == "uniform"  # lowest mean loss
        for name, diffs in DIFFS.items():
            got = m["vs_random"][name]
            ref = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
            assert got["mean"] == pytest.approx(statistics.mean(diffs))
            assert got["std"] == pytest.approx(statistics.stdev(diffs))
            assert (got["low"], got["high"]) == pytest.approx((ref.low, ref.high))
            assert got["detectable"] == pytest.approx((ref.high - ref.low) / 2)
            assert got["call"] == expected[name]
            assert got["measurable"] == (ref.low > 0 or ref.high < 0) == (got["call"] != SAME)
    lines = verdict_lines(_results(RANDOM, DIFFS))
    head = lines[1]
    # one plain sentence naming the proxy model, the measurable differences with intervals
    assert head.startswith("On this corpus, with 3 seeds of a 44k-parameter byte-level LM "
                           "(1 layer, d=48, window 64, reading the first 63 bytes of each "
                           "document): ")
    assert "uniform is measurably better than random on micro loss (-0.1000, 95% CI -0.1497 " \
        "to -0.0503) and on macro loss" in head
    assert "clusterclip is measurably worse than random on micro loss (+0.0600, 95% CI" in head
    assert head.endswith("; nothing else differs measurably.")
    text = "\n".join(lines)
    assert "- micro: lowest mean uniform (1.4500)" in text
    assert "paced +0.0100 (95% CI -0.1038 to +0.1238): not measurably different from random" \
        in text
    assert "paired-t 95% confidence interval excludes 0" in lines[-1]


def test_the_first_line_is_a_decision_with_its_gain_and_cost():
    """The strategy to use, from the per-seed numbers: the first of micro, macro, tail on
    which one beats random measurably (the lowest mean), with its paired interval, and its
    difference on the other of micro / macro as the cost."""
    from scipy import stats

    def ci(d):
        r = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
        return f"{statistics.mean(d):+.3f} (95% CI {r.low:+.3f} to {r.high:+.3f})"

    lines = verdict_lines(_results(RANDOM, DIFFS))
    assert lines[0] == (f"Use `uniform` sampling if the corpus's own mix (micro held-out loss) "
                        f"is what matters: {ci(DIFFS['uniform'])} against random sampling, at "
                        f"{ci(DIFFS['uniform'])} on balanced loss over the clusters (macro "
                        "held-out loss).")
    # better only on macro: the goal is macro, the cost micro
    res = _results(RANDOM, {"paced": [-0.05, -0.06, -0.04]})
    for run, d in zip(res["strategies"]["paced"]["runs"], [0.02, 0.03, 0.01], strict=True):
        run["val_micro"] = RANDOM[run["seed"]] + d
    assert verdict_lines(res)[0] == (
        "Use `paced` sampling if balanced loss over the clusters (macro held-out loss) is what "
        f"matters: {ci([-0.05, -0.06, -0.04])} against random sampling, at "
        f"{ci([0.02, 0.03, 0.01])} on the corpus's own mix (micro held-out loss).")
    one = _results(RANDOM[:1], {"uniform": [-0.1]})
    assert verdict_lines(one)[0].startswith("No decision yet: with one seed")


def test_the_rule_is_stricter_than_two_std_at_two_seeds_and_looser_at_ten():
    """The old rule (|mean| > 2 std) called these the other way: the t interval widens with
    few seeds (t = 12.7 at 2) and narrows with many (2.26 / sqrt(10) at 10)."""
    from clusterclip.experiment.verdict import paired_difference

    two = paired_difference([-0.0262, -0.0162])  # mean -0.0212, std 0.0071: beyond 2 std
    assert abs(two.mean) > 2 * two.std and not two.measurable and two.call() == SAME
    ten = paired_difference([-0.01 + 0.01 * z for z in (-1.5, -1, -0.5, 0, 0.5, 1, 1.5, -0.8,
                                                        0.8, 0)])  # mean -0.01, std 0.0096
    assert abs(ten.mean) < 2 * ten.std and ten.measurable and ten.call() == BETTER
    assert ten.call("prior") == "measurably better than prior"
    one = paired_difference([0.3])
    assert one.low is None and one.detectable is None and one.call() == ONE_SEED


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=2, max_size=12))
def test_measurable_is_a_two_sided_t_test_at_5_percent(diffs):
    from scipy import stats

    from clusterclip.experiment.verdict import paired_difference

    if statistics.stdev(diffs) < 1e-6:
        return  # degenerate: no spread
    p = paired_difference(diffs)
    pvalue = stats.ttest_1samp(diffs, 0.0).pvalue
    if abs(pvalue - 0.05) > 1e-9:  # the boundary itself is float noise
        assert p.measurable == (pvalue < 0.05)


def test_verdict_says_when_nothing_differs_measurably_and_when_random_is_best():
    res = _results(RANDOM, {"uniform": [0.01, -0.02, 0.015]})
    v = compute_verdict(res)
    assert v["metrics"]["val_micro"]["best"] == "random"
    assert v["metrics"]["val_micro"]["vs_random"]["uniform"]["call"] == SAME
    assert verdict_lines(res)[1].endswith(": no strategy differs measurably from random on "
                                          "micro, macro or tail held-out loss.")
    assert verdict_lines(res)[0] == ("Keep random sampling: nothing here beats it measurably "
                                     "on micro, macro or tail held-out loss.")
    res = _results(RANDOM, {"uniform": [-0.01, 0.02, -0.015]})
    assert "- micro: lowest mean uniform (1.5483); vs random: uniform -0.0017" in \
        "\n".join(verdict_lines(res))


def test_one_seed_gives_no_spread_and_no_call():
    from clusterclip.experiment.output import format_deltas, format_table
    from clusterclip.lm.metrics import METRICS, mean_std

    res = _results(RANDOM[:1], {k: d[:1] for k, d in DIFFS.items()})
    v = compute_verdict(res)
    assert v["seeds"] == 1
    for m in v["metrics"].values():
        assert all(d["call"] == ONE_SEED and d["std"] is None for d in m["vs_random"].values())
    text = "\n".join(verdict_lines(res))
    assert "no interval can be given" in text and "±" not in text and "CI" not in text
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
    assert "random sampling was not run" in verdict_lines(res)[1]
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
    base.validate()
    with pytest.raises(InputError, match="^model: unknown preset 'huge'") as e:
        ExperimentConfig().with_model("huge")
    assert e.value.params == ("model",)  # the command line shows it as --model


def test_random_alone_is_best_and_counts_its_seeds():
    res = _results(RANDOM, {})
    v = compute_verdict(res)
    assert v["seeds"] == 3 and v["metrics"]["val_micro"]["best"] == "random"
    lines = verdict_lines(res)
    assert lines[1].startswith("On this corpus, with 3 seeds of ")
    assert lines[1].endswith(": only random sampling was run, so nothing is compared.")
    assert lines[0] == "No decision: only random sampling was run, so nothing is compared."
    assert "- micro: lowest mean random (1.5500)." in lines
    assert not any("measurabl" in ln for ln in lines)  # nothing was compared
