"""The statistics of every verdict (``experiment``, ``search``, and any caller that pairs
runs by seed): one family of paired comparisons, one declared primary, one decision.

The rule (:func:`paired_difference`): differences between two arms are paired by seed
(same initialisation, same held-out documents); their mean gets a paired-t 95% confidence
interval and a two-sided p-value (scipy). The *primary* comparison, declared before any
run, is tested alone at 5%: it is measurable when its interval excludes 0. Every other
comparison is *secondary* and is measurable only when its Holm-adjusted p-value
(:func:`holm`, over every comparison the verdict weighs) is below 5%.
:func:`compare_family` applies it and decides (:data:`CATEGORIES`); :func:`first_line`
says the decision in one line; :class:`SeedRule` is the stop rule of ``--seeds auto``.

Under ``--seeds auto`` the primary is looked at after every batch (3, 6, 9 and 12 seeds
by default), and a rule that stops as soon as a 95% interval excludes 0 calls a zero
difference measurable more often than 5% of the time (optional stopping). The looks are
comparisons made, so the rule splits the 5% evenly over its planned looks (Bonferroni:
1.25% each, 98.75% intervals, for 4 looks; :attr:`SeedRule.level`), and the verdict of an
``auto`` run holds every interval and test to that level (:func:`compare_family`'s
``looks``): the stop rule, the first line and every interval use the same level. By the
union bound the intervals at all planned looks cover the true differences together with
probability at least 95%, whichever look the rule stops at and whatever else made it
stop, so the primary's false-positive rate over all looks is at most 5%; Holm's
correction over the family then runs at the per-look level (at each look it holds the
family to 1.25%, over the 4 looks to 5%). With a fixed seed count there is one look, at
5%.

With one seed no interval exists, so no call is made. The half-width of the interval is
the smallest mean difference these seeds can call measurable at the spread they showed
(:attr:`Paired.detectable`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Confidence of the paired-t interval behind every "measurably".
CONFIDENCE = 0.95
#: The level every test is held to (the primary alone, the secondaries after Holm), over
#: all the looks at the data (:class:`SeedRule`).
LEVEL = 0.05


def percent(share: float) -> str:
    """A share in words, to two decimals at most: ``95%``, ``98.75%``, ``1.25%``.

    Parameters
    ----------
    share : float
        Between 0 and 1.

    Returns
    -------
    str

    Examples
    --------
    >>> from clusterclip.verdict import percent
    >>> percent(0.95), percent(1 - 0.05 / 4), percent(0.05 / 3)
    ('95%', '98.75%', '1.67%')
    """
    return f"{100 * share:.2f}".rstrip("0").rstrip(".") + "%"

SAME = "not measurably different from random"
ONE_SEED = "one seed: no interval can be given"
#: The decision's words for each loss: what matters when it is the goal.
GOALS = {"micro": "the corpus's own mix (micro held-out loss)",
         "macro": "balanced loss over the clusters (macro held-out loss)",
         "tail": "the smallest clusters (tail held-out loss)", "target": "target loss"}

#: The decision categories of :func:`compare_family`: an arm is recommended (on the
#: measurable primary or a Holm-measurable secondary); the primary arm is measurably worse
#: and nothing is recommended; the primary's interval is narrower than the smallest effect
#: of interest on both sides of 0 (no difference worth acting on); or none of these.
RESOLVED_BETTER = "resolved-better"
RESOLVED_WORSE = "resolved-worse"
RESOLVED_EQUIVALENT = "resolved-equivalent"
NOT_RESOLVED = "not resolved"
CATEGORIES = (RESOLVED_BETTER, RESOLVED_WORSE, RESOLVED_EQUIVALENT, NOT_RESOLVED)


@dataclass(frozen=True)
class Paired:
    """Per-seed differences ``a - b`` (lower loss is better, so negative favours a):
    their mean, sample std, paired-t interval (95% unless the comparison is one of several
    looks) and two-sided p-value (None for one seed).

    Parameters
    ----------
    mean : float
        The mean difference.
    n : int
        The seeds paired.
    std : float or None
        Their sample standard deviation.
    low, high : float or None
        The paired-t interval of the mean, at ``confidence``.
    p : float or None
        The two-sided p-value of the paired t test.
    confidence : float
        The interval's confidence (``1 - level``: 0.95, or 0.9875 at 4 planned looks).
    """

    mean: float
    n: int
    std: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    confidence: float = CONFIDENCE

    @property
    def detectable(self) -> float | None:
        """Half-width of the interval: at the spread these seeds showed, a mean difference
        smaller than this cannot be called measurable (None for one seed)."""
        return None if self.low is None else (self.high - self.low) / 2

    @property
    def measurable(self) -> bool:
        """True when the interval excludes 0 (tested alone, at ``1 - confidence``)."""
        return self.low is not None and (self.low > 0 or self.high < 0)

    def call(self, other: str = "random") -> str:
        """The comparison in words, by the interval alone.

        Parameters
        ----------
        other : str
            The baseline's name.

        Returns
        -------
        str
            ``measurably better than <other>``, ``measurably worse than <other>``, ``not
            measurably different from <other>`` or the one-seed note.
        """
        if self.low is None:
            return ONE_SEED
        if not self.measurable:
            return f"not measurably different from {other}"
        return f"measurably {'better' if self.mean < 0 else 'worse'} than {other}"

    def interval(self, digits: int = 4, inside: bool = False) -> str:
        """The mean and its interval in words.

        Parameters
        ----------
        digits : int
            Decimals shown.
        inside : bool
            For text already in parentheses: ``+0.0123, 95% CI -0.0040 to +0.0286``
            (its confidence, as ``percent`` words it).

        Returns
        -------
        str
            ``+0.0123 (95% CI -0.0040 to +0.0286)``, or ``+0.0123, one seed``.
        """
        if self.low is None:
            return f"{self.mean:+.{digits}f}, one seed"
        ci = f"{percent(self.confidence)} CI {self.low:+.{digits}f} to {self.high:+.{digits}f}"
        return f"{self.mean:+.{digits}f}" + (f", {ci}" if inside else f" ({ci})")

    def to_dict(self) -> dict[str, Any]:
        """The fields, ``detectable`` and ``measurable`` as a JSON-ready dict.

        Returns
        -------
        dict
            ``mean``, ``n``, ``std``, ``low``, ``high``, ``detectable``, ``p``,
            ``measurable``, and ``confidence`` when it is not 95% (results at a fixed seed
            count keep their bytes).
        """
        d = {"mean": self.mean, "n": self.n, "std": self.std, "low": self.low,
             "high": self.high, "detectable": self.detectable, "p": self.p,
             "measurable": self.measurable}
        if self.confidence != CONFIDENCE:
            d["confidence"] = self.confidence
        return d

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Paired:
        """The ``Paired`` of a ``to_dict`` (or of a results.json entry).

        Parameters
        ----------
        d : mapping
            At least ``mean``, ``n``, ``std``, ``low``, ``high`` (``p`` and
            ``confidence`` if there).

        Returns
        -------
        Paired
        """
        return cls(mean=d["mean"], n=d["n"], std=d["std"], low=d["low"], high=d["high"],
                   p=d.get("p"), confidence=d.get("confidence", CONFIDENCE))


def paired_difference(diffs: Sequence[float], level: float = LEVEL) -> Paired:
    """The rule: mean of the per-seed differences with its paired-t ``1 - level`` interval
    (``mean ± t(1 - level / 2, n - 1) s / sqrt(n)``; 95% by default) and the two-sided
    p-value of the same t statistic.

    Parameters
    ----------
    diffs : sequence of float
        Per-seed differences ``a - b``, paired by seed (at least one).
    level : float
        The test's level: the interval excludes 0 exactly when ``p < level``
        (``SeedRule.level`` under ``--seeds auto``).

    Returns
    -------
    Paired
        With one difference: the mean alone (no std, interval or p).

    Examples
    --------
    >>> from clusterclip.verdict import paired_difference
    >>> p = paired_difference([-0.10, -0.12, -0.08])
    >>> round(p.mean, 3), round(p.low, 3), round(p.high, 3), round(p.p, 4), p.measurable
    (-0.1, -0.15, -0.05, 0.0131, True)
    """
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        raise ValueError("paired_difference needs at least one difference")
    mean = float(d.mean())
    confidence = 1 - level
    if d.size < 2:
        return Paired(mean=mean, n=1, confidence=confidence)
    std = float(d.std(ddof=1))
    se = std / math.sqrt(d.size)
    half = float(stats.t.ppf(1 - level / 2, d.size - 1)) * se
    if se > 0:
        p = float(2 * stats.t.sf(abs(mean) / se, d.size - 1))
    else:  # every seed gave the same difference: certain, unless it is 0
        p = 1.0 if mean == 0 else 0.0
    return Paired(mean=mean, n=int(d.size), std=std, low=mean - half, high=mean + half, p=p,
                  confidence=confidence)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values: the i-th smallest becomes
    ``max over j <= i of min(1, (m - j) p_(j))``, ``m`` the family's size.

    Parameters
    ----------
    pvalues : sequence of float or None
        The family's raw p-values; None (one seed: no test) counts as p = 1 in the family.

    Returns
    -------
    list of float or None
        The adjusted p-values in the same order (None where the raw one is None).

    Examples
    --------
    >>> from clusterclip.verdict import holm
    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (1.0 if pvalues[i] is None else pvalues[i], i))
    out: list[float | None] = [None] * m
    running = 0.0
    for rank, i in enumerate(order):
        p = pvalues[i]
        running = max(running, min(1.0, (m - rank) * (1.0 if p is None else p)))
        out[i] = None if p is None else running
    return out


#: The power :func:`seeds_to_resolve` plans for: the chance that the interval excludes 0
#: when the true difference is the one observed.
POWER = 0.8


def seeds_to_resolve(p: Paired, min_effect: float, limit: int = 1000) -> int | None:
    """The fewest seeds that would resolve the comparison at the spread ``p`` showed:
    either its interval (at ``p``'s confidence, 95% or the per-look level of ``--seeds
    auto``) narrows below ``min_effect`` (``t(0.975, n - 1) s / sqrt(n) < min_effect`` at
    95%: then any difference left is smaller than the effect of interest), or its paired t
    test has at least 80% power against the observed mean (the interval would exclude 0 in
    4 of 5 repeats if the true difference were ``p.mean``; exact, from the noncentral t
    distribution).

    Parameters
    ----------
    p : Paired
        The comparison so far.
    min_effect : float
        The smallest effect of interest.
    limit : int
        The most seeds considered.

    Returns
    -------
    int or None
        None for one seed (no spread) or beyond ``limit``.

    Examples
    --------
    >>> from clusterclip.verdict import paired_difference, seeds_to_resolve
    >>> seeds_to_resolve(paired_difference([-0.01, -0.03, 0.005]), 0.005)
    20
    """
    if p.std is None:
        return None
    for n in range(max(2, p.n), limit + 1):
        if _resolves(p, n, min_effect):
            return n
    return None


def _resolves(p: Paired, n: int, min_effect: float) -> bool:
    from scipy import stats

    se = p.std / math.sqrt(n)
    t = float(stats.t.ppf(0.5 + p.confidence / 2, n - 1))
    if t * se < min_effect:
        return True
    if se == 0:
        return p.mean != 0
    nc = abs(p.mean) / se
    # both tails as upper tails (P(T < -t | nc) = P(T > t | -nc)): scipy's nct.cdf far in
    # the lower tail of a large noncentrality returns NaN, which no power compares above
    return float(stats.nct.sf(t, n - 1, nc) + stats.nct.sf(t, n - 1, -nc)) >= POWER


@dataclass(frozen=True)
class SeedRule:
    """The stop rule of ``--seeds auto``, fixed before any run: start with ``start``
    seeds, add ``step`` at a time until the primary comparison is resolved (its interval
    excludes 0, or its half-width is below ``min_effect``, the smallest effect of interest)
    or ``cap`` seeds have run.

    Each batch is a look at the primary, so the rule holds each look to ``level``, 5%
    split evenly over the planned looks (Bonferroni): the chance that a zero difference is
    called measurable at any look is then at most 5%, whichever look the rule stops at.

    Parameters
    ----------
    start : int
        The seeds of the first batch.
    step : int
        The seeds each later batch adds.
    cap : int
        The most seeds.
    min_effect : float
        The smallest effect of interest (in the loss's unit).

    Examples
    --------
    >>> from clusterclip.verdict import SeedRule
    >>> rule = SeedRule(start=3, step=3, cap=12)
    >>> rule.counts, rule.looks, rule.level
    ((3, 6, 9, 12), 4, 0.0125)
    >>> rule.next_count([0.02, -0.03, 0.01])
    6
    """

    start: int = 3
    step: int = 3
    cap: int = 12
    min_effect: float = 0.005

    @property
    def counts(self) -> tuple[int, ...]:
        """The seed counts the rule may look at: ``start``, ``start + step``, ... up to
        ``cap`` (the last one ``cap``)."""
        counts = [self.start]
        while counts[-1] < self.cap:
            counts.append(min(self.cap, counts[-1] + self.step))
        return tuple(counts)

    @property
    def looks(self) -> int:
        """The planned looks that can call a difference measurable: the ``counts`` of
        two seeds or more (one seed gives no interval, so it spends none of the 5%)."""
        return max(1, sum(n >= 2 for n in self.counts))

    @property
    def level(self) -> float:
        """The level of each look and of the verdict the rule leads to: ``LEVEL /
        looks`` (0.0125, a 98.75% interval, for 4 looks)."""
        return LEVEL / self.looks

    def paired(self, diffs: Sequence[float]) -> Paired:
        """The primary's differences at the rule's level
        ([`paired_difference`][clusterclip.verdict.paired_difference]).

        Parameters
        ----------
        diffs : sequence of float
            The primary's per-seed differences so far.

        Returns
        -------
        Paired
        """
        return paired_difference(diffs, self.level)

    def resolved(self, diffs: Sequence[float]) -> bool:
        """Whether the primary is resolved.

        Parameters
        ----------
        diffs : sequence of float
            The primary's per-seed differences so far.

        Returns
        -------
        bool
            Its interval at ``level`` excludes 0 or its half-width is below
            ``min_effect``.
        """
        p = self.paired(diffs)
        return p.measurable or (p.detectable is not None and p.detectable < self.min_effect)

    def next_count(self, diffs: Sequence[float]) -> int | None:
        """The seed count to run next.

        Parameters
        ----------
        diffs : sequence of float
            The primary's per-seed differences so far.

        Returns
        -------
        int or None
            The next count (at most ``cap``), or None to stop.
        """
        n = len(diffs)
        if n >= self.cap or self.resolved(diffs):
            return None
        return min(self.cap, n + self.step)

    def simulate(self, draws: np.ndarray, level: float | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The rule run on many replicates at once, for its error rates and power: each
        row of ``draws`` is one experiment's per-seed differences of the primary, in seed
        order; the rule looks at them as ``next_count`` would.

        Parameters
        ----------
        draws : ndarray
            ``float[R, cap]``: R replicates of ``cap`` per-seed differences.
        level : float, optional
            The level of each look; default ``level`` (``LEVEL`` gives the rule
            uncorrected for its looks, for comparison).

        Returns
        -------
        seeds : ndarray
            ``int[R]``: the seed count each replicate stopped at.
        measurable : ndarray
            ``bool[R]``: whether its primary's interval excluded 0 there.

        Examples
        --------
        >>> import numpy as np
        >>> from clusterclip.verdict import SeedRule
        >>> rule = SeedRule()
        >>> null = np.random.default_rng(0).normal(0.0, 1.0, (20000, rule.cap))
        >>> float(rule.simulate(null)[1].mean()) <= 0.05
        True
        """
        from scipy import stats

        level = self.level if level is None else level
        d = np.asarray(draws, dtype=np.float64)
        seeds = np.zeros(d.shape[0], dtype=np.int64)
        measurable = np.zeros(d.shape[0], dtype=bool)
        going = np.ones(d.shape[0], dtype=bool)
        for n in self.counts:
            called = np.zeros(d.shape[0], dtype=bool)
            done = np.full(d.shape[0], n >= self.cap)
            if n >= 2:
                x = d[:, :n]
                mean = x.mean(axis=1)
                half = float(stats.t.ppf(1 - level / 2, n - 1)) * (
                    x.std(axis=1, ddof=1) / math.sqrt(n))
                called = (mean - half > 0) | (mean + half < 0)
                done |= called | (half < self.min_effect)
            stop = going & done
            seeds[stop], measurable[stop] = n, called[stop]
            going &= ~done
        return seeds, measurable

    def describe(self, primary: str, unit: str = "nats per token", *,
                 option: str) -> str:
        """The rule in words, for results.md.

        Parameters
        ----------
        primary : str
            The primary question in words.
        unit : str
            The unit of ``min_effect``.
        option : str
            The option whose ``auto`` it is (the caller's command line's: ``--seeds``
            of ``clusterclip experiment``).

        Returns
        -------
        str
        """
        text = (f"seeds chosen by the rule fixed before any run ({option} auto): start with "
                f"{self.start}, add {self.step} at a time until the primary question "
                f"({primary}) is resolved (its paired {percent(1 - self.level)} interval "
                f"excludes 0, or its half-width is below {self.min_effect:g} {unit}, the "
                f"smallest effect of interest), at most {self.cap}")
        if self.looks == 1:
            return text
        counts = [str(n) for n in self.counts if n >= 2]
        return text + (
            f"; {percent(1 - self.level)} because the {percent(LEVEL)} is split evenly over "
            f"the {self.looks} planned looks at the primary (at {', '.join(counts[:-1])} and "
            f"{counts[-1]} seeds; Bonferroni), so that a zero difference is called measurable "
            f"at any look with probability at most {percent(LEVEL)}; every interval and test "
            f"of this verdict is at that level")

    def to_dict(self) -> dict[str, Any]:
        """The rule as a JSON-ready dict, with its planned ``looks`` and per-look ``level``
        (``of`` rebuilds it).

        Returns
        -------
        dict
        """
        return {"start": self.start, "step": self.step, "cap": self.cap,
                "min_effect": self.min_effect, "looks": self.looks, "level": self.level}

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> SeedRule:
        """The rule of a ``to_dict`` (``looks`` and ``level`` follow from the rest; a
        record written before they were kept has none).

        Parameters
        ----------
        d : mapping
            ``start``, ``step``, ``cap``, ``min_effect``.

        Returns
        -------
        SeedRule
        """
        return cls(start=d["start"], step=d["step"], cap=d["cap"], min_effect=d["min_effect"])


def compare_family(diffs: Mapping[tuple[str, str, str], Sequence[float]],
                   primary: tuple[str, str, str], *, reference: str = "random",
                   min_effect: float = SeedRule.min_effect, looks: int = 1) -> dict[str, Any]:
    """A family of paired comparisons with one declared primary, and its decision.

    Parameters
    ----------
    diffs : mapping
        ``{(arm, baseline, metric): per-seed differences arm - baseline}`` (a loss: below 0
        favours ``arm``), paired by seed; the order of the mapping is the order of
        preference among measurable secondaries (the first metric first).
    primary : tuple
        The ``(arm, baseline, metric)`` declared before the runs; one of ``diffs``.
    reference : str
        The baseline an arm must beat to be recommended (comparisons against another
        baseline count in the family but recommend nothing).
    min_effect : float
        The smallest effect of interest: a primary whose interval's half-width is below it
        (and includes 0) is ``resolved-equivalent``.
    looks : int
        The planned looks at the primary that chose the seeds (``SeedRule.looks`` under
        ``--seeds auto``; 1 for a fixed seed count): every test, interval and Holm's
        correction is held to ``level = 0.05 / looks`` (5% over all the looks).

    Returns
    -------
    dict
        JSON-ready: ``primary`` ({arm, baseline, metric}), ``family`` (the number of
        comparisons weighed), ``level`` (0.05 / looks), ``looks`` (when above 1),
        ``min_effect``, ``seeds`` (the most paired seeds), ``comparisons`` (one dict per
        comparison, in order: arm, baseline, metric, primary, mean, n, std, low, high (the
        paired-t ``1 - level`` interval: 95% at one look), detectable, p, p_holm,
        measurable: the primary by its interval alone, a secondary by p_holm < level, and
        ``confidence`` when it is not 95%), ``category`` (``resolved-better``: an arm is
        recommended, on the measurable primary or a Holm-measurable secondary against
        ``reference``; ``resolved-worse``: the primary arm is measurably worse and nothing
        is recommended; ``resolved-equivalent``; ``not resolved``), ``recommend`` (the
        comparison an arm is recommended on, or None), ``seeds_to_resolve`` (for the
        primary: [`seeds_to_resolve`][clusterclip.verdict.seeds_to_resolve]) and ``agree``
        (per metric where every arm against the
        reference points the same way by more than ``min_effect``, at least two arms: metric,
        low and high of their means).

    Examples
    --------
    >>> from clusterclip.verdict import compare_family
    >>> fam = compare_family({("paced", "random", "macro"): [-0.01, -0.02, -0.015],
    ...                       ("paced", "random", "tail"): [0.01, -0.03, 0.02]},
    ...                      ("paced", "random", "macro"))
    >>> fam["category"], fam["recommend"]["metric"], fam["family"]
    ('resolved-better', 'macro', 2)
    """
    if primary not in diffs:
        raise ValueError(f"primary {primary} is not among the comparisons")
    level = LEVEL / looks
    pairs = {k: paired_difference(v, level) for k, v in diffs.items()}
    comps = _comparisons(pairs, primary, level)
    prim = next(c for c in comps if c["primary"])
    better = [c for c in comps if c["measurable"] and c["mean"] < 0
              and c["baseline"] == reference]
    metrics = list(dict.fromkeys(k[2] for k in diffs))
    better.sort(key=lambda c: (not c["primary"], metrics.index(c["metric"]), c["mean"]))
    recommend = better[0] if better else None
    pp = pairs[primary]
    if recommend is not None:
        category = RESOLVED_BETTER
    elif prim["measurable"]:
        category = RESOLVED_WORSE
    elif pp.detectable is not None and pp.detectable < min_effect:
        category = RESOLVED_EQUIVALENT
    else:
        category = NOT_RESOLVED
    return {"primary": dict(zip(("arm", "baseline", "metric"), primary, strict=True)),
            "family": len(comps), "level": level, **({"looks": looks} if looks > 1 else {}),
            "min_effect": min_effect, "seeds": max(p.n for p in pairs.values()),
            "comparisons": comps, "category": category, "recommend": recommend,
            "seeds_to_resolve": seeds_to_resolve(pp, min_effect),
            "agree": _agree(comps, reference, min_effect)}


def _comparisons(pairs: Mapping[tuple[str, str, str], Paired], primary: tuple[str, str, str],
                 level: float) -> list[dict[str, Any]]:
    """Each comparison's entry: its ``Paired``, Holm-adjusted p over the family, and
    measurable (the primary by its interval, a secondary by its adjusted p below
    ``level``)."""
    comps = []
    for (key, p), adj in zip(pairs.items(), holm([p.p for p in pairs.values()]), strict=True):
        first = key == primary
        comps.append({"arm": key[0], "baseline": key[1], "metric": key[2], "primary": first,
                      **p.to_dict(), "p_holm": adj,
                      "measurable": p.measurable if first else (adj is not None and
                                                                 adj < level)})
    return comps


def _agree(comps: list[dict[str, Any]], reference: str, min_effect: float
           ) -> list[dict[str, Any]]:
    """The metrics on which every arm's mean difference to ``reference`` points the same
    way by more than ``min_effect`` (at least two arms)."""
    out = []
    for metric in dict.fromkeys(c["metric"] for c in comps):
        means = [c["mean"] for c in comps if c["metric"] == metric
                 and c["baseline"] == reference]
        if len(means) >= 2 and (all(m < -min_effect for m in means) or
                                all(m > min_effect for m in means)):
            out.append({"metric": metric, "low": min(means), "high": max(means)})
    return out


def primary_of(family: Mapping[str, Any]) -> dict[str, Any]:
    """The primary comparison's entry of a :func:`compare_family` result."""
    return next(c for c in family["comparisons"] if c["primary"])


def looks_words(family: Mapping[str, Any]) -> str:
    """The level of a family chosen over several looks, in words (``tested at 1.25%: 5%
    over 4 planned looks``); empty for one look.

    Parameters
    ----------
    family : mapping
        A :func:`compare_family` result.

    Returns
    -------
    str
    """
    looks = family.get("looks", 1)
    if looks == 1:
        return ""
    return f"tested at {percent(family['level'])}: {percent(LEVEL)} over {looks} planned looks"


def _significance(c: Mapping[str, Any], family: Mapping[str, Any]) -> str:
    looks = looks_words(family)
    if c["primary"]:
        text = f"p = {c['p']:.2g}, the primary question"
    else:
        text = f"Holm-adjusted p = {c['p_holm']:.2g} over {family['family']} comparisons"
    return text + (f", {looks}" if looks else "")


def _with_p(c: Mapping[str, Any], family: Mapping[str, Any]) -> str:
    p = Paired.of(c)
    return (f"{p.mean:+.3f} ({percent(p.confidence)} CI {p.low:+.3f} to {p.high:+.3f}; "
            f"{_significance(c, family)})")


def first_line(family: Mapping[str, Any], *, names: Mapping[str, str], rerun: str,
               runs_per_seed: int, how: Mapping[str, str] | None = None,
               cost: str | None = None, arms: str = "the strategies", then: str = "",
               seconds_per_run: float | None = None, cap: int | None = None) -> str:
    """The decision in one line, from a
    [`compare_family`][clusterclip.verdict.compare_family] result.

    Parameters
    ----------
    family : mapping
        The result of ``compare_family``.
    names : mapping
        Words for each metric (``macro`` -> ``macro held-out loss``).
    rerun : str
        The option that sets the seeds (``--seeds``).
    runs_per_seed : int
        The runs one more seed costs.
    how : mapping, optional
        Words after an arm's name (`` sampling``).
    cost : str, optional
        The metric whose difference is a recommendation's price.
    arms : str
        What the arms are called (``the strategies``).
    then : str
        Text before the final period of a recommendation.
    seconds_per_run : float, optional
        Measured seconds of one run: the time a rerun would take is added (the printout's;
        the files keep no timing).
    cap : int, optional
        The cap of ``--seeds auto``, when it chose the seeds.

    Returns
    -------
    str
        ``Use `arm` ...`` (``resolved-better``), ``Keep random sampling: ...``
        (``resolved-worse``, ``resolved-equivalent``), ``Not resolved at N seeds: ...``,
        or ``No decision yet`` with one seed.

    Examples
    --------
    >>> from clusterclip.verdict import compare_family, first_line
    >>> fam = compare_family({("paced", "random", "macro"): [0.01, -0.02, 0.012]},
    ...                      ("paced", "random", "macro"))
    >>> first_line(fam, names={"macro": "macro"}, rerun="--seeds", runs_per_seed=2)[:54]
    'Not resolved at 3 seeds: the smallest difference they '
    """
    how = how or {}
    rec, prim = family["recommend"], primary_of(family)
    if family["seeds"] < 2:
        return (f"No decision yet: with one seed no interval can be given; rerun with "
                f"{rerun} 3 or more.")
    if rec is not None:
        goal = GOALS.get(rec["metric"], names[rec["metric"]])
        text = (f"Use `{rec['arm']}`{how.get(rec['arm'], '')} if {goal} is what matters: "
                f"{_with_p(rec, family)} against {rec['baseline']} sampling")
        price = next((c for c in family["comparisons"] if c["arm"] == rec["arm"] and
                      c["baseline"] == rec["baseline"] and c["metric"] == cost), None)
        if price is not None and cost != rec["metric"]:
            text += f", at {Paired.of(price).interval(3)} on {GOALS.get(cost, names[cost])}"
        if not rec["primary"]:
            text += (f"; the primary question (`{prim['arm']}` on {names[prim['metric']]}) "
                     f"is {_primary_state(family)}")
        return text + f"{then}."
    if family["category"] == RESOLVED_WORSE:
        return (f"Keep {prim['baseline']} sampling: `{prim['arm']}` is measurably worse on "
                f"{names[prim['metric']]}, the primary question: {_with_p(prim, family)}; "
                "nothing else beats it measurably.")
    if family["category"] == RESOLVED_EQUIVALENT:
        return (f"Keep {prim['baseline']} sampling: `{prim['arm']}` differs from it by less "
                f"than the smallest effect of interest ({family['min_effect']:g}) on "
                f"{names[prim['metric']]}, the primary question: "
                f"{Paired.of(prim).interval(3)}; nothing else beats it measurably.")
    return _not_resolved(family, names, rerun, runs_per_seed, arms, seconds_per_run, cap)


def _primary_state(family: Mapping[str, Any]) -> str:
    """The primary's state when a secondary is recommended (so it is not measurably
    better)."""
    prim = primary_of(family)
    state = "measurably worse" if prim["measurable"] else "not resolved"
    return f"{state} ({Paired.of(prim).interval(3, inside=True)})"


def _not_resolved(family: Mapping[str, Any], names: Mapping[str, str], rerun: str,
                  runs_per_seed: int, arms: str, seconds_per_run: float | None,
                  cap: int | None) -> str:
    """``Not resolved at 3 seeds: the smallest difference they could detect on macro is
    0.012 (...); <arms> all point the same way on tail (-0.020 to -0.024). Run with
    --seeds 10 (21 more runs) to resolve it.``, and with ``seconds_per_run`` the minutes
    that would take."""
    prim, n = primary_of(family), family["seeds"]
    notes = [f"the cap of {rerun} auto"] if cap is not None and n >= cap else []
    notes += [looks_words(family)] if family.get("looks", 1) > 1 else []
    at = f"{n} seeds" + (f" ({'; '.join(notes)})" if notes else "")
    text = (f"Not resolved at {at}: the smallest difference they could detect on "
            f"{names[prim['metric']]} is {prim['detectable']:.3f} (`{prim['arm']}` − "
            f"{prim['baseline']} {Paired.of(prim).interval(3, inside=True)})")
    agree = [f"{names[a['metric']]} ({a['low']:+.3f} to {a['high']:+.3f})"
             for a in family["agree"]]
    if agree:
        text += f"; {arms} all point the same way on " + " and ".join(agree)
    need = family["seeds_to_resolve"]
    if need is None:
        return text + "; more seeds than are worth running would be needed to resolve it."
    more = (need - n) * runs_per_seed
    text += f". Run with {rerun} {need} ({more} more runs) to resolve it."
    if seconds_per_run:  # the printout's: the files keep no timing
        minutes = max(1, round(more * seconds_per_run / 60))
        text += (f" That is about {minutes} minute{'s' if minutes != 1 else ''} at "
                 f"the {seconds_per_run:.0f} s per run measured here.")
    return text


def limits_line(model: str) -> str:
    """What the verdict rests on and what it cannot tell, for beside the decision
    (``model``: the proxy model in words, :func:`clusterclip.lm.config.describe_model`)."""
    return (f"This verdict rests on {model}: it cannot tell how a larger "
            "model, or one reading whole documents, would rank these mixtures.")
