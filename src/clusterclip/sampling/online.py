"""``OnlineMixer``: cluster weights adapted during training from the model's own losses.

The mixer reads what the training loop already computes (each document's training
loss and its cluster) and, every ``every`` global positions, sets the sampler's
weights for the rest of the schedule through
[`set_weights`][clusterclip.sampling.ClusterClipSampler.set_weights], so the
repetition clip, the pacing and the resumable, rank-exact schedule are the
sampler's own. The method (``"ado"``) follows ADO (Jiang et al. 2024, *Adaptive
Data Optimization*): a power law of loss against samples seen, fitted per
cluster; see [`OnlineMixer`][clusterclip.sampling.online.OnlineMixer].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.sampling.spec import as_int
from clusterclip.sampling.stream import BaseSampler

METHODS = ("ado",)
#: Losses are summed as integers of 2**-20 nats: sums are exact, so the state does
#: not depend on how observations are split over ranks or in which order they add.
LOSS_SCALE = 1 << 20
MAX_LOSS = 1e6
#: Half-octave bins of (samples seen + 1): bin b holds the observations made when a
#: cluster had seen n samples with floor(2 log2(n + 1)) = b.
BINS = 64
#: Candidate irreducible losses, as fractions of the lowest binned mean loss.
EPS_GRID = (0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95)
MAX_ALPHA = 3.0
STATE_VERSION = 1


def torch_all_reduce(values: np.ndarray) -> np.ndarray:
    """Sum an int64 array over the ranks of the initialised ``torch.distributed`` group.

    The default ``reduce`` of [`OnlineMixer`][clusterclip.sampling.online.OnlineMixer].

    Parameters
    ----------
    values : numpy.ndarray
        This rank's int64 array (the same shape on every rank).

    Returns
    -------
    numpy.ndarray
        The element-wise sum over the ranks (one ``all_reduce``); ``values`` itself
        where ``torch.distributed`` is not initialised or has one rank.
    """
    from clusterclip import distributed as D

    if D.rank_and_world()[1] == 1:  # no group (never imports torch), or one rank
        return values
    import torch

    return D.all_reduce_sum(torch.from_numpy(np.ascontiguousarray(values, np.int64))).numpy()


class OnlineMixer:
    """Re-weighs a sampler's clusters during training from per-document losses.

    Call [`observe`][clusterclip.sampling.online.OnlineMixer.observe] after each
    training batch with the batch's cluster ids and per-document losses; every
    ``every`` global positions the mixer fits the losses and calls
    ``sampler.set_weights(weights, at=sampler.position)``.

    Parameters
    ----------
    sampler : ClusterClipSampler or ClusterClipTorchSampler
        The training sampler, strategy ``paced`` (or ``clusterclip``): the one the
        loop draws from.
    method : str
        ``"ado"`` (the only one; see Notes).
    every : int or None
        Re-weigh every this many global positions; default (None): 1/64 of the
        schedule (at least 1).
    seed : int
        Recorded in the state (a resumed run must pass the same); ``"ado"`` draws
        nothing at random.
    floor : float
        In [0, 1): the share of every re-weigh that stays on the prior, so cluster
        k keeps at least ``floor x prior_k / sum(prior)`` of the weight: no cluster
        starves.
    smoothing : float
        In [0, 1): the share of the previous weights kept at each re-weigh
        (ADO's moving average of the policy).
    prior : array_like or None
        (K,) weights >= 0 of the static schedule the mixer starts from and floors
        to; also what the plan minimises: sum_k prior_k L_k. Default: 1 for every
        cluster the sampler may draw (the balanced schedule: macro loss).
    pools : array_like or None
        (K,) int pool id >= 0 of each cluster: a cluster with too few observations
        for its own fit borrows its pool's exponent and floor (e.g. a coarse
        K-means of the cluster centroids). Default: one pool.
    min_count : int
        Observations (and at least 3 bins) a cluster or pool needs for its own fit.
    reduce : callable or None
        ``reduce(int64 array) -> int64 array``: the sum over ranks, called once
        per ``observe`` on every rank. Default: ``all_reduce`` over the initialised
        ``torch.distributed`` group, else nothing (one process).

    Raises
    ------
    InputError
        If the sampler has no clip (not ``paced`` or ``clusterclip``) or an option
        is out of range.

    Notes
    -----
    The method. For each cluster k the mixer keeps how many documents it has
    observed (n_k) and their summed losses in half-octave bins of n_k, and fits
    ADO's law L_k(n) = eps_k + beta_k (n + 1) ** -alpha_k (a weighted least
    squares of log(L - eps) on log(n + 1), eps from a grid of fractions of the
    lowest binned loss). A cluster with fewer than ``min_count`` observations or 3
    bins takes alpha and eps from its pool (the pooled bins; then from all
    clusters) and its level beta_k from its own observations. Where ADO samples in
    proportion to the fitted marginal gain, the mixer plans the R draws left: the
    split x >= 0, sum R, within the clip's room, that minimises
    sum_k prior_k L_k(n_k + x_k) under the fitted laws (equal marginal gains,
    by bisection on the multiplier: O(K log(1/tol))), because the paced sampler
    spreads a plan over the rest of the schedule. The new weights are
    ``(1 - floor) x / R + floor prior / sum(prior)``, then mixed with the previous
    ones by ``smoothing``. Until some cluster (or its pool) can be fitted, the
    weights stay the sampler's.

    Losses are summed as integers (2**-20 nats), so the state is exact: the same
    observations, in any split over ranks, give the same weights at the same
    positions, and ``state_dict`` / ``load_state_dict`` (plain JSON) resume to the
    uninterrupted schedule. Save the mixer's state with the sampler's.

    Examples
    --------
    >>> import numpy as np
    >>> from clusterclip import OnlineMixer
    >>> from clusterclip.sampling import ClusterClipSampler
    >>> labels = np.repeat(np.arange(4), 50)
    >>> sampler = ClusterClipSampler(labels, 400, strategy="paced", clip=4)
    >>> mixer = OnlineMixer(sampler, every=40)
    >>> it = iter(sampler)
    >>> for step in range(40):
    ...     idx = [next(it) for _ in range(8)]
    ...     k = labels[idx]
    ...     seen = mixer.counts[k] + 1.0
    ...     _ = mixer.observe(k, 1.0 + (k + 1) * seen ** -0.5)  # cluster 3 learns fastest
    >>> w = mixer.weights
    >>> bool(w[3] > w[0])
    True
    """

    def __init__(self, sampler: Any, *, method: str = "ado", every: int | None = None,
                 seed: int = 0, floor: float = 0.1, smoothing: float = 0.5,
                 prior: Any = None, pools: Any = None, min_count: int = 32,
                 reduce: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        inner = sampler if isinstance(sampler, BaseSampler) else getattr(sampler, "sampler",
                                                                          None)
        if not isinstance(inner, BaseSampler) or not hasattr(inner, "set_weights") \
                or inner.clip is None:
            raise InputError("OnlineMixer needs a ClusterClipSampler (or its torch adapter) "
                             "with strategy paced or clusterclip", params=("sampler",))
        if method not in METHODS:
            raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}",
                             params=("method",))
        self.sampler, self.method = inner, method
        T = inner.num_samples
        self.every = as_int("every", max(1, T // 64) if every is None else every, 1, None)
        self.seed = as_int("seed", seed, 0, None)
        self.floor = _fraction("floor", floor)
        self.smoothing = _fraction("smoothing", smoothing)
        self.min_count = as_int("min_count", min_count, 1, None)
        sizes = inner.cluster_sizes
        K = sizes.size
        drawable = (sizes > 0) & ~getattr(inner, "_unweighted", np.zeros(K, bool))
        self.prior = _prior(prior, drawable)
        self.pools = _pools(pools, K)
        self._reduce = torch_all_reduce if reduce is None else reduce
        self.counts = np.zeros(K, np.int64)
        self._bin_n = np.zeros((K, BINS), np.int64)
        self._bin_loss = np.zeros((K, BINS), np.int64)
        self.weights = self.prior / self.prior.sum()
        self.next_at = inner.position + self.every
        self.calls = 0

    # ------------------------------------------------------------------ observe
    def observe(self, clusters: Any, losses: Any) -> bool:
        """Record one batch's per-document training losses; re-weigh when due.

        Parameters
        ----------
        clusters : array_like
            (B,) cluster id of each document of the batch (``labels[indices]``).
        losses : array_like
            (B,) its training loss (e.g. mean token cross-entropy), finite, >= 0.

        Returns
        -------
        bool
            Whether this call set new weights on the sampler.

        Raises
        ------
        InputError
            If the arrays differ in length, a cluster id is out of range or a loss
            is not finite and >= 0.
        """
        k, fx = self._checked(clusters, losses)
        K = self.counts.size
        local = np.concatenate([np.bincount(k, minlength=K),
                                np.bincount(k, weights=fx.astype(np.float64),
                                            minlength=K).astype(np.int64)])
        total = np.asarray(self._reduce(local), np.int64)
        if total.shape != local.shape:
            raise InputError(f"reduce returned shape {total.shape}, not {local.shape}",
                             params=("reduce",))
        n, s = total[:K], total[K:]
        hit = np.flatnonzero(n)
        b = _bin_of(self.counts[hit])
        self._bin_n[hit, b] += n[hit]
        self._bin_loss[hit, b] += s[hit]
        self.counts += n
        pos = self.sampler.position
        if pos < self.next_at or pos >= self.sampler.num_samples:
            return False
        self.next_at = pos + self.every
        w = self.plan(pos)
        if w is None:
            return False
        self.sampler.set_weights(w, at=pos)
        self.weights, self.calls = w, self.calls + 1
        return True

    def _checked(self, clusters: Any, losses: Any) -> tuple[np.ndarray, np.ndarray]:
        k = np.asarray(clusters).ravel()
        x = np.asarray(losses, np.float64).ravel()
        if k.size != x.size:
            raise InputError(f"observe: {k.size} clusters but {x.size} losses",
                             params=("clusters", "losses"))
        if k.size and (not np.issubdtype(k.dtype, np.integer) or k.min() < 0
                       or k.max() >= self.counts.size):
            raise InputError(f"observe: cluster ids must be integers in [0, "
                             f"{self.counts.size}), got {k[:4].tolist()}...",
                             params=("clusters",))
        bad = np.flatnonzero(~(np.isfinite(x) & (x >= 0)))
        if bad.size:
            raise InputError(f"observe: losses must be finite and >= 0, got {x[bad[0]]}",
                             params=("losses",))
        return k.astype(np.int64), np.rint(np.minimum(x, MAX_LOSS) * LOSS_SCALE).astype(
            np.int64)

    # --------------------------------------------------------------------- plan
    def plan(self, position: int) -> np.ndarray | None:
        """The weights from global ``position`` on (what ``observe`` sets), or None
        while no cluster nor pool has enough observations for a fit.

        Parameters
        ----------
        position : int
            The global position the weights would apply from.

        Returns
        -------
        numpy.ndarray or None
            (K,) weights, finite and >= 0, summing to 1.
        """
        laws = self.laws()
        if laws is None:
            return None
        alpha, eps, log_beta = laws
        s = self.sampler
        room = np.maximum(s.clip * s.cluster_sizes - s._state_counts(position), 0)
        room = np.where(self.prior > 0, room, 0).astype(np.float64)
        left = float(min(s.num_samples - position, room.sum()))
        x = allocate(self.prior * alpha * np.exp(log_beta), alpha,
                     self.counts.astype(np.float64), room, left)
        prior = self.prior / self.prior.sum()
        new = (1 - self.floor) * (x / x.sum() if x.sum() > 0 else prior) + self.floor * prior
        w = self.smoothing * self.weights + (1 - self.smoothing) * new
        return w / w.sum()

    def laws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Each cluster's fitted law L = eps + exp(log_beta) (n + 1) ** -alpha.

        Returns
        -------
        tuple of numpy.ndarray or None
            ``(alpha, eps, log_beta)``, each (K,); None while nothing can be fitted.
        """
        P = int(self.pools.max()) + 1
        pool_n = np.zeros((P + 1, BINS), np.int64)
        pool_loss = np.zeros((P + 1, BINS), np.int64)
        np.add.at(pool_n, self.pools, self._bin_n)
        np.add.at(pool_loss, self.pools, self._bin_loss)
        pool_n[P], pool_loss[P] = self._bin_n.sum(0), self._bin_loss.sum(0)
        own_ok, own = _fit(self._bin_n, self._bin_loss, self.min_count)
        pool_ok, pool = _fit(pool_n, pool_loss, self.min_count)
        if not (own_ok.any() or pool_ok.any()):
            return None
        # a cluster without its own fit: its pool's, else all clusters', else none
        src = np.where(pool_ok[self.pools], self.pools, P)
        alpha = np.where(own_ok, own[0], pool[0][src])
        eps = np.where(own_ok, own[1], pool[1][src])
        level = _level(self._bin_n, self._bin_loss, alpha, eps)
        log_beta = np.where(own_ok, own[2], np.where(np.isfinite(level), level,
                                                     pool[2][src]))
        if not pool_ok[P]:
            fitted = own_ok | pool_ok[self.pools]
            alpha = np.where(fitted, alpha, 0.0)  # no estimate: only the floor draws it
        return alpha, eps, np.where(np.isfinite(log_beta), log_beta, 0.0)

    # -------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The mixer's state as plain JSON (integers and floats; bins sparse).

        Returns
        -------
        dict
            Its options, ``counts``, the non-empty bins as ``[cluster, bin, n,
            loss]`` (loss in 2**-20 nats), the current ``weights``, ``next_at`` and
            ``calls``.
        """
        k, b = np.nonzero(self._bin_n)
        bins = np.stack([k, b, self._bin_n[k, b], self._bin_loss[k, b]], 1)
        return {"version": STATE_VERSION, **self._config(),
                "counts": self.counts.tolist(), "bins": bins.tolist(),
                "weights": self.weights.tolist(), "next_at": self.next_at,
                "calls": self.calls}

    def _config(self) -> dict[str, Any]:
        return {"method": self.method, "every": self.every, "seed": self.seed,
                "floor": self.floor, "smoothing": self.smoothing,
                "min_count": self.min_count, "prior": self.prior.tolist(),
                "pools": self.pools.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``, a
        [`state_dict`][clusterclip.sampling.online.OnlineMixer.state_dict] of a mixer
        with the same options; load the sampler's state with it.

        Parameters
        ----------
        state : dict
            The saved state.

        Raises
        ------
        InputError
            If it is not a state of this mixer's version and options, or is edited.
        """
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise InputError(f"mixer state_dict must be a dict of version {STATE_VERSION}")
        for key, value in self._config().items():
            if state.get(key) != value:
                raise InputError(f"mixer state_dict was saved with another {key}",
                                 params=(key,))
        K = self.counts.size
        try:
            counts = np.asarray(state["counts"], np.int64)
            bins = np.asarray(state["bins"], np.int64).reshape(-1, 4)
            weights = np.asarray(state["weights"], np.float64)
            next_at, calls = int(state["next_at"]), int(state["calls"])
        except (KeyError, TypeError, ValueError):
            raise InputError("mixer state_dict is missing or has bad fields") from None
        if counts.shape != (K,) or weights.shape != (K,) or (bins[:, 0] >= K).any() \
                or (bins[:, 1] >= BINS).any() or (bins < 0).any() \
                or int(bins[:, 2].sum()) != int(counts.sum()):
            raise InputError("mixer state_dict does not fit this sampler's clusters")
        self._bin_n[:], self._bin_loss[:] = 0, 0
        self._bin_n[bins[:, 0], bins[:, 1]] = bins[:, 2]
        self._bin_loss[bins[:, 0], bins[:, 1]] = bins[:, 3]
        self.counts, self.weights = counts, weights
        self.next_at, self.calls = next_at, calls


# ---------------------------------------------------------------------- helpers

def _fraction(name: str, value: Any) -> float:
    v = float(value)
    if not (0 <= v < 1):
        raise InputError(f"{name} must be in [0, 1), got {value!r}", params=(name,))
    return v


def _prior(prior: Any, drawable: np.ndarray) -> np.ndarray:
    if prior is None:
        return drawable.astype(np.float64)
    p = np.asarray(prior, np.float64)
    if p.shape != drawable.shape or not np.isfinite(p).all() or (p < 0).any():
        raise InputError(f"prior must be {drawable.size} finite weights >= 0",
                         params=("prior",))
    p = np.where(drawable, p, 0.0)
    if not (p > 0).any():
        raise InputError("prior: no cluster the sampler may draw has a weight > 0",
                         params=("prior",))
    return p


def _pools(pools: Any, K: int) -> np.ndarray:
    if pools is None:
        return np.zeros(K, np.int64)
    p = np.asarray(pools)
    if p.shape != (K,) or not np.issubdtype(p.dtype, np.integer) or (p < 0).any():
        raise InputError(f"pools must be {K} integer pool ids >= 0", params=("pools",))
    return p.astype(np.int64)


def _bin_of(n: np.ndarray) -> np.ndarray:
    """The half-octave bin of samples seen ``n`` (exact for integers below 2**52)."""
    b = np.floor(2 * np.log2(n.astype(np.float64) + 1)).astype(np.int64)
    return np.minimum(b, BINS - 1)


#: log(n + 1) at the middle of each bin
_BIN_X = (np.arange(BINS) + 0.5) / 2 * math.log(2)


def _fit(bin_n: np.ndarray, bin_loss: np.ndarray, min_count: int
         ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per row: ``ok`` (enough data) and the law ``(alpha, eps, log_beta)`` fitted to
    the binned mean losses (weighted by observations), eps from :data:`EPS_GRID`."""
    w = bin_n.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(w > 0, bin_loss / np.maximum(w, 1) / LOSS_SCALE, np.nan)
    ok = ((w > 0).sum(1) >= 3) & (w.sum(1) >= min_count)
    ymin = np.nanmin(np.where(ok[:, None], y, np.inf), 1)
    ymin = np.where(np.isfinite(ymin), ymin, 0.0)
    best = np.full(w.shape[0], np.inf)
    out = [np.zeros(w.shape[0]) for _ in range(3)]
    tw = np.maximum(w.sum(1), 1e-300)
    xm = (w * _BIN_X).sum(1) / tw
    dx = _BIN_X - xm[:, None]
    sxx = np.maximum((w * dx * dx).sum(1), 1e-12)
    for f in EPS_GRID:
        eps = f * ymin
        z = np.log(np.maximum(np.nan_to_num(y, nan=1.0) - eps[:, None], 1e-9))
        zm = (w * z).sum(1) / tw
        alpha = np.clip(-(w * dx * (z - zm[:, None])).sum(1) / sxx, 0.0, MAX_ALPHA)
        log_beta = zm + alpha * xm
        pred = eps[:, None] + np.exp(log_beta[:, None] - alpha[:, None] * _BIN_X)
        sse = (w * (np.nan_to_num(y, nan=0.0) - pred) ** 2).sum(1)
        better = sse < best
        best = np.where(better, sse, best)
        for o, v in zip(out, (alpha, eps, log_beta), strict=True):
            o[better] = v[better]
    return ok, (out[0], out[1], out[2])


def _level(bin_n: np.ndarray, bin_loss: np.ndarray, alpha: np.ndarray, eps: np.ndarray
           ) -> np.ndarray:
    """Each row's log beta under the given alpha and eps, from its own bins (NaN where
    it has no observation above eps)."""
    w = bin_n.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = bin_loss / np.maximum(w, 1) / LOSS_SCALE
        gap = y - eps[:, None]
        use = (w > 0) & (gap > 0)
        z = np.where(use, np.log(np.where(use, gap, 1.0)) + alpha[:, None] * _BIN_X, 0.0)
        return (w * use * z).sum(1) / (w * use).sum(1)


def allocate(gain: np.ndarray, alpha: np.ndarray, seen: np.ndarray, room: np.ndarray,
             total: float) -> np.ndarray:
    """The split of ``total`` draws that minimises sum_k c_k (seen_k + x_k + 1) ** -alpha_k
    with ``gain`` = alpha c, 0 <= x <= ``room``: equal marginal gains
    gain_k (seen_k + x_k + 1) ** -(alpha_k + 1) = lam, lam by bisection in log space.

    Parameters
    ----------
    gain : numpy.ndarray
        (K,) alpha_k c_k >= 0.
    alpha : numpy.ndarray
        (K,) exponents >= 0.
    seen : numpy.ndarray
        (K,) samples seen so far.
    room : numpy.ndarray
        (K,) most draws each cluster may still take.
    total : float
        Draws to split (at most ``room.sum()`` are placed).

    Returns
    -------
    numpy.ndarray
        (K,) float draws per cluster, summing to ``min(total, room over clusters
        with a gain)`` up to 1e-6 relative.
    """
    live = (gain > 0) & (room > 0)
    x = np.zeros_like(seen)
    if not live.any() or total <= 0:
        return x
    g, a, n, r = gain[live], alpha[live], seen[live] + 1, room[live]

    def draws(log_lam: float) -> np.ndarray:
        return np.clip(np.exp((np.log(g) - log_lam) / (a + 1)) - n, 0, r)

    target = min(total, float(r.sum()))
    hi = float(np.max(np.log(g) - (a + 1) * np.log(n))) + 1  # nothing drawn above
    lo = hi - 1.0
    while draws(lo).sum() < target and lo > -1e4:
        lo = hi - 2 * (hi - lo)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if draws(mid).sum() >= target else (lo, mid)
    x[live] = draws(lo)
    return x
