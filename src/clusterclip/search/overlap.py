"""Target documents that are also in the corpus, and the corpus documents kept out of
training because of them.

A target document *overlaps* the corpus when a corpus document is its exact copy (the
same text once runs of whitespace are one space and the ends are stripped) or its near
copy (cosine of W's embeddings at or above W's near-duplicate threshold, the rule of
:func:`clusterclip.dedup.iter_cross_pairs`). Every corpus copy of a target document is
kept out of training, so that no target test document (nor its near copy) is trained
on and the val objective does not reward memorising the target. When that would take
more than half the corpus away (the target *is* the corpus, or mostly), only the
copies of the target's test documents are kept out: the test verdict stays clean, and
the report says that val then favours what memorises the target's val half.

Pure numpy; the embeddings come from the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Above this share of the clustered corpus, the copies of the target's val documents stay
#: in training (see the module).
MOST = 0.5
#: Above this share of the target in the corpus, the report says so in its first paragraph.
NOTABLE = 0.1


def normalise(text: str) -> str:
    """The text compared for exact copies: whitespace runs as one space, ends stripped."""
    return " ".join(text.split())


def _digest(text: str) -> bytes:
    import hashlib

    return hashlib.sha256(normalise(text).encode("utf-8", errors="surrogatepass")).digest()


@dataclass(frozen=True)
class Overlap:
    """Which target rows have corpus copies, and the (target row, corpus doc) pairs."""

    exact: np.ndarray      # bool[M]: an exact copy is in the corpus
    near: np.ndarray       # bool[M]: no exact copy, but a near copy
    pairs: np.ndarray      # int64[P, 2]: (target row, corpus document), sorted
    target_docs: int       # target rows with text
    threshold: float

    def copies_of(self, rows: np.ndarray, n_corpus: int) -> np.ndarray:
        """bool[n_corpus]: the corpus copies (exact or near) of the target ``rows``."""
        out = np.zeros(n_corpus, dtype=bool)
        hit = np.isin(self.pairs[:, 0], np.asarray(rows, dtype=np.int64))
        out[self.pairs[hit, 1]] = True
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"exact": self.exact.tolist(), "near": self.near.tolist(),
                "pairs": self.pairs.tolist(), "target_docs": self.target_docs,
                "threshold": self.threshold}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Overlap:
        return cls(np.array(d["exact"], dtype=bool), np.array(d["near"], dtype=bool),
                   np.array(d["pairs"], dtype=np.int64).reshape(-1, 2), int(d["target_docs"]),
                   float(d["threshold"]))


def find_overlap(target_texts: Sequence[str | None], corpus_texts: Sequence[str | None],
                 target_emb: np.ndarray, corpus_emb: np.ndarray, usable_rows: np.ndarray,
                 threshold: float) -> Overlap:
    """The overlap of the target with the corpus. ``target_emb``: unit rows of the target
    rows ``usable_rows`` (in that order); ``corpus_emb``: W's embeddings (N x d)."""
    from clusterclip.dedup import iter_cross_pairs

    m = len(target_texts)
    by_text: dict[bytes, list[int]] = {}  # by digest: a corpus's texts are not held twice
    for i, t in enumerate(corpus_texts):
        if t is not None:
            by_text.setdefault(_digest(t), []).append(i)
    pairs: list[tuple[int, int]] = []
    exact = np.zeros(m, dtype=bool)
    for r, t in enumerate(target_texts):
        hits = by_text.get(_digest(t), []) if t is not None else []
        exact[r] = bool(hits)
        pairs += [(r, c) for c in hits]
    near = np.zeros(m, dtype=bool)
    rows = np.asarray(usable_rows, dtype=np.int64)
    if rows.size and corpus_emb.shape[0]:
        for a, b in iter_cross_pairs(target_emb, corpus_emb, threshold):
            near[rows[a]] = True
            pairs += list(zip(rows[a].tolist(), b.tolist(), strict=True))
    near &= ~exact
    arr = np.unique(np.array(pairs, dtype=np.int64).reshape(-1, 2), axis=0)
    return Overlap(exact, near, arr, int(rows.size), float(threshold))


def excluded_documents(overlap: Overlap, labels: np.ndarray, target_val: np.ndarray,
                       target_test: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(exclude bool[N], val_kept)``: the corpus documents kept out of every split, and
    whether the copies of the target's val documents stayed in training (they would have
    taken more than :data:`MOST` of the clustered corpus)."""
    n = labels.size
    test = overlap.copies_of(target_test, n)
    both = test | overlap.copies_of(target_val, n)
    clustered = labels >= 0
    if np.count_nonzero(both & clustered) > MOST * np.count_nonzero(clustered):
        return test, True
    return both, False


def summary(overlap: Overlap, exclude: np.ndarray, val_kept: bool) -> dict[str, Any]:
    """``target_overlap`` of results.json: target documents with an exact / a near (only)
    copy in the corpus, the target's documents, the corpus documents kept out of training,
    the threshold and whether the val copies stayed in training."""
    return {"exact": int(overlap.exact.sum()), "near": int(overlap.near.sum()),
            "target_docs": overlap.target_docs, "corpus_docs_excluded": int(exclude.sum()),
            "threshold": overlap.threshold, "val_copies_trained": val_kept}


def overlap_sentence(o: dict[str, Any]) -> str:
    """The overlap in words (results.md's setup and, when notable, its first paragraph)."""
    n = o["exact"] + o["near"]
    total = max(1, o["target_docs"])
    if n == 0:
        return (f"None of the target's {o['target_docs']} documents is in the corpus (exact "
                f"or near copy, cosine >= {o['threshold']:g}).")
    head = ("The target is the corpus itself: " if n == o["target_docs"] and n > 0 else
            "The target is mostly inside the corpus: " if n > MOST * total else "")
    text = (f"{head}{n} of the target's {o['target_docs']} documents ({n / total:.0%}) are in "
            f"the corpus ({o['exact']} exact, {o['near']} near copies at cosine >= "
            f"{o['threshold']:g}); their {o['corpus_docs_excluded']} corpus copies were kept "
            "out of training")
    if o["val_copies_trained"]:
        return (text + " for the target's test half only (all of them would have left too "
                "little to train on), so the test verdict is clean but val selection favoured "
                "what memorises the target's val half; a target apart from the corpus says "
                "more.")
    return text + ", so no target document was trained on."
