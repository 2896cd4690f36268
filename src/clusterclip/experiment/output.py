"""The experiment's files: results.json, results.md and three PNG plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.experiment.verdict import SEEDS_OPTION, seed_rule_of, verdict_lines
from clusterclip.lm.metrics import METRICS, schedule_keys
from clusterclip.verdict import LEVEL, holm, paired_difference, percent

_LABELS = {
    "val_micro": "val micro", "val_macro": "val macro", "val_tail": "val tail",
    "val_head": "val head", "train_micro": "train", "gap": "gap",
}


def _ordered(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Strategies in the order they were asked for (results.json sorts its keys)."""
    return [(n, results["strategies"][n]) for n in results["config"]["strategies"]]


def strategy_name(name: str, results: dict[str, Any]) -> str:
    """Display name: cluster strategies balanced by tokens are marked so."""
    if name != "random" and results["config"]["balance_by"] == "tokens":
        return f"{name} (tokens)"
    return name


def _mean_std(v: dict[str, Any], signed: bool = False) -> str:
    """``mean ± std``, or the mean alone for one value (no spread exists)."""
    mean = f"{v['mean']:+.4f}" if signed else f"{v['mean']:.4f}"
    return mean if len(v["values"]) < 2 else f"{mean} ± {v['std']:.4f}"


def format_table(results: dict[str, Any], markdown: bool = False) -> str:
    """Per strategy, ``mean ± std`` over seeds of every metric (nats per token)."""
    head = ["strategy"] + [_LABELS[m] for m in METRICS]
    rows = [[strategy_name(name, results)] + [_mean_std(entry["metrics"][m]) for m in METRICS]
            for name, entry in _ordered(results)]
    return _table(head, rows, markdown)


_SCHEDULE_LABELS = {
    "docs_drawn": "docs fed", "distinct_docs": "distinct docs",
    "max_repetition": "max repetition", "clusters_clipped": "clusters clipped",
    "clusters_over_clip": "clusters over clip", "tail_token_share": "tail token share",
    "late_tail_token_share": "tail share, last 20%",
    "head_token_share": "head token share",
    "max_group_repetition": "max repetition per group",
}


def _schedule_cell(stat: str, v: dict[str, Any]) -> str:
    """Counts: the value if equal over seeds, else ``min–max``; shares: mean ± std."""
    if stat.endswith("_share"):
        if len(v["values"]) < 2:
            return f"{v['mean']:.3f}"
        return f"{v['mean']:.3f} ± {v['std']:.3f}"
    lo, hi = int(min(v["values"])), int(max(v["values"]))
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def format_schedule_table(results: dict[str, Any], markdown: bool = False) -> str:
    """Per strategy, what its schedules fed the models, over seeds: did the clip bind?

    Columns follow :data:`~clusterclip.lm.metrics.SCHEDULE_STATS` (and
    ``max_group_repetition`` where near-duplicate groups were counted); a
    results dict without per-strategy schedule figures gives an empty string.
    """
    ordered = _ordered(results)
    if not ordered or "schedule" not in ordered[0][1]:
        return ""
    keys = schedule_keys(ordered[0][1]["schedule"])
    head = ["strategy"] + [_SCHEDULE_LABELS[k] for k in keys]
    rows = [[strategy_name(n, results)] + [_schedule_cell(k, e["schedule"][k])
                                           for k in keys] for n, e in ordered]
    return _table(head, rows, markdown)


def schedule_budget(results: dict[str, Any]) -> str:
    """Which budget the repetition counts of :func:`format_schedule_table` come from (not
    the report's: it draws T samples over the whole corpus)."""
    d = results["data"]
    return (f"counts over each run's training budget: {d['budget_tokens']:,} tokens "
            f"({d['epochs_equivalent']:.2f} epochs) drawn from the {d['train_docs']:,} training "
            f"documents of the experiment's split, not over the whole corpus at the report's "
            f"budget T, so its repetition counts differ from the report's")


def _table(head: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [head, *rows])


def format_deltas(results: dict[str, Any]) -> str:
    """Markdown table of paired differences to random (same seed, same init)."""
    lines = []
    for name, entry in _ordered(results):
        if "vs_random" not in entry:
            continue
        cells = [strategy_name(name, results) + " − random"]
        cells += [_mean_std(entry["vs_random"][m], signed=True) for m in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return ""
    head = ["difference"] + [_LABELS[m] for m in METRICS]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *lines])


def markdown_verdict(lines: list[str]) -> list[str]:
    """Verdict lines as markdown: the opening sentences (the decision first) as
    paragraphs, the list, the rest."""
    first = next((i for i, ln in enumerate(lines) if ln.startswith("- ")), len(lines))
    out = [x for ln in lines[:first] for x in (ln, "")]
    out += [ln for ln in lines[first:] if ln.startswith("- ")]
    rest = [ln for ln in lines[first:] if not ln.startswith("- ")]
    return out + (["", *rest] if rest else [])


def bits_per_byte_lines(results: dict[str, Any]) -> list[str]:
    """The held-out micro loss of each strategy in bits per byte (comparable across
    tokenizers), when its runs have it."""
    parts = [f"{name} {e['bits_per_byte']['mean']:.4f}"
             for name, e in results["strategies"].items() if "bits_per_byte" in e]
    if not parts:
        return []
    return ["", "Held-out micro loss in bits per byte (its nats over the UTF-8 bytes the "
            "tokens cover, / ln 2: comparable across tokenizers; mean over seeds): "
            + ", ".join(parts) + "."]


def _confidence(results: dict[str, Any]) -> str:
    """The confidence of the verdict's intervals in words: 95%, or the per-look one when
    ``--seeds auto`` chose the seeds."""
    v = results.get("verdict")
    return percent(1 - v["level"]) if v else percent(1 - LEVEL)


def render_markdown(results: dict[str, Any]) -> str:
    """``results.md``: setup, the metric table, paired differences, plots."""
    parts = [
        "# ClusterClip experiment: held-out loss per sampling strategy",
        "",
        *markdown_verdict(verdict_lines(results)),
        "",
        "## Setup",
        "",
        *_setup(results),
        "",
        format_table(results, markdown=True),
    ] + bits_per_byte_lines(results)
    deltas = format_deltas(results)
    if deltas:
        parts += ["", "Paired by seed (same initialisation), difference to random "
                  "(negative = lower loss than random), mean ± std of the per-seed "
                  "differences; the verdict above gives each one's paired-t "
                  f"{_confidence(results)} interval, p and Holm-adjusted p (results.json: "
                  "*verdict*):", "", deltas]
    parts += _schedule_section(results)
    parts += _gap_section(results)
    parts += ["", "## Curves and clusters", "",
              "Validation loss (solid) and the training sample's loss (dashed), both "
              "measured on whole documents at the same points; the mean loss of the training "
              "batches since the previous point is in results.json (*batch_loss*): it "
              "averages over a model that kept improving, so it is not comparable with a "
              "loss measured at the point.", "",
              "![validation loss over training](val_curves.png)", "",
              "![per-cluster loss vs cluster size](cluster_loss.png)", ""]
    return "\n".join(parts)


def _setup(results: dict[str, Any]) -> list[str]:
    """The setup paragraphs of results.md: model, budget, data, metrics."""
    c, d = results["config"], results["data"]
    m = c["model"]
    steps = d.get("steps", c.get("steps"))  # results.json before the epochs budget kept it in c
    if c.get("tokens") is None and "epochs" in c:
        budget = (f"a budget of {c['epochs']:g} epochs-equivalent of the training text, "
                  "in whole batches")
    else:
        budget = f"an explicit budget, {d['epochs_equivalent']:.2f} epochs of the training text"
    tok = c.get("tokenizer")
    return [
        f"A {'byte-level' if tok is None else f'tokenizer-level ({tok})'} decoder-only "
        f"transformer ({m['n_layers']} "
        f"layer{'s' if m['n_layers'] != 1 else ''}, d={m['d_model']}, "
        f"{m['n_heads']} heads, window {m['seq_len']}) is trained once per strategy and seed "
        f"on {d['budget_tokens']:,} tokens ({steps} steps of {c['train']['batch_size']} "
        f"windows; {budget}), from the same "
        f"initialisation for the same seed. Seeds: {c['seeds']}{_seed_words(results)}; "
        f"clip R = {c['clip']}; "
        f"alpha = {c['alpha']}; clusters balanced by {c['balance_by']}; "
        f"device {results['device']}.",
        "",
        f"Data: {d['documents']:,} documents in {d['clusters']} clusters "
        f"({d['excluded']:,} excluded: label -1, no text ({d['no_text']}) or left out of the "
        f"cluster-stratified subsample of at most {c.get('max_docs') or 'all'} documents "
        f"({d.get('subsampled_out', 0):,})). "
        f"Held out: {d['valid_docs']} documents ({d['valid_tokens']:,} tokens) from the "
        f"{d['valid_clusters']} clusters with at least {c['min_cluster_docs']} documents, "
        f"{c['valid_fraction']:.0%} of each; training uses the other {d['train_docs']:,} "
        f"({d['train_tokens']:,} tokens). Documents are truncated to their first "
        f"{c['max_doc_tokens'] - 1} {'bytes' if tok is None else 'tokens'} "
        f"({d['truncated']:,} were longer), each followed by "
        f"an end-of-document token, and packed in schedule order into windows.",
        "",
        "Loss in nats per token, mean ± std over seeds. *micro*: all held-out tokens; "
        "*macro*: mean of per-cluster losses; *tail* / *head*: mean over the smallest / largest "
        f"quarter of the evaluated clusters (tail {d['tail_clusters']}, head "
        f"{d['head_clusters']}); *train*: the same loss on a training sample with the held-out "
        "set's cluster mix, measured the same way at the same point; *gap* = val micro − "
        "train. Lower is better (uniform-byte baseline ln 256 = 5.545).",
    ]


def _seed_words(results: dict[str, Any]) -> str:
    """The declared primary question and, with ``--seeds auto``, the stop rule."""
    p = results.get("primary")
    if not p:
        return ""
    what = f"`{p['arm']}` against {p['baseline']} on {p['metric']} held-out loss"
    text = f" (primary question, declared before the runs: {what}"
    c = results["config"]
    if c.get("auto_seeds"):
        rule = seed_rule_of(results)
        text += f"; {rule.describe(what, option=SEEDS_OPTION)}"
    return text + ")"


def _schedule_section(results: dict[str, Any]) -> list[str]:
    sched = format_schedule_table(results, markdown=True)
    if not sched:
        return []
    c = results["config"]
    groups = "max_group_repetition" in _ordered(results)[0][1]["schedule"]
    return ["", "What each strategy's schedules fed the models, "
            f"{schedule_budget(results)} (counts: the value, or "
            "min–max over seeds; shares: mean ± std). *max repetition*: most times one "
            "document was fed; *clusters clipped*: clusters that completed their "
            f"{c['clip']}-th pass and left ClusterClip's pool (the sampler's summary); "
            f"*clusters over clip*: clusters with a document fed more than {c['clip']} "
            "times; *tail* / *head token share*: share of the training tokens from the "
            "tail / head clusters above."
            + (" *max repetition per group*: most times the content of one "
               "near-duplicate group (W/groups.npy of `clusterclip dedup`) was fed, "
               "all its members' feeds together." if groups else ""),
            "", sched]


def _gap_section(results: dict[str, Any]) -> list[str]:
    gap_table = format_gap_table(results, markdown=True)
    if not gap_table:
        return []
    return ["", "## Over-fitting: train–validation gap against repetition", "",
            "Per cluster, held-out loss minus the loss on the cluster's training "
            "sample (mean over seeds), against how many times the schedule fed each "
            "training document of the cluster on average. Over-fitting shows as a gap "
            "that grows with repetition. The held-out and training documents of a "
            "cluster are the same for every strategy, so a cluster's gap also carries "
            "how those few documents happen to differ; the *excess* gap (minus "
            "random's gap on the same cluster and seed) cancels that. Cells: mean gap "
            "/ mean excess gap (clusters). *Slopes*: least-squares change per doubling "
            "of the repetition over the clusters of one run, mean ± std over seeds "
            "(only where the repetition spans at least a factor 2).",
            "", gap_table, "", *gap_conclusion(results), "",
            "![train–validation gap vs repetition](gap_repetition.png)"]


#: Repetition bins of the gap table: (low, high] average feeds per training document.
GAP_BINS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, math.inf)


def _bin_label(lo: float, hi: float) -> str:
    if lo == 0:
        return f"≤ {hi:g}"
    return f"> {lo:g}" if math.isinf(hi) else f"{lo:g}–{hi:g}"


def cluster_arrays(entry: dict[str, Any], field: str) -> tuple[list[str], np.ndarray]:
    """Cluster ids and float[seeds, clusters] of one per-cluster field of a strategy."""
    keys = sorted(entry["runs"][0]["per_cluster"], key=int)
    vals = np.array([[r["per_cluster"][k][field] for k in keys] for r in entry["runs"]],
                    dtype=np.float64)
    return keys, vals


def gap_slope(rep: np.ndarray, gap: np.ndarray) -> float | None:
    """Least-squares slope of ``gap`` on log2(``rep``) (nats per doubling of the
    repetition), or None when the repetitions span less than a factor 2."""
    ok = rep > 0
    if ok.sum() < 3 or rep[ok].max() < 2 * rep[ok].min():
        return None
    x = np.log2(rep[ok])
    return float(np.polyfit(x, gap[ok], 1)[0])


def gap_summary(results: dict[str, Any]) -> dict[str, Any]:
    """Per strategy: per repetition bin the mean gap, the mean *excess* gap (minus
    random's gap on the same cluster and seed, which cancels how the held-out and
    training documents of a cluster happen to differ) and the cluster count; the
    slope of the gap, and of the excess gap, per doubling of repetition, per seed.
    Empty for results without per-cluster gaps."""
    ordered = _ordered(results)
    first = ordered[0][1]["runs"][0]["per_cluster"]
    if "gap" not in first[next(iter(first))]:
        return {}
    base = results["strategies"].get("random")
    base_gap = cluster_arrays(base, "gap")[1] if base is not None else None
    out: dict[str, Any] = {}
    for name, entry in ordered:
        _, gap = cluster_arrays(entry, "gap")
        _, rep = cluster_arrays(entry, "repetition")
        excess = gap - base_gap if base_gap is not None and name != "random" else None
        g, r = gap.mean(axis=0), rep.mean(axis=0)
        bins = []
        for lo, hi in zip(GAP_BINS[:-1], GAP_BINS[1:], strict=True):
            sel = (r > lo) & (r <= hi)
            bins.append({"n": int(sel.sum()),
                         "gap": float(g[sel].mean()) if sel.any() else None,
                         "excess": (float(excess.mean(axis=0)[sel].mean())
                                    if sel.any() and excess is not None else None)})
        out[name] = {
            "bins": bins, "max_repetition": float(r.max()),
            "slopes": [gap_slope(rep[i], gap[i]) for i in range(gap.shape[0])],
            "excess_slopes": (None if excess is None else
                              [gap_slope(rep[i], excess[i]) for i in range(gap.shape[0])])}
    return out


def _slope_text(slopes: list[float | None] | None) -> str:
    if slopes is None or any(v is None for v in slopes):
        return "—"
    v = np.array(slopes)
    return f"{v.mean():+.4f}" if v.size < 2 else f"{v.mean():+.4f} ± {v.std(ddof=1):.4f}"


def format_gap_table(results: dict[str, Any], markdown: bool = False) -> str:
    """Per strategy, the mean per-cluster gap (and excess over random) in each
    repetition bin, and the slopes per doubling of repetition."""
    summ = gap_summary(results)
    if not summ:
        return ""
    used = [i for i in range(len(GAP_BINS) - 1) if any(e["bins"][i]["n"] for e in summ.values())]
    head = ["strategy"] + [f"rep {_bin_label(GAP_BINS[i], GAP_BINS[i + 1])}" for i in used] + [
        "gap slope", "excess slope"]
    rows = []
    for name, e in summ.items():
        cells = [strategy_name(name, results)]
        for i in used:
            b = e["bins"][i]
            if b["gap"] is None:
                cells.append("—")
            elif b["excess"] is None:
                cells.append(f"{b['gap']:+.3f} ({b['n']})")
            else:
                cells.append(f"{b['gap']:+.3f} / {b['excess']:+.3f} ({b['n']})")
        rows.append(cells + [_slope_text(e["slopes"]), _slope_text(e["excess_slopes"])])
    return _table(head, rows, markdown)


def gap_conclusion(results: dict[str, Any]) -> list[str]:
    """One computed sentence per strategy whose repetitions vary: does its excess gap
    over random (its gap when random was not run) grow measurably with repetition? By the
    rules of every verdict (:mod:`clusterclip.verdict`): the per-seed slopes' paired-t 95%
    interval and p, measurable when the p, Holm-adjusted over the strategies tested here,
    is below 0.05."""
    tests = []
    for name, e in gap_summary(results).items():
        slopes = e["excess_slopes"] if e["excess_slopes"] is not None else e["slopes"]
        if not any(v is None for v in slopes):
            tests.append((name, e, paired_difference(slopes)))
    adjusted = holm([p.p for _, _, p in tests])
    lines = []
    for (name, e, p), adj in zip(tests, adjusted, strict=True):
        what = "excess gap over random" if e["excess_slopes"] is not None else "gap"
        label = strategy_name(name, results)
        if p.low is None:
            lines.append(f"- {label}: {what} slope {p.mean:+.4f} nats per doubling of "
                         "repetition (one seed: no interval, no call).")
            continue
        if adj < LEVEL and p.mean > 0:
            call = "grows measurably with repetition (over-fitting of repeated clusters)"
        elif adj < LEVEL:
            call = "shrinks measurably with repetition"
        else:
            call = "shows no measurable trend with repetition"
        lines.append(f"- {label}: the {what} {call}: {p.interval()} nats per doubling, "
                     f"Holm-adjusted p {adj:.2g} over {len(tests)} strategies (repetition up "
                     f"to {e['max_repetition']:.1f}).")
    return lines


def _binned_trend(ax: Any, x: np.ndarray, y: np.ndarray, color: str, label: str) -> None:
    """Scatter of (x, y) and the mean of y in log-spaced bins of x, as a line."""
    ax.scatter(x, y, s=14, alpha=0.45, color=color, edgecolors="none")
    pos = x > 0
    if pos.sum() >= 2 and x[pos].max() >= 2 * x[pos].min():
        edges = np.geomspace(x[pos].min(), x[pos].max() * (1 + 1e-9), 7)
        idx = np.clip(np.searchsorted(edges, x[pos], side="right") - 1, 0, edges.size - 2)
        cx = [float(np.exp(np.log(x[pos][idx == b]).mean())) for b in range(edges.size - 1)
              if np.any(idx == b)]
        cy = [float(y[pos][idx == b].mean()) for b in range(edges.size - 1) if np.any(idx == b)]
        ax.plot(cx, cy, color=color, lw=2, marker="D", ms=5, label=label)
    else:
        ax.plot([], [], color=color, marker="o", label=label)


def _strategy_colors(results: dict[str, Any]) -> dict[str, str]:
    """One fixed colour per strategy (clusterclip.plotting), the same in every figure."""
    from clusterclip.plotting import strategy_color

    return {name: strategy_color(name, i) for i, (name, _) in enumerate(_ordered(results))}


def _curve_arrays(entry: dict[str, Any], field: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Tokens, float[seeds, points] of one curve field, and the seeds, of a strategy."""
    curves = [r["curve"] for r in entry["runs"]]
    x = np.array([p["tokens"] for p in curves[0]], dtype=np.float64)
    y = np.array([[np.nan if p.get(field) is None else p[field] for p in c] for c in curves],
                 dtype=np.float64)
    return x, y, [int(r.get("seed", i)) for i, r in enumerate(entry["runs"])]


def _paired(entry: dict[str, Any], base: dict[str, Any], field: str
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """Tokens and float[seeds, points] of ``field`` minus random's, paired by seed."""
    x, y, seeds = _curve_arrays(entry, field)
    bx, by, bseeds = _curve_arrays(base, field)
    common = [s for s in seeds if s in bseeds]
    if not common or x.shape != bx.shape:
        return None
    return x, np.stack([y[seeds.index(s)] - by[bseeds.index(s)] for s in common])


def plot_curves(results: dict[str, Any], path: Path) -> None:
    """Loss over training. With random run: left, random's validation loss (solid) and
    training-sample loss (dashed), the scale; right, each strategy's validation loss minus
    random's, paired by seed (same initialisation), mean and a band of ± one std over
    seeds, on a scale where 0.01 nats shows. Without random: every strategy's loss on one axes. The
    untrained start is left out of the scale."""
    from clusterclip.plotting import pyplot

    plt = pyplot()
    colors = _strategy_colors(results)
    base = results["strategies"].get("random")
    others = [(n, e) for n, e in _ordered(results) if n != "random"]
    two = base is not None and bool(others)
    fig, axes = plt.subplots(1, 2 if two else 1, figsize=(11.5 if two else 7.0, 4.4),
                             layout="constrained", squeeze=False,
                             gridspec_kw={"width_ratios": [1, 1.6]} if two else None)
    n = len(next(iter(results["strategies"].values()))["runs"])
    shown = [("random", base)] if two else _ordered(results)
    ax = axes[0][0]
    for name, entry in shown:
        x, y, _ = _curve_arrays(entry, "val_loss")
        ax.plot(x[1:], y.mean(axis=0)[1:], marker="o", ms=3, color=colors[name],
                label=f"{strategy_name(name, results)} validation")
        _, t, _ = _curve_arrays(entry, "train_loss")
        if np.isfinite(t[:, 1:]).all():
            ax.plot(x[1:], t.mean(axis=0)[1:], ls="--", lw=1, color=colors[name],
                    label=f"{strategy_name(name, results)} training sample")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("loss (nats/token, micro)")
    ax.set_title("Random's loss over training" if two else
                 f"Loss over training (mean over {n} seed{'s' if n != 1 else ''})")
    ax.legend(fontsize=8)
    if two:
        ax = axes[0][1]
        ax.axhline(0.0, color=colors["random"], lw=1.2, label="random (reference)")
        for name, entry in others:
            val = _paired(entry, base, "val_loss")
            if val is None:
                continue
            x, d = val
            mean = d.mean(axis=0)
            ax.plot(x[1:], mean[1:], marker="o", ms=3, color=colors[name],
                    label=f"{strategy_name(name, results)} − random")
            if d.shape[0] > 1:
                std = d.std(axis=0, ddof=1)
                ax.fill_between(x[1:], (mean - std)[1:], (mean + std)[1:], color=colors[name],
                                alpha=0.18, lw=0)
        ax.set_xlabel("training tokens")
        ax.set_ylabel("validation loss − random's (nats/token)")
        band = ", band ± std" if n > 1 else ""
        ax.set_title(f"Difference to random, paired by seed; below 0: better\n(mean over {n} "
                     f"seed{'s' if n != 1 else ''}{band})")
        ax.legend(fontsize=8, ncol=min(4, len(others) + 1), loc="upper center",
                  bbox_to_anchor=(0.5, -0.14), frameon=False)
    for a in axes[0]:
        a.grid(alpha=0.3)
    fig.savefig(path, dpi=100, format="png", metadata={"Software": None})
    plt.close(fig)


def plot_cluster_loss(results: dict[str, Any], path: Path) -> None:
    """Final per-cluster validation loss against cluster size (mean over seeds): one
    point per cluster and a binned trend per strategy (clusters are not joined).

    Right (when random was run): each strategy's per-cluster difference to random,
    paired by seed, which separates the strategy's effect from how hard each
    cluster's text is.
    """
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    from clusterclip.plotting import pyplot

    plt = pyplot()
    colors = _strategy_colors(results)
    base = results["strategies"].get("random")
    ordered = _ordered(results)
    others = [(n, e) for n, e in ordered if n != "random"]
    two = base is not None and bool(others)
    fig, axes = plt.subplots(1, 2 if two else 1, figsize=(12.0 if two else 6.4, 4.4),
                             layout="constrained", squeeze=False)
    ax = axes[0][0]
    for name, entry in ordered:
        _, size = cluster_arrays(entry, "size")
        _, loss = cluster_arrays(entry, "loss")
        _binned_trend(ax, size[0], loss.mean(axis=0), colors[name], strategy_name(name, results))
    ax.set_ylabel("validation loss of the cluster (nats/token)")
    ax.set_title("Per-cluster held-out loss vs cluster size")
    if two:
        ax2 = axes[0][1]
        _, base_loss = cluster_arrays(base, "loss")
        for name, entry in others:
            _, size = cluster_arrays(entry, "size")
            _, loss = cluster_arrays(entry, "loss")
            _binned_trend(ax2, size[0], (loss - base_loss).mean(axis=0), colors[name],
                          f"{strategy_name(name, results)} − random")
        ax2.axhline(0.0, color="k", lw=0.8)
        ax2.set_ylabel("loss difference to random (nats/token)")
        ax2.set_title("Per-cluster difference to random (below 0: better)")
    for a in axes[0]:
        a.set_xscale("log")
        a.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        a.xaxis.set_major_formatter(ScalarFormatter())
        a.xaxis.set_minor_formatter(NullFormatter())
        a.set_xlabel("cluster size (documents, log scale)")
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=8)
    fig.suptitle("One point per cluster (mean over seeds); lines: mean in log-spaced size bins")
    fig.savefig(path, dpi=100, format="png", metadata={"Software": None})
    plt.close(fig)


def plot_gap_repetition(results: dict[str, Any], path: Path) -> None:
    """Per-cluster train–validation gap against the average times each training document
    of the cluster was fed, with a binned trend (mean over seeds), one panel per
    strategy. Top row: the gap itself, every panel on one scale. Bottom row (when random
    was run): the excess gap over random's gap on the same cluster and seed, which
    cancels how the held-out and training documents of a cluster happen to differ, every
    panel on one scale of its own."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    from clusterclip.plotting import pyplot

    plt = pyplot()
    colors = _strategy_colors(results)
    ordered = _ordered(results)
    base = results["strategies"].get("random")
    excess_row = base is not None and len(ordered) > 1
    rows = 2 if excess_row else 1
    fig, axes = plt.subplots(rows, len(ordered), figsize=(3.6 * len(ordered) + 0.6,
                                                          3.4 * rows + 0.5),
                             layout="constrained", squeeze=False, sharex=True)
    base_gap = cluster_arrays(base, "gap")[1] if base is not None else None
    for i, (name, entry) in enumerate(ordered):
        _, gap = cluster_arrays(entry, "gap")
        _, rep = cluster_arrays(entry, "repetition")
        panels = [(axes[0][i], gap, "gap: val − train loss of the cluster")]
        if excess_row:
            panels.append((axes[1][i], None if name == "random" else gap - base_gap,
                           "gap − random's gap, same cluster"))
        for row, (ax, values, ylabel) in enumerate(panels):
            ax.set_title(strategy_name(name, results) if row == 0
                         else f"{strategy_name(name, results)}: excess over random")
            if values is None:  # random's excess over itself: nothing to show
                ax.axis("off")
                ax.text(0.5, 0.5, "random is the reference\nof this row (its excess is 0)",
                        ha="center", va="center", transform=ax.transAxes, color="0.4")
                continue
            _binned_trend(ax, rep.mean(axis=0), values.mean(axis=0), colors[name],
                          "binned mean")
            ax.axhline(0.0, color="k", lw=0.8)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
    _share_y(axes[0])
    if excess_row:
        _share_y([ax for ax, (name, _) in zip(axes[1], ordered, strict=True)
                  if name != "random"])
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=2))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    for ax in axes[-1]:
        ax.set_xlabel("feeds per training document (log)")
    fig.suptitle("Per-cluster train–validation gap vs repetition (one point per cluster, mean "
                 "over seeds); each row on one scale")
    fig.savefig(path, dpi=100, format="png", metadata={"Software": None})
    plt.close(fig)


def _share_y(axes: Any) -> None:
    """One y range for ``axes`` (the union of their data ranges)."""
    axes = list(axes)
    if not axes:
        return
    lo = min(a.get_ylim()[0] for a in axes)
    hi = max(a.get_ylim()[1] for a in axes)
    for a in axes:
        a.set_ylim(lo, hi)


def write_outputs(results: dict[str, Any], directory: Path) -> list[str]:
    """Write every output file into ``directory`` (created), each atomically and
    ``results.json`` last; returns their names."""
    from clusterclip.storage.atomic import write_text

    directory.mkdir(parents=True, exist_ok=True)
    # byte-identical reruns: the timing and the stored runs' keys stay out
    stable = {k: v for k, v in results.items() if k not in ("timing", "run_keys")}
    names = render_files(stable, directory)
    write_text(directory / "results.json", json.dumps(stable, indent=2, sort_keys=True) + "\n")
    return ["results.json", *names]


def render_files(results: dict[str, Any], directory: Path) -> list[str]:
    """results.md and the plots from a results dict (also one read back from results.json),
    each written atomically."""
    from clusterclip.storage.atomic import atomic_path, write_text

    write_text(directory / "results.md", render_markdown(results))
    plots = {"val_curves.png": plot_curves, "cluster_loss.png": plot_cluster_loss}
    if gap_summary(results):
        plots["gap_repetition.png"] = plot_gap_repetition
    for name, plot in plots.items():
        with atomic_path(directory / name) as tmp:
            plot(results, tmp)
    return ["results.md", *plots]
