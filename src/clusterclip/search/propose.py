"""``clusterclip search propose``: candidate mixtures for the user's own trainer.

Round 1 is the search's own design (:func:`clusterclip.search.core.first_round`:
natural, uniform, the prior and interpolations, then space-filling Dirichlet
draws that visit every clip and both timings), in the space of a work
directory's clusters or super-clusters (:func:`cluster_space`; the work directory
is read by :mod:`clusterclip.stages.search`). Written into one
folder, atomically:

- ``ratios.csv``: the swarm layout (:mod:`~clusterclip.search.swarm`): ``run``
  (a stable id from the mixture's content), one column per group
  (``cluster_K`` up to :data:`~clusterclip.search.space.MAX_DIRECT_CLUSTERS`
  clusters, else ``super_cluster_G``), ``clip``, ``timing`` and ``origin``;
- ``mixtures/<run>.json``: each candidate as a mixture file (per cluster) that
  ``sample``, ``run``, ``export`` and ``experiment`` read, with the budget and seed its
  schedule is drawn with and the documents it keeps out (``exclude``);
- ``round.json``: the round's record (:func:`write_round`), which ``search fit`` reads
  to draw the next round alike (:mod:`clusterclip.search.rounds`);
- with a format and a budget, ``runs/<run>/``: each candidate's exact schedule
  exported as ``export --format`` writes it (read back and verified).

With a target, the offline search's overlap guard keeps every corpus copy of a target
document out of every candidate (:func:`clusterclip.stages.propose.target_guard`).
With a budget (``--num-tokens`` or ``--num-samples``) every candidate respects the
clip: no cluster is asked for more than R times its tokens (or documents)
(:class:`CappedSpace`), so the mixture trained is the mixture proposed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.limits import MAX_SAMPLES, MAX_SEED, MAX_TOKENS, check_ranges, ranged
from clusterclip.search.space import (
    DEFAULT_CLIP,
    Candidate,
    SearchSpace,
    normalise,
    super_clusters,
)
from clusterclip.search.swarm import group_names

#: The super-clusters of a swarm are drawn with this seed, so that ``propose`` and ``fit``
#: on the same work directory name the same groups.
GROUP_SEED = 0


def cap_weights(w: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """``w`` (>= 0) normalised, then every share above its ``limit`` lowered to it and the
    excess spread over the others in proportion (water-filling); ValueError when the
    clusters it draws from cannot hold the whole (sum of their limits < 1)."""
    w = np.asarray(w, dtype=np.float64)
    w = w / w.sum()
    w[w < 1e-15] = 0.0  # far below the 12 digits a candidate keeps (normalise)
    w = w / w.sum()
    fixed = np.zeros(w.size, dtype=bool)
    for _ in range(w.size + 1):
        over = ~fixed & (w > limit)
        if not over.any():
            return w
        fixed |= over
        w = np.where(fixed, limit, w)
        free = ~fixed & (w > 0)
        rest = 1.0 - float(w[fixed].sum())
        if not free.any() or rest <= 0:
            if abs(rest) <= 1e-12 and not free.any():
                return w
            raise ValueError("the clip cannot supply this mixture")
        w[free] *= rest / float(w[free].sum())
    return w


@dataclass(frozen=True)
class CappedSpace(SearchSpace):
    """A search space whose candidates respect the clip cluster by cluster. A mixture's
    weights are shares of the documents drawn: a run of ``needed`` units (tokens or
    documents) draws ``D = needed / sum_j w_j u_j`` documents (``u_j``: cluster j's mean
    units per document, :attr:`mean_units`; 1 for a document budget), ``w_k D`` of them
    from cluster k, at most ``clip x n_k`` (its documents, :attr:`sizes`).
    ``train_tokens`` holds each cluster's units (``n_k u_k``)."""

    sizes: np.ndarray | None = None

    @property
    def mean_units(self) -> np.ndarray:
        n = np.asarray(self.sizes, dtype=np.float64)
        return np.divide(self.train_tokens, n, out=np.zeros(n.size), where=n > 0)

    def limits(self, clip: int, w: np.ndarray) -> np.ndarray:
        """The largest weight each cluster can have in a mixture near ``w`` (normalised)."""
        draws = self.needed / max(float(np.dot(w, self.mean_units)), 1e-300)
        return clip * np.asarray(self.sizes, dtype=np.float64) / draws

    def feasible(self, c: Candidate) -> bool:
        if self.needed <= 0:
            return True
        w = np.asarray(c.weights)
        return bool(np.all(w <= self.limits(c.clip, w) * (1 + 1e-9) + 1e-12))

    def make(self, weights: np.ndarray, clip: int, timing: str, origin: str) -> Candidate:
        w = np.where(self.support, np.clip(np.asarray(weights, dtype=np.float64), 0, None), 0)
        if not w.sum() > 0:
            raise ValueError("a mixture needs a positive weight on a non-empty cluster")
        w = w / w.sum()
        if self.needed > 0:  # the limits move with the mixture's mean document length
            for _ in range(100):
                capped = cap_weights(w, self.limits(clip, w))
                if np.allclose(capped, w, rtol=0, atol=1e-13):
                    break
                w = capped
        return Candidate(normalise(w, self.support), int(clip), timing, origin)


@dataclass(frozen=True)
class ClusterSpace:
    """The search space of a work directory's clusters, its group names and what the
    budget counts."""

    space: CappedSpace
    names: list[str]
    kind: str            # "cluster" or "super-cluster"
    unit: str | None     # "tokens", "documents" or None without a budget
    labels: np.ndarray
    doc_tokens: np.ndarray | None
    #: int64 corpus documents kept out (labelled -1 in ``labels``): copies of the target
    exclude: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: the target's overlap with the corpus (``target_overlap`` of the round's record)
    overlap: dict[str, Any] | None = None


def _budget_units(labels: np.ndarray, num_tokens: int | None, num_samples: int | None,
                  tokens: np.ndarray | None
                  ) -> tuple[np.ndarray, int, str | None, np.ndarray | None]:
    k = int(labels.max()) + 1
    use = labels >= 0
    if num_tokens is not None:
        if tokens is None:
            raise ValueError("a token budget needs the tokens per document")
        units = np.bincount(labels[use], weights=tokens[use], minlength=k)
        return units.astype(np.int64), int(num_tokens), "tokens", tokens
    counts = np.bincount(labels[use], minlength=k).astype(np.int64)
    if num_samples is not None:
        return counts, int(num_samples), "documents", None
    return counts, 0, None, None


def cluster_space(labels: np.ndarray, centroids: np.ndarray, metric: str = "cosine", *,
                  num_tokens: int | None = None, num_samples: int | None = None,
                  tokens: np.ndarray | None = None, histogram: np.ndarray | None = None,
                  exclude: np.ndarray | None = None, overlap: dict[str, Any] | None = None
                  ) -> ClusterSpace:
    """The search space of a work directory's clusters (``labels`` int[N], at least one
    >= 0; ``centroids`` and the clustering's ``metric``): their shares of the documents
    (natural), the prior of ``histogram`` (a target's documents per cluster), its clusters
    or super-clusters, and with a budget each cluster's capacity (``num_tokens`` needs
    ``tokens``, int[N] per document). ``exclude``: documents kept out (the target's copies,
    ``overlap`` their count), labelled -1 after the groups are drawn (so every round of a
    work directory names the same groups)."""
    from clusterclip.sampling.mixture import excluding
    from clusterclip.search.space import natural_and_prior

    k = int(labels.max()) + 1
    _, natural0, _ = natural_and_prior(labels, k, None)
    groups = super_clusters(np.asarray(centroids)[:k], natural0, metric, GROUP_SEED)
    exclude = np.zeros(0, dtype=np.int64) if exclude is None else np.asarray(exclude, np.int64)
    labels = excluding(labels, exclude)
    if not np.any(labels >= 0):
        raise InputError("target: every clustered document of the corpus copies one of "
                         "its documents, so nothing is left to train on", params=("target",))
    counts, natural, prior = natural_and_prior(labels, k, histogram)
    units, needed, unit, tokens = _budget_units(labels, num_tokens, num_samples, tokens)
    space = CappedSpace(natural=natural, prior=prior, groups=groups, train_tokens=units,
                        needed=needed, sizes=counts.astype(np.int64))
    direct = int(groups.max()) + 1 == k
    names = group_names(groups)
    return ClusterSpace(space, names, "cluster" if direct else "super-cluster", unit, labels,
                        tokens, exclude, overlap)


def group_weights(space: SearchSpace, c: Candidate) -> np.ndarray:
    return space.group_sums(c.weights)


#: The most runs a round proposes (``search propose --runs``, ``search fit --propose``)
#: and seeds per arm of a verification round.
MAX_RUNS = 100_000


@dataclass(frozen=True)
class Draw:
    """How a round's schedules are drawn: the budget (``num_tokens`` or ``num_samples``;
    None: no schedule), the seed and the export format; the budget and the seed checked
    when made (the requests of ``search propose`` and ``search fit`` make one to check
    theirs)."""

    num_tokens: int | None = ranged(1, MAX_TOKENS, default=None)
    num_samples: int | None = ranged(1, MAX_SAMPLES, default=None)
    seed: int = ranged(0, MAX_SEED, default=0)
    fmt: str | None = None

    def __post_init__(self) -> None:
        check_ranges(self)

    def budget(self) -> dict[str, int]:
        return {k: v for k, v in (("num_tokens", self.num_tokens),
                                  ("num_samples", self.num_samples)) if v is not None}


def write_candidates(tmp: Path, ws: ClusterSpace, cands: list[Candidate], objective: str,
                     draw: Draw, source: str, ids: list[str] | None = None,
                     seeds: list[int] | None = None,
                     labels: dict[str, list[str]] | None = None,
                     name: str = "ratios.csv") -> list[str]:
    """``name`` (a ratios table with an ``origin`` column, and ``labels``) and
    ``mixtures/<run>.json``
    into ``tmp``: each candidate's per-cluster weights, clip and timing with the budget and
    seed (``seeds``: one per candidate, default ``draw.seed``) its schedule is drawn with
    and the documents it keeps out; returns the run ids (default: from the content)."""
    from clusterclip.sampling.mixture import Mixture, write_mixture
    from clusterclip.search.swarm import ratios_rows, run_id, write_csv

    g = np.stack([group_weights(ws.space, c) for c in cands])
    if ids is None:
        ids = [run_id(g[i], c.clip, c.timing) for i, c in enumerate(cands)]
    seeds = [draw.seed] * len(cands) if seeds is None else seeds
    write_csv(tmp / name, ratios_rows(
        "run", ids, ws.names, g, [c.clip for c in cands], [c.timing for c in cands],
        labels={"origin": [c.origin for c in cands], **(labels or {})}))
    (tmp / "mixtures").mkdir()
    exclude = ws.exclude.tolist()
    for rid, c, seed in zip(ids, cands, seeds, strict=True):
        write_mixture(tmp / "mixtures" / f"{rid}.json",
                      Mixture(c.weights, c.clip, c.timing, objective),
                      source=source, run=rid, origin=c.origin, budget=draw.budget(),
                      seed=seed, **({"exclude": exclude} if exclude else {}))
    return ids


ROUND_FORMAT = 1


def write_round(tmp: Path, ws: ClusterSpace, draw: Draw, workdir: str, source: str,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``round.json``: what a later ``search fit`` needs to draw the next round the same
    way (the groups, the prior that splits a group's weight among its clusters, the
    documents kept out, the budget and seed) and the target's overlap; returns it."""
    from clusterclip.storage.atomic import write_json

    sp = ws.space
    record = {"format_version": ROUND_FORMAT, "source": source,
              "workdir": str(Path(workdir).resolve()), "kind": ws.kind,
              "groups": sp.groups.tolist(),
              "prior": None if sp.prior is None else sp.prior.tolist(),
              "budget": draw.budget(), "seed": draw.seed, "format": draw.fmt,
              "target_overlap": ws.overlap, "exclude": ws.exclude.tolist(), **(extra or {})}
    write_json(tmp / "round.json", record)
    return record


@dataclass(frozen=True, kw_only=True)
class ProposeRequest:
    """What ``clusterclip search propose`` was asked (see its ``--help``); checked when
    made, before any file is read (InputError naming the parameter)."""

    workdir: str
    runs: int | None = ranged(1, MAX_RUNS, default=None)  # None: with verify
    out: str
    targets: tuple[str, ...] = ()
    text_field: str = "text"
    num_tokens: int | None = None  # the budget and the seed: Draw's
    num_samples: int | None = None
    fmt: str | None = None
    seed: int = 0
    tokenizer: str | None = None
    device: str = "cpu"
    blend: bool = False
    split_target: bool = False
    verify: str | None = None
    seeds: int = ranged(1, MAX_RUNS, default=3)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.verify is None and self.runs is None:
            raise InputError("runs: required (the candidates to propose), or give verify "
                             "FIT_DIR", params=("runs", "verify"))
        if self.verify is not None and self.runs is not None:
            raise InputError("runs does not apply with verify (its round trains each arm "
                             "once per seed)", params=("runs", "verify"))
        if self.verify is not None and self.seeds < 2:
            raise InputError(f"seeds: must be >= 2 (a paired interval needs two), got "
                             f"{self.seeds}", params=("seeds",))
        if self.verify is not None and self.blend:
            raise InputError("blend does not apply with verify (each run is a schedule "
                             "drawn with its seed)", params=("blend", "verify"))
        Draw(num_tokens=self.num_tokens, num_samples=self.num_samples, seed=self.seed)
        if self.fmt is not None and self.num_tokens is None and self.num_samples is None:
            raise InputError(f"fmt {self.fmt}: give the budget each candidate's schedule "
                             "is exported for (num_tokens or num_samples)",
                             params=("fmt", "num_tokens", "num_samples"))
        if self.split_target and not self.targets:
            raise InputError("split_target: give targets (its documents are split)",
                             params=("split_target", "targets"))
        if self.blend and self.tokenizer is None:
            raise InputError("blend megatron needs tokenizer PATH (each cluster's "
                             "documents are tokenized once)", params=("blend", "tokenizer"))
        if (self.tokenizer is not None and self.fmt != "megatron" and self.num_tokens is None
                and not self.blend):
            raise InputError("tokenizer applies with fmt megatron, blend megatron or "
                             "num_tokens", params=("tokenizer", "fmt", "blend", "num_tokens"))


def _stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr, flush=True)


def export_tokenizer(req: ProposeRequest) -> Any:
    """The tokenizer the exports and blends of ``req`` use (None without them), checked
    with the export code before any file is read."""
    if req.fmt is None and not req.blend:
        return None
    from clusterclip.export import megatron as _megatron
    from clusterclip.export import require

    fmt = "megatron" if req.blend else str(req.fmt)
    require(fmt)
    if req.fmt is not None:
        require(req.fmt)
    # a tokenizer with another format counts the --num-tokens budget, nothing more
    return _megatron.check_tokenizer_option(fmt, req.tokenizer if fmt == "megatron" else None)


def write_proposals(req: ProposeRequest, ws: ClusterSpace, corpus: Callable[[], Any],
                    tokenizer: Any, targeted: bool, log: Any = None,
                    extra: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Round 1 in ``ws`` written to ``req.out`` (see the module): ``ratios.csv``, the
    mixtures, ``round.json`` and, as asked, the exports and blends of the documents of
    ``corpus()`` (called only for them); returns a summary. ``targeted``: the objective is
    the target's; ``log``: the progress lines (default: stderr); ``extra(tmp)`` writes
    further files into the folder."""
    from clusterclip.search.core import first_round
    from clusterclip.storage.outputs import atomic_output_dir

    log = _stderr if log is None else log

    if DEFAULT_CLIP * int(ws.space.train_tokens.sum()) < ws.space.needed:
        raise InputError(_capacity_message(ws, req),
                         params=("num_tokens" if req.num_tokens is not None else "num_samples",))
    cands = first_round(ws.space, req.runs, req.seed)
    short = None
    if len(cands) < req.runs:
        short = (f"search propose: {len(cands)} of the {req.runs} candidates asked: the others "
                 f"drawn were repeats or asked a cluster for more than its clip allows at "
                 f"{ws.space.needed:,} {ws.unit}; a smaller budget or fewer runs fits")
    objective = "target" if targeted else "the user's"
    draw = Draw(req.num_tokens, req.num_samples, req.seed, req.fmt)
    with atomic_output_dir(req.out, "search propose") as tmp:
        ids = write_candidates(tmp, ws, cands, objective, draw, "clusterclip search propose")
        write_round(tmp, ws, draw, req.workdir, "clusterclip search propose",
                    {"runs_asked": req.runs, "runs": len(ids), "short": short})
        if extra is not None:
            extra(tmp)
        if req.fmt is not None:
            export_all(corpus(), tmp, ws, cands, ids, draw, tokenizer, log, "search propose")
        if req.blend:
            write_blends(corpus(), tmp, Path(req.out).resolve(), ws, cands, ids, tokenizer,
                         log)
    return {"runs": len(ids), "ids": ids, "groups": len(ws.names), "kind": ws.kind,
            "unit": ws.unit, "target_overlap": ws.overlap, "short": short}


def _capacity_message(ws: ClusterSpace, req: ProposeRequest) -> str:
    total = int(ws.space.train_tokens.sum())
    name = "num_tokens" if req.num_tokens is not None else "num_samples"
    return (f"{name} {ws.space.needed:,}: more than the clip of round 1's fixed candidates "
            f"({DEFAULT_CLIP}) can supply from this corpus ({DEFAULT_CLIP} x {total:,} "
            f"{ws.unit}); give a budget of at most {DEFAULT_CLIP * total:,}")


def export_all(corpus: Any, tmp: Path, ws: ClusterSpace, cands: list[Candidate], ids: list[str],
               draw: Draw, tokenizer: Any, log: Any, command: str,
               seeds: list[int] | None = None) -> None:
    """Each candidate's schedule (``schedules/<run>.npy``, drawn from ``ws.labels``: the
    kept-out documents are -1 there) and its export (``runs/<run>/``, verified on
    read-back by the export code); ``seeds``: one per candidate (default ``draw.seed``)."""
    from clusterclip.export import export_schedule
    from clusterclip.sampling import write_schedule
    from clusterclip.storage.arrays import load_npy

    corpus.verify_files()
    (tmp / "schedules").mkdir()
    seeds = [draw.seed] * len(cands) if seeds is None else seeds
    for i, (rid, c, seed) in enumerate(zip(ids, cands, seeds, strict=True)):
        path = tmp / "schedules" / f"{rid}.npy"
        write_schedule(ws.labels, path, num_samples=draw.num_samples,
                       num_tokens=draw.num_tokens, doc_tokens=ws.doc_tokens,
                       strategy=c.timing, clip=c.clip, cluster_weights=np.asarray(c.weights),
                       seed=seed)
        schedule = load_npy(path, "schedule", kinds="iu", ndim=1, mmap=True)
        export_schedule(corpus, ws.labels, schedule, tmp / "runs" / rid, fmt=draw.fmt,
                        source=str(path), doc_tokens=ws.doc_tokens,
                        tokenizer=tokenizer if draw.fmt == "megatron" else None,
                        token_method="the tokens per document that the token budget counts "
                                     "(W's token counts: the tokenizer given, else the "
                                     "estimate)")
        log(f"{command}: {i + 1}/{len(ids)} {rid}: {len(schedule):,} positions "
            f"exported as {draw.fmt}")


BLEND_NOTE = ("a Megatron blend draws each cluster's share of samples at random, so it keeps "
              "the mixture's token shares but not its clip (a small cluster repeats as often "
              "as its weight asks) nor its pacing (the order is Megatron's shuffle)")


def blend_weights(weights: np.ndarray, labels: np.ndarray, doc_tokens: np.ndarray
                  ) -> np.ndarray:
    """The token share of each cluster in a mixture: ``w_k`` (a share of the documents
    drawn) x the cluster's mean tokens per document, normalised (Megatron's blend weighs
    its datasets by samples of ``--seq-length`` tokens)."""
    use = labels >= 0
    k = len(weights)
    n = np.bincount(labels[use], minlength=k).astype(np.float64)
    t = np.bincount(labels[use], weights=doc_tokens[use], minlength=k)
    mean = np.divide(t, n, out=np.zeros(k), where=n > 0)
    share = np.asarray(weights, dtype=np.float64) * mean
    return share / share.sum()


def write_blends(corpus: Any, tmp: Path, final: Path, ws: ClusterSpace, cands: list[Candidate],
                 ids: list[str], tokenizer: Any, log: Any) -> None:
    """Each cluster's documents once as a Megatron dataset (``clusters/cluster_K/``, the
    export code's ``--format megatron``, read back and verified), and per candidate
    ``blends/<run>.txt``: Megatron-LM's ``--data-path`` blend (and ``blends/<run>.json``: it,
    the mixture's weights, its token shares and what a blend loses) (``weight prefix`` pairs,
    the candidate's token shares over the clusters it draws)."""
    from clusterclip.export import export_schedule
    from clusterclip.export.megatron import PREFIX, indexed_dataset
    from clusterclip.storage.atomic import write_json, write_text

    corpus.verify_files()
    labels = ws.labels
    tokens = np.zeros(labels.size)
    for k in np.flatnonzero(np.bincount(labels[labels >= 0], minlength=ws.space.num_clusters)):
        s = export_schedule(corpus, labels, np.flatnonzero(labels == k),
                            tmp / "clusters" / f"cluster_{k}", fmt="megatron",
                            source=f"cluster {k}", tokenizer=tokenizer)
        docs = np.load(tmp / "clusters" / f"cluster_{k}" / "documents.npy")
        ds = indexed_dataset().IndexedDataset(str(tmp / "clusters" / f"cluster_{k}" / PREFIX))
        tokens[docs[:, 1]] = np.asarray(ds.sequence_lengths, dtype=np.float64)
        log(f"search propose: cluster {k}: {s['rows']:,} documents as a Megatron dataset")
    (tmp / "blends").mkdir()
    for rid, c in zip(ids, cands, strict=True):
        share = blend_weights(np.asarray(c.weights), labels, tokens)
        parts = [f"{share[k]:.12g} {final / 'clusters' / f'cluster_{k}' / PREFIX}"
                 for k in np.flatnonzero(share > 0)]
        write_text(tmp / "blends" / f"{rid}.txt", " ".join(parts) + "\n")
        write_json(tmp / "blends" / f"{rid}.json", {
            "run": rid, "data_path": " ".join(parts),
            "mixture_weights": list(c.weights), "token_shares": share.tolist(),
            "loses": BLEND_NOTE})
