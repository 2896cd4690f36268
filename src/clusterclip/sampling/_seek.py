"""Cached seek index of the replayed cluster strategies (uniform, temperature, clusterclip).

Their per-cluster draw counts at a position depend on every draw before it
(clusterclip's clips change the pool), so a seek is a count-only replay,
linear in the position. The index stores the counts every ``2**bits``
positions (checkpoints of the engine's whole state) and the clip events
before the last one, like Megatron's cached sample indices: a seek then
replays at most ``2**bits`` positions from the nearest checkpoint.

The counts depend only on ``(cluster sizes, weights, seed, clip)``, which
(with ``bits`` and :data:`FORMAT`) key the file, ``seek-<key>.npys`` in the
cache directory (three ``.npy`` arrays back to back: JSON header, count
deltas between checkpoints as uint32, clip events). A file is trusted only
if it parses, its recorded key and shapes match, its SHA-256 over the arrays
matches and every checkpoint is consistent (counts that sum to the
position, within the clip); anything else is ignored and rebuilt. Writes
are atomic (:func:`clusterclip.storage.atomic.atomic_path`); failing to write (a
read-only folder) only costs the cache.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.sampling._engine import ClusterEngine
from clusterclip.storage.atomic import atomic_path, remove_stale_temporaries
from clusterclip.storage.digests import array_fingerprint

#: Version of the index file *and* of the schedule definition it was computed from.
FORMAT = 1
#: log2 of the positions between checkpoints: a seek replays fewer than 2**24
#: positions (about 0.1 s); 1 KiB (K = 10**4 uint32 counts ~ 40 KiB) per 1.7e7 positions.
SEEK_BITS = 24
PREFIX = "seek-"


def _checksum(deltas: np.ndarray, events: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (deltas, events):
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class SeekIndex:
    """Checkpoints of ``engine``'s schedule every ``2**bits`` positions, cached on disk.

    ``cache_dir`` None: kept in memory only (this process).
    """

    def __init__(self, engine: ClusterEngine, cache_dir: Path | None,
                 bits: int | None = None) -> None:
        self.engine = engine
        self.bits = SEEK_BITS if bits is None else int(bits)
        self.cache_dir = cache_dir
        w = engine.weights
        self.key_fields: dict[str, Any] = {
            "format": FORMAT, "bits": self.bits, "seed": engine.seed, "clip": engine.clip,
            "sizes": array_fingerprint(engine.sizes),
            "weights": None if w is None else array_fingerprint(np.asarray(w, np.float64))}
        blob = json.dumps(self.key_fields, sort_keys=True, separators=(",", ":"))
        self.key = hashlib.sha256(blob.encode()).hexdigest()[:32]
        self.path = None if cache_dir is None else Path(cache_dir) / f"{PREFIX}{self.key}.npys"
        K = engine.K
        # counts[i] = counts at position i << bits; events: (cluster, position) of
        # the clips before the last checkpoint
        self._counts = np.zeros((1, K), np.int64)
        self._events = np.empty((0, 2), np.int64)
        self._loaded = False
        self.last_build: dict[str, Any] | None = None  # what the last extension cost

    # ------------------------------------------------------------------ disk
    def _load(self) -> None:
        self._loaded = True
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as f:  # three .npy arrays back to back
                meta = json.loads(np.load(f, allow_pickle=False).tobytes().decode())
                deltas = np.load(f, allow_pickle=False)
                events = np.load(f, allow_pickle=False)
                if f.read(1):
                    return
        except Exception:  # absent, unreadable, not ours: rebuilt
            return
        if self._valid(meta, deltas, events):
            counts = np.zeros((deltas.shape[0] + 1, self.engine.K), np.int64)
            np.cumsum(deltas, axis=0, dtype=np.int64, out=counts[1:])
            self._counts, self._events = counts, events.astype(np.int64)

    def _valid(self, meta: Any, deltas: np.ndarray, events: np.ndarray) -> bool:
        K, step = self.engine.K, 1 << self.bits
        if not (isinstance(meta, dict) and meta.get("key") == self.key_fields
                and deltas.dtype == np.uint32 and deltas.ndim == 2 and deltas.shape[1] == K
                and events.dtype == np.int64 and events.ndim == 2 and events.shape[1] == 2
                and meta.get("sha256") == _checksum(deltas, events)):
            return False
        if deltas.shape[0] == 0:
            return events.shape[0] == 0
        if not (deltas.sum(axis=1, dtype=np.int64) == step).all():
            return False
        last = np.cumsum(deltas, axis=0, dtype=np.int64)[-1]
        if self.engine.limit is not None and (last > self.engine.limit).any():
            return False
        end = deltas.shape[0] * step
        pos = events[:, 1]
        return bool(((events[:, 0] >= 0) & (events[:, 0] < K)).all()
                    and ((pos >= 0) & (pos < end)).all() and (np.diff(pos) > 0).all())

    def _save(self) -> None:
        if self.path is None:
            return
        deltas = np.diff(self._counts, axis=0).astype(np.uint32)
        events = np.ascontiguousarray(self._events, np.int64)
        meta = {"key": self.key_fields, "sha256": _checksum(deltas, events)}
        try:
            remove_stale_temporaries(self.path.parent, self.path.name)  # of killed writers
            with atomic_path(self.path) as tmp, open(tmp, "wb") as f:
                for a in (np.frombuffer(json.dumps(meta).encode(), np.uint8), deltas, events):
                    np.save(f, a, allow_pickle=False)
        except OSError as e:
            print(f"clusterclip: could not write the seek index {self.path}: {e}",
                  file=sys.stderr)

    # ----------------------------------------------------------------- seeks
    def checkpoints(self) -> int:
        """Positions covered: the last checkpoint's."""
        return (self._counts.shape[0] - 1) << self.bits

    def engine_at(self, position: int) -> ClusterEngine:
        """A new engine at ``position`` with every clip event before it recorded.

        Extends the index (and rewrites its file) when ``position`` lies beyond
        its last checkpoint; the cost is printed to stderr once.
        """
        if not self._loaded:
            self._load()
        want = int(position) >> self.bits
        have = self._counts.shape[0] - 1
        if want > have:
            self._extend(want)
            have = want
        i = min(want, have)
        eng = self.engine.fresh()
        at = i << self.bits
        eng.reset(at, self._counts[i])
        ev = self._events
        eng.clip_events = [(int(k), int(p)) for k, p in ev[ev[:, 1] < at].tolist()]
        eng.events_from = 0
        eng.seek(int(position))
        return eng

    def _extend(self, want: int) -> None:
        t0 = time.perf_counter()
        have = self._counts.shape[0] - 1
        eng = self.engine.fresh()
        eng.reset(have << self.bits, self._counts[have])
        rows = [self._counts]
        for i in range(have + 1, want + 1):
            eng.seek(i << self.bits)
            rows.append(eng.counts[None, :].copy())
        self._counts = np.concatenate(rows)
        if eng.clip_events:
            self._events = np.concatenate([self._events,
                                           np.array(eng.clip_events, np.int64)])
        self._save()
        secs = time.perf_counter() - t0
        self.last_build = {"from": have << self.bits, "to": want << self.bits, "seconds": secs,
                           "path": None if self.path is None else str(self.path)}
        where = f"; cached in {self.path}" if self.path is not None else " (not cached)"
        print(f"clusterclip: built the seek index from position {have << self.bits:,} to "
              f"{want << self.bits:,} in {secs:.1f} s (one-off){where}", file=sys.stderr)
