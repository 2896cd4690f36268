"""A fast embedder's table tuned to the corpus (``--embedder fast --tune N``).

The untuned table knows each word piece alone; a document's meaning is more than the
sum of its pieces taken alone. Tuning moves the table so that the fast embedding of each
document approaches MiniLM's (the teacher's):

1. A seeded sample of N documents (:func:`tune_indices`) is embedded by the teacher
   (MiniLM on the fastest agreeing backend, :func:`clusterclip.embedding.pipeline.resolve_backend`),
   and each vector projected on the table's own PCA axes.
2. Ridge regression on the token rows: the mean ``x_d T`` of a document's rows should be
   the teacher's direction (centred, scaled to the untuned spread, plus the untuned common
   part), with ``T`` pulled toward the untuned table ``T0``:
   ``min ||X T - Y||^2 + lam ||T - T0||^2``. Solved exactly in its dual
   (``T = T0 + X^T (X X^T + lam I)^-1 (Y - X T0)``: an N x N system, N <= 8,192).
3. ``lam`` is chosen without labels: on a held-out tenth of the sample, the one whose
   embeddings (normalised, centred as :meth:`StaticEmbedder.encode` centres) have the
   highest mean cosine to the teacher's; the untuned table is kept when none beats it.

The tuned table is cached in :func:`clusterclip.storage.cache.cache_dir`, keyed by the sample's
texts, N, the seed, the teacher and the recipe (:data:`TUNE_VERSION`).

``--tune auto`` (the default, :func:`resolve_tune`): a sample of :data:`AUTO_DOCUMENTS`
when the corpus has at least :data:`AUTO_MIN_VALID` documents with text (the teacher then
embeds at most a tenth of it), untuned otherwise.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embedding.base import MINILM_MAX_LENGTH, l2_normalize
from clusterclip.errors import InputError
from clusterclip.storage.arrays import save_npy
from clusterclip.storage.atomic import write_json
from clusterclip.storage.cache import cache_dir
from clusterclip.storage.digests import fingerprint
from clusterclip.storage.jsonfile import read_json

TUNE_VERSION = 1
# Tokens per document for the teacher (MiniLM's own limit).
TEACHER_TOKENS = MINILM_MAX_LENGTH
# Part of the sample held out to choose the ridge strength.
HOLDOUT = 0.1
# Ridge strengths tried, as multiples of the mean diagonal of X X^T.
RIDGE = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
MAX_DOCUMENTS = 8192
#: ``--tune auto``: the sample it tunes on, and the documents with text it needs for that.
AUTO = "auto"
AUTO_DOCUMENTS = 2000
AUTO_MIN_VALID = 10 * AUTO_DOCUMENTS


def resolve_tune(tune: int | str, valid: int) -> int:
    """The sample size ``tune`` means for a corpus of ``valid`` documents with text:
    ``tune`` itself, or for :data:`AUTO` :data:`AUTO_DOCUMENTS` when ``valid`` is at least
    :data:`AUTO_MIN_VALID`, else 0 (untuned)."""
    if tune != AUTO:
        return int(tune)
    return AUTO_DOCUMENTS if valid >= AUTO_MIN_VALID else 0


@dataclass(frozen=True)
class TunePlan:
    """What ``--tune`` asked for: sample size, seed, and the teacher: what determines its
    vectors (``teacher_identity``) and how to load it (``make_teacher``, called only when
    the tuned table is not cached; :func:`clusterclip.embedding.pipeline.make_embedder`
    fills both)."""

    documents: int
    seed: int = 0
    teacher_identity: dict[str, Any] = field(default_factory=dict)
    make_teacher: Callable[[], Any] | None = None


def tune_indices(valid: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` indices of valid documents (all of them when fewer), drawn with ``seed``,
    ascending (int64)."""
    idx = np.flatnonzero(np.asarray(valid, dtype=bool))
    if n >= len(idx):
        return idx.astype(np.int64)
    pick = np.random.default_rng(seed).choice(len(idx), n, replace=False)
    return np.sort(idx[pick]).astype(np.int64)


def tuned_table(emb: Any, texts: list[str], plan: TunePlan,
                progress: bool = True) -> tuple[np.ndarray, dict[str, Any]]:
    """The table of ``emb`` tuned on ``texts`` (the sample) and a report (ridge strength,
    held-out cosine to the teacher before and after, seconds, ``cached``)."""
    if plan.documents > MAX_DOCUMENTS:
        raise InputError(f"tune {plan.documents}: at most {MAX_DOCUMENTS} documents",
                         params=("tune",))
    digest = hashlib.sha256("\0".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
    key = fingerprint({"v": TUNE_VERSION, "base": emb.identity(), "texts": digest,
                       "n": plan.documents, "seed": plan.seed,
                       "teacher": plan.teacher_identity, "ridge": RIDGE,
                       "holdout": HOLDOUT})
    folder = cache_dir()
    path = None if folder is None else folder / f"static-tuned-{key}.npy"
    cached = _load(path, emb.table.shape)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    if plan.make_teacher is None:
        raise ValueError("the tuned table is not cached and the plan has no teacher")
    teacher = plan.make_teacher()
    from tqdm import tqdm

    with tqdm(total=len(texts), desc="tuning the fast table: teacher vectors", unit="doc",
              disable=not progress, leave=False) as bar:
        y = teacher.encode(texts, on_batch=bar.update)
    t_teacher = time.perf_counter() - t0
    axes = emb.pca_axes()
    x = _mean_rows(emb, texts)
    table, report = fit_table(emb.table, x, (y.astype(np.float64) @ axes), seed=plan.seed)
    report.update({"documents": len(texts), "teacher": plan.teacher_identity,
                   "teacher_seconds": round(t_teacher, 3),
                   "seconds": round(time.perf_counter() - t0, 3)})
    if path is not None:
        save_npy(path, table)
        write_json(path.with_suffix(".json"), report)
    return table, {**report, "cached": False}


def _load(path: Path | None, shape: tuple[int, ...]) -> tuple[np.ndarray, dict] | None:
    if path is None or not path.exists():
        return None
    try:
        table = np.load(path, allow_pickle=False)
        report = read_json(path.with_suffix(".json"))
    except (OSError, ValueError, InputError):
        return None  # a damaged cache is rebuilt
    if table.shape != shape or table.dtype != np.float32:
        return None
    return table, {**report, "cached": True}


def _mean_rows(emb: Any, texts: list[str]):
    """N x V CSR: row d holds 1 / n_d for each of document d's n_d word pieces."""
    from scipy.sparse import csr_matrix

    pieces, indptr = emb._pieces(texts)
    counts = np.diff(indptr)
    data = np.repeat(1.0 / np.maximum(counts, 1), counts)
    x = csr_matrix((data, pieces, indptr), shape=(len(texts), len(emb.table)))
    x.sum_duplicates()
    return x


def fit_table(table0: np.ndarray, x: Any, z: np.ndarray, *, seed: int = 0
              ) -> tuple[np.ndarray, dict[str, Any]]:
    """Ridge fit of the table rows (module docstring, step 2 and 3).

    ``table0``: V x d float32; ``x``: N x V CSR of mean weights; ``z``: N x d float64,
    the teacher's vectors in the table's space. Returns the tuned V x d float32 table
    (rows of pieces absent from the sample unchanged) and a report.
    """
    n = x.shape[0]
    active = np.unique(x.indices)
    xa = x[:, active]
    m0 = np.asarray(xa @ table0[active].astype(np.float64))
    common = m0.mean(0)
    zc = z - z.mean(0)
    spread = np.sqrt(np.mean(np.sum((m0 - common) ** 2, 1)) / max(
        np.mean(np.sum(zc ** 2, 1)), 1e-30))
    resid = common + spread * zc - m0
    k = np.asarray((xa @ xa.T).todense(), dtype=np.float64)
    scale = float(np.mean(np.diag(k))) or 1.0
    order = np.random.default_rng(seed).permutation(n)
    ho, tr = np.sort(order[:max(1, int(n * HOLDOUT))]), np.sort(order[max(1, int(n * HOLDOUT)):])
    untuned = _held_out_cosine(m0[tr], m0[ho], zc[ho])
    best = (untuned, None)
    scores = {}
    if len(tr) >= 2:
        vals, vecs = np.linalg.eigh(k[np.ix_(tr, tr)])
        proj = vecs.T @ resid[tr]
        for mult in RIDGE:
            alpha = vecs @ (proj / (vals + mult * scale)[:, None])
            score = _held_out_cosine(m0[tr] + k[np.ix_(tr, tr)] @ alpha,
                                     m0[ho] + k[np.ix_(ho, tr)] @ alpha, zc[ho])
            scores[mult] = round(score, 5)
            if score > best[0]:
                best = (score, mult)
    report = {"ridge": best[1], "held_out_cosine_untuned": round(untuned, 5),
              "held_out_cosine_tuned": round(best[0], 5), "ridge_scores": scores,
              "active_pieces": int(len(active))}
    if best[1] is None:
        return table0.copy(), report
    from scipy.linalg import solve

    alpha = solve(k + best[1] * scale * np.eye(n), resid, assume_a="pos")
    table = table0.copy()
    table[active] += np.asarray(xa.T @ alpha, dtype=np.float64).astype(np.float32)
    return table, report


def _held_out_cosine(fit_rows: np.ndarray, rows: np.ndarray, target: np.ndarray) -> float:
    """Mean cosine of held-out ``rows`` (normalised, then centred on the mean of the
    normalised ``fit_rows``, as the encoder centres) to their ``target`` directions."""
    centre = l2_normalize(fit_rows).mean(0)
    v = l2_normalize(l2_normalize(rows) - centre)
    return float(np.mean(np.sum(v * l2_normalize(target), 1)))
