"""The experiment's computed verdict, by the rules of :mod:`clusterclip.verdict`.

The family: every strategy but random against random, on micro, macro and tail held-out
loss (3 strategies: 9 comparisons), paired by seed. The primary question, declared before
the runs, is the default strategy (paced) against random on macro held-out loss unless
``primary`` names another (``--primary STRATEGY:METRIC``); it is tested alone at 5%, the
others after Holm's correction over the family. When ``--seeds auto`` chose the seeds,
every test is at the stop rule's per-look level instead (5% over its planned looks,
:attr:`clusterclip.verdict.SeedRule.level`).

Pure: a results dict in (only ``config``, ``primary`` and each run's metric values and
seed are read), plain data and sentences out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clusterclip.lm.config import describe_model
from clusterclip.lm.runconfig import (  # noqa: F401  (the config's; re-exported here)
    PRIMARY_METRIC,
    PRIMARY_STRATEGY,
    SEED_RULE,
    VERDICT_METRICS,
    default_primary,
    parse_primary,
)
from clusterclip.verdict import (
    Paired,
    SeedRule,
    compare_family,
    first_line,
    limits_line,
    looks_words,
    percent,
    primary_of,
)

#: The option of ``clusterclip experiment`` that sets the seeds, spelled here once: the
#: verdict's advice (``Run with --seeds 6``) and results.md's seed rule name it, for the
#: user to act on (the command line's own text, kept as data for those lines).
SEEDS_OPTION = "--seeds"


def primary_of_results(results: dict[str, Any]) -> tuple[str, str] | None:
    """The primary of a results dict: its ``config["primary"]`` or the default."""
    named = results["config"].get("primary")
    if named:
        return parse_primary(named)
    return default_primary(results["config"]["strategies"])


def _values(results: dict[str, Any], name: str, metric: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[metric]) for r in results["strategies"][name]["runs"]}


def experiment_family(results: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`clusterclip.verdict.compare_family` of the experiment: every strategy but
    random against random on micro, macro and tail (the primary's metric first), paired
    by the seeds both ran; None without a primary (random, or every other, not run)."""
    primary = primary_of_results(results)
    if primary is None:
        return None
    names = list(results["config"]["strategies"])
    by_label = {label: metric for metric, label in VERDICT_METRICS.items()}
    order = [primary[1]] + [m for m in VERDICT_METRICS.values() if m != primary[1]]
    diffs = {}
    for label in order:
        base = _values(results, "random", by_label[label])
        for n in names:
            if n == "random":
                continue
            vals = _values(results, n, by_label[label])
            common = sorted(set(vals) & set(base))
            diffs[(n, "random", label)] = [vals[s] - base[s] for s in common]
    rule = seed_rule_of(results)
    return compare_family(diffs, (primary[0], "random", primary[1]),
                          min_effect=rule.min_effect,
                          looks=rule.looks if results["config"].get("auto_seeds") else 1)


def seconds_per_run(results: dict[str, Any]) -> float | None:
    """The mean measured seconds of one run (``timing``, a stored run's as recorded), for
    the time more seeds would take; None when none was timed (results.json keeps no
    timing)."""
    t = [v for k, v in results.get("timing", {}).items() if "/seed" in k]
    return float(np.mean(t)) if t else None


def seed_rule_of(results: dict[str, Any]) -> SeedRule:
    """The ``--seeds auto`` stop rule a results dict was run under (its ``config``'s
    ``seed_rule``; the default rule for results written without one)."""
    r = results["config"].get("seed_rule")
    return SeedRule.of(r) if r else SEED_RULE


def compute_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Per verdict metric the best strategy by mean loss over seeds, and the family of
    comparisons with random (:func:`experiment_family`).

    Returns ``{"seeds": int, "has_random": bool, "metrics": {metric: {"best": name,
    "means": {name: mean}}}, "family": compare_family(...) or None}``.
    """
    names = list(results["config"]["strategies"])
    out: dict[str, Any] = {"has_random": "random" in names, "metrics": {}}
    seeds = 0
    for metric in VERDICT_METRICS:
        vals = {n: _values(results, n, metric) for n in names}
        means = {n: float(np.mean(list(v.values()))) for n, v in vals.items()}
        best = min(names, key=lambda n: (means[n], names.index(n)))
        out["metrics"][metric] = {"best": best, "means": means}
        seeds = max(seeds, max(len(v) for v in vals.values()))
    out["seeds"] = seeds
    out["family"] = experiment_family(results)
    return out


def experiment_decision(v: dict[str, Any], results: dict[str, Any],
                        seconds_per_run: float | None = None) -> str:
    """The experiment's first line (:func:`clusterclip.verdict.first_line`): the strategy
    to use on a measurable primary or a Holm-measurable secondary, at its difference on
    micro (on macro when the goal is micro); else why random stays, or what the seeds could
    resolve and how many would."""
    if not v["has_random"]:
        return ("No decision: random sampling was not run, so nothing is compared with it; "
                "rerun with random among --strategies.")
    fam = v["family"]
    if fam is None:
        return "No decision: only random sampling was run, so nothing is compared."
    rec = fam["recommend"]
    cost = "macro" if rec is not None and rec["metric"] == "micro" else "micro"
    c = results["config"]
    rule = seed_rule_of(results)
    return first_line(fam, names={m: m for m in VERDICT_METRICS.values()}, rerun=SEEDS_OPTION,
                      runs_per_seed=len(c["strategies"]),
                      how={n: " sampling" for n in c["strategies"]}, cost=cost,
                      arms="the strategies", seconds_per_run=seconds_per_run,
                      cap=rule.cap if c.get("auto_seeds") else None)


def _summary(v: dict[str, Any]) -> str:
    """The primary question's result and how many secondaries are measurable."""
    fam = v["family"]
    prim = primary_of(fam)
    p = Paired.of(prim)
    state = p.call()
    second = [c for c in fam["comparisons"] if not c["primary"]]
    found = [f"`{c['arm']}` on {c['metric']} ({Paired.of(c).interval(3, inside=True)}, "
             f"Holm-adjusted p {c['p_holm']:.2g})" for c in second if c["measurable"]]
    text = (f"Primary question, declared before the runs: `{prim['arm']}` against random on "
            f"{prim['metric']} held-out loss: {p.interval(4)}"
            + (f", p = {prim['p']:.2g}" if prim["p"] is not None else "")
            + (f" ({looks_words(fam)})" if looks_words(fam) else "") + f": {state}. ")
    if not second:
        return text + "No secondary comparison."
    if found:
        return text + (f"Of the {len(second)} secondary comparisons, measurable after Holm's "
                       f"correction over all {fam['family']}: " + "; ".join(found) + ".")
    return text + (f"None of the {len(second)} secondary comparisons is measurable after "
                   f"Holm's correction over all {fam['family']} comparisons.")


def verdict_lines(results: dict[str, Any], seconds_per_run: float | None = None
                  ) -> list[str]:
    """The verdict as plain lines (no markup): the decision (:func:`experiment_decision`),
    what the verdict rests on and cannot tell, the primary question and the secondaries,
    one line per metric, then the rule. Used by results.md, the CLI and the demo
    (``seconds_per_run``: the measured seconds of one run, for the time a rerun takes; the
    files leave it out, so that they stay byte-identical)."""
    v = compute_verdict(results)
    lines = [experiment_decision(v, results, seconds_per_run),
             limits_line(describe_model(results["config"]))]
    fam = v["family"]
    if fam is not None and v["seeds"] >= 2:
        lines.append(_summary(v))
    for metric, label in VERDICT_METRICS.items():
        e = v["metrics"][metric]
        text = f"- {label}: lowest mean {e['best']} ({e['means'][e['best']]:.4f})"
        parts = [_comparison(c) for c in (fam["comparisons"] if fam else [])
                 if c["metric"] == label]
        if parts:
            text += "; vs random: " + "; ".join(parts)
        lines.append(text + ".")
    if fam is not None and v["seeds"] >= 2:
        prim = primary_of(fam)
        looks = looks_words(fam)
        lines.append(
            f"Differences to random are paired by seed (same initialisation, same held-out "
            f"documents), {fam['family']} comparisons. The primary question (`{prim['arm']}` "
            f"on {prim['metric']}) is tested alone: measurable when its paired-t "
            f"{percent(1 - fam['level'])} confidence interval excludes 0; every other "
            f"comparison is measurable only when its Holm-adjusted p over the "
            f"{fam['family']} is below {fam['level']:.4g}"
            + (f" ({looks}, the seeds chosen by {SEEDS_OPTION} auto)." if looks else "."))
    return lines


def _comparison(c: dict[str, Any]) -> str:
    p = Paired.of(c)
    if p.low is None:
        return f"{c['arm']} {p.interval()}"
    adj = "" if c["primary"] else f", Holm {c['p_holm']:.2g}"
    what = "measurable" if c["measurable"] else "not measurable"
    return (f"{c['arm']} {p.interval()}, p {c['p']:.2g}{adj}: {what}"
            + (" (primary)" if c["primary"] else ""))
