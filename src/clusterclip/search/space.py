"""The search space: mixtures of clusters, with their clip R and timing.

A :class:`Candidate` is one weight per cluster id (summing to 1), a clip R and a
timing (``paced``: quotas ``min(R n_k, lam w_k)`` spread evenly; ``clusterclip``:
greedy). Above :data:`MAX_DIRECT_CLUSTERS` clusters the search moves in the
space of super-clusters (k-means of the cluster centroids, as CLIMB merges
clusters): a super-cluster's weight is split among its clusters by the prior
(the target's histogram; the corpus's own shares where the target has none).
The predictor always sees the weight of each group (cluster or super-cluster).

Pure numpy, apart from :func:`super_clusters` (the project's k-means).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY
from clusterclip.sampling.mixture import MIXTURE_TIMINGS
from clusterclip.sampling.spec import DEFAULT_CLIP

#: The timings a mixture can have (the sampler strategies that take cluster weights and R).
TIMINGS = MIXTURE_TIMINGS
#: The clips R the search tries; :data:`DEFAULT_CLIP` for the fixed candidates.
CLIPS = (2, 3, 4, 6, 8)
DEFAULT_TIMING = DEFAULT_COMMAND_STRATEGY
#: Up to this many clusters the search weighs clusters directly; above, super-clusters.
MAX_DIRECT_CLUSTERS = 32
#: Super-clusters above :data:`MAX_DIRECT_CLUSTERS` clusters (CLIMB uses 16-21).
SUPER_CLUSTERS = 16
#: Temperatures between the natural mix (1) and uniform (0) among the fixed candidates.
TEMPERATURES = (0.75, 0.5, 0.25)
#: Digits a weight keeps: the candidates' identity (fingerprints, JSON) is exact.
WEIGHT_DIGITS = 12
#: The prior's weight on a cluster the target does not touch, as a share of the cluster's
#: natural weight: small enough to leave the target's clusters first in line, large enough
#: that once the clip retires them the budget is still filled from the rest (with 0, a
#: target on a few clusters could not supply a run of more than R x their tokens).
PRIOR_FLOOR = 1e-3


def prior_mixture(histogram: np.ndarray, natural: np.ndarray) -> np.ndarray:
    """float64[K] the prior: the target's share of documents per cluster plus
    :data:`PRIOR_FLOOR` x the natural share, normalised (0 where ``natural`` is 0: such a
    cluster has no training text)."""
    h = np.asarray(histogram, dtype=np.float64)
    if not h.sum() > 0:
        raise ValueError("no document in any cluster")
    # the floor keeps every cluster with training text, so p sums to more than 0
    p = np.where(natural > 0, h / h.sum() + PRIOR_FLOOR * natural, 0.0)
    return p / p.sum()


def natural_and_prior(labels: np.ndarray, num_clusters: int, histogram: np.ndarray | None,
                      *, target_docs: str = "documents", docs: str = "documents"
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(documents per cluster, the natural mixture, the prior of ``histogram`` or None) of
    ``labels`` (int[N], -1: no cluster; at least one >= 0). InputError when the target's
    histogram (its ``target_docs`` per cluster) is empty."""
    from clusterclip.errors import InputError

    counts = np.bincount(labels[labels >= 0], minlength=num_clusters).astype(np.float64)
    natural = counts / counts.sum()
    prior = None
    if histogram is not None:
        try:
            prior = prior_mixture(histogram, natural)
        except ValueError as e:
            raise InputError(f"target: {e} (its {target_docs} against the clusters' "
                             f"{docs}), so no prior can be drawn", params=("target",)) from None
    return counts, natural, prior


@dataclass(frozen=True)
class Candidate:
    """One mixture: ``weights[k]`` >= 0 per cluster id k (sum 1), clip R, timing, and
    where it came from (``natural``, ``prior``, ``dirichlet``, ...)."""

    weights: tuple[float, ...]
    clip: int
    timing: str
    origin: str = ""

    def same_as(self, other: Candidate) -> bool:
        return (self.weights, self.clip, self.timing) == (other.weights, other.clip,
                                                          other.timing)

    def to_dict(self) -> dict[str, Any]:
        return {"weights": list(self.weights), "clip": self.clip, "timing": self.timing,
                "origin": self.origin}


def normalise(w: np.ndarray, support: np.ndarray) -> tuple[float, ...]:
    """``w`` >= 0 on ``support`` (0 elsewhere), summing to 1, rounded to
    :data:`WEIGHT_DIGITS` digits (so a candidate survives JSON unchanged)."""
    w = np.where(support, np.clip(np.asarray(w, dtype=np.float64), 0.0, None), 0.0)
    total = float(w.sum())
    if not (total > 0 and math.isfinite(total)):
        raise ValueError("a mixture needs a positive weight on a non-empty cluster")
    return tuple(round(float(x), WEIGHT_DIGITS) for x in w / total)


@dataclass(frozen=True)
class SearchSpace:
    """What the search may choose from, for one corpus and target.

    ``natural``: float64[K] each cluster's share of the training documents;
    ``prior``: float64[K] the target's share per cluster (None without a target);
    ``groups``: int64[K] group of each cluster (the cluster itself up to
    :data:`MAX_DIRECT_CLUSTERS`, else its super-cluster); ``train_tokens``: int64[K]
    training tokens per cluster and ``needed`` the tokens a run trains on (a clipped
    schedule must be able to supply them: R x the tokens of the clusters it draws from).
    """

    natural: np.ndarray
    prior: np.ndarray | None
    groups: np.ndarray
    train_tokens: np.ndarray
    needed: int

    @property
    def num_clusters(self) -> int:
        return int(self.natural.size)

    @property
    def num_groups(self) -> int:
        return int(self.groups.max()) + 1

    @property
    def support(self) -> np.ndarray:
        """bool[K]: clusters with training documents (the only ones a weight can draw)."""
        return self.natural > 0

    def group_sums(self, weights: np.ndarray | tuple[float, ...]) -> np.ndarray:
        """float64[G]: the weight of each group."""
        return np.bincount(self.groups, weights=np.asarray(weights, dtype=np.float64),
                           minlength=self.num_groups)

    @cached_property
    def within(self) -> np.ndarray:
        """float64[K]: each cluster's share of its group's weight: the prior's split where
        the group has prior mass, else the natural one."""
        out = np.zeros(self.num_clusters)
        for g in range(self.num_groups):
            members = self.groups == g
            for base in ([] if self.prior is None else [self.prior]) + [self.natural]:
                mass = float(base[members].sum())
                if mass > 0:
                    out[members] = base[members] / mass
                    break
        return out

    def expand(self, group_weights: np.ndarray) -> np.ndarray:
        """Cluster weights from group weights, each group split by :attr:`within`."""
        return np.asarray(group_weights, dtype=np.float64)[self.groups] * self.within

    def features(self, c: Candidate) -> np.ndarray:
        """The predictor's view of a candidate: sqrt of each group's weight (distances
        between mixtures then follow the Hellinger distance), log2(R) / 3 and the timing
        (0 paced, 1 greedy)."""
        return np.concatenate([np.sqrt(self.group_sums(c.weights)),
                               [math.log2(c.clip) / 3.0, float(c.timing != "paced")]])

    def feasible(self, c: Candidate) -> bool:
        """True when R x the training tokens of the clusters it draws from cover a run."""
        drawn = np.asarray(c.weights) > 0
        return c.clip * int(self.train_tokens[drawn].sum()) >= self.needed

    def make(self, weights: np.ndarray, clip: int, timing: str, origin: str) -> Candidate:
        return Candidate(normalise(weights, self.support), int(clip), timing, origin)


def fixed_candidates(space: SearchSpace) -> list[Candidate]:
    """The candidates every search starts from, at clip :data:`DEFAULT_CLIP` and paced
    timing: natural, uniform, the prior (with a target; also with greedy timing), and
    interpolations between them (temperatures of the natural mix without a target; with
    one, the flattened prior and the prior's midpoints with natural and uniform)."""
    s = space.support
    nat = space.natural
    uni = s / s.sum()
    out = [("natural", nat), ("uniform", uni)]
    if space.prior is None:
        out += [(f"natural^{t:g}", np.where(s, nat, 0) ** t) for t in TEMPERATURES]
    else:
        pri = space.prior
        out += [("prior", pri), ("prior^0.5", np.sqrt(pri)), ("(prior+natural)/2", pri + nat),
                ("(prior+uniform)/2", pri + uni), ("natural^0.5", np.sqrt(nat))]
    cands = []
    for name, w in out:
        try:
            cands.append(space.make(w, DEFAULT_CLIP, DEFAULT_TIMING, name))
        except ValueError:  # e.g. a prior with no mass on a cluster that has training text
            continue
    if space.prior is not None and any(c.origin == "prior" for c in cands):
        prior = next(c for c in cands if c.origin == "prior")
        cands.insert(3, replace(prior, timing="clusterclip", origin="prior, greedy"))
    return [c for c in cands if space.feasible(c)]


def dirichlet_around(space: SearchSpace, center: Candidate, n: int, concentration: float,
                     rng: np.random.Generator, origin: str) -> list[Candidate]:
    """``n`` candidates whose group weights are Dirichlet draws around ``center``'s
    (``alpha_g = concentration x center_g + 0.5``: the larger the concentration, the
    closer; the 0.5 keeps every group reachable), each keeping the center's clip with
    probability 1/2 (else one of :data:`CLIPS`) and its timing with probability 3/4.
    Infeasible draws are dropped."""
    g = space.group_sums(center.weights)
    live = space.group_sums(space.support.astype(np.float64)) > 0
    gw = np.zeros((n, space.num_groups))
    gw[:, live] = rng.dirichlet(concentration * g[live] + 0.5, size=n)
    keep_clip = rng.random(n) < 0.5
    clips = np.where(keep_clip, center.clip, rng.choice(CLIPS, size=n))
    keep_timing = rng.random(n) < 0.75
    timings = np.where(keep_timing, center.timing, rng.choice(TIMINGS, size=n))
    out = []
    for i in range(n):
        try:
            c = space.make(space.expand(gw[i]), int(clips[i]), str(timings[i]), origin)
        except ValueError:
            continue
        if space.feasible(c):
            out.append(c)
    return out


def super_clusters(centroids: np.ndarray, natural: np.ndarray, metric: str, seed: int,
                   n_super: int = SUPER_CLUSTERS) -> np.ndarray:
    """int64[K] group of each cluster: itself up to :data:`MAX_DIRECT_CLUSTERS` clusters,
    else the k-means (``metric``, the clustering's own) of the centroids of the clusters
    with training documents into ``n_super`` super-clusters; a cluster without training
    documents joins group 0 (it carries no weight)."""
    k = centroids.shape[0]
    if k <= MAX_DIRECT_CLUSTERS:
        return np.arange(k, dtype=np.int64)
    from clusterclip import distributed as D
    from clusterclip.clustering.kmeans import KMeans

    live = np.flatnonzero(natural > 0)
    # under torchrun every rank calls this with its shard of the rows: the project's
    # k-means is a collective there (and gives the one-process labels)
    rank, world = D.rank_and_world()
    start, stop = D.shard_bounds(live.size, rank, world)
    km = KMeans(n_clusters=min(n_super, live.size), metric=metric, seed=seed, n_init=4,
                max_iter=100).fit(np.ascontiguousarray(centroids[live[start:stop]],
                                                       dtype=np.float32))
    labels = np.concatenate(D.gather_objects(km.labels_.astype(np.int64)))
    # number the groups by their smallest cluster id, so the order does not depend on k-means
    first = {int(g): int(live[np.flatnonzero(labels == g)[0]]) for g in np.unique(labels)}
    order = {g: i for i, g in enumerate(sorted(first, key=first.get))}
    groups = np.zeros(k, dtype=np.int64)
    groups[live] = [order[int(g)] for g in labels]
    return groups
