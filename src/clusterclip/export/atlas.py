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
checked (the order-sensitive hash of every column, :class:`clusterclip.export.rows._RowsHash`
as for the schedule exports) before it is moved into place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.export.rows import _RowsHash

FILE = "atlas.parquet"
SUMMARY = "_export.json"
#: What the atlas export may write in its folder.
WRITES = (FILE, SUMMARY)
TERMS_SEED = 0  # the report's default sampler seed, which draws the documents its terms count


def require_pyarrow() -> Any:
    """``pyarrow.parquet``; InputError naming the extra when it is missing."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("format atlas needs pyarrow; install the `parquet` extra "
                         "(pip install 'clusterclip[parquet]')", params=("format",)) from None
    return pq


def atlas_table(corpus: Any, labels: np.ndarray, rows: np.ndarray, coords: np.ndarray,
                source: str = "map") -> Any:
    """The ``pyarrow.Table`` of the map's documents ``rows`` (int64[n], document indices)
    at ``coords`` (float32[n, 2]), with their ``labels`` and texts from ``corpus`` (see
    the module docstring); ``source`` names the map in errors."""
    import pyarrow as pa

    from clusterclip.report.readable import readable_clusters

    if rows.size and (rows.min() < 0 or rows.max() >= len(corpus)):
        raise InputError(f"{source}: documents outside the {len(corpus)} of the corpus; "
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
    """The order-sensitive hash of every column of ``table``
    (:class:`clusterclip.export.rows._RowsHash`, as the schedule exports')."""
    h = _RowsHash(ints=("doc_index", "cluster"), floats=("x", "y"), strings=("terms", "text"))
    h.update(table)
    return h.hexdigest()


def write_atlas(table: Any, out: str | os.PathLike[str], *,
                overwrite: bool = False) -> dict[str, Any]:
    """Write ``table`` (:func:`atlas_table`) as ``out/atlas.parquet`` with the summary
    ``out/_export.json``, read back and checked before it is moved into place; the
    summary."""
    from clusterclip.storage.atomic import write_json
    from clusterclip.storage.outputs import atomic_output_dir

    pq = require_pyarrow()
    digest = _digest(table)
    with atomic_output_dir(out, "export", overwrite=overwrite) as tmp:
        pq.write_table(table, Path(tmp) / FILE)
        back = pq.read_table(Path(tmp) / FILE)
        if back.schema != table.schema or _digest(back) != digest:
            raise RuntimeError(f"{Path(tmp) / FILE}: read back differently")
        summary = {"format": "atlas", "file": FILE, "rows": table.num_rows,
                   "columns": table.column_names, "rows_hash": digest,
                   "terms_seed": TERMS_SEED,
                   "open_with": f"embedding-atlas {FILE} --x x --y y --text text"}
        write_json(Path(tmp) / SUMMARY, summary)
    return summary
