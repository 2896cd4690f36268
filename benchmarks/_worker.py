"""Running one benchmark method in its own process (each bench_*.py re-invokes itself)."""

from __future__ import annotations

import json
import os
import subprocess


def run_worker(cmd: list[str], method: str, threads: int, timeout: float) -> dict:
    """Run ``cmd`` with BLAS/OpenMP limited to ``threads``; its last stdout line is the
    JSON result. A failure or a timeout becomes ``{"method": method, "error": ...}``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "OPENBLAS_NUM_THREADS": str(threads)}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                             check=True)
    except subprocess.CalledProcessError as e:
        return {"method": method, "error": e.stderr.strip().splitlines()[-1]}
    except subprocess.TimeoutExpired:
        return {"method": method, "error": f"timed out after {timeout:.0f} s"}
    return json.loads(out.stdout.strip().splitlines()[-1])
