"""The experiment's files: results.json, results.md and two PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clusterclip.experiment.metrics import METRICS

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


def format_table(results: dict[str, Any], markdown: bool = False) -> str:
    """Per strategy, ``mean ± std`` over seeds of every metric (nats per token)."""
    head = ["strategy"] + [_LABELS[m] for m in METRICS]
    rows = []
    for name, entry in _ordered(results):
        cells = [strategy_name(name, results)]
        for m in METRICS:
            v = entry["metrics"][m]
            cells.append(f"{v['mean']:.4f} ± {v['std']:.4f}")
        rows.append(cells)
    return _table(head, rows, markdown)


_SCHEDULE_LABELS = {
    "docs_drawn": "docs fed", "distinct_docs": "distinct docs",
    "max_repetition": "max repetition", "clusters_clipped": "clusters clipped",
    "clusters_over_clip": "clusters over clip", "tail_token_share": "tail token share",
    "head_token_share": "head token share",
}


def _schedule_cell(stat: str, v: dict[str, Any]) -> str:
    """Counts: the value if equal over seeds, else ``min–max``; shares: mean ± std."""
    if stat.endswith("_share"):
        return f"{v['mean']:.3f} ± {v['std']:.3f}"
    lo, hi = int(min(v["values"])), int(max(v["values"]))
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def format_schedule_table(results: dict[str, Any], markdown: bool = False) -> str:
    """Per strategy, what its schedules fed the models, over seeds: did the clip bind?

    Columns follow :data:`~clusterclip.experiment.runner.SCHEDULE_STATS`; a
    results dict without per-strategy schedule figures gives an empty string.
    """
    from clusterclip.experiment.runner import SCHEDULE_STATS

    ordered = _ordered(results)
    if not ordered or "schedule" not in ordered[0][1]:
        return ""
    head = ["strategy"] + [_SCHEDULE_LABELS[k] for k in SCHEDULE_STATS]
    rows = [[strategy_name(n, results)] + [_schedule_cell(k, e["schedule"][k])
                                           for k in SCHEDULE_STATS] for n, e in ordered]
    return _table(head, rows, markdown)


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
        for m in METRICS:
            v = entry["vs_random"][m]
            cells.append(f"{v['mean']:+.4f} ± {v['std']:.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return ""
    head = ["difference"] + [_LABELS[m] for m in METRICS]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *lines])


def render_markdown(results: dict[str, Any]) -> str:
    """``results.md``: setup, the metric table, paired differences, plots."""
    c, d = results["config"], results["data"]
    m = c["model"]
    steps = d.get("steps", c.get("steps"))  # results.json before the epochs budget kept it in c
    if c.get("tokens") is None and "epochs" in c:
        budget = (f"a budget of {c['epochs']:g} epochs-equivalent of the training text, "
                  "in whole batches")
    else:
        budget = f"an explicit budget, {d['epochs_equivalent']:.2f} epochs of the training text"
    parts = [
        "# ClusterClip experiment: held-out loss per sampling strategy",
        "",
        f"A byte-level decoder-only transformer ({m['n_layers']} "
        f"layer{'s' if m['n_layers'] != 1 else ''}, d={m['d_model']}, "
        f"{m['n_heads']} heads, window {m['seq_len']}) is trained once per strategy and seed "
        f"on {d['budget_tokens']:,} tokens ({steps} steps of {c['train']['batch_size']} "
        f"windows; {budget}), from the same "
        f"initialisation for the same seed. Seeds: {c['seeds']}; clip R = {c['clip']}; "
        f"alpha = {c['alpha']}; clusters balanced by {c['balance_by']}; "
        f"device {results['device']}.",
        "",
        f"Data: {d['documents']:,} documents in {d['clusters']} clusters "
        f"({d['excluded']} excluded: label -1 or no text, of which {d['no_text']} "
        "without text). "
        f"Held out: {d['valid_docs']} documents ({d['valid_tokens']:,} tokens) from the "
        f"{d['valid_clusters']} clusters with at least {c['min_cluster_docs']} documents, "
        f"{c['valid_fraction']:.0%} of each; training uses the other {d['train_docs']:,} "
        f"({d['train_tokens']:,} tokens). Documents are truncated to their first "
        f"{c['max_doc_tokens'] - 1} bytes ({d['truncated']:,} were longer), each followed by "
        f"an end-of-document token, and packed in schedule order into windows.",
        "",
        "Loss in nats per token, mean ± std over seeds. *micro*: all held-out tokens; "
        "*macro*: mean of per-cluster losses; *tail* / *head*: mean over the smallest / largest "
        f"quarter of the evaluated clusters (tail {d['tail_clusters']}, head "
        f"{d['head_clusters']}); *train*: the same loss on a training sample with the held-out "
        "set's cluster mix; *gap* = val micro − train. Lower is better "
        "(uniform-byte baseline ln 256 = 5.545).",
        "",
        format_table(results, markdown=True),
    ]
    deltas = format_deltas(results)
    if deltas:
        parts += ["", "Paired by seed (same initialisation), difference to random "
                  "(negative = lower loss than random); a mean within about 2 std of 0 is "
                  "not distinguishable from noise at this number of seeds:", "", deltas]
    sched = format_schedule_table(results, markdown=True)
    if sched:
        parts += ["", "What each strategy's schedules fed the models (counts: the value, or "
                  "min–max over seeds; shares: mean ± std). *max repetition*: most times one "
                  "document was fed; *clusters clipped*: clusters that completed their "
                  f"{c['clip']}-th pass and left ClusterClip's pool (the sampler's summary); "
                  f"*clusters over clip*: clusters with a document fed more than {c['clip']} "
                  "times; *tail* / *head token share*: share of the training tokens from the "
                  "tail / head clusters above.", "", sched]
    parts += ["", "![validation loss over training](val_curves.png)", "",
              "![per-cluster loss vs cluster size](cluster_loss.png)", ""]
    return "\n".join(parts)


def plot_curves(results: dict[str, Any], path: Path) -> None:
    """Validation micro loss against training tokens, mean ± std band per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for name, entry in _ordered(results):
        curves = [r["curve"] for r in entry["runs"]]
        x = np.array([p["tokens"] for p in curves[0]])
        y = np.array([[p["val_loss"] for p in c] for c in curves])
        mean, std = y.mean(axis=0), y.std(axis=0)
        ax.plot(x[1:], mean[1:], marker="o", ms=3, label=strategy_name(name, results))
        ax.fill_between(x[1:], (mean - std)[1:], (mean + std)[1:], alpha=0.2)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/token, micro)")
    ax.set_title("Validation loss over training (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_cluster_loss(results: dict[str, Any], path: Path) -> None:
    """Final per-cluster validation loss against cluster size (mean over seeds).

    Left: the loss of each cluster per strategy. Right (when random was run):
    each strategy's difference to random, paired by seed, which separates the
    strategy's effect from how hard each cluster's text is.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    base = results["strategies"].get("random")
    others = [(n, e) for n, e in _ordered(results) if n != "random"]
    two = base is not None and bool(others)
    fig, axes = plt.subplots(1, 2 if two else 1, figsize=(12.0 if two else 6.4, 4.2),
                             layout="constrained", squeeze=False)

    def per_cluster(entry: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        keys = sorted(entry["runs"][0]["per_cluster"], key=int)
        size = np.array([entry["runs"][0]["per_cluster"][k]["size"] for k in keys])
        loss = np.array([[r["per_cluster"][k]["loss"] for k in keys] for r in entry["runs"]])
        return size, loss

    ax = axes[0][0]
    for name, entry in _ordered(results):
        size, loss = per_cluster(entry)
        order = np.argsort(size, kind="stable")
        ax.plot(size[order], loss.mean(axis=0)[order], marker="o", ms=4, lw=0.8, alpha=0.8,
                label=strategy_name(name, results))
    ax.set_ylabel("validation loss of the cluster (nats/token)")
    ax.set_title("Per-cluster held-out loss vs cluster size")
    if two:
        ax2 = axes[0][1]
        _, base_loss = per_cluster(base)
        for i, (name, entry) in enumerate(others, start=1):
            size, loss = per_cluster(entry)
            diff = (loss - base_loss).mean(axis=0)  # paired by seed
            order = np.argsort(size, kind="stable")
            ax2.plot(size[order], diff[order], marker="o", ms=4, lw=0.8, color=f"C{i}",
                     label=f"{strategy_name(name, results)} − random")
        ax2.axhline(0.0, color="C0", lw=1)
        ax2.set_ylabel("loss difference to random (nats/token)")
        ax2.set_title("Per-cluster difference to random (below 0: better)")
    for a in axes[0]:
        a.set_xscale("log")
        a.set_xlabel("cluster size (documents, log scale)")
        a.grid(alpha=0.3, which="both")
        a.legend()
    fig.suptitle("Mean over seeds")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(results: dict[str, Any], directory: Path) -> list[str]:
    """Write every output file into ``directory`` (created); returns their names."""
    directory.mkdir(parents=True, exist_ok=True)
    stable = {k: v for k, v in results.items() if k != "timing"}  # byte-identical reruns
    (directory / "results.json").write_text(
        json.dumps(stable, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return ["results.json", *render_files(stable, directory)]


def render_files(results: dict[str, Any], directory: Path) -> list[str]:
    """results.md and the plots from a results dict (also one read back from results.json)."""
    (directory / "results.md").write_text(render_markdown(results), encoding="utf-8")
    plot_curves(results, directory / "val_curves.png")
    plot_cluster_loss(results, directory / "cluster_loss.png")
    return ["results.md", "val_curves.png", "cluster_loss.png"]
