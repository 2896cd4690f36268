"""The steps of the embedding stage: corpus -> ``W/embeddings.npy``, in resumable shards
(the stage itself, through the work directory: :mod:`clusterclip.stages.embed`).

Layout inside the work directory ``W``::

    W/corpus/                 the corpus index (clusterclip.corpus.scan_into)
    W/embed/plan.json         fingerprint, N, shard sizes of this run
    W/embed/embeddings.npy    the N x d rows being written (pre-allocated, zeros where
                              excluded), moved to W/embeddings.npy when every shard is done
    W/embed/shard-00012.done  completion record of shard 12's rows, written after them
    W/embeddings.npy          N x d, L2-normalised, float32 or float16, memory-mappable
    W/valid.npy               bool[N]

Shards grow from :data:`FIRST_SHARD` documents, doubling up to the shard size S (256, 512,
..., 4096, 4096, ...; :func:`shard_bounds`), so a run interrupted early keeps its first
shards whatever the corpus's size. A shard counts only when its ``.done`` record exists
(written atomically after its rows) and the rows file is the one the records describe (a
rows file made anew starts with no records), so a killed run resumes at the missing shards
and never counts half-written rows. Under ``torchrun`` every process scans a share of the
input files (a large plain file in byte ranges: :func:`clusterclip.corpus.scan_into`), then
embeds every P-th missing shard into the one rows file; nothing is merged.

A shard is what an embedder's :meth:`~clusterclip.embedding.base.Embedder.encode` gets in
one call: MiniLM and ``hf`` sort it by length into padded batches. In fp32 a document's
vector did not depend on its batch (300 pydocs sections as one shard or 256 + 44: the same
bits); in int8 (ONNX's dynamic quantisation scales each batch) it does, at quantisation
rounding (there: 192 of 300 rows the same, cosine >= 0.989), as it depends on the batch
size. The layout is a function of N and S alone, so the same corpus gets the same bytes.
``fast`` and ``model2vec`` embed each document alone: their vectors never depend on it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.corpus import Corpus, scan_into
from clusterclip.corpus.index import META as INDEX_META
from clusterclip.corpus.index import foreign_files
from clusterclip.embedding.base import DEFAULT_BATCH_SIZE, MINILM_MAX_LENGTH, Embedder
from clusterclip.errors import InputError
from clusterclip.pool import available_cpus, following, progress_queue, worker_pool
from clusterclip.storage.arrays import save_npy
from clusterclip.storage.atomic import atomic_path, write_json
from clusterclip.storage.jsonfile import read_json
from clusterclip.storage.records import write_marker

STAGE = "embed"
PIPELINE_VERSION = 1
DEFAULT_SHARD_SIZE = 4096
# The first shard's size; each next one doubles, up to the shard size.
FIRST_SHARD = 256
# The rows file inside W/embed while shards are written into it (named like the file it
# becomes, W/embeddings.npy).
ROWS = "embeddings.npy"
# Documents read to fit corpus statistics (IDF of the fast embedder).
SAMPLE_SIZE = 10_000
# Documents from which the fast embedder's shards go to worker processes by default (each
# starts in about a second: below this, one process is as quick).
POOL_MIN_DOCUMENTS = 1 << 15
EMBEDDERS = ("minilm", "hf", "fast", "model2vec")
BACKENDS = ("auto", "torch", "onnx")


# -- embedders ----------------------------------------------------------------

def model_folder(embedder: str, model: str | os.PathLike[str] | None) -> Path:
    """The local model folder an embedder reads (bundled MiniLM unless ``model``)."""
    from clusterclip.embedding.transformer import _local_model, bundled_minilm_path

    if embedder not in EMBEDDERS:
        raise InputError(f"embedder {embedder}: expected one of {', '.join(EMBEDDERS)}",
                         params=("embedder",))
    if embedder == "model2vec" and model is None:
        raise InputError("embedder model2vec needs model PATH (a local Model2Vec "
                         "folder; none ships with clusterclip)", params=("embedder", "model"))
    folder = _local_model(model, None if embedder in ("hf", "model2vec") else
                          bundled_minilm_path())
    if embedder == "model2vec":
        from clusterclip.embedding.model2vec_embedder import model2vec_folder

        return model2vec_folder(folder)
    return folder


def resolve_backend(embedder: str, backend: str = "auto", precision: str = "auto",
                    device: str = "cpu") -> tuple[str, str]:
    """The backend and precision that run a transformer (``minilm``, ``hf``, or the teacher
    of ``fast --tune``), from what was asked and the device; cheap (loads nothing).

    ``auto``: onnx on the CPU where onnxruntime is installed (int8 where it agrees with
    torch, see :mod:`clusterclip.embedding.onnx_runtime`), else torch; torch on GPUs, in
    float16. Refused (InputError): an unknown name, ``int8`` on torch or a GPU, ``fp16``
    off a GPU.
    """
    from clusterclip.embedding.onnx_runtime import PRECISIONS, onnxruntime_available

    if backend not in BACKENDS:
        raise InputError(f"backend {backend}: expected one of {', '.join(BACKENDS)}",
                         params=("backend",))
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision}: expected one of {', '.join(PRECISIONS)}",
                         params=("precision",))
    gpu = device.startswith("cuda")
    if backend == "auto":
        backend = "onnx" if device == "cpu" and onnxruntime_available() else "torch"
    if precision == "auto":
        precision = "fp16" if gpu and backend == "torch" else \
            "auto" if backend == "onnx" and not gpu else "fp32"
    if precision == "fp16" and not (gpu and backend == "torch"):
        raise InputError(f"precision fp16 runs on a GPU with backend torch "
                         f"(not backend {backend} device {device})",
                         params=("precision", "backend", "device"))
    if precision == "int8" and (backend != "onnx" or gpu):
        raise InputError(f"precision int8 runs with backend onnx on the CPU "
                         f"(not backend {backend} device {device})",
                         params=("precision", "backend", "device"))
    return backend, precision


#: Tokens per text when no ``max_length`` is given: MiniLM's own limit for the transformer
#: embedders and for ``fast`` (its table is distilled from MiniLM); ``None`` for ``model2vec``:
#: ``StaticModel.encode``'s own default, so that our vectors are the library's.
DEFAULT_MAX_LENGTH: dict[str, int | None] = {"minilm": MINILM_MAX_LENGTH,
                                             "hf": MINILM_MAX_LENGTH,
                                             "fast": MINILM_MAX_LENGTH, "model2vec": None}


def resolve_max_length(embedder: str, max_length: int | None) -> int | None:
    """``max_length``, or ``embedder``'s own default (:data:`DEFAULT_MAX_LENGTH`) for None."""
    if max_length is None:
        return DEFAULT_MAX_LENGTH.get(embedder, MINILM_MAX_LENGTH)
    if max_length < 1:
        raise InputError(f"max_length {max_length}: must be at least 1", params=("max_length",))
    return max_length


def embedder_identity(embedder: str, model: str | os.PathLike[str] | None, *,
                      pooling: str = "mean", max_length: int | None = None,
                      dtype: str = "float32", backend: str = "auto", precision: str = "auto",
                      device: str = "cpu", tune: int | str = "auto", tune_seed: int = 0
                      ) -> dict[str, Any]:
    """What determines the vectors, computed without loading the model (for fingerprints).

    Batch size is left out (it changes speed, not the vectors beyond float rounding), and
    so is the device, except through the precision it implies (float16 on GPUs). The
    backend and precision (int8, float16) are in: another backend never reuses vectors.
    """
    from clusterclip.embedding.transformer import model_identity
    from clusterclip.storage.cache import cache_dir

    check_tune(embedder, tune, tune_seed, backend, precision)
    cache_dir()  # unusable (a file on the way): refused now, not after filling it
    max_length = resolve_max_length(embedder, max_length)
    ident: dict[str, Any] = {"embedder": embedder, "max_length": max_length, "dtype": dtype,
                             "model": model_identity(model_folder(embedder, model)),
                             "version": PIPELINE_VERSION}
    if embedder == "hf":
        ident["pooling"] = pooling
    if embedder in ("minilm", "hf"):
        ident.update(runtime_identity(embedder, backend, precision, device))
    if embedder == "fast":
        from clusterclip.embedding.static import STATIC_VERSION
        from clusterclip.embedding.tune import (
            AUTO,
            AUTO_DOCUMENTS,
            AUTO_MIN_VALID,
            TUNE_VERSION,
        )

        ident["static_version"] = STATIC_VERSION
        ident["sample_size"] = SAMPLE_SIZE
        if tune:
            ident["tune"] = {"documents": tune, "seed": tune_seed, "version": TUNE_VERSION,
                             "teacher": runtime_identity("minilm", backend, precision, device)}
        if tune == AUTO:  # the rule; the corpus (in the fingerprint) decides
            ident["tune"]["auto"] = {"documents": AUTO_DOCUMENTS, "min_valid": AUTO_MIN_VALID}
    return ident


def runtime_identity(embedder: str, backend: str, precision: str, device: str
                     ) -> dict[str, Any]:
    """The resolved backend and precision (and ONNX export version), for identities."""
    backend, precision = resolve_backend(embedder, backend, precision, device)
    out: dict[str, Any] = {"backend": backend, "precision": precision}
    if backend == "onnx":
        from clusterclip.embedding.onnx_runtime import EXPORT_VERSION

        out["export_version"] = EXPORT_VERSION
    return out


def check_tune(embedder: str, tune: int | str, tune_seed: int, backend: str = "auto",
               precision: str = "auto") -> None:
    """``tune`` (a number, or ``auto``: :func:`clusterclip.embedding.tune.resolve_tune`) and
    the teacher's backend apply where they mean something (InputError)."""
    from clusterclip.embedding.tune import AUTO, MAX_DOCUMENTS

    if tune == AUTO:  # the default of every embedder; it means something for fast only
        tune = 0 if embedder != "fast" else 1
    if not isinstance(tune, int):
        raise InputError(f"tune {tune}: expected {AUTO} or a number of documents",
                         params=("tune",))
    if tune < 0:
        raise InputError(f"tune {tune}: must be >= 0 (0: no tuning)", params=("tune",))
    if tune and embedder != "fast":
        raise InputError(f"tune applies to embedder fast (not {embedder})",
                         params=("tune", "embedder"))
    if tune > MAX_DOCUMENTS:
        raise InputError(f"tune {tune}: at most {MAX_DOCUMENTS} documents", params=("tune",))
    if not 0 <= tune_seed < 2 ** 32:
        raise InputError(f"tune_seed {tune_seed}: expected 0 .. 2**32 - 1",
                         params=("tune_seed",))
    if embedder in ("fast", "model2vec") and not tune and (backend, precision) != (
            "auto", "auto"):
        raise InputError(f"backend and precision apply to minilm, hf and the teacher of "
                         f"tune, not to embedder {embedder}",
                         params=("backend", "precision", "tune", "embedder"))


def make_embedder(embedder: str = "minilm", *, model: str | os.PathLike[str] | None = None,
                  pooling: str = "mean", max_length: int | None = None,
                  batch_size: int = DEFAULT_BATCH_SIZE,
                  device: str = "cpu", dtype: str = "float32", progress: bool = True,
                  trust_remote_code: bool = False, backend: str = "auto",
                  precision: str = "auto", tune: int = 0, tune_seed: int = 0) -> Embedder:
    """Load an embedder by name (``minilm``, ``hf``, ``fast`` or ``model2vec``).

    ``backend``/``precision``: see :func:`resolve_backend` (for ``fast``, they pick the
    teacher of ``tune``). ``tune``: a ``fast`` embedder whose table the embed stage tunes
    on a seeded sample of that many documents (:meth:`StaticEmbedder.tune`).
    """
    max_length = resolve_max_length(embedder, max_length)
    if batch_size < 1:
        raise InputError(f"batch_size {batch_size}: must be at least 1", params=("batch_size",))
    if dtype not in ("float32", "float16"):
        raise InputError(f"dtype {dtype}: expected float32 or float16", params=("dtype",))
    check_tune(embedder, tune, tune_seed, backend, precision)
    if embedder in ("minilm", "hf"):
        backend, precision = resolve_backend(embedder, backend, precision, device)
    if embedder in ("minilm", "hf") and backend == "onnx":
        from clusterclip.embedding.onnx_runtime import OnnxEmbedder

        return OnnxEmbedder(model, kind="hf" if embedder == "hf" else "sentence-transformers",
                            pooling=pooling, device=device, batch_size=batch_size,
                            max_length=max_length, precision=precision,
                            trust_remote_code=trust_remote_code, progress=progress)
    half = precision == "fp16"
    if embedder == "minilm":
        from clusterclip.embedding.transformer import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(model, device=device, batch_size=batch_size,
                                           max_length=max_length, half=half)
    if embedder == "hf":
        from clusterclip.embedding.transformer import HFEmbedder

        return HFEmbedder(model, pooling=pooling, device=device, batch_size=batch_size,
                          max_length=max_length, half=half,
                          trust_remote_code=trust_remote_code)
    if embedder == "model2vec":
        from clusterclip.embedding.model2vec_embedder import Model2VecEmbedder

        return Model2VecEmbedder(model, batch_size=max(batch_size, 1024),
                                 max_length=max_length)
    if embedder == "fast":
        from clusterclip.embedding.static import StaticEmbedder

        # Per-batch overhead is a tokenizer call: small batches only cost time here.
        emb = StaticEmbedder(model, max_length=max_length, batch_size=max(batch_size, 1024),
                             progress=progress)
        if tune:
            from clusterclip.embedding.transformer import model_identity
            from clusterclip.embedding.tune import TEACHER_TOKENS, TunePlan

            def teacher() -> Embedder:
                return make_embedder("minilm", model=emb.path, max_length=TEACHER_TOKENS,
                                     device=device, backend=backend, precision=precision,
                                     progress=progress)

            emb.tune_plan = TunePlan(tune, tune_seed, teacher_identity={
                "model": model_identity(emb.path), "tokens": TEACHER_TOKENS,
                **runtime_identity("minilm", backend, precision, device)},
                make_teacher=teacher)
        return emb
    raise InputError(f"embedder {embedder}: expected one of {', '.join(EMBEDDERS)}",
                     params=("embedder",))


def sample_indices(valid: np.ndarray, size: int = SAMPLE_SIZE, chunk: int = 1 << 24
                   ) -> np.ndarray:
    """Up to ``size`` evenly spaced indices of valid documents (deterministic).

    Reads ``valid`` (possibly memory-mapped) ``chunk`` entries at a time, so no array of
    all valid indices is made.
    """
    n_valid = int(sum(np.count_nonzero(valid[a:a + chunk])
                      for a in range(0, len(valid), chunk)))
    if n_valid <= size:
        want = np.arange(n_valid, dtype=np.int64)
    else:
        want = np.linspace(0, n_valid - 1, size).round().astype(np.int64)  # valid ranks
    out, seen = [], 0
    for a in range(0, len(valid), chunk):
        idx = a + np.flatnonzero(valid[a:a + chunk])
        lo, hi = np.searchsorted(want, [seen, seen + len(idx)])
        out.append(idx[want[lo:hi] - seen])
        seen += len(idx)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


# -- shards -----------------------------------------------------------------------

def shard_bounds(n: int, shard_size: int = DEFAULT_SHARD_SIZE, first: int = FIRST_SHARD
                 ) -> np.ndarray:
    """Where the shards of ``n`` documents start, then ``n`` (int64, ascending): sizes
    ``first``, twice that, ... up to ``shard_size`` (then ``shard_size`` each), the last
    one cut at ``n``. A function of ``n`` and the two sizes only."""
    bounds, size = [0], min(first, shard_size)
    while bounds[-1] < n:
        bounds.append(min(bounds[-1] + size, n))
        size = min(2 * size, shard_size)
    return np.asarray(bounds, dtype=np.int64)


def shard_name(s: int) -> str:
    return f"shard-{s:05d}"


_SCRATCH = re.compile(r"^(shard-\d{5}\.done|plan\.json|embeddings\.npy|\.clusterclip-output"
                      r"|\..+\.clusterclip-\d+-[A-Za-z0-9_]+\.tmp)$")


def remove_shards(shard_dir: Path) -> None:
    """Remove the files ``embed`` writes in ``W/embed`` (plan, shard records, rows, marker,
    temporaries), then the folder once empty: a file of the user's there stays."""
    try:
        entries = list(shard_dir.iterdir())
    except OSError:
        return
    for p in entries:
        if _SCRATCH.match(p.name) and not p.is_dir():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    with contextlib.suppress(OSError):
        shard_dir.rmdir()


def shard_is_done(shard_dir: Path, s: int, start: int, stop: int) -> bool:
    """True when shard ``s`` has its completion record (its rows are in the rows file)."""
    rec = _read_json(shard_dir / f"{shard_name(s)}.done")
    return rec is not None and rec.get("start") == start and rec.get("stop") == stop


def allocate_rows(shard_dir: Path, n: int, dim: int, dtype: str) -> bool:
    """Make ``shard_dir/ROWS`` an N x dim ``.npy`` of ``dtype`` unless it already is one;
    True when it was made anew (every completion record is removed first: they describe
    the rows of the file it replaces). The file is sparse until its rows are written."""
    path = shard_dir / ROWS
    try:
        old = np.load(path, mmap_mode="r", allow_pickle=False)
        if old.shape == (n, dim) and old.dtype == np.dtype(dtype):
            return False
    except (OSError, ValueError):
        pass
    for rec in shard_dir.glob("shard-*.done"):
        rec.unlink()
    with atomic_path(path) as tmp:
        rows = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.dtype(dtype), shape=(n, dim))
        del rows  # only its header and length are written here
    return True


def _shard_texts(corpus: Corpus, shards: list[int], bounds: np.ndarray,
                 known: dict[int, str] | None = None
                 ) -> Iterator[tuple[int, np.ndarray, list[str]]]:
    """For each shard (ascending; ``bounds``: :func:`shard_bounds`): its valid indices and
    their texts, those not in ``known`` (index -> text) read in one pass."""
    per_shard = []
    for s in shards:
        start, stop = int(bounds[s]), int(bounds[s + 1])
        per_shard.append(start + np.flatnonzero(corpus.valid[start:stop]))
    wanted = np.concatenate(per_shard) if per_shard else np.zeros(0, np.int64)
    texts = _texts_at(corpus, wanted, known or {})
    for s, idx in zip(shards, per_shard, strict=True):
        yield s, idx, [next(texts) for _ in range(len(idx))]


def _texts_at(corpus: Corpus, indices: np.ndarray, known: dict[int, str]) -> Iterator[str]:
    """The texts of ascending valid ``indices``, from ``known`` (index -> text) where there,
    the others read from the files in one streaming pass."""
    idx = indices.tolist()
    read = iter(corpus.iter_texts_at([i for i in idx if i not in known]))
    for i in idx:
        t = known.get(i)
        if t is None:
            j, t = next(read)
            assert j == i
        yield t


def embed_shards(corpus: Corpus, embedder: Embedder, shard_dir: Path, shards: list[int], *,
                 bounds: np.ndarray, dtype: str, progress: bool = True,
                 desc: str = "embedding", known: dict[int, str] | None = None,
                 on_batch: Callable[[int], object] | None = None) -> int:
    """Embed ``shards`` (ascending shard numbers) of ``corpus`` into the rows file
    ``shard_dir/ROWS`` (made by :func:`allocate_rows`); texts in ``known`` (index ->
    text) are not read again.

    Shard ``s`` writes rows [bounds[s], bounds[s+1]) (:func:`shard_bounds`) in corpus
    order, zeros for excluded documents, then its ``.done`` record. ``on_batch(n)``: called
    after each batch of ``n`` documents instead of a progress bar. Returns documents
    embedded.
    """
    from tqdm import tqdm

    path = shard_dir / ROWS
    offset = np.load(path, mmap_mode="r", allow_pickle=False).offset  # the header's length
    row_bytes = embedder.dim * np.dtype(dtype).itemsize
    total = sum(int(corpus.valid[bounds[s]:bounds[s + 1]].sum()) for s in shards)
    done = 0
    fd = os.open(path, os.O_WRONLY)
    try:
        with tqdm(total=total, desc=desc, unit="doc",
                  disable=not progress or on_batch is not None) as bar:
            for s, idx, texts in _shard_texts(corpus, shards, bounds, known):
                start, stop = int(bounds[s]), int(bounds[s + 1])
                rows = np.zeros((stop - start, embedder.dim), dtype=np.float32)
                if len(texts):
                    # The bar moves per batch: a shard can take minutes on a CPU.
                    rows[idx - start] = embedder.encode(texts, on_batch=on_batch or bar.update)
                _pwrite_all(fd, rows.astype(dtype).tobytes(), offset + start * row_bytes)
                write_json(shard_dir / f"{shard_name(s)}.done",
                           {"shard": s, "start": start, "stop": stop, "documents": len(texts)})
                done += len(texts)
    finally:
        os.close(fd)
    return done


def embed_workers(workers: int | None, embedder: str, documents: int) -> int:
    """Worker processes that embed a rank's shards of ``documents`` documents: 1 but for
    ``--embedder fast`` (one Python thread per process; the neural embedders' libraries use
    every core already); ``workers`` when given, else the CPUs this process may use
    (:func:`clusterclip.pool.available_cpus`) shared by the ranks on this node
    (``LOCAL_WORLD_SIZE`` under ``torchrun``), and 1 below :data:`POOL_MIN_DOCUMENTS`."""
    if embedder != "fast":
        return 1
    if workers is not None:
        return workers
    if documents < POOL_MIN_DOCUMENTS:
        return 1
    return scan_workers(None)


def scan_workers(workers: int | None) -> int:
    """Worker processes that scan a rank's share of the corpus (any embedder;
    :func:`clusterclip.corpus.scan_into` keeps a small corpus in one process): ``workers``
    when given, else the CPUs this process may use
    (:func:`clusterclip.pool.available_cpus`) shared by the ranks on this node
    (``LOCAL_WORLD_SIZE`` under ``torchrun``)."""
    if workers is not None:
        return workers
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, available_cpus() // max(1, local))


@dataclass(frozen=True)
class EmbedPool:
    """Worker processes started by :func:`embed_pool`: ``imap``
    (:func:`clusterclip.pool.worker_pool`), the queue on which they report documents
    embedded, and how many they are."""

    imap: Callable[..., Iterator[Any]]
    queue: Any
    workers: int


@contextlib.contextmanager
def embed_pool(workers: int, corpus_dir: Path, shard_dir: Path, bounds: np.ndarray,
               dtype: str) -> Iterator[EmbedPool | None]:
    """``workers`` processes for :func:`embed_shards_pooled` (None for one: it embeds in
    this process), each holding the corpus index at ``corpus_dir``; started before the
    embedder is made, so that their start-up runs while this process makes and fits it.
    Leaving by an exception terminates them."""
    if workers <= 1:
        yield None
        return
    queue = progress_queue()
    with worker_pool(workers, _embed_worker_state,
                     (corpus_dir, shard_dir, bounds, dtype, queue)) as imap:
        yield EmbedPool(imap, queue, workers)


def embed_shards_pooled(corpus: Corpus, embedder: Embedder, shard_dir: Path,
                        shards: list[int], *, pool: EmbedPool | None, bounds: np.ndarray,
                        dtype: str, progress: bool = True, desc: str = "embedding",
                        known: dict[int, str] | None = None) -> int:
    """:func:`embed_shards` by the processes of ``pool`` (:func:`embed_pool`; in this
    process when None), each receiving a copy of ``embedder`` and embedding every
    ``workers``-th of ``shards`` in one pass over the corpus files. Each shard writes its
    own rows, and a document's vector depends on its text alone, so the rows file gets the
    same bytes for any number of workers. The parent shows one progress bar. Returns
    documents embedded."""
    from tqdm import tqdm

    workers = 1 if pool is None else max(1, min(pool.workers, len(shards)))
    if pool is None or workers == 1:
        return embed_shards(corpus, embedder, shard_dir, shards,
                            bounds=bounds, dtype=dtype, progress=progress, desc=desc,
                            known=known)
    # Worker w embeds shards[w::workers], with the texts already read of those shards.
    worker_of = {s: j % workers for j, s in enumerate(shards)}
    parts: list[tuple[Embedder, list[int], dict[int, str]]] = [
        (embedder, shards[w::workers], {}) for w in range(workers)]
    for i, t in (known or {}).items():
        w = worker_of.get(int(np.searchsorted(bounds, i, side="right")) - 1)
        if w is not None:
            parts[w][2][i] = t
    total = sum(int(corpus.valid[bounds[s]:bounds[s + 1]].sum()) for s in shards)
    # The fast embedder's table reaches the workers through a file, not in each task.
    share = getattr(embedder, "shared_table", None)
    with tqdm(total=total, desc=desc, unit="doc", disable=not progress) as bar, \
            following(pool.queue, bar.update), \
            share(shard_dir) if share is not None else contextlib.nullcontext():
        return sum(pool.imap(_embed_worker_shards, parts))


def _embed_worker_state(corpus_dir: Path, shard_dir: Path, bounds: np.ndarray, dtype: str,
                        queue: Any) -> dict[str, Any]:
    import clusterclip.embedding.static  # noqa: F401  (the embedder a task brings: fast)

    return {"corpus": Corpus.load(corpus_dir), "shard_dir": shard_dir, "bounds": bounds,
            "dtype": dtype, "queue": queue}


def _embed_worker_shards(state: dict[str, Any],
                         part: tuple[Embedder, list[int], dict[int, str]]) -> int:
    embedder, shards, known = part
    return embed_shards(state["corpus"], embedder, state["shard_dir"], shards,
                        bounds=state["bounds"], dtype=state["dtype"], known=known,
                        on_batch=state["queue"].put)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


# -- the steps of the embed stage (clusterclip.stages.embed) ----------------------------

@dataclass(frozen=True)
class EmbedPaths:
    """Where the steps of the embed stage write, as the stage names them in the work
    directory's layout (:mod:`clusterclip.workdir`): the corpus index folder
    (``W/corpus``), the folder of resumable shards (``W/embed``), the embeddings
    (``W/embeddings.npy``) and the mask of documents with text (``W/valid.npy``)."""

    corpus: Path
    shards: Path
    embeddings: Path
    valid: Path


def index_corpus(paths: EmbedPaths, inputs: list[str], fp: str, *, shard_size: int,
                  n_clusters: int | None, corpus_opts: dict[str, Any], progress: bool,
                  check_corpus: Callable[[dict[str, Any]], None] | None = None,
                  workers: int | None = None) -> list[str | None]:
    """``W/corpus`` and the shard plan ``W/embed/plan.json`` (at ``paths``) for the inputs
    of fingerprint ``fp``: reused when the plan is current (a resume), else the corpus is
    scanned again, every rank a share of its parts (:func:`scan_workers` processes each).
    Returns the texts when one process scanned a corpus small enough to keep them (else an
    empty list)."""
    shard_dir, corpus_dir = paths.shards, paths.corpus


    def plan() -> bool:
        """On rank 0: True when the corpus must be indexed (again)."""
        old = _read_json(shard_dir / "plan.json")
        # The fingerprint covers the inputs' hashes: an edited input never resumes.
        if (old is not None and old.get("fingerprint") == fp
                and old.get("shard_size") == shard_size
                and old.get("first_shard") == FIRST_SHARD
                and (corpus_dir / INDEX_META).exists()):
            corpus = Corpus.load(corpus_dir)
            _check_clusters(corpus.stats, n_clusters)
            if check_corpus is not None:
                check_corpus(corpus.stats)
            corpus.verify_files()
            return False
        foreign = foreign_files(corpus_dir)  # nothing of the user's goes with it
        if foreign:
            raise InputError(f"{corpus_dir / foreign[0]}: not written by clusterclip, in "
                             f"{corpus_dir}, which `embed` replaces whole ({len(foreign)} "
                             "such file(s)); move them away, then run again")
        remove_shards(shard_dir)  # ours: checked before `running`
        return True

    def check(stats: dict[str, Any]) -> None:
        if stats["valid"] == 0:
            raise InputError(f"no document has text in {', '.join(map(str, inputs))} "
                             f"({stats['documents']} documents, {stats['empty']} empty)")
        _check_clusters(stats, n_clusters)
        if check_corpus is not None:
            check_corpus(stats)

    # The texts, when one process scans a corpus small enough to keep them (read
    # once, not again for the sample and the shards).
    kept: list[str | None] = []
    if D.on_main(plan):
        # Every rank scans a share of the parts (files, byte ranges of large ones), with
        # worker processes; rank 0 writes the index.
        stats = scan_into(corpus_dir, inputs, progress=progress, check=check,
                          texts=kept, workers=scan_workers(workers), **corpus_opts)

        def start() -> None:
            write_marker(corpus_dir, STAGE)
            shard_dir.mkdir(parents=True, exist_ok=True)
            write_marker(shard_dir, STAGE)
            write_json(shard_dir / "plan.json", {"fingerprint": fp,
                                                 "shard_size": shard_size,
                                                 "first_shard": FIRST_SHARD,
                                                 "documents": stats["documents"]})

        D.on_main(start)
    return kept


def embed_rows(paths: EmbedPaths, fp: str, params: dict[str, Any], *, progress: bool,
               trust_remote_code: bool, kept: list[str | None] | None = None,
               workers: int | None = None) -> dict[str, Any]:
    """Embed the missing shards on every rank into the rows file; rank 0 moves it into
    place (the stage info). ``kept``: every document's text (None where excluded) when
    the scan kept them, else empty. ``workers``: processes per rank
    (:func:`embed_workers`; the same bytes for any number)."""
    rank, world = D.rank_and_world()
    shard_dir = paths.shards
    dtype, shard_size, embedder = params["dtype"], params["shard_size"], params["embedder"]
    # Memory-mapped: every rank reads the same index, which the page cache holds once.
    corpus = Corpus.load(paths.corpus)
    # Texts in memory by index: the scan's, else the sample's once it is read.
    known: dict[int, str] = {}
    if kept is not None and len(kept) == len(corpus):
        known = {i: t for i, t in enumerate(kept) if t is not None}

    n = len(corpus)
    bounds = shard_bounds(n, shard_size)
    n_shards = len(bounds) - 1

    def done(s: int) -> bool:
        return shard_is_done(shard_dir, s, int(bounds[s]), int(bounds[s + 1]))

    # The workers' count from the shards without a record now (making the rows file anew
    # below removes every record: then it is the count for fewer shards than there are to
    # embed, never more workers than wanted); they start before the embedder is made.
    waiting = D.on_main(lambda: [s for s in range(n_shards) if not done(s)])[rank::world]
    waiting_docs = sum(int(corpus.valid[bounds[s]:bounds[s + 1]].sum()) for s in waiting)
    n_workers = max(1, min(embed_workers(workers, embedder, waiting_docs), len(waiting)))
    with embed_pool(n_workers, paths.corpus, shard_dir, bounds, dtype) as pool:
        emb, tuning = _rank_embedder(params, corpus, progress=progress and rank == 0,
                                     trust_remote_code=trust_remote_code, known=known)

        def missing() -> list[int]:
            allocate_rows(shard_dir, n, emb.dim, dtype)
            return [s for s in range(n_shards) if not done(s)]

        todo = D.on_main(missing)
        mine = todo[rank::world]
        desc = "embedding" if world == 1 else f"embedding (rank {rank})"
        embedded = embed_shards_pooled(corpus, emb, shard_dir, mine, pool=pool,
                                       bounds=bounds, dtype=dtype, progress=progress,
                                       desc=desc, known=known)
    counts = D.gather_objects(embedded)
    D.barrier()

    def finish() -> dict[str, Any]:
        # Every rank wrote its rows into the one file: it only moves into place.
        for s in range(n_shards):
            if not done(s):
                raise RuntimeError(f"shard {s} is missing after embedding")
        os.replace(shard_dir / ROWS, paths.embeddings)
        save_npy(paths.valid, np.asarray(corpus.valid, dtype=bool))
        st = corpus.stats
        return {"documents": st["documents"], "valid": st["valid"], "empty": st["empty"],
                "bad_lines": st["bad_lines"], "blank_lines": st["blank_lines"],
                "files": st["files"], "ignored_files": len(st["ignored_files"]),
                "dim": emb.dim, "dtype": dtype, "embedder": embedder,
                "embeddings": str(paths.embeddings),
                "valid_path": str(paths.valid), "corpus": str(paths.corpus),
                "shards": n_shards, "shards_reused": n_shards - len(todo),
                "shards_computed": len(todo), "documents_embedded": int(sum(counts)),
                "processes": world, "workers": n_workers, "fingerprint": fp,
                **_runtime_info(emb, tuning)}

    return D.on_main(finish)


def _rank_embedder(params: dict[str, Any], corpus: Corpus, *, progress: bool,
                   trust_remote_code: bool, known: dict[int, str]
                   ) -> tuple[Embedder, dict[str, Any] | None]:
    """:func:`stage_embedder` on every rank, fitted on the sample; rank 0 loads first: a
    first use builds the cached table, ONNX export or tuned table."""
    rank, _ = D.rank_and_world()
    emb, tuning = None, None
    for turn in (0, 1):
        if (rank == 0) == (turn == 0):
            emb, tuning = stage_embedder(params, corpus, progress=progress,
                                         trust_remote_code=trust_remote_code, known=known,
                                         prepare=False)
        D.barrier()
    assert emb is not None
    _prepare(emb, corpus, known)
    return emb, tuning


def stage_embedder(params: dict[str, Any], corpus: Corpus, *, device: str | None = None,
                   progress: bool = False, trust_remote_code: bool = False,
                   known: dict[int, str] | None = None, prepare: bool = True
                   ) -> tuple[Embedder, dict[str, Any] | None]:
    """The embedder the embed stage of ``params`` (its manifest params) runs on ``corpus``:
    its table tuned as the stage tunes it (``--tune``, ``auto`` resolved by the corpus's
    documents with text; tuned tables are cached, so a second call loads it), then, with
    ``prepare``, fitted on the corpus's fixed sample. ``device``: instead of the stage's.
    ``known``: texts by index already read (filled with those read here). Returns it and
    the tuning report (None when untuned; with ``--tune auto`` its ``auto`` entry)."""
    from clusterclip.embedding.tune import AUTO, AUTO_MIN_VALID, resolve_tune, tune_indices

    name, asked = params["embedder"], params.get("tune", 0)
    valid = int(corpus.stats["valid"])
    tune = resolve_tune(asked, valid) if name == "fast" else 0
    emb = make_embedder(name, model=params.get("model"), pooling=params.get("pooling", "mean"),
                        max_length=params.get("max_length"),
                        batch_size=params.get("batch_size", 64),
                        device=device or params.get("device", "cpu"),
                        dtype=params.get("dtype", "float32"), progress=progress,
                        trust_remote_code=trust_remote_code,
                        backend=params.get("backend", "auto"),
                        precision=params.get("precision", "auto"),
                        tune=tune, tune_seed=params.get("tune_seed", 0))
    known = {} if known is None else known
    tuning = None
    plan = getattr(emb, "tune_plan", None)
    if plan is not None:
        at = tune_indices(corpus.valid, plan.documents, plan.seed)
        known.update(zip(at.tolist(), _texts_at(corpus, at, known), strict=True))
        tuning = emb.tune([known[i] for i in at.tolist()])
    if asked == AUTO and name == "fast":
        tuning = {**(tuning or {"documents": 0}),
                  "auto": {"valid": valid, "min_valid": AUTO_MIN_VALID}}
    if prepare:
        _prepare(emb, corpus, known)
    return emb, tuning


def _prepare(emb: Embedder, corpus: Corpus, known: dict[int, str]) -> None:
    """Fit ``emb``'s corpus statistics on the fixed sample (:func:`sample_indices`)."""
    if type(emb).prepare is not Embedder.prepare:
        sample = sample_indices(corpus.valid)
        known.update(zip(sample.tolist(), _texts_at(corpus, sample, known), strict=True))
        emb.prepare([known[i] for i in sample.tolist()])


def _runtime_info(emb: Embedder, tuning: dict[str, Any] | None) -> dict[str, Any]:
    """How the vectors were made, for the stage info: backend and precision (with the
    int8 agreement), the tuning report."""
    out: dict[str, Any] = {}
    ident = emb.identity()
    for k in ("backend", "precision"):
        if k in ident:
            out[k] = ident[k]
    if getattr(emb, "agreement", None):
        out["agreement_with_torch"] = emb.agreement
    if tuning is not None:
        out["tune"] = tuning
    return out


def _check_clusters(stats: dict[str, Any], n_clusters: int | None) -> None:
    valid = stats["valid"]
    if n_clusters is not None and n_clusters >= valid and not n_clusters == valid == 1:
        how = "more than" if n_clusters > valid else "as many clusters as (one document each)"
        raise InputError(f"n_clusters {n_clusters}: {how} the {valid} documents with text "
                         f"({stats['documents']} documents, {stats['empty']} "
                         f"without text); nothing was embedded", params=("n_clusters",))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return read_json(path)
    except (OSError, InputError):
        return None
