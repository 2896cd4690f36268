"""A small work directory for the report's tests, built from the bundled corpus.

It holds a real corpus index over 600 Python-docs sections. Its clusters are the
documentation folders (field ``label``), with the large ``library`` folder split in
three and two small folders merged, so that the clusters differ from the labels and
the agreement metrics are not trivially 1. Embeddings are hashed bag-of-words vectors
(L2-normalised); scores are their real cosine similarities to the cluster centroid.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np

N_DOCS = 600


def bag_of_words(texts: list[str], dim: int = 256) -> np.ndarray:
    out = np.zeros((len(texts), dim), dtype=np.float64)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z_]{3,}", t.lower()):
            out[i, (sum(map(ord, w)) * 2654435761) % dim] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def make_report_workdir(root: Path, pydocs_path: Path, n_docs: int = N_DOCS) -> Path:
    """Write the work directory into ``root`` (corpus/, labels, scores, centroids, valid,
    embeddings); document 5 has no text (label -1)."""
    from clusterclip.corpus import Corpus

    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    rows = rows[:: len(rows) // n_docs][:n_docs]  # spread over every folder
    rows[5]["text"] = "   "  # one document without text: excluded (-1)
    src = root / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    corpus = Corpus.scan(src, progress=False)
    corpus.save(root / "corpus")
    folders = sorted({r["label"] for r in rows})
    labels = np.array([folders.index(r["label"]) for r in rows], dtype=np.int32)
    library = folders.index("library")
    labels[(labels == library) & (np.arange(labels.size) % 3 == 1)] = len(folders)
    labels[(labels == library) & (np.arange(labels.size) % 3 == 2)] = len(folders) + 1
    labels[labels == folders.index("installing")] = folders.index("install")
    labels = np.unique(labels, return_inverse=True)[1].astype(np.int32)  # ids 0..K-1
    valid = np.asarray(corpus.valid)
    labels[~valid] = -1
    emb = bag_of_words([r["text"] for r in rows])
    k = int(labels.max()) + 1
    centroids = np.stack([emb[labels == c].mean(axis=0) for c in range(k)])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    scores = np.einsum("nd,nd->n", emb, centroids[np.maximum(labels, 0)]).astype(np.float32)
    scores[labels < 0] = 0.0
    np.save(root / "labels.npy", labels)
    np.save(root / "scores.npy", scores)
    np.save(root / "centroids.npy", centroids.astype(np.float32))
    np.save(root / "valid.npy", valid)
    np.save(root / "embeddings.npy", emb.astype(np.float32))
    return root


def build_report(workdir: Path, **options) -> dict:
    """The ``report`` stage of ``workdir`` with :class:`ReportOptions` ``options``."""
    from clusterclip.stages import report
    from clusterclip.workdir import Workdir

    return report.run(Workdir(workdir, create=False), report.ReportOptions(**options))
