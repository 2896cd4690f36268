"""The mixture predictor on a published swarm: RegMix's 512 proxies and 256 held-out runs.

Fits on n of the 512 training runs (5 seeded random subsets per n; all 512 once) and ranks
the 256 held-out runs on the objective (RegMix's: Pile-CC validation loss). Per predictor
and n: the Spearman rank correlation of predicted and true held-out loss, and the regret
of the predicted best (its true loss minus the best held-out run's), mean and standard
deviation over the subsets. Side by side, in the same run and on the same subsets:

- ``clusterclip``: :class:`clusterclip.search.predictor.Predictor` on the features
  ``clusterclip search fit`` gives it (the square root of each domain's weight);
- ``RegMix LightGBM``: ``lightgbm.LGBMRegressor`` with RegMix's settings (its
  ``regression.ipynb``: gbdt, objective regression, 1,000 iterations, learning rate 0.01,
  seed 42) on the raw weights. RegMix stops early on a validation split after 3 rounds
  without improvement; here there is no split to spare at n = 24, so all 1,000 rounds run;
- ``Olmix log-linear``: Olmix's default law, ``L(r) = exp(c) + exp(t . r)``, fitted by a
  Huber loss (delta 0.02) from several starts (``log c`` on a grid from -2 to 1.5, ``t``
  small, negative on the objective's own domain), each by L-BFGS.

The held-out 256 are only ever predicted, never fitted on. Needs the ``search`` extra and
``lightgbm`` (an optional benchmark dependency: the ``bench`` extra, or ``pip install
lightgbm``).

    python benchmarks/bench_swarm.py [--data tests/data/regmix] [--sizes 24,48,96,512]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from clusterclip.search.predictor import Predictor
from clusterclip.search.swarm import read_objective, read_ratios

OBJECTIVE = "metric/the_pile_pile_cc_val_loss"
OWN_DOMAIN = "train_the_pile_pile_cc"
DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "regmix"


def load(data: Path, split: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    r = read_ratios(data / f"ratios_1m_{split}.csv")
    _, y = read_objective(data / f"metrics_1m_{split}.csv", [OBJECTIVE])
    keep = [i for i, rid in enumerate(r.ids) if rid in y]
    return r.weights[keep], np.array([y[r.ids[i]] for i in keep]), list(r.columns)


def ours(X: np.ndarray, y: np.ndarray, Xt: np.ndarray) -> np.ndarray:
    return Predictor().fit(np.sqrt(X), y).predict(np.sqrt(Xt))[0]


def lightgbm(X: np.ndarray, y: np.ndarray, Xt: np.ndarray) -> np.ndarray:
    import lightgbm as lgb

    model = lgb.LGBMRegressor(boosting_type="gbdt", objective="regression", n_estimators=1000,
                              learning_rate=1e-2, random_state=42, verbosity=-1)
    return model.fit(X, y).predict(Xt)


def loglinear(X: np.ndarray, y: np.ndarray, Xt: np.ndarray, own: int) -> np.ndarray:
    rng = np.random.default_rng(42)
    delta = 0.02

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        e = np.exp(np.clip(X @ p[1:], -50, 50))
        r = np.exp(p[0]) + e - y
        small = np.abs(r) <= delta
        h = np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))
        dr = np.where(small, r, delta * np.sign(r))
        grad = np.concatenate([[np.sum(dr) * np.exp(p[0])], X.T @ (dr * e)])
        return float(h.sum()), grad

    best = (np.inf, None)
    for log_c in np.linspace(-2, 1.5, 8):
        for _ in range(2):
            t = rng.random(X.shape[1]) * 0.1
            t[own] = -rng.random()
            res = optimize.minimize(loss, np.concatenate([[log_c], t]), jac=True,
                                    method="L-BFGS-B", options={"maxiter": 200})
            if res.fun < best[0]:
                best = (res.fun, res.x)
    p = best[1]
    return np.exp(p[0]) + np.exp(np.clip(Xt @ p[1:], -50, 50))


def score(pred: np.ndarray, yt: np.ndarray) -> tuple[float, float]:
    """Spearman (0 for a constant prediction: it ranks nothing) and the regret of the
    predicted best (the first row among equal predictions)."""
    rho = 0.0 if np.ptp(pred) == 0 else float(stats.spearmanr(pred, yt).statistic)
    return rho, float(yt[int(np.argmin(pred))] - yt.min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--sizes", default="24,48,96,512")
    ap.add_argument("--subsets", type=int, default=5)
    args = ap.parse_args()
    X, y, cols = load(args.data, "train")
    Xt, yt, cols_t = load(args.data, "test")
    assert cols == cols_t
    own = cols.index(OWN_DOMAIN)
    models = {"clusterclip": ours, "RegMix LightGBM": lightgbm,
              "Olmix log-linear": lambda a, b, c: loglinear(a, b, c, own)}
    print(f"train {len(y)} runs, held out {len(yt)}; objective {OBJECTIVE}; best held-out "
          f"loss {yt.min():.4f}, median {np.median(yt):.4f}")
    print("| n | predictor | Spearman (mean ± sd) | regret (mean ± sd) | fit s (mean) |")
    print("|---:|---|---|---|---:|")
    for n in map(int, args.sizes.split(",")):
        subsets = ([np.arange(len(y))] if n >= len(y) else
                   [np.sort(np.random.default_rng([n, s]).choice(len(y), n, replace=False))
                    for s in range(args.subsets)])
        for name, fit in models.items():
            got, secs = [], []
            for idx in subsets:
                t0 = time.perf_counter()
                pred = fit(X[idx], y[idx], Xt)
                secs.append(time.perf_counter() - t0)
                got.append(score(pred, yt))
            rho, regret = np.array(got).T
            print(f"| {min(n, len(y))} | {name} | {rho.mean():.3f} ± {rho.std():.3f} | "
                  f"{regret.mean():.4f} ± {regret.std():.4f} | {np.mean(secs):.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
