"""``clusterclip export --format atlas``: the report's map as one Parquet file for
Apple's Embedding Atlas (``embedding-atlas OUT/atlas.parquet --x x --y y --text text``).

``OUT/atlas.parquet`` has one row per document of the map (``W/map/``, made by
``clusterclip report``), in document order, with the columns

- ``doc_index`` (int64): the document (corpus order),
- ``x``, ``y`` (float32): its place on the map, as the report page draws it,
- ``cluster`` (int32): its cluster (``W/labels.npy``; -1: excluded),
- ``terms`` (string): its cluster's top terms, as the report lists them
  (sampler seed 0, the report's default), joined by ``", "``,
- ``text`` (string): its whole text.

``OUT/_export.json`` is the summary. The map must be current: a map older than
the embeddings (or than ``valid.npy``) is refused, naming ``report`` to rerun it.
The file is written in a temporary folder, read back with ``pyarrow.parquet`` and
checked (every row's document, place, cluster and text) before it is moved into
place.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

FILE = "atlas.parquet"
SUMMARY = "_export.json"
TERMS_SEED = 0  # the report's default sampler seed, which draws the documents its terms count


def atlas_table(w: Any) -> Any:
    """The ``pyarrow.Table`` of work directory ``w``'s map (see the module docstring)."""
    import pyarrow as pa

    from clusterclip.corpus import Corpus
    from clusterclip.labels import load_labels
    from clusterclip.report.projection import load_map
    from clusterclip.report.readable import readable_clusters

    corpus = Corpus.load(w.path("corpus"))
    labels = load_labels(w.path("labels.npy"), len(corpus))
    rows, coords = load_map(w.root)
    if rows.size and (rows.min() < 0 or rows.max() >= len(corpus)):
        raise InputError(f"{w.path('map')}: documents outside the {len(corpus)} of the corpus; "
                         "rerun `clusterclip report`")
    k = int(labels.max()) + 1 if labels.size else 0
    terms = readable_clusters(corpus, labels, None, k, seed=TERMS_SEED)["terms"]
    cluster = labels[rows].astype(np.int32)
    texts = [t for _, t in corpus.iter_texts_at(rows)]
    return pa.table({
        "doc_index": pa.array(rows, pa.int64()),
        "x": pa.array(coords[:, 0], pa.float32()),
        "y": pa.array(coords[:, 1], pa.float32()),
        "cluster": pa.array(cluster, pa.int32()),
        "terms": pa.array([", ".join(terms[c]) if c >= 0 else "" for c in cluster], pa.string()),
        "text": pa.array(texts, pa.string()),
    })


def _digest(table: Any) -> str:
    """An order-sensitive SHA-256 of every column of ``table``."""
    h = hashlib.sha256()
    for name in ("doc_index", "x", "y", "cluster"):
        h.update(np.ascontiguousarray(table.column(name).to_numpy()).tobytes())
    for name in ("terms", "text"):
        for value in table.column(name).to_pylist():
            b = b"\x00" if value is None else b"\x01" + value.encode("utf-8")
            h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def export_atlas(workdir: Any, out: str | os.PathLike[str], *,
                 overwrite: bool = False) -> dict[str, Any]:
    """Write ``out/atlas.parquet`` from work directory ``workdir`` (stage ``export``;
    see the module docstring); returns the summary."""
    from clusterclip.io import atomic_output_dir, check_output_dir, made_from, write_json
    from clusterclip.workdir import Workdir

    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("--format atlas needs pyarrow; install the `parquet` extra "
                         "(pip install 'clusterclip[parquet]')") from None
    w = workdir if isinstance(workdir, Workdir) else Workdir(workdir, create=False)
    protected = w.protected()
    with made_from(w.root):
        check_output_dir(out, "export", overwrite=overwrite, protected=protected,
                         writes=(FILE, SUMMARY))
    if not w.path("map", "coords.npy").is_file():
        raise InputError(f"{w.path('map')}: no map yet; run `clusterclip report --workdir "
                         f"{w.root}` first (its --map-sample sets the documents drawn)")
    with w.locked(), made_from(w.root):
        check_output_dir(out, "export", overwrite=overwrite, protected=protected,
                         writes=(FILE, SUMMARY))

        def work(run: Any) -> dict[str, Any]:
            table = atlas_table(w)
            digest = _digest(table)
            with atomic_output_dir(out, "export", overwrite=overwrite) as tmp:
                pq.write_table(table, Path(tmp) / FILE)
                back = pq.read_table(Path(tmp) / FILE)
                if back.schema != table.schema or _digest(back) != digest:
                    raise RuntimeError(f"{Path(tmp) / FILE}: read back differently")
                summary = {"format": "atlas", "file": FILE, "rows": table.num_rows,
                           "columns": table.column_names, "sha256_rows": digest,
                           "terms_seed": TERMS_SEED,
                           "open_with": f"embedding-atlas {FILE} --x x --y y --text text"}
                write_json(Path(tmp) / SUMMARY, summary)
            return summary

        return w.run_stage("export", key={"out": str(Path(out).resolve()), "format": "atlas"},
                           reads=["map", "labels.npy", "corpus"],
                           outputs=[str(Path(out).resolve())], work=work, cache=False)
