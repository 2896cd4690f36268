#!/usr/bin/env bash
# GPU check, prepared to run in under 10 minutes on one GPU (issue 10, item 6).
#
#   benchmarks/gpu_check.sh              # CUDA parts and their CPU peers
#   benchmarks/gpu_check.sh --cpu-only   # only the CPU peers (checks the script without a GPU)
#
# Three things (and on CUDA a fourth), each through the command line as users run it, on
# CUDA and on a small CPU slice, printed as throughput side by side:
#
#   1. MiniLM embedding:  clusterclip embed CORPUS --workdir W --device cuda
#      (CUDA: the 4,096 bundled Python-docs sections; CPU: the first 64 of
#      them). docs/s of the whole stage, model load included. On CUDA the
#      default is torch in float16 (--backend auto --precision auto); the onnx
#      backend (--backend onnx --device cuda: ONNX Runtime's CUDA provider, fp32)
#      runs too where onnxruntime-gpu is installed, else the script says so. On
#      the CPU: torch fp32 (--backend torch) and the default onnx int8. The CUDA
#      vectors of the first 64 documents are checked against the CPU torch ones
#      (cosine >= 0.999).
#   2. K-means under torchrun with NCCL, one process per GPU:
#      torchrun --standalone --nproc_per_node NGPU -m clusterclip.cli cluster
#        --embeddings X.npy --out D --clusters 1000 --iters 10 --tol 0 --kmeans-device cuda
#      on 10^6 x 384 synthetic unit rows (CUDA) and 5 x 10^4 of the same rows
#      (CPU: the same torchrun line, one process, --kmeans-device cpu). rows x
#      iterations / s of the fit, k-means++ init included (from D/manifest.json).
#   3. The experiment's `base` model (3.2 M parameters):
#      clusterclip experiment --workdir W --model base --strategies random --seeds 1
#        --tokens T --max-docs 200 --device cuda
#      T = 2,048,000 tokens on CUDA, 4,096 on the CPU; training tokens/s of the run
#      (evaluation passes included, from results.json's timing).
#   4. (CUDA only) one search round with the GPU presets: 4 `medium` proxies (14.4 M
#      parameters), 6 test runs and the verification at `large` (59.4 M):
#      clusterclip search --workdir W --target FAQ --model medium --verify-model large
#        --runs 4 --rounds 1 --test-seeds 2 --device cuda
#
# Environment: PYTHON (default: .venv/bin/python when present, else python3) with
# clusterclip and its extras installed (`make` does it); OUT (default: a fresh
# temporary folder, kept) for the inputs, work directories and logs;
# GPU_CHECK_NGPU to override the number of processes for K-means.
# Everything is offline (the bundled MiniLM and corpus); nothing is downloaded.
set -euo pipefail

cd "$(dirname "$0")/.."
CPU_ONLY=0
for a in "$@"; do
  case "$a" in
    --cpu-only) CPU_ONLY=1 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $a (only --cpu-only)" >&2; exit 2 ;;
  esac
done
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
OUT=${OUT:-$(mktemp -d -t clusterclip-gpu-check-XXXXXX)}
mkdir -p "$OUT"
if [[ -n "$(ls -A "$OUT")" && ! -e "$OUT/.gpu_check" ]]; then
  echo "gpu_check.sh: OUT=$OUT is not empty and not an earlier gpu_check folder" >&2
  exit 2
fi
touch "$OUT/.gpu_check"
rm -rf "$OUT"/emb-cpu* "$OUT"/emb-cuda* "$OUT"/km-cpu* "$OUT"/km-cuda* "$OUT"/exp-*
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT
CLI=("$PYTHON" -m clusterclip.cli)
T0=$SECONDS
step() { echo "[gpu_check $((SECONDS - T0))s] $*"; }

NGPU=$("$PYTHON" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
NGPU=${GPU_CHECK_NGPU:-$NGPU}
if [[ $CPU_ONLY == 0 && $NGPU -lt 1 ]]; then
  echo "gpu_check.sh: no CUDA device visible to torch; run with --cpu-only to check the CPU parts" >&2
  exit 2
fi
step "python $("$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'), GPUs: $NGPU, out: $OUT"
if [[ $CPU_ONLY == 0 ]]; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true; fi

# -- inputs ------------------------------------------------------------------------------
"$PYTHON" - "$OUT" <<'EOF'
import gzip, shutil, sys
from pathlib import Path
from clusterclip.data import pydocs_path
out = Path(sys.argv[1])
with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
    lines = f.readlines()
(out / "pydocs.jsonl").write_text("".join(lines), encoding="utf-8")
(out / "pydocs-64.jsonl").write_text("".join(lines[:64]), encoding="utf-8")
EOF
if [[ $CPU_ONLY == 0 ]]; then KM_ROWS=1000000; else KM_ROWS=50000; fi
"$PYTHON" - "$OUT" "$KM_ROWS" <<'EOF'
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, "benchmarks")
from bench_kmeans import make_data
out, n = Path(sys.argv[1]), int(sys.argv[2])
make_data(out / "km.npy", n, 384, 1000, seed=0)
X = np.load(out / "km.npy", mmap_mode="r")
np.save(out / "km-cpu.npy", np.ascontiguousarray(X[:50000]))
EOF
step "inputs ready"

# -- 1. MiniLM embedding ---------------------------------------------------------------------
embed() {  # corpus workdir device [embed options...]
  local corpus=$1 wd=$2 dev=$3
  shift 3
  "${CLI[@]}" embed "$corpus" --workdir "$wd" --device "$dev" --no-progress "$@" > "$wd.log" 2>&1 \
    || { cat "$wd.log"; exit 1; }
}
embed "$OUT/pydocs-64.jsonl" "$OUT/emb-cpu" cpu --backend torch
embed "$OUT/pydocs-64.jsonl" "$OUT/emb-cpu-onnx" cpu --backend onnx
step "MiniLM on CPU done (torch fp32, onnx int8)"
ORT_CUDA=$("$PYTHON" -c "import onnxruntime as o; print(int('CUDAExecutionProvider' in o.get_available_providers()))" 2>/dev/null || echo 0)
if [[ $CPU_ONLY == 0 ]]; then
  embed "$OUT/pydocs.jsonl" "$OUT/emb-cuda" cuda
  step "MiniLM on CUDA done (torch fp16, the default there)"
  if [[ $ORT_CUDA == 1 ]]; then
    embed "$OUT/pydocs.jsonl" "$OUT/emb-cuda-onnx" cuda --backend onnx
    step "MiniLM on CUDA done (onnx, CUDAExecutionProvider, fp32)"
  else
    step "onnx on CUDA skipped: this onnxruntime has no CUDAExecutionProvider (pip install onnxruntime-gpu)"
  fi
fi

# -- 2. K-means (torchrun + NCCL on the GPUs) ----------------------------------------------
KM_ARGS=(--clusters 1000 --iters 10 --tol 0 --seed 0)
kmeans() {  # embeddings out nproc device: the same torchrun line for both devices
  "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$3" \
    -m clusterclip.cli cluster --embeddings "$1" --out "$2" "${KM_ARGS[@]}" \
    --kmeans-device "$4" > "$2.log" 2>&1 || { cat "$2.log"; exit 1; }
}
kmeans "$OUT/km-cpu.npy" "$OUT/km-cpu" 1 cpu
step "K-means on CPU (torchrun, 1 process) done"
if [[ $CPU_ONLY == 0 ]]; then
  kmeans "$OUT/km.npy" "$OUT/km-cuda" "$NGPU" cuda
  step "K-means on CUDA (torchrun, $NGPU process(es), NCCL) done"
fi

# -- 3. the experiment's base model ----------------------------------------------------------
"${CLI[@]}" run "$OUT/pydocs.jsonl" --workdir "$OUT/exp-cpu" --embedder fast --clusters 16 \
  > "$OUT/exp-setup.log" 2>&1 || { cat "$OUT/exp-setup.log"; exit 1; }
cp -a "$OUT/exp-cpu" "$OUT/exp-cuda"
EXP_ARGS=(--model base --strategies random --seeds 1 --max-docs 200 --no-progress)
"${CLI[@]}" experiment --workdir "$OUT/exp-cpu" "${EXP_ARGS[@]}" --tokens 4096 --device cpu \
  > "$OUT/exp-cpu.log" 2>&1 || { cat "$OUT/exp-cpu.log"; exit 1; }
step "base model on CPU done"
if [[ $CPU_ONLY == 0 ]]; then
  "${CLI[@]}" experiment --workdir "$OUT/exp-cuda" "${EXP_ARGS[@]}" --tokens 2048000 \
    --device cuda > "$OUT/exp-cuda.log" 2>&1 || { cat "$OUT/exp-cuda.log"; exit 1; }
  step "base model on CUDA done"
fi

# -- 4. one search round with the GPU presets (CUDA only) ------------------------------------
if [[ $CPU_ONLY == 0 ]]; then
  cp -a "$OUT/exp-cpu" "$OUT/search-cuda"
  "$PYTHON" -c "import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])];
open(sys.argv[2],'w').writelines(json.dumps(r)+'\n' for r in rows if r['label']=='faq')" \
    "$OUT/pydocs.jsonl" "$OUT/search-target.jsonl"
  "${CLI[@]}" search --workdir "$OUT/search-cuda" --target "$OUT/search-target.jsonl" \
    --model medium --verify-model large --runs 4 --rounds 1 --test-seeds 2 --max-docs 2500 \
    --device cuda --no-progress > "$OUT/search-cuda.log" 2>&1 \
    || { cat "$OUT/search-cuda.log"; exit 1; }
  step "one search round (4 medium proxies, 6 test runs, 6 large verification runs) done"
fi

# -- the table -------------------------------------------------------------------------------
"$PYTHON" - "$OUT" "$NGPU" "$CPU_ONLY" <<'EOF'
import json, re, sys
from pathlib import Path
import numpy as np
out, ngpu, cpu_only = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
rows = []

def embed_rate(name):
    log = (out / f"{name}.log").read_text()
    m = re.search(r"embedded (\d+) documents with \w+ in ([\d.]+) s", log)
    return int(m.group(1)), float(m.group(2))

def km_rate(name):
    info = json.loads((out / name / "manifest.json").read_text())["stages"]["cluster"]["info"]
    return info["n_rows"], info["n_iter"], info["seconds"], info["processes"]

def exp_rate(name):
    r = json.loads((out / name / "experiment" / "results.json").read_text())
    (run,) = (out / name / "experiment" / "runs").glob("*.json")  # one strategy, one seed
    return r["data"]["budget_tokens"], json.loads(run.read_text())["seconds"]

devs = ["cpu"] + ([] if cpu_only else ["cuda"])
rate = {}
embeds = [("cpu", "emb-cpu", "torch fp32"), ("cpu", "emb-cpu-onnx", "onnx int8")]
if not cpu_only:
    embeds.append(("cuda", "emb-cuda", "torch fp16"))
    if (out / "emb-cuda-onnx.log").exists():
        embeds.append(("cuda", "emb-cuda-onnx", "onnx fp32, CUDA provider"))
for dev, name, how in embeds:
    n, s = embed_rate(name)
    rate.setdefault(("embed", dev), n / s)
    rows.append((f"MiniLM embed ({dev}, {how})", f"{n} docs", f"{s:.1f} s",
                 f"{n / s:,.1f} docs/s"))
for dev in devs:
    n, it, s, p = km_rate(f"km-{dev}")
    rate["kmeans", dev] = n * it / s
    how = f"torchrun x{p}" + (", NCCL" if dev == "cuda" else "")
    rows.append((f"K-means K=1000 d=384 ({dev}, {how})", f"{n:,} rows x {it} it",
                 f"{s:.1f} s (init incl.)", f"{n * it / s:,.0f} rows*it/s"))
for dev in devs:
    t, s = exp_rate(f"exp-{dev}")
    rate["base", dev] = t / s
    rows.append((f"experiment base model ({dev})", f"{t:,} tokens", f"{s:.1f} s",
                 f"{t / s:,.0f} tokens/s"))
w = [max(len(r[i]) for r in rows) for i in range(4)]
print()
print("== gpu_check: throughput, CUDA vs CPU (same commands, CPU on a small slice) ==")
for r in rows:
    print("  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)))
if not cpu_only:
    for what in ("embed", "kmeans", "base"):
        print(f"{what}: CUDA / CPU = {rate[what, 'cuda'] / rate[what, 'cpu']:,.1f}x")
    a = np.load(out / "emb-cpu" / "embeddings.npy")
    for name in ("emb-cuda", "emb-cuda-onnx", "emb-cpu-onnx"):
        if not (out / name / "embeddings.npy").exists():
            continue
        b = np.load(out / name / "embeddings.npy", mmap_mode="r")[: len(a)]
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        print(f"MiniLM {name} vs CPU torch vectors, first {len(a)} docs: mean cosine "
              f"{cos.mean():.6f}, min {cos.min():.6f}")
        if cos.min() < (0.97 if name == "emb-cpu-onnx" else 0.999):
            sys.exit(f"gpu_check: {name} and the CPU torch embeddings disagree")
    runs = [json.loads(p.read_text()) for p in (out / "search-cuda" / "search" / "runs")
            .glob("*.json")]
    secs = sorted(r["seconds"] for r in runs if "fed_share" in r.get("run", r))
    print(f"search, medium proxies + large verification on CUDA: {len(secs)} runs, "
          f"{sum(secs):.0f} s in all, median {np.median(secs):.1f} s per run")
else:
    print("(--cpu-only: the CUDA rows were skipped)")
EOF
step "done (outputs and logs in $OUT)"
