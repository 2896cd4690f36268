"""The import graph of ``src/clusterclip``: no cycles, and the lower layers import down only.

Built with ``ast`` from every module, counting imports inside functions (a lazy
import is still a dependency). Layers, from the bottom: the shared modules
(``errors``, ``limits``, ``storage``, ``labels``, ``kernels``, ``plotting``, ``distributed``,
``data``, ``pool``), then ``corpus`` -> ``embedding`` -> ``clustering`` ->
``sampling``; a module of these may import its own layer and those below only.
Everything else (``tokens``, ``dedup``, ``export``, ``report``, ``verdict``, ``experiment``,
``workdir``, ``stages``, ``cli``, the package's own ``__init__``) sits above them.

Two rules more (issue 29): only the stages, the command line and the work directory
itself import :mod:`clusterclip.workdir` (the algorithm packages take arrays, paths or
options); and no module imports a private name (``_x``) or module from another top-level
package (``from clusterclip.a.b import _x`` in package ``c``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "clusterclip"
SHARED = ("errors", "limits", "storage", "labels", "kernels", "plotting", "distributed", "data",
          "pool")
LAYERS = {**dict.fromkeys(SHARED, 0), "corpus": 1, "embedding": 2, "clustering": 3,
          "sampling": 4}
#: Cycles allowed to remain (none: a cycle fails the test).
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (p, package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the clusterclip modules it imports (``from P import name`` counts as
    the submodule ``P.name`` when there is one, else as ``P``)."""
    mods = _modules()

    def known(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, (path, package) in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(known(a.name) for a in node.names
                            if a.name.split(".")[0] == "clusterclip")
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package of this module
                    base = name.split(".")[:len(name.split(".")) - node.level + package]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "clusterclip":
                    continue
                deps.update(known(f"{target}.{a.name}") if f"{target}.{a.name}" in mods
                            else known(target) for a in node.names)
        deps.discard(name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_function_level_and_relative_imports(graph):
    # clusterclip/__init__ imports the sampler only inside __getattr__, cli/sample.py its
    # modules inside functions: those are edges too (the test would be blind otherwise)
    assert "clusterclip.sampling" in graph["clusterclip"]
    assert "clusterclip.sampling.mixture" in graph["clusterclip.cli._options"]
    assert {"clusterclip.sampling.budget", "clusterclip.sampling.factory"} <= graph[
        "clusterclip.sampling.schedule"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        frozenset({"a", "b", "c"})]


def test_no_import_cycle_between_modules_or_parts(graph):
    assert set(_cycles(graph)) <= KNOWN_CYCLES, sorted(map(sorted, _cycles(graph)))
    parts: dict[str, set[str]] = {}
    for m, deps in graph.items():
        parts.setdefault(_part(m), set()).update(_part(d) for d in deps if _part(d) != _part(m))
    assert _cycles(parts) == []


def test_the_lower_layers_import_only_their_layer_and_below(graph):
    upward = []
    for m, deps in graph.items():
        if _part(m) not in LAYERS:
            continue
        for d in deps:
            if LAYERS.get(_part(d), 99) > LAYERS[_part(m)]:
                upward.append(f"{m} -> {d}")
    assert upward == []
    # the arrows issue 20 named are gone for good
    assert "clusterclip.tokens" not in set().union(*(graph[m] for m in graph
                                                     if _part(m) == "sampling"))
    assert "clusterclip.export" not in graph["clusterclip.sampling.hf"]


def test_the_verdict_rules_live_below_experiment_and_search(graph):
    """Issues 37 and 39: one module of verdict statistics that both commands import, which
    imports neither of them; search no longer reaches into experiment for them."""
    verdict = "clusterclip.verdict"
    assert verdict in graph["clusterclip.experiment.verdict"]
    assert verdict in graph["clusterclip.search.output"]
    assert not {d for d in graph[verdict] if _part(d) in ("experiment", "search", "stages",
                                                          "cli")}
    search = [m for m in graph if _part(m) == "search"]
    assert not any("clusterclip.experiment.verdict" in graph[m] for m in search)


def test_search_imports_nothing_of_experiment(graph):
    """Issue 39: the proxies' run configuration (``ExperimentConfig``, the documents'
    encoding, the declared primary and seed rule) lives in ``lm.runconfig``, below both
    commands; no module of ``search`` imports a module of ``experiment``, and neither the
    configuration, ``lm`` nor the verdict statistics import either command."""
    config = "clusterclip.lm.runconfig"
    # the scan sees the edges it forbids: both commands take the configuration from there
    assert {config} <= graph["clusterclip.search.proxies"] & graph["clusterclip.search.offline"]
    assert config in graph["clusterclip.experiment.core"]
    search = [m for m in graph if _part(m) == "search"]
    assert len(search) > 10
    assert [f"{m} -> {d}" for m in search for d in graph[m] if _part(d) == "experiment"] == []
    below = [m for m in graph if _part(m) in ("lm", "verdict")]
    assert [f"{m} -> {d}" for m in below for d in graph[m]
            if _part(d) in ("experiment", "search", "stages", "cli")] == []


#: The most lines a function of ``src/clusterclip`` may span, from ``def`` to its last line
#: (docstring included): longer ones are split into named steps.
MAX_FUNCTION_LINES = 80
#: Functions allowed to be longer: only the hot loops of the kernels, where a call per
#: step costs measurable time. ``"module:qualname": "reason"``; an entry that no longer
#: exceeds the limit fails the test (the list does not go stale). None needs it today.
LONG_FUNCTIONS: dict[str, str] = {}


def function_lengths() -> dict[str, int]:
    """``"module:qualname"`` -> lines spanned, for every function and method (nested too)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, module: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out[f"{module}:{name}"] = child.end_lineno - child.lineno + 1
                visit(child, module, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, module, f"{prefix}{child.name}.")
            else:
                visit(child, module, prefix)

    for module, (path, _) in _modules().items():
        visit(ast.parse(path.read_text(encoding="utf-8")), module, "")
    return out


def test_no_function_is_longer_than_the_limit():
    lengths = function_lengths()
    # the scan sees methods and nested functions (it would be blind otherwise)
    assert "clusterclip.sampling.spec:SamplerSpec.__post_init__" in lengths
    assert any("<locals>" in name for name in lengths)
    too_long = {name: n for name, n in lengths.items()
                if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS}
    assert too_long == {}, sorted(too_long.items(), key=lambda kv: -kv[1])
    stale = [name for name in LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_FUNCTION_LINES]
    assert stale == []



def argparse_uses(module: str) -> list[str]:
    """``"module:line ..."`` for each ``argparse`` import of ``module`` and each parameter
    of its functions annotated with a ``Namespace``."""
    path = _modules()[module][0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n.split(".")[0] == "argparse" for n in names):
            found.append(f"{module}:{node.lineno} imports argparse")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None \
                        and "Namespace" in ast.unparse(arg.annotation):
                    found.append(f"{module}:{node.lineno} {node.name}({arg.arg}: "
                                 f"{ast.unparse(arg.annotation)})")
    return found


def test_no_argparse_namespace_below_the_cli():
    # the command line parses options into typed options (stages.pipeline.RunOptions,
    # stages.demo.DemoConfig); the code below it never sees a Namespace
    below = [u for m in _modules() if _part(m) != "cli" for u in argparse_uses(m)]
    assert below == []
    # the scan sees what it looks for: the cli imports argparse and takes Namespaces
    uses = argparse_uses("clusterclip.cli.run")
    assert any("imports argparse" in u for u in uses)
    assert any("run(args: argparse.Namespace)" in u for u in uses)


#: The parts that may import the work directory: the stages and the command line.
WORKDIR_IMPORTERS = ("stages", "cli", "workdir")


def test_only_the_stages_and_the_cli_import_the_work_directory(graph):
    importers = {m for m, deps in graph.items() if any(_part(d) == "workdir" for d in deps)}
    assert {m for m in importers if _part(m) not in WORKDIR_IMPORTERS} == set()
    # the scan sees them: the stages and the command line do import it, through the
    # package's face or one of its modules (the package's own modules import each other)
    assert {"clusterclip.stages.cluster", "clusterclip.cli.cluster"} <= importers
    assert "clusterclip.workdir.layout" in graph["clusterclip.workdir.manifest"]
    assert _part("clusterclip.workdir.layout") == "workdir"


def _private_in(module: str, tree: ast.AST) -> list[str]:
    """``"module <- target name"`` for each private name (``_x``), or name from a private
    module, that ``module`` (parsed as ``tree``) imports from another top-level package."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module
                and node.module.split(".")[0] == "clusterclip"
                and _part(node.module) != _part(module)):
            continue
        private_module = any(p.startswith("_") and not p.startswith("__")
                             for p in node.module.split(".")[1:])
        for a in node.names:
            if private_module or (a.name.startswith("_") and not a.name.startswith("__")):
                found.append(f"{module} <- {node.module} {a.name}")
    return found


def private_imports() -> list[str]:
    """:func:`_private_in` over every module of clusterclip."""
    return [f for module, (path, _) in _modules().items()
            for f in _private_in(module, ast.parse(path.read_text(encoding="utf-8")))]


def test_no_private_name_is_imported_across_packages():
    assert private_imports() == []
    # the scan sees what it looks for: a private name or module of another package, not
    # one of the module's own package
    tree = ast.parse("from clusterclip.experiment.core import _load\n"
                     "from clusterclip.export._rows import rows_hash\n"
                     "from clusterclip.search._splits import split\n"
                     "def f():\n    from clusterclip.lm.data import _inner\n")
    assert _private_in("clusterclip.search.offline", tree) == [
        "clusterclip.search.offline <- clusterclip.experiment.core _load",
        "clusterclip.search.offline <- clusterclip.export._rows rows_hash",
        "clusterclip.search.offline <- clusterclip.lm.data _inner"]


#: The module that says each artifact name of the work directory, once.
LAYOUT = "clusterclip.workdir.layout"
#: Names of folders in W that are also words (stage names, dict keys): refused only where
#: they make a path (``root / "corpus"``, ``w.path("corpus")``, ``reads=["corpus"]``).
_PATH_CALLS = ("path", "joinpath", "Path")
_PATH_KEYWORDS = ("reads", "maybe_reads", "outputs", "scratch")
#: The literals equal to an artifact name that name something else: ``"module:name"`` ->
#: why. An entry the scan no longer finds fails the test (the list does not go stale).
NOT_ARTIFACTS = {
    "clusterclip.embedding.pipeline:'embeddings.npy'":
        "the rows file inside W/embed while shards are written, named like the file it "
        "becomes",
    "clusterclip.cli._demo:'report'": "the demo's own folder DEMO/report, not W/report",
}


def artifact_names() -> tuple[set[str], set[str]]:
    """``(files, folders)``: the artifact names of the layout module (its upper-case string
    constants); a name with a suffix is a file, one without a folder."""
    tree = ast.parse(_modules()[LAYOUT][0].read_text(encoding="utf-8"))
    names = {node.value.value for node in tree.body
             if isinstance(node, ast.Assign) and len(node.targets) == 1
             and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()
             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    return {n for n in names if "." in n}, {n for n in names if "." not in n}


def artifact_literals(module: str, tree: ast.AST, files: set[str], folders: set[str]
                      ) -> list[str]:
    """``"module:line 'name'"`` for each string constant of ``tree`` that spells an
    artifact: a file name anywhere, a folder name where it makes a path (an operand of
    ``/``, an argument of ``path``/``joinpath``/``Path``, an element of a stage's
    ``reads``/``maybe_reads``/``outputs``/``scratch``)."""
    found = []

    def hit(node: ast.AST, names: set[str]) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in names:
            found.append(f"{module}:{node.lineno} {node.value!r}")

    for node in ast.walk(tree):
        hit(node, files)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            hit(node.left, folders)
            hit(node.right, folders)
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            for arg in node.args if name in _PATH_CALLS else []:
                hit(arg, folders)
            for kw in node.keywords:
                if kw.arg in _PATH_KEYWORDS and isinstance(kw.value, (ast.List, ast.Tuple)):
                    for elt in kw.value.elts:
                        hit(elt, folders)
    return sorted(set(found))


def test_each_artifact_name_is_said_once_in_the_layout():
    """Issue 39: the work directory's artifact names are said in its layout module only;
    everything else reads them from there (or is handed the paths)."""
    files, folders = artifact_names()
    # the scan knows the layout's names, files and folders apart
    assert {"labels.npy", "centroids.npy", "embeddings.npy", "manifest.json"} <= files
    assert {"corpus", "search", "experiment", "map"} <= folders
    # every other module is scanned, the work directory's own lock, loaders and manifest too
    assert {"clusterclip.workdir", "clusterclip.workdir.manifest",
            "clusterclip.workdir.loaders", "clusterclip.workdir.lock"} <= set(_modules())
    found = [hit for module, (path, _) in _modules().items() if module != LAYOUT
             for hit in artifact_literals(module, ast.parse(path.read_text(
                 encoding="utf-8")), files, folders)]
    known = {f"{h.split(':')[0]}:{h.split(' ', 1)[1]}" for h in found}
    assert [h for h in found if f"{h.split(':')[0]}:{h.split(' ', 1)[1]}"
            not in NOT_ARTIFACTS] == []
    assert set(NOT_ARTIFACTS) <= known
    # the scan sees what it looks for, and only that: a folder name that is a stage name
    # or a key is no path
    tree = ast.parse("X = 'labels.npy'\n"
                     "def f(root, w):\n"
                     "    a = root / 'corpus' / 'corpus.json'\n"
                     "    b = w.path('centroids.npy'), w.path('search'), Path('map')\n"
                     "    w.run_stage('search', reads=['corpus'], outputs=('report',))\n"
                     "    return {'corpus': a, 'mode': 'corpus'}, f'{root}/labels.npy'\n")
    assert artifact_literals("m", tree, files, folders) == [
        "m:1 'labels.npy'", "m:3 'corpus'", "m:4 'centroids.npy'", "m:4 'map'",
        "m:4 'search'", "m:5 'corpus'", "m:5 'report'"]
