"""Choosing the clip R for a training budget (beyond the paper).

The paper fixes R by hand. Here R is chosen from the cluster sizes and the
budget T with the *expected* ("fluid") course of the ClusterClip sampler:

With temperature ``alpha``, a cluster k in the pool receives draws at a rate
proportional to ``w_k = n_k ** alpha``. Write ``s`` for the draws received per
unit of weight so far; every cluster in the pool has received ``w_k * s``
draws. Cluster k leaves the pool when that reaches ``R * n_k``, i.e. at
``s_k = R * n_k / w_k``. Sorting clusters by ``s_k`` turns the whole schedule
into a piecewise-linear map from ``s`` to the global position, so the expected
draws of every cluster at any budget, and every clip position, cost
O(K log K) whatever T is (10^8 samples are as cheap as 10^3).

Inside a cluster the sampler draws without replacement pass by pass, so ``d``
draws from a cluster of ``n`` documents repeat its most repeated document
``ceil(d / n)`` times. The expected numbers are within sampling noise of a real
schedule; :func:`choose_clip` can add measured columns from the real sampler
where T is small enough to generate.

The recommended R is the smallest R that (a) fits the budget (``R * N >= T``)
and (b) does not starve the tail: in the expected course, the smallest 25% of
clusters by size still get at least ``tail_floor`` times their share of the
corpus (what plain shuffling gives them) of the last 20% of the schedule.
ClusterClip retires small clusters first, so a small R ends training on the
large clusters only; each step up in R keeps them in the pool longer but also
repeats their documents more. The smallest R that keeps the tail fed to the end
is the least repetition that does not starve it. (A clip of R caps every
document at R passes by construction, so the repetition cap alone cannot choose
R.) When no R in the table does, there is no recommendation and the reason says
so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from clusterclip.labels import cluster_sizes
from clusterclip.sampling.spec import DEFAULT_CLIP

# A schedule starves the tail when the smallest quartile of clusters gets less than this
# fraction of its corpus share (what plain shuffling gives it) late in training.
DEFAULT_TAIL_FLOOR = 0.5
LATE_TENTHS = 2  # "late in training": the last 2 tenths (20%) of the schedule
DEFAULT_CLIPS = tuple(range(1, 17))


def default_clips(min_feasible: int) -> list[int]:
    """R values to tabulate: 1..16, extended so that at least 8 of them fit the budget."""
    return list(range(1, max(DEFAULT_CLIPS[-1], min_feasible + 7) + 1))
TAIL_QUANTILE = 0.25


def quartile_clusters(sizes: np.ndarray, quantile: float = TAIL_QUANTILE,
                      among: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ids of the smallest and the largest ``quantile`` share of non-empty clusters.

    ``sizes`` is int[K] (documents per cluster); ``among``, if given, the cluster ids
    to rank (e.g. those evaluated; default: every cluster). Ties are broken by cluster
    id, so the split is deterministic. Each group holds ``ceil(quantile * K')``
    clusters (at least one), K' = number of non-empty clusters ranked. Returns
    (tail_ids, head_ids), int64 arrays sorted by size ascending / descending.
    """
    sizes = np.asarray(sizes)
    ids = np.arange(sizes.size) if among is None else np.unique(np.asarray(among, np.int64))
    nonempty = ids[sizes[ids] > 0]
    order = nonempty[np.lexsort((nonempty, sizes[nonempty]))]  # size asc, id asc
    m = max(1, math.ceil(quantile * order.size)) if order.size else 0
    return order[:m].astype(np.int64), order[::-1][:m].astype(np.int64)


def expected_draws(sizes: np.ndarray, clip: float, num_samples: int, alpha: float = 0.0,
                   weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Expected draws per cluster after ``num_samples`` ClusterClip samples.

    ``sizes`` int[K] documents per cluster (empty clusters get no draws);
    ``clip`` R >= 1 (``math.inf`` for no clip, i.e. plain uniform/temperature).
    ``weights`` float[K] (> 0 for non-empty clusters), if given, replaces
    ``n_k ** alpha`` as the cluster-choice weight, as the sampler's
    ``cluster_weights`` does (e.g. to balance by tokens).
    Returns (draws float64[K], clip_position float64[K]): the expected number
    of samples from each cluster, and the global position at which each cluster
    leaves the pool (``inf`` if it has not left by ``num_samples``). When
    ``num_samples`` exceeds the capacity R * N, draws stop at R * n_k.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    draws = np.zeros_like(sizes)
    clip_pos = np.full_like(sizes, np.inf)
    live = np.flatnonzero(sizes > 0)
    if live.size == 0 or num_samples <= 0:
        return draws, clip_pos
    n = sizes[live]
    w = n ** alpha if weights is None else np.asarray(weights, dtype=np.float64)[live]
    s_clip = clip * n / w  # per-unit-weight draws at which each cluster is exhausted
    order = np.lexsort((live, s_clip))
    s_sorted = s_clip[order]
    # Weight still in the pool while the j-th cluster (in clip order) is the next to go.
    pool_weight = np.cumsum(w[order][::-1])[::-1]
    with np.errstate(invalid="ignore"):  # inf - inf when clip is inf
        ds = np.diff(s_sorted, prepend=0.0)
    ds = np.where(np.isfinite(ds), ds, np.inf)
    t_sorted = np.cumsum(ds * pool_weight)  # position at which each cluster leaves
    j = int(np.searchsorted(t_sorted, num_samples, side="right"))  # first still in pool
    if j >= order.size:
        s_at_t = s_sorted[-1]
    else:
        s_prev = s_sorted[j - 1] if j > 0 else 0.0
        t_prev = t_sorted[j - 1] if j > 0 else 0.0
        s_at_t = s_prev + (num_samples - t_prev) / pool_weight[j]
    d = np.minimum(w * s_at_t, clip * n)
    draws[live] = d
    pos = np.full(order.size, np.inf)
    pos[order[:j]] = t_sorted[:j]
    clip_pos[live] = pos
    return draws, clip_pos


def _max_repetition(draws: np.ndarray, sizes: np.ndarray) -> int:
    if draws.size == 0:
        return 0
    # Passes are drawn without replacement: d draws over n docs repeat one doc ceil(d/n) times.
    return int(np.max(np.ceil(draws / sizes - 1e-9)))


def late_start(num_samples: int) -> int:
    """First position of the last 20% of a schedule of T samples (the tenths' edge 8T // 10)."""
    parts = min(10, int(num_samples))
    return (parts - min(LATE_TENTHS, parts)) * int(num_samples) // parts


def clip_row(sizes: np.ndarray, clip: int, num_samples: int, alpha: float = 0.0,
             weights: np.ndarray | None = None) -> dict[str, Any]:
    """One row of the choose-R table for clip ``clip`` (expected values).

    Keys: clip, capacity, feasible, first_clip_position (None if no cluster is
    clipped within the budget), clusters_clipped, tail_max_repetition (passes
    over the most repeated document of the smallest 25% of clusters),
    tail_mean_repetition (tail samples / tail documents), tail_share and
    head_share (share of the schedule from the smallest / largest 25% of
    clusters), tail_share_late (the smallest 25%'s share of the last 20% of the
    schedule, positions :func:`late_start` to T), max_repetition (over all clusters).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    capacity = int(clip) * total
    budget = min(num_samples, capacity)
    draws, clip_pos = expected_draws(sizes, clip, budget, alpha, weights)
    tail, head = quartile_clusters(sizes)
    clipped = np.isfinite(clip_pos)
    live = sizes > 0
    start = min(late_start(num_samples), budget)
    before, _ = expected_draws(sizes, clip, start, alpha, weights)
    late_len = budget - start
    return {
        "clip": int(clip),
        "capacity": capacity,
        "feasible": bool(num_samples <= capacity),
        "first_clip_position": int(round(float(clip_pos[clipped].min()))) if clipped.any()
        else None,
        "clusters_clipped": int(clipped.sum()),
        "tail_max_repetition": _max_repetition(draws[tail], sizes[tail].astype(np.float64)),
        "tail_mean_repetition": float(draws[tail].sum() / sizes[tail].sum()),
        "tail_share": float(draws[tail].sum() / budget) if budget else 0.0,
        "head_share": float(draws[head].sum() / budget) if budget else 0.0,
        "tail_share_late": float((draws[tail].sum() - before[tail].sum()) / late_len)
        if late_len > 0 else 0.0,
        "max_repetition": _max_repetition(draws[live], sizes[live].astype(np.float64)),
    }


def choose_clip(
    labels: np.ndarray,
    num_samples: int,
    *,
    alpha: float = 0.0,
    tail_floor: float = DEFAULT_TAIL_FLOOR,
    clips: Sequence[int] | None = None,
    measure: Callable[[int], dict[str, Any]] | None = None,
    cluster_weights: np.ndarray | None = None,
) -> dict[str, Any]:
    """Table of R -> consequences at budget T, and the recommended R.

    ``labels`` int[N] cluster id per document (-1 excluded); ``num_samples`` T.
    ``tail_floor``: the recommendation keeps the smallest quartile's expected
    share of the last 20% of the schedule at or above ``tail_floor`` x its
    share of the corpus (see the module docstring).
    ``measure``, if given, is called with each R that fits the budget and returns
    measured values from a real schedule (e.g. ``{"measured_tail_share": ...}``)
    that are merged into that row. ``clips`` defaults to :func:`default_clips`.
    ``cluster_weights`` (float[K]) replaces ``n_k ** alpha`` as in the sampler.

    Returns a JSON-serialisable dict: budget, alpha, tail_floor,
    corpus_tail_share, late_threshold (tail_floor x corpus_tail_share),
    late_start, eligible_documents, clusters, tail_clusters, tail_documents,
    min_feasible_clip, rows (one per R, see :func:`clip_row`; rows whose R x N
    < T have ``feasible`` false), recommended_clip (None if no R in ``clips``
    fits the rule), clip_inactive_from (the smallest R in ``clips`` at which no
    cluster is clipped within the budget, i.e. larger R change nothing), rule
    and reason (sentences for the report).
    """
    if num_samples <= 0:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    if not (tail_floor >= 0 and math.isfinite(tail_floor)):
        raise ValueError(f"tail_floor must be a number >= 0, got {tail_floor}")
    sizes, cluster_weights = _sizes_and_weights(labels, cluster_weights)
    n_docs = int(sizes.sum())
    min_feasible = math.ceil(num_samples / n_docs)
    if clips is None:
        clips = default_clips(min_feasible)
    clips = sorted({int(r) for r in clips if int(r) >= 1})
    if not clips:
        raise ValueError("no clip value >= 1 to consider")
    tail, _ = quartile_clusters(sizes)
    corpus_tail = float(sizes[tail].sum() / n_docs)
    threshold = tail_floor * corpus_tail
    rows = []
    for r in clips:
        row = clip_row(sizes, r, num_samples, alpha, cluster_weights)
        if measure is not None and row["feasible"]:
            row.update(measure(r))
        rows.append(row)
    inactive = [row["clip"] for row in rows if row["clusters_clipped"] == 0]
    clip_inactive_from = min(inactive) if inactive else None
    rule, best, reason = _recommend(rows, clips, tail_floor, corpus_tail, min_feasible)
    return {
        "budget": int(num_samples),
        "alpha": float(alpha),
        "tail_floor": float(tail_floor),
        "corpus_tail_share": corpus_tail,
        "late_threshold": threshold,
        "late_start": late_start(num_samples),
        "eligible_documents": n_docs,
        "clusters": int((sizes > 0).sum()),
        "tail_clusters": int(tail.size),
        "tail_documents": int(sizes[tail].sum()),
        "min_feasible_clip": int(min_feasible),
        "rows": rows,
        "recommended_clip": best,
        "clip_inactive_from": clip_inactive_from,
        "rule": rule,
        "reason": reason,
    }


def _sizes_and_weights(labels: np.ndarray, cluster_weights: np.ndarray | None
                       ) -> tuple[np.ndarray, np.ndarray | None]:
    """The cluster sizes of the eligible documents, and the checked ``cluster_weights``."""
    sizes = cluster_sizes(labels)  # a chunk at a time: no copy of the labels
    if int(sizes.sum()) == 0:
        raise ValueError("no eligible documents (every label is -1)")
    if cluster_weights is not None:
        cluster_weights = np.asarray(cluster_weights, dtype=np.float64)
        if cluster_weights.ndim != 1 or cluster_weights.size < sizes.size \
                or not (cluster_weights[:sizes.size][sizes > 0] > 0).all():
            raise ValueError(f"cluster_weights must be a 1-D array of >= {sizes.size} values, "
                             f"> 0 for every non-empty cluster")
    return sizes, cluster_weights


def _recommend(rows: list[dict[str, Any]], clips: list[int], tail_floor: float,
               corpus_tail: float, min_feasible: int) -> tuple[str, int | None, str]:
    """The rule, the recommended R (None when no R fits it) and the reason, as sentences."""
    threshold = tail_floor * corpus_tail
    feasible = [row for row in rows if row["feasible"]]
    ok = [row for row in feasible if row["tail_share_late"] >= threshold]
    late_pct = 10 * LATE_TENTHS
    rule = (f"the smallest R with R x N >= T whose smallest quartile of clusters still gets at "
            f"least {tail_floor:g} x its corpus share ({tail_floor:g} x {100 * corpus_tail:.1f}% "
            f"= {100 * threshold:.1f}%) of the last {late_pct}% of the schedule, in "
            f"ClusterClip's expected course")
    if ok:
        best = min(row["clip"] for row in ok)
        row = next(r for r in ok if r["clip"] == best)
        reason = (f"R={best}: the smallest quartile gets {100 * row['tail_share_late']:.1f}% of "
                  f"the last {late_pct}% of the schedule (floor {100 * threshold:.1f}%), its "
                  f"documents seen {row['tail_mean_repetition']:.1f} times on average")
        below = [r for r in feasible if r["clip"] < best]
        if below:
            reason += (f"; R={below[-1]['clip']} gives it only "
                       f"{100 * below[-1]['tail_share_late']:.1f}%")
        reason += "."
        if row["clusters_clipped"] == 0:
            reason += " The clip does not bind at this budget: the schedule is uniform's."
    elif feasible:
        best = None
        reason = (f"No R in {clips[0]}..{clips[-1]} keeps the smallest quartile at "
                  f"{100 * threshold:.1f}% of the last {late_pct}% of the schedule "
                  f"(best: {100 * max(r['tail_share_late'] for r in feasible):.1f}%); try "
                  f"larger R (--choose-clip), or the paced strategy, which spreads each "
                  f"cluster's draws evenly over training.")
    else:
        best = None
        reason = (f"The budget needs R >= {min_feasible}, above every R considered "
                  f"({clips[0]}..{clips[-1]}).")
    return rule, best, reason


# -- the defaults of `sample`, `run` and the demo ------------------------------------------
#: The commands' strategy (the sampler class keeps the paper's, DEFAULT_STRATEGY): the one
#: that beat random on held-out loss in the team's runs (issue 16); paced's default R is
#: DEFAULT_CLIP, the clip that evidence was measured at.
DEFAULT_COMMAND_STRATEGY = "paced"


def default_clip(labels: np.ndarray, num_samples: int | None, strategy: str, *,
                 alpha: float = 0.0, cluster_weights: np.ndarray | None = None,
                 groups: np.ndarray | None = None) -> tuple[int, str]:
    """``(R, why)``: the clip R when none is given, and the sentence that says why.

    ``labels`` int[N] (-1 excluded); ``groups`` int[N] near-duplicate groups (the
    smallest member's index) when the clip counts groups; ``num_samples`` T (None for
    a token budget, whose T is not known in advance).

    - ``clusterclip``: the recommended R of :func:`choose_clip` for this T (the report's
      rule: the smallest R that fits T and does not starve the tail late in training).
    - ``paced`` (and a token budget): :data:`DEFAULT_CLIP`, raised to the smallest R that
      fits T. The recommendation is not used: it models ClusterClip's greedy course, in
      which small clusters run out early; paced spreads every cluster over the whole
      schedule, never starves the tail, and by that rule would get the smallest R that
      fits T, at which it feeds the corpus's own mixture.
    """
    labels = np.asarray(labels)
    if groups is not None:  # one unit per group: its smallest member stands for it
        labels = labels[np.asarray(groups) == np.arange(labels.size)]
    n = int(np.count_nonzero(labels >= 0))
    fits = math.ceil(num_samples / n) if num_samples is not None and n else 1
    if strategy == "clusterclip" and num_samples is not None and n:
        try:
            choice = choose_clip(labels, num_samples, alpha=alpha,
                                 cluster_weights=cluster_weights)
        except ValueError as e:  # bad weights: the sampler refuses them with their name
            return max(DEFAULT_CLIP, fits), f"no recommendation ({e})"
        best = choice["recommended_clip"]
        if best is not None:
            return int(best), f"the recommended R for this budget ({choice['reason']})"
        r = max(DEFAULT_CLIP, fits)
        return r, f"{r}: no R meets the recommendation rule ({choice['reason']})"
    r = max(DEFAULT_CLIP, fits)
    raised = f", raised to {r}, the smallest R that fits T" if r > DEFAULT_CLIP else ""
    if num_samples is None:
        return r, (f"{DEFAULT_CLIP}{raised} (a token budget does not fix T in advance, so no R "
                   f"is recommended for it)")
    return r, (f"paced's default {DEFAULT_CLIP}, the R its evidence was measured at{raised}; "
               f"not the report's recommended R, which models ClusterClip's greedy course "
               f"(paced spreads each cluster over the whole schedule and never starves the "
               f"tail)")
