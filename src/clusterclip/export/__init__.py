"""Export a schedule as a dataset in schedule order.

- :mod:`~clusterclip.export.core`: Parquet shards, a Hugging Face dataset or MosaicML
  Streaming (MDS) shards, built in a temporary folder, re-read and checked, then moved into
  place (:func:`export_schedule`);
- :mod:`~clusterclip.export.rows`: the columns of a row and the hash of all rows written;
- :mod:`~clusterclip.export.mds`: the MDS shard writer;
- :mod:`~clusterclip.export.megatron`: a Megatron-LM indexed dataset;
- :mod:`~clusterclip.export.atlas`: the report's map as one Parquet file for Embedding
  Atlas.

The names below are those of :mod:`clusterclip.export.core`.
"""

from clusterclip.export.core import (
    EXTRAS,
    FORMATS,
    PARQUET_OPTIONS,
    SUMMARY,
    WRITES,
    check_format,
    check_schedule,
    export_schedule,
    export_workers,
    iter_batches,
    read_hf_batches,
    read_parquet_batches,
    require,
    space_needed,
)

__all__ = ["EXTRAS", "FORMATS", "PARQUET_OPTIONS", "SUMMARY", "WRITES", "check_format",
           "check_schedule", "export_schedule", "export_workers", "iter_batches",
           "read_hf_batches", "read_parquet_batches", "require", "space_needed"]
