"""The ``map`` stage: a seeded sample of the documents projected to 2-D (UMAP) for the
report page, kept in ``W/map/`` (see :mod:`clusterclip.report.projection`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.report.projection import DEFAULT_MAP_SAMPLE, MapParams
from clusterclip.workdir import EMBEDDINGS, MAP, VALID, Workdir


@dataclass(frozen=True, kw_only=True)
class MapOptions:
    """``sample``: documents on the map (at most; 0: no map), drawn with ``seed``;
    ``params``: the projection's; ``progress``: bars on stderr. Checked on construction
    (InputError naming the parameter)."""

    sample: int = DEFAULT_MAP_SAMPLE
    seed: int = 0
    progress: bool = False
    params: MapParams = field(default_factory=MapParams)

    def __post_init__(self) -> None:
        if self.sample < 0:
            raise InputError(f"sample must be >= 0, got {self.sample}", params=("sample",))


def run(w: Workdir, options: MapOptions) -> str | None:
    """Run (or reuse) the ``map`` stage of ``w``; None when ``W/map/`` is current
    afterwards, else why there is no map (a note for the report): no embeddings,
    ``sample`` 0, umap-learn not installed, or a stale map on a read-only file system."""
    from clusterclip.report.projection import STAGE, map_key, umap_version

    o = options
    if o.sample == 0:
        return "no map: map_sample 0"
    if not w.path(EMBEDDINGS).is_file():
        return f"no map: the work directory has no {EMBEDDINGS}"
    if umap_version() is None:
        return "no map: umap-learn is not installed (pip install 'clusterclip[report]')"
    try:
        w.run_stage(STAGE, key=map_key(o.sample, o.seed, o.params),
                    work=lambda run: _project(w, o), reads=[EMBEDDINGS],
                    maybe_reads=[VALID], outputs=[MAP])
    except InputError:
        if not w.read_only():
            raise
        return (f"no map: {w.path(MAP)} is not current and the work directory is on a "
                f"read-only file system")
    return None


def _project(w: Workdir, o: MapOptions) -> dict[str, Any]:
    """Draw the sample, project it and write ``W/map/``; the stage's record."""
    from clusterclip.report.projection import STAGE, project, sample_rows
    from clusterclip.storage.arrays import save_npy
    from clusterclip.storage.outputs import atomic_output_dir

    X = w.embeddings()
    valid = w.valid()
    if valid is not None and valid.shape[0] != X.shape[0]:
        raise InputError(f"{w.path(VALID)}: {valid.shape[0]} rows but "
                         f"{EMBEDDINGS} has {X.shape[0]}")
    rows = sample_rows(valid, X.shape[0], o.sample, o.seed)
    if o.progress:
        print(f"map: UMAP of {rows.size:,} of {X.shape[0]:,} documents (neighbours, "
              "then the layout; first use compiles numba code) ...", file=sys.stderr,
              flush=True)
    t0 = time.perf_counter()
    coords = project(np.asarray(X[rows], dtype=np.float32), o.seed, o.params, o.progress)
    with atomic_output_dir(w.path(MAP), STAGE, overwrite=True) as tmp:
        save_npy(Path(tmp) / "sample.npy", rows)
        save_npy(Path(tmp) / "coords.npy", coords)
    seconds = time.perf_counter() - t0
    if o.progress:
        print(f"map: done in {seconds:.0f} s", file=sys.stderr, flush=True)
    return {"documents": int(rows.size), "of": int(X.shape[0]), "seconds": seconds}
