"""The ``embed`` stage: corpus files -> ``W/corpus/``, ``W/embeddings.npy``, ``W/valid.npy``.

The steps (scan the corpus, embed the missing shards of ``W/embed/``) are
:func:`clusterclip.embedding.pipeline.index_corpus` and
:func:`~clusterclip.embedding.pipeline.embed_rows`; this module runs them through
:meth:`clusterclip.workdir.Workdir.run_stage` (resume, cache, ``torchrun``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterclip import distributed as D
from clusterclip.corpus.readers import expand_inputs
from clusterclip.embedding.base import DEFAULT_BATCH_SIZE
from clusterclip.embedding.pipeline import (
    DEFAULT_SHARD_SIZE,
    STAGE,
    EmbedPaths,
    embed_rows,
    embedder_identity,
    index_corpus,
    remove_shards,
    resolve_max_length,
)
from clusterclip.embedding.tune import AUTO as AUTO_TUNE
from clusterclip.limits import MAX_ROWS, MAX_SEED, MAX_THREADS, MAX_WINDOW, check_ranges, ranged
from clusterclip.storage.records import marker_of
from clusterclip.workdir import CORPUS, EMBED_DIR, EMBEDDINGS, VALID, Workdir


@dataclass(frozen=True, kw_only=True)
class EmbedOptions:
    """What the ``embed`` stage reads and how it embeds; checked when made (InputError).

    ``inputs``: corpus files or folders. ``max_length`` None: the embedder's own
    (:data:`clusterclip.embedding.pipeline.DEFAULT_MAX_LENGTH`). ``backend``,
    ``precision``, ``tune``, ``tune_seed``: see
    :func:`clusterclip.embedding.pipeline.make_embedder`. ``shard_size``: documents per
    resumable shard; ``keep_shards``: keep ``W/embed/`` at the end. ``workers``: processes
    that embed with ``--embedder fast`` (None: the CPUs this process may use,
    :func:`clusterclip.embedding.pipeline.embed_workers`) and that scan a large corpus
    (:func:`~clusterclip.embedding.pipeline.scan_workers`); not part of the stage's
    identity, since any number gives the same bytes.
    """

    inputs: tuple[str, ...] = ()
    text_field: str = "text"
    id_field: str | None = None
    skip_bad_lines: bool = False
    embedder: str = "minilm"
    model: str | None = None
    pooling: str = "mean"
    max_length: int | None = ranged(1, MAX_WINDOW, default=None)
    batch_size: int = ranged(1, MAX_WINDOW, default=DEFAULT_BATCH_SIZE)
    device: str = "cpu"
    dtype: str = "float32"
    shard_size: int = ranged(1, MAX_ROWS, default=DEFAULT_SHARD_SIZE)
    keep_shards: bool = False
    trust_remote_code: bool = False
    progress: bool = True
    backend: str = "auto"
    precision: str = "auto"
    # documents, 0 (none) or auto (clusterclip.embedding.tune.resolve_tune)
    tune: int | str = ranged(0, MAX_ROWS, words=(AUTO_TUNE,), default=AUTO_TUNE)
    tune_seed: int = ranged(0, MAX_SEED, default=0)
    workers: int | None = ranged(1, MAX_THREADS, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(str(p) for p in self.inputs))
        check_ranges(self)
        # a bad combination fails now, before W or the corpus is touched
        self.identity()

    def identity(self) -> dict[str, Any]:
        """What determines the vectors
        (:func:`~clusterclip.embedding.pipeline.embedder_identity`)."""
        return embedder_identity(
            self.embedder, self.model, pooling=self.pooling,
            max_length=resolve_max_length(self.embedder, self.max_length), dtype=self.dtype,
            backend=self.backend, precision=self.precision, device=self.device,
            tune=self.tune, tune_seed=self.tune_seed)

    def params(self) -> dict[str, Any]:
        """The parameters the manifest records (``max_length`` resolved)."""
        return {"text_field": self.text_field, "id_field": self.id_field,
                "skip_bad_lines": self.skip_bad_lines, "embedder": self.embedder,
                "model": self.model, "pooling": self.pooling,
                "max_length": resolve_max_length(self.embedder, self.max_length),
                "batch_size": self.batch_size, "device": self.device, "dtype": self.dtype,
                "shard_size": self.shard_size, "backend": self.backend,
                "precision": self.precision, "tune": self.tune, "tune_seed": self.tune_seed}


def run(w: Workdir, options: EmbedOptions, *, n_clusters: int | None = None,
        check_corpus: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the embedding stage into ``w``; skip it when its outputs are current.

    Writes ``W/corpus/``, ``W/embeddings.npy`` (N x d, corpus order, zeros for
    excluded documents) and ``W/valid.npy`` (bool[N]); records stage ``embed``
    in the manifest. Under ``torchrun`` every process must call this with the
    same options. ``n_clusters``: the K a following cluster stage will ask
    for, checked against the documents with text before anything is embedded;
    ``check_corpus(stats)``, likewise, for what later stages need of the corpus
    (``run``'s capacity R x documents with text).
    Returns a summary (counts, dim, paths, ``skipped``,
    ``shards_reused``, ``shards_computed``), the same on every process.
    """
    o = options
    t0 = time.time()
    D.init_from_env(o.device)  # under torchrun; a no-op when the group already exists
    shard_dir = w.path(EMBED_DIR)
    paths = EmbedPaths(corpus=w.path(CORPUS), shards=shard_dir, embeddings=w.path(EMBEDDINGS),
                       valid=w.path(VALID))
    params = o.params()
    corpus_opts = {"text_field": o.text_field, "id_field": o.id_field,
                   "skip_bad_lines": o.skip_bad_lines}

    def key() -> dict[str, Any]:
        return {"corpus": corpus_opts, "embedder": o.identity()}

    def work(run: Any) -> dict[str, Any]:
        fp = run.fingerprint
        kept = index_corpus(paths, list(o.inputs), fp, shard_size=o.shard_size,
                            n_clusters=n_clusters, corpus_opts=corpus_opts,
                            progress=o.progress, check_corpus=check_corpus,
                            workers=o.workers)
        return embed_rows(paths, fp, params, progress=o.progress,
                          trust_remote_code=o.trust_remote_code, kept=kept,
                          workers=o.workers)

    with w.locked():
        info = w.run_stage(STAGE, key=key, params=params,
                           inputs=lambda: expand_inputs(list(o.inputs))[0],
                           outputs=[CORPUS, EMBEDDINGS, VALID], scratch=[EMBED_DIR], work=work)
        if not o.keep_shards and D.is_main() and marker_of(shard_dir) == STAGE:  # ours only
            remove_shards(shard_dir)
        D.barrier()
    info = dict(info)
    info["seconds"] = round(time.time() - t0, 3)
    return info
