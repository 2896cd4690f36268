"""``clusterclip embed INPUT... --workdir W``: corpus -> W/embeddings.npy."""

from __future__ import annotations

import argparse
import sys

from clusterclip.cli._options import EMBED, add_corpus_options, add_embed_options, parsed
from clusterclip.cli._paths import add_path

HELP = "embed a corpus (.jsonl, .jsonl.gz, .parquet or folders) into W/embeddings.npy"
#: Parameters of the code below named otherwise here (see clusterclip.cli._flags).
PARAM_FLAGS = {"n_clusters": "--clusters", "workers": "--embed-workers", "backend": "--backend"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_path(p, "inputs", role="input", nargs="+", metavar="INPUT",
             help="corpus files (.jsonl, .jsonl.gz, .parquet) or folders of them")
    add_path(p, "--workdir", "-w", role="workdir", required=True,
             help="work directory (created if missing)")
    add_corpus_options(p)
    add_embed_options(p)
    g = p.add_argument_group("embedding shards")
    g.add_argument("--shard-size", type=parsed(EMBED, "shard_size"), default=4096,
                   help="documents per resumable shard, at most: shards grow 256, 512, ... "
                        "up to this size (default: 4096)")
    g.add_argument("--keep-shards", action="store_true",
                   help="keep W/embed/ (the shards' completion records) at the end "
                        "(default: remove it)")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow a local --embedder hf model to run its own code "
                        "(e.g. jina-embeddings-v2)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from clusterclip import distributed as D
    from clusterclip.stages import embed
    from clusterclip.workdir import Workdir

    options = embed.EmbedOptions(
        inputs=tuple(args.inputs), shard_size=args.shard_size, keep_shards=args.keep_shards,
        trust_remote_code=args.trust_remote_code, **embed_options(args))
    with D.process_group(args.device) as main_rank:
        info = embed.run(Workdir(args.workdir), options)
    if main_rank:
        print(summary_text(info), file=sys.stdout)
    return 0


def embed_options(args: argparse.Namespace) -> dict:
    """The options of :func:`clusterclip.cli._options.add_embed_options` (and
    ``--no-progress``) as keywords of :class:`clusterclip.stages.embed.EmbedOptions` (also
    used by ``run``)."""
    return dict(text_field=args.text_field, id_field=args.id_field,
                skip_bad_lines=args.skip_bad_lines, embedder=args.embedder, model=args.model,
                pooling=args.pooling, max_length=args.max_length, batch_size=args.batch_size,
                device=args.device, dtype=args.dtype, backend=args.embed_backend,
                precision=args.precision, tune=args.tune, tune_seed=args.tune_seed,
                workers=args.embed_workers, progress=not args.no_progress)


def summary_text(info: dict) -> str:
    """Human summary of an embed run (also used by ``run``)."""
    head = ("embeddings are current (inputs and parameters unchanged), nothing to do"
            if info.get("skipped") else
            f"embedded {info['documents_embedded']} documents with {info['embedder']} "
            f"in {info['seconds']:.1f} s ({info['shards_computed']} shards computed, "
            f"{info['shards_reused']} reused)")
    how = ", ".join(f"{k} {info[k]}" for k in ("backend", "precision") if k in info)
    agree = info.get("agreement_with_torch")
    if agree and info.get("precision") == "int8":
        how += (f" (cosine to torch on the probe: {agree['mean']:.4f} mean, "
                f"{agree['p1']:.4f} at the 1st percentile)")
    tune = info.get("tune") or {}
    auto = tune.get("auto")
    if tune.get("documents"):
        cost = "cached" if tune["cached"] else f"{tune['seconds']:.1f} s"
        how += (f"{', ' if how else ''}table tuned on {tune['documents']} documents "
                f"({'--tune auto, ' if auto else ''}{cost}; held-out "
                f"cosine to the teacher {tune['held_out_cosine_untuned']:.3f} -> "
                f"{tune['held_out_cosine_tuned']:.3f})")
        if not tune["cached"] and tune["documents"] >= info["valid"]:
            how += ("; the teacher embedded every document, so --embedder minilm would "
                    "have cost no more")
    elif auto:
        how += (f"{', ' if how else ''}table untuned (--tune auto tunes from "
                f"{auto['min_valid']} documents with text; --tune N tunes anyway)")
    lines = [
        head,
        f"  documents:        {info['documents']} in {info['files']} files",
        f"  with text:        {info['valid']}",
        f"  empty (label -1): {info['empty']}",
        f"  bad lines skipped: {info['bad_lines']}",
        f"  dim:              {info['dim']} ({info['dtype']})",
        *([f"  run with:         {how}"] if how else []),
        f"  embeddings:       {info['embeddings']}",
        f"  valid mask:       {info['valid_path']}",
        f"  corpus index:     {info['corpus']}",
    ]
    if info.get("ignored_files"):
        lines.insert(2, f"  ignored files:    {info['ignored_files']} (unknown types in "
                        f"folders, or folders clusterclip wrote)")
    return "\n".join(lines)
