"""The work directory: every artifact of a run plus ``manifest.json``.

Layout (each stage owns its names)::

    W/manifest.json        inputs (size, sha256), parameters, versions, stage status
    W/corpus/              corpus index written by ``embed`` (see clusterclip.corpus)
    W/embeddings.npy       N x d float, L2-normalised, corpus order
    W/valid.npy            bool[N]: True where the document has text (else label -1)
    W/labels.npy           int32[N] cluster id, -1 for excluded documents
    W/scores.npy           float32[N] cosine similarity to the assigned centroid
    W/centroids.npy        K x d float32
    W/schedule.npy         int64 document indices (``run --num-samples``)
    W/report/, W/experiment/

A stage is *current* when its recorded fingerprint equals the fingerprint of
its present inputs and parameters and all its outputs exist. A stage's
fingerprint includes the fingerprints of the stages it reads, so a changed
input invalidates everything downstream without any bookkeeping.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from pathlib import Path
from typing import Any

from clusterclip.errors import InputError
from clusterclip.io import sha256_file, write_json

MANIFEST = "manifest.json"
_VERSIONED = ("clusterclip", "numpy", "torch", "faiss-cpu", "sentence-transformers",
              "transformers", "pyarrow", "matplotlib")


def library_versions() -> dict[str, str]:
    """Versions of the libraries that can change results, as installed."""
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


class Workdir:
    """A run's directory and its manifest. Only one process (rank 0) writes it."""

    def __init__(self, path: str | os.PathLike[str], create: bool = True) -> None:
        self.root = Path(path)
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"work directory {self.root} exists and is not a directory")
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise InputError(f"work directory {self.root} does not exist")
        self.manifest_path = self.root / MANIFEST
        self.manifest = self._load()

    # -- paths -------------------------------------------------------------
    def path(self, *parts: str) -> Path:
        """Path of an artifact inside the work directory."""
        return self.root.joinpath(*parts)

    # -- manifest ----------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            return {"version": 1, "inputs": {}, "stages": {}}
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{self.manifest_path}: not a valid manifest ({e})") from None

    def save(self) -> None:
        write_json(self.manifest_path, self.manifest)

    def input_record(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """``{path, size, sha256}`` of an input file.

        The hash is cached in the manifest under (size, mtime), so re-running a
        pipeline over unchanged multi-GB inputs does not re-read them.
        """
        p = Path(path).resolve()
        try:
            st = p.stat()
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})") from None
        key = str(p)
        cached = self.manifest["inputs"].get(key)
        if cached and cached["size"] == st.st_size and cached["mtime_ns"] == st.st_mtime_ns:
            digest = cached["sha256"]
        else:
            digest = sha256_file(p)
            self.manifest["inputs"][key] = {
                "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        return {"path": key, "size": st.st_size, "sha256": digest}

    def stage(self, name: str) -> dict[str, Any] | None:
        """The manifest record of a stage, or None."""
        return self.manifest["stages"].get(name)

    def is_current(self, name: str, fingerprint: str) -> bool:
        """True when stage ``name`` finished with this fingerprint and its outputs exist."""
        rec = self.stage(name)
        return bool(
            rec
            and rec.get("status") == "done"
            and rec.get("fingerprint") == fingerprint
            and all(self.path(o).exists() for o in rec.get("outputs", []))
        )

    def begin(self, name: str, fingerprint: str, params: dict[str, Any]) -> None:
        """Record that a stage started (its old outputs are no longer trusted)."""
        self.manifest["stages"][name] = {
            "status": "running",
            "fingerprint": fingerprint,
            "params": params,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": library_versions(),
        }
        self.save()

    def finish(self, name: str, fingerprint: str, outputs: list[str],
               info: dict[str, Any] | None = None) -> None:
        """Record that a stage finished; ``outputs`` are paths relative to the root."""
        rec = self.manifest["stages"].setdefault(name, {})
        if rec.get("fingerprint") != fingerprint:
            raise RuntimeError(f"stage {name} finished with a fingerprint it did not begin with")
        rec.update(status="done", outputs=list(outputs), info=info or {},
                   finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        self.save()
