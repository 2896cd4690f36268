"""The ``--seeds auto`` stop rule's error rate and power, corrected for its looks or not.

    python benchmarks/bench_seed_rule.py                  # 20,000 experiments per row
    python benchmarks/bench_seed_rule.py --reps 5000      # a quick look

Simulated experiments: per-seed differences of the primary are normal (sd ``--sd``, by
default 0.01 nats per token, about the spread of the demo's macro differences) with a true
mean of 0, 0.5, 1 or 1.5 sd; the rule (start 3, add 3, cap 12, smallest effect of
interest ``--min-effect``) looks after 3, 6, 9 and 12 seeds. Rows, side by side on the
same draws:

* uncorrected: each look at 5% (95% intervals), the rule before the correction;
* bonferroni: each look at 5% / 4 = 1.25% (98.75% intervals), the rule ``--seeds auto``
  runs (:attr:`clusterclip.verdict.SeedRule.level`);
* pocock: one per-look level fitted here so that the null rate is 5% for this design (the
  peer: a Pocock-style constant boundary for the t statistics, fitted by bisection on
  separate null draws with no early stop for a narrow interval, the worst case).

Reported per row and true difference: the share of experiments whose primary was called
measurable (for a true difference, in its direction), the mean seeds run, and a Wald 95%
interval of the share. Bonferroni and pocock are compared paired on the same draws (the
difference of their calls per experiment), Holm over the four true differences.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from clusterclip.verdict import LEVEL, SeedRule, holm  # noqa: E402

EFFECTS = (0.0, 0.5, 1.0, 1.5)  # in per-seed standard deviations


def fit_pocock(rule: SeedRule, null: np.ndarray) -> float:
    """The one per-look level at which the rule, with no stop for a narrow interval,
    calls ``null`` measurable in 5% of the experiments (bisection)."""
    worst = SeedRule(rule.start, rule.step, rule.cap, min_effect=0.0)
    low, high = rule.level, LEVEL
    for _ in range(30):
        mid = (low + high) / 2
        if worst.simulate(null, level=mid)[1].mean() > LEVEL:
            high = mid
        else:
            low = mid
    return low


def share(x: np.ndarray) -> str:
    m = float(x.mean())
    half = 1.96 * math.sqrt(m * (1 - m) / x.size)
    return f"{m:.4f} ({max(0.0, m - half):.4f} to {min(1.0, m + half):.4f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20_000)
    ap.add_argument("--sd", type=float, default=0.01)
    ap.add_argument("--min-effect", type=float, default=SeedRule.min_effect)
    ap.add_argument("--seed", type=int, default=37)
    args = ap.parse_args()

    rule = SeedRule(min_effect=args.min_effect)
    rng = np.random.default_rng(args.seed)
    pocock = fit_pocock(rule, rng.normal(0.0, 1.0, (args.reps, rule.cap)))
    levels = {"uncorrected": LEVEL, "bonferroni": rule.level, "pocock": pocock}
    print(f"rule: looks at {rule.counts} seeds, min_effect {rule.min_effect:g}, per-seed sd "
          f"{args.sd:g}, {args.reps:,} experiments per cell")
    print("per-look levels: " + ", ".join(f"{k} {v:.5f}" for k, v in levels.items()))
    print("\n| true difference | rule | called measurable (95% CI) | mean seeds |")
    print("|---|---|---|---|")
    calls: dict[tuple[float, str], np.ndarray] = {}
    for eff in EFFECTS:
        draws = rng.normal(-eff * args.sd, args.sd, (args.reps, rule.cap))
        for name, level in levels.items():
            seeds, called = rule.simulate(draws, level=level)
            if eff:  # in the direction of the true difference (below 0)
                at = draws.cumsum(axis=1)[np.arange(args.reps), seeds - 1]
                called = called & (at < 0)
            calls[(eff, name)] = called
            print(f"| {eff:g} sd | {name} | {share(called)} | {seeds.mean():.2f} |")
    diffs, ps = [], []
    for eff in EFFECTS:
        d = calls[(eff, "pocock")].astype(float) - calls[(eff, "bonferroni")]
        se = d.std(ddof=1) / math.sqrt(d.size)
        diffs.append((float(d.mean()), se))
        ps.append(1.0 if se == 0 else math.erfc(abs(d.mean()) / se / math.sqrt(2)))
    print("\npocock − bonferroni, share called measurable, paired on the same draws "
          "(95% CI; Holm over the 4 true differences):")
    for eff, (m, se), adj in zip(EFFECTS, diffs, holm(ps), strict=True):
        print(f"- {eff:g} sd: {m:+.4f} ({m - 1.96 * se:+.4f} to {m + 1.96 * se:+.4f}), "
              f"Holm-adjusted p {adj:.2g}")
    null_b = calls[(0.0, "bonferroni")].mean()
    null_u = calls[(0.0, "uncorrected")].mean()
    gains = [f"{m:+.3f} at {e:g} sd" for e, (m, _), a in zip(EFFECTS[1:], diffs[1:],
                                                            holm(ps)[1:], strict=True)
             if a < LEVEL]
    print(f"\nConclusion: uncorrected, the rule calls a zero difference measurable in "
          f"{null_u:.1%} of experiments; corrected by Bonferroni over its {rule.looks} looks, "
          f"in {null_b:.1%} ({'at most' if null_b <= LEVEL else 'above'} 5%). "
          + ("The fitted Pocock level resolves measurably more often: "
             + ", ".join(gains) + " of experiments." if gains else
             "The fitted Pocock level does not resolve measurably more often."))


if __name__ == "__main__":
    main()
