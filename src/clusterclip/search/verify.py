"""The verification round of the own-trainer loop and its verdict.

``search propose --verify FIT_DIR --seeds S`` writes the final comparison as runs to
train (:func:`verify_candidates`): the chosen mixture (``FIT_DIR/mixture.json``), natural
and, with a target, the prior, each drawn with S fresh seeds; ``ratios.csv`` has ``arm``
and ``seed`` columns. ``search fit --verdict`` reads the runs' metrics back
(:func:`read_arms`) and compares each arm with natural seed by seed
(:func:`verdict_of`): the paired differences, their mean and paired-t 95% interval, the
p-value and the Holm-adjusted p-value over the arms; an arm is *measurably* better or
worse only when its Holm-adjusted p is below 0.05. The primary comparison is the
chosen mixture against natural; ``verdict.md``'s first line is the decision and its
price (the other metric columns of the chosen arm against natural).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

#: The arm every other is compared with, and the primary arm.
BASE = "natural"
PRIMARY = "chosen"
#: Family-wise error rate of the Holm correction over the arms.
ALPHA = 0.05
VERDICT_FORMAT = 1


def holm(pvalues: list[float]) -> list[float]:
    """The Holm-adjusted p-values (step-down, monotone, at most 1), in the given order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (pvalues[i], i))
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def _p_value(d: np.ndarray) -> float:
    """Two-sided paired-t p-value of the differences ``d`` (n >= 2)."""
    from scipy import stats

    sd = float(d.std(ddof=1))
    if sd == 0:
        return 1.0 if float(d.mean()) == 0 else 0.0
    t = float(d.mean()) / (sd / math.sqrt(d.size))
    return float(2 * stats.t.sf(abs(t), d.size - 1))


def verdict_of(values: dict[str, dict[int, float]], maximize: bool = False,
               base_arm: str = BASE) -> dict[str, dict[str, Any]]:
    """Each arm of ``values`` (``{arm: {seed: objective}}``) against ``base_arm`` (natural;
    the offline search's random sampling), paired by seed: ``{arm: {seeds, differences,
    mean, n, std, low, high, p, p_holm, measurable, better}}`` (differences arm minus the
    base; ``better``: lower, or higher with ``maximize``, and measurable). The statistics
    are :func:`clusterclip.experiment.verdict.paired_difference`'s; the Holm adjustment
    runs over all the arms compared."""
    from clusterclip.experiment.verdict import paired_difference

    base = values[base_arm]
    out: dict[str, dict[str, Any]] = {}
    for arm in sorted(a for a in values if a != base_arm):
        seeds = sorted(set(values[arm]) & set(base))
        d = np.array([values[arm][s] - base[s] for s in seeds], dtype=np.float64)
        pd = paired_difference(d)
        out[arm] = {"seeds": seeds, "differences": d.tolist(), **pd.to_dict(),
                    "p": _p_value(d) if d.size >= 2 else None}
    arms = [a for a in out if out[a]["p"] is not None]
    for a, p in zip(arms, holm([out[a]["p"] for a in arms]), strict=True):
        out[a]["p_holm"] = p
    for r in out.values():
        r.setdefault("p_holm", None)
        r["measurable"] = r["p_holm"] is not None and r["p_holm"] < ALPHA
        r["better"] = r["measurable"] and (r["mean"] > 0 if maximize else r["mean"] < 0)
    return out


def read_arms(ratios: str, metrics: str, columns: list[str]
              ) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """``({arm: {seed: mean of columns}}, {arm: origin})`` of a verification round: its
    ``ratios.csv`` (``arm`` and ``seed`` columns) joined with the metrics on the run id;
    InputError when the table has no arm or seed column, has no natural arm, or a run has
    no value."""
    from clusterclip.search.swarm import read_objective, read_table

    t = read_table(ratios, "--ratios")
    missing = [c for c in ("arm", "seed") if c not in t.columns]
    if missing:
        raise InputError(f"--ratios {ratios}: no {missing[0]!r} column: --verdict reads the "
                         "ratios.csv of `search propose --verify`")
    arms, seeds = t.column("arm"), t.column("seed")
    origin = dict(zip(arms, t.column("origin"), strict=True)) if "origin" in t.columns else {}
    _, obj = read_objective(metrics, columns, "--metrics")
    values: dict[str, dict[int, float]] = {}
    for i, rid in enumerate(t.ids):
        if rid not in obj:
            raise InputError(f"--metrics {metrics}: run {rid!r} (arm {arms[i]}, seed "
                             f"{seeds[i]}) has no {', '.join(columns)}; the verdict pairs "
                             "every arm's seeds")
        values.setdefault(arms[i], {})[int(seeds[i])] = obj[rid]
    if BASE not in values or len(values) < 2:
        raise InputError(f"--ratios {ratios}: the verdict compares arms with {BASE!r}; the "
                         f"table's arms are {', '.join(sorted(values))}")
    return values, origin


def _words(r: dict[str, Any], digits: int = 4) -> str:
    if r["low"] is None:
        return f"{r['mean']:+.{digits}f} (one seed)"
    return (f"{r['mean']:+.{digits}f} (95% CI {r['low']:+.{digits}f} to "
            f"{r['high']:+.{digits}f}, Holm-adjusted p {r['p_holm']:.3g}, {r['n']} seeds)")


def decision(result: dict[str, Any], objective: str, price: dict[str, dict[str, Any]]) -> str:
    """The first line of verdict.md: use the chosen mixture when it is measurably better
    than natural on the objective (its gain, and its price: the other metric columns'
    differences), else keep natural."""
    chosen = result["arms"].get(PRIMARY)
    if chosen is None or not chosen["better"]:
        how = "measurably worse" if chosen is not None and chosen["measurable"] else \
            "not measurably better"
        got = "" if chosen is None else f": {_words(chosen)} against natural"
        return f"Keep natural sampling: the chosen mixture is {how} on {objective}{got}."
    text = (f"Use the chosen mixture ({result['chosen_run']}) if {objective} is what "
            f"matters: {_words(chosen)} against natural")
    if price:
        text += ", at " + "; ".join(f"{_words(r)} on {c}" for c, r in price.items())
    else:
        text += ", at no measured price (the metrics have no other column)"
    return text + "."


def fresh_seeds(n: int, after: int) -> list[int]:
    """``n`` seeds none of the rounds drew with: those after ``after`` (the largest seed
    of the request and of the chosen run's schedule)."""
    return list(range(after + 1, after + 1 + n))


def verify_candidates(space: Any, chosen: Any, seeds: list[int]
                      ) -> tuple[list[Any], list[str], list[int], list[str]]:
    """The runs of a verification round: ``(candidates, run ids, seeds, arms)``: the
    ``chosen`` candidate, natural and (with a prior) the prior, each once per seed."""
    from clusterclip.search.space import fixed_candidates

    fixed = {c.origin: c for c in fixed_candidates(space)}
    if BASE not in fixed:
        raise InputError("--verify: the natural mixture cannot be drawn at this budget "
                         "within the default clip; give a smaller budget")
    arms = [(PRIMARY, chosen), (BASE, fixed[BASE])] + (
        [("prior", fixed["prior"])] if "prior" in fixed else [])
    cands, ids, out_seeds, names = [], [], [], []
    for arm, c in arms:
        for s in seeds:
            cands.append(c)
            ids.append(f"{arm}-seed{s}")
            out_seeds.append(s)
            names.append(arm)
    return cands, ids, out_seeds, names


def check_verify_folder(fit_dir: str) -> Path:
    """``FIT_DIR/mixture.json``, refused (one line) when the folder holds no fit
    (``fit.json``) or no chosen mixture (``--choose``)."""
    d = Path(fit_dir)
    if not (d / "fit.json").is_file():
        raise InputError(f"--verify {fit_dir}: no fit.json: give the --out folder of `search "
                         "fit ... --choose`")
    if not (d / "mixture.json").is_file():
        raise InputError(f"--verify {fit_dir}: no mixture.json: run `search fit` with "
                         "--choose first")
    return d / "mixture.json"


def run_verdict(ratios: str, metrics: str, objective: list[str], maximize: bool,
                out: str) -> dict[str, Any]:
    """``search fit --verdict``: ``verdict.json`` and ``verdict.md`` into ``out`` (one
    folder, atomically); returns the verdict."""
    from clusterclip.io import atomic_output_dir, check_output_dir, write_json, write_text

    check_output_dir(out, "search fit")
    values, origin = read_arms(ratios, metrics, objective)
    arms = verdict_of(values, maximize)
    label = " + ".join(objective)
    price = {} if PRIMARY not in values else _price(ratios, metrics, objective, maximize)
    result = {"format_version": VERDICT_FORMAT, "objective": label,
              "direction": "maximize" if maximize else "minimize", "base": BASE,
              "primary": PRIMARY, "chosen_run": origin.get(PRIMARY, PRIMARY),
              "rule": f"paired by seed, paired-t 95% interval, measurable when the "
                      f"Holm-adjusted p over the arms compared with natural is < {ALPHA}",
              "arms": arms, "price": price}
    result["decision"] = decision(result, label, price)
    lines = [result["decision"], "", f"Each arm against natural on {label}, arm minus "
             f"natural ({result['rule']}):", ""]
    lines += [f"- {a}: {_words(r)}" for a, r in arms.items()]
    lines += ["", "| arm | seed | " + label + " |", "|---|---|---|"]
    lines += [f"| {a} | {s} | {v!r} |" for a in sorted(values) for s, v in
              sorted(values[a].items())]
    with atomic_output_dir(out, "search fit") as tmp:
        write_json(tmp / "verdict.json", result)
        write_text(tmp / "verdict.md", "\n".join(lines) + "\n")
    return result


def _price(ratios: str, metrics: str, objective: list[str], maximize: bool
           ) -> dict[str, dict[str, Any]]:
    """The chosen arm against natural on each other metric column every run has."""
    from clusterclip.search.swarm import read_table

    out = {}
    for c in read_table(metrics, "--metrics").columns:
        if c in objective:
            continue
        try:
            values, _ = read_arms(ratios, metrics, [c])
        except InputError:  # a column some run lacks, or not numbers
            continue
        if PRIMARY in values:
            out[c] = verdict_of({k: values[k] for k in (PRIMARY, BASE)}, maximize)[PRIMARY]
    return out


def write_verification(req: Any, ws: Any, chosen_path: Path, corpus: Any, tokenizer: Any,
                       log: Any, extra: Any = None) -> dict[str, Any]:
    """The verification round of ``req`` (``search propose --verify``) into ``req.out``:
    ``ratios.csv`` (``arm``, ``seed``), ``mixtures/<run>.json``, ``round.json`` and, as
    asked, each run's schedule and export; returns a summary."""
    from dataclasses import replace as _replace

    from clusterclip.io import atomic_output_dir
    from clusterclip.sampling.mixture import read_mixture
    from clusterclip.search.propose import Draw, export_all, write_candidates, write_round
    from clusterclip.search.rounds import read_json
    from clusterclip.search.space import Candidate

    data = read_json(chosen_path, "--verify")
    m = read_mixture(chosen_path, ws.space.num_clusters)
    w = np.asarray(m.weights, dtype=np.float64)
    chosen = Candidate(tuple(float(x) for x in w / w.sum()), m.clip, m.timing,
                       f"chosen {data.get('run', '')}".strip())
    seeds = fresh_seeds(req.seeds, max(req.seed, int(data.get("seed", 0) or 0)))
    cands, ids, run_seeds, arms = verify_candidates(ws.space, chosen, seeds)
    cands = [c if a != PRIMARY else _replace(c, origin=chosen.origin)
             for c, a in zip(cands, arms, strict=True)]
    draw = Draw(req.num_tokens, req.num_samples, req.seed, req.fmt)
    with atomic_output_dir(req.out, "search propose") as tmp:
        write_candidates(tmp, ws, cands, m.objective, draw, "clusterclip search propose "
                         "--verify", ids=ids, seeds=run_seeds,
                         labels={"arm": arms, "seed": [str(s) for s in run_seeds]})
        write_round(tmp, ws, draw, req.workdir, "clusterclip search propose --verify",
                    {"verify": {"fit": str(chosen_path.parent.resolve()),
                                "chosen": data.get("run"), "seeds": seeds,
                                "arms": sorted(set(arms))}})
        if extra is not None:
            extra(tmp)
        if req.fmt is not None:
            export_all(corpus(), tmp, ws, cands, ids, draw, tokenizer, log,
                       "search propose --verify", seeds=run_seeds)
    return {"runs": len(ids), "ids": ids, "groups": len(ws.names), "kind": ws.kind,
            "unit": ws.unit, "target_overlap": ws.overlap, "short": None,
            "arms": sorted(set(arms)), "seeds": seeds}
