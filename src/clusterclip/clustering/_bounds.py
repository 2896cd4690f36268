"""Hamerly's bounds for the Lloyd passes of a cosine fit on CPU: fewer products per pass.

Per row, an upper bound ``u`` on the distance from the row's direction to its
assigned centroid and a lower bound ``l`` on its distance to every other
centroid (distances on the unit sphere: ``sqrt(2 - 2 cos)`` for unit
centroids). After an M-step that moves centroid ``j`` by ``delta_j``, the
triangle inequality gives ``u += delta_assigned`` and ``l -= max over the
other centroids of delta``. A row whose bounds stay apart by more than the
float32 error of the product keeps its label without a product; the others
are gathered into a sub-block and multiplied by every centroid, which gives
their new label and top-2 (hence fresh bounds).

Exact: the labels of a pass are those of the brute-force pass (one product
``X_block @ C.T`` per block and its argmax) for the same centroids and blocks.

- A skipped row: in real arithmetic its assigned cosine beats every other by
  at least ``(l^2 - u^2 - spread) / 2``, where ``spread`` is the range of the
  centroids' squared norms (they are unit only up to float32 rounding). Any
  float32 product of length ``d`` is within ``gamma_d * |x| * |c|`` of the
  exact one, ``gamma_d = d u / (1 - d u)`` (``u = 2^-24``), whatever order
  the BLAS sums in; with the row norm's own error this is ``eps`` in cosine
  units (:meth:`Bounds.begin`). A gap over ``2 eps`` so keeps the argmax of
  the brute-force product, and a strict one, so no tie is broken either way.
- The stored bounds come from computed products: they are widened by ``eps``
  before they become distances and rounded outward to float32.
- A recomputed row in a gathered sub-block: MKL's sgemm does not give every
  entry bit for bit as in the whole block (measured: small row counts, odd
  ``d``, small ``K`` take other kernels), so the two results differ by at most
  ``2 eps |x|`` per entry. A row whose top-2 gap is within that makes the whole
  block recomputed as the brute-force pass does (rare: a near tie).

State of one Lloyd run on one rank (:func:`~clusterclip.clustering._lloyd.lloyd`
makes one per run): two float32 per row, plus the previous pass's centroids.
Each row is read and written only by the thread that owns its block.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Off only in tests: every row is then recomputed through the same code (the reference).
_SKIP = True
_UNIT = 2.0 ** -24  # float32's unit roundoff
# Fewer gathered rows than this are padded with others of the block (small row counts
# take other sgemm kernels; a sub-block's rows then agree less often with the block's).
_MIN_GATHER = 16


def _up(v: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded towards +inf (an upper bound stays one)."""
    f = v.astype(np.float32)
    return np.where(f < v, np.nextafter(f, np.float32(np.inf)), f)


def _down(v: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded towards -inf."""
    f = v.astype(np.float32)
    return np.where(f > v, np.nextafter(f, np.float32(-np.inf)), f)


def _top2(S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Argmax (first on ties, as the brute-force pass), best and second best of each
    row of ``S`` (overwrites the best entry)."""
    ar = np.arange(S.shape[0])
    i1 = S.argmax(axis=1)
    b1 = S[ar, i1].astype(np.float64)
    S[ar, i1] = -np.inf
    b2 = S.max(axis=1).astype(np.float64) if S.shape[1] > 1 else np.full(len(ar), -np.inf)
    return i1, b1, b2


class Bounds:
    """One Lloyd run's per-row bounds on this rank (cosine metric, CPU)."""

    def __init__(self, n: int, d: int) -> None:
        self.upper = np.full(n, np.inf, dtype=np.float32)
        self.lower = np.zeros(n, dtype=np.float32)
        self.d = d
        self._labels: np.ndarray | None = None  # the previous pass's labels
        self._prev: np.ndarray | None = None  # the previous pass's centroids (float64)
        self._pass: dict[str, Any] = {}

    def begin(self, C: Any, labels: np.ndarray) -> None:
        """Start a pass with centroids ``C`` that writes its labels into ``labels``."""
        c = C.double().cpu().numpy()
        sq = (c * c).sum(axis=1)
        gamma = self.d * _UNIT / (1.0 - self.d * _UNIT)
        # Error of a computed cosine fl(x . c) / fl(|x|): the product's gamma_d |c|,
        # plus the norm's (at most gamma_d / 2 + a rounding) times |cos| <= |c|.
        eps = (2.0 * gamma + 4.0 * _UNIT) * math.sqrt(float(sq.max()))
        move = other = None
        if _SKIP and self._prev is not None and self._labels is not None:
            move = np.linalg.norm(c - self._prev, axis=1)
            order = np.argsort(-move, kind="stable")
            other = np.full(len(move), move[order[0]])
            if len(move) > 1:
                other[order[0]] = move[order[1]]
            else:
                other[:] = 0.0
        self._pass = {"move": move, "other": other, "sq": sq, "nmin": float(sq.min()),
                      "spread": float(sq.max() - sq.min()), "eps": eps,
                      # distance^2 units: cosines apart by 2 eps, and float64's rounding
                      "margin": 4.0 * eps * (1.0 + 1e-6) + 1e-12,
                      "labels": self._labels}
        self._labels, self._prev = labels, c

    def block(self, x: Any, g0: int, vm: np.ndarray | None, norm: Any, CT: Any,
              sim: Any) -> tuple[np.ndarray, int]:
        """Labels (int64) of rows ``g0..`` of this rank held in ``x``, and how many rows
        were recomputed; ``sim`` is a (>= len(x), K) float32 buffer."""
        P = self._pass
        nb = x.shape[0]
        sl = slice(g0, g0 + nb)
        prev = P["labels"]
        if P["move"] is None:
            lab = np.zeros(nb, dtype=np.int64)
            need = np.ones(nb, dtype=bool)
        else:
            a = prev[sl]
            lab = np.maximum(a, 0).astype(np.int64)
            u = self.upper[sl] + P["move"][lab]
            lo = self.lower[sl] - P["other"][lab]
            with np.errstate(invalid="ignore"):
                keep = (a >= 0) & (lo > 0) & (lo * lo - u * u - P["spread"] > P["margin"])
            self.upper[sl] = np.where(keep, _up(u), self.upper[sl])
            self.lower[sl] = np.where(keep, _down(lo), self.lower[sl])
            need = ~keep
        if vm is not None:
            need &= vm
        idx = np.flatnonzero(need)
        done = 0
        if idx.size:
            done = self._recompute(x, g0, idx, lab, norm.numpy().astype(np.float64), CT, sim)
        return lab, done

    def _recompute(self, x: Any, g0: int, idx: np.ndarray, lab: np.ndarray,
                   r: np.ndarray, CT: Any, sim: Any) -> int:
        """New labels and bounds of the rows ``idx`` of a block, written in place;
        returns the number of rows multiplied."""
        import torch

        nb, eps = x.shape[0], self._pass["eps"]
        rows = idx
        whole = 2 * idx.size > nb or nb <= _MIN_GATHER
        if not whole:
            if idx.size < _MIN_GATHER:
                rows = np.union1d(idx, np.setdiff1d(np.arange(min(nb, 2 * _MIN_GATHER)), idx)
                                  [:_MIN_GATHER - idx.size])
            S = sim[:rows.size]
            torch.mm(x.index_select(0, torch.from_numpy(rows)), CT, out=S)
            i1, b1, b2 = _top2(S.numpy())
            # a near tie may be broken otherwise by the whole block's product
            whole = bool((b1 - b2 <= 2.0 * eps * r[rows]).any())
        if whole:
            rows = np.arange(nb)
            torch.mm(x, CT, out=sim[:nb])
            i1, b1, b2 = _top2(sim[:nb].numpy())
        lab[rows] = i1
        self._fresh(g0 + rows, i1, b1, b2, r[rows])
        return int(rows.size)

    def _fresh(self, g: np.ndarray, i1: np.ndarray, b1: np.ndarray, b2: np.ndarray,
               r: np.ndarray) -> None:
        """Bounds of rows ``g`` (of this rank) from their computed best and second-best
        products ``b1``, ``b2`` with centroid ``i1`` best, and row norms ``r``."""
        P = self._pass
        eps = P["eps"]
        with np.errstate(divide="ignore", invalid="ignore"):
            s1, s2 = b1 / r - eps, b2 / r + eps
            u = np.sqrt(np.maximum(1.0 + P["sq"][i1] - 2.0 * s1, 0.0))
            lo = np.sqrt(np.maximum(1.0 + P["nmin"] - 2.0 * s2, 0.0))
        ok = (r > 0) & np.isfinite(r) & np.isfinite(b1)
        self.upper[g] = np.where(ok, _up(u), np.float32(np.inf))
        self.lower[g] = np.where(ok, _down(lo), np.float32(0.0))
