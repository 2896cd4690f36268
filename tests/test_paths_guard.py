"""Every input is sacred (issue 16): one guard over every path a command reads.

Each command declares its path options once (``clusterclip.cli._paths.add_path``); no
output (``--out``, ``--keep-one``, ``--summary-json``) may be, contain or lie inside an
input, with or without ``--overwrite``. The property is enumerated for every command,
every input option and every output option, with the output at, above and below that
input; a before/after snapshot of the file tree shows that nothing the tool did not
create changed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _helpers import tokenizer_folder

from clusterclip.cli import build_parser, main
from clusterclip.cli._paths import NOT_PATHS, OUTPUT_ROLES, path_actions
from clusterclip.storage.outputs import OVERWRITE_COMMANDS


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (hidden ones too)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def run_main(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def commands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions if a.dest == "command").choices


@pytest.fixture(scope="module")
def world(tmp_path_factory, pydocs_path):
    """A work directory of embed + cluster + dedup + sample (60 real documents, fast
    embedder), a tokenizer folder, and the side inputs of ``sample``."""
    root = tmp_path_factory.mktemp("world")
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        recs = [json.loads(next(f)) for _ in range(60)]
    corpus = root / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": r["text"][:300], "label": r["label"]}) + "\n"
                              for r in recs), encoding="utf-8")
    w = root / "W"
    assert main(["run", str(corpus), "--workdir", str(w), "--clusters", "3", "--embedder",
                 "fast", "--num-samples", "100", "--dedup"]) == 0
    tok = tokenizer_folder(root / "tok")
    np.save(root / "weights.npy", np.ones(3))
    np.save(root / "tokens.npy", np.full(60, 7, np.int64))
    from clusterclip.sampling.mixture import Mixture, write_mixture

    write_mixture(root / "mixture.json", Mixture((1.0, 2.0, 1.0), 4, "paced", "test"))
    return {"root": root, "W": w, "corpus": corpus, "tok": tok}


def _base(world) -> dict[str, dict[str, str]]:
    """A complete invocation of each command with outputs (option -> value); outputs are
    filled in by the cases."""
    w = world["W"]
    return {
        "assign": {"--centroids": w / "centroids.npy", "--embeddings": w / "embeddings.npy",
                   "--valid": w / "valid.npy"},
        "cluster": {"--embeddings": w / "embeddings.npy", "--valid": w / "valid.npy",
                    "--clusters": "2"},
        "dedup": {"--workdir": w, "--no-progress": None},
        "group": {"--workdir": w},
        "sample": {"--labels": w / "labels.npy", "--num-samples": "50",
                   "--cluster-weights": world["root"] / "weights.npy",
                   "--tokens": world["root"] / "tokens.npy", "--groups": w / "groups.npy",
                   "--mixture": world["root"] / "mixture.json",
                   "--tokenizer": world["tok"], "--no-progress": None},
        "export": {"--workdir": w, "--format": "megatron", "--tokenizer": world["tok"],
                   "--schedule": w / "schedule.npy"},
        "report": {"--workdir": w, "--schedule": w / "schedule.npy", "--strategies": "random",
                   "--choose-clip": "1-3"},
        "demo": {"--input": world["corpus"], "--embedder": "fast", "--experiment": "none",
                 "--clusters": "3"},
    }


# Options dropped when the case's input is the work directory: argparse groups that exclude
# each other, and what would only slow down the one kind of case that runs (outputs in W).
DROPPED = {("cluster", "--workdir"): ("--embeddings", "--valid"),
           ("export", "--workdir"): ("--tokenizer",)}


def _cases():
    for name, sub in commands().items():
        acts = path_actions(sub)
        outs = [a for a in acts if a.path_role in OUTPUT_ROLES]
        ins = [a for a in acts if a.path_role in ("input", "workdir") and a.option_strings]
        for o in outs:
            for i in ins:
                for where in ("at", "above", "below"):
                    yield name, i.option_strings[0], o.option_strings[0], where


CASES = list(_cases())


def test_the_cases_cover_every_output_and_input_option_of_every_command():
    got = {(c, o) for c, _, o, _ in CASES} | {(c, i) for c, i, _, _ in CASES}
    assert {("export", "--tokenizer"), ("report", "--schedule"), ("dedup", "--keep-one"),
            ("sample", "--mixture"),
            ("sample", "--summary-json"), ("sample", "--groups"), ("demo", "--input"),
            ("assign", "--centroids"), ("cluster", "--valid")} <= got
    assert len(CASES) >= 70


@pytest.mark.parametrize("command,given,output,where", CASES,
                         ids=[f"{c}{i}->{o}-{w}" for c, i, o, w in CASES])
def test_no_output_is_at_above_or_below_an_input(world, tmp_path, capsys, command, given,
                                                  output, where):
    base = dict(_base(world)[command])
    for other in DROPPED.get((command, given), ()):
        base.pop(other)
    if command == "sample":  # --cluster-weights and --mixture exclude each other
        base.pop("--cluster-weights" if given == "--mixture" else "--mixture")
    if (command, given) == ("export", "--workdir"):
        base["--format"] = "parquet"
    case = tmp_path / "case"
    (case / "in").mkdir(parents=True)
    (case / "in" / "keep.txt").write_text("the user's")
    original = Path(base.get(given, world["W"] if given == "--workdir" else ""))
    placed = case / "in" / original.name
    (shutil.copytree if original.is_dir() else shutil.copy)(original, placed)
    base[given] = placed
    target = {"at": placed, "above": placed.parent, "below": placed / "sub"}[where]
    if command == "sample" and output != "--out":  # --out is required
        base["--out"] = case / "elsewhere.npy"
    base[output] = target
    # W/sub too: nothing but the parts the command owns may lie inside W (issue 35)
    for overwrite in [False, True] if command in OVERWRITE_COMMANDS else [False]:
        before = tree(case)
        args = [x for k, v in base.items() for x in ([k] if v is None else [k, v])]
        rc, err = run_main(capsys, command, *args, *(["--overwrite"] if overwrite else []))
        after = tree(case)
        assert rc == 2, err  # refused before any work, naming the input
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"{output} {target}" in lines[0], err
        assert after == before
        assert not [p for p in case.rglob("*.tmp") if ".clusterclip-" in p.name]
        assert not (case / "in" / ".lock").exists()


def test_every_string_option_is_a_declared_path_or_known_not_to_be_one():
    """A new path option is protected by construction: it cannot be added as a plain
    string option without this test naming it."""
    for name, sub in commands().items():
        declared = {id(a) for a in path_actions(sub)}
        for a in sub._actions:
            plain = (a.type in (None, str) and a.choices is None and a.nargs != 0
                     and not isinstance(a, (argparse._StoreTrueAction, argparse._HelpAction,
                                            argparse._StoreFalseAction)))
            if plain and id(a) not in declared:
                assert a.option_strings and a.option_strings[0] in NOT_PATHS, (name, a.dest)


# -- the data-loss cases of the issue, one by one ------------------------------------------
def test_export_never_removes_the_tokenizer_it_reads(world, tmp_path, capsys):
    proj = tmp_path / "proj"
    shutil.copytree(world["tok"], proj / "tok")
    before = tree(proj)
    rc, err = run_main(capsys, "export", "--workdir", world["W"], "--format", "megatron",
                       "--tokenizer", proj / "tok", "--out", proj, "--overwrite")
    assert rc == 2 and "contains the --tokenizer input" in err
    assert tree(proj) == before
    # an earlier export of ours, in which the user then put the tokenizer: no --overwrite
    e = tmp_path / "E"
    assert main(["export", "--workdir", str(world["W"]), "--format", "parquet",
                 "--out", str(e)]) == 0
    shutil.copytree(world["tok"], e / "tok")
    before = tree(e)
    rc, err = run_main(capsys, "export", "--workdir", world["W"], "--format", "megatron",
                       "--tokenizer", e / "tok", "--out", e)
    assert rc == 2 and "contains the --tokenizer input" in err
    assert tree(e) == before


def test_export_api_refuses_an_out_holding_the_tokenizer(world, tmp_path):
    from clusterclip.errors import InputError
    from clusterclip.stages import export
    from clusterclip.workdir import Workdir

    proj = tmp_path / "proj"
    shutil.copytree(world["tok"], proj / "tok")
    before = tree(proj)
    with pytest.raises(InputError, match="contains the tokenizer"):
        export.run(Workdir(world["W"], create=False), export.ExportOptions(
            out=proj, format="megatron", tokenizer=str(proj / "tok"), overwrite=True))
    assert tree(proj) == before


def test_report_never_removes_the_schedule_it_reads(world, tmp_path, capsys):
    from clusterclip.storage.records import write_marker

    w = world["W"]
    r = tmp_path / "R"  # an earlier report's folder (its marker), now holding the schedule
    r.mkdir()
    write_marker(r, "report")
    shutil.copy(w / "schedule.npy", r / "s.npy")
    before = tree(r)
    rc, err = run_main(capsys, "report", "--workdir", w, "--schedule", r / "s.npy",
                       "--out", r)  # an earlier report: replaced without --overwrite
    assert rc == 2 and "contains the --schedule input" in err
    assert tree(r) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(w / "schedule.npy", mine / "s.npy")
    rc, err = run_main(capsys, "report", "--workdir", w, "--schedule", mine / "s.npy",
                       "--out", mine, "--overwrite")
    assert rc == 2 and "contains the --schedule input" in err
    assert (mine / "s.npy").read_bytes() == (w / "schedule.npy").read_bytes()


def test_report_api_refuses_a_schedule_inside_the_default_report_folder(world, tmp_path):
    from clusterclip.errors import InputError
    from clusterclip.stages import report
    from clusterclip.workdir import Workdir

    w = tmp_path / "W"
    shutil.copytree(world["W"], w)
    (w / "report").mkdir()
    shutil.copy(w / "schedule.npy", w / "report" / "s.npy")
    with pytest.raises(InputError, match="contains the schedule"):
        report.run(Workdir(w, create=False),
                   report.ReportOptions(schedule=w / "report" / "s.npy", overwrite=True))
    assert (w / "report" / "s.npy").is_file()


def test_an_empty_path_is_refused_and_creates_nothing(world, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["group", "--workdir", "", "--out", "g"],
                 ["run", str(world["corpus"]), "--workdir", "", "--clusters", "2"],
                 ["sample", "--labels", str(world["W"] / "labels.npy"), "--num-samples", "5",
                  "--out", ""]):
        rc, err = run_main(capsys, *args)
        assert rc == 2 and "'': an empty path" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_part_of_w_read_by_one_command_may_be_rewritten_by_its_own_stage(tmp_path):
    """`experiment --strategies ...,mixture` reads W/search/mixture.json (the manifest then
    knows it as an input): a later `search` may still replace W/search, while every other
    command's output stays refused there, and an input outside W stays protected."""
    from clusterclip.cli._paths import protected_paths
    from clusterclip.workdir import Workdir

    w = Workdir(tmp_path / "W")
    (w.root / "search").mkdir()
    mixture = w.root / "search" / "mixture.json"
    mixture.write_text("{}")
    outside = tmp_path / "corpus.jsonl"
    outside.write_text("{}\n")
    w.input_record(mixture)
    w.input_record(outside)
    w.save()
    for command in ("search", "report"):
        args = build_parser().parse_args([command, "--workdir", str(w.root)])
        for parts in (False, True):  # what the stages' own writes check; the guard's view
            found = protected_paths(args._parser, args, parts=parts)
            inputs = {p.resolve() for p, what, _ in found if what == "the input file"}
            assert inputs == {outside.resolve()}
        # W/search stays out of reach of every output option, as a part of W
        parts_of_w = {p.resolve() for p, what, _ in protected_paths(args._parser, args)}
        assert (w.root / "search").resolve() in parts_of_w
