"""The stages (``clusterclip.stages``): each a frozen options dataclass, checked once when
made in the parameters' names, and ``run(w: Workdir, options)``; and the work directory's
loaders, the one way each artifact is read."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clusterclip.stages
from clusterclip.errors import InputError
from clusterclip.workdir import CENTROIDS, GROUPS, LABELS, SCHEDULE, SCORES, VALID, Workdir

STAGES = sorted(m.name for m in pkgutil.iter_modules(clusterclip.stages.__path__)
                if not m.name.startswith("_"))


def test_the_stages_are_there():
    assert {"cluster", "dedup", "embed", "fit", "pipeline", "propose", "sample",
            "tokens"} <= set(STAGES)


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_runs_a_workdir_with_its_frozen_options(name):
    module = importlib.import_module(f"clusterclip.stages.{name}")
    hints = typing.get_type_hints(module.run)
    params = list(inspect.signature(module.run).parameters)
    # search fit runs with or without a work directory (its columns: W's clusters or yours)
    assert params[:2] == ["w", "options"] and hints["w"] in (Workdir, Workdir | None)
    options = hints["options"]
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen


@pytest.mark.parametrize("make,param", [
    (lambda: _stage("cluster").ClusterOptions(n_clusters=0), "n_clusters"),
    (lambda: _stage("cluster").ClusterOptions(n_clusters=4, fit_sample=2), "fit_sample"),
    (lambda: _stage("cluster").SweepOptions(ks=(2, 4), sample_size=2), "sample_size"),
    (lambda: _stage("cluster").SweepOptions(ks=()), "ks"),
    (lambda: _stage("sample").SampleOptions(num_samples=10, clip=0), "clip"),
    (lambda: _stage("sample").SampleOptions(num_samples=0), "num_samples"),
    (lambda: _stage("sample").SampleOptions(num_samples=10, seed=2**64), "seed"),
    (lambda: _stage("sample").SampleOptions(num_samples=10, mixture="/no/such/m.json"),
     "mixture"),
    (lambda: _stage("dedup").DedupOptions(threshold=1.5), "threshold"),
    (lambda: _stage("embed").EmbedOptions(embedder="fast", shard_size=0), "shard_size"),
])
def test_bad_options_are_refused_when_made_naming_the_parameter(make, param):
    with pytest.raises(InputError) as e:
        make()
    assert param in e.value.params and param in str(e.value) and "--" not in str(e.value)


def test_run_refuses_groups_without_the_dedup_stage():
    s = _stage("sample").SampleOptions(num_samples=10, groups=True)
    with pytest.raises(InputError, match="dedup") as e:
        _stage("pipeline").RunOptions(embed=_stage("embed").EmbedOptions(embedder="fast"),
                                 cluster=_stage("cluster").ClusterOptions(n_clusters=2),
                                 sample=s)
    assert e.value.params == ("groups",)


def test_the_loaders_read_what_was_written_and_name_the_file_otherwise(tmp_path):
    w = Workdir(tmp_path / "W")
    labels = np.array([0, 2, -1, 1], dtype=np.int32)
    np.save(w.path(LABELS), labels)
    np.save(w.path(GROUPS), np.array([0, 1, -1, 1]))
    assert w.valid() is None  # no mask: every row counts
    np.save(w.path(VALID), labels >= 0)
    assert w.labels(4).tolist() == labels.tolist()
    assert w.valid(4).tolist() == [True, True, False, True]
    assert w.groups().tolist() == [0, 1, -1, 1]
    np.save(w.path(SCORES), np.array([0.5, 1.0, 0.0, 0.25], dtype=np.float32))
    np.save(w.path(CENTROIDS), np.eye(3, 4, dtype=np.float32))
    np.save(w.path(SCHEDULE), np.array([3, 0, 1, 1]))
    assert w.scores().tolist() == [0.5, 1.0, 0.0, 0.25] and w.centroids().shape == (3, 4)
    assert w.schedule().tolist() == [3, 0, 1, 1]
    with pytest.raises(InputError, match=f"{w.path(VALID)}: expected a bool array of shape"):
        w.valid(5)
    np.save(w.path(LABELS), labels.astype(float))
    with pytest.raises(InputError, match=str(w.path(LABELS))):
        w.labels()


def _stage(name):
    return importlib.import_module(f"clusterclip.stages.{name}")


@pytest.mark.parametrize("make,param", [
    (lambda: _stage("group").GroupOptions(out="out", docs_per_file=0), "docs_per_file"),
    (lambda: _stage("export").ExportOptions(out="out", rows_per_shard=0), "rows_per_shard"),
    (lambda: _stage("export").ExportOptions(out="out", format="csv"), "format"),
    (lambda: _stage("report").ReportOptions(clip=0), "clip"),
    (lambda: _stage("report").ReportOptions(windows=0), "windows"),
    (lambda: _stage("report").ReportOptions(tail_floor=-1.0), "tail_floor"),
    (lambda: _stage("report").ReportOptions(num_samples=0), "num_samples"),
    (lambda: _stage("report").ReportOptions(map_sample=-1), "map_sample"),
    (lambda: _stage("report").ReportOptions(strategies=("shuffled",)), "strategies"),
    (lambda: _stage("map").MapOptions(sample=-1), "sample"),
])
def test_the_output_stages_refuse_bad_options_when_made_naming_the_parameter(make, param):
    assert {"export", "group", "map", "report"} <= set(STAGES)
    test_bad_options_are_refused_when_made_naming_the_parameter(make, param)


def test_a_library_caller_catches_every_refusal_as_a_value_error():
    """A refusal is an InputError for the command line and a ValueError for a library
    caller's ``except ValueError`` (scikit-learn's convention)."""
    from clusterclip import make_sampler

    with pytest.raises(ValueError, match="clip") as e:
        _stage("sample").SampleOptions(num_samples=10, clip=0)
    assert isinstance(e.value, InputError)
    with pytest.raises(ValueError) as e:
        make_sampler(np.zeros(5, dtype=np.int64), num_samples=4, strategy="no-such-strategy")
    assert isinstance(e.value, InputError)


def _fit(**kw):
    from clusterclip.search.fit import FitRequest

    return FitRequest(**{"ratios": ("r.csv",), "metrics": ("m.csv",),
                         "objective": ("loss",), "out": "F", **kw})


def _propose(**kw):
    from clusterclip.search.propose import ProposeRequest

    return ProposeRequest(**{"workdir": "W", "runs": 4, "out": "P", **kw})


@pytest.mark.parametrize("make,param", [
    (lambda: _fit(objective=()), "objective"),
    (lambda: _fit(propose=-1), "propose"),
    (lambda: _fit(num_tokens=0, propose=2), "num_tokens"),
    (lambda: _fit(fmt="jsonl"), "propose"),
    (lambda: _fit(seed=-1), "seed"),
    (lambda: _propose(runs=0), "runs"),
    (lambda: _propose(runs=None, verify="FIT", seeds=1), "seeds"),
    (lambda: _propose(runs=None, verify="FIT", blend=True, tokenizer="T"), "blend"),
    (lambda: _propose(runs=None), "runs"),
    (lambda: _propose(verify="FIT"), "runs"),
    (lambda: _propose(num_tokens=0), "num_tokens"),
    (lambda: _fit(propose=10**6), "propose"),
    (lambda: _fit(verdict=True, ratios=("a.csv", "b.csv"), metrics=("m.csv", "n.csv")),
     "verdict"),
    (lambda: _fit(verdict=True, choose=True), "choose"),
    (lambda: _propose(num_samples=0), "num_samples"),
    (lambda: _propose(fmt="jsonl"), "fmt"),
    (lambda: _propose(split_target=True), "targets"),
    (lambda: _propose(tokenizer="T"), "tokenizer"),
    (lambda: _stage("embed").EmbedOptions(embedder="minilm", tune=10), "tune"),
    (lambda: _stage("embed").EmbedOptions(embedder="fast", tune=0, backend="onnx"), "backend"),
    (lambda: _stage("embed").EmbedOptions(precision="fp16"), "precision"),
    (lambda: _stage("embed").EmbedOptions(embedder="hf", max_length=0), "max_length"),
    (lambda: _stage("embed").EmbedOptions(embedder="model2vec"), "model"),
])
def test_the_requests_of_search_fit_and_propose_and_the_embedder_refuse_naming_the_parameter(
        make, param):
    """``search fit`` / ``search propose`` requests and the embedder's settings: refused
    when made, in their parameters' names (the command line shows its own options)."""
    test_bad_options_are_refused_when_made_naming_the_parameter(make, param)


def test_the_requests_are_keyword_only_and_frozen():
    from clusterclip.search.propose import ProposeRequest

    with pytest.raises(TypeError):
        ProposeRequest("W", 4, "P")  # type: ignore[misc]
    r = _fit()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.seed = 1  # type: ignore[misc]


def _message_text(node):
    """The literal text of a message expression; each interpolated value is ``{}``."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_message_text(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _message_text(node.left) + _message_text(node.right)
    if isinstance(node, ast.IfExp):
        return _message_text(node.body) + " " + _message_text(node.orelse)
    return "{}"


def _flag_worded_errors(root):
    """``(file, line, text)`` of each InputError raised in ``root`` whose message spells an
    option (``--name``) outside a quoted command line (`` `clusterclip report --workdir W` ``)."""
    import ast
    import re

    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            name = getattr(func, "id", getattr(func, "attr", None))
            if isinstance(node, ast.Call) and name == "InputError" and node.args:
                text = re.sub(r"`[^`]*`", "", _message_text(node.args[0]))
                if re.search(r"(?<![\w-])--[a-z]", text):
                    found.append((f.relative_to(root).as_posix(), node.lineno, text))
    return found


def test_no_error_below_the_command_line_names_a_flag(tmp_path):
    """Code below ``clusterclip.cli`` speaks of its parameters (``params=...``); only the
    command line turns them into its options. The scan itself finds a flag-worded one."""
    from pathlib import Path

    src = Path(clusterclip.stages.__file__).parents[1]
    found = [(f, line, text) for f, line, text in _flag_worded_errors(src)
             if not f.startswith("cli/")]
    assert found == []
    (tmp_path / "m.py").write_text('raise InputError(f"--seeds {n}: too few")\n'
                                   'raise InputError("run `clusterclip embed --workdir W`")\n')
    assert [line for _, line, _ in _flag_worded_errors(tmp_path)] == [1]


def _flag_labels(root):
    """``"file:line '--name'"`` for each option spelled as a value in the code of ``root``:
    a parameter's default (``option="--out"``) or an argument of a call
    (``refuse_protected(target, given, "--out")``): a label that ends up in a message."""
    import ast
    import re

    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            values = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                values = node.args.defaults + [d for d in node.args.kw_defaults if d]
            elif isinstance(node, ast.Call):
                values = node.args + [k.value for k in node.keywords]
            for v in values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str) \
                        and re.fullmatch(r"--[a-z][a-z0-9-]*", v.value):
                    found.append(f"{f.relative_to(root).as_posix()}:{v.lineno} {v.value!r}")
    return found


def test_no_option_label_is_passed_around_below_the_command_line(tmp_path):
    """Issue 39: the output checks (``clusterclip.storage``) name the output by its
    parameter (``out``, listed in the error's ``params``) unless the command line hands
    them its own option; the stages, the work directory and ``storage`` pass no option's
    label; ``storage``, below every command, spells no option at all (outside a quoted
    command line). The scans find what they look for."""
    import ast
    import re
    from pathlib import Path

    src = Path(clusterclip.stages.__file__).parents[1]
    assert [h for h in _flag_labels(src) if not h.startswith("cli/")] == []
    spelled = []
    for f in sorted((src / "storage").rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr)}
        spelled += [f"{f.name}:{n.lineno}" for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    and id(n) not in docs
                    and re.search(r"(?<![\w-])--[a-z]", re.sub(r"`[^`]*`", "", n.value))]
    assert spelled == []
    (tmp_path / "m.py").write_text('def f(out, option="--out"):\n'
                                   '    g(out, "--keep-one", label="--x", text="a --b")\n')
    assert _flag_labels(tmp_path) == ["m.py:1 '--out'", "m.py:2 '--keep-one'",
                                      "m.py:2 '--x'"]


def _flag_texts(root):
    """``"file --name"`` for each option spelled in a text of the code of ``root`` outside
    the command line (``cli/``): a string or f-string that is not a docstring, the option
    outside a quoted command line (`` `clusterclip report --map-sample 0` ``) and the text
    not itself a command line (``"clusterclip run --num-samples"``)."""
    import ast
    import re

    def text(n):
        return n.value if isinstance(n, ast.Constant) else "".join(
            v.value if isinstance(v, ast.Constant) else "{}" for v in n.values)

    found = []
    for f in sorted(root.rglob("*.py")):
        name = f.relative_to(root).as_posix()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                  ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
                 for v in n.values}
        for n in ast.walk(tree):
            if name.startswith("cli/") or id(n) in docs | parts or not (
                    isinstance(n, ast.JoinedStr) or isinstance(n, ast.Constant)
                    and isinstance(n.value, str)):
                continue
            t = re.sub(r"`[^`]*`", "", text(n))
            if not t.startswith("clusterclip "):
                found += [f"{name} {m}" for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", t)]
    return sorted(set(found))


#: Options spelled in texts below the command line, each for a reason: advice written into
#: a result for the user to act on (the option spelled once, as data), or another program's
#: options. An error is worded by parameter instead (``InputError(params=...)``). Exact: an
#: entry the scan no longer finds fails the test.
FLAG_TEXTS_LEFT = {
    "experiment/verdict.py --seeds": "SEEDS_OPTION: the verdict's advice (Run with --seeds 6)",
    "experiment/verdict.py --strategies": "the verdict's advice: rerun with random among them",
    "search/output.py --test-seeds": "TEST_SEEDS_OPTION: the search verdict's advice",
    "sampling/clip.py --choose-clip": "the report's choose-R advice: try larger R",
    "search/verify.py --verify": "the command's name, the label of its exports",
    "export/atlas.py --x": "embedding-atlas's own options, in the command it prints",
    "export/atlas.py --y": "embedding-atlas's own options, in the command it prints",
    "export/atlas.py --text": "embedding-atlas's own options, in the command it prints",
    "kernels.py --inplace": "setup.py's option, in the rebuild advice",
}


def test_no_text_below_the_command_line_spells_an_option_but_the_advice_listed(tmp_path):
    """Issue 39: code below ``clusterclip.cli`` speaks of parameters; an option's name
    appears in its texts only in a quoted command line or as listed advice. The scan finds
    a planted one, and passes docstrings, quoted and whole command lines."""
    from pathlib import Path

    src = Path(clusterclip.stages.__file__).parents[1]
    assert _flag_texts(src) == sorted(FLAG_TEXTS_LEFT)
    (tmp_path / "m.py").write_text(
        '"""Under --seeds auto."""\n'
        'log(f"{n} threads may run slower than --threads 1")\n'
        'note = "no map: `clusterclip report --map-sample 0`"\n'
        'cmd = f"clusterclip run --num-samples {t}"\n')
    assert _flag_texts(tmp_path) == ["m.py --threads"]


def test_an_output_refusal_names_the_parameter_and_the_command_line_its_option(tmp_path):
    """A refusal of ``storage.outputs`` speaks of ``out`` (and of ``overwrite`` where it
    suggests it), listed in its params; the command line shows them as its options."""
    from clusterclip.cli import _flags, build_parser
    from clusterclip.errors import flag_message
    from clusterclip.stages.dedup import keep_one
    from clusterclip.storage.outputs import check_output_dir

    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("a user's file")
    with pytest.raises(InputError) as e:
        check_output_dir(out, "export")
    assert str(e.value).startswith(f"out {out}: exists, is not empty")
    assert set(e.value.params) == {"out", "overwrite"} and "--" not in str(e.value)
    # the dedup stage's folder is keep_one's out, which `clusterclip dedup` sets with
    # --keep-one: refused before any work, in the command's own options
    with pytest.raises(InputError) as e:
        keep_one(Workdir(tmp_path / "W"), out)
    assert "--" not in str(e.value) and (out / "mine.txt").read_text() == "a user's file"
    sub = next(a for a in build_parser("dedup")._actions if a.dest == "command")
    shown = flag_message(e.value, _flags(sub.choices["dedup"], "dedup"))
    assert shown.startswith(f"--keep-one {out}: exists, is not empty")
    assert "(--overwrite never replaces" in shown


def test_the_command_line_shows_the_requests_errors_in_its_own_options(tmp_path, capsys):
    """A ``search propose`` / ``search fit`` refusal, raised in parameters, reaches the user
    as the options of the subcommand they ran."""
    from clusterclip.cli import main

    (tmp_path / "W").mkdir()
    for f in ("r.csv", "m.csv"):
        (tmp_path / f).write_text("run,a\nx,1\n")
    cases = [
        (["search", "propose", "--workdir", str(tmp_path / "W"), "--out", str(tmp_path / "P"),
          "--runs", "2", "--split-target"], "--split-target: give --target ("),
        (["search", "fit", "--ratios", str(tmp_path / "r.csv"), "--metrics",
          str(tmp_path / "m.csv"), "--objective", "a", "--out", str(tmp_path / "F"),
          "--format", "parquet"], "--format parquet: exports the proposals; give --propose N"),
        (["search", "fit", "--verdict", "--ratios", str(tmp_path / "r.csv"), "--metrics",
          str(tmp_path / "m.csv"), "--objective", "a", "--out", str(tmp_path / "F"),
          "--format", "parquet"], "--format does not apply with --verdict"),
        (["search", "propose", "--workdir", str(tmp_path / "W"), "--out", str(tmp_path / "P"),
          "--runs", "0"], "--runs: 0 is out of range (an integer in 1 .. "),
    ]
    for argv, shown in cases:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert shown in err and len(err.strip().splitlines()) == 1, err


def test_the_kmeans_settings_are_declared_once():
    """KMeans, the stage options and the command line take the settings of
    KMeansSettings: the same names and defaults, and the options read back whole."""
    import argparse

    from clusterclip.cli._options import add_kmeans_options, kmeans_options
    from clusterclip.clustering.kmeans import KMeans, KMeansSettings

    names = [f.name for f in dataclasses.fields(KMeansSettings)]
    init = inspect.signature(KMeans.__init__).parameters
    assert {n: init[n].default for n in names} == KMeansSettings().kmeans()
    assert issubclass(_stage("cluster").KMeansOptions, KMeansSettings)
    p = argparse.ArgumentParser()
    add_kmeans_options(p)
    assert kmeans_options(p.parse_args([])) == KMeansSettings().kmeans()
    given = kmeans_options(p.parse_args(["--iters", "7", "--n-init", "2", "--tol", "0.5",
                                         "--metric", "euclidean", "--backend", "faiss",
                                         "--seed", "3", "--kmeans-device", "cuda:1",
                                         "--chunk-rows", "9"]))
    assert given == KMeansSettings(max_iter=7, n_init=2, tol=0.5, metric="euclidean",
                                   backend="faiss", seed=3, device="cuda:1",
                                   chunk_rows=9).kmeans()


# -- one way to declare options ---------------------------------------------------------

#: Frozen dataclasses named like options that are not checked when made, and why.
NOT_OPTIONS = {
    "ModelConfig": "a preset's shape: chosen by name, checked by ExperimentConfig.with_model",
    "TrainConfig": "the presets' optimisation settings, never set by a user",
    "SearchOptions": "the rounds of a SearchConfig, made from it once checked",
}


def _option_classes():
    """Every options, request and configuration class: each stage's options (what its
    ``run`` takes, and every class of a stage module named ``*Options``), the requests of
    ``search fit`` and ``search propose``, the k-means settings, and the experiment's and
    the search's configurations."""
    from clusterclip.cli._demo import DemoConfig
    from clusterclip.clustering.kmeans import KMeansSettings
    from clusterclip.lm.runconfig import ExperimentConfig
    from clusterclip.sampling.spec import ScheduleRequest, ScheduleSettings
    from clusterclip.search.fit import FitRequest
    from clusterclip.search.offline import SearchConfig
    from clusterclip.search.propose import ProposeRequest

    found = {ExperimentConfig, SearchConfig, FitRequest, ProposeRequest, KMeansSettings,
             DemoConfig, ScheduleSettings, ScheduleRequest}
    for name in STAGES:
        module = _stage(name)
        found.add(typing.get_type_hints(module.run)["options"])
        found |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                  if c.__module__ == module.__name__ and c.__name__.endswith("Options")}
    return sorted(found, key=lambda c: c.__name__)


def _named_like_options():
    """The names of every dataclass of the package named ``*Options``, ``*Request``,
    ``*Config`` or ``*Settings`` (read from the source, nothing imported)."""
    import ast
    from pathlib import Path

    root = Path(clusterclip.stages.__file__).parents[1]
    return {c.name for f in sorted(root.rglob("*.py"))
            for c in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
            if isinstance(c, ast.ClassDef)
            and c.name.endswith(("Options", "Request", "Config", "Settings"))
            and any("dataclass" in ast.unparse(d) for d in c.decorator_list)}


def test_every_options_class_is_frozen_keyword_only_and_checked_when_made():
    """One way to declare options: a frozen, keyword-only dataclass whose ``__post_init__``
    checks it (no ``validate()`` or ``check()`` to forget to call)."""
    classes = _option_classes()
    assert {"ExperimentConfig", "SearchConfig", "FitRequest", "ProposeRequest",
            "KMeansSettings", "SearchStageOptions", "ReportOptions", "SweepOptions",
            "RunOptions"} <= {c.__name__ for c in classes}
    for c in classes:
        assert dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen, c
        assert all(f.kw_only for f in dataclasses.fields(c) if f.init), c
        assert "__post_init__" in vars(c) or any(
            "__post_init__" in vars(base) for base in c.__mro__[1:-1]), c
        assert not {"validate", "check"} & {n for k in c.__mro__ for n in vars(k)}, c
    missed = _named_like_options() - {c.__name__ for c in classes}
    assert missed == set(NOT_OPTIONS), missed


def test_no_options_class_defines_a_separate_check_method():
    """An AST scan, so that a ``def validate`` or ``def check`` on any class named like
    options (``*Options``, ``*Request``, ``*Config``, ``*Settings``) is found even before
    it is imported; the scan itself finds one."""
    import ast
    from pathlib import Path

    def found(text):
        return [(c.name, f.name) for c in ast.walk(ast.parse(text))
                if isinstance(c, ast.ClassDef)
                and c.name.endswith(("Options", "Request", "Config", "Settings"))
                for f in c.body if isinstance(f, ast.FunctionDef)
                and f.name in ("validate", "check")]

    root = Path(clusterclip.stages.__file__).parents[1]
    assert [hit for f in sorted(root.rglob("*.py"))
            for hit in found(f.read_text(encoding="utf-8"))] == []
    assert found("class AOptions:\n    def validate(self):\n        pass\n") == [
        ("AOptions", "validate")]


@pytest.mark.parametrize("make,param", [
    (lambda: _experiment(seeds=0), "seeds"),
    (lambda: _experiment(strategies=()), "strategies"),
    (lambda: _experiment(strategies=("random", "random")), "strategies"),
    (lambda: _experiment(epochs=float("nan")), "epochs"),
    (lambda: _experiment(tokens=1), "tokens"),
    (lambda: _experiment(max_docs=3), "max_docs"),
    (lambda: _experiment(max_doc_tokens=10**6), "max_doc_tokens"),
    (lambda: _experiment(balance_by="bytes"), "balance_by"),
    (lambda: _experiment(primary="paced:macro", strategies=("paced",)), "primary"),
    (lambda: _search(runs=0), "runs"),
    (lambda: _search(runs=2, rounds=3), "rounds"),
    (lambda: _search(test_seeds="sometimes"), "test_seeds"),
    (lambda: _search(seed=-1), "seed"),
    (lambda: _search(verify_model="tiny"), "verify_model"),
    (lambda: _search(model="huge"), "model"),
    (lambda: _kmeans(n_init=0), "n_init"),
    (lambda: _experiment(seeds=None), "seeds"),  # None only where the annotation takes it
    (lambda: _stage("report").ReportOptions(clip=None), "clip"),
    (lambda: _kmeans(metric="manhattan"), "metric"),
    (lambda: _kmeans(tol=float("inf")), "tol"),
    (lambda: _stage("cluster").KMeansOptions(chunk_rows=0), "chunk_rows"),
    (lambda: _stage("cluster").SweepOptions(ks=(4, 0, 8)), "ks"),
    (lambda: _stage("cluster").SweepOptions(ks=[4], silhouette_sample=2), "silhouette_sample"),
    (lambda: _stage("cluster").ClusterOptions(n_clusters=0), "n_clusters"),
    (lambda: _stage("report").ReportOptions(clips=(4, 2**20 + 1)), "clips"),
    (lambda: _stage("report").ReportOptions(clips=()), "clips"),
    (lambda: _schedule(world_size=0), "world_size"),
    (lambda: _schedule(rank=2, world_size=2), "rank"),
    (lambda: _schedule(consumed_samples=-1), "consumed_samples"),
    (lambda: _schedule(alpha=float("nan")), "alpha"),
    (lambda: _stage("sample").SampleOptions(num_tokens=0), "num_tokens"),
])
def test_the_configurations_and_kmeans_settings_refuse_when_made(make, param):
    """What ``.validate()`` checked, now when the configuration is made (and again when
    :func:`dataclasses.replace` makes a changed one); the k-means settings as ``fit``
    checks them."""
    test_bad_options_are_refused_when_made_naming_the_parameter(make, param)


def _experiment(**kw):
    from clusterclip.lm.runconfig import ExperimentConfig

    return ExperimentConfig(**kw)


def _schedule(**kw):
    from clusterclip.sampling.spec import ScheduleRequest

    return ScheduleRequest(**{"num_samples": 10, **kw})


def _kmeans(**kw):
    from clusterclip.clustering.kmeans import KMeansSettings

    return KMeansSettings(**kw)


def _search(**kw):
    from clusterclip.search.offline import SearchConfig

    return SearchConfig(**kw)


def test_a_changed_configuration_is_checked_again():
    from clusterclip.lm.runconfig import ExperimentConfig
    from clusterclip.search.offline import SearchConfig

    good = ExperimentConfig.quick()
    with pytest.raises(InputError) as e:
        dataclasses.replace(good, clip=0)
    assert e.value.params == ("clip",)
    with pytest.raises(InputError) as e:
        dataclasses.replace(SearchConfig(), rounds=SearchConfig().runs + 1)
    assert e.value.params == ("rounds", "runs")
    with pytest.raises(TypeError):
        ExperimentConfig(("random",))  # type: ignore[misc]


def _parsers(parser, prefix=""):
    """(command, parser) of every command and subcommand (``search fit``)."""
    import argparse

    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield f"{prefix} {name}".strip(), sub
                yield from _parsers(sub, f"{prefix} {name}".strip())


def _outside(kind):
    """Texts of numbers just outside the range ``kind`` shows in --help."""
    lo, hi = kind.bounds
    if kind.__name__ == "real":
        return [repr(float(lo)) if kind.range_text.startswith("(") else repr(lo - 1.0),
                repr(hi + 1.0)]
    return [str(lo - 1), str(hi + 1)]


def test_the_command_line_only_parses_the_numbers_the_options_check():
    """A number's range is declared once, on the options field that holds it: the
    argparse type of its option parses any number (its range is the field's, shown in
    --help), and making the options refuses one outside it: no command's argparse type
    refuses a number for its range (list types included: ``cluster --clusters``)."""
    import argparse

    from clusterclip.cli import build_parser

    still = set()
    for command, parser in _parsers(build_parser()):
        for a in parser._actions:
            if not hasattr(a.type, "bounds"):
                continue
            for text in _outside(a.type):
                try:
                    a.type(text)
                except argparse.ArgumentTypeError:
                    still.add(command.split()[0])
    assert still == set()


def test_building_the_command_line_imports_no_options_class_it_parses_for():
    """The command line's parser names the options classes that declare its ranges; it
    imports them only when an option is given or the help shown."""
    import subprocess
    import sys

    from _helpers import child_env

    code = ("import sys; from clusterclip.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m in {'clusterclip.stages.embed', "
            "'clusterclip.stages.search', 'clusterclip.stages.experiment', "
            "'clusterclip.search.fit', 'clusterclip.stages.dedup', 'clusterclip.stages.group', "
            "'clusterclip.stages.cluster', 'clusterclip.stages.sample', "
            "'clusterclip.report.build'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.stdout.strip() == "[]", (r.stdout, r.stderr)


def test_the_help_of_search_fit_and_propose_shows_the_ranges_their_options_declare():
    from clusterclip.cli import build_parser

    subs = dict(_parsers(build_parser("search")))
    for command, option, shown in (("search fit", "--propose", "0 .. 100000"),
                                   ("search propose", "--runs", "1 .. 100000"),
                                   ("search", "--rounds", "1 .. 64")):
        a = subs[command]._option_string_actions[option]
        assert "(range: %(range_text)s)" in a.help and str(a.range_text) == shown
        assert shown in " ".join(subs[command].format_help().split())


@settings(max_examples=200, deadline=None)
@given(values=st.one_of(st.lists(st.integers(-5, 15), max_size=6).map(tuple),
                        st.lists(st.integers(-5, 15), max_size=6)),
       lo=st.integers(-3, 5), span=st.integers(0, 8))
def test_a_list_field_is_checked_element_by_element(values, lo, span):
    """``ranged(..., each=True)``: a list or tuple of at least one number, each in range,
    else InputError naming the field and the first value outside (the reference: a loop)."""
    from clusterclip.limits import check_ranges, ranged

    hi = lo + span

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Options:
        ks: tuple[int, ...] = ranged(lo, hi, each=True)

        def __post_init__(self):
            check_ranges(self)

    bad = [v for v in values if not lo <= v <= hi]
    if values and not bad:
        assert Options(ks=values).ks == values
        assert Options(ks=np.asarray(values)).ks.tolist() == list(values)
        assert Options(ks=range(lo, hi + 1)).ks == range(lo, hi + 1)
        return
    with pytest.raises(InputError) as e:
        Options(ks=values)
    assert e.value.params == ("ks",) and str(e.value).startswith("ks: ")
    with pytest.raises(InputError, match="ks: expected a list"):
        Options(ks=lo)  # a number, not a list of them
    if bad:
        assert f"{bad[0]} is out of range (an integer in {lo} .. {hi})" in str(e.value)


def test_the_list_options_only_parse_and_the_command_shows_the_element(tmp_path, capsys):
    """``cluster --clusters`` and ``report --choose-clip`` parse any integers; the options
    refuse the one out of range, shown in the user's option, one line, exit 2, before
    anything is read or written (``assign --chunk-rows`` too)."""
    from clusterclip.cli import build_parser, main

    subs = dict(_parsers(build_parser()))
    assert subs["cluster"]._option_string_actions["--clusters"].type("3,0") == [3, 0]
    choose = subs["report"]._option_string_actions["--choose-clip"].type
    assert choose("0-2") == [0, 1, 2] and choose(str(2**40)) == [2**40]
    W = tmp_path / "W"
    for argv, shown in (
            (["cluster", "--workdir", str(W), "--sweep", "--clusters", "8,0"],
             "clusterclip cluster: error: --clusters: 0 is out of range (an integer in 1 .. "),
            (["report", "--workdir", str(W), "--choose-clip", f"2,{2**20 + 1}"],
             f"clusterclip report: error: --choose-clip: {2**20 + 1} is out of range"),
            (["assign", "--centroids", str(tmp_path / "c.npy"), "--embeddings",
              str(tmp_path / "e.npy"), "--out", str(tmp_path / "O"), "--chunk-rows", "0"],
             "clusterclip assign: error: --chunk-rows: 0 is out of range")):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(shown) and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
