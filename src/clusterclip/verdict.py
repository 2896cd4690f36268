"""The one statistics rule of every verdict, and the experiment's computed verdict.

The rule (:func:`paired_difference`): differences between two arms are paired by
seed (same initialisation, same held-out documents); their mean gets a paired-t
95% confidence interval (scipy), and a difference is *measurable* only when that
interval excludes 0. With one seed no interval exists, so no call is made. The
half-width of the interval is the smallest mean difference these seeds can call
measurable at the spread they showed (:attr:`Paired.detectable`). ``experiment``
and ``search`` both use it.

The experiment's verdict is pure: a results dict in (only ``config`` and each
run's metric values and seed are read), plain data and sentences out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The held-out losses the verdict speaks about, in order, with their names.
VERDICT_METRICS = {"val_micro": "micro", "val_macro": "macro", "val_tail": "tail"}
#: Confidence of the paired-t interval behind every "measurably".
CONFIDENCE = 0.95

BETTER = "measurably better than random"
WORSE = "measurably worse than random"
SAME = "not measurably different from random"
ONE_SEED = "one seed: no interval can be given"
#: The decision when no arm beats random sampling measurably.
KEEP_RANDOM = "Keep random sampling: nothing here beats it measurably"
#: The decision's words for each loss: what matters when it is the goal.
GOALS = {"micro": "the corpus's own mix (micro held-out loss)",
         "macro": "balanced loss over the clusters (macro held-out loss)",
         "tail": "the smallest clusters (tail held-out loss)", "target": "target loss"}


@dataclass(frozen=True)
class Paired:
    """Per-seed differences ``a - b`` (lower loss is better, so negative favours a):
    their mean, sample std and paired-t 95% interval (None for one seed)."""

    mean: float
    n: int
    std: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def detectable(self) -> float | None:
        """Half-width of the interval: at the spread these seeds showed, a mean difference
        smaller than this cannot be called measurable (None for one seed)."""
        return None if self.low is None else (self.high - self.low) / 2

    @property
    def measurable(self) -> bool:
        """True when the interval excludes 0."""
        return self.low is not None and (self.low > 0 or self.high < 0)

    def call(self, other: str = "random") -> str:
        """``measurably better than <other>``, ``measurably worse than <other>``, ``not
        measurably different from <other>`` or the one-seed note."""
        if self.low is None:
            return ONE_SEED
        if not self.measurable:
            return f"not measurably different from {other}"
        return f"measurably {'better' if self.mean < 0 else 'worse'} than {other}"

    def interval(self, digits: int = 4, inside: bool = False) -> str:
        """``+0.0123 (95% CI -0.0040 to +0.0286)``, or ``+0.0123, one seed``; ``inside``
        (for text already in parentheses): ``+0.0123, 95% CI -0.0040 to +0.0286``."""
        if self.low is None:
            return f"{self.mean:+.{digits}f}, one seed"
        ci = f"{CONFIDENCE:.0%} CI {self.low:+.{digits}f} to {self.high:+.{digits}f}"
        return f"{self.mean:+.{digits}f}" + (f", {ci}" if inside else f" ({ci})")

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "n": self.n, "std": self.std, "low": self.low,
                "high": self.high, "detectable": self.detectable,
                "measurable": self.measurable}


def paired_difference(diffs: Sequence[float]) -> Paired:
    """The rule: mean of the per-seed differences with its paired-t interval at
    :data:`CONFIDENCE` (``mean ± t(0.975, n - 1) s / sqrt(n)``)."""
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        raise ValueError("paired_difference needs at least one difference")
    mean = float(d.mean())
    if d.size < 2:
        return Paired(mean=mean, n=1)
    std = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, d.size - 1)) * std / math.sqrt(d.size)
    return Paired(mean=mean, n=int(d.size), std=std, low=mean - half, high=mean + half)


def _paired_of(d: dict[str, Any]) -> Paired:
    return Paired(mean=d["mean"], n=d["n"], std=d["std"], low=d["low"], high=d["high"])


def best_arm(vs_random: dict[str, dict[str, Any]]) -> str | None:
    """Of the arms' differences to random on one loss (``{arm: Paired.to_dict()}``), the
    arm measurably better (interval below 0) with the lowest mean; None when none is."""
    better = [a for a, d in vs_random.items() if d["measurable"] and d["mean"] < 0]
    return min(better, key=lambda a: (vs_random[a]["mean"], a)) if better else None


def decision(arm: str | None, goal: str, gain: dict[str, Any] | None,
             cost: tuple[str, dict[str, Any]] | None, how: str = "", then: str = "") -> str:
    """The first line a person acts on: ``Use `arm`<how> if <goal> is what matters: <gain>
    against random sampling, at <cost> on <cost loss><then>.`` (the gain and the cost each
    with its paired 95% interval), or :data:`KEEP_RANDOM` plus ``then``."""
    if arm is None or gain is None:
        return f"{KEEP_RANDOM}{then}."
    text = (f"Use `{arm}`{how} if {GOALS[goal]} is what matters: "
            f"{_paired_of(gain).interval(3)} against random sampling")
    if cost is not None:
        name, d = cost
        text += f", at {_paired_of(d).interval(3)} on {GOALS[name]}"
    return text + f"{then}."


def describe_model(config: dict[str, Any]) -> str:
    """The proxy model in words, from a results dict's ``config``: parameters, window and
    how much of each document it reads (it limits what a verdict means)."""
    from clusterclip.lm.config import ModelConfig, format_parameters

    m = ModelConfig(**config["model"])
    size = format_parameters(m.num_parameters())
    tok = config.get("tokenizer")
    kind, unit = ("byte-level LM", "bytes") if tok is None else (
        f"LM over the tokens of {tok} ({m.vocab_size:,}-token vocabulary)", "tokens")
    return (f"a {size}-parameter {kind} ({m.n_layers} layer"
            f"{'s' if m.n_layers != 1 else ''}, d={m.d_model}, window {m.seq_len}, reading "
            f"the first {config['max_doc_tokens'] - 1} {unit} of each document)")


def _values(results: dict[str, Any], name: str, metric: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[metric]) for r in results["strategies"][name]["runs"]}


def compute_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Per verdict metric: the best strategy by mean loss over seeds and, for every
    strategy but random, its paired difference to random and the call.

    Returns ``{"seeds": int, "has_random": bool, "metrics": {metric: {"best": name,
    "means": {name: mean}, "vs_random": {name: {"call", "mean", "std", "low", "high",
    "detectable", "measurable", "n"}}}}}``. Only seeds run by both a strategy and random
    are paired.
    """
    names = list(results["config"]["strategies"])
    has_random = "random" in names
    out: dict[str, Any] = {"has_random": has_random, "metrics": {}}
    seeds = 0
    for metric in VERDICT_METRICS:
        vals = {n: _values(results, n, metric) for n in names}
        means = {n: float(np.mean(list(v.values()))) for n, v in vals.items()}
        best = min(names, key=lambda n: (means[n], names.index(n)))
        entry: dict[str, Any] = {"best": best, "means": means, "vs_random": {}}
        if has_random:
            base = vals["random"]
            for n in names:
                if n == "random":
                    continue
                common = sorted(set(vals[n]) & set(base))
                p = paired_difference([vals[n][s] - base[s] for s in common])
                entry["vs_random"][n] = {"call": p.call(), **p.to_dict()}
        seeds = max(seeds, max(len(v) for v in vals.values()))
        out["metrics"][metric] = entry
    out["seeds"] = seeds
    return out


def _ci(d: dict[str, Any], inside: bool = False) -> str:
    return _paired_of(d).interval(inside=inside)


def _headline(v: dict[str, Any], model: str) -> str:
    """The one plain sentence a person can act on."""
    lead = f"On this corpus, with {v['seeds']} seed{'s' if v['seeds'] != 1 else ''} of {model}: "
    if not v["has_random"]:
        best = ", ".join(f"{label} {v['metrics'][m]['best']}"
                         for m, label in VERDICT_METRICS.items())
        return (lead + "random sampling was not run, so no strategy is compared with it; "
                f"lowest mean held-out loss: {best}.")
    if not any(e["vs_random"] for e in v["metrics"].values()):
        return lead + "only random sampling was run, so nothing is compared."
    if v["seeds"] < 2:
        return (lead + "with one seed no interval can be given, so no difference is called "
                "measurable; rerun with --seeds 3 or more.")
    found: dict[tuple[str, str], list[str]] = {}
    total = 0
    for metric, label in VERDICT_METRICS.items():
        for name, d in v["metrics"][metric]["vs_random"].items():
            total += 1
            if d["measurable"]:
                found.setdefault((name, d["call"]), []).append(
                    f"on {label} loss ({_ci(d, inside=True)})")
    if not found:
        return (lead + "no strategy differs measurably from random on micro, macro or tail "
                "held-out loss.")
    parts = [f"{name} is {call} " + " and ".join(where) for (name, call), where in found.items()]
    n_found = sum(len(w) for w in found.values())
    tail = "; nothing else differs measurably." if n_found < total else "."
    return lead + "; ".join(parts) + tail


def experiment_decision(v: dict[str, Any]) -> str:
    """The experiment's first line (:func:`decision`): the strategy to use for the first
    loss of micro, macro, tail on which one beats random measurably, at its difference on
    micro (on macro when the goal is micro); else keep random sampling."""
    if not v["has_random"]:
        return ("No decision: random sampling was not run, so nothing is compared with it; "
                "rerun with random among --strategies.")
    if not any(e["vs_random"] for e in v["metrics"].values()):
        return "No decision: only random sampling was run, so nothing is compared."
    if v["seeds"] < 2:
        return ("No decision yet: with one seed no interval can be given; rerun with --seeds "
                "3 or more.")
    for metric, label in VERDICT_METRICS.items():
        vs = v["metrics"][metric]["vs_random"]
        arm = best_arm(vs)
        if arm is not None:
            other = "val_macro" if label == "micro" else "val_micro"
            cost = (VERDICT_METRICS[other], v["metrics"][other]["vs_random"][arm])
            return decision(arm, label, vs[arm], cost, how=" sampling")
    return decision(None, "", None, None, then=" on micro, macro or tail held-out loss")


def verdict_lines(results: dict[str, Any]) -> list[str]:
    """The verdict as plain lines (no markup): the decision (:func:`experiment_decision`),
    the one-sentence conclusion, one line per metric, then the rule. Used by results.md,
    the CLI and the demo."""
    v = compute_verdict(results)
    lines = [experiment_decision(v), _headline(v, describe_model(results["config"]))]
    for metric, label in VERDICT_METRICS.items():
        e = v["metrics"][metric]
        text = f"- {label}: lowest mean {e['best']} ({e['means'][e['best']]:.4f})"
        parts = [f"{name} {_ci(d)}" + (f": {d['call']}" if d["call"] != ONE_SEED else "")
                 for name, d in e["vs_random"].items()]
        if parts:
            text += "; vs random: " + "; ".join(parts)
        lines.append(text + ".")
    if any(e["vs_random"] for e in v["metrics"].values()) and v["seeds"] >= 2:
        lines.append("Differences to random are paired by seed (same initialisation, same "
                     f"held-out documents); one is measurable when its paired-t "
                     f"{CONFIDENCE:.0%} confidence interval excludes 0.")
    return lines
