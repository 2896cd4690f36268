"""The search loop, at the level of pure functions: candidates in, objectives out.

CLIMB-style rounds: round 1 trains the fixed candidates (natural, uniform,
prior, interpolations) and wide Dirichlet samples around them; every later
round fits the predictor on all finished proxies, samples a pool of Dirichlet
candidates around the predicted best ones (narrower each round) and trains
the pool's predicted best. The chosen mixture is the finished proxy with the
lowest *predicted* objective (the regression pools many noisy proxies; one
proxy's own value carries its seed's luck). ``evaluate`` is injected: real
training (:mod:`clusterclip.search.proxies`) or, in tests, a known function.

Every round after the first is :func:`next_round`, the one proposal step of both loops:
the offline search calls it on its proxies, ``search fit --propose`` on the user's
runs (:mod:`clusterclip.search.fit`), so for the same runs, objectives and seed both
propose the same mixtures; both fit and choose with :func:`fit_runs` and :func:`choose`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from clusterclip.search.predictor import MIN_FIT, Predictor, loo_rank_correlation
from clusterclip.search.space import (
    CLIPS,
    TIMINGS,
    Candidate,
    SearchSpace,
    dirichlet_around,
    fixed_candidates,
)

T = TypeVar("T")
#: ``evaluate(candidates, round) -> [{"objective": float, ...metrics}]``, one per candidate.
Evaluate = Callable[[list[Candidate], int], list[dict[str, float]]]
#: Candidates sampled per proposal round, and the predicted-best proxies they surround.
POOL = 2000
CENTERS = 3
#: Dirichlet concentration per group in round r (0-based): GROUP_CONCENTRATION * 4 ** r.
GROUP_CONCENTRATION = 1.0
#: Proposals drawn per proposal asked for (repeats of a run are dropped after).
OVERDRAW = 4


@dataclass(frozen=True)
class SearchOptions:
    """``runs`` proxies in all over ``rounds`` rounds; ``seed`` fixes every draw."""

    runs: int
    rounds: int
    seed: int = 0
    pool: int = POOL


@dataclass
class Proxy:
    """One finished proxy run: its round (0-based), mixture and val metrics."""

    index: int
    round: int
    candidate: Candidate
    metrics: dict[str, float]

    @property
    def objective(self) -> float:
        return float(self.metrics["objective"])


@dataclass
class SearchResult:
    proxies: list[Proxy]
    chosen: int                     # index of the chosen proxy
    predicted: list[float | None]   # the final predictor's value at each proxy
    loo: list[float | None]         # each proxy's leave-one-out prediction
    spearman: float | None          # rank correlation of loo with the observed objective
    predictor: dict[str, Any] | None
    rounds: list[dict[str, Any]] = field(default_factory=list)


def round_sizes(runs: int, rounds: int) -> list[int]:
    """Proxies per round, halving as CLIMB's 64 -> 32 -> 16 (at least one each)."""
    if runs < 1 or rounds < 1:
        raise ValueError("runs and rounds must be >= 1")
    rounds = min(rounds, runs)
    raw = np.array([2.0 ** (rounds - 1 - r) for r in range(rounds)])
    sizes = np.maximum(1, np.floor(raw * runs / raw.sum())).astype(int)
    sizes[0] += runs - int(sizes.sum())
    return sizes.tolist()


def _fit(space: SearchSpace, proxies: list[Proxy]) -> Predictor | None:
    if len(proxies) < MIN_FIT:
        return None
    X = np.stack([space.features(p.candidate) for p in proxies])
    return Predictor().fit(X, np.array([p.objective for p in proxies]))


def _scores(space: SearchSpace, proxies: list[Proxy], model: Predictor | None) -> np.ndarray:
    """The final predictor's value at each proxy (the observed value without one)."""
    if model is None:
        return np.array([p.objective for p in proxies])
    return model.predict(np.stack([space.features(p.candidate) for p in proxies]))[0]


def _distinct(cands: list[Candidate], taken: list[Candidate], n: int) -> list[Candidate]:
    out: list[Candidate] = []
    for c in cands:
        if len(out) == n:
            break
        if not any(c.same_as(t) for t in taken + out):
            out.append(c)
    return out


def first_round(space: SearchSpace, n: int, seed: int) -> list[Candidate]:
    """The fixed candidates, then wide Dirichlet samples around each in turn, their clip
    and timing from a design that visits every clip and both timings evenly (so the
    predictor sees them all from the start)."""
    fixed = fixed_candidates(space)
    rng = np.random.default_rng([seed, 1000])
    extra: list[Candidate] = []
    for i in range(max(0, n - len(fixed)) * 2):  # feasibility drops a few
        center = fixed[i % len(fixed)]
        design = {"clip": CLIPS[i % len(CLIPS)], "timing": TIMINGS[(i // len(CLIPS)) % 2]}
        extra += [c for c in (replace(d, **design) for d in dirichlet_around(
            space, center, 1, GROUP_CONCENTRATION * space.num_groups, rng,
            f"round 1 around {center.origin}")) if space.feasible(c)]
    return _distinct(fixed + extra, [], n)


def _variants(space: SearchSpace, proxy: Proxy, origin: str) -> list[Candidate]:
    """The proxy's weights with every other clip and timing."""
    c = proxy.candidate
    out = [replace(c, clip=r, timing=t, origin=origin) for r in CLIPS for t in TIMINGS
           if (r, t) != (c.clip, c.timing)]
    return [v for v in out if space.feasible(v)]


def propose(space: SearchSpace, done: list[Proxy], n: int, round_index: int, seed: int,
            pool: int = POOL, model: Predictor | None = None) -> list[Candidate]:
    """``n`` new candidates: the pool's predicted best around the predicted-best proxies
    (the observed best while fewer than the predictor's minimum are done)."""
    model = _fit(space, done) if model is None else model  # ``model``: fitted on ``done``
    order = np.lexsort((np.arange(len(done)), _scores(space, done, model)))
    centers = [done[i] for i in order[:CENTERS]]
    rng = np.random.default_rng([seed, 1000 + round_index])
    conc = GROUP_CONCENTRATION * space.num_groups * 4.0 ** round_index
    cands: list[Candidate] = []
    for c in centers:
        cands += _variants(space, c, f"round {round_index + 1}: #{c.index}, other clip/timing")
        cands += dirichlet_around(space, c.candidate, pool // len(centers), conc, rng,
                                  f"round {round_index + 1} near #{c.index}")
    if model is not None and cands:
        mean = model.predict(np.stack([space.features(c) for c in cands]))[0]
        cands = [cands[i] for i in np.lexsort((np.arange(len(cands)), mean))]
    return _distinct(cands, [p.candidate for p in done], n)


def row_id(space: SearchSpace, c: Candidate, settings: bool = True) -> str:
    """The run id of ``c`` as a row of a ratios table (its group weights, and its clip and
    timing where the table has them, ``settings``): equal ids, equal rows."""
    from clusterclip.search.swarm import run_id

    return run_id(space.group_sums(c.weights), c.clip if settings else None,
                  c.timing if settings else None)


def next_round(space: SearchSpace, done: list[Proxy], n: int, round_index: int, seed: int,
               *, settings: bool = True, model: Predictor | None = None,
               ids: tuple[str, ...] = (), pool: int = POOL) -> list[Candidate]:
    """Round ``round_index`` (0-based, >= 1): ``n`` new mixtures from :func:`propose` on the
    runs ``done``, none a repeat (as a row of a ratios table, :func:`row_id`) of a run, of
    a run id in ``ids`` or of another proposal. ``model``: the predictor fitted on
    ``done`` (default: fitted here, on ``done`` in the order of their row ids, so the
    proposals do not depend on the runs' order); without ``settings`` (a table with no
    clip and timing) every proposal keeps the default clip and timing."""
    from clusterclip.search.space import DEFAULT_CLIP, DEFAULT_TIMING

    if model is None:
        model = _fit(space, sorted(done, key=lambda p: row_id(space, p.candidate, settings)))
    cands = propose(space, done, n * OVERDRAW, round_index, seed, pool, model=model)
    out: list[Candidate] = []
    taken = set(ids) | {row_id(space, p.candidate, settings) for p in done}
    for c in cands:
        if not settings:
            c = replace(c, clip=DEFAULT_CLIP, timing=DEFAULT_TIMING)
        key = row_id(space, c, settings)
        if key not in taken:
            taken.add(key)
            out.append(c)
        if len(out) == n:
            break
    return out


def run_search(space: SearchSpace, evaluate: Evaluate, options: SearchOptions, *,
               on_main: Callable[[Callable[[], T]], T] = lambda f: f(),
               log: Callable[[str], None] = lambda msg: None) -> SearchResult:
    """The rounds, then the choice. ``on_main`` runs each proposal where it is decided
    (rank 0 under torchrun: :func:`clusterclip.distributed.on_main`) and hands it to all."""
    proxies: list[Proxy] = []
    summary = []
    for r, n in enumerate(round_sizes(options.runs, options.rounds)):
        if r == 0:
            cands = on_main(lambda n=n: first_round(space, n, options.seed))
        else:
            cands = on_main(lambda n=n, r=r: next_round(space, proxies, n, r, options.seed,
                                                        pool=options.pool))
        if not cands:
            log(f"search: round {r + 1}: no new candidate left to try")
            break
        for c, m in zip(cands, evaluate(cands, r), strict=True):
            proxies.append(Proxy(len(proxies), r, c, dict(m)))
        best = min(proxies, key=lambda p: (p.objective, p.index))
        summary.append({"round": r + 1, "proxies": len(cands), "best_observed": best.objective,
                        "best_index": best.index,
                        "round_best": min(p.objective for p in proxies if p.round == r)})
        log(f"search: round {r + 1}: {len(cands)} proxies, best val objective so far "
            f"{best.objective:.4f} ({best.candidate.origin})")
    return on_main(lambda: _choose(space, proxies, summary))


def fit_runs(space: SearchSpace, cands: list[Candidate], y: np.ndarray
             ) -> tuple[Predictor | None, np.ndarray, float | None, np.ndarray]:
    """The fit of both loops on finished runs (``cands``, their objective ``y``, lower is
    better): ``(predictor, scores, spearman, loo)``: the predictor (None below its
    minimum of runs), its value at each run (the observed one without a predictor), the
    leave-one-out rank correlation and predictions
    (:func:`~clusterclip.search.predictor.loo_rank_correlation`)."""
    X = np.stack([space.features(c) for c in cands])
    y = np.asarray(y, dtype=np.float64)
    model = Predictor().fit(X, y) if len(cands) >= MIN_FIT else None
    scores = y.copy() if model is None else model.predict(X)[0]
    spearman, loo = loo_rank_correlation(X, y, model)
    return model, scores, spearman, loo


def choose(scores: np.ndarray, y: np.ndarray) -> int:
    """The choice of both loops: the run with the best (lowest) predicted ``scores``, ties
    broken by the observed ``y``, then by position."""
    return int(np.lexsort((np.arange(len(y)), y, scores))[0])


def _choose(space: SearchSpace, proxies: list[Proxy], summary: list[dict[str, Any]]
            ) -> SearchResult:
    y = np.array([p.objective for p in proxies])
    model, scores, spearman, loo = fit_runs(space, [p.candidate for p in proxies], y)
    chosen = choose(scores, y)
    return SearchResult(
        proxies=proxies, chosen=chosen,
        predicted=[None if model is None else float(v) for v in scores],
        loo=[None if np.isnan(v) else float(v) for v in loo], spearman=spearman,
        predictor=None if model is None else model.describe(), rounds=summary)
