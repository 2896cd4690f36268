"""`clusterclip export --format parquet` against writing the same rows with pyarrow directly.

    python benchmarks/bench_export.py                      # 10^6 positions
    python benchmarks/bench_export.py --positions 100000   # quicker

Corpus: the bundled Python-docs corpus (4096 documents), decompressed to plain
JSONL, in a work directory made by ``clusterclip run --embedder fast``. The
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
"""

from __future__ import annotations

import argparse
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

DIRECT = r"""
import json, resource, sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
from clusterclip.export import PARQUET_OPTIONS, _schema
docs, sched, out = sys.argv[1:4]
texts, fields = [], []
with open(docs, encoding="utf-8") as f:
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

OURS = r"""
import json, resource, sys
from clusterclip.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=env,
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
    args = ap.parse_args()

    from clusterclip.data import pydocs_path
    from clusterclip.sampling.sampler import ClusterClipSampler

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    d = Path(args.dir or tempfile.mkdtemp(prefix="bench_export_"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        docs = d / "docs.jsonl"
        with gzip.open(pydocs_path(), "rb") as src, open(docs, "wb") as dst:
            shutil.copyfileobj(src, dst)
        w = d / "w"
        subprocess.run([sys.executable, "-m", "clusterclip.cli", "run", str(docs), "--workdir",
                        str(w), "--embedder", "fast", "--clusters", "16", "--num-samples",
                        "1000"], check=True, env=env, capture_output=True)
        labels = np.load(w / "labels.npy")
        sched = np.concatenate(list(ClusterClipSampler(labels, args.positions,
                                                       strategy="random", seed=0).blocks()))
        np.save(d / "schedule.npy", sched)
        text_mib = sum(len(t.encode()) for t in
                       (json.loads(line)["text"] for line in open(docs, encoding="utf-8")))
        mean_text = text_mib / len(labels)

        rows = {}
        wall, info = _timed([OURS, "export", "--workdir", str(w), "--schedule",
                             str(d / "schedule.npy"), "--format", "parquet", "--out",
                             str(d / "ours")], env)
        rows["ours: clusterclip export (streamed, verified)"] = (wall, info["peak_rss_mib"],
                                                                  _size(d / "ours"))
        (d / "direct").mkdir()
        wall, info = _timed([DIRECT, str(docs), str(d / "schedule.npy"),
                             str(d / "direct" / "part-00000.parquet"), str(w / "labels.npy")],
                            env)
        rows["direct: texts in a list + pyarrow ParquetWriter"] = (wall, info["peak_rss_mib"],
                                                                    _size(d / "direct"))
        print(f"{args.positions:,} positions over {len(labels):,} documents "
              f"(mean text {mean_text:,.0f} bytes, ~{args.positions * mean_text / 2**30:.2f} "
              f"GiB of text written)")
        print("| writer | wall s | rows/s | peak RSS MiB | output MiB |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, (wall, rss, size) in rows.items():
            print(f"| {name} | {wall:.1f} | {args.positions / wall:,.0f} | {rss:,.0f} | "
                  f"{size / 2**20:,.0f} |")
        ours, direct = rows.values()
        print(f"conclusion: clusterclip export takes {ours[0] / direct[0]:.2f}x the time of the "
              f"direct write and {ours[1] / direct[1]:.2f}x its peak RSS")
    finally:
        if args.dir is None:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
