"""Write the corpus out grouped by cluster, in the authors' layout
(``OUT/cluster_{k}/data_{j}.jsonl``), checked before it is moved into place: see
:mod:`clusterclip.grouping.groups`, whose names these are.
"""

from clusterclip.grouping.groups import (
    ADDED,
    EXCLUDED_DIR,
    WRITES,
    annotate,
    group_corpus,
    original,
    record_hash,
    verify_groups,
)

__all__ = ["ADDED", "EXCLUDED_DIR", "WRITES", "annotate", "group_corpus", "original",
           "record_hash", "verify_groups"]
