"""Sampler throughput, memory, state size and seek time against its peers.

    python benchmarks/bench_sampler.py            # N=1e7 docs, K=1e4 clusters, T=1e8
    python benchmarks/bench_sampler.py --quick    # N=1e6, K=1e3, T=1e7

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
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

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
                               consumed_samples=args.seek)
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


def _subprocess(mode: str, argv: list[str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", mode, *argv],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    p.add_argument("--worker", choices=("ours", "paced", "seek"), default=None,
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    quick = args.quick
    args.docs = args.docs or (10**6 if quick else 10**7)
    args.clusters = args.clusters or (10**3 if quick else 10**4)
    args.samples = args.samples or (10**7 if quick else 10**8)
    args.seek = args.seek or (10**8 if quick else 10**9)
    args.peer_samples = args.peer_samples or min(args.samples, 2 * 10**7)
    args.seek_clip = args.seek_clip or -(-(args.seek + (1 << 20)) // args.docs)
    if args.worker in ("ours", "paced"):
        print(json.dumps(worker(args, "clusterclip" if args.worker == "ours" else "paced")))
        return
    if args.worker == "seek":
        print(json.dumps(seek_worker(args)))
        return

    argv = [f"--docs={args.docs}", f"--clusters={args.clusters}", f"--samples={args.samples}",
            f"--clip={args.clip}", f"--seek={args.seek}", f"--seek-clip={args.seek_clip}",
            f"--iter-samples={args.iter_samples}"]
    print(f"N={args.docs:,} docs, K={args.clusters:,} power-law clusters, T={args.samples:,} "
          f"samples, clip {args.clip}; {os.cpu_count()} CPUs", flush=True)
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
        how = "key search, no replay" if strategy == "paced" else "count-only replay"
        print(f"seek to position {args.seek:.0e}, {strategy}{extra} (construction + {how} "
              f"+ first block): {r['seek_s']:.1f} s "
              f"(state_dict {r['state_bytes'] / 1024:.1f} KiB)")
    print(f"paced started fresh at position 0 (construction + first block): "
          f"{seek['paced_fresh_s']:.1f} s; seek / fresh = "
          f"{seek['paced']['seek_s'] / seek['paced_fresh_s']:.2f}x")
    print(f"seek process peak RSS {seek['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
