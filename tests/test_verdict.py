"""The statistics of every verdict (:mod:`clusterclip.verdict`): the paired-t rule and its
p-value against scipy, Holm's adjustment against its definition, the decision of a family
with a declared primary, the seeds that would resolve it and the stop rule of ``--seeds
auto``."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clusterclip.verdict import (
    SAME,
    SeedRule,
    compare_family,
    holm,
    paired_difference,
    seeds_to_resolve,
)


def test_the_rule_is_stricter_than_two_std_at_two_seeds_and_looser_at_ten():
    """The old rule (|mean| > 2 std) called these the other way: the t interval widens with
    few seeds (t = 12.7 at 2) and narrows with many (2.26 / sqrt(10) at 10)."""
    two = paired_difference([-0.0262, -0.0162])  # mean -0.0212, std 0.0071: beyond 2 std
    assert abs(two.mean) > 2 * two.std and not two.measurable and two.call() == SAME
    ten = paired_difference([-0.01 + 0.01 * z for z in (-1.5, -1, -0.5, 0, 0.5, 1, 1.5, -0.8,
                                                        0.8, 0)])  # mean -0.01, std 0.0096
    assert abs(ten.mean) < 2 * ten.std and ten.measurable
    assert ten.call("prior") == "measurably better than prior"
    one = paired_difference([0.3])
    assert one.low is None and one.detectable is None and one.p is None


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=2, max_size=12))
def test_measurable_and_p_are_scipys_two_sided_t_test(diffs):
    from scipy import stats

    if statistics.stdev(diffs) < 1e-6:
        return  # degenerate: no spread
    p = paired_difference(diffs)
    ref = stats.ttest_1samp(diffs, 0.0)
    assert p.p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)
    if abs(ref.pvalue - 0.05) > 1e-9:  # the boundary itself is float noise
        assert p.measurable == (ref.pvalue < 0.05)


def _holm_reference(ps: list[float]) -> list[float]:
    """Holm by its closed-testing form: p_i adjusted is the largest, over the hypotheses
    ranked no later than i, of min(1, (m - rank) p)."""
    m = len(ps)
    ranked = sorted(range(m), key=lambda i: (ps[i], i))
    rank = {i: r for r, i in enumerate(ranked)}
    return [max(min(1.0, (m - rank[j]) * ps[j]) for j in range(m) if rank[j] <= rank[i])
            for i in range(m)]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=12))
def test_holm_is_the_step_down_adjustment(ps):
    got = holm(ps)
    assert got == pytest.approx(_holm_reference(ps))
    assert all(a >= p for a, p in zip(got, ps, strict=True))  # never below the raw p
    # a rejection at 5% by Holm is a rejection by the step-down procedure itself
    m = len(ps)
    order = sorted(range(m), key=lambda i: (ps[i], i))
    rejected = set()
    for k, i in enumerate(order):
        if ps[i] > 0.05 / (m - k):
            break
        rejected.add(i)
    assert {i for i, a in enumerate(got) if a <= 0.05} == rejected or any(
        math.isclose(ps[i] * (m - k), 0.05) for k, i in enumerate(order))


def test_a_family_where_the_raw_interval_excludes_zero_but_holm_does_not():
    """Three comparisons: the secondary's raw interval excludes 0 (p 0.02 < 0.05) but 3 x
    0.02 > 0.05 after Holm; the primary is noise: not resolved, nothing recommended."""
    diffs = {("a", "random", "macro"): [0.01, -0.02, 0.005, 0.0],
             ("a", "random", "tail"): [-0.030, -0.010, -0.022, -0.015],
             ("b", "random", "tail"): [0.01, 0.0, -0.01, 0.005]}
    fam = compare_family(diffs, ("a", "random", "macro"))
    sec = fam["comparisons"][1]
    raw = paired_difference(diffs[("a", "random", "tail")])
    assert raw.measurable and 0.05 / 3 < raw.p < 0.05
    assert sec["p"] == pytest.approx(raw.p) and sec["p_holm"] > 0.05 and not sec["measurable"]
    assert fam["family"] == 3 and fam["category"] == "not resolved"
    assert fam["recommend"] is None
    # the same secondary as the declared primary: tested alone, it decides
    fam = compare_family(diffs, ("a", "random", "tail"))
    assert fam["category"] == "resolved-better" and fam["recommend"]["metric"] == "tail"
    # a comparison against another baseline counts in the family but recommends nothing
    fam = compare_family({**diffs, ("b", "a", "micro"): [-0.5, -0.51, -0.49, -0.5]},
                         ("a", "random", "tail"))
    assert fam["family"] == 4 and fam["recommend"]["arm"] == "a"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-0.05, 0.05, allow_nan=False), min_size=2, max_size=8),
       st.floats(0.001, 0.02))
@example([-0.03125, -0.041015625], 0.015625)  # scipy's nct.cdf gave NaN for its lower tail
def test_seeds_to_resolve_is_the_fewest_that_narrow_or_have_80_percent_power(diffs, eff):
    """Against power simulated here (a slow reference, not the noncentral t the code uses):
    at the seeds returned, the interval is narrower than the effect of interest or about 4
    in 5 simulated experiments with the observed mean and spread exclude 0; one seed fewer,
    neither (within the simulation's noise)."""
    from scipy import stats

    p = paired_difference(diffs)
    n = seeds_to_resolve(p, eff)
    if n is None or p.std == 0:
        return

    def narrow(k):
        return stats.t.ppf(0.975, k - 1) * p.std / math.sqrt(k) < eff

    def simulated(k):
        rng = np.random.default_rng(k)
        x = rng.normal(p.mean, p.std, size=(4000, k))
        half = stats.t.ppf(0.975, k - 1) * x.std(axis=1, ddof=1) / math.sqrt(k)
        return float(np.mean(np.abs(x.mean(axis=1)) > half))

    assert narrow(n) or simulated(n) >= 0.8 - 0.03
    if n > max(2, p.n):
        assert not narrow(n - 1) and simulated(n - 1) < 0.8 + 0.03


def test_the_seed_rule_stops_when_resolved_or_at_its_cap():
    rule = SeedRule(start=3, step=3, cap=12, min_effect=0.005)
    noisy = [0.02, -0.03, 0.01]
    assert rule.next_count(noisy) == 6
    assert rule.next_count([-0.02, -0.021, -0.019]) is None  # excludes 0
    assert rule.next_count([0.0005, -0.0005, 0.0]) is None  # narrow
    assert rule.next_count(noisy * 4) is None  # the cap
    assert rule.next_count(noisy * 3 + noisy[:2]) == 12
    counts = [3]
    for extra in itertools.count():  # a primary that never resolves runs 3, 6, 9, 12
        nxt = rule.next_count((noisy * 4)[:counts[-1]])
        if nxt is None:
            break
        counts.append(nxt)
        assert extra < 10
    assert counts == [3, 6, 9, 12]


def test_a_secondary_recommendation_says_what_became_of_the_primary():
    """The primary measurably worse, a secondary far better after Holm: the line recommends
    the secondary's arm and says the primary was measurably worse, with its interval."""
    from clusterclip.verdict import first_line

    diffs = {("a", "random", "macro"): [0.02, 0.021, 0.019],
             ("b", "random", "macro"): [-0.10, -0.101, -0.099]}
    fam = compare_family(diffs, ("a", "random", "macro"))
    assert fam["category"] == "resolved-better" and fam["recommend"]["arm"] == "b"
    line = first_line(fam, names={"macro": "macro"}, rerun="--seeds", runs_per_seed=3,
                      how={"b": " sampling"})
    prim = paired_difference(diffs[("a", "random", "macro")])
    assert line.startswith("Use `b` sampling if balanced loss over the clusters (macro "
                           "held-out loss) is what matters: -0.100 (95% CI ")
    assert line.endswith(f"; the primary question (`a` on macro) is measurably worse "
                         f"({prim.interval(3, inside=True)}).")


def _run_rule(rule: SeedRule, d: np.ndarray) -> int:
    """The seeds the rule stops at as ``--seeds auto`` runs it (next_count after each
    batch)."""
    n = rule.start
    while (nxt := rule.next_count(d[:n])) is not None:
        n = nxt
    return n


@pytest.mark.parametrize("mean, sd", [(0.0, 1.0), (1.5, 1.0), (0.0, 0.004), (0.01, 0.02)])
def test_the_vectorised_rule_is_the_rule_the_commands_run(mean, sd):
    """SeedRule.simulate (the many-replicate form behind the error-rate tests below) stops
    at the seeds next_count stops at and calls the primary measurable exactly when the
    verdict's family does, at the family's level; the cases reach every stop: the
    interval, the smallest effect of interest (sd 0.004 against 0.005) and the cap."""
    rule = SeedRule()
    draws = np.random.default_rng(5).normal(mean, sd, (150, rule.cap))
    seeds, called = rule.simulate(draws)
    key = ("a", "random", "macro")
    for i, (d, n, c) in enumerate(zip(draws, seeds, called, strict=True)):
        assert _run_rule(rule, d) == n and rule.paired(d[:n]).measurable == c
        if i < 10:  # the verdict's family (slower: it plans the seeds to resolve)
            fam = compare_family({key: d[:n].tolist()}, key, min_effect=rule.min_effect,
                                 looks=rule.looks)
            assert fam["comparisons"][0]["measurable"] == c and fam["level"] == rule.level
            assert fam["category"] in (("resolved-better", "resolved-worse") if c else
                                       ("resolved-equivalent", "not resolved"))
    assert set(seeds.tolist()) <= set(rule.counts)


def test_seeds_auto_calls_a_zero_difference_measurable_at_most_5_percent_of_the_time():
    """Optional stopping: 20,000 experiments with no true difference (normal per-seed
    differences, mean 0; sd 1 against min_effect 0.005, so no run stops as equivalent:
    the worst case), looked at after 3, 6, 9 and 12 seeds. Held to 1.25% a look (98.75%
    intervals), the primary is called measurable in at most 5% of them (+ 3 standard errors
    of the simulation); held to 5% a look, as before the correction, it is called in more
    than that (so this test can fail), and the 4 looks are what the rule plans."""
    rule = SeedRule()
    assert (rule.counts, rule.looks, rule.level) == ((3, 6, 9, 12), 4, 0.0125)
    reps = 20_000
    null = np.random.default_rng(37).normal(0.0, 1.0, (reps, rule.cap))
    margin = 3 * math.sqrt(0.05 * 0.95 / reps)
    seeds, called = rule.simulate(null)
    assert called.mean() <= 0.05 + margin
    _, naive = rule.simulate(null, level=0.05)
    assert naive.mean() > 0.05 + margin
    assert (seeds == rule.cap).mean() > 0.9  # a null rarely stops early


@pytest.mark.parametrize("start, step, cap", [(1, 1, 3), (2, 2, 10), (3, 4, 12), (4, 4, 4)])
def test_any_rule_keeps_its_false_positive_rate_within_5_percent(start, step, cap):
    """The split follows the rule's own looks (a first look at one seed spends nothing, a
    single batch is one look at 5%): under the null each of these rules calls the primary
    in at most 5% of 20,000 experiments (+ 3 standard errors)."""
    rule = SeedRule(start=start, step=step, cap=cap, min_effect=0.0)
    null = np.random.default_rng(cap).normal(0.0, 1.0, (20_000, cap))
    _, called = rule.simulate(null)
    assert called.mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 20_000)
    if rule.looks == 1:  # one look: the plain 95% interval, exactly 5% in expectation
        assert rule.level == 0.05 and called.mean() > 0.05 - 3 * math.sqrt(0.05 * 0.95 / 20_000)


def test_seeds_auto_still_resolves_a_real_effect():
    """The correction costs power but does not collapse it: with a true difference of 1.5
    per-seed standard deviations, the corrected rule calls it measurable in most
    experiments (the right way round), before the cap in most."""
    rule = SeedRule()
    draws = np.random.default_rng(38).normal(-1.5, 1.0, (5000, rule.cap))
    seeds, called = rule.simulate(draws)
    assert called.mean() > 0.9 and (seeds < rule.cap).mean() > 0.5
    assert (draws.cumsum(axis=1)[np.arange(len(seeds)), seeds - 1][called] < 0).all()


def test_the_looks_are_the_seed_counts_that_can_call_a_difference():
    """One seed gives no interval, so a rule starting at 1 does not spend a share of the 5%
    on it; a rule that runs one batch (start at the cap) looks once, at 5%, and says no
    split; the rule survives results.json (looks and level kept beside it)."""
    assert SeedRule(start=1, step=1, cap=3).counts == (1, 2, 3)
    assert SeedRule(start=1, step=1, cap=3).looks == 2
    assert SeedRule(start=3, step=4, cap=12).counts == (3, 7, 11, 12)
    one = SeedRule(start=5, step=3, cap=5)
    assert (one.looks, one.level) == (1, 0.05)
    assert "Bonferroni" not in one.describe("x", option="--seeds") \
        and "95% interval" in one.describe("x", option="--seeds")
    rule = SeedRule(start=2, step=5, cap=12, min_effect=0.01)
    assert SeedRule.of(rule.to_dict()) == rule
    assert rule.to_dict()["looks"] == 3 and rule.to_dict()["level"] == pytest.approx(0.05 / 3)
    text = rule.describe("`a` against random on macro", option="--seeds")
    assert "its paired 98.33% interval excludes 0" in text
    assert "over the 3 planned looks at the primary (at 2, 7 and 12 seeds; Bonferroni)" in text


def test_a_family_under_auto_is_held_to_the_looks_level_everywhere():
    """At 4 looks (1.25% each): a primary with p between 1.25% and 5% is not measurable,
    its interval is the 98.75% one, and a secondary with a Holm-adjusted p between 1.25%
    and 5% is not measurable either, so the first line says not resolved, with the level
    and the looks; with one look the same numbers are measurable at 95% (the fixed-seed
    verdict, unchanged)."""
    from clusterclip.verdict import first_line

    prim = [-0.010, -0.020, 0.002, -0.002, -0.015, -0.008]
    diffs = {("a", "random", "macro"): prim,
             ("a", "random", "tail"): [-0.03, -0.01, -0.022, 0.0, -0.02, -0.018]}
    raw = paired_difference(prim)
    assert 0.0125 < raw.p < 0.05 and raw.measurable
    fixed = compare_family(diffs, ("a", "random", "macro"))
    auto = compare_family(diffs, ("a", "random", "macro"), looks=4)
    assert fixed["category"] == "resolved-better" and fixed["recommend"]["metric"] == "macro"
    assert "looks" not in fixed and "confidence" not in fixed["comparisons"][0]
    assert fixed["comparisons"][1]["measurable"]  # Holm 0.022 < 0.05
    p, sec = auto["comparisons"]
    wide = paired_difference(prim, 0.0125)
    assert (auto["looks"], auto["level"], p["confidence"]) == (4, 0.0125, 0.9875)
    assert (p["low"], p["high"], p["measurable"]) == (wide.low, wide.high, False)
    assert wide.low < 0 < wide.high and wide.p == raw.p
    assert 0.0125 < sec["p_holm"] < 0.05 and not sec["measurable"]
    assert auto["category"] == "not resolved" and auto["recommend"] is None
    line = first_line(auto, names={"macro": "macro", "tail": "tail"}, rerun="--seeds",
                      runs_per_seed=2, cap=12)
    assert line.startswith("Not resolved at 6 seeds (tested at 1.25%: 5% over 4 planned "
                           "looks): the smallest difference they could detect on macro is "
                           f"{wide.detectable:.3f} (`a` − random {wide.interval(3, True)})")
    assert "98.75% CI" in line
