"""The verification round of the own-trainer loop and its verdict.

``search propose --verify FIT_DIR --seeds S`` writes the final comparison as runs to
train (:func:`verify_candidates`): the chosen mixture (``FIT_DIR/mixture.json``), natural
and, with a target, the prior, each drawn with S fresh seeds; ``ratios.csv`` has ``arm``
and ``seed`` columns. ``search fit --verdict`` reads the runs' metrics back
(:func:`read_arms`) and compares each arm with natural seed by seed
(:func:`verdict_of`, the rule of every verdict,
:func:`clusterclip.verdict.compare_family`): the paired differences, their mean and
paired-t 95% interval, the p-value and the Holm-adjusted p-value over the arms. The
primary comparison, declared before the runs, is the chosen mixture against natural,
tested alone at 5%; another arm is *measurably* better or worse only when its
Holm-adjusted p is below 0.05; ``verdict.md``'s first line is the decision and its
price (the other metric columns of the chosen arm against natural).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.search.overlap import overlap_sentence
from clusterclip.verdict import LEVEL

#: The arm every other is compared with, and the primary arm.
BASE = "natural"
PRIMARY = "chosen"
#: Family-wise error rate of the Holm correction over the arms.
ALPHA = LEVEL
VERDICT_FORMAT = 1


def verdict_of(values: dict[str, dict[int, float]], maximize: bool = False,
               base_arm: str = BASE, primary: str = PRIMARY
               ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each arm of ``values`` (``{arm: {seed: objective}}``) against ``base_arm`` (natural;
    the offline search's random sampling), paired by seed, as one family of
    :func:`clusterclip.verdict.compare_family` (the rule of every verdict): ``{arm: {seeds,
    differences, mean, n, std, low, high, p, p_holm, primary, measurable, better}}``
    (differences arm minus the base; ``primary``: ``primary`` against the base, tested
    alone at 5%, the others measurable only when their Holm-adjusted p is below 5%;
    ``better``: lower, or higher with ``maximize``, and measurable), and the compare_family
    result (its differences signed so that below 0 is better)."""
    from clusterclip.verdict import compare_family

    base = values[base_arm]
    arms = sorted(a for a in values if a != base_arm)
    seeds = {a: sorted(set(values[a]) & set(base)) for a in arms}
    raw = {a: [values[a][s] - base[s] for s in seeds[a]] for a in arms}
    sign = -1.0 if maximize else 1.0  # compare_family reads a difference below 0 as better
    first = primary if primary in raw else arms[0]
    family = compare_family({(a, base_arm, "objective"): [sign * d for d in raw[a]]
                             for a in arms}, (first, base_arm, "objective"),
                            reference=base_arm)
    out: dict[str, dict[str, Any]] = {}
    for a, c in zip(arms, family["comparisons"], strict=True):
        lo, hi = (c["low"], c["high"]) if sign > 0 or c["low"] is None else \
            (-c["high"], -c["low"])
        out[a] = {"seeds": seeds[a], "differences": raw[a], "mean": sign * c["mean"],
                  "n": c["n"], "std": c["std"], "low": lo, "high": hi, "p": c["p"],
                  "p_holm": c["p_holm"], "primary": c["primary"],
                  "measurable": c["measurable"],
                  "better": c["measurable"] and c["mean"] < 0}
    return out, family


def read_arms(ratios: str, metrics: str, columns: list[str]
              ) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """``({arm: {seed: mean of columns}}, {arm: origin})`` of a verification round: its
    ``ratios.csv`` (``arm`` and ``seed`` columns) joined with the metrics on the run id;
    InputError when the table has no arm or seed column, has no natural arm, or a run has
    no value."""
    from clusterclip.search.swarm import read_objective, read_table

    t = read_table(ratios, "ratios")
    missing = [c for c in ("arm", "seed") if c not in t.columns]
    if missing:
        raise InputError(f"ratios {ratios}: no {missing[0]!r} column: the verdict reads the "
                         "ratios.csv of `search propose --verify`", params=("ratios",))
    arms, seeds = t.column("arm"), t.column("seed")
    origin = dict(zip(arms, t.column("origin"), strict=True)) if "origin" in t.columns else {}
    _, obj = read_objective(metrics, columns, "metrics")
    values: dict[str, dict[int, float]] = {}
    for i, rid in enumerate(t.ids):
        if rid not in obj:
            raise InputError(f"metrics {metrics}: run {rid!r} (arm {arms[i]}, seed "
                             f"{seeds[i]}) has no {', '.join(columns)}; the verdict pairs "
                             "every arm's seeds", params=("metrics",))
        values.setdefault(arms[i], {})[int(seeds[i])] = obj[rid]
    if BASE not in values or len(values) < 2:
        raise InputError(f"ratios {ratios}: the verdict compares arms with {BASE!r}; the "
                         f"table's arms are {', '.join(sorted(values))}", params=("ratios",))
    return values, origin


def _words(r: dict[str, Any], digits: int = 4) -> str:
    if r["low"] is None:
        return f"{r['mean']:+.{digits}f} (one seed)"
    p = (f"p {r['p']:.3g}, the primary question" if r.get("primary") else
         f"Holm-adjusted p {r['p_holm']:.3g}")
    return (f"{r['mean']:+.{digits}f} (95% CI {r['low']:+.{digits}f} to "
            f"{r['high']:+.{digits}f}, {p}, {r['n']} seeds)")


def decision(result: dict[str, Any], objective: str, price: dict[str, dict[str, Any]],
             family: dict[str, Any]) -> str:
    """The first line of verdict.md, by the rule of every verdict: use the chosen mixture
    when it is measurably better than natural on the objective (the primary question; its
    gain and its price: the other metric columns' differences); use another arm only when
    it is better after Holm's correction; keep natural when the chosen mixture is
    measurably worse; otherwise say that the seeds did not resolve it, and how many would."""
    arms = result["arms"]
    rec = family["recommend"]
    if rec is not None:
        arm = rec["arm"]
        name = (f"the chosen mixture ({result['chosen_run']})" if arm == PRIMARY else
                f"the {arm} arm's mixture (its file under the verification round's mixtures/)")
        text = f"Use {name} if {objective} is what matters: {_words(arms[arm])} against natural"
        if arm == PRIMARY:
            text += (", at " + "; ".join(f"{_words(r)} on {c}" for c, r in price.items())
                     if price else ", at no measured price (the metrics have no other column)")
        return text + "."
    chosen = arms.get(PRIMARY)
    got = "" if chosen is None else f": {_words(chosen)} against natural"
    if chosen is not None and chosen["measurable"]:
        return f"Keep natural sampling: the chosen mixture is measurably worse on {objective}{got}."
    n = family["seeds"]
    more = family["seeds_to_resolve"]
    then = (f" Train {more} seeds per arm (`search propose --verify FIT_DIR --seeds {more}`) "
            "to resolve it." if more else "")
    return (f"Not resolved at {n} seed{'s' if n != 1 else ''}: the chosen mixture is not "
            f"measurably different from natural on {objective}{got}; keep natural sampling "
            f"until it is.{then}")


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
        raise InputError("verify: the natural mixture cannot be drawn at this budget "
                         "within the default clip; give a smaller budget", params=("verify",))
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
        raise InputError(f"verify {fit_dir}: no fit.json: give the output folder of `search "
                         "fit ... --choose`", params=("verify",))
    if not (d / "mixture.json").is_file():
        raise InputError(f"verify {fit_dir}: no mixture.json: run `search fit --choose` "
                         "first", params=("verify",))
    return d / "mixture.json"


def run_verdict(ratios: str, metrics: str, objective: list[str], maximize: bool,
                out: str) -> dict[str, Any]:
    """``search fit --verdict``: ``verdict.json`` and ``verdict.md`` into ``out`` (one
    folder, atomically); returns the verdict."""
    from clusterclip.storage.atomic import write_json, write_text
    from clusterclip.storage.outputs import atomic_output_dir, check_output_dir

    check_output_dir(out, "search fit")
    values, origin = read_arms(ratios, metrics, objective)
    arms, family = verdict_of(values, maximize)
    label = " + ".join(objective)
    price = {} if PRIMARY not in values else _price(ratios, metrics, objective, maximize)
    result = {"format_version": VERDICT_FORMAT, "objective": label,
              "direction": "maximize" if maximize else "minimize", "base": BASE,
              "primary": PRIMARY, "chosen_run": origin.get(PRIMARY, PRIMARY),
              "rule": f"paired by seed, paired-t 95% interval; the chosen mixture against "
                      f"natural is the primary question, tested alone at {ALPHA}; another "
                      f"arm is measurable when its Holm-adjusted p over the {family['family']} "
                      f"comparisons is < {ALPHA}",
              "arms": arms, "family": family, "price": price}
    result["decision"] = decision(result, label, price, family)
    overlap = _round_overlap(ratios)
    if overlap is not None:  # what the arms were kept from, next to the decision
        result["target_overlap"] = overlap
        result["overlap"] = overlap_sentence(overlap)
    lines = [result["decision"], *([result["overlap"]] if overlap else []), "",
             f"Each arm against natural on {label}, arm minus "
             f"natural ({result['rule']}):", ""]
    lines += [f"- {a}: {_words(r)}" for a, r in arms.items()]
    lines += ["", "| arm | seed | " + label + " |", "|---|---|---|"]
    lines += [f"| {a} | {s} | {v!r} |" for a in sorted(values) for s, v in
              sorted(values[a].items())]
    with atomic_output_dir(out, "search fit") as tmp:
        write_json(tmp / "verdict.json", result)
        write_text(tmp / "verdict.md", "\n".join(lines) + "\n")
    return result


def _round_overlap(ratios: str) -> dict[str, Any] | None:
    """``target_overlap`` of the verification round's ``round.json`` beside ``ratios``
    (None without a target or a record)."""
    from clusterclip.search.rounds import round_record

    record = round_record((ratios,))
    return None if record is None else record.get("target_overlap")


def _price(ratios: str, metrics: str, objective: list[str], maximize: bool
           ) -> dict[str, dict[str, Any]]:
    """The chosen arm against natural on each other metric column every run has."""
    from clusterclip.search.swarm import read_table

    out = {}
    for c in read_table(metrics, "metrics").columns:
        if c in objective:
            continue
        try:
            values, _ = read_arms(ratios, metrics, [c])
        except InputError:  # a column some run lacks, or not numbers
            continue
        if PRIMARY in values:
            out[c] = verdict_of({k: values[k] for k in (PRIMARY, BASE)}, maximize)[0][PRIMARY]
    return out


def write_verification(req: Any, ws: Any, chosen_path: Path, corpus: Any, tokenizer: Any,
                       log: Any = None, extra: Any = None) -> dict[str, Any]:
    """The verification round of ``req`` (``search propose --verify``) into ``req.out``:
    ``ratios.csv`` (``arm``, ``seed``), ``mixtures/<run>.json``, ``round.json`` and, as
    asked, each run's schedule and export; returns a summary. ``log``: the progress lines
    (default: stderr)."""
    from clusterclip.sampling.mixture import read_mixture
    from clusterclip.search.propose import (
        Draw,
        _stderr,
        export_all,
        write_candidates,
        write_round,
    )
    from clusterclip.search.rounds import read_json
    from clusterclip.search.space import Candidate
    from clusterclip.storage.outputs import atomic_output_dir

    data = read_json(chosen_path, "the chosen mixture of `search fit --choose`")
    m = read_mixture(chosen_path, ws.space.num_clusters)
    w = np.asarray(m.weights, dtype=np.float64)
    chosen = Candidate(tuple(float(x) for x in w / w.sum()), m.clip, m.timing,
                       f"chosen {data.get('run', '')}".strip())
    seeds = fresh_seeds(req.seeds, max(req.seed, int(data.get("seed", 0) or 0)))
    log = _stderr if log is None else log
    cands, ids, run_seeds, arms = verify_candidates(ws.space, chosen, seeds)
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
