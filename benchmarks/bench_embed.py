"""Embedding benchmark: every embedder and backend side by side, in one run.

Rows: MiniLM on torch, on ONNX Runtime fp32 and int8 (``--backend``/``--precision``), a
Model2Vec model (``--embedder model2vec``), ``fast`` and ``fast --tune N``.

1. ``speed``: documents/s of a whole ``clusterclip embed CORPUS --workdir W ...`` process
   (the console script, as a user runs it) on ``--speed-docs`` evenly spaced bundled
   Python-docs sections. ``cold``: an empty clusterclip cache (the ONNX export, the fast
   table's distillation, the tuning are part of the run); ``warm``: the cache the cold run
   filled. ``--runs`` warm runs per row, rows alternating; ``uptime`` load at each start.
2. ``quality``: K-means NMI (scikit-learn, ``--seeds`` seeds averaged, K = the number of
   labels) on the held-out part of 3 corpora: the bundled pydocs (labels: doc folders),
   ``wordnet_glosses`` (WordNet 3.0 definitions; lexicographer categories) and
   ``wordnet_examples`` (example sentences labelled by the category of the word sense they
   illustrate: semantic, not lexical). ``fast --tune`` is tuned on a seeded sample of
   ``--tune`` documents of each corpus (the train part) and every row is measured on
   ``--test-docs`` of the other documents only. Also without labels: NMI between K-means
   of each row's vectors and K-means of MiniLM's
   (:func:`clusterclip.report.agreement.clustering_agreement`).
3. ``quant``: per-document cosine to torch's vectors of every int8 variant measured
   (naive, per-channel, excluded layers, ...) on ``--quant-docs`` pydocs sections, and
   their CPU seconds in this process.

    python benchmarks/bench_embed.py --out /tmp/bench-embed            # all three
    python benchmarks/bench_embed.py --out /tmp/bench-embed --only speed --runs 3

Vectors of the quality part are kept in ``--out`` and reused by a later run.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = Path(__file__).parent / "data"
SPEED_ROWS = {  # name -> clusterclip embed arguments (after the corpus)
    "MiniLM, torch": ["--backend", "torch"],
    "MiniLM, onnx fp32": ["--backend", "onnx", "--precision", "fp32"],
    "MiniLM, onnx int8 (auto)": ["--backend", "onnx"],
    "model2vec": ["--embedder", "model2vec", "--model", "{m2v}"],
    "fast": ["--embedder", "fast"],
    "fast --tune": ["--embedder", "fast", "--tune", "{tune}"],
}


def read_corpus(path: Path) -> tuple[list[str], np.ndarray]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [r["text"] for r in rows], np.array([str(r["label"]) for r in rows])


def corpora() -> dict[str, Path]:
    from clusterclip.data import pydocs_path

    return {"pydocs": pydocs_path(), "wordnet_glosses": DATA / "wordnet_glosses.jsonl.gz",
            "wordnet_examples": DATA / "wordnet_examples.jsonl.gz"}


def load() -> float:
    return os.getloadavg()[0]


def model2vec_folder(out: Path) -> Path:
    """A Model2Vec model of the bundled MiniLM: ``--m2v-model`` if given, else our
    distilled table and MiniLM's tokenizer saved by model2vec (the test's model)."""
    folder = out / "m2v-ours"
    if not (folder / "config.json").exists():
        from model2vec import StaticModel
        from tokenizers import Tokenizer

        from clusterclip.embedding.static import distilled_table
        from clusterclip.embedding.transformer import bundled_minilm_path

        table, _ = distilled_table(bundled_minilm_path(), 256, progress=False)
        tok = Tokenizer.from_file(str(bundled_minilm_path() / "tokenizer.json"))
        StaticModel(vectors=table, tokenizer=tok, normalize=True).save_pretrained(folder)
    return folder


# -- 1. speed: whole processes --------------------------------------------------------

def cli() -> list[str]:
    script = Path(sys.executable).with_name("clusterclip")
    return [str(script)] if script.exists() else [sys.executable, "-m", "clusterclip.cli"]


def run_process(corpus: Path, args: list[str], cache: Path, pycache: str) -> tuple[float, float]:
    """One ``clusterclip embed`` process: wall s, CPU s (user + sys of the child)."""
    env = {**os.environ, "CLUSTERCLIP_CACHE": str(cache), "PYTHONPYCACHEPREFIX": pycache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        before, t = os.times(), time.perf_counter()
        r = subprocess.run(cli() + ["embed", str(corpus), "--workdir", f"{tmp}/w",
                                    "--no-progress", *args], env=env, capture_output=True,
                           text=True)
        wall, after = time.perf_counter() - t, os.times()
    if r.returncode:
        sys.exit(f"clusterclip embed {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system)


def speed(args: argparse.Namespace, out: Path) -> None:
    """The MiniLM rows and the static rows on ``--speed-docs`` documents, then the static
    rows alone on the whole bundled corpus (where a process's start no longer dominates)."""
    extra = {} if not args.m2v_model else {
        "model2vec (model2vec.distill)": ["--embedder", "model2vec", "--model",
                                          args.m2v_model]}
    speed_table(args, out, args.speed_docs, {**SPEED_ROWS, **extra})
    static = {n: a for n, a in {**SPEED_ROWS, **extra}.items() if not n.startswith("MiniLM")}
    speed_table(args, out, 4096, static, cold=False)


def speed_table(args: argparse.Namespace, out: Path, docs: int,
                spec: dict[str, list[str]], cold: bool = True) -> None:
    """``cold``: empty caches, one cold process per row first; else warm runs only, with the
    caches an earlier table filled (a tuned table is keyed by its corpus: the first warm
    ``--tune`` run of a new corpus tunes, with the export and distillation cached)."""
    texts, _ = read_corpus(corpora()["pydocs"])
    at = np.linspace(0, len(texts) - 1, docs).round().astype(int)
    corpus = out / f"pydocs-{docs}.jsonl"
    corpus.write_text("".join(json.dumps({"text": texts[i]}) + "\n" for i in at),
                      encoding="utf-8")
    fill = {"m2v": str(model2vec_folder(out)), "tune": str(args.tune_speed)}
    rows = {n: [a.format(**fill) for a in v] for n, v in spec.items()}
    pycache = str(out / "pycache")
    run_process(corpus, rows["fast"], out / "cache-warmup", pycache)  # bytecode, once
    res: dict[str, dict[str, list]] = {n: {"cold": [], "warm": []} for n in rows}
    # The two onnx rows share one export (it builds fp32 and int8): one cold run, the int8's.
    group = {n: "onnx" if "onnx" in n else n for n in rows}
    caches = {n: out / f"cache-{group[n].replace(' ', '_')}" for n in rows}
    for n in rows:
        if cold:
            shutil.rmtree(caches[n], ignore_errors=True)
        caches[n].mkdir(parents=True, exist_ok=True)
    for n, a in rows.items():
        if not cold or n.startswith("model2vec") or n == "MiniLM, onnx fp32":
            continue
        res[n]["cold"].append((load(), *run_process(corpus, a, caches[n], pycache)))
        print(f"cold {n}: {res[n]['cold'][-1]}", flush=True)
    for _ in range(args.runs):
        for n, a in rows.items():
            res[n]["warm"].append((load(), *run_process(corpus, a, caches[n], pycache)))
            print(f"warm {n}: {res[n]['warm'][-1]}", flush=True)
    (out / f"speed-{docs}.json").write_text(json.dumps(res, indent=1))
    print_speed(res, docs)


def print_speed(res: dict, docs: int) -> None:
    def rng(vals: list[float]) -> str:
        return f"{min(vals):,.1f}" if len(vals) == 1 else f"{min(vals):,.1f}-{max(vals):,.1f}"

    peer = "MiniLM, torch" if "MiniLM, torch" in res else "fast"
    torch_warm = [docs / w for _, w, _ in res[peer]["warm"]]
    print(f"\nWhole `clusterclip embed` processes, {docs} pydocs sections:\n")
    print(f"| row | load at start | cold docs/s (wall s) | warm docs/s | warm CPU s | "
          f"warm docs/s vs {peer} |")
    print("|---|---:|---:|---:|---:|---:|")
    for n, r in res.items():
        loads = [x[0] for x in r["cold"] + r["warm"]]
        cold = ("the int8 row's export" if "onnx" in n else "not run") \
            if not r["cold"] else \
            f"{rng([docs / w for _, w, _ in r['cold']])} ({rng([w for _, w, _ in r['cold']])})"
        warm = [docs / w for _, w, _ in r["warm"]]
        ratio = f"{min(warm) / max(torch_warm):.2f}-{max(warm) / min(torch_warm):.2f}x"
        print(f"| {n} | {rng(loads)} | {cold} | {rng(warm)} | "
              f"{rng([c for _, _, c in r['warm']])} | {ratio} |")


# -- 2. quality: NMI on held-out parts --------------------------------------------------

def vectors(out: Path, name: str, make, texts: list[str]) -> np.ndarray:
    """Vectors cached in ``out`` (a later run reuses them), with the seconds they took."""
    path = out / f"vec-{name}.npy"
    if path.exists():
        return np.load(path)
    t = time.perf_counter()
    emb = make()
    x = emb.encode(texts)
    np.save(path, x)
    (out / f"vec-{name}.json").write_text(json.dumps({"seconds": time.perf_counter() - t,
                                                      "load": load()}))
    print(f"  {name}: {len(texts)} docs in {time.perf_counter() - t:.1f} s", flush=True)
    return x


def nmi(x: np.ndarray, labels: np.ndarray, k: int, seeds: int) -> np.ndarray:
    """NMI of K-means (seeds 0 .. ``seeds`` - 1) against ``labels``, one per seed."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    return np.array([normalized_mutual_info_score(
        labels, KMeans(k, n_init=1, random_state=s).fit_predict(x)) for s in range(seeds)])


def paired_ci(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Mean of ``a - b`` paired by seed and its 95% t interval."""
    from scipy import stats

    d = a - b
    h = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)))
    return float(d.mean()), float(d.mean()) - h, float(d.mean()) + h


def quality(args: argparse.Namespace, out: Path) -> None:
    from clusterclip.embedding import make_embedder
    from clusterclip.embedding.pipeline import sample_indices
    from clusterclip.embedding.tune import tune_indices
    from clusterclip.report.agreement import clustering_agreement

    m2v = model2vec_folder(out)
    table = {}
    for cname, path in corpora().items():
        texts, labels = read_corpus(path)
        train = tune_indices(np.ones(len(texts), bool), args.tune, args.tune_seed)
        test = np.setdiff1d(np.arange(len(texts)), train)
        test = test[np.linspace(0, len(test) - 1, min(args.test_docs, len(test))).round()
                    .astype(int)]
        test_texts, test_labels = [texts[i] for i in test], labels[test]
        k = len(set(labels.tolist()))
        print(f"{cname}: {len(texts)} docs, {k} labels; tune on {len(train)}, measure on "
              f"{len(test)}", flush=True)

        def fast(tune: int, fit: list[str], part: list[str]):
            emb = make_embedder("fast", progress=False, tune=tune, tune_seed=args.tune_seed)
            if tune:
                emb.tune_report = emb.tune(fit)
            # the embed stage centres on its fixed sample of the corpus it embeds
            emb.prepare([part[i] for i in sample_indices(np.ones(len(part), bool))])
            return emb

        fit = [texts[i] for i in train]

        rows = {
            "MiniLM, onnx fp32": lambda: make_embedder("minilm", backend="onnx",
                                                       precision="fp32", progress=False),
            "MiniLM, onnx int8": lambda: make_embedder("minilm", backend="onnx",
                                                       precision="int8", progress=False),
            "model2vec (our table)": lambda: make_embedder("model2vec", model=m2v),
            "fast": lambda fit=fit, part=test_texts: fast(0, fit, part),
            f"fast --tune {args.tune}": lambda fit=fit, part=test_texts: fast(args.tune, fit,
                                                                              part),
        }
        if args.m2v_model:
            rows["model2vec (model2vec.distill)"] = lambda: make_embedder(
                "model2vec", model=args.m2v_model)
        vec = {n: vectors(out, f"{cname}-{n}".replace(" ", "_").replace(",", "")
                          .replace("/", "-"), f, test_texts) for n, f in rows.items()}
        ref = vec["MiniLM, onnx fp32"]
        per_seed = {}
        for n, x in vec.items():
            agree = clustering_agreement(x, ref, k, seeds=tuple(range(args.seeds)))
            per_seed[n] = nmi(x, test_labels, k, args.seeds)
            table[cname, n] = (float(per_seed[n].mean()), agree["nmi"],
                               agree["reference_self"])
            print(f"  {n}: NMI {table[cname, n][0]:.3f}, with MiniLM's clusters "
                  f"{table[cname, n][1]:.3f}", flush=True)
        diff = paired_ci(per_seed[f"fast --tune {args.tune}"], per_seed["fast"])
        print(f"  fast --tune {args.tune} - fast, paired by seed: {diff[0]:+.4f} (95% CI "
              f"{diff[1]:+.4f} to {diff[2]:+.4f})", flush=True)
    (out / "quality.json").write_text(json.dumps({f"{c}|{n}": v for (c, n), v in table.items()},
                                                 indent=1))
    print_quality(table)


def print_quality(table: dict) -> None:
    names = list(dict.fromkeys(n for _, n in table))
    cs = list(dict.fromkeys(c for c, _ in table))
    print("\n| embedder | " + " | ".join(f"{c} NMI (vs MiniLM)" for c in cs) + " | "
          + " | ".join(f"{c}: agreement with MiniLM's clusters" for c in cs) + " |")
    print("|---|" + "---:|" * (2 * len(cs)))
    for n in names:
        cells = [f"{table[c, n][0]:.3f} ({table[c, n][0] / table[c, 'MiniLM, onnx fp32'][0]:.0%})"
                 for c in cs]
        agree = [f"{table[c, n][1]:.3f}" for c in cs]
        print(f"| {n} | " + " | ".join(cells) + " | " + " | ".join(agree) + " |")
    print("\nK-means self-agreement of MiniLM between seeds (the ceiling): "
          + ", ".join(f"{c} {table[c, 'MiniLM, onnx fp32'][2]:.3f}" for c in cs))


# -- 3. quantisation variants ---------------------------------------------------------

def quant(args: argparse.Namespace, out: Path) -> None:
    """Every int8 variant measured, against torch, on the same documents."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from clusterclip.embedding import make_embedder
    from clusterclip.embedding.onnx_runtime import OnnxEmbedder, _Export, agreement

    texts, _ = read_corpus(corpora()["pydocs"])
    at = np.linspace(0, len(texts) - 1, args.quant_docs).round().astype(int)
    texts = [texts[i] for i in at]
    torch_emb = make_embedder("minilm", backend="torch", max_length=args.quant_tokens)
    t = time.process_time()
    ref = torch_emb.encode(texts)
    t_torch = time.process_time() - t
    cached = make_embedder("minilm", backend="onnx", precision="fp32", progress=False)
    export = _Export(cached.path, "sentence-transformers", "model", False)
    rec = export.record()
    folder = out / "quant"
    folder.mkdir(exist_ok=True)
    fused = export.folder / "model.onnx"
    unfused = folder / "unfused.onnx"
    if not unfused.exists():  # the same export without the transformer fusions
        import clusterclip.embedding.onnx_runtime as ort_mod

        keep = ort_mod._fuse
        ort_mod._fuse = lambda path, model: None
        try:
            export._export(unfused)
        finally:
            ort_mod._fuse = keep
    names = [n.name for n in onnx.load(str(fused)).graph.node
             if n.op_type in ("MatMul", "Attention")]
    first_last = [n for n in names if "layer.0/" in n or "layer.5/" in n
                  or n in ("Attention_0", "Attention_5")]
    ffn_out = [n for n in names if n.endswith("output/dense/MatMul") and "attention" not in n]
    f32 = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    fused_ops = {"op_types_to_quantize": ["MatMul", "Attention"], "extra_options": f32}
    variants = {
        "naive: per-tensor, every MatMul (unfused graph)": (unfused, {}),
        "per-channel (unfused)": (unfused, {"per_channel": True}),
        "per-channel, weights only (MatMulConstBOnly, unfused)": (
            unfused, {"per_channel": True, "extra_options": {"MatMulConstBOnly": True}}),
        "per-channel, u8 weights (unfused)": (
            unfused, {"per_channel": True, "weight_type": QuantType.QUInt8}),
        "fused graph, per-channel (the backend's int8)": (fused, {"per_channel": True,
                                                                  **fused_ops}),
        "fused, per-channel, reduce_range": (fused, {"per_channel": True,
                                                     "reduce_range": True, **fused_ops}),
        "fused, per-channel, first and last layer fp32": (
            fused, {"per_channel": True, "nodes_to_exclude": first_last, **fused_ops}),
        "fused, per-channel, FFN output MatMuls fp32": (
            fused, {"per_channel": True, "nodes_to_exclude": ffn_out, **fused_ops}),
        "fused, per-channel, attention fp32 (MatMul only)": (
            fused, {"per_channel": True, "op_types_to_quantize": ["MatMul"],
                    "extra_options": f32}),
    }
    rows = [("torch fp32 (reference)", {"mean": 1.0, "p1": 1.0, "min": 1.0}, t_torch),
            ("onnx fp32, fused", None, None)]
    results = []
    for name, path in [("onnx fp32, fused", fused)] + [(n, None) for n in variants]:
        if path is None:
            src, kw = variants[name]
            path = folder / f"v{len(results)}.onnx"
            if not path.exists():
                quantize_dynamic(str(src), str(path), **{"weight_type": QuantType.QInt8,
                                                         **kw})
        emb = OnnxEmbedder.from_file(path, export, rec["inputs"], rec["meta"],
                                     max_length=args.quant_tokens)
        t = time.process_time()
        x = emb.encode(texts)
        results.append((name, agreement(x, ref), time.process_time() - t))
        print(f"  {name}: {results[-1]}", flush=True)
    rows = rows[:1] + results
    (out / "quant.json").write_text(json.dumps(rows, indent=1))
    print(f"\nint8 variants against torch, {len(texts)} pydocs sections at "
          f"{args.quant_tokens} tokens (CPU s in this process, {os.cpu_count()} CPUs):\n")
    print("| variant | cosine mean | 1st percentile | min | CPU s | torch CPU s / CPU s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, a, cpu in rows:
        ok = " (passes)" if a["mean"] >= 0.99 and a["p1"] >= 0.97 else ""
        print(f"| {name} | {a['mean']:.4f} | {a['p1']:.4f}{ok} | {a['min']:.4f} | "
              f"{cpu:.1f} | {t_torch / cpu:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for corpora, caches, "
                    "vectors and the JSON results (kept)")
    ap.add_argument("--only", choices=("speed", "quality", "quant"), default=None)
    ap.add_argument("--runs", type=int, default=2, help="warm processes per speed row")
    ap.add_argument("--speed-docs", type=int, default=512)
    ap.add_argument("--tune-speed", type=int, default=256,
                    help="--tune N of the whole-process row")
    ap.add_argument("--tune", type=int, default=1000, help="tuning sample of each corpus")
    ap.add_argument("--test-docs", type=int, default=1200,
                    help="held-out documents measured per corpus (evenly spaced among the "
                         "documents not in the tuning sample)")
    ap.add_argument("--tune-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="k-means seeds averaged")
    ap.add_argument("--quant-docs", type=int, default=256)
    ap.add_argument("--quant-tokens", type=int, default=256)
    ap.add_argument("--m2v-model", default=None,
                    help="a Model2Vec model made by model2vec.distill of the bundled MiniLM "
                         "(the comparison of issue 19 item 2)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"uptime load {os.getloadavg()}, {os.cpu_count()} CPUs", flush=True)
    for part, fn in (("quant", quant), ("speed", speed), ("quality", quality)):
        if args.only in (None, part):
            fn(args, args.out)
    print(f"uptime load {os.getloadavg()}")


if __name__ == "__main__":
    main()
