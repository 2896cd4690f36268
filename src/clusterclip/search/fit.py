"""``clusterclip search fit``: the predictor fitted on a swarm that the user's trainer ran.

Reads the swarm layout (:mod:`~clusterclip.search.swarm`: a ratios and a metrics
table joined on the run id), fits the search's own predictor
(:class:`~clusterclip.search.predictor.Predictor`, on the features of
:meth:`~clusterclip.search.space.SearchSpace.features`) to the objective (one
metric column or the mean of several; ``maximize`` for accuracies) and writes
into one folder, atomically: ``fit.json`` (the runs used and skipped, the
objective, the leave-one-out rank correlation, the predictor), and on request
``predictions.csv`` (a table of candidates ranked), ``proposals.csv`` (the next
round, from the search's own proposal code :func:`clusterclip.search.core.propose`)
and ``mixture.json`` (the run with the best predicted objective).

Without a work directory the columns are whatever the user mixed (RegMix's 17 Pile
domains); with one they are its clusters or super-clusters
(:func:`clusterclip.stages.search.workdir_space`), and ``mixture.json`` is the
per-cluster mixture that ``sample --mixture`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.search.core import Proxy, propose
from clusterclip.search.predictor import MIN_FIT, Predictor, loo_rank_correlation
from clusterclip.search.space import (
    DEFAULT_CLIP,
    DEFAULT_TIMING,
    Candidate,
    SearchSpace,
    normalise,
)
from clusterclip.search.swarm import (
    Ratios,
    check_same_columns,
    ratios_rows,
    read_objective,
    read_ratios,
    run_id,
    write_csv,
)

FIT_FORMAT = 1
#: Proposals drawn per proposal asked for (duplicates and repeats are dropped after).
OVERDRAW = 4


@dataclass(frozen=True)
class FitRequest:
    """What ``clusterclip search fit`` was asked (see its ``--help``)."""

    ratios: str
    metrics: str
    objective: tuple[str, ...]
    out: str
    maximize: bool = False
    workdir: str | None = None
    predict: str | None = None
    propose: int = 0
    choose: bool = False
    seed: int = 0
    num_tokens: int | None = None
    num_samples: int | None = None


@dataclass
class Swarm:
    """The runs with their objective: ``ratios`` (every row of the ratios table), ``rows``
    (the indices used), ``y`` (their objective as given) and the counts left out."""

    ratios: Ratios
    rows: list[int]
    y: np.ndarray
    without_objective: int
    metrics_only: int
    layout: str


def load_swarm(req: FitRequest) -> Swarm:
    """The joined tables; InputError when an objective column is missing, no run id is in
    both tables, a weight is negative or not finite, or fewer than the predictor's
    minimum of runs have the objective."""
    ratios = read_ratios(req.ratios, "--ratios")
    table, objective = read_objective(req.metrics, list(req.objective), "--metrics")
    common = set(ratios.ids) & set(table.ids)
    if not common:
        raise InputError(f"--metrics {req.metrics}: no run id of it is in --ratios "
                         f"{req.ratios} (their first columns, {table.id_column!r} and "
                         f"{ratios.table.id_column!r}, join the two tables)")
    rows = [i for i, rid in enumerate(ratios.ids) if rid in objective]
    if len(rows) < MIN_FIT:
        raise InputError(f"--metrics {req.metrics}: only {len(rows)} runs have "
                         f"{', '.join(req.objective)}; the predictor needs at least {MIN_FIT}")
    y = np.array([objective[ratios.ids[i]] for i in rows])
    return Swarm(ratios, rows, y, len(ratios.ids) - len(rows),
                 len(set(table.ids) - set(ratios.ids)), ratios.table.layout)


def plain_space(k: int) -> SearchSpace:
    """The search space of a swarm without a work directory: ``k`` columns, each its own
    group, no capacity to respect."""
    return SearchSpace(natural=np.full(k, 1.0 / k), prior=None, groups=np.arange(k),
                       train_tokens=np.zeros(k, dtype=np.int64), needed=0)


def candidates(space: SearchSpace, r: Ratios, rows: list[int] | None = None
               ) -> list[Candidate]:
    """The mixtures of ratios rows (all of them by default) as the search's candidates:
    each row's group weights split among the groups' clusters; the default clip and timing
    where the table has none."""
    out = []
    for i in range(len(r.ids)) if rows is None else rows:
        w = space.expand(r.weights[i]) if space.num_groups < space.num_clusters else r.weights[i]
        out.append(Candidate(normalise(np.asarray(w), space.support),
                             r.clip[i] if r.clip else DEFAULT_CLIP,
                             r.timing[i] if r.timing else DEFAULT_TIMING, r.ids[i]))
    return out


def _features(space: SearchSpace, cands: list[Candidate]) -> np.ndarray:
    return np.stack([space.features(c) for c in cands])


def row_id(space: SearchSpace, c: Candidate, settings: bool) -> str:
    """The run id of ``c`` as a row of a ratios table (its group weights, and its clip and
    timing where the table has them): equal ids, equal rows."""
    return run_id(space.group_sums(c.weights), c.clip if settings else None,
                  c.timing if settings else None)


def next_round(space: SearchSpace, proxies: list[Proxy], n: int, seed: int,
               settings: bool, model: Predictor | None = None,
               ids: tuple[str, ...] = ()) -> list[Candidate]:
    """``n`` new mixtures from the search's proposal code, none a repeat (as a row of the
    table) of a run, of a run id in ``ids`` or of another proposal; without ``settings``
    (the table has no clip and timing) every proposal keeps the default clip and timing."""
    pool = propose(space, proxies, n * OVERDRAW, 1, seed, model=model)
    out: list[Candidate] = []
    taken = set(ids) | {row_id(space, p.candidate, settings) for p in proxies}
    for c in pool:
        if not settings:
            c = replace(c, clip=DEFAULT_CLIP, timing=DEFAULT_TIMING)
        key = row_id(space, c, settings)
        if key not in taken:
            taken.add(key)
            out.append(c)
        if len(out) == n:
            break
    return out


def _group_rows(space: SearchSpace, cands: list[Candidate]) -> np.ndarray:
    return np.stack([space.group_sums(c.weights) for c in cands])


def fit_swarm(req: FitRequest, workdir_space: Callable[..., Any] | None = None
              ) -> dict[str, Any]:
    """Run ``search fit`` (see the module); returns what fit.json holds.
    ``workdir_space``: the space of ``req.workdir`` when given
    (:func:`clusterclip.stages.search.workdir_space`)."""
    from clusterclip.io import atomic_output_dir, check_output_dir

    check_request(req)
    check_output_dir(req.out, "search fit")
    swarm = load_swarm(req)
    space, swarm.ratios, cluster_names = _space(req, swarm.ratios, workdir_space)
    columns = list(swarm.ratios.columns)
    predict = read_ratios(req.predict, "--predict") if req.predict else None
    if predict is not None:
        predict = check_same_columns(swarm.ratios, predict, "--predict")
    sign = -1.0 if req.maximize else 1.0
    cands = candidates(space, swarm.ratios, swarm.rows)
    X = _features(space, cands)
    y = sign * swarm.y
    model = Predictor().fit(X, y)
    rho, _ = loo_rank_correlation(X, y, model)
    fitted = sign * model.predict(X)[0]
    report = _report(req, swarm, columns, model, rho)
    with atomic_output_dir(req.out, "search fit") as tmp:
        if predict is not None:
            _write_predictions(tmp, space, predict, model, sign)
        if req.propose:
            proxies = [Proxy(i, 0, c, {"objective": float(v)})
                       for i, (c, v) in enumerate(zip(cands, y, strict=True))]
            new = next_round(space, proxies, req.propose, req.seed,
                             swarm.ratios.clip is not None and swarm.ratios.timing is not None,
                             model, swarm.ratios.ids)
            report["proposals"] = len(new)
            _write_proposals(tmp, swarm.ratios, space, new)
        if req.choose:
            report["chosen"] = _write_choice(tmp, req, swarm, cands, fitted, cluster_names)
        from clusterclip.io import write_json

        write_json(tmp / "fit.json", report)
    return report


def _space(req: FitRequest, r: Ratios, workdir_space: Callable[..., Any] | None
           ) -> tuple[SearchSpace, Ratios, list[str] | None]:
    """The search space, the ratios (with a work directory: their columns in its order),
    and (with a work directory) each weight's cluster name."""
    if req.workdir is None:
        if req.num_tokens is not None or req.num_samples is not None:
            raise InputError("--num-tokens / --num-samples need --workdir (the clip's "
                             "capacity is that of its clusters)")
        return plain_space(len(r.columns)), r, None
    if workdir_space is None:
        raise ValueError("a work directory's space needs workdir_space")
    ws = workdir_space(req.workdir, num_tokens=req.num_tokens, num_samples=req.num_samples)
    if set(r.columns) != set(ws.names):
        extra = sorted(set(r.columns) - set(ws.names))
        what = (f"column {extra[0]!r} is not one of them" if extra else
                f"{sorted(set(ws.names) - set(r.columns))[0]!r} is missing")
        raise InputError(f"--ratios {req.ratios}: its weight columns do not match --workdir "
                         f"{req.workdir}'s {len(ws.names)} {ws.kind}s ({ws.names[0]} .. "
                         f"{ws.names[-1]}): {what}")
    order = [r.columns.index(n) for n in ws.names]
    r = Ratios(r.table, tuple(ws.names), r.weights[:, order], r.clip, r.timing)
    return ws.space, r, [f"cluster_{k}" for k in range(ws.space.num_clusters)]


def _report(req: FitRequest, swarm: Swarm, columns: list[str], model: Predictor,
            rho: float | None) -> dict[str, Any]:
    return {
        "format_version": FIT_FORMAT,
        "ratios": str(Path(req.ratios).resolve()), "metrics": str(Path(req.metrics).resolve()),
        "layout": swarm.layout, "id_column": swarm.ratios.table.id_column,
        "columns": columns,
        "workdir": None if req.workdir is None else str(Path(req.workdir).resolve()),
        "objective": {"columns": list(req.objective),
                      "value": "the column" if len(req.objective) == 1 else
                      "the mean of the columns",
                      "direction": "maximize" if req.maximize else "minimize"},
        "runs": len(swarm.rows),
        "skipped": {"without_objective": swarm.without_objective,
                    "metrics_rows_without_ratios": swarm.metrics_only},
        "loo_spearman": rho,
        "predictor": {**model.describe(),
                      "features": "sqrt of each column's weight, log2(clip) / 3, timing "
                                  "(0 paced, 1 greedy)",
                      "target": "the objective" + (", negated" if req.maximize else "")},
    }


def _write_predictions(tmp: Path, space: SearchSpace, c: Ratios, model: Predictor,
                       sign: float) -> None:
    mean, std = model.predict(_features(space, candidates(space, c)))
    rows: list[list[Any]] = [[c.table.id_column, "predicted", "predicted_std"]]
    rows += [[rid, repr(float(sign * m)), repr(float(s))]
             for rid, m, s in zip(c.ids, mean, std, strict=True)]
    write_csv(tmp / "predictions.csv", rows)


def _write_proposals(tmp: Path, r: Ratios, space: SearchSpace, new: list[Candidate]) -> None:
    g = _group_rows(space, new) if new else np.zeros((0, len(r.columns)))
    settings = r.clip is not None and r.timing is not None
    ids = [row_id(space, c, settings) for c in new]
    write_csv(tmp / "proposals.csv", ratios_rows(
        r.table.id_column, ids, list(r.columns), g,
        [c.clip for c in new] if r.clip is not None else None,
        [c.timing for c in new] if r.timing is not None else None, meta=bool(r.table.meta)))


def _write_choice(tmp: Path, req: FitRequest, swarm: Swarm, cands: list[Candidate],
                  fitted: np.ndarray, cluster_names: list[str] | None) -> dict[str, Any]:
    """The run with the best predicted objective (ties: the best observed, then the first
    row) as ``mixture.json``."""
    from clusterclip.sampling.mixture import Mixture, write_mixture

    sign = -1.0 if req.maximize else 1.0
    order = np.lexsort((np.arange(len(cands)), sign * swarm.y, sign * fitted))
    best = int(order[0])
    c = cands[best]
    label = " + ".join(req.objective) if len(req.objective) > 1 else req.objective[0]
    chosen = {"run": c.origin, "observed": float(swarm.y[best]),
              "predicted": float(fitted[best]), "clip": c.clip, "timing": c.timing}
    extra: dict[str, Any] = {"source": "clusterclip search fit",
                             **{k: v for k, v in chosen.items() if k not in ("clip", "timing")}}
    if cluster_names is None:
        extra["columns"] = list(swarm.ratios.columns)
    write_mixture(tmp / "mixture.json", Mixture(c.weights, c.clip, c.timing, label), **extra)
    return chosen


def check_request(req: FitRequest) -> None:
    """The options alone, before any file is read."""
    if not req.objective:
        raise InputError("--objective: give at least one metric column")
    if req.propose < 0:
        raise InputError(f"--propose: must be >= 0, got {req.propose}")
    for name, v in (("--num-tokens", req.num_tokens), ("--num-samples", req.num_samples)):
        if v is not None and v < 1:
            raise InputError(f"{name}: must be >= 1, got {v}")
    if req.seed < 0:
        raise InputError(f"--seed: must be >= 0, got {req.seed}")
