"""Embedding benchmark: speed of our embedders against their peers, and the
quality of each embedder's clusters on the bundled Python-docs corpus and on
WordNet glosses.

Rows, all in one run:

- MiniLM: our path (``SentenceTransformerEmbedder.encode``) vs a direct
  ``SentenceTransformer.encode`` on the same texts, batch size and max length
  (target: ratio >= 1.0). Runs alternate, best of ``--rounds`` is kept.
- fast, on two corpora: the default table (MiniLM token vectors distilled
  once, PCA + SIF weights, cached under ~/.cache/clusterclip) against the
  old default (TF-IDF over word pieces + random projection): from a fresh
  embedder (table load, prepare, empty chunk cache: one ``embed`` run) and
  warm; then the default in a fresh Python process (start and imports
  included), with the user's table cache and, with ``--first-ever``, with an
  empty one (the distillation itself), and a whole ``clusterclip embed``
  process as a user runs it (the console script, bytecode cached;
  ``--process-runs`` each, alternating; ``--process-only`` runs just these),
  each saying what it imported without need (torch, the sampler...);
  ``--peer-src`` runs the fresh-process rows with another checkout's code too
  (the "before"). Target: >= 5,000 docs/s cold on pydocs, and for the whole
  process.
- NMI of K-means (scikit-learn, ``--seeds`` restarts averaged) of MiniLM, both
  fast tables and a shuffled-label control, on pydocs (labels: doc folders,
  largely lexical; K = 15 and 50) and on 15,000 WordNet 3.0 glosses
  (benchmarks/data, built by make_wordnet_corpus.py; labels: the 41 noun and
  verb lexicographer categories, semantic; K = 41). Target: fast >= 80% of
  MiniLM's NMI on both; and the mean cosine between documents with different
  labels (near 0, or a cosine threshold such as dedup's means nothing).

Wall-clock figures on a shared machine vary with load; CPU seconds
(``time.process_time``) are printed alongside.

    python benchmarks/bench_embed.py            # MiniLM on all 4,096 docs (slow on CPU)
    python benchmarks/bench_embed.py --quick    # MiniLM on a 128-doc subset
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
WORDNET = Path(__file__).parent / "data" / "wordnet_glosses.jsonl.gz"


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def nmi_row(x: np.ndarray, labels: np.ndarray, ks: list[int], seeds: int) -> list[float]:
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    out = []
    for k in ks:
        scores = [normalized_mutual_info_score(
            labels, KMeans(k, n_init=1, random_state=s).fit_predict(x)) for s in range(seeds)]
        out.append(float(np.mean(scores)))
    return out


def shuffled_row(x: np.ndarray, labels: np.ndarray, ks: list[int], seeds: int) -> list[float]:
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(0)
    return [float(np.mean([normalized_mutual_info_score(
        rng.permutation(labels), KMeans(k, n_init=1, random_state=s).fit_predict(x))
        for s in range(seeds)])) for k in ks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="MiniLM rows on a 128-doc subset")
    ap.add_argument("--minilm-docs", type=int, default=None,
                    help="documents for the MiniLM rows (default: all, 128 with --quick)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (best kept)")
    ap.add_argument("--seeds", type=int, default=3, help="k-means restarts averaged for NMI")
    ap.add_argument("--clusters", default="15,50")
    ap.add_argument("--minilm-embeddings", default=None,
                    help="N x d MiniLM vectors of all pydocs docs saved by an earlier full run "
                         "(np.save), for the full-corpus MiniLM NMI row when MiniLM itself "
                         "runs on a subset")
    ap.add_argument("--minilm-wordnet-embeddings", default=None,
                    help="MiniLM vectors of all WordNet glosses saved by an earlier run "
                         "(np.save); without it MiniLM embeds them in this run (slow on CPU)")
    ap.add_argument("--peer-src", default=None,
                    help="another checkout's src/ folder (e.g. the main branch's): its fast "
                         "embedder runs the fresh-process rows too, as the peer")
    ap.add_argument("--first-ever", action="store_true",
                    help="also time a fresh process with an empty table cache (distils the "
                         "table: minutes on CPU)")
    ap.add_argument("--process-only", action="store_true",
                    help="only the whole `clusterclip embed` process rows")
    ap.add_argument("--process-runs", type=int, default=2,
                    help="whole `clusterclip embed` processes per checkout (alternating)")
    args = ap.parse_args()
    srcs = [("this checkout", None)] + ([("peer: " + args.peer_src, args.peer_src)]
                                       if args.peer_src else [])
    if args.process_only:
        from clusterclip.data import pydocs_path

        with gzip.open(pydocs_path(), "rb") as f:
            n_docs = sum(1 for _ in f)
        clis = cli_rows(srcs, args.process_runs)
        print_cli_rows(n_docs, clis)
        print("Conclusion: " + cli_conclusion(n_docs, clis))
        return

    import torch
    from sentence_transformers import SentenceTransformer

    from clusterclip.data import pydocs_path
    from clusterclip.embedding.pipeline import make_embedder
    from clusterclip.embedding.static import StaticEmbedder
    from clusterclip.embedding.transformer import bundled_minilm_path

    texts, labels = read_corpus(pydocs_path())
    ks = [int(k) for k in args.clusters.split(",")]
    n_minilm = args.minilm_docs or (128 if args.quick else len(texts))
    rounds = args.rounds or (2 if args.quick else 1)
    # An evenly spaced subset keeps every doc folder represented.
    sub = np.linspace(0, len(texts) - 1, n_minilm).round().astype(int)
    sub_texts = [texts[i] for i in sub]
    print(f"pydocs: {len(texts)} docs; MiniLM rows on {n_minilm} docs, max_length "
          f"{args.max_length}, batch {args.batch_size}; torch threads {torch.get_num_threads()}, "
          f"cpus {os.cpu_count()}")

    # -- MiniLM: ours vs direct sentence-transformers ----------------------------
    ours = make_embedder("minilm", max_length=args.max_length, batch_size=args.batch_size)
    direct = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    direct.max_seq_length = ours.model.max_seq_length
    ours.encode(sub_texts[:8])  # warm both (first-call allocations)
    direct.encode(sub_texts[:8])
    t_ours, t_direct = [], []
    e_ours = e_direct = None
    for _ in range(rounds):
        e_ours, w, c = timed(lambda: ours.encode(sub_texts))
        t_ours.append((w, c))
        e_direct, w, c = timed(lambda: direct.encode(
            sub_texts, batch_size=args.batch_size, normalize_embeddings=True))
        t_direct.append((w, c))
    best_o, best_d = min(t_ours), min(t_direct)
    cos = float(np.sum(e_ours * e_direct, axis=1).min())

    # -- fast: distilled table (default) vs TF-IDF + random projection ---------------
    from clusterclip.embedding.pipeline import SAMPLE_SIZE, sample_indices

    wn_texts, wn_labels = read_corpus(WORDNET)
    corpora = {"pydocs": (texts, labels, ks),
               "wordnet": (wn_texts, wn_labels, [len(set(wn_labels.tolist()))])}
    speed, vectors = [], {}
    # (row name, table, class): the default, the old TF-IDF table, and with --peer-src the
    # peer checkout's fast embedder (the "before"), runs alternating.
    variants = [("distilled", "distilled", StaticEmbedder), ("random", "random", StaticEmbedder)]
    if args.peer_src:
        variants.append(("distilled, peer code", "distilled", peer_embedder(args.peer_src)))
    for cname, (ctexts, _, _) in corpora.items():
        where = sample_indices(np.ones(len(ctexts), bool), SAMPLE_SIZE)
        runs = {name: [] for name, _, _ in variants}
        for _ in range(max(rounds, 3)):  # best of 3 fresh embedders (shared machine)
            for name, table, cls in variants:
                emb, t_load, _ = timed(lambda t=table, cls=cls: cls(
                    table=t, max_length=args.max_length, progress=False))
                # The embed stage reads its sample and its shards separately: equal texts in
                # other string objects, no hash computed yet.
                run_texts = copies(ctexts)
                sample = copies([ctexts[i] for i in where])

                def cold_run(emb=emb, sample: list[str] = sample,
                             run_texts: list[str] = run_texts) -> np.ndarray:
                    emb.prepare(sample)
                    return emb.encode(run_texts)

                vectors[cname, name], w, c = timed(cold_run)
                _, ww, cw = timed(lambda e=emb, x=ctexts: e.encode(x))
                runs[name].append((w, c, ww, cw, t_load, emb.table_source))
        for name, _, _ in variants:
            w, c, _, _, t_load, source = min(runs[name])
            ww, cw = min((r[2], r[3]) for r in runs[name])
            speed.append((cname, name, source, len(ctexts), t_load, w, c, ww, cw))
    procs = [(cname, src, fresh_process(path, args.max_length, None, src_path))
             for src, src_path in srcs for cname, path in (("pydocs", None), ("wordnet", WORDNET))]
    if args.first_ever:
        with tempfile.TemporaryDirectory() as empty:
            procs.append(("pydocs", "this checkout",
                          fresh_process(None, args.max_length, empty, None)))
    clis = cli_rows(srcs, args.process_runs)

    # -- quality ---------------------------------------------------------------------
    e_minilm_full = e_ours if n_minilm == len(texts) else None
    if e_minilm_full is None and args.minilm_embeddings:
        e_minilm_full = np.load(args.minilm_embeddings)
    if args.minilm_wordnet_embeddings:
        e_minilm_wn, wn_how = np.load(args.minilm_wordnet_embeddings), "vectors from file"
    else:
        e_minilm_wn, w, _ = timed(lambda: ours.encode(wn_texts))
        wn_how = f"embedded in this run, {len(wn_texts) / w:.0f} docs/s"
    minilm = {"pydocs": e_minilm_full, "wordnet": e_minilm_wn}

    print()
    print("| embedder | docs | wall s | docs/s (wall) | CPU s | docs/CPU-s | ratio vs peer |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| MiniLM, ours | {n_minilm} | {best_o[0]:.2f} | {n_minilm / best_o[0]:.1f} | "
          f"{best_o[1]:.2f} | {n_minilm / best_o[1]:.1f} | "
          f"{best_d[0] / best_o[0]:.2f}x wall, {best_d[1] / best_o[1]:.2f}x CPU |")
    print(f"| MiniLM, direct `SentenceTransformer.encode` | {n_minilm} | {best_d[0]:.2f} | "
          f"{n_minilm / best_d[0]:.1f} | {best_d[1]:.2f} | {n_minilm / best_d[1]:.1f} | 1.00x |")
    print()
    print(f"min cosine ours vs direct MiniLM: {cos:.6f}")
    print()
    print("fast embedders, in this process (imports done; `cold` = fresh embedder: table "
          "load, then prepare + encode with an empty word cache, the sample and the corpus "
          "in separate string objects as the embed stage reads them; `warm` = encode "
          "again; best of 3 fresh embedders):")
    print()
    print("| corpus | table | table from | docs | load s | cold wall s | cold docs/s | "
          "cold CPU s | cold docs/CPU-s | warm wall s | warm docs/s | cold ratio vs random |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cold_of = {(r[0], r[1]): r[5] for r in speed}
    cpu_of = {(r[0], r[1]): r[6] for r in speed}
    for cname, table, src, docs, t_load, w, c, ww, _cw in speed:
        print(f"| {cname} | {table} | {src} | {docs} | {t_load:.2f} | {w:.2f} | "
              f"{docs / w:.0f} | {c:.2f} | {docs / c:.0f} | {ww:.2f} | {docs / ww:.0f} | "
              f"{cold_of[cname, 'random'] / w:.2f}x |")
    print()
    peer_note = ""
    if args.peer_src:
        same = all(np.array_equal(vectors[c, "distilled"], vectors[c, "distilled, peer code"])
                   for c in corpora)
        ratio = cold_of["pydocs", "distilled, peer code"] / cold_of["pydocs", "distilled"]
        cpu_ratio = cpu_of["pydocs", "distilled, peer code"] / cpu_of["pydocs", "distilled"]
        peer_note = (f" ({ratio:.2f}x the peer code's wall, {cpu_ratio:.2f}x its CPU; "
                     f"vectors {'identical' if same else 'DIFFERENT'})")
        print(f"Peer code ({args.peer_src}), same run: cold on pydocs {ratio:.2f}x wall, "
              f"{cpu_ratio:.2f}x CPU; default vectors identical to the peer's on both corpora: "
              f"{'yes' if same else 'NO'}.")
        print()
    print("fast (default, distilled table), each in a fresh process: python start + imports + "
          "table + prepare + encode:")
    print()
    print("| code | corpus | table cache | table from | docs | embed s (load+prepare+encode) | "
          "docs/s | whole process s | docs/s incl. start | torch imported |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    for cname, code, (docs, src, t_embed, t_proc, empty, torch_in) in procs:
        print(f"| {code} | {cname} | {'empty (first ever)' if empty else 'user cache'} | "
              f"{src} | {docs} | {t_embed:.2f} | {docs / t_embed:.0f} | {t_proc:.2f} | "
              f"{docs / t_proc:.0f} | {'yes' if torch_in else 'no'} |")
    print()
    print_cli_rows(len(texts), clis)
    py_how = "this run" if n_minilm == len(texts) else "from --minilm-embeddings" \
        if e_minilm_full is not None else "none for the whole corpus (no ratio)"
    print(f"MiniLM vectors: pydocs {py_how}; "
          f"wordnet {wn_how}. NMI: KMeans(n_init=1), mean of {args.seeds} seeds.")
    print()
    ratios, cosines = {}, {}
    for cname, (_, clabels, cks) in corpora.items():
        print(f"| {cname}: clusters of | docs | " + " | ".join(f"NMI K={k}" for k in cks)
              + " | fast / MiniLM |")
        print("|---|---|" + "---:|" * (len(cks) + 1))
        m = minilm[cname]
        m_row = nmi_row(m, clabels, cks, args.seeds) if m is not None else None
        rows_q = [("MiniLM", m_row)] if m_row else []
        for table, name in (("distilled", "fast (default: distilled table, PCA + SIF)"),
                            ("random", "fast, TF-IDF + random projection (old default)")):
            rows_q.append((name, nmi_row(vectors[cname, table], clabels, cks, args.seeds)))
        rows_q.append(("shuffled labels (fast clusters)",
                       shuffled_row(vectors[cname, "distilled"], clabels, cks, args.seeds)))
        cosines[cname] = {"MiniLM": unrelated_cosine(m, clabels),
                          "fast": unrelated_cosine(vectors[cname, "distilled"], clabels)}
        for name, vals in rows_q:
            rel = "" if m_row is None or name.startswith(("MiniLM", "shuffled")) else \
                " / ".join(f"{v / mv:.0%}" for v, mv in zip(vals, m_row, strict=True))
            print(f"| {name} | {len(clabels)} | " + " | ".join(f"{v:.3f}" for v in vals)
                  + f" | {rel} |")
            if name.startswith("fast (default") and m_row is not None:
                ratios[cname] = min(v / mv for v, mv in zip(vals, m_row, strict=True))
        print()
    print("Mean cosine between documents with different labels (20,000 random pairs; "
          "dedup needs it near 0): " + "; ".join(
              f"{c} " + ", ".join(f"{k} {v:+.3f}" for k, v in d.items() if v is not None)
              for c, d in cosines.items()))
    print()
    cold = cold_of["pydocs", "distilled"]
    cold = len(texts) / cold
    cold_cpu = len(texts) / cpu_of["pydocs", "distilled"]
    met = cold >= 5000 and len(ratios) == 2 and min(ratios.values()) >= 0.8
    print(f"Conclusion: default fast embedder, cold on pydocs {cold:,.0f} docs/s (target 5,000; "
          f"{cold_cpu:,.0f} docs per CPU second){peer_note}; "
          f"worst NMI ratio to MiniLM "
          + ", ".join(f"{c} {r:.0%}" for c, r in ratios.items())
          + f" (target 80%): target {'MET' if met else 'MISSED'}. "
          + cli_conclusion(len(texts), clis))


def cli_conclusion(n_docs: int, clis: list[tuple]) -> str:
    """The whole-process rows in one sentence, against the 5,000 docs/s target."""
    ours = [n_docs / c[2] for c in clis if c[0] == "this checkout"]
    peer = [n_docs / c[2] for c in clis if c[0] != "this checkout"]
    hit = sum(r >= 5000 for r in ours)
    extra = sorted({m for c in clis if c[0] == "this checkout" for m in c[4]})
    return (f"A whole `clusterclip embed` process: {min(ours):,.0f}-{max(ours):,.0f} docs/s "
            + (f"(peer code {min(peer):,.0f}-{max(peer):,.0f}) " if peer else "")
            + f"in {len(ours)} runs, >= 5,000 in {hit} of them (target "
            + ("MET" if hit == len(ours) else "MISSED" if hit == 0 else "met in some runs only")
            + f"); imported without need: {', '.join(extra) or 'nothing'}.")


def peer_embedder(src: str):
    """``StaticEmbedder`` of another checkout (its ``embedding/static.py``, imported under
    another name; the rest of the package is this checkout's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "peer_static", Path(src) / "clusterclip" / "embedding" / "static.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StaticEmbedder


def unrelated_cosine(x: np.ndarray | None, labels: np.ndarray) -> float | None:
    """Mean cosine between 20,000 random pairs of documents with different labels."""
    if x is None:
        return None
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(labels), (2, 60_000))
    keep = np.flatnonzero(labels[a] != labels[b])[:20_000]
    return float(np.mean(np.sum(x[a[keep]] * x[b[keep]], axis=1)))


def copies(texts: list[str]) -> list[str]:
    """Equal strings in new objects (as read again from the corpus file)."""
    return [t.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass") for t in texts]


def read_corpus(path) -> tuple[list[str], np.ndarray]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [r["text"] for r in rows], np.array([r["label"] for r in rows])


_FRESH = """
import gzip, json, sys, time
t0 = time.perf_counter()
import numpy as np
from clusterclip.data import pydocs_path
from clusterclip.embedding.pipeline import make_embedder, sample_indices
path = sys.argv[1] or str(pydocs_path())
with gzip.open(path, "rt", encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f]
t1 = time.perf_counter()
emb = make_embedder("fast", max_length=int(sys.argv[2]), progress=False)
# as the embed stage: the sample read separately from the texts it then embeds
emb.prepare([texts[i].encode().decode() for i in sample_indices(np.ones(len(texts), bool))])
emb.encode(texts)
t2 = time.perf_counter()
print(json.dumps([len(texts), emb.table_source, t2 - t1, t2 - t0, "torch" in sys.modules]))
"""


def child_env(cache: str | None, src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if cache is not None:
        env["CLUSTERCLIP_CACHE"] = cache
    if src is not None:
        env["PYTHONPATH"] = src
    return env


def fresh_process(path, max_length: int, cache: str | None, src: str | None) -> tuple:
    """Run the default fast embedder over a corpus in a new Python process (``src``:
    another checkout's source folder)."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _FRESH, str(path or ""), str(max_length)],
                         env=child_env(cache, src), check=True, capture_output=True,
                         text=True).stdout
    total = time.perf_counter() - t
    docs, src, t_embed, _, torch_in = json.loads(out.strip().splitlines()[-1])
    return docs, src, t_embed, total, cache is not None, torch_in


# Modules a fast `clusterclip embed` process has no use for (reported when imported).
_NOT_NEEDED = ("torch", "transformers", "sentence_transformers", "clusterclip.sampling",
               "clusterclip.export", "clusterclip.experiment")


def cli_rows(srcs: list[tuple[str, str | None]], runs: int) -> list[tuple]:
    """Whole `clusterclip embed` processes, ``runs`` per checkout, alternating:
    (code, load average at start, wall s, CPU s, modules of _NOT_NEEDED imported)."""
    with tempfile.TemporaryDirectory() as pycache:
        imported = {src: cli_imports(src_path, pycache) for src, src_path in srcs}  # warm-up
        return [(src, os.getloadavg()[0], *cli_process(src_path, pycache), imported[src])
                for _ in range(runs) for src, src_path in srcs]


def print_cli_rows(n_docs: int, clis: list[tuple]) -> None:
    print(f"`clusterclip embed pydocs.jsonl.gz --workdir W --embedder fast` as a user runs it "
          f"(the console script, bytecode cached), a whole process (start, imports, scan, "
          f"embed, write; {n_docs} docs; runs alternate):")
    print()
    print("| code | load at start | whole process s | docs/s | CPU s (user+sys) | "
          "imported, not needed |")
    print("|---|---:|---:|---:|---:|---|")
    for code, load, t_proc, cpu, extra in clis:
        print(f"| {code} | {load:.2f} | {t_proc:.2f} | {n_docs / t_proc:,.0f} | {cpu:.2f} | "
              f"{', '.join(extra) or 'none'} |")
    print()


def cli_command() -> list[str]:
    """How a user starts the tool: the console script beside this Python, if installed."""
    script = Path(sys.executable).with_name("clusterclip")
    return [str(script)] if script.exists() else [sys.executable, "-m", "clusterclip.cli"]


def cli_env(src: str | None, pycache: str) -> dict[str, str]:
    """The child's environment: ``src`` first on the path; bytecode written to and read from
    ``pycache`` (as an installed package has it compiled; the source trees stay untouched)."""
    env = child_env(None, src)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def cli_embed_args(workdir: Path) -> list[str]:
    from clusterclip.data import pydocs_path

    return ["embed", str(pydocs_path()), "--workdir", str(workdir), "--embedder", "fast"]


def cli_imports(src: str | None, pycache: str) -> list[str]:
    """An untimed `clusterclip embed` (also writes the bytecode): which modules of
    _NOT_NEEDED it imported."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**cli_env(src, pycache), "PYTHONPROFILEIMPORTTIME": "1"}
        err = subprocess.run(cli_command() + cli_embed_args(Path(tmp) / "w"), env=env,
                             check=True, capture_output=True, text=True).stderr
    mods = {line.split("|")[-1].strip() for line in err.splitlines()
            if line.startswith("import time:")}
    return [m for m in _NOT_NEEDED if any(x == m or x.startswith(m + ".") for x in mods)]


def cli_process(src: str | None, pycache: str) -> tuple[float, float]:
    """``clusterclip embed`` of the bundled corpus with the fast embedder, a whole process:
    wall s, CPU s of the child."""
    with tempfile.TemporaryDirectory() as tmp:
        before = os.times()
        t = time.perf_counter()
        subprocess.run(cli_command() + cli_embed_args(Path(tmp) / "w"),
                       env=cli_env(src, pycache), check=True, capture_output=True)
        wall = time.perf_counter() - t
        after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                          - before.children_system)
    return wall, cpu


if __name__ == "__main__":
    main()
