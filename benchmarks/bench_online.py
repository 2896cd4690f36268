"""OnlineMixer on a simulated learner with known per-cluster loss curves, and its cost.

    python benchmarks/bench_online.py                      # K = 100 and 1,000; timing at
                                                           # K = 1,000 and 10,000
    python benchmarks/bench_online.py --gap-k 100 --seeds 2 --time-k 1000   # a quick look
    python benchmarks/bench_online.py --results W/experiment/results.json
        # an experiment with --strategies random,paced,online: online - paced and
        # online - random per loss, paired by seed, Holm over the three losses

The learner: cluster k's loss after n of its documents is
``e_k + b_k (n + 1) ** -a_k`` (a_k in [0.05, 1], b_k in [0.5, 4], e_k in [1, 3],
drawn per seed); each document's observed loss adds noise (sd 0.3, clipped to
+-1). Cluster sizes are power-law (20 to 2,000 documents). The schedule:
``--epochs`` x N positions, paced, clip ``--clip``, batches of ``--batch``. Rows,
side by side on the same world and seed:

* static: the balanced paced schedule (weight 1 per cluster), no re-weighing;
* online: the same sampler with ``OnlineMixer`` (its defaults: one pool);
* odm: the ODM peer (Albalak et al. 2023): EXP3 over clusters, reward = the
  cluster's mean observed loss / its sampling probability, moving average, the
  same ``set_weights`` calls at the same positions (our re-implementation of the
  published rule, at cluster scale; t counts batches). Its exploration rate
  min(1/K, sqrt(ln K / (K t))) is 1/K, i.e. a uniform policy, until t > K ln K
  batches: at hundreds of clusters and a few thousand steps it stays the static
  schedule;
* oracle: the allocation of the T draws that minimises the final macro loss
  under the true curves and the clip (``allocate`` with the true parameters):
  a bound no online method reaches.

Reported: final macro loss (mean over clusters of the true loss), the share of
the static-to-oracle gap each method closes, and the mixer's CPU per ``observe``
call (without and with a re-weigh) at K = ``--time-k``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from clusterclip.sampling import ClusterClipSampler  # noqa: E402
from clusterclip.sampling.online import OnlineMixer, allocate  # noqa: E402

NOISE = 0.3


def world(K: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = np.minimum(2000, (20 * rng.pareto(1.2, K) + 20)).astype(np.int64)
    return {"sizes": sizes, "a": rng.uniform(0.05, 1.0, K), "b": rng.uniform(0.5, 4.0, K),
            "e": rng.uniform(1.0, 3.0, K)}


def macro(w: dict[str, np.ndarray], seen: np.ndarray) -> float:
    return float((w["e"] + w["b"] * (seen + 1) ** -w["a"]).mean())


class ODM:
    """EXP3 over clusters with the mean observed loss as reward (ODM's rule)."""

    def __init__(self, sampler: ClusterClipSampler, every: int) -> None:
        K = sampler.cluster_sizes.size
        self.sampler, self.every, self.K = sampler, every, K
        self.pi = np.full(K, 1.0 / K)
        self.R = np.zeros(K)
        self.t, self.next_at = 0, every

    def observe(self, k: np.ndarray, loss: np.ndarray) -> None:
        s = np.bincount(k, weights=loss, minlength=self.K)
        n = np.bincount(k, minlength=self.K)
        hit = n > 0
        self.R[hit] = 0.9 * self.R[hit] + 0.1 * (s[hit] / n[hit]) / self.pi[hit]
        self.t += 1  # ODM's t: training steps
        pos = self.sampler.position
        if pos < self.next_at or pos >= self.sampler.num_samples:
            return
        self.next_at = pos + self.every
        eps = min(1.0 / self.K, np.sqrt(np.log(self.K) / (self.K * self.t)))
        z = eps * self.R
        p = np.exp(z - z.max())
        self.pi = (1 - self.K * eps) * p / p.sum() + eps
        self.sampler.set_weights(self.pi, at=pos)


def simulate(w: dict[str, np.ndarray], T: int, seed: int, method: str, clip: int,
             batch: int) -> dict[str, float]:
    K = w["sizes"].size
    labels = np.repeat(np.arange(K), w["sizes"])
    sampler = ClusterClipSampler(labels, T, strategy="paced", clip=clip, seed=seed,
                                 cache_dir=False)
    every = max(1, T // 64)
    mixer: object = None
    if method == "online":
        mixer = OnlineMixer(sampler, every=every)
    elif method == "odm":
        mixer = ODM(sampler, every)
    seen, noise = np.zeros(K), np.random.default_rng(seed + 1)
    blocks = sampler.blocks(batch)
    cpu = 0.0
    for idx in blocks:
        k = labels[idx]
        loss = w["e"][k] + w["b"][k] * (seen[k] + 1) ** -w["a"][k]
        loss = np.maximum(loss + noise.normal(0, NOISE, k.size).clip(-1, 1), 0)
        np.add.at(seen, k, 1)
        if mixer is not None:
            t0 = time.process_time()
            mixer.observe(k, loss)
            cpu += time.process_time() - t0
    return {"macro": macro(w, seen), "cpu_s": cpu}


def gap_rows(K: int, seeds: int, epochs: float, clip: int, batch: int) -> list[dict]:
    rows = []
    for seed in range(seeds):
        w = world(K, seed)
        T = int(epochs * w["sizes"].sum())
        best = allocate(w["a"] * w["b"], w["a"], np.zeros(K), clip * w["sizes"].astype(float),
                        T)
        row = {"K": K, "seed": seed, "T": T, "oracle": macro(w, best)}
        for m in ("static", "online", "odm"):
            row[m] = simulate(w, T, seed, m, clip, batch)["macro"]
        gap = row["static"] - row["oracle"]
        row["closed_online"] = (row["static"] - row["online"]) / gap
        row["closed_odm"] = (row["static"] - row["odm"]) / gap
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def timing(K: int, clip: int, batch: int, reps: int = 5) -> dict[str, float]:
    """CPU per observe call at K clusters: a batch without and with a re-weigh, after
    every cluster has a few observations (the fit runs over all K)."""
    w = world(K, 0)
    labels = np.repeat(np.arange(K), w["sizes"])
    T = int(2 * w["sizes"].sum())
    sampler = ClusterClipSampler(labels, T, strategy="paced", clip=clip, seed=0,
                                 cache_dir=False)
    mixer = OnlineMixer(sampler, every=T, pools=np.arange(K) % max(1, int(np.sqrt(K))))
    rng = np.random.default_rng(0)
    blocks = sampler.blocks(batch)
    plain = []
    for _ in range(max(50, 8 * K // batch)):  # warm the bins: about 8 documents per cluster
        k = labels[next(blocks)]
        loss = w["e"][k] + w["b"][k] * (mixer.counts[k] + 1.0) ** -w["a"][k]
        t0 = time.process_time()
        mixer.observe(k, loss + rng.normal(0, NOISE, k.size).clip(-1, 1))
        plain.append(time.process_time() - t0)
    reweigh = []
    for _ in range(reps):
        t0 = time.process_time()
        weights = mixer.plan(sampler.position)
        sampler.set_weights(weights, at=sampler.position)
        reweigh.append(time.process_time() - t0)
    return {"K": K, "batch": batch, "observe_ms_median": 1e3 * float(np.median(plain)),
            "reweigh_ms_median": 1e3 * float(np.median(reweigh)),
            "state_json_bytes": len(json.dumps(mixer.state_dict()))}


def holm_paired(results: dict, a: str, b: str, metrics=("val_micro", "val_macro", "val_tail"),
                alpha: float = 0.05) -> list[dict]:
    """``a - b`` per metric of an experiment's results.json, paired by seed: mean, paired-t
    p-value, Holm-adjusted over the metrics, and the interval at the Holm level of its
    rank (step-down: the i-th smallest p at 1 - alpha / (m - i + 1))."""
    from scipy import stats

    runs = {s: {r["seed"]: r for r in results["strategies"][s]["runs"]} for s in (a, b)}
    seeds = sorted(set(runs[a]) & set(runs[b]))
    rows = []
    for m in metrics:
        d = np.array([runs[a][s][m] - runs[b][s][m] for s in seeds])
        se = d.std(ddof=1) / np.sqrt(d.size)
        p = float(2 * stats.t.sf(abs(d.mean() / se), d.size - 1)) if se > 0 else 0.0
        rows.append({"metric": m, "n": int(d.size), "mean": float(d.mean()), "se": float(se),
                     "p": p})
    order = sorted(range(len(rows)), key=lambda i: rows[i]["p"])
    running, still = 0.0, True
    for rank, i in enumerate(order):
        r, level = rows[i], alpha / (len(rows) - rank)
        running = max(running, min(1.0, r["p"] * (len(rows) - rank)))
        half = float(stats.t.ppf(1 - level / 2, r["n"] - 1)) * r["se"]
        still = still and r["p"] <= level
        r.update(p_holm=running, low=r["mean"] - half, high=r["mean"] + half,
                 confidence=1 - level, measurable=bool(still))
    return rows


def report_experiment(paths: list[str]) -> None:
    """online - paced and online - random, per corpus, Holm over the three losses."""
    for path in paths:
        with open(path) as f:
            res = json.load(f)
        for base in ("paced", "random"):
            if base not in res["strategies"] or "online" not in res["strategies"]:
                continue
            print(f"\n{path}: online - {base}")
            for r in holm_paired(res, "online", base):
                call = "measurable" if r["measurable"] else "not measurable"
                print(f"  {r['metric']}: {r['mean']:+.4f} ({100 * r['confidence']:.1f}% CI "
                      f"{r['low']:+.4f} to {r['high']:+.4f}; Holm p {r['p_holm']:.3f}, "
                      f"n = {r['n']}): {call}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gap-k", default="100,1000")
    ap.add_argument("--time-k", default="1000,10000")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--clip", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--results", nargs="*", default=None,
                    help="instead: experiment results.json files with online, paced "
                         "(random): online - paced (random) per loss, paired by seed, "
                         "Holm over the three losses")
    a = ap.parse_args()
    if a.results:
        report_experiment(a.results)
        return
    out: dict[str, list] = {"gap": [], "timing": []}
    for K in [int(x) for x in a.gap_k.split(",") if x]:
        out["gap"] += gap_rows(K, a.seeds, a.epochs, a.clip, a.batch)
    for K in [int(x) for x in a.time_k.split(",") if x]:
        out["timing"].append(timing(K, a.clip, a.batch))
        print(json.dumps(out["timing"][-1]), flush=True)
    print("\n| K | seeds | static | online | odm | oracle | gap closed: online | odm |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for K in sorted({r["K"] for r in out["gap"]}):
        rs = [r for r in out["gap"] if r["K"] == K]
        m = {c: np.mean([r[c] for r in rs]) for c in rs[0] if c not in ("K", "seed", "T")}
        print(f"| {K:,} | {len(rs)} | {m['static']:.4f} | {m['online']:.4f} | {m['odm']:.4f} | "
              f"{m['oracle']:.4f} | {min(r['closed_online'] for r in rs):.2f} to "
              f"{max(r['closed_online'] for r in rs):.2f} | "
              f"{min(r['closed_odm'] for r in rs):.2f} to {max(r['closed_odm'] for r in rs):.2f} |")
    for t in out["timing"]:
        print(f"K = {t['K']:,}: observe {t['observe_ms_median']:.2f} ms per batch of "
              f"{t['batch']}, re-weigh (fit + plan + set_weights) {t['reweigh_ms_median']:.1f} ms, "
              f"state {t['state_json_bytes'] / 1024:.0f} KiB of JSON")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
