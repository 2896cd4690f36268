"""Run inside the separate mosaicml-streaming virtual environment (``make`` builds .venv-mds):
read MDS exports with the real ``streaming.StreamingDataset`` and write the same rows with the
real ``streaming.MDSWriter``, as ``tests/test_export_mds.py`` asks in a JSON spec:

    python tests/_mds_streaming.py SPEC.json

SPEC: ``{"read": [{"folder", "out", "batch_size", "num_workers"}, ...],
"write": [{"rows", "out", "size_limit"}, ...], "recipe": {"code", "folder", "out"}}`` (each
optional). A read job writes the rows as served, in order, as JSON to ``out`` (``{rank}`` in it
is replaced by this process's rank: under ``torchrun`` each rank reads with streaming's own
partitioning). Not a test module: this file imports nothing of clusterclip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types


def import_streaming() -> types.ModuleType:
    """``streaming``; where its top-level package cannot be imported, ``streaming.base`` alone.

    ``import streaming`` also imports its vision datasets, hence torchvision; PyPI's
    torchvision is built against CUDA torch and fails to load next to the CPU build of torch
    that this machine installs. ``streaming.base`` (``StreamingDataset``, ``MDSWriter``, the
    MDS reader) needs no torchvision: then the package is set up without its ``__init__`` and
    given ``streaming.base``'s names, so ``from streaming import StreamingDataset`` works.
    """
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to load it: RuntimeError, OSError, ImportError
        spec = importlib.util.find_spec("streaming")
        pkg = types.ModuleType("streaming")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["streaming"] = pkg
        import streaming.base as base

        for name in base.__all__:
            setattr(pkg, name, getattr(base, name))
    import streaming

    return streaming


def read(streaming: types.ModuleType, job: dict) -> None:
    from torch.utils.data import DataLoader

    ds = streaming.StreamingDataset(local=job["folder"], remote=None, shuffle=False,
                                    num_canonical_nodes=1, batch_size=job["batch_size"])
    rows: dict[str, list] = {c: [] for c in ("position", "doc_index", "label", "text", "fields")}
    batches = []
    for batch in DataLoader(ds, batch_size=job["batch_size"],
                            num_workers=job.get("num_workers", 0)):
        batches.append(len(batch["position"]))
        for c, v in batch.items():
            rows[c].extend(v.tolist() if hasattr(v, "tolist") else list(v))
    rank = int(os.environ.get("RANK", "0"))
    with open(job["out"].format(rank=rank), "w", encoding="utf-8") as f:
        json.dump({"len": len(ds), "batches": batches, **rows}, f)


def write(streaming: types.ModuleType, job: dict) -> None:
    with open(job["rows"], encoding="utf-8") as f:
        rows = json.load(f)
    columns = {"position": "int64", "doc_index": "int64", "label": "int32", "text": "str",
               "fields": "str"}
    with streaming.MDSWriter(out=job["out"], columns=columns,
                             size_limit=job["size_limit"]) as w:
        for i in range(len(rows["position"])):
            w.write({c: rows[c][i] for c in columns})


def recipe(job: dict) -> None:
    seen: list[str] = []
    os.chdir(job["cwd"])
    exec(job["code"], {"train_step": seen.extend})  # noqa: S102 - the docs' recipe
    with open(job["out"], "w", encoding="utf-8") as f:
        json.dump(seen, f)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    streaming = import_streaming()
    for job in spec.get("write", []):
        write(streaming, job)
    for job in spec.get("read", []):
        read(streaming, job)
    if "recipe" in spec:
        recipe(spec["recipe"])


if __name__ == "__main__":
    main()
