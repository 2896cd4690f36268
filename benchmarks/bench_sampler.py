"""Sampler throughput, memory, state size and seek time against its peers.

    python benchmarks/bench_sampler.py            # N=1e7 docs, K=1e4 clusters, T=1e8
    python benchmarks/bench_sampler.py --quick    # N=1e6, K=1e3, T=1e7
    python benchmarks/bench_sampler.py --shape issue --sections cli,resume
                                                  # issue 10: N=2e6, K=5000, T=3e7, clip 20
    python benchmarks/bench_sampler.py --sections many   # 10^5 vs 10^4 clusters
    python benchmarks/bench_sampler.py --shape issue --sections stages
                                                  # a 3-stage mixture vs one stage

Same power-law labels everywhere (cluster k has about N / (k H_K) documents,
shuffled over the corpus). Rows:

* ours: ``ClusterClipSampler(strategy="clusterclip").blocks()`` generating all T
  indices (streamed, never held), run in a subprocess so its peak RSS is its own;
* ours, ``strategy="paced"`` (same T and clip), the same way in its own subprocess;
* torch WeightedRandomSampler with cluster-balancing weights (1 / n_k per
  document): its draw is one ``torch.multinomial(weights, T, replacement=True)``
  call, timed here in bulk (no Python iteration, the generous reading) on
  ``--peer-samples`` draws;
* numpy ``Generator.permutation(T)``: the floor for any shuffled order of T.

Sections (``--sections``, default all):

* ``inproc``: the rows above, in-process generation rates;
* ``cli``: whole processes, each timed from the parent (interpreter start,
  imports, reading labels.npy, writing the .npy): ``clusterclip sample`` for
  every strategy (``--cli-repeat`` rounds, each process writing over the previous
  one's output, or with ``--fresh`` to a new path; ``--base-src DIR``: the same
  processes of that source tree right after ours; the medians compared) against a
  process that draws with ``torch.multinomial`` (cluster-balancing weights) and saves,
  one that iterates ``WeightedRandomSampler`` into a list and saves, and one that saves
  ``numpy permutation(T)``; the torch peers draw ``--peer-samples`` and their
  drawing time is scaled to T (their fixed cost counted once). Then each
  strategy's in-process generation rate (construction + ``blocks()``, fresh
  process) against the peers' in-process draw rates of the same run;
* ``resume``: fresh processes per strategy: start at 0, resume at
  ``consumed_samples = --seek`` without a seek index (the one-off build), the
  same again with it, and ``load_state_dict`` of that state at world size 4;
* ``many``: 10^4 vs 10^5 clusters of near-equal size (N = 2e6): construction
  plus the first 4e6 samples, then the rest of T = 2e7 (CPU s, the least of
  ``--many-repeat`` fresh samplers in one process: the noise of a shared machine
  is of the order of the difference measured);
* ``stages``: ``clusterclip sample --mixture`` whole processes, a 3-stage mixture
  (uniform to 0.1, n_k ** 0.5 to 0.8, then n_k ** 0.5 on half the clusters) against
  the one-stage mixture of n_k ** 0.5 and 3 stages all of n_k ** 0.5 (the cost of
  the stages alone), paced and clusterclip, alternated ``--stages-repeat`` rounds
  (min and median).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def power_law_labels(n_docs: int, n_clusters: int, seed: int = 0) -> np.ndarray:
    """(N,) int64 cluster ids with Zipf(1) cluster sizes (every cluster non-empty)."""
    w = 1.0 / np.arange(1, n_clusters + 1)
    sizes = np.maximum(1, np.floor(w / w.sum() * n_docs)).astype(np.int64)
    sizes[0] += n_docs - sizes.sum()
    labels = np.repeat(np.arange(n_clusters, dtype=np.int64), sizes)
    np.random.default_rng(seed).shuffle(labels)
    return labels


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker(args: argparse.Namespace, strategy: str = "clusterclip") -> dict:
    """Runs in a fresh process: our sampler only, so the RSS peak is ours."""
    from clusterclip import ClusterClipSampler

    labels = power_law_labels(args.docs, args.clusters)
    rss_labels = _peak_rss_mib()
    t0 = time.perf_counter()
    s = ClusterClipSampler(labels, args.samples, strategy=strategy, clip=args.clip, seed=0)
    t1 = time.perf_counter()
    n, check = 0, 0
    for block in s.blocks(1 << 20):
        n += block.size
        check ^= int(block[-1])
    t2 = time.perf_counter()
    assert n == args.samples
    state = json.dumps(s.state_dict())
    it = iter(ClusterClipSampler(labels, args.samples, strategy=strategy, clip=args.clip,
                                 seed=0))
    t3 = time.perf_counter()
    for _ in range(args.iter_samples):
        next(it)
    t4 = time.perf_counter()
    return {"init_s": t1 - t0, "gen_s": t2 - t1, "samples": n, "state_bytes": len(state),
            "rss_after_labels_mib": rss_labels, "peak_rss_mib": _peak_rss_mib(),
            "iter_rate": args.iter_samples / (t4 - t3)}


def seek_worker(args: argparse.Namespace) -> dict:
    from clusterclip import ClusterClipSampler

    labels = power_law_labels(args.docs, args.clusters)
    out = {}
    for strategy, clip in (("uniform", None), ("clusterclip", args.seek_clip),
                           ("paced", args.seek_clip)):
        total = args.seek + (1 << 20)
        t0 = time.perf_counter()
        s = ClusterClipSampler(labels, total, strategy=strategy, clip=clip or 4,
                               consumed_samples=args.seek, cache_dir=False)
        first = next(s.blocks(1 << 16))
        out[strategy] = {"seek_s": time.perf_counter() - t0, "first": int(first[0]),
                         "state_bytes": len(json.dumps(s.state_dict()))}
    # paced: the same schedule started fresh (position 0), to compare with its seek
    t0 = time.perf_counter()
    s = ClusterClipSampler(labels, args.seek + (1 << 20), strategy="paced", clip=args.seek_clip)
    next(s.blocks(1 << 16))
    out["paced_fresh_s"] = time.perf_counter() - t0
    out["peak_rss_mib"] = _peak_rss_mib()
    return out


def gen_worker(args: argparse.Namespace) -> dict:
    """One fresh process: construct ``args.resume_strategy`` on the labels file and
    generate all T indices with ``blocks()`` (nothing written); CPU and wall s."""
    from clusterclip import ClusterClipSampler
    from clusterclip.sampling._engine import kernel_enabled

    labels = np.load(args.labels_file)
    kw = {"alpha": 0.5} if args.resume_strategy == "temperature" else {}
    c0, w0 = time.process_time(), time.perf_counter()
    s = ClusterClipSampler(labels, args.samples, strategy=args.resume_strategy,
                           clip=args.clip, cache_dir=False, **kw)
    c1, w1 = time.process_time(), time.perf_counter()
    n = 0
    for block in s.blocks(1 << 20):
        n += block.size
    c2, w2 = time.process_time(), time.perf_counter()
    assert n == args.samples
    return {"init_cpu": c1 - c0, "gen_cpu": c2 - c1, "init_wall": w1 - w0,
            "gen_wall": w2 - w1, "kernel": kernel_enabled()}


def resume_worker(args: argparse.Namespace) -> dict:
    """One fresh process: start ``args.resume_strategy`` at ``args.resume_at`` (or load
    the state in ``args.state_in`` at world size 4) and take the first 2**16 block."""
    t0 = time.perf_counter()
    from clusterclip import ClusterClipSampler

    labels = np.load(args.labels_file)
    strategy = args.resume_strategy
    total = args.seek + (1 << 20)
    clip = args.seek_clip
    t1 = time.perf_counter()
    if args.state_in:
        state = json.loads(Path(args.state_in).read_text())
        s = ClusterClipSampler(labels, total, strategy=strategy, clip=clip, rank=1,
                               world_size=4, cache_dir=args.cache)
        s.load_state_dict(state)
    else:
        s = ClusterClipSampler(labels, total, strategy=strategy, clip=clip,
                               consumed_samples=args.resume_at, cache_dir=args.cache)
    first = next(s.blocks(1 << 16))
    t2 = time.perf_counter()
    if args.state_out:
        Path(args.state_out).write_text(json.dumps(s.state_dict()))
    return {"import_load_s": t1 - t0, "seek_s": t2 - t1, "first": int(first[0]),
            "built": None if s._seek_index is None else s._seek_index.last_build}


def many_worker(args: argparse.Namespace) -> dict:
    from clusterclip import ClusterClipSampler

    n_docs, T, head = 2 * 10**6, 2 * 10**7, 4 * 10**6
    labels = np.random.default_rng(0).integers(0, args.many_k, n_docs)
    out = {}
    for strategy in ("uniform", "clusterclip"):
        for _ in range(max(1, args.many_repeat)):
            c0, w0 = time.process_time(), time.perf_counter()
            s = ClusterClipSampler(labels, T, strategy=strategy, clip=16, cache_dir=False)
            n = 0
            blocks = s.blocks(1 << 20)
            for block in blocks:
                n += block.size
                if n >= head:
                    break
            c1, w1 = time.process_time(), time.perf_counter()
            for block in blocks:
                n += block.size
            c2, w2 = time.process_time(), time.perf_counter()
            r = {"head_cpu": c1 - c0, "head_wall": w1 - w0, "rest_cpu": c2 - c1,
                 "rest_wall": w2 - w1, "head": head, "rest": n - head}
            best = out.setdefault(strategy, r)
            for key in ("head_cpu", "head_wall", "rest_cpu", "rest_wall"):
                best[key] = min(best[key], r[key])
    return out


def _timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, stdout) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{cmd[:4]}... failed: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


_PEER = r"""
import sys, time, numpy as np, torch
from torch.utils.data import WeightedRandomSampler
labels_file, n, out, how = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lab = np.load(labels_file)
sizes = np.bincount(lab)
w = torch.as_tensor(1.0 / sizes[lab], dtype=torch.double)
g = torch.Generator().manual_seed(0)
t0 = time.perf_counter()
if how == "multinomial":
    drawn = torch.multinomial(w, n, True, generator=g).numpy()
else:
    drawn = np.array(list(WeightedRandomSampler(w, n, replacement=True, generator=g)))
t1 = time.perf_counter()
np.save(out, drawn)
print(t1 - t0)
"""

_PERM = r"""
import sys, numpy as np
np.save(sys.argv[2], np.random.default_rng(0).permutation(int(sys.argv[1])))
"""


STRATEGY_ROWS = ("random", "uniform", "temperature", "clusterclip", "paced")


def _our_processes(args: argparse.Namespace, tmp: Path, labels_file: Path,
                   env: dict) -> list[tuple[str, float, float]]:
    """``clusterclip sample`` of every strategy as a whole process, ``--cli-repeat``
    rounds over the strategies, each writing over the previous process's output of its
    code (its record checked, the old file replaced), or with ``--fresh`` to a new path
    (the outputs removed after the last round); with ``--base-src``, the same process of
    that code right after ours in every round. Each run printed, then (name, median wall
    s, median CPU s) per strategy and code."""
    T = args.samples
    codes = [("", env)] + ([(" (base)", {**env, "PYTHONPATH": str(args.base_src)})]
                           if args.base_src else [])
    print(f"\n## whole processes, T={T:,} (wall s; CPU s of the process in brackets; "
          f"load average when each started; {args.cli_repeat} round(s); each to "
          f"{'a fresh path' if args.fresh else 'the path the previous run of its code wrote'}"
          f")", flush=True)
    runs: dict[str, list[tuple[float, float]]] = {
        s + c: [] for s in STRATEGY_ROWS for c, _ in codes}
    for r in range(args.cli_repeat):
        for strategy in STRATEGY_ROWS:
            for code, code_env in codes:
                out = tmp / (f"schedule{len(code)}-{strategy}-{r}.npy" if args.fresh
                             else f"schedule{len(code)}.npy")
                cmd = [sys.executable, "-m", "clusterclip.cli", "sample", "--labels",
                       str(labels_file), "--strategy", strategy, "--clip", str(args.clip),
                       "--num-samples", str(T), "--out", str(out), "--no-progress"]
                if strategy == "temperature":
                    cmd += ["--alpha", "0.5"]
                load = os.getloadavg()[0]
                wall, cpu, _ = _timed(cmd, code_env)
                runs[strategy + code].append((wall, cpu))
                print(f"| clusterclip sample --strategy {strategy}{code} (round {r + 1}) | "
                      f"{wall:.2f} | ({cpu:.2f}) | load {load:.1f} |", flush=True)
    for old in tmp.glob("schedule*.npy"):
        old.unlink()
    rows = [(f"clusterclip sample --strategy {s}", float(np.median([w for w, _ in t])),
             float(np.median([c for _, c in t]))) for s, t in runs.items()]
    if args.cli_repeat > 1:
        for name, wall, cpu in rows:
            print(f"| {name}, median of {args.cli_repeat} | {wall:.2f} | ({cpu:.2f}) |")
    return rows


def cli_section(args: argparse.Namespace, tmp: Path, labels_file: Path,
                argv: list[str]) -> None:
    T = args.samples
    env = {**os.environ, "CLUSTERCLIP_CACHE": "off"}
    # The peers import torch and numpy from site-packages, compiled to bytecode at install;
    # compile ours too, or an environment with PYTHONDONTWRITEBYTECODE set recompiles our
    # modules in every process (0.06-0.08 CPU s each, measured).
    import clusterclip

    compileall.compile_dir(Path(clusterclip.__file__).parent, quiet=1)
    if args.base_src:
        compileall.compile_dir(Path(args.base_src), quiet=1)
    rows = _our_processes(args, tmp, labels_file, env)
    P = min(T, args.peer_samples)
    peers, draw_rate = {}, {}
    for how in ("multinomial", "wrs"):
        load = os.getloadavg()[0]
        wall, cpu, out = _timed([sys.executable, "-c", _PEER, str(labels_file), str(P),
                                 str(tmp / "peer.npy"), how])
        draw = float(out.strip().splitlines()[-1])
        draw_rate[how] = P / draw
        scale = T / P
        peers[how] = (wall + draw * (scale - 1), cpu + draw * (scale - 1))
        name = ("torch.multinomial (cluster-balancing weights) + save" if how == "multinomial"
                else "WeightedRandomSampler iterated into a list + save")
        extra = f", measured on {P:,} draws, scaled" if P < T else ""
        print(f"| {name}{extra} | {peers[how][0]:.2f} | ({peers[how][1]:.2f}) | "
              f"load {load:.1f} |", flush=True)
    load = os.getloadavg()[0]
    wall, cpu, _ = _timed([sys.executable, "-c", _PERM, str(T), str(tmp / "perm.npy")])
    peers["perm"] = (wall, cpu)
    print(f"| numpy permutation(T) + save | {wall:.2f} | ({cpu:.2f}) | load {load:.1f} |",
          flush=True)
    print()
    for name, wall, cpu in rows:
        print(f"{name}: {peers['multinomial'][0] / wall:.1f}x multinomial, "
              f"{peers['wrs'][0] / wall:.1f}x WeightedRandomSampler (targets >= 10x); "
              f"{wall / peers['perm'][0]:.2f}x permutation's time (target <= 2x); "
              f"by CPU: {peers['multinomial'][1] / cpu:.1f}x / {peers['wrs'][1] / cpu:.1f}x / "
              f"{cpu / peers['perm'][1]:.2f}x", flush=True)
    print(f"\n## in-process generation, T={T:,}: construction + blocks() in a fresh process "
          f"(nothing written), against the peers' in-process draw rates above "
          f"(torch.multinomial {draw_rate['multinomial'] / 1e6:.2f} M/s, WeightedRandomSampler "
          f"{draw_rate['wrs'] / 1e6:.2f} M/s, wall)", flush=True)
    print("| strategy | construction CPU s | generation CPU s (wall) | M samples/s by CPU "
          "(wall) | x multinomial's draw | x WeightedRandomSampler's | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for strategy in STRATEGY_ROWS:
        load = os.getloadavg()[0]
        r = _subprocess("gen", [*argv, f"--labels-file={labels_file}",
                                f"--resume-strategy={strategy}"])
        rate_cpu, rate_wall = T / r["gen_cpu"], T / r["gen_wall"]
        kernel = "" if r["kernel"] else " (numpy path)"
        print(f"| {strategy}{kernel} | {r['init_cpu']:.2f} | {r['gen_cpu']:.2f} "
              f"({r['gen_wall']:.2f}) | {rate_cpu / 1e6:.1f} ({rate_wall / 1e6:.1f}) | "
              f"{rate_wall / draw_rate['multinomial']:.1f}x | {rate_wall / draw_rate['wrs']:.1f}x "
              f"| {load:.1f} |", flush=True)


def resume_section(args: argparse.Namespace, tmp: Path, labels_file: Path,
                   argv: list[str]) -> None:
    print(f"\n## resume at consumed_samples = {args.seek:,} (fresh processes; wall s "
          f"from process start; T = {args.seek + (1 << 20):,}, clip {args.seek_clip})",
          flush=True)
    print("| strategy | start at 0 | resume, no index (one-off build) | resume, index "
          "cached | load_state_dict at world size 4 | resume / start |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base = [sys.executable, __file__, "--worker", "resume", *argv,
            f"--labels-file={labels_file}"]
    for strategy in ("random", "uniform", "temperature", "clusterclip", "paced"):
        cache = tmp / f"cache-{strategy}"
        st = tmp / f"state-{strategy}.json"
        common = [f"--resume-strategy={strategy}", f"--cache={cache}"]
        fresh, _, _ = _timed([*base, *common, "--resume-at=0"])
        cold, _, out = _timed([*base, *common, f"--resume-at={args.seek}"])
        built = json.loads(out.strip().splitlines()[-1])["built"]
        warm, _, out = _timed([*base, *common, f"--resume-at={args.seek}",
                               f"--state-out={st}"])
        w = json.loads(out.strip().splitlines()[-1])
        assert w["built"] is None
        state, _, _ = _timed([*base, *common, f"--state-in={st}"])
        verdict = "met" if warm <= max(1.0, 3 * fresh) else "MISSED"
        note = f" (index build {built['seconds']:.1f} s)" if built else ""
        print(f"| {strategy} | {fresh:.2f} | {cold:.2f}{note} | {warm:.2f} | {state:.2f} | "
              f"{warm / fresh:.2f}x ({verdict}: <= max(1 s, 3x)) |", flush=True)


def many_section(argv: list[str]) -> None:
    print("\n## many clusters: N = 2e6 documents, near-equal sizes, T = 2e7, clip 16 "
          "(CPU s, least of the repeats; M samples per CPU s)", flush=True)
    res = {}
    for k in (10**4, 10**5):
        res[k] = _subprocess("many", [*argv, f"--many-k={k}"])
    print("| clusters (docs each) | strategy | construction + first 4e6 | rate | next 1.6e7 "
          "| rate |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for k, r in res.items():
        for strategy, m in r.items():
            print(f"| {k:,} (~{2 * 10**6 // k}) | {strategy} | {m['head_cpu']:.2f} | "
                  f"{m['head'] / m['head_cpu'] / 1e6:.1f} M | {m['rest_cpu']:.2f} | "
                  f"{m['rest'] / m['rest_cpu'] / 1e6:.1f} M |", flush=True)
    for strategy in ("uniform", "clusterclip"):
        a, b = res[10**4][strategy], res[10**5][strategy]
        print(f"{strategy}: 10^5 clusters / 10^4 clusters, time per sample: first 4e6 "
              f"{b['head_cpu'] / a['head_cpu']:.2f}x, rest {b['rest_cpu'] / a['rest_cpu']:.2f}x "
              f"(target ~1x)")


def _subprocess(mode: str, argv: list[str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", mode, *argv],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stages_section(args: argparse.Namespace, tmp: Path, labels_file: Path) -> None:
    """A staged mixture against the one-stage mixture of its main weights: whole
    ``clusterclip sample --mixture`` processes, alternated, ``--stages-repeat`` rounds."""
    lab = np.load(labels_file)
    K = int(lab.max()) + 1
    main_w = np.bincount(lab, minlength=K) ** 0.5
    anneal = main_w * (np.random.default_rng(1).random(K) < 0.5)  # half the clusters
    anneal[0] = main_w[0]
    env = {**os.environ, "CLUSTERCLIP_CACHE": "off"}
    files = {}
    for timing in ("paced", "clusterclip"):
        one = {"format_version": 1, "weights": main_w.tolist(), "clip": args.clip,
               "timing": timing}
        staged = {"format_version": 2, "clip": args.clip, "timing": timing, "stages": [
            {"until": 0.1, "weights": [1.0] * K}, {"until": 0.8, "weights": main_w.tolist()},
            {"until": 1.0, "weights": anneal.tolist()}]}
        same = {**staged, "stages": [{**st, "weights": main_w.tolist()}
                                     for st in staged["stages"]]}
        for name, data in ((f"{timing}, one stage", one),
                           (f"{timing}, 3 stages (0.1 / 0.8 / 1)", staged),
                           (f"{timing}, 3 stages of the one stage's weights", same)):
            files[name] = tmp / f"{len(files)}.json"
            files[name].write_text(json.dumps(data))
    print(f"\n## staged mixtures: clusterclip sample --mixture, T={args.samples:,}, "
          f"{args.stages_repeat} alternated rounds (wall s, CPU s)", flush=True)
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in files}
    for _ in range(args.stages_repeat):
        for name, path in files.items():
            cmd = [sys.executable, "-m", "clusterclip.cli", "sample", "--labels",
                   str(labels_file), "--mixture", str(path), "--num-samples",
                   str(args.samples), "--out", str(tmp / "schedule.npy"), "--no-progress"]
            wall, cpu, _ = _timed(cmd, env)
            times[name].append((wall, cpu))
    print("| mixture | min wall s | median wall s | min CPU s | median CPU s | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, t in times.items():
        w, c = np.array(t).T
        print(f"| {name} | {w.min():.2f} | {np.median(w):.2f} | {c.min():.2f} | "
              f"{np.median(c):.2f} | {os.getloadavg()[0]:.1f} |")
    for timing in ("paced", "clusterclip"):
        one, *staged = (np.array(t) for n, t in times.items() if n.startswith(timing))
        for what, st_ in zip(("3 stages", "3 stages, same weights"), staged, strict=True):
            print(f"{timing}: {what} / one stage = {st_[:, 0].min() / one[:, 0].min():.3f} "
                  f"(min wall), {np.median(st_[:, 1]) / np.median(one[:, 1]):.3f} (median "
                  f"CPU), {st_[:, 1].min() / one[:, 1].min():.3f} (min CPU); target <= 1.10",
                  flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N=1e6, K=1e3, T=1e7, seek 1e8")
    p.add_argument("--docs", type=int, default=None)
    p.add_argument("--clusters", type=int, default=None)
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--clip", type=int, default=16, help="clusterclip R (capacity R x N >= T)")
    p.add_argument("--peer-samples", type=int, default=None,
                   help="draws timed for WeightedRandomSampler (default: min(T, 2e7))")
    p.add_argument("--seek", type=int, default=None, help="seek target position")
    p.add_argument("--seek-clip", type=int, default=None,
                   help="clip of the clusterclip seek schedule (default: enough capacity)")
    p.add_argument("--iter-samples", type=int, default=1_000_000,
                   help="Python-int iteration timed over this many indices")
    p.add_argument("--shape", choices=("default", "issue"), default="default",
                   help="issue: N=2e6, K=5000, T=3e7, clip 20 (issue 10's measurement)")
    p.add_argument("--sections", default="inproc,cli,resume,many",
                   help="comma-separated: inproc, cli, resume, many, stages")
    p.add_argument("--cli-repeat", type=int, default=3,
                   help="cli: rounds of our processes (the medians are compared)")
    p.add_argument("--base-src", type=Path, default=None,
                   help="cli: also run clusterclip sample of this source tree (e.g. a copy "
                        "of main's src) right after ours in every round")
    p.add_argument("--fresh", action="store_true",
                   help="cli: every process writes a new path (default: over the output "
                        "of the previous process of its code, as a rerun does)")
    p.add_argument("--stages-repeat", type=int, default=5,
                   help="stages: alternated rounds of the four processes")
    p.add_argument("--worker", choices=("ours", "paced", "seek", "resume", "many", "gen"),
                   default=None, help=argparse.SUPPRESS)
    for hidden in ("--labels-file", "--resume-strategy", "--cache", "--state-in",
                   "--state-out"):
        p.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    p.add_argument("--resume-at", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--many-k", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--many-repeat", type=int, default=3,
                   help="many: fresh samplers timed per row (the least is reported)")
    args = p.parse_args()
    quick = args.quick
    issue = args.shape == "issue"
    if issue:
        args.clip = 20
    args.docs = args.docs or (10**6 if quick else 2 * 10**6 if issue else 10**7)
    args.clusters = args.clusters or (10**3 if quick else 5000 if issue else 10**4)
    args.samples = args.samples or (10**7 if quick else 3 * 10**7 if issue else 10**8)
    args.seek = args.seek or (10**8 if quick else 10**9)
    args.peer_samples = args.peer_samples or min(args.samples, 2 * 10**7)
    args.seek_clip = args.seek_clip or -(-(args.seek + (1 << 20)) // args.docs)
    if args.worker in ("ours", "paced"):
        print(json.dumps(worker(args, "clusterclip" if args.worker == "ours" else "paced")))
        return
    if args.worker in ("seek", "resume", "many", "gen"):
        work = {"seek": seek_worker, "resume": resume_worker, "many": many_worker,
                "gen": gen_worker}
        print(json.dumps(work[args.worker](args)))
        return

    argv = [f"--docs={args.docs}", f"--clusters={args.clusters}", f"--samples={args.samples}",
            f"--clip={args.clip}", f"--seek={args.seek}", f"--seek-clip={args.seek_clip}",
            f"--iter-samples={args.iter_samples}"]
    print(f"N={args.docs:,} docs, K={args.clusters:,} power-law clusters, T={args.samples:,} "
          f"samples, clip {args.clip}; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    sections = set(args.sections.split(","))
    if sections & {"cli", "resume", "stages"}:
        with tempfile.TemporaryDirectory(prefix="bench-sampler-") as d:
            tmp = Path(d)
            labels_file = tmp / "labels.npy"
            np.save(labels_file, power_law_labels(args.docs, args.clusters))
            if "cli" in sections:
                cli_section(args, tmp, labels_file, argv)
            if "resume" in sections:
                resume_section(args, tmp, labels_file, argv)
            if "stages" in sections:
                stages_section(args, tmp, labels_file)
    if "many" in sections:
        many_section(argv)
    if "inproc" in sections:
        inproc_section(args, argv)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


def inproc_section(args: argparse.Namespace, argv: list[str]) -> None:
    print("\n## in-process generation", flush=True)
    ours = _subprocess("ours", argv)
    print(f"ours done: {ours}", flush=True)
    paced = _subprocess("paced", argv)
    print(f"paced done: {paced}", flush=True)
    seek = _subprocess("seek", argv)
    print(f"seek done: {seek}", flush=True)

    import torch
    from torch.utils.data import WeightedRandomSampler

    labels = power_law_labels(args.docs, args.clusters)
    sizes = np.bincount(labels)
    weights = torch.as_tensor(1.0 / sizes[labels], dtype=torch.double)
    del labels
    wrs = WeightedRandomSampler(weights, args.peer_samples, replacement=True,
                                generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    # exactly the draw WeightedRandomSampler.__iter__ makes, without iterating it
    drawn = torch.multinomial(wrs.weights, wrs.num_samples, wrs.replacement,
                              generator=wrs.generator)
    peer_s = time.perf_counter() - t0
    assert drawn.numel() == args.peer_samples
    del drawn, weights

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    perm = rng.permutation(args.samples)
    perm_s = time.perf_counter() - t0
    del perm

    ours_rate = ours["samples"] / ours["gen_s"]
    peer_rate = args.peer_samples / peer_s
    perm_rate = args.samples / perm_s
    paced_rate = paced["samples"] / paced["gen_s"]
    rows = [
        ("ours: clusterclip blocks()", ours_rate, ours["gen_s"] + ours["init_s"]),
        ("ours: paced blocks()", paced_rate, paced["gen_s"] + paced["init_s"]),
        ("torch WeightedRandomSampler (multinomial)", peer_rate, args.samples / peer_rate),
        ("numpy Generator.permutation(T)", perm_rate, perm_s),
    ]
    print()
    print(f"| method | samples/s | time for T={args.samples:.0e} (s) |")
    print("| --- | ---: | ---: |")
    for name, rate, secs in rows:
        print(f"| {name} | {rate / 1e6:.1f} M | {secs:.2f} |")
    print()
    with_init = ours["samples"] / (ours["gen_s"] + ours["init_s"])
    print(f"throughput vs WeightedRandomSampler: {ours_rate / peer_rate:.1f}x generating "
          f"(target >= 10x); {with_init / peer_rate:.1f}x including construction")
    print(f"time vs permutation(T), incl. construction: "
          f"{(ours['gen_s'] + ours['init_s']) / perm_s:.2f}x (target <= 2x); "
          f"generation only: {ours['gen_s'] / perm_s:.2f}x")
    print(f"ours: construction {ours['init_s']:.2f} s, peak RSS {ours['peak_rss_mib']:.0f} MiB "
          f"(of which labels + interpreter {ours['rss_after_labels_mib']:.0f} MiB; "
          f"target < 1024), state_dict {ours['state_bytes'] / 1024:.1f} KiB (target < 1024)")
    print(f"ours via Python-int iteration: {ours['iter_rate'] / 1e6:.2f} M indices/s")
    print(f"paced vs clusterclip (same run): {paced_rate / ours_rate:.2f}x generating "
          f"(target >= 1x); construction {paced['init_s']:.2f} s vs {ours['init_s']:.2f} s; "
          f"peak RSS {paced['peak_rss_mib']:.0f} MiB; state_dict "
          f"{paced['state_bytes'] / 1024:.1f} KiB; Python-int iteration "
          f"{paced['iter_rate'] / 1e6:.2f} M indices/s")
    for strategy in ("uniform", "clusterclip", "paced"):
        r = seek[strategy]
        extra = f" (clip {args.seek_clip})" if strategy != "uniform" else ""
        how = ("key search, no replay" if strategy == "paced"
               else "count-only replay, no seek index")
        print(f"seek to position {args.seek:.0e}, {strategy}{extra} (construction + {how} "
              f"+ first block): {r['seek_s']:.1f} s "
              f"(state_dict {r['state_bytes'] / 1024:.1f} KiB)")
    print(f"paced started fresh at position 0 (construction + first block): "
          f"{seek['paced_fresh_s']:.1f} s; seek / fresh = "
          f"{seek['paced']['seek_s'] / seek['paced_fresh_s']:.2f}x")
    print(f"seek process peak RSS {seek['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
