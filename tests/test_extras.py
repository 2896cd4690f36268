"""Each extra installs what its code imports (issue 16): every third-party import of
``src/clusterclip`` (at the top or inside a function), read with ``ast``, is a dependency
declared in ``pyproject.toml`` by the extras that cover its module, or a base dependency.

``MODULE_EXTRAS`` is the one map from modules to extras: the most specific dotted prefix
of a module decides. A new module gets its package's entry; one that imports something
its extras do not declare fails here until the dependency (or the map) is added.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "clusterclip"

MODULE_EXTRAS: dict[str, tuple[str, ...]] = {
    "clusterclip": (),  # the base dependencies only
    "clusterclip.corpus": ("parquet",),  # Parquet inputs
    "clusterclip.embedding": ("embed",),
    "clusterclip.embedding.onnx_runtime": ("onnx",),  # --backend onnx (onnx includes embed)
    "clusterclip.embedding.model2vec_embedder": ("model2vec",),
    "clusterclip.clustering": ("torch",),
    "clusterclip.clustering._faiss": ("faiss",),
    "clusterclip.clustering.sweep": ("torch", "report"),  # silhouette, plot
    "clusterclip.dedup": ("embed",),  # a stage over embeddings: scipy's components
    "clusterclip.distributed": ("torch",),
    "clusterclip.tokens": ("embed",),  # --tokenizer: transformers
    "clusterclip.sampling.torch": ("torch",),
    "clusterclip.sampling.hf": ("hf",),
    # torch only where torch.distributed is already running: one reduction over the ranks
    "clusterclip.sampling.online": ("torch",),
    "clusterclip.verdict": ("experiment",),  # the statistics of experiment's and search's verdicts
    "clusterclip.export": ("parquet", "hf"),
    "clusterclip.export.mds": ("mds",),
    "clusterclip.export.megatron": ("megatron",),
    "clusterclip.plotting": ("report",),
    "clusterclip.report": ("report",),
    "clusterclip.export.atlas": ("report", "parquet"),  # export --format atlas: one Parquet
    "clusterclip.lm": ("experiment",),  # the proxy LM of experiment and search
    "clusterclip.experiment": ("experiment",),
    "clusterclip.search": ("search",),
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else \
        pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    optional = project["optional-dependencies"]

    def names(reqs: list[str]) -> set[str]:
        """Distribution names of ``reqs``; ``clusterclip[a,b]`` stands for those extras'."""
        out: set[str] = set()
        for r in reqs:
            own = re.fullmatch(r"clusterclip\[([^\]]+)\]", r.strip())
            out |= (names([x for e in own[1].split(",") for x in optional[e.strip()]]) if own
                    else {_norm(re.match(r"[A-Za-z0-9_.\-]+", r)[0])})
        return out

    return names(project["dependencies"]), {extra: names(reqs)
                                            for extra, reqs in optional.items()}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports of a file, wherever they are in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"clusterclip", "__future__"}


def extras_of(module: str) -> tuple[str, ...]:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULE_EXTRAS:
            return MODULE_EXTRAS[".".join(parts[:i])]
    raise AssertionError(f"{module}: not under clusterclip")


def test_every_third_party_import_is_declared_by_the_extras_covering_its_module():
    base, extras = _declared()
    dists = importlib.metadata.packages_distributions()
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module(path)
        wanted = extras_of(module)
        allowed = base.union(*(extras[e] for e in wanted))
        for name in sorted(_imports(path)):
            providers = {_norm(d) for d in dists.get(name, [name])}
            if not providers & allowed:
                missing.append(f"{module} imports {name} ({', '.join(sorted(providers))}), "
                               f"not declared in {' or '.join(wanted) or 'the base'}")
    assert not missing, "\n".join(missing)


def test_the_map_names_only_real_extras_and_modules():
    _, extras = _declared()
    for prefix, wanted in MODULE_EXTRAS.items():
        assert set(wanted) <= set(extras), prefix
        path = SRC.parent.joinpath(*prefix.split("."))
        assert path.with_suffix(".py").is_file() or path.is_dir(), prefix
