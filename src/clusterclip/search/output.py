"""The search's files: ``mixture.json``, ``results.json``, ``results.md``, ``splits.npz``
and three plots (predicted vs observed, objective by round, the chosen mixture per
super-cluster).

``results.md`` opens with the computed verdict (CONTRACTS.md section 3: the lines
from the title to the first ``## `` heading), its first line the decision
(:func:`decision_line`). Every difference is paired by seed and weighed by the rules of
:mod:`clusterclip.verdict` (:func:`search_family`): the primary question, declared before
the runs, is `searched` against random on the objective, tested alone at 5%; the other
comparisons count only after Holm's correction over the family. With ``--test-seeds
auto``, every test is at the stop rule's per-look level instead (5% over its planned
looks, :attr:`clusterclip.verdict.SeedRule.level`). The line on the searched
mixture names it ``searched`` and says ``measurably better than random``, ``measurably
worse than random`` or ``not measurably different from random``, so that scripts can
read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.lm.config import describe_model
from clusterclip.verdict import (
    Paired,
    SeedRule,
    compare_family,
    first_line,
    limits_line,
    percent,
)

RESULTS_FORMAT = 1
#: The comparisons of the verdict, (arm, baseline), in order.
COMPARISONS = (("searched", "random"), ("prior", "random"), ("searched", "prior"))
METRIC_NAMES = {"target": "target loss", "micro": "micro held-out loss",
                "macro": "macro held-out loss"}


def _proxy(p: Any, predicted: float | None, loo: float | None) -> dict[str, Any]:
    return {"index": p.index, "round": p.round + 1, **p.candidate.to_dict(),
            "seed": int(p.metrics["seed"]),
            "val": {k: v for k, v in p.metrics.items() if k != "seed"},
            "predicted": predicted, "loo_predicted": loo}


#: The option of ``clusterclip search`` that sets the test seeds, spelled here once: the
#: verdict's advice and results.md's seed rule name it, for the user to act on.
TEST_SEEDS_OPTION = "--test-seeds"

#: The stop rule of ``--test-seeds auto`` (the smallest effect of interest in nats per
#: token of the objective).
SEED_RULE = SeedRule()


def seed_looks(config: dict[str, Any]) -> int:
    """The planned looks of the search's ``config`` (a results.json ``config``): those of
    its ``seed_rule`` under ``--test-seeds auto``, else 1."""
    rule = config.get("seed_rule")
    return SeedRule.of(rule).looks if rule else 1


def search_family(test: dict[str, dict[str, list[float]]], objective: str,
                  min_effect: float = SEED_RULE.min_effect, looks: int = 1
                  ) -> dict[str, Any]:
    """:func:`clusterclip.verdict.compare_family` of the search: every comparison of
    :data:`COMPARISONS` whose arms ran, on every metric they have (the objective first),
    paired by test seed; the primary is `searched` against random on ``objective``;
    ``looks``: :func:`seed_looks`."""
    metrics = [objective] + [m for m in METRIC_NAMES if m != objective]
    diffs = {(a, b, m): np.subtract(test[a][m], test[b][m]).tolist()
             for m in metrics for a, b in COMPARISONS
             if a in test and b in test and m in test[a]}
    return compare_family(diffs, ("searched", "random", objective), min_effect=min_effect,
                          looks=looks)


def comparisons(test: dict[str, dict[str, list[float]]], objective: str, looks: int = 1
                ) -> dict[str, dict[str, Any]]:
    """``{"searched - random": {metric: {mean, low, high, detectable, p, p_holm, primary,
    measurable, call, n, std}}, ...}`` for the arms that ran, paired by seed: the entries of
    :func:`search_family` (a secondary is measurable only after Holm's correction)."""
    out: dict[str, dict[str, Any]] = {}
    for c in search_family(test, objective, looks=looks)["comparisons"]:
        b = c["baseline"]
        if c["measurable"]:
            call = f"measurably {'better' if c['mean'] < 0 else 'worse'} than {b}"
        else:  # a secondary whose raw interval excludes 0 is still not measurable
            call = f"not measurably different from {b}" if c["low"] is not None else \
                Paired.of(c).call(b)
        out.setdefault(f"{c['arm']} - {b}", {})[c["metric"]] = {
            k: v for k, v in c.items() if k not in ("arm", "baseline", "metric")} | {
            "call": call}
    return {k: out[k] for k in (f"{a} - {b}" for a, b in COMPARISONS) if k in out}


def coverage(test: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per arm, the shares of the training documents and tokens its schedule never drew
    at the budget: the mean over the test seeds, and ``per_seed``."""
    return {name: {**{k: round(float(np.mean(v)), 6) for k, v in arm["coverage"].items()},
                   "per_seed": arm["coverage"]} for name, arm in test.items()}


def _spearman(a: list[float], b: list[float]) -> float | None:
    from scipy import stats

    if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(stats.spearmanr(a, b).statistic)


def verify_dict(model: str, vdata: Any, vtest: dict[str, Any], test: dict[str, Any],
                objective: str, looks: int = 1) -> dict[str, Any]:
    """The final comparison trained again at preset ``model`` (the verification): its
    per-seed test losses, comparisons and coverage, and whether the arms keep their order
    (Spearman over the arms' mean test objective, proxy size vs this size); ``looks``: the
    proxy size's (:func:`seed_looks`), so both verdicts are held to one level."""
    arms = list(test)
    proxy = [float(np.mean(test[a][objective])) for a in arms]
    there = [float(np.mean(vtest[a][objective])) for a in arms]
    return {"model": model, "parameters": vdata.config.model.num_parameters(),
            "experiment": vdata.config.to_dict(), "budget_tokens": vdata.budget.tokens,
            "steps": vdata.budget.steps,
            "test": {name: {k: v for k, v in arm.items()
                            if k not in ("fed_share", "coverage", "bits_per_byte")}
                     for name, arm in vtest.items()},
            "bits_per_byte": {name: arm["bits_per_byte"] for name, arm in vtest.items()},
            "coverage": coverage(vtest), "comparisons": comparisons(vtest, objective, looks),
            "verdict": search_family(vtest, objective, looks=looks),
            "order": {"proxy": sorted(arms, key=lambda a: proxy[arms.index(a)]),
                      "verify": sorted(arms, key=lambda a: there[arms.index(a)])},
            "spearman": _spearman(proxy, there)}


def results_dict(config: Any, data: Any, splits: dict[str, np.ndarray], space: Any,
                 histogram: np.ndarray | None, result: Any, test: dict[str, Any],
                 seeds: list[int], run_keys: list[str], timing: dict[str, Any],
                 overlap: dict[str, Any] | None = None,
                 verify: dict[str, Any] | None = None) -> dict[str, Any]:
    """The search's results. ``timing`` and ``run_keys`` are the only parts that vary
    between identical searches, and ``splits`` (arrays) goes to splits.npz: they stay out
    of results.json. ``overlap``: the target's copies in the corpus
    (:func:`clusterclip.search.overlap.summary`); ``verify``: :func:`verify_dict`."""
    chosen = result.proxies[result.chosen]
    objective = "target" if space.prior is not None else "macro"
    looks = seed_looks(config.to_dict())
    return {
        "format_version": RESULTS_FORMAT,
        "objective": objective,
        # the proxies' own configuration: with --tokenizer, its vocabulary
        "config": {**config.to_dict(), "experiment": data.config.to_dict()},
        "data": {
            "documents": int(data.labels.size),
            "clusters": int(space.num_clusters),
            "groups": int(space.num_groups),
            **{k: int(v.size) for k, v in splits.items()},
            "train_tokens": int(data.doc_tokens[splits["corpus_train"]].sum()),
            "budget_tokens": data.budget.tokens, "steps": data.budget.steps,
        },
        "space": {"groups": space.groups.tolist(), "natural": space.natural.tolist(),
                  "prior": None if space.prior is None else space.prior.tolist(),
                  "target_val_histogram": None if histogram is None else histogram.tolist()},
        "proxies": [_proxy(p, result.predicted[i], result.loo[i])
                    for i, p in enumerate(result.proxies)],
        "predictor": {**(result.predictor or {}), "loo_spearman": result.spearman,
                      "proxies": len(result.proxies)},
        "rounds": result.rounds,
        "chosen": _proxy(chosen, result.predicted[result.chosen], result.loo[result.chosen]),
        "test_seeds": seeds,
        "test": {name: {k: v for k, v in arm.items()
                        if k not in ("fed_share", "coverage", "bits_per_byte")}
                 for name, arm in test.items()},
        "bits_per_byte": {name: arm["bits_per_byte"] for name, arm in test.items()},
        "test_fed_share": {name: arm["fed_share"] for name, arm in test.items()},
        "coverage": coverage(test),
        "target_overlap": overlap,
        "parameters": {"proxy": data.config.model.num_parameters(),
                       "verify": None if verify is None else verify["parameters"]},
        "verify": verify,
        "comparisons": comparisons(test, objective, looks),
        "primary": {"arm": "searched", "baseline": "random", "metric": objective},
        "verdict": search_family(test, objective, looks=looks),
        "run_keys": run_keys,
        "timing": timing,
        "splits": splits,
    }


# -- the verdict -----------------------------------------------------------------------

def _arm(results: dict[str, Any]) -> str:
    c = results["chosen"]
    return f"{c['timing']} timing, clip {c['clip']}"


#: What each arm is and how to train with it (the decision's words).
PRIOR = ("`prior` (the target's cluster histogram: the share of the target's val documents "
         "in each cluster, as weights; paced timing, clip 4)")
HOW = {"searched": " (`--mixture W/search/mixture.json`)",
       "prior": " (`--mixture W/search/prior.json`)"}


def _coverage_words(results: dict[str, Any], arm: str) -> str:
    c = results["coverage"][arm]
    return (f"at the budget of {results['data']['budget_tokens']:,} tokens it never draws "
            f"{c['docs_never_drawn']:.0%} of the corpus's training documents "
            f"({c['tokens_never_drawn']:.0%} of their tokens)")


def decision_line(results: dict[str, Any], seconds_per_run: float | None = None) -> str:
    """The first line (:func:`clusterclip.verdict.first_line` of :func:`search_family`): the
    arm to use on a measurable primary (`searched` against random on the objective) or a
    Holm-measurable secondary, its gain over random and its cost on the corpus's own mix
    (micro), each with its paired 95% interval (the per-look one under ``--test-seeds
    auto``), and how much of the corpus it never draws;
    else why random stays, or what the seeds could resolve and how many would."""
    fam = search_family(results["test"], results["objective"],
                        looks=seed_looks(results["config"]))
    rec = fam["recommend"]
    then = ""
    if rec is not None:
        then = f"; {_coverage_words(results, rec['arm'])}"
        comp = results["comparisons"]
        if "searched - prior" in comp and not comp["searched - prior"][rec["metric"]][
                "measurable"]:
            sp = comp["searched - prior"][rec["metric"]]
            then += ("; `searched` and `prior` do not differ measurably "
                     f"({Paired.of(sp).interval(3, inside=True)}"
                     + (f"; Holm-adjusted p {sp['p_holm']:.2g}" if sp.get("p_holm") is not None
                        else "") + ")")
    rule = results["config"].get("seed_rule")
    return first_line(fam, names=METRIC_NAMES, rerun=TEST_SEEDS_OPTION,
                      runs_per_seed=len(results["test"]), how=HOW, cost="micro",
                      arms="the arms", then=then, seconds_per_run=seconds_per_run,
                      cap=SeedRule.of(rule).cap if rule else None)


def _decided(results: dict[str, Any]) -> str | None:
    rec = search_family(results["test"], results["objective"],
                        looks=seed_looks(results["config"]))["recommend"]
    return None if rec is None else rec["arm"]


def _first_line(results: dict[str, Any], seconds_per_run: float | None = None) -> str:
    """:func:`decision_line`, with `prior` defined where it first appears, and a warning
    when the verification one size up decides otherwise."""
    line = decision_line(results, seconds_per_run).replace("`prior`", PRIOR, 1)
    v = results.get("verify")
    if v and len(results["test_seeds"]) > 1 and _decided(_at_verify(results)) != \
            _decided(results):
        line += f" Not confirmed one size up, at `{v['model']}`: see the next line."
    return line


def verdict_lines(results: dict[str, Any], seconds_per_run: float | None = None
                  ) -> list[str]:
    """The verdict as markdown lines: the decision (:func:`decision_line`; with
    ``seconds_per_run``, measured, the time more seeds would take), what it rests on and
    cannot tell, the target's overlap with the corpus when notable, the plain sentence, one
    line per comparison, the price on the other losses, coverage, the smallest detectable
    difference, the predictor."""
    from clusterclip.search.overlap import NOTABLE, overlap_sentence

    obj = results["objective"]
    comp = results["comparisons"]
    n = len(results["test_seeds"])
    model = describe_model(results["config"]["experiment"])
    sr = comp["searched - random"][obj]
    lines = [_first_line(results, seconds_per_run), limits_line(model)]
    o = results.get("target_overlap")
    if o and o["exact"] + o["near"] > NOTABLE * max(1, o["target_docs"]):
        lines.append(overlap_sentence(o))  # the first paragraph
    if results.get("verify"):
        lines.append(verify_sentence(results))
    lines.append("")
    lead = (f"On this corpus{' and target' if obj == 'target' else ''}, with {n} fresh "
            f"seed{'s' if n != 1 else ''} of {model}: `searched` (the searched mixture, "
            f"{_arm(results)}) is {sr['call']} on {METRIC_NAMES[obj]} "
            f"({Paired.of(sr).interval(inside=True)})")
    if sr["detectable"] is not None and not sr["measurable"]:
        lead += (f"; these seeds cannot tell a difference smaller than ±{sr['detectable']:.4f} "
                 "from noise")
    lead += "." + (f" {PRIOR[0].upper()}{PRIOR[1:]} is the other arm." if "prior" in
                   results["test"] and PRIOR not in lines[0] else "")
    lines += [lead, ""]
    for key, by_metric in comp.items():
        d = by_metric[obj]
        name = "`searched`" if key.startswith("searched") else key.split(" - ")[0]
        test = ("p = " + f"{d['p']:.2g}" + (", the primary question, tested alone" if
                                            d["primary"] else f", Holm-adjusted "
                                            f"{d['p_holm']:.2g} over {_family(results)} "
                                            "comparisons")) if d.get("p") is not None else ""
        lines.append(f"- {name} vs {key.split(' - ')[1]}, {METRIC_NAMES[obj]} (the objective): "
                     f"{Paired.of(d).interval()}" + (f", {test}" if test else "")
                     + f": {d['call']}.")
    return lines + _price_lines(results) + [_coverage_line(results), _detectable_line(results),
                                            _predictor_line(results)]


def _family(results: dict[str, Any]) -> int:
    return sum(len(by_metric) for by_metric in results["comparisons"].values())


def _at_verify(results: dict[str, Any]) -> dict[str, Any]:
    """The results as the verification saw them (its tests, comparisons, coverage)."""
    v = results["verify"]
    return {**results, **{k: v[k] for k in ("test", "bits_per_byte", "coverage",
                                            "comparisons")},
            "data": {**results["data"], "budget_tokens": v["budget_tokens"]}}


def verify_sentence(results: dict[str, Any]) -> str:
    """Whether the arms keep their order one size up, and the decision there."""
    from clusterclip.lm.config import format_parameters

    v, obj = results["verify"], results["objective"]
    rho = v["spearman"]
    same = v["order"]["proxy"] == v["order"]["verify"]
    there = decision_line(_at_verify(results))
    return (f"Checked one size up: trained again at `{v['model']}` "
            f"({format_parameters(v['parameters'])} parameters; the proxies have "
            f"{format_parameters(results['parameters']['proxy'])}), the arms "
            f"{'keep' if same else 'do not keep'} their order by mean test {METRIC_NAMES[obj]} "
            f"(Spearman {'undefined (ties)' if rho is None else f'{rho:+.2f}'}; "
            f"{' < '.join(v['order']['proxy'])} at the proxy size, "
            f"{' < '.join(v['order']['verify'])} at {v['model']}). At {v['model']}: "
            f"{there[0].lower()}{there[1:]}")


def _coverage_line(results: dict[str, Any]) -> str:
    parts = [f"{a} {c['docs_never_drawn']:.1%} of the documents ({c['tokens_never_drawn']:.1%} "
             "of the tokens)" for a, c in results["coverage"].items()]
    return (f"- Never drawn at the budget ({results['data']['budget_tokens']:,} tokens; mean "
            "over the test seeds, of the corpus's training split): " + "; ".join(parts) + ".")


def _price_lines(results: dict[str, Any]) -> list[str]:
    """The other losses (the price of the trade), searched and prior against random."""
    obj = results["objective"]
    out = []
    for key in ("searched - random", "prior - random"):
        if key not in results["comparisons"]:
            continue
        parts = []
        for m, d in results["comparisons"][key].items():
            if m == obj:
                continue
            adj = d.get("p_holm")
            tag = ("measurable" if d["measurable"] else "not measurable") + (
                f" (Holm-adjusted p {adj:.2g})" if adj is not None else "")
            parts.append(f"{m} {Paired.of(d).interval()}, {tag}")
        if parts:
            out.append(f"- {key.replace(' - ', ' − ')}, other held-out losses: "
                       + "; ".join(parts) + ".")
    return out


def _detectable_line(results: dict[str, Any]) -> str:
    d = results["comparisons"]["searched - random"]
    parts = [f"{m} ±{v['detectable']:.4f}" for m, v in d.items() if v["detectable"] is not None]
    if not parts:
        return "- One test seed: no difference can be called measurable."
    confidence = percent(Paired.of(next(iter(d.values()))).confidence)
    return (f"- Smallest difference these {len(results['test_seeds'])} seeds can detect "
            f"(searched − random; the half-width of the paired-t {confidence} interval at "
            f"the spread the seeds showed: a mean difference inside it is never called "
            f"measurable): " + ", ".join(parts) + ".")


def _predictor_line(results: dict[str, Any]) -> str:
    p = results["predictor"]
    rho = p.get("loo_spearman")
    if rho is None:
        return (f"- Predictor: too few proxies ({p['proxies']}) for a leave-one-out rank "
                "correlation; the chosen mixture is the best observed one.")
    meaning = ("it ranks unseen mixtures well" if rho >= 0.7 else
               "it ranks unseen mixtures somewhat" if rho >= 0.3 else
               "it learned little that carries to an unseen mixture")
    return (f"- Predictor: leave-one-out rank correlation {rho:.2f} over {p['proxies']} proxies "
            f"(Spearman, predicted vs observed val objective; {meaning}).")


# -- results.md ------------------------------------------------------------------------

def _fmt(v: float | None, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def proxies_table(results: dict[str, Any]) -> list[str]:
    obj = results["objective"]
    metrics = [m for m in ("target", "micro", "macro") if m in results["proxies"][0]["val"]]
    head = ["#", "round", "origin", "timing", "clip", *[f"val {m}" for m in metrics],
            "predicted", "loo"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    best = results["chosen"]["index"]
    for p in results["proxies"]:
        cells = [f"**{p['index']}**" if p["index"] == best else str(p["index"]),
                 str(p["round"]), p["origin"], p["timing"], str(p["clip"]),
                 *[_fmt(p["val"][m]) for m in metrics], _fmt(p["predicted"]),
                 _fmt(p["loo_predicted"])]
        lines.append("| " + " | ".join(cells) + " |")
    return [f"Every proxy, its mixture's origin, timing and clip, its val losses (one seed, "
            f"the search's; objective: {obj}), the final predictor's value at it and its "
            "leave-one-out prediction. The chosen one is in bold; its weights are in "
            "mixture.json, every proxy's in results.json.", "", *lines]


def test_table(results: dict[str, Any]) -> list[str]:
    """Each arm's test losses (nats per token) and, beside them, bits per byte (comparable
    across tokenizers): mean ± std over the test seeds."""
    t, bpb = results["test"], results.get("bits_per_byte", {})
    metrics = list(next(iter(t.values())))
    per_byte = list(next(iter(bpb.values()), {}))
    head = ["arm", *[f"test {m}" for m in metrics], *[f"{m} bits/byte" for m in per_byte]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, arm in t.items():
        cells = []
        for v in [arm[m] for m in metrics] + [bpb[name][m] for m in per_byte]:
            v = np.array(v)
            cells.append(f"{v.mean():.4f}" + (f" ± {v.std(ddof=1):.4f}" if v.size > 1 else ""))
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return ["Test losses in nats per token, and in bits per byte (comparable across "
            "tokenizers), mean ± std over the test seeds:", "", *lines]


def _verify_section(results: dict[str, Any]) -> list[str]:
    v = results.get("verify")
    if not v:
        return []
    at = _at_verify(results)
    return [f"## Verification at {v['model']}", "",
            f"The same arms, seeds and test documents, trained at {v['model']} "
            f"({describe_model(v['experiment'])}, {v['budget_tokens']:,} training tokens, "
            f"{v['steps']} steps).", "", *test_table(at), "",
            *[f"- {k}, {METRIC_NAMES[results['objective']]}: "
              f"{Paired.of(d[results['objective']]).interval()}: "
              f"{d[results['objective']]['call']}." for k, d in v["comparisons"].items()],
            ""]


def _overlap_setup(results: dict[str, Any]) -> str:
    from clusterclip.search.overlap import overlap_sentence

    o = results.get("target_overlap")
    return "" if not o else " Target and corpus: " + overlap_sentence(o)


def _primary_setup(results: dict[str, Any]) -> str:
    """The primary question, declared before the runs, the family's size and, with
    ``--test-seeds auto``, the stop rule."""
    obj = results["objective"]
    what = f"`searched` against random on {METRIC_NAMES[obj]}"
    n = _family(results)
    d = results["config"].get("seed_rule")
    rule = SeedRule.of(d) if d else None
    level = percent(rule.level) if rule else "5%"
    if rule and rule.looks > 1:
        level += f" (5% over {rule.looks} planned looks at it)"
    text = (f"Primary question, declared before the runs: {what}, tested alone at {level}; "
            f"the other {n - 1} comparisons are secondary, measurable only when their "
            f"Holm-adjusted p over all {n} is below {rule.level if rule else 0.05:.4g} "
            "(results.json: *verdict*).")
    if rule:
        text += f" Test seeds: {rule.describe(what, option=TEST_SEEDS_OPTION)}."
    return text


def render_markdown(results: dict[str, Any]) -> str:
    c, d = results["config"], results["data"]
    obj = results["objective"]
    title = ("# ClusterClip search: the mixture for the target" if obj == "target"
             else "# ClusterClip search: the mixture for balanced (macro) held-out loss")
    exp = c["experiment"]
    parts = [title, "", *verdict_lines(results), "", "## Setup", "",
             f"Objective: {METRIC_NAMES[obj]} on val"
             + (" (the target's val documents)" if obj == "target" else
                " (every cluster weighs the same)")
             + f". Proxies: {len(results['proxies'])} in {len(results['rounds'])} rounds, each "
             f"one seed ({c['seed']}) of {describe_model(exp)}, {d['budget_tokens']:,} training "
             f"tokens ({d['steps']} steps). Corpus split by cluster: {d['corpus_train']:,} "
             f"train, {d['corpus_val']:,} val, {d['corpus_test']:,} test documents"
             + (f"; target split by file: {d['target_val']} val, {d['target_test']} test"
                if obj == "target" else "")
             + f" (W/search/splits.npz). Search space: weights over {d['groups']} "
             + (f"super-clusters (k-means of the centroids; each split among its clusters by "
                f"{'the prior' if obj == 'target' else 'their shares of the corpus'})"
                if d["groups"] < d["clusters"] else "clusters")
             + ", clip R and timing. Selection reads val only; the verdict trains random"
             + (", the prior (paced, clip 4)" if obj == "target" else "")
             + f" and the chosen mixture again with fresh seeds {results['test_seeds']} and "
             "measures test." + _overlap_setup(results), "", _primary_setup(results), "",
             *test_table(results), "",
             *_verify_section(results),
             "## Proxies", "", *proxies_table(results), "",
             "## Plots", "",
             "![predicted vs observed](predicted_vs_observed.png)", "",
             "![objective by round](objective_by_round.png)", "",
             "![chosen mixture per group](mixture.png)", ""]
    return "\n".join(parts)


def write_outputs(results: dict[str, Any], directory: Path) -> list[str]:
    """Every output file into ``directory``, each atomically, results.json last."""
    from clusterclip.sampling.mixture import Mixture, write_mixture
    from clusterclip.search import plots
    from clusterclip.search.splits import save_splits
    from clusterclip.storage.atomic import atomic_path, write_text

    directory.mkdir(parents=True, exist_ok=True)
    stable = {k: v for k, v in results.items() if k not in ("timing", "run_keys", "splits")}
    ch = results["chosen"]
    write_mixture(directory / "mixture.json",
                  Mixture(tuple(ch["weights"]), ch["clip"], ch["timing"], results["objective"]),
                  source="clusterclip search", val=ch["val"])
    if results["space"]["prior"] is not None:
        from clusterclip.search.space import DEFAULT_CLIP, DEFAULT_TIMING

        write_mixture(directory / "prior.json",
                      Mixture(tuple(results["space"]["prior"]), DEFAULT_CLIP, DEFAULT_TIMING,
                              "target"), source="clusterclip search (the target's prior)")
    save_splits(directory / "splits.npz", results["splits"])
    write_text(directory / "results.md", render_markdown(stable))
    names = {"predicted_vs_observed.png": plots.predicted_vs_observed,
             "objective_by_round.png": plots.objective_by_round, "mixture.png": plots.mixture}
    for name, plot in names.items():
        with atomic_path(directory / name) as tmp:
            plot(stable, tmp)
    write_text(directory / "results.json", json.dumps(stable, indent=2, sort_keys=True) + "\n")
    prior = ["prior.json"] if results["space"]["prior"] is not None else []
    return ["mixture.json", *prior, "splits.npz", "results.md", *names, "results.json"]
