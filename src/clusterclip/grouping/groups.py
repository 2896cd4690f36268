"""Write the corpus out grouped by cluster, in the authors' layout.

``OUT/cluster_{k}/data_{j}.jsonl`` holds the documents of cluster ``k`` in
corpus order, each the original record with ``label`` (cluster id), ``score``
(cosine similarity to the centroid) and ``doc_index`` (position in the
corpus) added; documents without text go to ``OUT/excluded/``. A field of the
input named like a field clusterclip adds is kept as ``orig_<name>``, and values
JSON has no type for (Parquet's binary, timestamp, decimal) take their stated JSON
form: see :mod:`clusterclip.corpus.records` (one-to-one, so every input record is
recovered exactly).

The output is built in a temporary directory, re-read and checked, and only
then moved into place: every input document must appear exactly once (a
bitmap over ``doc_index``) and the order-independent hash of the re-read
records must equal the hash of the input records.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.corpus.records import (
    field_types,
    is_renamed,
    record_json,
    rename_reserved,
    restore_reserved,
)
from clusterclip.errors import InputError
from clusterclip.labels import check_labels
from clusterclip.storage.atomic import write_json
from clusterclip.storage.outputs import atomic_output_dir, check_output_dir

ADDED = ("label", "score", "doc_index")
EXCLUDED_DIR = "excluded"
#: What ``group`` may write in its folder (shell patterns).
WRITES = ("group.json", "cluster_[0-9]*/data_[0-9]*.jsonl", f"{EXCLUDED_DIR}/data_[0-9]*.jsonl")


def _canonical(rec: dict[str, Any]) -> bytes:
    return record_json(rec, sort_keys=True).encode()


def record_hash(index: int, rec: dict[str, Any]) -> int:
    """128-bit hash of one document (its index and canonical record)."""
    h = hashlib.blake2b(index.to_bytes(8, "little") + _canonical(rec), digest_size=16)
    return int.from_bytes(h.digest(), "little")


def annotate(index: int, rec: dict[str, Any], label: int, score: float | None
             ) -> dict[str, Any]:
    """The output record: ``rec`` with the cluster fields added (clashing keys renamed by
    :func:`clusterclip.corpus.records.rename_reserved`: ``label`` -> ``orig_label``, ...)."""
    out = rename_reserved(rec)
    out.update(label=label, score=score, doc_index=index)
    return out


def original(rec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Invert :func:`annotate`: (doc_index, original record)."""
    return int(rec["doc_index"]), restore_reserved(rec, drop=ADDED)


class _Writer:
    """Per-cluster buffered appends, so K clusters never need K open files."""

    def __init__(self, root: Path, docs_per_file: int, buffer_bytes: int) -> None:
        self.root, self.docs_per_file, self.buffer_bytes = root, docs_per_file, buffer_bytes
        self.pending: dict[str, list[bytes]] = defaultdict(list)
        self.written: dict[str, int] = defaultdict(int)
        self.buffered = 0

    def add(self, group: str, line: bytes) -> None:
        self.pending[group].append(line)
        self.buffered += len(line)
        if self.buffered >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        for group, lines in self.pending.items():
            d = self.root / group
            d.mkdir(exist_ok=True)
            done = self.written[group]
            pos = 0
            while pos < len(lines):
                j, used = divmod(done, self.docs_per_file)
                take = min(len(lines) - pos, self.docs_per_file - used)
                with open(d / f"data_{j}.jsonl", "ab") as f:
                    f.write(b"".join(lines[pos:pos + take]))
                pos += take
                done += take
            self.written[group] = done
        self.pending.clear()
        self.buffered = 0


def group_corpus(corpus: Any, labels: np.ndarray, scores: np.ndarray, out: str | os.PathLike[str],
                 *, docs_per_file: int = 100_000, buffer_bytes: int = 64 << 20,
                 overwrite: bool = False, progress: bool = True) -> dict[str, Any]:
    """Write ``corpus`` grouped by ``labels`` (int[N], -1 excluded) into ``out``.

    Returns the summary also written to ``out/group.json``. Raises
    ``RuntimeError`` if the verification fails (nothing is moved into place).
    An existing ``out`` is replaced only when empty or written by an earlier
    ``group`` (or with ``overwrite``); see :func:`clusterclip.storage.outputs.check_output_dir`.
    """
    from tqdm import tqdm

    n = len(corpus)
    if docs_per_file < 1:
        raise InputError(f"docs_per_file must be >= 1, got {docs_per_file}",
                         params=("docs_per_file",))
    out = check_output_dir(out, "group", overwrite=overwrite)
    labels = check_labels(labels, num_documents=n)
    scores = np.asarray(scores)
    if scores.shape != (n,) or scores.dtype.kind != "f":
        raise InputError(f"scores must be {n} floats (one per document), got {scores.dtype} "
                         f"of shape {scores.shape}; re-run cluster")
    in_hash = 0
    renamed: dict[str, int] = defaultdict(int)
    with atomic_output_dir(out, "group", overwrite=overwrite) as tmp:
        writer = _Writer(tmp, docs_per_file, buffer_bytes)
        labels_l = labels.tolist()
        scores_l = scores.tolist()
        for i, rec in tqdm(corpus.iter_records(), total=n, desc="grouping", unit="doc",
                           disable=not progress, leave=False):
            in_hash = (in_hash + record_hash(i, rec)) % (1 << 128)
            for key in rec:
                if is_renamed(key):
                    renamed[key] += 1
            k = labels_l[i]
            group = f"cluster_{k}" if k >= 0 else EXCLUDED_DIR
            line = annotate(i, rec, int(k), float(scores_l[i]) if k >= 0 else None)
            writer.add(group, record_json(line).encode() + b"\n")
        writer.flush()
        check = verify_groups(tmp, n)
        if check["hash"] != in_hash:
            raise RuntimeError(f"grouped output under {tmp} does not hash to the input; "
                               f"nothing was moved to {out}")
        summary = {
            "documents": n,
            "groups": dict(sorted(writer.written.items(), key=lambda kv: _group_key(kv[0]))),
            "files": check["files"],
            "renamed_fields": {k: renamed[k] for k in sorted(renamed)},
            "field_types": rename_reserved(field_types(corpus.files)),
            "verified": {"exactly_once": True, "content_hash": f"{in_hash:032x}"},
        }
        write_json(tmp / "group.json", summary)
    return summary


def _group_key(name: str) -> tuple[int, int]:
    return (1, 0) if name == EXCLUDED_DIR else (0, int(name.split("_", 1)[1]))


def verify_groups(root: Path, n: int) -> dict[str, Any]:
    """Re-read a grouped output: every doc_index in [0, n) exactly once, labels match folders.

    Returns ``{"hash": int, "files": int}``; raises RuntimeError on any violation.
    """
    seen = np.zeros(n, dtype=bool)
    total = 0
    files = 0
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        want = None if d.name == EXCLUDED_DIR else int(d.name.split("_", 1)[1])
        for f in sorted(d.glob("data_*.jsonl")):
            files += 1
            with open(f, "rb") as fh:
                for raw in fh:
                    rec = json.loads(raw)
                    i, orig = original(rec)
                    if not 0 <= i < n or seen[i]:
                        raise RuntimeError(f"{f}: document {i} is out of range or repeated")
                    if (want is None and rec["label"] != -1) or (want is not None
                                                                 and rec["label"] != want):
                        raise RuntimeError(f"{f}: document {i} has label {rec['label']}")
                    seen[i] = True
                    total = (total + record_hash(i, orig)) % (1 << 128)
    if not seen.all():
        missing = int((~seen).sum())
        raise RuntimeError(f"grouped output misses {missing} of {n} documents")
    return {"hash": total, "files": files}
