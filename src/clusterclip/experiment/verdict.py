"""The experiment's computed verdict: which strategy is best, and is it measurably so?

Pure: a results dict in (only ``config.strategies`` and each run's metric
values and seed are read), plain data and sentences out. A strategy's
difference to random is paired by seed (same initialisation, same held-out
set); it counts as measurable when the mean of the per-seed differences is
farther from 0 than twice their sample standard deviation. With one seed no
spread exists, so no call is made.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The held-out losses the verdict speaks about, in order, with their names.
VERDICT_METRICS = {"val_micro": "micro", "val_macro": "macro", "val_tail": "tail"}
#: A paired difference counts when |mean| > SIGMAS x std of the per-seed differences.
SIGMAS = 2.0

BETTER = "measurably better than random"
WORSE = "measurably worse than random"
SAME = "no measurable difference to random"
ONE_SEED = "one seed: no spread can be given"


def _values(results: dict[str, Any], name: str, metric: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[metric]) for r in results["strategies"][name]["runs"]}


def paired_call(diffs: np.ndarray) -> tuple[str, float, float | None]:
    """``(call, mean, std)`` for per-seed differences strategy − random.

    ``std`` is the sample std (None for one seed, where ``call`` is
    :data:`ONE_SEED`). Negative differences are lower loss, i.e. better.
    """
    d = np.asarray(diffs, dtype=np.float64)
    mean = float(d.mean())
    if d.size < 2:
        return ONE_SEED, mean, None
    std = float(d.std(ddof=1))
    if abs(mean) > SIGMAS * std:
        return (BETTER if mean < 0 else WORSE), mean, std
    return SAME, mean, std


def compute_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Per verdict metric: the best strategy by mean loss over seeds and, for every
    strategy but random, its paired difference to random and the call.

    Returns ``{"seeds": int, "has_random": bool, "metrics": {metric: {"best": name,
    "means": {name: mean}, "vs_random": {name: {"call", "mean", "std", "n"}}}}}``.
    Only seeds run by both a strategy and random are paired.
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
                diffs = np.array([vals[n][s] - base[s] for s in common])
                call, mean, std = paired_call(diffs)
                entry["vs_random"][n] = {"call": call, "mean": mean, "std": std,
                                         "n": len(common)}
        seeds = max(seeds, max(len(v) for v in vals.values()))
        out["metrics"][metric] = entry
    out["seeds"] = seeds
    return out


def _diff(v: dict[str, Any]) -> str:
    if v["std"] is None:
        return f"{v['mean']:+.4f}, one seed"
    return f"{v['mean']:+.4f} ± {v['std']:.4f}"


def verdict_lines(results: dict[str, Any]) -> list[str]:
    """The verdict as plain lines (no markup): a header, one line per metric, a
    one-line conclusion. Used by results.md, the CLI and the demo."""
    v = compute_verdict(results)
    lines = []
    if not v["has_random"]:
        lines.append("Verdict: random sampling was not run, so no strategy can be compared "
                     "with it; only the best mean is given.")
    elif v["seeds"] < 2:
        lines.append("Verdict (1 seed): no spread can be given, so no difference below is "
                     "measurable; rerun with --seeds 3 or more for a verdict.")
    else:
        lines.append(f"Verdict ({v['seeds']} seeds, paired by seed; a difference to random "
                     f"counts when it exceeds {SIGMAS:g} std of the per-seed differences):")
    measurable: list[str] = []
    for metric, label in VERDICT_METRICS.items():
        e = v["metrics"][metric]
        best = e["best"]
        qual = ""
        if best in e["vs_random"] and e["vs_random"][best]["call"] != ONE_SEED:
            qual = (", measurably better than random" if e["vs_random"][best]["call"] == BETTER
                    else ", not measurably better than random")
        text = f"- {label}: best {best} ({e['means'][best]:.4f}{qual})"
        parts = []
        for name, d in e["vs_random"].items():
            call = d["call"]
            parts.append(f"{name} {_diff(d)}: {call}" if call != ONE_SEED
                         else f"{name} {_diff(d)}")
            if call in (BETTER, WORSE):
                measurable.append(f"{name} {'better' if call == BETTER else 'worse'} on {label}")
        if parts:
            text += "; vs random: " + "; ".join(parts)
        lines.append(text + ".")
    compared = any(e["vs_random"] for e in v["metrics"].values())
    if compared and v["seeds"] >= 2:
        if measurable:
            lines.append("Conclusion: measurable differences to random: "
                         + ", ".join(measurable) + "; everything else is within noise.")
        else:
            lines.append("Conclusion: no strategy differs measurably from random on micro, "
                         "macro or tail held-out loss at this budget and model size.")
    return lines
