"""``clusterclip search fit``: the predictor fitted on a swarm that the user's trainer ran.

Reads the swarm layout (:mod:`~clusterclip.search.swarm`: ratios and metrics tables,
one pair per round, joined on the run id; the rows taken in the order of their ids, so
the output does not depend on the rows' order), fits the search's own predictor
(:class:`~clusterclip.search.predictor.Predictor`, on the features of
:meth:`~clusterclip.search.space.SearchSpace.features`) to the objective (one
metric column or the mean of several; ``maximize`` for accuracies) and writes
into one folder, atomically: ``fit.json`` (the runs used and skipped, the
objective, the leave-one-out rank correlation, the predictor), and on request
``predictions.csv`` (a table of candidates ranked), ``proposals.csv`` (the next
round: the offline search's own :func:`clusterclip.search.core.next_round`) and
``mixture.json`` (the run with the best predicted objective).

Without a work directory the columns are whatever the user mixed (RegMix's 17 Pile
domains); with one they are its clusters or super-clusters
(:func:`clusterclip.stages.search.workdir_space`), every row is its own mixture file
beside its table, the proposals are written as a trainable round and ``mixture.json`` is
the chosen run's own file (:mod:`clusterclip.search.rounds`). ``fit.json``'s
``bearing`` says what the fit can bear (:func:`bearing`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.limits import check_ranges, ranged
from clusterclip.search.core import Proxy, choose, fit_runs, next_round, row_id
from clusterclip.search.predictor import (
    LENGTH_SCALE_BOUNDS,
    MIN_FIT,
    Predictor,
)
from clusterclip.search.propose import MAX_RUNS, Draw
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
    write_csv,
)

FIT_FORMAT = 2
#: Runs the docs recommend for round 1 (docs/search-own-trainer.md: 48 proxies ranked
#: unseen mixtures at Spearman 0.97); fewer: fit.json and the printout say so.
RECOMMENDED_RUNS = 48
#: Below this leave-one-out rank correlation the fit ranks unseen runs weakly, so its
#: choice is uncertain.
WEAK_RHO = 0.5


@dataclass(frozen=True, kw_only=True)
class FitRequest:
    """What ``clusterclip search fit`` was asked (see its ``--help``): ``ratios`` and
    ``metrics``, one table each per round, in order (with ``verdict``: the one table each
    of a verification round). Checked when made, before any file
    is read (InputError naming the parameter)."""

    ratios: tuple[str, ...]
    metrics: tuple[str, ...]
    objective: tuple[str, ...]
    out: str
    maximize: bool = False
    workdir: str | None = None
    predict: str | None = None
    propose: int = ranged(0, MAX_RUNS, default=0)
    choose: bool = False
    seed: int = 0
    num_tokens: int | None = None
    num_samples: int | None = None
    fmt: str | None = None
    tokenizer: str | None = None
    verdict: bool = False  # the verdict of a verification round instead of a fit

    def __post_init__(self) -> None:
        for name in ("ratios", "metrics"):
            v = getattr(self, name)
            object.__setattr__(self, name, (str(v),) if isinstance(v, (str, Path))
                               else tuple(map(str, v)))
        if self.verdict:
            self._check_verdict()
        if not self.objective:
            raise InputError("objective: give at least one metric column",
                             params=("objective",))
        check_ranges(self)
        Draw(num_tokens=self.num_tokens, num_samples=self.num_samples, seed=self.seed)
        if self.fmt is not None and not self.propose:
            raise InputError(f"fmt {self.fmt}: exports the proposals; give propose N",
                             params=("fmt", "propose"))

    def _check_verdict(self) -> None:
        if len(self.ratios) != 1 or len(self.metrics) != 1:
            raise InputError("verdict: give one ratios (the verification round's ratios.csv) "
                             "and one metrics table", params=("verdict", "ratios", "metrics"))
        other = [name for name, v in (("workdir", self.workdir), ("predict", self.predict),
                                      ("propose", self.propose), ("choose", self.choose),
                                      ("fmt", self.fmt)) if v]
        if other:
            raise InputError(f"{other[0]} does not apply with verdict",
                             params=(other[0], "verdict"))


@dataclass
class Swarm:
    """The runs with their objective: ``ratios`` (every row of the ratios tables, sorted by
    run id), ``rows`` (the indices used), ``y`` (their objective as given), the counts left
    out, and each row's folder (where its ``mixtures/<run>.json`` is)."""

    ratios: Ratios
    rows: list[int]
    y: np.ndarray
    without_objective: int
    metrics_only: int
    layout: str
    folders: list[Path]


def _merge(tables: list[Ratios]) -> tuple[Ratios, list[int]]:
    """The rows of ``tables`` (same columns, in the first's order) as one, sorted by run
    id (so the fit does not depend on the rows' order), and each row's table."""
    from clusterclip.search.swarm import Table

    first = tables[0]
    rows = sorted((rid, t, i) for t, r in enumerate(tables) for i, rid in enumerate(r.ids))
    meta = {k: tuple(tables[t].table.meta[k][i] for _, t, i in rows)
            for k in first.table.meta if all(k in r.table.meta for r in tables)}
    table = Table(" ".join(r.table.path for r in tables), first.table.id_column,
                  tuple(rid for rid, _, _ in rows), meta, first.table.columns, (),
                  tuple(tables[t].table.lines[i] for _, t, i in rows))
    w = np.stack([tables[t].weights[i] for _, t, i in rows])
    clip = tuple(tables[t].clip[i] for _, t, i in rows) \
        if all(r.clip is not None for r in tables) else None
    timing = tuple(tables[t].timing[i] for _, t, i in rows) \
        if all(r.timing is not None for r in tables) else None
    return Ratios(table, first.columns, w, clip, timing), [t for _, t, _ in rows]


def _read_tables(req: FitRequest) -> tuple[Ratios, list[Path], Any, dict[str, float]]:
    """The ratios tables as one (:func:`_merge`), each row's folder, and the metrics: a
    table per round, refused when the counts differ, the columns do or a run id is in two
    tables."""
    if len(req.ratios) != len(req.metrics):
        raise InputError(f"ratios gives {len(req.ratios)} tables and metrics "
                         f"{len(req.metrics)}: one table of each per round, rounds in the "
                         "same order", params=("ratios", "metrics"))
    tables, objective, metric_ids, seen = [], {}, set(), {}
    for r_path, m_path in zip(req.ratios, req.metrics, strict=True):
        r = read_ratios(r_path, "ratios")
        if tables:
            r = check_same_columns(tables[0], r, "ratios")
        for rid in r.ids:
            if rid in seen:
                raise InputError(f"ratios {r_path}: run id {rid!r} is also in {seen[rid]} "
                                 "(give each run once)", params=("ratios",))
            seen[rid] = r_path
        tables.append(r)
        table, obj = read_objective(m_path, list(req.objective), "metrics")
        metric_ids |= set(table.ids)
        ids = set(r.ids)
        objective.update({k: v for k, v in obj.items() if k in ids})
    ratios, which = _merge(tables)
    folders = [Path(req.ratios[t]).resolve().parent for t in which]
    return ratios, folders, metric_ids, objective


def load_swarm(req: FitRequest) -> Swarm:
    """The joined tables; InputError when an objective column is missing, no run id is in
    both tables, a weight is negative or not finite, or fewer than the predictor's
    minimum of runs have the objective."""
    ratios, folders, metric_ids, objective = _read_tables(req)
    if not set(ratios.ids) & metric_ids:
        raise InputError(f"metrics {' '.join(req.metrics)}: no run id of it is in ratios "
                         f"{' '.join(req.ratios)} (their first columns join the tables)",
                         params=("metrics", "ratios"))
    rows = [i for i, rid in enumerate(ratios.ids) if rid in objective]
    if len(rows) < MIN_FIT:
        raise InputError(f"metrics {' '.join(req.metrics)}: only {len(rows)} runs have "
                         f"{', '.join(req.objective)}; the predictor needs at least {MIN_FIT}",
                         params=("metrics",))
    y = np.array([objective[ratios.ids[i]] for i in rows])
    return Swarm(ratios, rows, y, len(ratios.ids) - len(rows),
                 len(metric_ids - set(ratios.ids)), ratios.table.layout, folders)


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


def _group_rows(space: SearchSpace, cands: list[Candidate]) -> np.ndarray:
    return np.stack([space.group_sums(c.weights) for c in cands])


def fit_swarm(req: FitRequest, workdir_space: Callable[..., Any] | None = None,
              load_corpus: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Run ``search fit`` (see the module); returns what fit.json holds.
    ``workdir_space``: the space of ``req.workdir`` when given
    (:func:`clusterclip.stages.search.workdir_space`); ``load_corpus(workdir)``: its
    corpus, for ``--format``."""
    from clusterclip.search.rounds import round_record
    from clusterclip.storage.atomic import write_json
    from clusterclip.storage.outputs import atomic_output_dir, check_output_dir

    tokenizer = _tokenizer(req)
    check_output_dir(req.out, "search fit")
    swarm = load_swarm(req)
    record = round_record(req.ratios) if req.workdir is not None else None
    ws, space, swarm.ratios = _space(req, swarm.ratios, workdir_space, record)
    columns = list(swarm.ratios.columns)
    predict = read_ratios(req.predict, "predict") if req.predict else None
    if predict is not None:
        predict = check_same_columns(swarm.ratios, predict, "predict")
    sign = -1.0 if req.maximize else 1.0
    cands = _row_candidates(space, swarm, ws is not None)
    y = sign * swarm.y
    model, scores, rho, _ = fit_runs(space, cands, y)  # the offline search's fit
    assert model is not None  # load_swarm: at least the predictor's minimum of runs
    fitted = sign * scores
    report = _report(req, swarm, columns, model, rho)
    if ws is not None and ws.overlap is not None:
        report["target_overlap"] = ws.overlap  # the rounds' guard, kept for the next
    with atomic_output_dir(req.out, "search fit") as tmp:
        if predict is not None:
            _write_predictions(tmp, space, predict, model, sign)
        if req.propose:
            proxies = [Proxy(i, 0, c, {"objective": float(v)})
                       for i, (c, v) in enumerate(zip(cands, y, strict=True))]
            settings = swarm.ratios.clip is not None and swarm.ratios.timing is not None
            # the round after those given: the offline search's round len(req.ratios)
            new = next_round(space, proxies, req.propose, len(req.ratios), req.seed,
                             settings=settings, model=model, ids=swarm.ratios.ids)
            new = [replace(c, origin=f"round {len(req.ratios) + 1}") for c in new]
            report["proposals"] = len(new)
            if ws is None:
                _write_proposals(tmp, swarm.ratios, space, new)
            else:
                _write_round(tmp, req, ws, new, settings, tokenizer, load_corpus, record)
        if req.choose:
            report["chosen"] = _write_choice(tmp, req, swarm, cands, fitted, ws is not None)
        write_json(tmp / "fit.json", report)
    return report


def _tokenizer(req: FitRequest) -> Any:
    """The export's tokenizer (None without ``--format``), checked before any file is
    read."""
    if req.fmt is None:
        return None
    from clusterclip.export import megatron as _megatron
    from clusterclip.export import require

    require(req.fmt)
    # a tokenizer with another format counts the --num-tokens budget, nothing more
    return _megatron.check_tokenizer_option(req.fmt, req.tokenizer if req.fmt == "megatron"
                                            else None)


def _row_candidates(space: SearchSpace, swarm: Swarm, files: bool) -> list[Candidate]:
    """Each used row's mixture: with a work directory its own file where it has one
    (:func:`clusterclip.search.rounds.row_candidates`), else its group weights split by
    the rule (:func:`candidates`)."""
    if not files:
        return candidates(space, swarm.ratios, swarm.rows)
    from clusterclip.search.rounds import row_candidates

    return row_candidates(space, swarm.ratios, swarm.rows, swarm.folders,
                          lambda i: candidates(space, swarm.ratios, [i])[0])


def _write_round(tmp: Path, req: FitRequest, ws: Any, new: list[Candidate], settings: bool,
                 tokenizer: Any, load_corpus: Callable[[str], Any] | None,
                 record: dict[str, Any] | None) -> None:
    """The next round as ``search propose`` writes one: ``proposals.csv`` (with
    ``origin``), ``mixtures/<run>.json``, ``round.json``, and with a budget and a format
    ``schedules/<run>.npy`` and ``runs/<run>/``."""
    from clusterclip.search.propose import _stderr, export_all, write_candidates, write_round

    if not new:
        return
    draw = _draw(req, record)
    ids = [row_id(ws.space, c, settings) for c in new]
    label = " + ".join(req.objective)
    write_candidates(tmp, ws, new, label, draw, "clusterclip search fit", ids=ids,
                     name="proposals.csv")
    write_round(tmp, ws, draw, str(req.workdir), "clusterclip search fit",
                {"round": len(req.ratios) + 1, "runs": len(ids)})
    if draw.fmt is not None:
        if load_corpus is None:
            raise ValueError("fmt needs load_corpus")
        export_all(load_corpus(str(req.workdir)), tmp, ws, new, ids, draw, tokenizer,
                   _stderr, "search fit")


def _draw(req: FitRequest, record: dict[str, Any] | None) -> Any:
    """How the next round's schedules are drawn: the budget given, else the earlier
    rounds' (``round.json``); ``--seed``; ``--format``."""

    budget = {"num_tokens": req.num_tokens, "num_samples": req.num_samples}
    if req.num_tokens is None and req.num_samples is None and record is not None:
        budget.update(record.get("budget") or {})
    return Draw(budget["num_tokens"], budget["num_samples"], req.seed, req.fmt)


def _space(req: FitRequest, r: Ratios, workdir_space: Callable[..., Any] | None,
           record: dict[str, Any] | None) -> tuple[Any, SearchSpace, Ratios]:
    """``(the work directory's ClusterSpace or None, the search space, the ratios)``: with
    a work directory its clusters' space (the budget, the documents kept out and the prior
    of the rounds' ``round.json``), the ratios' columns in its order."""
    if req.workdir is None:
        if req.num_tokens is not None or req.num_samples is not None or req.fmt is not None:
            raise InputError("num_tokens / num_samples / fmt need workdir (the "
                             "clip's capacity is that of its clusters)",
                             params=("num_tokens", "num_samples", "fmt", "workdir"))
        return None, plain_space(len(r.columns)), r
    if workdir_space is None:
        raise ValueError("a work directory's space needs workdir_space")
    from clusterclip.search.rounds import check_record, with_prior

    draw = _draw(req, record)
    if draw.fmt is not None and not draw.budget():
        raise InputError(f"fmt {draw.fmt}: give the budget each proposal's schedule is "
                         "exported for (num_tokens or num_samples; the rounds' "
                         "round.json has none)", params=("fmt", "num_tokens", "num_samples"))
    ws = workdir_space(req.workdir, num_tokens=draw.num_tokens, num_samples=draw.num_samples,
                       tokenizer=req.tokenizer if draw.num_tokens else None,
                       exclude=None if record is None else np.asarray(record["exclude"],
                                                                      dtype=np.int64),
                       overlap=None if record is None else record.get("target_overlap"))
    if record is not None:
        check_record(record, ws.space.groups, req.workdir)
        ws = replace(ws, space=with_prior(ws.space, record))
    if set(r.columns) != set(ws.names):
        extra = sorted(set(r.columns) - set(ws.names))
        what = (f"column {extra[0]!r} is not one of them" if extra else
                f"{sorted(set(ws.names) - set(r.columns))[0]!r} is missing")
        raise InputError(f"ratios {r.table.path}: its weight columns do not match "
                         f"workdir {req.workdir}'s {len(ws.names)} {ws.kind}s "
                         f"({ws.names[0]} .. {ws.names[-1]}): {what}",
                         params=("ratios", "workdir"))
    order = [r.columns.index(n) for n in ws.names]
    r = Ratios(r.table, tuple(ws.names), r.weights[:, order], r.clip, r.timing)
    return ws, ws.space, r


def bearing(runs: int, rho: float | None, model: Predictor) -> dict[str, Any]:
    """What the fit can bear: the noise share, the length scales at a bound of the
    kernel's, and a caution when the runs are fewer than :data:`RECOMMENDED_RUNS` or the
    leave-one-out correlation is below :data:`WEAK_RHO` (None otherwise)."""
    d = model.describe()
    low, high = LENGTH_SCALE_BOUNDS
    ls = np.asarray(d["length_scales"], dtype=np.float64)
    at_bound = int(np.count_nonzero((ls <= low * 1.01) | (ls >= high / 1.01)))
    why = []
    if runs < RECOMMENDED_RUNS:
        why.append(f"{runs} runs, fewer than the {RECOMMENDED_RUNS} the docs recommend")
    if rho is None or rho < WEAK_RHO:
        why.append("leave-one-out rank correlation " + ("n/a" if rho is None else
                                                         f"{rho:.3f}") + f" < {WEAK_RHO}")
    caution = None if not why else (
        "; ".join(why) + f" (noise share {d['noise_share']:.2f}, {at_bound} of {ls.size} "
        "length scales at a bound): the fit is weak, so the chosen run is uncertain; train "
        "the next round")
    return {"noise_share": d["noise_share"], "length_scales_at_bound": at_bound,
            "length_scales": int(ls.size), "caution": caution}


def _report(req: FitRequest, swarm: Swarm, columns: list[str], model: Predictor,
            rho: float | None) -> dict[str, Any]:
    return {
        "format_version": FIT_FORMAT,
        "ratios": [str(Path(p).resolve()) for p in req.ratios],
        "metrics": [str(Path(p).resolve()) for p in req.metrics],
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
        "bearing": bearing(len(swarm.rows), rho, model),
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
        [c.timing for c in new] if r.timing is not None else None, meta=bool(r.table.meta),
        labels={"origin": [c.origin for c in new]}))


def _write_choice(tmp: Path, req: FitRequest, swarm: Swarm, cands: list[Candidate],
                  fitted: np.ndarray, files: bool) -> dict[str, Any]:
    """The run with the best predicted objective (ties: the best observed, then the first
    run id) as ``mixture.json``: with a work directory its own mixture file
    (:func:`clusterclip.search.rounds.chosen_mixture`)."""
    from clusterclip.sampling.mixture import Mixture, write_mixture
    from clusterclip.storage.atomic import write_json

    sign = -1.0 if req.maximize else 1.0
    best = choose(sign * fitted, sign * swarm.y)  # the offline search's choice
    c = cands[best]
    label = " + ".join(req.objective) if len(req.objective) > 1 else req.objective[0]
    chosen = {"run": c.origin, "observed": float(swarm.y[best]),
              "predicted": float(fitted[best]), "clip": c.clip, "timing": c.timing}
    extra: dict[str, Any] = {"chosen_by": "clusterclip search fit",
                             **{k: v for k, v in chosen.items() if k not in ("clip", "timing")}}
    if files:
        from clusterclip.search.rounds import chosen_mixture

        write_json(tmp / "mixture.json",
                   chosen_mixture(swarm.folders[swarm.rows[best]], c.origin, extra))
        return chosen
    extra["columns"] = list(swarm.ratios.columns)
    write_mixture(tmp / "mixture.json", Mixture(c.weights, c.clip, c.timing, label), **extra)
    return chosen

