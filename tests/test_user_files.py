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
from pathlib import Path

import numpy as np
import pytest
from _report_workdir import make_report_workdir
from _user_files import assert_kept, plant, plants, unplant
from hypothesis import HealthCheck, given, settings

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


def test_sample_replaces_only_a_schedule_it_wrote(tmp_path, capsys):
    """``sample --out`` never replaces a .npy of the user's (nor one the user put over
    ours); its own, recorded beside it, is replaced by a rerun."""
    from clusterclip.io import record_of

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
