"""`clusterclip sample`: the schedule file, the summary, and clean failures."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from _helpers import run_cli

from clusterclip import ClusterClipSampler
from clusterclip.cli import main


@pytest.fixture()
def labels_file(tmp_path):
    labels = np.random.default_rng(0).integers(-1, 30, 3000)
    path = tmp_path / "labels.npy"
    np.save(path, labels)
    return path, labels


def test_writes_int64_schedule_equal_to_the_sampler_and_prints_summary(labels_file, tmp_path,
                                                                     capsys):
    path, labels = labels_file
    out = tmp_path / "schedule.npy"
    summ = tmp_path / "summary.json"
    rc = main(["sample", "--labels", str(path), "--strategy", "clusterclip", "--clip", "2",
               "--num-samples", "5000", "--seed", "3", "--out", str(out),
               "--summary-json", str(summ), "--no-progress"])
    assert rc == 0
    got = np.load(out)
    assert got.dtype == np.int64
    ref = list(ClusterClipSampler(labels, 5000, clip=2, seed=3))
    assert got.tolist() == ref
    saved = io.BytesIO()  # streamed block by block, the file is np.save's bytes
    np.save(saved, np.array(ref, dtype="<i8"))
    assert out.read_bytes() == saved.getvalue()
    text = capsys.readouterr().out
    s = json.loads(summ.read_text())
    for needle in ("capacity:", f"{s['capacity']:,}", "clipped:", "repetition:  max 2",
                   "epochs:"):
        assert needle in text
    assert s["clusters_clipped"] == len(s["clip_events"]) > 0


def test_rank_files_interleave_to_the_global_schedule(labels_file, tmp_path):
    path, labels = labels_file
    outs = []
    for r in range(3):
        out = tmp_path / f"r{r}.npy"
        assert main(["sample", "--labels", str(path), "--strategy", "temperature",
                     "--alpha", "0.5", "--num-samples", "1001", "--out", str(out),
                     "--rank", str(r), "--world-size", "3", "--no-progress"]) == 0
        outs.append(np.load(out))
    full = list(ClusterClipSampler(labels, 1001, strategy="temperature", alpha=0.5))
    assert np.stack(outs, axis=1).reshape(-1).tolist() == full[:999]


def _write(tmp_path, name, array):
    p = tmp_path / name
    np.save(p, array)
    return str(p)


@pytest.mark.parametrize("case,expect", [
    ("float_labels", "labels must be integers, got dtype float64"),
    ("2d_labels", "labels must be a 1-D array, got shape (10, 2)"),
    ("clip0", "--clip must be >= 1, got 0"),
    ("zero_samples", "--num-samples must be >= 1, got 0"),
    ("over_capacity", "exceeds capacity"),
    ("unknown_strategy", "invalid choice: 'bogus'"),
    ("missing_file", "no such file"),
    ("not_npy", "cannot read labels as .npy"),
    ("rank_too_big", "--rank must be < --world-size 2, got 2"),
])
def test_bad_input_exits_2_with_one_line_and_no_output(tmp_path, case, expect):
    good = _write(tmp_path, "good.npy", np.arange(20) % 4)
    args = {"--labels": good, "--num-samples": "10", "--clip": "4", "--strategy": "clusterclip"}
    if case == "float_labels":
        args["--labels"] = _write(tmp_path, "f.npy", np.linspace(0, 1, 20))
    elif case == "2d_labels":
        args["--labels"] = _write(tmp_path, "m.npy", np.zeros((10, 2), np.int64))
    elif case == "clip0":
        args["--clip"] = "0"
    elif case == "zero_samples":
        args["--num-samples"] = "0"
    elif case == "over_capacity":
        args["--num-samples"] = "81"
    elif case == "unknown_strategy":
        args["--strategy"] = "bogus"
    elif case == "missing_file":
        args["--labels"] = str(tmp_path / "nope.npy")
    elif case == "not_npy":
        bad = tmp_path / "bad.npy"
        bad.write_text("0,1,2\n")
        args["--labels"] = str(bad)
    elif case == "rank_too_big":
        args.update({"--rank": "2", "--world-size": "2"})
    out = tmp_path / "out" / "schedule.npy"
    argv = ["sample", "--out", str(out), "--no-progress"]
    for k, v in args.items():
        argv += [k, v]
    proc = run_cli(*argv)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_background_writer_keeps_the_order_and_raises_a_write_error_in_the_caller(tmp_path):
    """write_schedule hands its blocks to one writer thread: the file holds them in order,
    and a failing write (here: a file object closed under it) surfaces in the caller as the
    error itself, without leaving the caller blocked on a full queue."""
    from clusterclip.sampling.schedule import _BackgroundWriter

    blocks = [np.arange(i, i + 1 + i % 7, dtype="<i8") for i in range(0, 500, 5)]
    with open(tmp_path / "x.bin", "wb") as f, _BackgroundWriter(f, depth=1) as out:
        for b in blocks:
            out.write(b)
    assert (tmp_path / "x.bin").read_bytes() == np.concatenate(blocks).tobytes()

    f = open(tmp_path / "y.bin", "wb")  # noqa: SIM115 - closed below, to make writes fail
    f.close()
    with pytest.raises(ValueError, match="closed file"):
        with _BackgroundWriter(f, depth=1) as out:
            for b in blocks:
                out.write(b)
