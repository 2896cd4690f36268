"""Near-duplicate groups (the ``dedup`` stage, which writes ``W/groups.npy`` and
``W/dedup.json``, is :mod:`clusterclip.stages.dedup`).

Inside each cluster of ``W/labels.npy``, two documents whose embeddings
(``W/embeddings.npy``, L2-normalised) have cosine similarity >= ``threshold``
are near-duplicates; the connected components of that relation are the
*groups*. The cosine is a float32 dot product, compared with ``threshold``
less :func:`rounding_slack` (the most by which the product of a stored unit
vector with itself can fall below 1), so that exact copies join at every
allowed threshold, 1 included: at ``threshold`` 1 the groups are the documents
whose embeddings are equal up to rounding. ``groups[i]`` is the smallest
document index of document ``i``'s group (so a document with no near-duplicate
is its own group: ``groups[i] == i``), -1 for excluded documents (label -1).

Each cluster is streamed in tiles of at most ``TILE_ROWS x TILE_COLS``
similarities (the upper triangle only), never a cluster x cluster matrix:
memory stays bounded for a cluster of any size. The pairs of a tile are
reduced to a spanning forest of that tile at once (at most rows + cols
edges), and the components of a cluster come from scipy's
``connected_components`` over those forests. Tile shapes are fixed (part of
the result's definition: a float32 product does not depend on anything else),
so the groups are deterministic.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np

from clusterclip.errors import InputError

TILE_ROWS = 2048
TILE_COLS = 4096
#: A cluster whose float32 rows fit in this many bytes is read into memory once;
#: a larger one is read tile by tile from the memory map.
RESIDENT_BYTES = 256 << 20
LARGEST_SHOWN = 10  # groups listed in dedup.json
EXAMPLES_PER_GROUP = 3
EXAMPLE_CHARS = 200
#: The near-duplicate cosine of ``clusterclip dedup`` (and of ``run --dedup``) unless told
#: otherwise; ``search`` uses W's own (:func:`clusterclip.stages.dedup.workdir_threshold`).
DEFAULT_THRESHOLD = 0.95


def check_threshold(threshold: Any, name: str = "threshold") -> float:
    """``threshold`` as a float in (0, 1]; else InputError naming the parameter ``name``."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) \
            or not math.isfinite(threshold) or not 0.0 < float(threshold) <= 1.0:
        raise InputError(f"{name} {threshold}: must be a cosine similarity in (0, 1]",
                         params=(name,))
    return float(threshold)


def rounding_slack(dtype: Any, dim: int) -> float:
    """How far below 1 the float32 dot product of a unit vector stored as ``dtype`` (of
    ``dim`` dimensions) with itself can fall: ``2u + 2 dim 2**-24`` (``u`` the unit
    roundoff of the storage, 2**-11 for float16, else float32's 2**-24; the normalisation
    and the dot product each add at most ``dim`` float32 roundings). 4.6e-5 for float32
    and 1.0e-3 for float16 embeddings of 384 dimensions."""
    u = 2.0**-11 if np.dtype(dtype).itemsize <= 2 else 2.0**-24
    return 2 * u + 2 * int(dim) * 2.0**-24


def _row_reader(X: np.ndarray, idx: np.ndarray):
    """``rows(lo, hi)``: float32 embeddings of ``idx[lo:hi]`` (the cluster's documents)."""
    if idx.size * X.shape[1] * 4 <= RESIDENT_BYTES:
        Y = np.asarray(X[idx], dtype=np.float32)
        return lambda lo, hi: Y[lo:hi]
    return lambda lo, hi: np.asarray(X[idx[lo:hi]], dtype=np.float32)


def iter_pairs(X: np.ndarray, idx: np.ndarray, threshold: float
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Near-duplicate pairs among the documents ``idx`` (ascending), per tile.

    Yields ``(a, b)``: int64 arrays of positions in ``idx`` with ``a < b`` and
    cosine(X[idx[a]], X[idx[b]]) >= ``threshold`` - :func:`rounding_slack` (float32
    products). Every pair is yielded exactly once.
    """
    n = idx.size
    rows = _row_reader(X, idx)
    lowest = threshold - rounding_slack(X.dtype, X.shape[1])
    for r0 in range(0, n, TILE_ROWS):
        r1 = min(n, r0 + TILE_ROWS)
        A = rows(r0, r1)
        for c0 in range(r0, n, TILE_COLS):
            c1 = min(n, c0 + TILE_COLS)
            S = A @ rows(c0, c1).T
            ii, jj = np.nonzero(S >= lowest)
            a = ii.astype(np.int64) + r0
            b = jj.astype(np.int64) + c0
            keep = b > a
            if keep.any():
                yield a[keep], b[keep]


def iter_cross_pairs(A: np.ndarray, X: np.ndarray, threshold: float
                     ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Near-duplicate pairs between two sets of unit vectors, per tile: ``(a, b)`` int64
    rows of ``A`` and of ``X`` with float32 cosine >= ``threshold`` - :func:`rounding_slack`
    (of the coarser storage), the rule of :func:`iter_pairs` across the sets."""
    dim = X.shape[1]
    lowest = threshold - max(rounding_slack(A.dtype, dim), rounding_slack(X.dtype, dim))
    every = np.arange(X.shape[0], dtype=np.int64)
    rows = _row_reader(X, every)
    for r0 in range(0, A.shape[0], TILE_ROWS):
        Ar = np.asarray(A[r0:r0 + TILE_ROWS], dtype=np.float32)
        for c0 in range(0, X.shape[0], TILE_COLS):
            ii, jj = np.nonzero(Ar @ rows(c0, min(X.shape[0], c0 + TILE_COLS)).T >= lowest)
            if ii.size:
                yield ii.astype(np.int64) + r0, jj.astype(np.int64) + c0


def _forest(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (node, smallest node of its component) with the connectivity of (a, b)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    nodes, inv = np.unique(np.concatenate([a, b]), return_inverse=True)
    m = nodes.size
    g = coo_matrix((np.ones(a.size, np.int8), (inv[:a.size], inv[a.size:])), shape=(m, m))
    _, comp = connected_components(g, directed=False)
    first = np.full(comp.max() + 1, m, np.int64)
    np.minimum.at(first, comp, np.arange(m))
    return nodes, nodes[first[comp]]


def cluster_groups(X: np.ndarray, idx: np.ndarray, threshold: float) -> tuple[np.ndarray, int]:
    """Group of each document of ``idx`` (ascending doc ids of one cluster).

    Returns (``rep``, pairs): ``rep[i]`` is the smallest position in ``idx`` of
    position ``i``'s group; ``pairs`` the number of near-duplicate pairs found.
    """
    n = idx.size
    froms, tos = [], []
    pairs = 0
    for a, b in iter_pairs(X, idx, threshold):
        pairs += a.size
        f, t = _forest(a, b)
        froms.append(f)
        tos.append(t)
    rep = np.arange(n, dtype=np.int64)
    if not froms:
        return rep, 0
    f, t = _forest(np.concatenate(froms), np.concatenate(tos))
    rep[f] = t
    return rep, pairs


def near_duplicate_groups(X: np.ndarray, labels: np.ndarray, threshold: float, *,
                          progress: bool = False) -> tuple[np.ndarray, int]:
    """``groups`` (int64[N], see the module) and the number of near-duplicate pairs."""
    threshold = check_threshold(threshold)
    lab = np.asarray(labels)
    N = lab.size
    groups = np.full(N, -1, np.int64)
    eligible = lab >= 0
    K = int(lab.max()) + 1 if eligible.any() else 0
    sizes = np.bincount(lab[eligible], minlength=K)
    keys = np.where(eligible, lab, K).astype(np.int64)
    order = np.argsort(keys, kind="stable")[:int(sizes.sum())]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=int(sizes.sum()), desc="dedup", unit="doc", unit_scale=True,
                   leave=False)
    pairs = 0
    try:
        # largest clusters first: the progress bar's rate settles early
        for k in np.argsort(-sizes, kind="stable"):
            idx = order[bounds[k]:bounds[k + 1]]
            if idx.size == 0:
                continue
            rep, p = cluster_groups(X, idx, threshold)
            groups[idx] = idx[rep]
            pairs += p
            if bar is not None:
                bar.update(idx.size)
    finally:
        if bar is not None:
            bar.close()
    return groups, pairs


def group_summary(groups: np.ndarray, labels: np.ndarray, threshold: float, pairs: int,
                  texts: Any = None) -> dict[str, Any]:
    """What ``dedup.json`` says: counts and the largest groups (with example texts when
    ``texts``, a callable doc indices -> texts, is given)."""
    lab = np.asarray(labels)
    g = groups[groups >= 0]
    ids, counts = np.unique(g, return_counts=True)
    multi = counts > 1
    order = np.lexsort((ids, -counts))[:LARGEST_SHOWN]
    largest = []
    for j in order:
        if counts[j] < 2:
            break
        members = np.flatnonzero(groups == ids[j])
        shown = members[:EXAMPLES_PER_GROUP]
        entry: dict[str, Any] = {"group": int(ids[j]), "size": int(counts[j]),
                                 "label": int(lab[ids[j]]),
                                 "members": [int(m) for m in members[:50]]}
        if texts is not None:
            entry["examples"] = [
                {"doc": int(m), "text": (t or "")[:EXAMPLE_CHARS]}
                for m, t in zip(shown, texts(shown), strict=True)]
        largest.append(entry)
    return {
        "threshold": threshold,
        "documents": int(lab.size),
        "eligible_documents": int(g.size),
        "excluded_documents": int(lab.size - g.size),
        "groups": int(ids.size),
        "duplicate_groups": int(multi.sum()),
        "documents_in_duplicate_groups": int(counts[multi].sum()),
        "redundant_documents": int(g.size - ids.size),
        "near_duplicate_pairs": int(pairs),
        "largest_group_size": int(counts.max()) if counts.size else 0,
        "largest_groups": largest,
    }


def format_summary(s: dict[str, Any]) -> str:
    """Human-readable lines of the stage's summary."""
    return (f"near-duplicates (cosine >= {s['threshold']:.12g}, inside each cluster): "
            f"{s['eligible_documents']:,} documents in {s['groups']:,} groups; "
            f"{s['duplicate_groups']:,} groups of 2+ hold "
            f"{s['documents_in_duplicate_groups']:,} documents "
            f"({s['redundant_documents']:,} redundant); largest group "
            f"{s['largest_group_size']:,}")


def plant_near_duplicates(texts: list[str], n_copies: int, seed: int = 0, edits: int = 2
                          ) -> tuple[list[str], np.ndarray]:
    """``texts`` plus ``n_copies`` edited copies of distinct random documents, appended.

    Each copy gets ``edits`` small word edits (a word deleted, a word repeated or
    two neighbouring words swapped). Returns (all texts, ``source``): ``source[i]`` is
    the index of the document copy ``i`` (of ``len(texts) + i``) was made from. For
    measuring a threshold's recall and precision on a corpus (benchmarks/bench_dedup.py).
    """
    rng = np.random.default_rng(seed)
    source = np.sort(rng.choice(len(texts), size=n_copies, replace=False)).astype(np.int64)
    out = list(texts)
    for s in source:
        words = texts[s].split(" ")
        for _ in range(edits):
            if len(words) < 3:
                words.append("x")
                continue
            i = int(rng.integers(0, len(words) - 1))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                del words[i]
            elif kind == 1:
                words.insert(i, words[i])
            else:
                words[i], words[i + 1] = words[i + 1], words[i]
        out.append(" ".join(words))
    return out, source


def group_repetition(doc_counts: np.ndarray, groups: np.ndarray) -> dict[str, int]:
    """Draws per group of a schedule whose draws per document are ``doc_counts``:
    ``max_group_repetition`` (the most draws of one group's documents together),
    ``groups_seen`` and ``groups``."""
    elig = groups >= 0
    _, inv = np.unique(groups[elig], return_inverse=True)
    per = np.bincount(inv, weights=np.asarray(doc_counts)[elig]).astype(np.int64)
    return {"max_group_repetition": int(per.max()) if per.size else 0,
            "groups_seen": int((per > 0).sum()), "groups": int(per.size)}


def representatives(groups: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Ascending document indices: one per group, the member nearest its cluster centroid
    (highest ``scores``, the cosine to the centroid; ties to the smallest index)."""
    elig = np.flatnonzero(groups >= 0)
    order = np.lexsort((elig, -np.asarray(scores, np.float64)[elig], groups[elig]))
    g = groups[elig][order]
    first = np.ones(g.size, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    return np.sort(elig[order][first])
