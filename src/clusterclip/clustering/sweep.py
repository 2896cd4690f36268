"""Help choosing K: fit several K on one seeded sample of the embeddings and compare them.

Per K (spherical k-means, :class:`~clusterclip.clustering.kmeans.KMeans`, on the
same sample of rows):

- ``objective``: mean cosine similarity of a row to its centroid (rises with K);
- ``silhouette``: scikit-learn's silhouette score with the cosine metric on a
  seeded subsample (``sample_size``, ``random_state``); near 0 means
  overlapping clusters, higher is better separated;
- cluster-size spread: min / median / max documents per cluster of the sample,
  empty clusters, and the share of the sample held by the smallest 10% of
  clusters;
- ``small_coherence``: the mean pairwise cosine similarity inside the smallest
  25% of clusters (by size; clusters of one row have no pairs and are left
  out): whether the small clusters, the ones ClusterClip up-samples, are still
  topics or have become noise.

The rule for the suggested K (:func:`suggest_k`, stated in every output):
the largest K whose silhouette is within :data:`SILHOUETTE_TOLERANCE` of the
best silhouette of the sweep and whose small-cluster coherence is at least the
smallest K's; when no K passes both, the K with the best silhouette.
Larger K balances at a finer grain, which is what ClusterClip wants, as long as
the clusters stay separated and the small ones coherent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_SAMPLE = 50_000
SILHOUETTE_SAMPLE = 10_000
SILHOUETTE_TOLERANCE = 0.02
COLUMNS = ("k", "objective", "silhouette", "size_min", "size_median", "size_max",
           "empty_clusters", "smallest_decile_share", "small_coherence")
RULE = (f"the largest K whose silhouette is within {SILHOUETTE_TOLERANCE} of the best "
        "silhouette in the sweep and whose small-cluster coherence (mean pairwise cosine "
        "inside the smallest 25% of clusters) is at least the smallest K's; if no K passes "
        "both, the K with the best silhouette")


def sample_rows(valid: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Sorted int64 indices of ``min(size, valid.sum())`` valid rows, drawn without
    replacement with ``seed`` (all valid rows when ``size`` covers them)."""
    rows = np.flatnonzero(np.asarray(valid))
    if size >= rows.size:
        return rows.astype(np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(rows, size=size, replace=False)).astype(np.int64)


def _smallest(sizes: np.ndarray, fraction: float) -> np.ndarray:
    """Ids of the smallest ``ceil(fraction * live)`` non-empty clusters (ties: lower id)."""
    ids = np.flatnonzero(sizes > 0)
    ids = ids[np.lexsort((ids, sizes[ids]))]
    return ids[:max(1, math.ceil(fraction * ids.size))]


def size_spread(labels: np.ndarray, k: int) -> dict[str, Any]:
    """min / median / max cluster size (over all K), empty clusters, and the share of the
    rows held by the smallest 10% of non-empty clusters."""
    sizes = np.bincount(labels, minlength=k)
    return {"size_min": int(sizes.min()), "size_median": float(np.median(sizes)),
            "size_max": int(sizes.max()), "empty_clusters": int((sizes == 0).sum()),
            "smallest_decile_share": float(sizes[_smallest(sizes, 0.10)].sum() / sizes.sum())}


def pair_coherence(X: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """float64[K]: mean cosine similarity over pairs of distinct rows of each cluster
    (NaN for clusters of fewer than 2 rows). ``X`` (n, d), ``labels`` int[n] in 0..K-1.

    With unit rows, the sum over ordered pairs i != j is ``|sum_i x_i|^2 - sum_i |x_i|^2``.
    """
    import scipy.sparse as sp

    Xn = np.asarray(X, dtype=np.float64)
    Xn = Xn / np.maximum(np.linalg.norm(Xn, axis=1, keepdims=True), 1e-12)
    n = Xn.shape[0]
    onehot = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(k, n))
    sums = onehot @ Xn
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    self_dots = onehot @ np.einsum("nd,nd->n", Xn, Xn)
    pairs = sizes * (sizes - 1)
    return np.divide(np.einsum("kd,kd->k", sums, sums) - self_dots, pairs,
                     out=np.full(k, np.nan), where=pairs > 0)


def small_coherence(X: np.ndarray, labels: np.ndarray, k: int) -> float | None:
    """Mean of :func:`pair_coherence` over the smallest 25% of non-empty clusters that have
    at least 2 rows (None when none has)."""
    sizes = np.bincount(labels, minlength=k)
    coh = pair_coherence(X, labels, k)[_smallest(sizes, 0.25)]
    coh = coh[np.isfinite(coh)]
    return float(coh.mean()) if coh.size else None


def silhouette(X: np.ndarray, labels: np.ndarray, sample: int, seed: int) -> float | None:
    """scikit-learn's cosine silhouette on ``min(sample, n)`` seeded rows (None when the
    score is undefined: fewer than 2 or more than n - 1 distinct labels among them)."""
    from sklearn.metrics import silhouette_score

    try:
        return float(silhouette_score(X, labels, metric="cosine",
                                      sample_size=min(sample, X.shape[0]), random_state=seed))
    except ValueError:
        return None


def measure(X: np.ndarray, labels: np.ndarray, k: int, objective: float,
            silhouette_sample: int, seed: int) -> dict[str, Any]:
    """One row of the sweep table for a fit with ``labels`` (int[n]) on sample ``X``."""
    return {"k": int(k), "objective": float(objective),
            "silhouette": silhouette(X, labels, silhouette_sample, seed),
            **size_spread(labels, k), "small_coherence": small_coherence(X, labels, k)}


def suggest_k(rows: Sequence[dict[str, Any]], tolerance: float = SILHOUETTE_TOLERANCE
              ) -> tuple[int, str]:
    """The suggested K of a sweep table and why, by :data:`RULE`."""
    rows = sorted(rows, key=lambda r: r["k"])
    sils = [r["silhouette"] for r in rows if r["silhouette"] is not None]
    ref = rows[0]["small_coherence"]
    if not sils:
        return rows[0]["k"], "no silhouette could be computed; the smallest K is suggested"
    best = max(sils)
    best_k = min(r["k"] for r in rows if r["silhouette"] == best)

    def coherent(r: dict[str, Any]) -> bool:
        return ref is None or (r["small_coherence"] is not None
                               and r["small_coherence"] >= ref)

    ok = [r for r in rows if r["silhouette"] is not None
          and best - r["silhouette"] <= tolerance and coherent(r)]
    if not ok:
        return best_k, (f"no K has a silhouette within {tolerance} of the best ({best:.3f}) "
                        f"and small-cluster coherence >= the smallest K's; K = {best_k} has "
                        "the best silhouette")
    pick = max(ok, key=lambda r: r["k"])
    why = (f"silhouette {pick['silhouette']:.3f} (best {best:.3f} at "
           f"K = {best_k}, tolerance {tolerance}), small-cluster coherence "
           + (f"{pick['small_coherence']:.3f} >= {ref:.3f} at K = {rows[0]['k']}"
              if ref is not None else "not measurable at the smallest K"))
    larger = [r for r in rows if r["k"] > pick["k"]]
    if larger:
        r = larger[0]
        fails = []
        if r["silhouette"] is None or best - r["silhouette"] > tolerance:
            fails.append("silhouette " + ("undefined" if r["silhouette"] is None
                                          else f"{r['silhouette']:.3f}"))
        if not coherent(r):
            fails.append("small-cluster coherence " + (
                "undefined" if r["small_coherence"] is None else f"{r['small_coherence']:.3f}"))
        why += f"; the next K = {r['k']} fails ({', '.join(fails)})"
    else:
        why += "; it is the largest K swept"
    return pick["k"], why


def run_sweep(X: np.ndarray, ks: Sequence[int], *, max_iter: int, n_init: int, tol: float,
              backend: str, seed: int, device: str, chunk_rows: int,
              silhouette_sample: int = SILHOUETTE_SAMPLE, progress: bool = False
              ) -> tuple[list[dict[str, Any]], list[float]]:
    """Fit each K of ``ks`` on ``X`` (the sample, in memory) and measure it.

    Returns the table rows (ascending K) and the seconds each fit took (not part of
    the table, so that the table is byte-identical across runs).
    """
    from clusterclip.clustering.kmeans import KMeans

    rows, seconds = [], []
    for k in sorted(ks):
        t0 = time.perf_counter()
        km = KMeans(int(k), max_iter=max_iter, n_init=n_init, tol=tol, metric="cosine",
                    seed=seed, device=device, chunk_rows=chunk_rows, backend=backend,
                    progress=progress).fit(X)
        rows.append(measure(X, km.labels_.astype(np.int64), int(k), km.objective_,
                            silhouette_sample, seed))
        seconds.append(time.perf_counter() - t0)
    return rows, seconds


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table_csv(rows: Sequence[dict[str, Any]]) -> str:
    """sweep.csv: one row per K (empty field where a metric is undefined)."""
    lines = [",".join(COLUMNS)]
    for r in rows:
        lines.append(",".join("" if r[c] is None else (f"{r[c]:.6g}" if isinstance(r[c], float)
                                                       else str(r[c])) for c in COLUMNS))
    return "\n".join(lines) + "\n"


def table_text(rows: Sequence[dict[str, Any]], suggested: int) -> list[str]:
    """The table as aligned plain-text lines (the command prints them)."""
    head = f"{'K':>7} {'objective':>9} {'silhouette':>10} {'size min/med/max':>20} " \
           f"{'empty':>5} {'small 10%':>9} {'small coh.':>10}"
    out = [head]
    for r in rows:
        sizes = f"{r['size_min']}/{r['size_median']:g}/{r['size_max']}"
        mark = "  <- suggested" if r["k"] == suggested else ""
        out.append(f"{r['k']:>7} {r['objective']:>9.4f} {_fmt(r['silhouette']):>10} "
                   f"{sizes:>20} {r['empty_clusters']:>5} "
                   f"{100 * r['smallest_decile_share']:>8.2f}% "
                   f"{_fmt(r['small_coherence']):>10}{mark}")
    return out


def edge_note(rows: Sequence[dict[str, Any]], k: int) -> str:
    """A sentence when the suggestion is at an end of the swept range (else empty)."""
    ks = [r["k"] for r in rows]
    if len(ks) > 1 and k == max(ks):
        return (f"K = {k} is the largest K swept: the rule may pick a larger K in a sweep "
                "that goes further.")
    if len(ks) > 1 and k == min(ks):
        return (f"K = {k} is the smallest K swept: the rule may pick a smaller K in a sweep "
                "that starts lower.")
    return ""


def size_note(info: dict[str, Any]) -> str:
    """What the suggested K means per cluster on the full data (scaled from the sample)."""
    r = next(r for r in info["rows"] if r["k"] == info["suggested_k"])
    scale = info["valid_rows"] / info["sample_rows"]
    return (f"At K = {r['k']} the median cluster holds about {r['size_median'] * scale:,.0f} of "
            f"the {info['valid_rows']:,} documents (smallest {r['size_min'] * scale:,.0f}, "
            f"largest {r['size_max'] * scale:,.0f}, scaled from the sample).")


def render_markdown(info: dict[str, Any], figure: str) -> str:
    """sweep.md: what was fitted, the table, the rule, the suggestion and the figure."""
    rows, k = info["rows"], info["suggested_k"]
    edge = edge_note(rows, k)
    body = []
    for r in rows:
        kk = f"**{r['k']}** (suggested)" if r["k"] == k else str(r["k"])
        body.append(f"| {kk} | {r['objective']:.4f} | {_fmt(r['silhouette'])} | "
                    f"{r['size_min']:,} / {r['size_median']:g} / {r['size_max']:,} | "
                    f"{r['empty_clusters']} | {100 * r['smallest_decile_share']:.2f}% | "
                    f"{_fmt(r['small_coherence'])} |")
    return "\n".join([
        "# Choosing K",
        "",
        f"Spherical k-means fitted for each K on the same seeded sample of "
        f"{info['sample_rows']:,} of the {info['valid_rows']:,} valid embeddings (seed "
        f"{info['seed']}); silhouette (cosine) on {info['silhouette_rows']:,} of them.",
        "",
        "| K | objective (mean cosine to centroid) | silhouette | cluster size min / median / "
        "max | empty | smallest 10% of clusters hold | small-cluster coherence |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *body,
        "",
        "Small-cluster coherence: mean cosine similarity between two documents of the same "
        "cluster, averaged over the smallest 25% of clusters (clusters of one document have "
        "no pairs and are left out).",
        "",
        f"**Rule:** the suggested K is {RULE}.",
        "",
        f"![metrics against K]({figure})",
        "",
        "## Conclusion",
        "",
        f"- Suggested K = {k}: {info['reason']}.",
        *([f"- {edge}"] if edge else []),
        f"- {size_note(info)}",
        f"- Full fit: `{info['command']}`.",
        "",
    ])


def plot_sweep(info: dict[str, Any], path) -> None:
    """Four panels against K (log x): objective, silhouette, small-cluster coherence and
    cluster sizes; the suggested K marked."""
    from clusterclip.plotting import pyplot as _pyplot
    from clusterclip.plotting import save_png as _save

    plt = _pyplot()
    rows = info["rows"]
    ks = np.array([r["k"] for r in rows], dtype=float)

    def series(name: str) -> np.ndarray:
        return np.array([np.nan if r[name] is None else r[name] for r in rows], dtype=float)

    fig, axes = plt.subplots(2, 2, figsize=(8.8, 6.4), sharex=True)
    panels = [
        (axes[0, 0], "objective", "mean cosine to centroid", "Objective (higher: tighter)"),
        (axes[0, 1], "silhouette", "silhouette (cosine)", "Silhouette (higher: separated)"),
        (axes[1, 0], "small_coherence", "mean pairwise cosine",
         "Coherence of the smallest 25% of clusters"),
    ]
    for ax, name, ylabel, title in panels:
        values = series(name)
        ax.plot(ks, values, marker="o", color="tab:blue")
        if np.isnan(values).any():  # undefined at these K: marked on the axis, not dropped
            ax.plot(ks[np.isnan(values)], np.full(np.isnan(values).sum(), 0.04), "x",
                    color="tab:red", ms=8, transform=ax.get_xaxis_transform(),
                    label="undefined" + (" (smallest clusters: single documents)"
                                         if name == "small_coherence" else ""))
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    sil = series("silhouette")
    if np.isfinite(sil).any():
        best = np.nanmax(sil)
        axes[0, 1].axhspan(best - SILHOUETTE_TOLERANCE, best, color="tab:green", alpha=0.15,
                           label=f"within {SILHOUETTE_TOLERANCE} of the best")
        axes[0, 1].legend(fontsize=8, loc="best")
    coh = series("small_coherence")
    if np.isfinite(coh[0]):
        axes[1, 0].axhline(coh[0], color="tab:green", ls=":",
                           label=f"at the smallest K ({int(ks[0])})")
        axes[1, 0].legend(fontsize=8, loc="best")
    ax = axes[1, 1]
    for name, color in (("size_max", "tab:red"), ("size_median", "tab:blue"),
                        ("size_min", "tab:green")):
        ax.plot(ks, np.maximum(series(name), 0.5), marker="o", color=color,
                label=name.replace("size_", ""))
    ax.set_yscale("log")
    ax.set_ylabel("documents per cluster (log)")
    ax.set_title("Cluster sizes in the sample")
    ax.legend(fontsize=8, loc="best")
    for a in axes.ravel():
        a.set_xscale("log")
        a.axvline(info["suggested_k"], color="black", ls="--", lw=0.8)
        a.set_xticks(ks)
        a.set_xticklabels([f"{int(k):,}" for k in ks])
        a.minorticks_off()
    for a in axes[1]:
        a.set_xlabel("K (number of clusters, log scale); dashed: suggested")
    fig.suptitle(f"Choosing K on a sample of {info['sample_rows']:,} embeddings: "
                 f"suggested K = {info['suggested_k']}")
    _save(fig, path, dict(left=0.09, right=0.98, bottom=0.09, top=0.89, hspace=0.3,
                          wspace=0.28))
