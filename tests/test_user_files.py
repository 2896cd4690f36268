"""A user's files are never removed or replaced (issue 25).

For every command that writes an output folder (``--out``, ``--keep-one``) and every
folder the tool owns in the work directory (``W/report``, ``W/map``, ``W/sweep``,
``W/search``, ``W/experiment``): files of the user's planted at random depths, also
inside the folders the command made, survive two reruns (without and with
``--overwrite``) byte for byte, while the command's own files are replaced. One small
work directory is built per module (hand-placed files: no embedding, so it is cheap).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from _report_workdir import make_report_workdir
from _user_files import TAMPERS, assert_kept, plant, plants, tamper, unplant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterclip.cli import main

SEEDS = itertools.count(1)
REPORT = ["--no-schedule", "--strategies", "random", "--map-sample", "60"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, pydocs_path) -> Path:
    root = tmp_path_factory.mktemp("userfiles")
    w = root / "w"
    w.mkdir()
    make_report_workdir(w, pydocs_path)
    labels = np.load(w / "labels.npy")
    np.save(w / "schedule.npy", np.flatnonzero(labels >= 0)[:300].astype(np.int64))
    assert quiet(["report", "--workdir", w, *REPORT]) == (0, "")
    return w


def quiet(argv: list[str]) -> tuple[int, str]:
    """``main(argv)``'s exit status and its error lines (progress bars left out)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, "\n".join(x for x in err.getvalue().splitlines() if "error" in x)


# name -> (argv for (W, D), the folder written, has --overwrite)
COMMANDS = {
    "export-parquet": (lambda w, d: ["export", "--workdir", w, "--format", "parquet",
                                     "--out", d, "--rows-per-shard", "100"], "D", True),
    "export-hf": (lambda w, d: ["export", "--workdir", w, "--format", "hf", "--out", d],
                  "D", True),
    "export-atlas": (lambda w, d: ["export", "--workdir", w, "--format", "atlas",
                                   "--out", d], "D", True),
    "group": (lambda w, d: ["group", "--workdir", w, "--out", d], "D", True),
    "report-out": (lambda w, d: ["report", "--workdir", w, "--out", d, *REPORT], "D", True),
    "report": (lambda w, d: ["report", "--workdir", w, *REPORT], "W/report", True),
    "map": (lambda w, d: ["report", "--workdir", w, *REPORT[:-1], 40 + next(SEEDS) % 20],
            "W/map", True),  # a new map each run
    "dedup-keep-one": (lambda w, d: ["dedup", "--workdir", w, "--keep-one", d,
                                     "--no-progress"], "D", True),
    "sweep": (lambda w, d: ["cluster", "--workdir", w, "--clusters", "2,3", "--sweep",
                            "--sweep-only"], "W/sweep", False),
}

@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=plants)
def test_every_planted_file_survives_reruns(workdir, tmp_path, command, spec):
    make, where, overwrite = COMMANDS[command]
    d = tmp_path / "out"
    folder = d if where == "D" else workdir / where.split("/", 1)[1]
    if not folder.exists():
        assert quiet(make(workdir, d)) == (0, ""), command
    planted = plant(folder, spec)
    try:
        for extra in ([], ["--overwrite"] if overwrite else []):
            assert quiet([*make(workdir, d), *extra]) == (0, ""), (command, extra)
            assert_kept(folder, planted)
    finally:  # the next example starts from our files alone
        unplant(planted)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(TAMPERS), spec=plants)
def test_a_tampered_record_is_refused_and_every_planted_file_survives(
        workdir, tmp_path_factory, command, kind, spec):
    """A record whose entries climb out of the folder, are absolute, pass through a link,
    list the user's own files, or are copied, older or garbage: every rerun, with and
    without --overwrite, is refused in one line naming the entry, and every planted file
    (inside the folder and out) keeps its bytes (issue 35)."""
    tampered_rerun(workdir, tmp_path_factory.mktemp("tamper"), command, kind, spec)


@pytest.mark.parametrize("command,kind", [("export-parquet", k) for k in TAMPERS] + [
    ("group", "dotdot"), ("report", "climbing"), ("map", "symlinked"), ("sweep", "absolute"),
    ("dedup-keep-one", "copied")])
def test_every_tampering_is_refused(workdir, tmp_path, command, kind):
    """Each way of tampering on an export's record, and one on each kind of folder."""
    tampered_rerun(workdir, tmp_path, command, kind, [(0, ["a"], "x", b"mine")])


def tampered_rerun(workdir: Path, base: Path, command: str, kind: str, spec: list) -> None:
    """Tamper with the record of ``command``'s folder as ``kind`` says, plant ``spec``,
    rerun (and with --overwrite): refused in one line, every planted file as it was; then
    put the folder back as it was."""
    import shutil

    make, where, overwrite = COMMANDS[command]
    d = base / "out"
    folder = d if where == "D" else workdir / where.split("/", 1)[1]
    if not folder.exists():
        assert quiet(make(workdir, d)) == (0, ""), command
    keep = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    planted = plant(folder, spec)
    say, more = tamper(folder, kind, base / "user")
    every = {**planted, **more}
    try:
        for extra in ([], ["--overwrite"] if overwrite else []):
            rc, err = quiet([*make(workdir, d), *extra])
            assert rc == 2 and len(err.splitlines()) == 1 and say in err, (command, kind, err)
            for path, content in every.items():
                assert path.read_bytes() == content, path
    finally:  # the next example starts from our files alone
        if (folder / "linkdir").is_symlink():
            (folder / "linkdir").unlink()
        unplant(planted)
        for p in [p for p in folder.rglob("*") if p.is_file() and p not in keep]:
            p.unlink()
        for p, content in keep.items():
            p.write_bytes(content)
        shutil.rmtree(base / "user")


def test_sample_replaces_only_a_schedule_it_wrote(tmp_path, capsys):
    """``sample --out`` never replaces a .npy of the user's (nor one the user put over
    ours); its own, recorded beside it, is replaced by a rerun."""
    from clusterclip.storage.records import record_of

    labels = tmp_path / "labels.npy"
    np.save(labels, np.arange(40, dtype=np.int32) % 4)
    mine = tmp_path / "mine.npy"
    np.save(mine, np.arange(5))
    before = mine.read_bytes()
    base = ["sample", "--labels", labels, "--num-samples", "30", "--no-progress", "--out"]
    rc, err = quiet([*base, mine])
    assert rc == 2 and f"--out {mine}: exists and was not written by `clusterclip sample`" \
        in err and len(err.splitlines()) == 1, err
    assert mine.read_bytes() == before and not record_of(mine).exists()
    ours = tmp_path / "s.npy"
    assert quiet([*base, ours]) == (0, "")
    assert quiet([*base, ours, "--seed", "1"]) == (0, "") and record_of(ours).is_file()
    ours.write_bytes(before)  # the user's bytes under our name: theirs now
    rc, err = quiet([*base, ours])
    assert rc == 2 and "was not written by" in err and ours.read_bytes() == before
    # a forged record beside a file of the user's: a dead writer, another file's digest,
    # garbage, a link to a record of ours
    import json

    from _user_files import digest

    for forged in ({"written_by": "clusterclip sample", "writing_pid": 2**22 + 7},
                   {"written_by": "clusterclip sample", **digest(b"ours")},
                   {"written_by": "clusterclip sample", "replacing": digest(b"x")}, "[" * 9999):
        record_of(mine).write_text(forged if isinstance(forged, str) else json.dumps(forged))
        rc, err = quiet([*base, mine])
        assert rc == 2 and "was not written by" in err and mine.read_bytes() == before, forged


def test_an_export_of_another_workdir_is_replaced_only_when_asked(workdir, tmp_path):
    """Two work directories exporting to one folder: the second is refused (naming the
    first) unless --overwrite; two hf exports of the same schedule are the same bytes; a
    refused schedule leaves the stage as it was (never `running`)."""
    import hashlib
    import json
    import shutil

    other = tmp_path / "other"
    shutil.copytree(workdir, other, ignore=shutil.ignore_patterns(".lock"))
    d = tmp_path / "d"
    hf = ["--format", "hf", "--out", d]
    assert quiet(["export", "--workdir", workdir, *hf]) == (0, "")
    rc, err = quiet(["export", "--workdir", other, *hf])
    assert rc == 2 and f"was written by `clusterclip export` from {workdir.resolve()}" in err
    first = {p.name: p.read_bytes() for p in d.iterdir()}
    assert quiet(["export", "--workdir", other, *hf, "--overwrite"]) == (0, "")
    again = {p.name: p.read_bytes() for p in d.iterdir()}
    same = {"state.json", "dataset_info.json", "data-00000-of-00001.arrow"}  # same schedule
    assert same < set(again) and all(again[k] == first[k] for k in same)
    assert json.loads(again["_export.json"])["schedule"] == {
        "path": str((other / "schedule.npy").resolve()),
        "sha256": hashlib.sha256((other / "schedule.npy").read_bytes()).hexdigest()}
    before = json.loads((other / "manifest.json").read_text())["stages"]["export"]
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([0, 10**6], dtype=np.int64))
    rc, err = quiet(["export", "--workdir", other, "--schedule", bad, *hf])
    assert rc == 2 and "outside the corpus" in err, err
    after = json.loads((other / "manifest.json").read_text())["stages"]["export"]
    assert after == before and after["status"] == "done"


@settings(max_examples=50, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_report_text_never_carries_control_characters(text):
    """A document's NUL (or any control character) never reaches clusters.md or the page."""
    from clusterclip.report.markdown import escape_inline
    from clusterclip.report.terms import one_line

    for out in (escape_inline(text), one_line(text, 20)):
        assert not any(unicodedata.category(c) == "Cc" for c in out), repr(out)


def test_a_read_only_workdir_can_be_exported_and_reported_elsewhere(workdir, tmp_path):
    """On a read-only file system (a read-only bind mount in a private mount namespace,
    where ``unshare`` may make one) ``export`` and ``report --out`` elsewhere only read W;
    a command that writes in W is refused naming it."""
    import shutil
    import subprocess

    from _helpers import child_env, cli_command

    ro = tmp_path / "ro"
    shutil.copytree(workdir, ro, ignore=shutil.ignore_patterns(".lock"))
    mount = f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"{mount} && ! touch {ro}/x"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no read-only bind mount can be made here (unshare -m)")
    before = (ro / "manifest.json").read_bytes()
    steps = [cli_command("export", "--workdir", ro, "--format", "parquet", "--out",
                         tmp_path / "e"),
             cli_command("report", "--workdir", ro, "--out", tmp_path / "r", *REPORT),
             cli_command("cluster", "--workdir", ro, "--clusters", "3")]
    script = " && ".join([mount, *(" ".join(map(str, c)) + f" 2>{tmp_path}/err{i}"
                                   for i, c in enumerate(steps[:2])),
                          " ".join(map(str, steps[2])) + f" 2>{tmp_path}/err2; echo $?"])
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                       env=child_env(), timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("2"), (r.stdout, r.stderr)
    assert (tmp_path / "e" / "_export.json").is_file()
    assert (tmp_path / "r" / "report.md").is_file()
    err = (tmp_path / "err2").read_text().strip().splitlines()
    assert err[-1].endswith(f"work directory {ro}: on a read-only file system, and "
                            f"`cluster` writes {ro}/labels.npy in it"), err
    assert (ro / "manifest.json").read_bytes() == before


def test_a_users_file_where_an_export_writes_is_refused_before_any_work(workdir, tmp_path):
    """A file of the user's named like a file the export would add (its second shard) is
    refused before any work, naming it; nothing in the folder changes."""
    d = tmp_path / "d"
    base = ["export", "--workdir", workdir, "--format", "parquet", "--out", d]
    assert quiet(base) == (0, "")
    (d / "part-00001.parquet").write_bytes(b"mine")
    (d / "notes.txt").write_bytes(b"also mine")
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    rc, err = quiet([*base, "--rows-per-shard", "100"])
    assert rc == 2 and err.endswith(f"where it would write its own; move them away or "
                                    f"choose another folder: {d / 'part-00001.parquet'}")
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


@pytest.mark.parametrize("kind", TAMPERS)
def test_a_folder_written_piece_by_piece_checks_its_record_before_any_run(tmp_path, kind):
    """``W/search`` and ``W/experiment`` are marked before their first run: a tampered
    record is refused then (not after the runs), and every planted file keeps its bytes."""
    from _user_files import digest

    from clusterclip.errors import InputError
    from clusterclip.storage.outputs import mark_output
    from clusterclip.storage.records import MARKER, write_marker

    folder = tmp_path / "search"
    (folder / "runs").mkdir(parents=True)
    (folder / "runs" / "a.json").write_bytes(b"{}")
    write_marker(folder, "search", files={"runs/a.json": digest(b"{}")})
    say, planted = tamper(folder, kind, tmp_path / "user")
    before = (folder / MARKER).read_bytes()
    with pytest.raises(InputError) as e:
        mark_output(folder, "search")
    assert say in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert (folder / MARKER).read_bytes() == before
    for path, content in planted.items():
        assert path.read_bytes() == content


@pytest.mark.parametrize("command", ["cluster", "assign"])
def test_cluster_and_assign_out_rerun_and_never_replace_a_users_file(tmp_path, command):
    """``cluster --embeddings E --out O`` and ``assign --out O`` write fixed names in place:
    a rerun replaces them (the record lists them with their digests), a file of the user's
    beside them stays, and one of the user's at such a name (or under a copied record) is
    refused, kept byte for byte."""
    import shutil

    from clusterclip.storage.records import MARKER

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 8)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    emb, cent = tmp_path / "emb.npy", tmp_path / "cent.npy"
    np.save(emb, X)
    np.save(cent, X[:3])

    def argv(out: Path, k: int = 3) -> list:
        return (["cluster", "--embeddings", emb, "--clusters", k, "--out", out, "--no-progress"]
                if command == "cluster" else
                ["assign", "--centroids", cent, "--embeddings", emb, "--out", out])

    out = tmp_path / "O"
    assert quiet(argv(out)) == (0, "")
    (out / "notes.txt").write_bytes(b"mine")
    assert quiet(argv(out, 4)) == (0, "")  # a rerun replaces our files
    assert (out / "notes.txt").read_bytes() == b"mine"
    ours = (out / "labels.npy").read_bytes()
    (out / "labels.npy").write_bytes(b"my labels")
    rc, err = quiet(argv(out))
    assert rc == 2 and "lists 'labels.npy', which no longer has the size" in err, err
    assert (out / "labels.npy").read_bytes() == b"my labels"
    (out / "labels.npy").write_bytes(ours)
    user = tmp_path / "U"
    user.mkdir()
    (user / "labels.npy").write_bytes(b"my labels")
    shutil.copy(out / MARKER, user / MARKER)  # a record copied into a folder of the user's
    rc, err = quiet(argv(user))
    assert rc == 2 and "'labels.npy'" in err, err
    assert (user / "labels.npy").read_bytes() == b"my labels"
