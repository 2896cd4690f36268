"""The serial parts of the embed stage at scale: the corpus scan (one process against
``torchrun`` ranks sharing the files) and the end of the stage (the former rank-0 merge of
shard files against rows written into one file that is renamed into place).

    PYTHONPATH=src python benchmarks/bench_scan.py scan --dir /tmp/ccscale-scan --nproc 1 2
    PYTHONPATH=src python benchmarks/bench_scan.py merge --dir /tmp/ccscale-scan --docs 1000000

``scan`` generates (or reuses) ``bench_scale.py``'s corpus and runs, as its own process
per world size, ``Workdir.hash_inputs`` then ``corpus.scan_into`` (whole-process wall, CPU
and peak RSS from ``wait4``; each rank's own time and CPU for each), and checks that every
world size wrote the same index bytes. ``merge`` writes N x 256 float32 rows in shards of
4,096 both ways, in one process, the order alternating between rounds.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import math
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import make_corpus, timed_process  # noqa: E402


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker(corpus: Path, out: Path, result: Path) -> None:
    """One rank: the scan alone (the process group is made first, as embed makes it)."""
    from clusterclip import distributed as D
    from clusterclip.corpus import expand_inputs, scan_into
    from clusterclip.workdir import Workdir

    created = D.init_from_env("cpu")
    rank, world = D.rank_and_world()
    files = expand_inputs([corpus])[0]
    hashes = Workdir(out.parent / f"hash-{world}")  # a manifest in memory: nothing cached
    D.barrier()
    t0, c0 = time.perf_counter(), _cpu()
    hashes.hash_inputs(files)
    D.barrier()
    t1, c1 = time.perf_counter(), _cpu()
    stats = scan_into(out, [corpus], progress=False)
    me = {"rank": rank, "hash_wall_s": t1 - t0, "hash_cpu_s": c1 - c0,
          "scan_wall_s": time.perf_counter() - t1, "scan_cpu_s": _cpu() - c1,
          "documents": stats["documents"]}
    everyone = D.gather_objects(me)
    if rank == 0:
        result.write_text(json.dumps({"world": world, "ranks": everyone}) + "\n")
    D.shutdown(created)


def bench_scan(args: argparse.Namespace) -> None:
    base = Path(args.dir)
    corpus = base / f"corpus-{args.docs}"
    info = make_corpus(corpus, args.docs, args.files, 0, False)
    print(f"corpus: {args.docs:,} documents, {info['bytes'] / 2**20:.0f} MiB in "
          f"{len(info['files'])} files: {corpus}", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    outs = []
    for nproc in args.nproc:
        out = base / f"index-{args.docs}-{nproc}"
        shutil.rmtree(out, ignore_errors=True)
        result = base / f"scan-{args.docs}-{nproc}.json"
        me = [str(Path(__file__).resolve()), "worker", str(corpus), str(out), str(result)]
        cmd = ([sys.executable, *me] if nproc == 1 else
               [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", str(nproc), *me])
        load0 = os.getloadavg()
        proc = timed_process(cmd, env, base / f"scan-{args.docs}-{nproc}.log")
        load1 = os.getloadavg()
        ranks = json.loads(result.read_text())["ranks"]
        row = {"nproc": nproc, "wall_s": round(proc["wall_s"], 1),
               "cpu_s": round(proc["cpu_s"], 1), "peak_rss_mib": round(proc["peak_rss_mib"]),
               "hash_wall_s": [round(r["hash_wall_s"], 2) for r in ranks],
               "hash_cpu_s": [round(r["hash_cpu_s"], 2) for r in ranks],
               "scan_wall_s": [round(r["scan_wall_s"], 1) for r in ranks],
               "scan_cpu_s": [round(r["scan_cpu_s"], 1) for r in ranks],
               "load": [round(load0[0], 1), round(load1[0], 1)],
               "utc": time.strftime("%H:%M", time.gmtime())}
        print(json.dumps(row), flush=True)
        outs.append(out)
    for out in outs[1:]:
        same = all(filecmp.cmp(outs[0] / f.name, out / f.name, shallow=False)
                   for f in outs[0].iterdir())
        print(f"{out.name}: same bytes as {outs[0].name}: {same}", flush=True)


def bench_merge(args: argparse.Namespace) -> None:
    from clusterclip.embedding.pipeline import ROWS, _pwrite_all, allocate_rows
    from clusterclip.storage.arrays import save_npy
    from clusterclip.storage.atomic import atomic_path

    n, dim, size = args.docs, 256, 4096
    d = Path(args.dir) / f"merge-{n}"
    rng = np.random.default_rng(0)
    block = rng.standard_normal((size, dim)).astype(np.float32)
    n_shards = math.ceil(n / size)

    def rows(s: int) -> np.ndarray:
        return block[:min(size, n - s * size)]

    def before() -> list[float]:
        """Shard files, then rank 0 concatenates them (the code this change removed)."""
        t0, c0 = time.perf_counter(), _cpu()
        for s in range(n_shards):
            save_npy(d / f"shard-{s:05d}.npy", rows(s))
        t1, c1 = time.perf_counter(), _cpu()
        with atomic_path(d / "before.npy") as tmp:
            arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))
            for s in range(n_shards):
                arr[s * size:s * size + len(rows(s))] = np.load(d / f"shard-{s:05d}.npy",
                                                               mmap_mode="r")
            arr.flush()
            del arr
        t2, c2 = time.perf_counter(), _cpu()
        return [t1 - t0, c1 - c0, t2 - t1, c2 - c1]

    def after() -> list[float]:
        """Every shard's rows written into the one pre-allocated file, renamed into place."""
        t0, c0 = time.perf_counter(), _cpu()
        allocate_rows(d, n, dim, "float32")
        offset = np.load(d / ROWS, mmap_mode="r").offset
        fd = os.open(d / ROWS, os.O_WRONLY)
        for s in range(n_shards):
            _pwrite_all(fd, rows(s).tobytes(), offset + s * size * dim * 4)
        os.close(fd)
        t1, c1 = time.perf_counter(), _cpu()
        os.replace(d / ROWS, d / "after.npy")
        t2, c2 = time.perf_counter(), _cpu()
        return [t1 - t0, c1 - c0, t2 - t1, c2 - c1]

    got: dict[str, list[list[float]]] = {"before": [], "after": []}
    same = True
    for r in range(args.repeats):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            got[name].append((before if name == "before" else after)())
        same = same and filecmp.cmp(d / "before.npy", d / "after.npy", shallow=False)
    shutil.rmtree(d)
    med = {k: np.median(np.array(v), axis=0).round(3).tolist() for k, v in got.items()}
    print(json.dumps({
        "docs": n, "bytes": n * dim * 4, "same_bytes": same, "repeats": args.repeats,
        "median [write wall s, write CPU s, end wall s, end CPU s]": med,
        "all": {k: np.array(v).round(3).tolist() for k, v in got.items()},
        "load": round(os.getloadavg()[0], 1), "utc": time.strftime("%H:%M", time.gmtime())}),
        flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        worker(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("scan", "merge"))
    ap.add_argument("--dir", default="/tmp/ccscale-scan", help="scratch directory")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4, help="JSONL files of the corpus")
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2],
                    help="world sizes to run the scan with")
    ap.add_argument("--repeats", type=int, default=5, help="merge: rounds, order alternating")
    args = ap.parse_args(argv)
    (bench_scan if args.what == "scan" else bench_merge)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
