"""How many rows could exact bounds spare the product in each Lloyd pass? (an upper bound)

Runs brute-force spherical Lloyd passes (k-means++-free: K seeded rows as the start,
``X @ C.T`` for every row, top-``m`` of each row kept) on a seeded sample of rows of an
embeddings file, and after each M-step asks, per row, whether a bound would have proven
its label unchanged *with the freshest bounds possible* (the previous pass's exact
distances plus this M-step's centroid movements ``delta``; real bounds drift over
several passes, so they spare no more). Distances are on the unit sphere
(``sqrt(2 - 2 cos)``); ``d1`` the previous pass's distance to the row's centroid ``a``,
``d_k`` to its k-th nearest.

- changed: rows whose label changes (what the pass has to find);
- Hamerly (2 floats per row): spared when ``d2 - max_j delta_j < d1 + delta_a``
  fails, i.e. ``d1 + delta_a < d2 - max_j delta_j``;
- Hamerly, the fastest K/32 movers checked by a product with every row (their columns
  cost K/32 of a pass): ``max delta`` over the others only;
- top-m (m indices and a float per row): the m nearest centroids re-scored by m dot
  products per row, the others bounded by ``d_(m+1) - max delta``.

The cost column is the share of the brute-force product each scheme still pays
(rows not spared, plus the extra columns). No timing: the share is the lever.

    python benchmarks/bench_kmeans_bounds.py --embeddings W/embeddings.npy --k 512 \\
        --rows 524288 --passes 25
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np


def _distances(X, C, m: int):
    """Top-(m + 1) distances (ascending) and the nearest centroid of every row."""
    import torch

    out_d, out_i = [], []
    for b in range(0, X.shape[0], 16384):
        v, i = torch.topk(X[b:b + 16384] @ C.T, m + 1, dim=1)
        out_d.append((2.0 - 2.0 * v).clamp_min(0.0).sqrt())
        out_i.append(i[:, 0])
    return torch.cat(out_d), torch.cat(out_i)


def run(X, k: int, passes: int, seed: int, m: int) -> list[dict]:
    """Per pass after the first: the shares of rows each scheme must multiply."""
    import torch

    g = torch.Generator().manual_seed(seed)
    C = X[torch.randperm(X.shape[0], generator=g)[:k]].clone()
    rows, prev = [], None
    for it in range(passes):
        D, lab = _distances(X, C, m)
        if prev is not None:
            pD, plab, move = prev
            order = torch.argsort(move, descending=True)
            u = pD[:, 0] + move[plab]
            n_fast = max(1, k // 32)
            rest = move[order[n_fast]] if n_fast < k else 0.0
            fast = C[order[:n_fast]]
            near_fast = torch.zeros(X.shape[0], dtype=torch.bool)
            for b in range(0, X.shape[0], 16384):
                dj = (2.0 - 2.0 * X[b:b + 16384] @ fast.T).clamp_min(0.0).sqrt()
                own = order[:n_fast][None, :] == plab[b:b + 16384, None]
                dj[own] = float("inf")
                near_fast[b:b + 16384] = (dj <= u[b:b + 16384, None]).any(dim=1)
            ham = (pD[:, 1] - move.max() <= u).float().mean().item()
            ham_fast = ((pD[:, 1] - rest <= u) | near_fast).float().mean().item()
            top = (pD[:, m] - move.max() <= u).float().mean().item()
            rows.append({"pass": it, "changed": (lab != plab).float().mean().item(),
                         "hamerly": ham, "hamerly_fast": ham_fast,
                         "hamerly_fast_cost": ham_fast + n_fast / k, "top_m": top,
                         "top_m_cost": top + m / k, "max_move": move.max().item(),
                         "median_move": move.median().item(),
                         "median_gap": (pD[:, 1] - pD[:, 0]).median().item()})
            print(_line(rows[-1], m), flush=True)
        sums = torch.zeros(k, X.shape[1]).index_add_(0, lab, X)
        new = sums / sums.norm(dim=1, keepdim=True).clamp_min(1e-12)
        new = torch.where((sums.norm(dim=1) > 0)[:, None], new, C)
        prev = (D, lab, (new - C).norm(dim=1))
        C = new
    return rows


def _line(r: dict, m: int) -> str:
    return (f"| {r['pass']} | {r['changed']:.3f} | {r['hamerly']:.3f} "
            f"| {r['hamerly_fast_cost']:.3f} | {r['top_m_cost']:.3f} | {r['max_move']:.3f} "
            f"| {r['median_move']:.4f} | {r['median_gap']:.4f} |")


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--embeddings", required=True, help="an (N, d) .npy (valid.npy beside it)")
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--rows", type=int, default=524288, help="seeded sample of valid rows")
    p.add_argument("--passes", type=int, default=25)
    p.add_argument("--top", type=int, default=8, help="m of the top-m scheme")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    E = np.load(a.embeddings, mmap_mode="r")
    vpath = Path(a.embeddings).with_name("valid.npy")
    ok = np.flatnonzero(np.load(vpath)) if vpath.is_file() else np.arange(E.shape[0])
    rng = np.random.default_rng(a.seed)
    pick = np.sort(rng.choice(ok, size=min(a.rows, ok.size), replace=False))
    X = torch.from_numpy(np.asarray(E[pick], dtype=np.float32))
    X = X / X.norm(dim=1, keepdim=True).clamp_min(1e-12)
    print(f"{a.embeddings}: {X.shape[0]:,} rows, d = {X.shape[1]}, K = {a.k}, "
          f"top-m m = {a.top}, load average {os.getloadavg()[0]:.2f}")
    print("| pass | changed | Hamerly | Hamerly + K/32 fastest | top-m | max move "
          "| median move | median d2 - d1 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = run(X, a.k, a.passes, a.seed, a.top)
    mean = {key: float(np.mean([r[key] for r in rows]))
            for key in ("changed", "hamerly", "hamerly_fast_cost", "top_m_cost")}
    print(f"\nmean over {len(rows)} passes (share of the brute-force product still paid): "
          f"Hamerly {mean['hamerly']:.3f}, Hamerly + K/32 fastest "
          f"{mean['hamerly_fast_cost']:.3f}, top-{a.top} {mean['top_m_cost']:.3f}; rows "
          f"that change label {mean['changed']:.3f}")
    best = min(mean["hamerly"], mean["hamerly_fast_cost"], mean["top_m_cost"])
    print(f"conclusion: with the freshest bounds, the best of these schemes still multiplies "
          f"{100 * best:.0f}% of the rows (a ceiling of {1 / best:.2f}x on the passes' "
          f"products), while {100 * mean['changed']:.1f}% change label")


if __name__ == "__main__":
    main()
