"""The search's plots, from a results dict (also one read back from results.json).

Colours: :func:`clusterclip.plotting.strategy_color` (a proxy's timing is a strategy,
``paced`` or ``clusterclip``; the chosen mixture is ``searched``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.plotting import pyplot, save_png, strategy_color

MARGINS = {"left": 0.11, "right": 0.97, "top": 0.9, "bottom": 0.13}
MARKERS = ("o", "s", "^", "D", "v", "P")


def _objective_label(results: dict[str, Any]) -> str:
    return ("target loss on val (nats/token)" if results["objective"] == "target"
            else "macro held-out loss on val (nats/token)")


def predicted_vs_observed(results: dict[str, Any], path: Path) -> None:
    """Each proxy's leave-one-out prediction against its observed val objective."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    px = [p for p in results["proxies"] if p["loo_predicted"] is not None]
    for timing in ("paced", "clusterclip"):
        pts = [p for p in px if p["timing"] == timing]
        for r in sorted({p["round"] for p in pts}):
            sel = [p for p in pts if p["round"] == r]
            ax.scatter([p["loo_predicted"] for p in sel], [p["val"]["objective"] for p in sel],
                       color=strategy_color(timing), marker=MARKERS[(r - 1) % len(MARKERS)],
                       s=26, alpha=0.8, label=f"{timing}, round {r}")
    if px:
        lo = min(min(p["loo_predicted"], p["val"]["objective"]) for p in px)
        hi = max(max(p["loo_predicted"], p["val"]["objective"]) for p in px)
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8, ls="--", label="predicted = observed")
        c = results["chosen"]
        if c["loo_predicted"] is not None:
            ax.scatter([c["loo_predicted"]], [c["val"]["objective"]], marker="*", s=220,
                       color=strategy_color("searched"), edgecolors="k", zorder=5,
                       label="chosen (searched)")
        ax.legend(fontsize=7)
    rho = results["predictor"].get("loo_spearman")
    ax.set_title("Leave-one-out predictions of the proxies"
                 + (f" (Spearman {rho:.2f})" if rho is not None else " (too few proxies)"))
    ax.set_xlabel("predicted by the others (nats/token)")
    ax.set_ylabel(f"observed: {_objective_label(results)}")
    save_png(fig, path, {**MARGINS, "left": 0.15})


def objective_by_round(results: dict[str, Any], path: Path) -> None:
    """Every proxy's val objective in the order trained, the best so far, the rounds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    px = results["proxies"]
    y = np.array([p["val"]["objective"] for p in px])
    for timing in ("paced", "clusterclip"):
        idx = [i for i, p in enumerate(px) if p["timing"] == timing]
        ax.scatter(idx, y[idx], color=strategy_color(timing), s=22, label=f"proxy, {timing}")
    ax.plot(np.arange(y.size), np.minimum.accumulate(y), color="k", lw=1.2,
            drawstyle="steps-post", label="best observed so far")
    c = results["chosen"]
    ax.scatter([c["index"]], [c["val"]["objective"]], marker="*", s=220, zorder=5,
               color=strategy_color("searched"), edgecolors="k", label="chosen (searched)")
    start = 0
    for r in results["rounds"]:
        if start:
            ax.axvline(start - 0.5, color="0.5", lw=0.8, ls=":")
        ax.text(start + r["proxies"] / 2 - 0.5, 1.01, f"round {r['round']}", ha="center",
                transform=ax.get_xaxis_transform(), fontsize=8)
        start += r["proxies"]
    ax.set_xlabel("proxy (in the order trained)")
    ax.set_ylabel(_objective_label(results))
    ax.legend(fontsize=7)
    fig.suptitle("Objective by round", y=0.99)
    save_png(fig, path, {**MARGINS, "top": 0.88})


def mixture(results: dict[str, Any], path: Path) -> None:
    """Weight per group (super-cluster or cluster): the chosen mixture against natural,
    uniform and (with a target) the prior."""
    plt = pyplot()
    sp = results["space"]
    groups = np.array(sp["groups"])
    g = int(groups.max()) + 1
    natural = np.array(sp["natural"])

    def per_group(w: list[float] | np.ndarray) -> np.ndarray:
        return np.bincount(groups, weights=np.asarray(w, dtype=np.float64), minlength=g)

    uni = (natural > 0) / max(1, int((natural > 0).sum()))
    arms = [("natural", per_group(natural)), ("uniform", per_group(uni))]
    if sp["prior"] is not None:
        arms.append(("prior", per_group(sp["prior"])))
    arms.append(("searched", per_group(results["chosen"]["weights"])))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * g + 2.5), 4.2))
    width = 0.8 / len(arms)
    for i, (name, w) in enumerate(arms):
        ax.bar(np.arange(g) + (i - (len(arms) - 1) / 2) * width, w, width,
               color=strategy_color(name), label=name)
    what = "super-cluster" if g < groups.size else "cluster"
    ax.set_xticks(np.arange(g))
    ax.set_xlabel(what)
    ax.set_ylabel("share of the mixture's weight")
    c = results["chosen"]
    ax.set_title(f"The searched mixture per {what} ({c['timing']}, clip {c['clip']})")
    ax.legend(fontsize=8)
    save_png(fig, path, MARGINS)
