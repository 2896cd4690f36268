"""Option groups shared by several subcommands (``run`` reuses them all)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from clusterclip.cli._paths import add_path
from clusterclip.limits import field_range, real_range, shown

# -- numbers: every integer and float option of every command is parsed by one of these
# types; its range is declared once on the options field it sets (clusterclip.limits.ranged)
# and checked when the options are made (tests/test_hostile_inputs.py checks that no option
# takes a bare int or float, tests/test_stage_options.py that no type refuses a range)


class parsed:  # noqa: N801 - an argparse type, named like the others (integer, real)
    """An argparse ``type`` that only parses the number of field ``name`` of the options
    class at ``where`` (``"module:Class"``), or one of the field's and the option's
    ``words`` (``auto``): the range is declared once, on the field
    (:func:`clusterclip.limits.ranged`), checked when the options are made (the command
    line shows the error in its option, before any work) and shown in ``--help``. The class
    is imported when the option is given or the help is shown, so building the parser of a
    command imports nothing of its stages."""

    def __init__(self, where: str, name: str, words: tuple[str, ...] = ()) -> None:
        self.where, self.name, self.words = where, name, words

    def _field(self) -> tuple[float, float, bool, bool, tuple[str, ...]]:
        import importlib

        module, cls = self.where.split(":")
        lo, hi, real, lo_open, words = field_range(
            getattr(importlib.import_module(module), cls), self.name)
        return lo, hi, real, lo_open, (*words, *self.words)

    @property
    def bounds(self) -> tuple[float, float]:
        return self._field()[:2]

    @property
    def range_text(self) -> str:
        lo, hi, real, lo_open, _ = self._field()
        return real_range(lo, hi, lo_open) if real else f"{lo} .. {hi}"

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return "real" if self._field()[2] else "integer"

    def __call__(self, text: str) -> Any:
        lo, hi, real, _, words = self._field()
        if text.strip() in words:
            return text.strip()
        try:
            return float(text) + 0.0 if real else int(text)  # -0.0 -> 0.0
        except ValueError:
            if not real and re.fullmatch(r"\s*[+-]?\d+\s*", text):  # more digits than int()
                raise argparse.ArgumentTypeError(  # reads: no option takes one
                    f"{shown(text.strip())} is out of range (an integer in {lo} .. {hi})"
                ) from None
            kind = "a number" if real else "an integer"
            raise argparse.ArgumentTypeError(
                f"expected {' or '.join([*words, kind])}, got {text!r:.40}") from None


class parsed_list(parsed):  # noqa: N801 - an argparse type, like parsed
    """An argparse ``type`` that only parses comma-separated integers (``ranges``: or one
    range 'A-B', at most 4096 values) for a list field of the options class at ``where``
    declared with ``ranged(..., each=True)``: the options check each value's range when
    made."""

    def __init__(self, where: str, name: str, ranges: bool = False) -> None:
        super().__init__(where, name)
        self.ranges = ranges

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return "integer_list"

    def __call__(self, text: str) -> list[int]:
        one = super().__call__
        span = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text) if self.ranges else None
        if span:
            first, last = one(span[1]), one(span[2])
            if last - first >= 4096:
                raise argparse.ArgumentTypeError(f"{text!r}: a range of at most 4096 values")
            values = list(range(first, last + 1))
        else:
            try:
                values = [one(x) for x in text.split(",") if x.strip()]
            except argparse.ArgumentTypeError as e:
                if not str(e).startswith("expected"):
                    raise
                values = []
        if not values:
            raise argparse.ArgumentTypeError(
                f"expected an integer or a comma-separated list of integers"
                f"{' (or a range A-B)' if self.ranges else ''}, got {text!r:.40}")
        return values


#: The options classes whose fields declare the ranges of shared option groups.
EMBED = "clusterclip.stages.embed:EmbedOptions"
KMEANS = "clusterclip.clustering.kmeans:KMeansSettings"
CLUSTER = "clusterclip.stages.cluster:ClusterOptions"
SWEEP = "clusterclip.stages.cluster:SweepOptions"
DEDUP = "clusterclip.stages.dedup:DedupOptions"
#: The sampler's numbers (``sample``, ``run``): the module is the one that names the
#: strategies, imported when the parser is built, so parsing them imports nothing more.
SCHEDULE = "clusterclip.sampling.spec:ScheduleSettings"
SCHEDULE_REQUEST = "clusterclip.sampling.spec:ScheduleRequest"


def add_corpus_options(p: argparse.ArgumentParser) -> None:
    """Options that say how to read a corpus (``embed``, ``run``)."""
    g = p.add_argument_group("corpus")
    g.add_argument("--text-field", default="text",
                   help="field holding the document text (default: text)")
    g.add_argument("--id-field", default=None,
                   help="optional field holding a document id, kept in the corpus index")
    g.add_argument("--skip-bad-lines", action="store_true",
                   help="skip and count malformed lines instead of failing on the first one")


def add_embed_options(p: argparse.ArgumentParser, backend_flag: str = "--backend") -> None:
    """Options of the embedding stage (``embed``, ``run``; ``run`` names the backend
    ``--embed-backend``, its ``--backend`` being k-means')."""
    E = EMBED
    g = p.add_argument_group("embedding")
    g.add_argument("--embedder", choices=("minilm", "hf", "fast", "model2vec"),
                   default="minilm",
                   help="minilm: bundled all-MiniLM-L6-v2 (default); hf: any local "
                        "Hugging Face AutoModel (--model); fast: CPU embedder, no neural "
                        "model; model2vec: a local Model2Vec model (--model)")
    add_path(g, "--model", role="input", default=None,
             help="local model path (for minilm, hf, model2vec, or the MiniLM that fast "
                  "is distilled from)")
    g.add_argument(backend_flag, dest="embed_backend", choices=("auto", "torch", "onnx"),
                   default="auto",
                   help="what runs minilm/hf (and the teacher of --tune): onnx (ONNX Runtime, "
                        "exported once into the cache), torch; auto (default): onnx on the "
                        "CPU where onnxruntime is installed, torch on GPUs")
    g.add_argument("--precision", choices=("auto", "fp32", "int8", "fp16"), default="auto",
                   help="auto (default): int8 with onnx on the CPU where it agrees with "
                        "torch (cosine >= 0.99 mean, >= 0.97 at the 1st percentile), fp16 "
                        "with torch on GPUs, else fp32")
    g.add_argument("--tune", type=parsed(E, "tune"), default="auto", metavar="N|auto",
                   help="--embedder fast: tune its table toward MiniLM's vectors of a seeded "
                        "sample of N documents (cached; 0: untuned); default auto: 2000 "
                        "documents when the corpus has at least 20000 with text, else 0")
    g.add_argument("--tune-seed", type=parsed(E, "tune_seed"), default=0,
                   help="seed of the --tune sample")
    g.add_argument("--pooling", choices=("mean", "first"), default="mean",
                   help="pooling for --embedder hf (default: mean)")
    from clusterclip.embedding.base import DEFAULT_BATCH_SIZE, MINILM_MAX_LENGTH

    g.add_argument("--max-length", type=parsed(E, "max_length"), default=None,
                   help=f"truncate to this many tokens (default: {MINILM_MAX_LENGTH}, MiniLM's "
                        "own limit; model2vec: the library's own default length)")
    g.add_argument("--batch-size", type=parsed(E, "batch_size"), default=DEFAULT_BATCH_SIZE)
    g.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default: cpu)")
    g.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                   help="storage dtype of embeddings.npy (default: float32)")
    g.add_argument("--embed-workers", type=parsed(E, "workers"), default=None, metavar="N",
                   help="worker processes scanning a large corpus in parts and, with "
                        "--embedder fast, embedding shards side by side (the same bytes "
                        "for any N; default: the CPUs this process may use)")


#: The attribute of the parsed options holding each k-means setting
#: (:class:`clusterclip.clustering.kmeans.KMeansSettings`) named otherwise: ``--kmeans-device``
#: (``run``'s ``--device`` is the embedder's).
KMEANS_DESTS = {"device": "kmeans_device"}


def add_kmeans_options(p: argparse.ArgumentParser) -> None:
    """Options of the clustering stage (``cluster``, ``run``): one per k-means setting
    (:class:`clusterclip.clustering.kmeans.KMeansSettings`, its defaults), read back by
    :func:`kmeans_options`."""
    from clusterclip.clustering import kmeans as K

    d = K.KMeansSettings()
    g = p.add_argument_group("k-means")
    g.add_argument("--iters", dest="max_iter", type=parsed(KMEANS, "max_iter"),
                   default=d.max_iter, help=f"maximum iterations (default: {d.max_iter})")
    g.add_argument("--n-init", type=parsed(KMEANS, "n_init"), default=d.n_init,
                   help=f"restarts; the best objective wins (default: {d.n_init})")
    g.add_argument("--tol", type=parsed(KMEANS, "tol"), default=d.tol,
                   help="stop when the relative objective change falls below this "
                        f"(default: {d.tol:g})")
    g.add_argument("--metric", choices=K.METRICS, default=d.metric)
    g.add_argument("--backend", choices=K.BACKENDS, default=d.backend)
    g.add_argument("--seed", type=parsed(KMEANS, "seed"), default=d.seed)
    g.add_argument("--kmeans-device", default=d.device,
                   help="torch device for k-means: cpu, cuda, ... (default: cpu)")
    add_chunk_rows_option(g, "rows streamed from embeddings.npy at a time (bounds memory)")
    g.add_argument("--fit-sample", type=parsed(CLUSTER, "fit_sample"), default=None,
                   metavar="N",
                   help="fit k-means++ and Lloyd on a seeded sample of N valid rows, then "
                        "label every row in one streamed pass (the objective printed is "
                        "every row's); 0: fit on every row. Default: every row up to "
                        "2,000,000 valid rows, above that a sample of max(1,000,000, "
                        "1024 x K) rows (docs/benchmarks.md, K-means on a sample)")


def kmeans_options(args: argparse.Namespace) -> dict[str, Any]:
    """The k-means settings given by :func:`add_kmeans_options`, as the keywords of
    :class:`clusterclip.stages.cluster.KMeansOptions` (``cluster``, ``run``)."""
    from dataclasses import fields

    from clusterclip.clustering.kmeans import KMeansSettings

    return {f.name: getattr(args, KMEANS_DESTS.get(f.name, f.name))
            for f in fields(KMeansSettings)}


def add_chunk_rows_option(g: Any, help: str) -> None:
    """``--chunk-rows`` of the commands that stream embeddings (``cluster``, ``assign``):
    the k-means setting ``chunk_rows``, whose range
    :class:`clusterclip.clustering.kmeans.KMeansSettings` declares and checks."""
    from clusterclip.clustering.kmeans import DEFAULT_CHUNK_ROWS

    g.add_argument("--chunk-rows", type=parsed(KMEANS, "chunk_rows"), default=DEFAULT_CHUNK_ROWS,
                   help=f"{help} (default: {DEFAULT_CHUNK_ROWS})")


def add_overwrite_option(p: argparse.ArgumentParser, what: str = "--out") -> None:
    """``--overwrite`` of the commands that write an output folder (storage.outputs)."""
    p.add_argument("--overwrite", action="store_true",
                   help=f"also write {what} when another clusterclip command or work "
                        "directory wrote it, replacing only the files its marker lists (never "
                        "a folder without the marker, a file of yours, the work directory, an "
                        "input, or a folder holding them)")


def add_token_options(p: argparse.ArgumentParser) -> None:
    """``--balance-by`` and ``--tokenizer`` (``sample``, ``run``); see clusterclip.tokens."""
    from clusterclip.sampling.budget import BALANCE_BY

    p.add_argument("--balance-by", choices=BALANCE_BY, default="docs",
                   help="docs: cluster weight n_k ** alpha; tokens: n_k ** alpha / mean tokens "
                        "per document, so clusters get equal tokens (alpha 0) rather than "
                        "equal documents")
    add_path(p, "--tokenizer", role="input", default=None, metavar="PATH",
                   help="local Hugging Face fast tokenizer folder: count tokens exactly "
                        "(once per corpus and tokenizer, cached as W/tokens.npy) instead of "
                        "the estimate ceil(characters / 4) from the corpus index")


def add_proxy_options(p: argparse.ArgumentParser, default_model: str) -> None:
    """``--model`` (each preset's parameter count) and ``--tokenizer`` of the proxy LMs
    (``experiment``, ``search``)."""
    from clusterclip.lm.config import MODEL_PRESETS, describe_presets

    p.add_argument("--model", choices=tuple(MODEL_PRESETS), default=None,
                   help=f"model size preset (default {default_model}): {describe_presets()}")
    add_path(p, "--tokenizer", role="input", default=None, metavar="DIR",
             help="local Hugging Face fast tokenizer folder (offline): the proxy LM reads its "
                  "tokens, as the real model will, instead of bytes (its vocabulary is the "
                  "tokenizer's + 1, so the presets grow); losses are reported in bits per "
                  "byte beside nats per token, so runs with different tokenizers compare "
                  "(default: bytes)")


def add_sampling_options(g: Any, *, mixture_into: Any = None, mixture_help: str) -> None:
    """``--strategy``, ``--clip``, ``--alpha`` and ``--mixture`` of ``sample`` and ``run``,
    declared once (``mixture_into``: the group ``--mixture`` goes in, e.g. one exclusive with
    ``--cluster-weights``; default ``g``). Their defaults resolve later, in one place
    (:func:`clusterclip.sampling.mixture.resolve_strategy` and the clip rule)."""
    from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY
    from clusterclip.sampling.spec import DEFAULT_CLIP, STRATEGIES

    g.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help=f"default: {DEFAULT_COMMAND_STRATEGY} (beat random on held-out loss in "
                        "our runs), or the --mixture's timing; clusterclip is the paper's "
                        "method")
    g.add_argument("--clip", type=parsed(SCHEDULE, "clip"), default=None,
                   help="clusterclip, paced: max times any document is drawn (default: the "
                        f"--mixture's clip, else paced {DEFAULT_CLIP}, raised to fit T; "
                        "clusterclip: the recommended R for T, the rule of `clusterclip "
                        "report`)")
    g.add_argument("--alpha", type=parsed(SCHEDULE, "alpha"), default=0.0,
                   help="temperature/clusterclip/paced: cluster weight n_k ** alpha "
                        "(default: 0)")
    add_path(g if mixture_into is None else mixture_into, "--mixture", role="input",
             default=None, metavar="FILE", help=mixture_help)


def add_workers_option(p: argparse.ArgumentParser, what: str, kind: Callable[[str], int],
                       quick: str = "") -> None:
    """``--workers`` of ``experiment`` and ``search``, parsed by ``kind`` (``quick``: what
    ``--quick`` takes, for the help; the option is then None unless given)."""
    p.add_argument("--workers", type=kind, default=None if quick else 1, metavar="N",
                   help=f"worker processes training {what} side by side, each at --threads "
                        f"(default 1: in this process{quick}; under torchrun, per rank); the "
                        "results are the same for every N. On the shared 2-core machine 2 "
                        "workers measured slower (docs/benchmarks.md, \"Search\")")


def check_token_options(args: argparse.Namespace, tokens_file: str | None = None) -> bool:
    """Check ``--num-tokens``, ``--balance-by``, ``--tokenizer`` (and ``sample``'s
    ``--tokens``); True when they need token counts. ``--tokenizer`` and ``--tokens``
    exclude each other and apply only with ``--num-tokens`` or ``--balance-by tokens``."""
    from clusterclip.errors import InputError
    from clusterclip.sampling.budget import check_budget

    needs = check_budget(num_tokens=args.num_tokens, balance_by=args.balance_by)
    given = [o for o, v in (("--tokenizer", args.tokenizer), ("--tokens", tokens_file))
             if v is not None]
    if len(given) == 2:
        raise InputError("give one of --tokenizer and --tokens, not both")
    if given and not needs:
        raise InputError(f"{given[0]} applies only with --num-tokens or --balance-by tokens")
    return needs


def resolve_mixture(args: argparse.Namespace, num_clusters: int | None = None) -> None:
    """Set ``args.strategy`` and ``args.clip``: as given, else the ``--mixture``'s timing
    and clip, else the sampler's defaults. The mixture file is read and checked now
    (with ``num_clusters``, its length too), before any work."""
    from clusterclip.errors import InputError
    from clusterclip.sampling.mixture import read_mixture, resolve_strategy

    mixture = None
    if args.mixture is not None:
        mixture = read_mixture(args.mixture, num_clusters)
        if args.alpha != 0.0:
            raise InputError(f"--alpha {args.alpha}: does not apply with --mixture (its "
                             f"weights replace n_k ** alpha)")
        if args.balance_by == "tokens":
            raise InputError("--balance-by tokens computes the cluster weights, so it does "
                             "not combine with --mixture")
    args.strategy, args.clip = resolve_strategy(args.strategy, args.clip, mixture)
