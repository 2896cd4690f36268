"""The predictor: a regression of the proxies' val objective on their mixtures.

scikit-learn's Gaussian-process regressor: a Matern kernel with one length
scale per feature over the candidate features of
:meth:`~clusterclip.search.space.SearchSpace.features`, plus a white-noise
term that absorbs the seed-to-seed noise of one proxy, fitted on the finished
proxies. With tens of proxies, far fewer than RegMix's 512, a smooth regressor
with a fitted noise level pools neighbouring runs where a tree ensemble
(LightGBM's default leaves hold 20 points) would barely split. Deterministic:
the kernel's hyperparameters are fitted by L-BFGS from a fixed start, no
random restarts. Above :data:`HYPER_ROWS` proxies the hyperparameters are fitted on
:data:`HYPER_ROWS` of them (evenly spaced in the order of their objective), then the
regressor is fitted on all with those kept: the likelihood's gradient costs O(n^2) per
length scale, so on RegMix's 512 proxies a full fit took 40 s, this one a few seconds, for
the same held-out rank correlation (0.993 against 0.994: benchmarks/bench_swarm.py).

:func:`loo_rank_correlation` refits it without each proxy in turn (same kernel)
and ranks the held-out predictions against what was observed (Spearman): near
0 means the search learned nothing that carries to an unseen mixture.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

#: Below this many finished proxies no predictor is fitted (the search then keeps the
#: best observed one).
MIN_FIT = 4
#: The bounds of each length scale of the kernel (of the standardised features).
LENGTH_SCALE_BOUNDS = (1e-2, 1e2)
#: Above this many proxies the kernel's hyperparameters are fitted on this many of them.
HYPER_ROWS = 128


class Predictor:
    """``fit(X, y)``; ``predict(X) -> (mean, std)``; ``describe()`` for results.json."""

    def __init__(self) -> None:
        self._gp: Any = None
        self._y_mean = 0.0
        self._y_scale = 1.0

    def fit(self, X: np.ndarray, y: np.ndarray, kernel: Any = None) -> Predictor:
        """Fit on proxies ``X`` (features) with objectives ``y``; ``kernel``: a fitted
        kernel to keep as it is (no hyperparameter search), else one is fitted."""
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.shape[0] < MIN_FIT:
            raise ValueError(f"the predictor needs at least {MIN_FIT} proxies")
        # standardised targets: the kernel's bounds then mean the same for any loss scale
        self._y_mean = float(y.mean())
        self._y_scale = float(y.std()) or 1.0
        if kernel is None and X.shape[0] > HYPER_ROWS:
            ranks = np.lexsort((np.arange(y.size), y))
            rows = ranks[np.linspace(0, y.size - 1, HYPER_ROWS).round().astype(int)]
            kernel = Predictor().fit(X[rows], y[rows])._gp.kernel_
        fixed = kernel is not None
        if kernel is None:
            # one length scale per feature (ARD): the clip and the timing can matter much
            # more, or less, than a group's weight
            kernel = (ConstantKernel(1.0, (1e-2, 1e2))
                      * Matern(length_scale=np.ones(X.shape[1]),
                               length_scale_bounds=LENGTH_SCALE_BOUNDS, nu=2.5)
                      + WhiteKernel(noise_level=0.1, noise_level_bounds=(1e-4, 1e1)))
        self._gp = GaussianProcessRegressor(kernel=kernel, normalize_y=False,
                                            optimizer=None if fixed else "fmin_l_bfgs_b",
                                            n_restarts_optimizer=0, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self._gp.fit(X, (y - self._y_mean) / self._y_scale)
        return self

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, std = self._gp.predict(np.asarray(X, dtype=np.float64), return_std=True)
        return mean * self._y_scale + self._y_mean, std * self._y_scale

    def loo_closed_form(self) -> np.ndarray:
        """Each training proxy's objective as predicted without it, the kernel and the
        standardisation kept (Rasmussen and Williams, eq. 5.12: ``y_i - [K^-1 y]_i /
        [K^-1]_ii``): one factorisation instead of n refits."""
        from scipy.linalg import cho_solve

        gp = self._gp
        inv = cho_solve((gp.L_, True), np.eye(gp.L_.shape[0]))
        ys = gp.y_train_.ravel()
        loo = ys - gp.alpha_.ravel() / np.diag(inv)
        return loo * self._y_scale + self._y_mean

    def describe(self) -> dict[str, Any]:
        """The fitted kernel (its hyperparameters) and the share of the variance it calls
        noise."""
        k = self._gp.kernel_
        signal = float(k.k1.k1.constant_value)
        noise = float(k.k2.noise_level)
        return {"model": "sklearn GaussianProcessRegressor", "kernel": str(k),
                "length_scales": np.atleast_1d(k.k1.k2.length_scale).tolist(),
                "noise_share": noise / (signal + noise)}


def loo_predictions(X: np.ndarray, y: np.ndarray, fitted: Predictor | None = None
                    ) -> np.ndarray:
    """Each proxy's objective as predicted by a predictor fitted on all the others, with
    the kernel's hyperparameters of the fit on all of them (the usual GP leave-one-out:
    Rasmussen and Williams, section 5.4.2); above :data:`HYPER_ROWS` proxies in closed
    form (:meth:`Predictor.loo_closed_form`), the standardisation of all kept."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    full = Predictor().fit(X, y) if fitted is None else fitted  # ``fitted``: on X, y
    if y.size > HYPER_ROWS:
        return full.loo_closed_form()
    kernel = full._gp.kernel_
    out = np.empty(y.size)
    for i in range(y.size):
        keep = np.arange(y.size) != i
        out[i] = Predictor().fit(X[keep], y[keep], kernel=kernel).predict(X[i:i + 1])[0][0]
    return out


def loo_rank_correlation(X: np.ndarray, y: np.ndarray, fitted: Predictor | None = None
                         ) -> tuple[float | None, np.ndarray]:
    """``(spearman, predictions)``: the leave-one-out predictions and their rank
    correlation with ``y`` (None with fewer than ``MIN_FIT + 1`` proxies or constant
    values)."""
    from scipy import stats

    y = np.asarray(y, dtype=np.float64)
    if y.size < MIN_FIT + 1:
        return None, np.full(y.size, np.nan)
    pred = loo_predictions(X, y, fitted)
    if np.ptp(y) == 0 or np.ptp(pred) == 0:
        return None, pred
    return float(stats.spearmanr(pred, y).statistic), pred
