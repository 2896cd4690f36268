"""The report's map: the ``map`` stage's time and memory, and the page library chosen by
measurement.

``--part stage``: a whole ``clusterclip report`` process on a work directory of N
synthetic documents (L2-normalised 384-d embeddings drawn around 200 centres, labels =
the centre; no corpus index, so no text is read), ``--map-sample 100000``. At N = 10^5 the
stage projects every document, at 10^6 it samples 10^5. Reported: the stage's own time
(the manifest's ``info.seconds``: sample, PCA, UMAP), the process's wall time, CPU time
and peak RSS, and a second run (the stage reused). The peer: umap-learn as a user calls
it, ``umap.UMAP(random_state=0).fit_transform(X)`` on the same 10^5 rows in 384-d
(``--peer``; minutes).

``--part page``: the same synthetic map of 10^4 and 10^5 points (text of 200
characters each) as (a) our page (index.html: canvas 2D, data inlined), (b) Plotly with
plotly.js inlined (``include_plotlyjs=True``), ``scattergl`` (WebGL) and (c) Plotly
``scatter`` (SVG). Each file is loaded from ``file://`` in headless Chromium (the tests'
flags, ``--disable-gpu``): file size, time from navigation start to the map drawn (ours:
its first draw; Plotly: its ``post_script``, run once ``newPlot`` has drawn), console
errors, then the median time of 5 zoom, 5 pan and 20 hover steps (ours: the page's own
redraw; Plotly: ``Plotly.relayout`` and ``Plotly.Fx.hover``). datamapplot is not
measured: its offline mode needs its JavaScript and fonts cached from a CDN once, which
this machine cannot reach (see docs/benchmarks.md).

``--workdir W`` (stage, quality): instead of synthetic documents, a copy of the real work
directory W (embedded and clustered; its cluster labels are the quality's labels), with
``--docs`` rows of it for the quality part. ``--cold-numba``: the first report runs with an
empty numba cache (``NUMBA_CACHE_DIR`` a new folder), as the first run after install does.

    python benchmarks/bench_map.py --part page
    python benchmarks/bench_map.py --part stage --docs 100000 1000000
    python benchmarks/bench_map.py --part stage --workdir W --cold-numba
    python benchmarks/bench_map.py --part quality --workdir W --docs 100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
CENTRES = 200


def synthetic(n: int, seed: int = 0, dim: int = DIM) -> tuple[np.ndarray, np.ndarray]:
    """float32[n, dim] unit rows around CENTRES random unit centres, and their centre ids."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CENTRES, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(0, CENTRES, n).astype(np.int32)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        lab = labels[start:start + 100_000]
        rows = centres[lab] + rng.standard_normal((lab.size, dim)).astype(np.float32) * 0.04
        out[start:start + lab.size] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out, labels


# -- the map stage ----------------------------------------------------------------------
def _load() -> str:
    return open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"


def _cpu(before, after) -> float:
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_stage(n: int, root: Path, real: Path | None = None, cold_numba: bool = False) -> dict:
    """One work directory of ``n`` synthetic documents (or a copy of ``real``), reported
    twice; ``cold_numba``: the first report with an empty numba cache."""
    import shutil

    w = root / f"w{n}"
    if real is not None:
        shutil.copytree(real, w, ignore=shutil.ignore_patterns("map", "report", ".lock"))
        n = int(np.load(w / "labels.npy", mmap_mode="r").shape[0])
    else:
        w.mkdir()
        X, labels = synthetic(n)
        np.save(w / "embeddings.npy", X)
        np.save(w / "labels.npy", labels)
        del X
    cmd = [sys.executable, "-m", "clusterclip.cli", "report", "--workdir", str(w),
           "--strategies", "random", "--num-samples", str(n), "--map-sample", "100000"]
    out = {"docs": n, "real": str(real) if real else None, "cold_numba": cold_numba,
           "load_before": _load()}
    for run in ("first", "rerun"):
        env = dict(os.environ)
        if run == "first" and cold_numba:
            env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba_cache_", dir=root)
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out[run] = {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu(before, after),
                    "peak_rss_gb": after.ru_maxrss / 1e6}
        if run == "first":
            stage = json.loads((w / "manifest.json").read_text())["stages"]["map"]
            out["stage_s"] = stage["info"]["seconds"]
            out["sampled"] = stage["info"]["documents"]
    out["load_after"] = _load()
    return out


def bench_peer(root: Path) -> dict:
    code = ("import time, resource, numpy as np, umap, warnings; warnings.simplefilter('ignore');"
            f"X = np.load({str(root / 'w100000' / 'embeddings.npy')!r}); t = time.perf_counter();"
            "umap.UMAP(random_state=0).fit_transform(X);"
            "print(time.perf_counter() - t,"
            " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)")
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    fit, rss = (float(v) for v in res.stdout.split())
    return {"wall_s": time.perf_counter() - t0, "fit_s": fit, "peak_rss_gb": rss,
            "cpu_s": _cpu(before, after)}


# -- the projection's quality per method ------------------------------------------------
METHODS = {  # name -> MapParams fields (umap) or None (a baseline: the first two PCs)
    "umap-default": {"init": "spectral", "n_epochs": None},
    "umap-pca-init": {"init": "pca", "n_epochs": None},
    "umap-pca-init-100ep": {"init": "pca", "n_epochs": 100},
    "umap-pca-init-nndescent": {"init": "pca", "n_epochs": None, "exact_neighbours_up_to": 0},
    "pca-2d": None,
}
QUALITY_SUBSAMPLE = 5_000


def quality(X: np.ndarray, labels: np.ndarray, Y: np.ndarray, seed: int = 0) -> dict:
    """kNN preservation @10 (queries: a subsample; neighbours among all rows, cosine in
    the embedding vs euclidean on the map), trustworthiness @10 and the 2D silhouette by
    cluster, both on the subsample."""
    from sklearn.manifold import trustworthiness
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(seed)
    q = np.sort(rng.choice(X.shape[0], min(QUALITY_SUBSAMPLE, X.shape[0]), replace=False))
    hits = 0
    for start in range(0, q.size, 250):
        rows = q[start:start + 250]
        hi = X[rows] @ X.T
        hi[np.arange(rows.size), rows] = -np.inf
        lo = -((Y[rows, None, :] - Y[None, :, :]) ** 2).sum(-1)
        lo[np.arange(rows.size), rows] = -np.inf
        a = np.argpartition(-hi, 10, axis=1)[:, :10]
        b = np.argpartition(-lo, 10, axis=1)[:, :10]
        hits += sum(len(set(x) & set(y)) for x, y in zip(a, b, strict=True))
    return {"knn10": hits / (10 * q.size),
            "trust10": float(trustworthiness(X[q], Y[q], n_neighbors=10)),
            "silhouette": float(silhouette_score(Y[q], labels[q]))}


def _one_method(name: str, X: np.ndarray) -> dict:
    """Time one projection (numba already compiled by the caller)."""
    from clusterclip.report.projection import MapParams, principal_components, project

    c0, t0 = time.process_time(), time.perf_counter()
    if METHODS[name] is None:
        Y = principal_components(X, 2)
    else:
        Y = project(X, seed=0, params=MapParams(**METHODS[name]))
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, "Y": Y}


def _real(w: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The map's own sample of ``n`` rows of work directory ``w``: embeddings and labels."""
    from clusterclip.report.projection import sample_rows

    X = np.load(w / "embeddings.npy", mmap_mode="r")
    rows = sample_rows(None, X.shape[0], n, 0)
    return np.asarray(X[rows], dtype=np.float32), np.load(w / "labels.npy")[rows]


def bench_quality(sizes: list[int], methods: list[str], real: Path | None = None) -> None:
    """One process, methods in turn (numba forbids fork once its threads run): the peak
    RSS column is the process's peak so far."""
    from clusterclip.report.projection import project

    c0 = time.process_time()
    project(synthetic(2_000)[0], seed=0)  # numba's first use, paid once here
    print(f"numba first use (umap on 2,000 points, compile + fit): "
          f"{time.process_time() - c0:.0f} CPU s", flush=True)
    print(f"{'docs':>8} {'method':<22}{'CPU s':>7}{'wall s':>8}{'RSS GB':>8}"
          f"{'knn@10':>8}{'trust@10':>9}{'silh.':>7}  load", flush=True)
    for n in sizes:
        X, labels = synthetic(n) if real is None else _real(real, n)
        for name in methods:
            r = _one_method(name, X)
            qual = quality(X, labels, r["Y"])
            print(f"{n:>8} {name:<22}{r['cpu_s']:>7.0f}{r['wall_s']:>8.0f}"
                  f"{r['peak_rss_gb']:>8.2f}{qual['knn10']:>8.3f}{qual['trust10']:>9.3f}"
                  f"{qual['silhouette']:>7.3f}  {_load()}", flush=True)


# -- the page ---------------------------------------------------------------------------
def _texts(n: int) -> list[str]:
    words = ("data model cluster token train sample corpus python socket thread file value "
             "function class return object list string number table").split()
    rng = np.random.default_rng(1)
    return [" ".join(rng.choice(words, 40))[:200] for _ in range(n)]


def page_ours(n: int, path: Path) -> None:
    from clusterclip.report.page import MapPoints, page_data, render_page

    X, labels = synthetic(n, dim=32)
    rng = np.random.default_rng(0)
    coords = (X[:, :2] * 10 + rng.normal(0, 0.3, (n, 2))).astype("f4")
    k = CENTRES
    sizes = np.bincount(labels, minlength=k)
    share = sizes / n
    summary = {"documents": n, "eligible_documents": n, "clusters": {"clusters": k},
               "num_samples": n, "tail_starvation": {"sentence": "-"},
               "schedules": {"random": {"tail_quartile_share_per_tenth": [0.1] * 10,
                                        "head_quartile_share_per_tenth": [0.4] * 10}},
               "corpus_tail_share": 0.1, "corpus_head_share": 0.4, "quartile_clusters": 50,
               "notes": []}
    readable = {"terms": [[f"term{c}", "data", "model"] for c in range(k)],
                "nearest": [np.zeros(0, np.int64)] * k, "snippets": {}}
    points = MapPoints(rows=np.arange(n), coords=coords, labels=labels, texts=_texts(n), of=n)
    data = page_data(summary, sizes=sizes, shares={"random": share}, token_parts={},
                     tenths={"random": np.tile(share, (10, 1))}, tenth_end=np.linspace(.1, 1, 10),
                     readable=readable, cohesion=None, points=points, verdicts=[], links=[],
                     map_note=None)
    path.write_text(render_page(data), encoding="utf-8")


def page_plotly(n: int, path: Path, gl: bool) -> None:
    import plotly.graph_objects as go

    X, labels = synthetic(n, dim=32)
    rng = np.random.default_rng(0)
    coords = X[:, :2] * 10 + rng.normal(0, 0.3, (n, 2))
    trace = go.Scattergl if gl else go.Scatter
    fig = go.Figure(trace(x=coords[:, 0], y=coords[:, 1], mode="markers", text=_texts(n),
                          hovertemplate="%{text}<extra></extra>",
                          marker={"size": 3, "color": labels, "colorscale": "Turbo"}))
    fig.update_layout(width=1000, height=560)
    # post_script runs once Plotly.newPlot has drawn the figure.
    post = "window.__drawnAt = performance.now();"
    fig.write_html(str(path), include_plotlyjs=True, full_html=True, post_script=post)


_OURS_STEPS = """
var api = window.clusterclip, z = [], p = [], h = [];
for (var i = 0; i < 5; i++) z.push(api.zoomBy(1.3, 500, 280));
for (i = 0; i < 5; i++) p.push(api.panBy(40, 25));
for (i = 0; i < 20; i++) h.push(api.hoverAt(300 + 10 * i, 200 + 5 * i));
return [z, p, h];
"""
_PLOTLY_STEPS = """
var done = arguments[arguments.length - 1];
var gd = document.getElementsByClassName('plotly-graph-div')[0], z = [], p = [], h = [];
async function run() {
  var xr = gd._fullLayout.xaxis.range.slice(), yr = gd._fullLayout.yaxis.range.slice();
  for (var i = 0; i < 5; i++) {
    var t = performance.now(), cx = (xr[0] + xr[1]) / 2, cy = (yr[0] + yr[1]) / 2;
    xr = [cx - (cx - xr[0]) / 1.3, cx + (xr[1] - cx) / 1.3];
    yr = [cy - (cy - yr[0]) / 1.3, cy + (yr[1] - cy) / 1.3];
    await Plotly.relayout(gd, {'xaxis.range': xr, 'yaxis.range': yr});
    z.push(performance.now() - t);
  }
  for (i = 0; i < 5; i++) {
    var t2 = performance.now(), dx = (xr[1] - xr[0]) * 0.04;
    xr = [xr[0] + dx, xr[1] + dx];
    await Plotly.relayout(gd, {'xaxis.range': xr}); p.push(performance.now() - t2);
  }
  for (i = 0; i < 20; i++) {
    var t3 = performance.now();
    Plotly.Fx.hover(gd, {xval: xr[0] + (xr[1] - xr[0]) * i / 20, yval: (yr[0] + yr[1]) / 2});
    h.push(performance.now() - t3);
  }
  done([z, p, h]);
}
run().catch(function (e) { done(String(e)); });
"""


def measure_page(path: Path, kind: str) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _browser import chromium

    driver = chromium(Path(tempfile.mkdtemp()))
    driver.set_script_timeout(300)
    try:
        driver.get(path.resolve().as_uri())
        ready = "window.clusterclip && window.clusterclip.ready" if kind == "ours" \
            else "window.__drawnAt"
        end = time.monotonic() + 300
        while not driver.execute_script(f"return !!({ready});") and time.monotonic() < end:
            time.sleep(0.05)
        drawn = driver.execute_script(
            "return window.clusterclip ? window.clusterclip.firstDrawAt : window.__drawnAt;")
        errors = [e["message"][:120] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        steps = (driver.execute_script(_OURS_STEPS) if kind == "ours"
                 else driver.execute_async_script(_PLOTLY_STEPS))
    finally:
        driver.quit()
    med = (lambda v: float(np.median(v))) if isinstance(steps, list) else (lambda v: None)
    return {"size_mb": path.stat().st_size / 1e6, "drawn_ms": drawn, "errors": errors,
            "zoom_ms": med(steps[0]) if isinstance(steps, list) else steps,
            "pan_ms": med(steps[1]) if isinstance(steps, list) else None,
            "hover_ms": med(steps[2]) if isinstance(steps, list) else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("page", "stage", "quality"), required=True)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--docs", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--points", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--peer", action="store_true", help="also time plain umap-learn (stage)")
    ap.add_argument("--pages", nargs="+", default=["ours", "plotly-webgl", "plotly-svg"])
    ap.add_argument("--workdir", type=Path, default=None,
                    help="a real work directory (embedded, clustered) for stage and quality")
    ap.add_argument("--cold-numba", action="store_true",
                    help="stage: the first report with an empty numba cache")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_map_"))
    print(f"load average at start: {_load()}", flush=True)
    if args.part == "quality":
        bench_quality(args.docs, args.methods, args.workdir)
    elif args.part == "stage":
        for n in ([0] if args.workdir else args.docs):
            print(json.dumps(bench_stage(n, root, args.workdir, args.cold_numba)), flush=True)
        if args.peer:
            print(json.dumps({"peer": bench_peer(root)}), flush=True)
    else:
        print(f"{'points':>8} {'page':<16}{'MB':>7}{'drawn ms':>10}{'zoom ms':>9}"
              f"{'pan ms':>8}{'hover ms':>9}  errors")
        for n in args.points:
            for kind, build in (("ours", page_ours),
                                ("plotly-webgl", lambda n, p: page_plotly(n, p, True)),
                                ("plotly-svg", lambda n, p: page_plotly(n, p, False))):
                if kind not in args.pages:
                    continue
                path = root / f"{kind}-{n}.html"
                build(n, path)
                r = measure_page(path, "ours" if kind == "ours" else "plotly")
                fmt = lambda v: "-" if not isinstance(v, (int, float)) else f"{v:.0f}"  # noqa: E731
                print(f"{n:>8} {kind:<16}{r['size_mb']:>7.1f}{fmt(r['drawn_ms']):>10}"
                      f"{fmt(r['zoom_ms']):>9}{fmt(r['pan_ms']):>8}{fmt(r['hover_ms']):>9}  "
                      f"{r['errors'] or ''}", flush=True)
    print(f"load average at end: {_load()}")


if __name__ == "__main__":
    main()
