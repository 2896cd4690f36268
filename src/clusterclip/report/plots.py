"""The report's figures (matplotlib, headless Agg backend).

Each function takes the numbers (never files) and writes one PNG. matplotlib
is imported inside the functions so that importing the report package stays
cheap. PNGs are written without the software/date metadata, so the same input
gives the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from clusterclip.plotting import pyplot as _pyplot
from clusterclip.plotting import save_png as _save
from clusterclip.plotting import strategy_color
from clusterclip.report.stats import repetition_bins


def plot_cluster_sizes(sizes: np.ndarray, profile: Mapping[str, Any],
                       path: str | os.PathLike[str]) -> None:
    """Cluster sizes sorted largest first (log y), head and tail shaded."""
    plt = _pyplot()
    live = np.sort(np.asarray(sizes)[np.asarray(sizes) > 0])[::-1]
    k = live.size
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    # One filled staircase rather than K bars: 10^4 bar patches take seconds to draw.
    ax.stairs(live, np.arange(k + 1) + 0.5, fill=True, color="tab:blue", alpha=0.75,
              label="documents per cluster")
    n_head, n_tail = profile["head_clusters"], profile["tail_clusters"]
    ax.axvspan(0.5, n_head + 0.5, color="tab:red", alpha=0.12,
               label=f"largest {profile['head_fraction']:.0%} of clusters: "
                     f"{profile['head_share']:.1%} of documents")
    ax.axvspan(k - n_tail + 0.5, k + 0.5, color="tab:green", alpha=0.12,
               label=f"smallest {profile['tail_fraction']:.0%} of clusters: "
                     f"{profile['tail_share']:.1%} of documents")
    ax.set_yscale("log")
    ax.set_xlim(0.5, k + 0.5)
    ax.set_xlabel("cluster rank (largest first)")
    ax.set_ylabel("documents (log scale)")
    ax.set_title(f"Cluster sizes: {k:,} clusters, {profile['documents']:,} documents\n"
                 f"largest / smallest = {profile['max_size']:,} / {profile['min_size']:,} "
                 f"= {profile['imbalance']:,.0f}x")
    ax.legend(loc="upper right", fontsize=8)
    _save(fig, path, dict(left=0.12, right=0.98, bottom=0.13, top=0.87))


def _percent_log_ticks(axis, lo: float, hi: float) -> None:
    """Log axis of shares labelled as percentages: 1-2-5 over a short range, else decades.

    (matplotlib's default minor labels overlap when the range is under a decade.)
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if np.log10(hi / lo) < 2.5 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:.4g}%"))
    axis.set_minor_formatter(NullFormatter())


def plot_schedule_share(sizes: np.ndarray, shares: Mapping[str, np.ndarray],
                        path: str | os.PathLike[str]) -> None:
    """Per-cluster share of each schedule against the cluster's share of the corpus: one
    panel per schedule (so that no schedule's points hide another's), all on one scale,
    in the schedule's colour; clusters a schedule never drew sit on the bottom edge."""
    plt = _pyplot()
    sizes = np.asarray(sizes)
    live = sizes > 0
    corpus_share = sizes[live] / sizes[live].sum()
    k = int(live.sum())
    names = list(shares)
    lo = min(corpus_share.min(), *(s[live][s[live] > 0].min() for s in shares.values()
                                   if (s[live] > 0).any())) / 1.5
    hi = max(corpus_share.max(), *(s[live].max() for s in shares.values())) * 1.5
    cols = len(names) if len(names) <= 3 else (2 if len(names) == 4 else 3)
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + 0.6, 3.1 * rows + 0.9),
                             sharex=True, sharey=True, squeeze=False)
    for ax, (i, name) in zip(axes.flat, enumerate(names), strict=False):
        s = shares[name][live]
        ok = s > 0
        color = strategy_color(name, i)
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls="--")
        ax.axhline(1.0 / k, color="gray", lw=0.8, ls=":")
        ax.scatter(corpus_share[ok], s[ok], s=16, color=color, alpha=0.7, edgecolors="none")
        if (~ok).any():
            ax.scatter(corpus_share[~ok], np.full((~ok).sum(), lo * 1.15), marker="v", s=18,
                       color=color, clip_on=False)
        never = f", {int((~ok).sum())} never drawn" if (~ok).any() else ""
        ax.set_title(f"{name}{never}", fontsize=9, color=color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        _percent_log_ticks(ax.xaxis, lo, hi)
        _percent_log_ticks(ax.yaxis, lo, hi)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for j, ax in enumerate(axes.flat[:len(names)]):
        if j + cols >= len(names):  # no panel below: this one carries the x axis
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("share of the corpus")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of the schedule")
    handles = [plt.Line2D([], [], color="black", lw=0.8, ls="--"),
               plt.Line2D([], [], color="gray", lw=0.8, ls=":"),
               plt.Line2D([], [], color="0.3", marker="v", ls="none")]
    fig.legend(handles, ["share of the corpus (size-proportional)", f"balanced (1/{k})",
                         "never drawn (on the bottom edge)"],
               loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("Per-cluster share: schedule vs corpus (one point per cluster, one panel "
                 "per schedule, one scale)", fontsize=10)
    height = 3.1 * rows + 0.9
    _save(fig, path, dict(left=0.55 / (3.3 * cols + 0.6) + 0.07, right=0.98,
                          bottom=0.85 / height + 0.02, top=1 - 0.5 / height,
                          wspace=0.08, hspace=0.42))


def plot_repetition(histograms: Mapping[str, Sequence[int]],
                    path: str | os.PathLike[str], sample: int | None = None,
                    sampled: Sequence[str] | None = None) -> None:
    """Grouped bars: number of documents seen 0, 1, 2, ... times, per schedule (``sample``:
    the histograms of ``sampled`` (default: all) count a sample of that many eligible
    documents; the title says so)."""
    plt = _pyplot()
    names = list(histograms)
    bins = repetition_bins(max(len(h) for h in histograms.values()) - 1)
    fig, ax = plt.subplots(figsize=(6.4 if len(bins) <= 12 else 8.0, 3.8))
    width = 0.8 / max(1, len(names))
    x = np.arange(len(bins))
    for i, name in enumerate(names):
        h = np.asarray(histograms[name], dtype=np.int64)
        counts = np.array([h[lo:hi + 1].sum() for lo, hi in bins])
        ax.bar(x + (i - (len(names) - 1) / 2) * width, np.where(counts > 0, counts, np.nan),
               width, color=strategy_color(name, i), label=name)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)  # so that a bar of one document is still visible
    ax.set_xticks(x)
    ax.set_xticklabels([str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in bins],
                       rotation=0 if len(bins) <= 12 else 45)
    ax.set_xlabel("times a document appears in the schedule")
    ax.set_ylabel("documents (log scale)")
    if sample is None:
        ax.set_title("Repetition: how often each document is seen")
    elif sampled is None or set(sampled) >= set(names):
        ax.set_title(f"Repetition, on a sample of {sample:,} documents")
    else:
        ax.set_title(f"Repetition ({', '.join(sampled)}: on a sample of {sample:,} documents)")
    ax.legend(fontsize=8)
    _save(fig, path, dict(left=0.10, right=0.98, bottom=0.17 if len(bins) <= 12 else 0.24,
                          top=0.92))


def plot_mixture(series: Mapping[str, Mapping[str, Any]], corpus_tail_share: float,
                 corpus_head_share: float, threshold: float,
                 path: str | os.PathLike[str]) -> None:
    """Quartile shares per tenth of training: one panel per schedule, bars per tenth.

    ``series[name]`` holds ``tenth_end``, ``tail_quartile_share_per_tenth``,
    ``head_quartile_share_per_tenth`` and ``tail_quartile_share_late``;
    ``threshold`` is the late tail share under which a schedule starves the tail.
    """
    plt = _pyplot()
    names = list(series)
    cols = 1 if len(names) == 1 else 2
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 2.7 * rows + 0.9), sharey=True,
                             squeeze=False)
    top = max([corpus_tail_share, corpus_head_share]
              + [max(max(s["tail_quartile_share_per_tenth"]),
                     max(s["head_quartile_share_per_tenth"])) for s in series.values()])
    for ax, name in zip(axes.flat, names, strict=False):
        s = series[name]
        ends = np.concatenate([[0.0], np.asarray(s["tenth_end"], dtype=np.float64)])
        ends /= ends[-1]
        mid = (ends[:-1] + ends[1:]) / 2
        width = np.diff(ends) * 0.4
        ax.bar(mid - width / 2, s["tail_quartile_share_per_tenth"], width, color="tab:green",
               label="smallest 25% of clusters")
        ax.bar(mid + width / 2, s["head_quartile_share_per_tenth"], width, color="tab:red",
               alpha=0.75, label="largest 25% of clusters")
        ax.axhline(corpus_tail_share, color="darkgreen", lw=1, ls="--",
                   label=f"corpus share, smallest 25% ({corpus_tail_share:.1%})")
        ax.axhline(corpus_head_share, color="darkred", lw=1, ls=":",
                   label=f"corpus share, largest 25% ({corpus_head_share:.1%})")
        for i, x in enumerate(s.get("stage_ends", [])[:-1]):  # a staged mixture's stages
            ax.axvline(x, color="0.35", lw=1.2, ls="-.",
                       label="stage boundary" if i == 0 else None)
        late = s["tail_quartile_share_late"]
        verdict = "STARVES the tail" if late < threshold else "tail fed"
        ax.set_title(f"{name}: smallest 25% gets {late:.1%} of the last 20% ({verdict})",
                     fontsize=9, color="tab:red" if late < threshold else "black")
        ax.set_xlim(0, 1)
        ax.set_xticks(np.linspace(0, 1, 6))
        ax.set_xticklabels([f"{x:.0%}" for x in np.linspace(0, 1, 6)])
        ax.set_ylim(0, min(1.0, top * 1.15 + 0.02))
        ax.yaxis.set_major_formatter(_percent_formatter())
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("training progress (share of the schedule)")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of the tenth's samples")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat[1:len(names)]:  # the stage boundary's entry, from a later panel
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("Samples per tenth of training from the smallest / largest quartile of clusters",
                 fontsize=10)
    height = 2.7 * rows + 0.9
    _save(fig, path, dict(left=0.08 if cols == 2 else 0.13, right=0.98,
                          bottom=0.75 / height + 0.08, top=1 - 0.45 / height, wspace=0.08,
                          hspace=0.45))


def _percent_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{100 * v:.0f}%")


def plot_choose_clip(analysis: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """The smallest quartile's share (whole schedule and its last 20%) against R.

    Rows whose R cannot serve the budget are shaded and left without points;
    the floor of the recommendation rule and the recommended R are drawn.
    """
    plt = _pyplot()
    rows = analysis["rows"]
    r = np.array([row["clip"] for row in rows])
    feasible = np.array([row["feasible"] for row in rows])
    ok = [row for row in rows if row["feasible"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    if ok:
        rf = [row["clip"] for row in ok]
        ax.plot(rf, [row["tail_share"] for row in ok], marker="s", color="tab:blue",
                label="whole schedule (expected)")
        ax.plot(rf, [row["tail_share_late"] for row in ok], marker="o", color="tab:green",
                label="last 20% of the schedule (expected)")
        measured = [(row["clip"], row["measured_tail_share_late"]) for row in ok
                    if "measured_tail_share_late" in row]
        if measured:
            ax.plot(*zip(*measured, strict=True), marker="x", ls="none", color="black", ms=7,
                    label="last 20% (measured)")
    ax.axhline(analysis["corpus_tail_share"], color="gray", ls="--", lw=1,
               label=f"corpus share ({analysis['corpus_tail_share']:.1%})")
    ax.axhline(analysis["late_threshold"], color="tab:red", ls=":", lw=1.2,
               label=f"floor: {analysis['tail_floor']:g} x corpus share "
                     f"({analysis['late_threshold']:.1%})")
    if (~feasible).any():
        ax.axvspan(r.min() - 0.5, r[~feasible].max() + 0.5, color="gray", alpha=0.15,
                   label="cannot serve T (R x N < T)")
    best = analysis["recommended_clip"]
    if best is not None:
        ax.axvline(best, color="tab:green", lw=2, alpha=0.5, label=f"recommended R = {best}")
    top = max([analysis["corpus_tail_share"]] + [max(row["tail_share"], row["tail_share_late"])
                                                 for row in ok])
    ax.set_ylim(0, top * 1.15 + 0.01)
    ax.set_xlim(r.min() - 0.5, r.max() + 0.5)
    ax.yaxis.set_major_formatter(_percent_formatter())
    ax.set_xlabel("clip R (ClusterClip retires a cluster after R passes)")
    ax.set_ylabel("share of samples from the smallest 25% of clusters")
    ax.set_xticks(r if r.size <= 24 else r[:: -(-r.size // 24)])
    # Below the axes: inside, the legend would hide the curves it explains.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
              frameon=False)
    ax.set_title(f"Choosing R for T = {analysis['budget']:,} samples "
                 f"({analysis['budget'] / analysis['eligible_documents']:.2g} epochs)")
    _save(fig, path, dict(left=0.12, right=0.97, bottom=0.27, top=0.93))
