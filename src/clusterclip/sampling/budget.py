"""Token budgets and token-balanced cluster weights (the sampling side of tokens).

Given tokens per document (counted by :mod:`clusterclip.tokens`, or any int
array), :func:`plan_schedule` sizes a schedule to a budget of ``num_tokens``
tokens and, with ``balance_by="tokens"``, weighs clusters so that they supply
equal tokens rather than equal documents. Arrays in, numbers out: nothing here
reads a file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.labels import check_labels
from clusterclip.limits import MAX_SAMPLES
from clusterclip.sampling.factory import make_sampler
from clusterclip.sampling.spec import (
    CLIP_STRATEGIES,
    DEFAULT_STRATEGY,
    LENGTH_DEPENDENT_STRATEGIES,
    SamplerSpec,
    check_alpha,
    resolve_clusters,
    smallest_clip_phrase,
)

#: How clusters are balanced: by documents (n_k ** alpha) or by tokens.
BALANCE_BY = ("docs", "tokens")


def token_balanced_weights(labels: np.ndarray, doc_tokens: np.ndarray, alpha: float = 0.0,
                           num_clusters: int | None = None) -> np.ndarray:
    """Cluster choice weights that balance clusters by *tokens* instead of documents.

    A cluster sampler picks cluster k with weight w_k and then one document of
    it, so cluster k receives tokens in proportion to w_k * m_k, where m_k is
    its mean document length in tokens. With ``w_k = n_k ** alpha / m_k`` the
    expected tokens per cluster are proportional to ``n_k ** alpha`` (equal
    for alpha = 0), which is the document-balanced rule restated in tokens.

    ``labels``: int[N] (-1 excluded); ``doc_tokens``: int[N] tokens per document.
    Returns float64[K] (K = ``num_clusters`` or max label + 1), normalised to
    sum 1; clusters without documents get weight 0. A cluster with documents
    but no tokens is an InputError (no weight makes it supply tokens).
    """
    labels = np.asarray(labels)
    doc_tokens = np.asarray(doc_tokens, dtype=np.float64)
    k = int(num_clusters if num_clusters is not None else labels.max(initial=-1) + 1)
    use = labels >= 0
    counts = np.bincount(labels[use], minlength=k).astype(np.float64)
    tokens = np.bincount(labels[use], weights=doc_tokens[use], minlength=k)
    silent = np.flatnonzero((counts > 0) & (tokens <= 0))
    if silent.size:
        c = int(silent[0])
        raise InputError(f"balance_by tokens: cluster {c} has {int(counts[c])} documents "
                         f"but 0 tokens", params=("balance_by",))
    weights = np.zeros(k, dtype=np.float64)
    ok = counts > 0
    mean_tokens = tokens[ok] / counts[ok]
    weights[ok] = counts[ok] ** alpha / mean_tokens
    total = weights.sum()
    if not total > 0:
        raise InputError("balance_by tokens: no cluster has any tokens", params=("balance_by",))
    return weights / total


def schedule_tokens(sampler: Any, doc_tokens: np.ndarray, block: int = 1 << 16) -> int:
    """Total tokens of the documents a (fresh) sampler serves, repeats counted."""
    return sum(int(doc_tokens[b].sum()) for b in sampler.blocks(block))


def schedule_length_for_tokens(make: Callable[[int], Any], doc_tokens: np.ndarray,
                               needed: int, t_max: int, *, exact: bool = False) -> int:
    """Schedule length T whose own schedule supplies ``needed`` tokens, at most ``t_max``.

    ``make(T)``: a fresh sampler of T positions. For strategies whose schedule
    depends on T (``paced`` spreads each cluster over the whole schedule),
    training on a prefix of a longer schedule would feed a different mixture
    than the strategy defines. Starting from the length at the mean document
    length, T doubles until the schedule's documents hold ``needed`` tokens,
    then a bisection finds a T within 0.5% of the shortest that does (what is
    left unfed is at most that), or with ``exact`` a T whose schedule supplies
    ``needed`` while T - 1's does not; deterministic, as each try is. Returns
    ``t_max`` when even it falls short.
    """
    lengths = np.asarray(doc_tokens).astype(np.int64)

    def supplies(t: int) -> bool:
        return schedule_tokens(make(t), lengths) >= needed

    # Grow from a guess until enough, then bisect to within 0.5% of the shortest such T.
    lo, hi = 0, min(t_max, max(1, math.ceil(needed / max(1.0, float(lengths.mean())))))
    while not supplies(hi):
        if hi >= t_max:
            return t_max
        lo, hi = hi, min(t_max, 2 * hi)
    while hi - lo > (1 if exact else max(1, hi // 200)):
        mid = (lo + hi) // 2
        if supplies(mid):
            hi = mid
        else:
            lo = mid
    return hi


def first_reaching(blocks: Iterable[np.ndarray], doc_tokens: np.ndarray,
                   num_tokens: int) -> tuple[int, int] | None:
    """``(n, tokens)``: the first n positions of the stream of ``blocks`` whose tokens
    reach ``num_tokens`` (and the tokens they hold); None when the stream falls short."""
    pos, have = 0, 0
    for b in blocks:
        cum = np.cumsum(doc_tokens[b]) + have
        i = int(np.searchsorted(cum, num_tokens, side="left"))
        if i < cum.size:
            return pos + i + 1, int(cum[i])
        pos, have = pos + b.size, int(cum[-1]) if cum.size else have
    return None


def budget_length(labels: np.ndarray, doc_tokens: np.ndarray, num_tokens: int,
                  **options: Any) -> tuple[int, int, int]:
    """``(T, n, tokens)`` for a budget of ``num_tokens``: the sampler's ``num_samples`` T,
    the schedule's end n <= T (the first position whose cumulative tokens reach the
    budget) and the tokens of those n positions. ``options``: the sampler's
    (:class:`~clusterclip.sampling.spec.SamplerSpec` fields but ``num_samples``;
    single rank, from position 0).

    The schedule of most strategies does not depend on T (a longer one extends a
    shorter one), so T = n. ``paced`` (LENGTH_DEPENDENT_STRATEGIES) spreads its
    quotas over T: T is found first (:func:`schedule_length_for_tokens`, exact:
    T's schedule reaches the budget and T - 1's does not), and the schedule then
    ends where it first reaches the budget, which may cut the last few positions
    of T's schedule (the draws placed last: n < T). Raises InputError, with the
    numbers, when a clipped strategy cannot supply the budget.
    """
    spec = SamplerSpec(1, **options)  # every sampler parameter checked before any work
    clusters = resolve_clusters(spec, labels)
    strategy, clip = spec.strategy, spec.clip

    def make(t: int) -> Any:
        return make_sampler(labels, t, **options)

    # the documents the sampler may draw: labelled, in a cluster of weight > 0
    tokens = np.where(clusters.drawable, np.asarray(doc_tokens, dtype=np.int64), 0)
    total = int(tokens.sum())
    if total <= 0:
        raise InputError("num_tokens: the eligible documents hold no tokens",
                         params=("num_tokens",))
    n_eligible = clusters.num_eligible
    if strategy in CLIP_STRATEGIES:
        if num_tokens > clip * total:
            raise InputError(f"num_tokens {num_tokens:,} exceeds what {strategy} can supply "
                             f"with clip {clip}: {clip} x {total:,} tokens of the "
                             f"{n_eligible:,} eligible documents = {clip * total:,}; "
                             f"{smallest_clip_phrase(-(-num_tokens // total))}, "
                             f"the largest num_tokens that clip {clip} allows is "
                             f"{clip * total:,}", params=("num_tokens", "clip"))
        t_max = clip * n_eligible
    else:
        t_max = MAX_SAMPLES  # never reached: every draw of a document with tokens adds some

    if strategy in LENGTH_DEPENDENT_STRATEGIES:
        t = schedule_length_for_tokens(make, tokens, num_tokens, t_max, exact=True)
    else:
        t = t_max
    # Blocks about the expected length (not 2**20 positions for a budget of a few hundred).
    mean = total / max(1, n_eligible)
    block = int(min(1 << 20, max(1 << 10, 2 * num_tokens / mean)))
    got = first_reaching(make(t).blocks(block), tokens, num_tokens)
    if got is None:  # cannot happen after the capacity check; say so plainly if it does
        raise InputError(f"num_tokens {num_tokens:,}: the {strategy} schedule of "
                         f"{t:,} positions holds fewer tokens", params=("num_tokens",))
    n, held = got
    return (t if strategy in LENGTH_DEPENDENT_STRATEGIES else n), n, held


def check_budget(*, num_tokens: int | None, balance_by: str) -> bool:
    """Check ``num_tokens`` (>= 1 or None) and ``balance_by``; True when they need token
    counts (a budget, or balancing by tokens)."""
    if num_tokens is not None and (isinstance(num_tokens, bool) or num_tokens < 1):
        raise InputError(f"num_tokens {num_tokens}: must be >= 1", params=("num_tokens",))
    if balance_by not in BALANCE_BY:
        raise InputError(f"balance_by must be docs or tokens, got {balance_by!r}",
                         params=("balance_by",))
    return num_tokens is not None or balance_by == "tokens"


def check_balance(*, balance_by: str, strategy: str, alpha: float, has_weights: bool) -> None:
    """Refuse (InputError) a ``balance_by`` that cannot apply to these sampler options."""
    if balance_by != "tokens":
        return
    if strategy == "random":
        raise InputError("balance_by tokens: strategy random does not draw by cluster; "
                         "choose another strategy or balance_by docs",
                         params=("balance_by", "strategy"))
    if has_weights:
        raise InputError("balance_by tokens computes the cluster weights; do not also "
                         "give cluster_weights (divide yours by the mean tokens per "
                         "document instead)", params=("balance_by", "cluster_weights"))
    check_alpha(strategy, alpha)


def plan_schedule(labels: np.ndarray, *, num_samples: int | None, num_tokens: int | None,
                  doc_tokens: np.ndarray | None, balance_by: str, **options: Any
                  ) -> dict[str, Any]:
    """The sampler's length and weights for a schedule of ``num_samples`` positions or of
    ``num_tokens`` tokens, balanced by ``balance_by`` (docs or tokens); checked first.
    ``options``: the other sampler parameters (``strategy``, ``clip``, ``alpha``,
    ``seed``, ``cluster_weights``, ...).

    Returns ``num_samples`` (the sampler's T), ``stop`` (the schedule's end, <= T),
    ``cluster_weights`` (None, the given ones, or token-balanced), ``alpha`` and
    ``schedule_tokens`` (global tokens of positions [0, stop) for a token budget).
    """
    if (num_samples is None) == (num_tokens is None):
        raise InputError("give exactly one of num_samples and num_tokens",
                         params=("num_samples", "num_tokens"))
    if check_budget(num_tokens=num_tokens, balance_by=balance_by) and doc_tokens is None:
        raise InputError("num_tokens and balance_by tokens need token counts",
                         params=("num_tokens", "balance_by"))
    labels = np.asarray(labels)
    if doc_tokens is not None and np.asarray(doc_tokens).shape != labels.shape:
        raise InputError(f"token counts for {np.asarray(doc_tokens).size} documents but "
                         f"the labels have {labels.size}")
    weights = options.get("cluster_weights")
    alpha = options.get("alpha", 0.0)
    check_balance(strategy=options.get("strategy", DEFAULT_STRATEGY),
                  balance_by=balance_by, alpha=alpha, has_weights=weights is not None)
    if balance_by == "tokens":
        lab = check_labels(labels)
        weights = token_balanced_weights(lab, doc_tokens, alpha, int(lab.max()) + 1)
        alpha = 0.0  # folded into the weights
    plan: dict[str, Any] = {"cluster_weights": weights, "alpha": alpha,
                            "schedule_tokens": None}
    if num_tokens is None:
        plan.update(num_samples=num_samples, stop=num_samples)
        return plan
    options = {**options, "alpha": alpha, "cluster_weights": weights}
    for share in ("rank", "world_size", "consumed_samples"):
        options.pop(share, None)
    t, n, held = budget_length(labels, doc_tokens, int(num_tokens), **options)
    plan.update(num_samples=t, stop=n, schedule_tokens=held)
    return plan
