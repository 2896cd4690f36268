"""`clusterclip sample`: the schedule file, the summary, and clean failures."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator

import numpy as np
import pytest
from _helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

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
    ("clip0", "error: --clip: 0 is out of range (an integer in 1 .. 1048576)"),
    ("zero_samples", "error: --num-samples: 0 is out of range (an integer in 1 .. "),
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


@contextlib.contextmanager
def _writeback_asked() -> Iterator[list[tuple[int, int]]]:
    """The (start, stop) ranges the schedule writer asks start_writeback for, in order,
    while the block runs (each still passed on to the real one)."""
    from clusterclip.sampling import schedule

    asked: list[tuple[int, int]] = []
    real = schedule.start_writeback
    schedule.start_writeback = lambda fd, a, b: (asked.append((a, b)), real(fd, a, b))
    try:
        yield asked
    finally:
        schedule.start_writeback = real


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(0, 40_000), min_size=1, max_size=12),
       header=st.integers(0, 300))
def test_background_writer_starts_the_writeback_of_every_byte_it_wrote(tmp_path_factory,
                                                                      sizes, header):
    """With the file's descriptor, the writer starts the disk writes of each block as it
    goes (so that the move onto an existing file has nothing left to flush): the ranges it
    asks for cover the file once, in order, and the bytes are those written."""
    from clusterclip.sampling import schedule

    path = tmp_path_factory.mktemp("wb") / "x.bin"
    blocks = [np.arange(n, dtype="<i8") * (i + 1) for i, n in enumerate(sizes)]
    with _writeback_asked() as asked, open(path, "wb") as f:
        f.write(b"h" * header)  # left in the buffer or not: counted once it is out
        with schedule._BackgroundWriter(f, fd=f.fileno(), depth=1) as out:
            for b in blocks:
                out.write(b)
        f.flush()
        size = os.fstat(f.fileno()).st_size
    assert path.read_bytes() == b"h" * header + np.concatenate(blocks).tobytes()
    assert len(asked) == len(blocks)
    assert asked[0][0] == 0 and all(a[1] == b[0] for a, b in zip(asked, asked[1:], strict=False))
    assert all(a <= b for a, b in asked)
    # everything but what may still sit in the file object's buffer (under 8 KiB)
    assert asked[-1][1] <= size and size - asked[-1][1] < 8192


def test_the_schedule_starts_its_writeback_only_when_it_replaces_a_file(tmp_path):
    """A new path is left to the kernel's writeback (no CPU of ours); over an existing
    file, the one case whose final move would flush it, every block's writes are started
    as it is written. The bytes are np.save's either way."""
    from clusterclip.sampling import schedule

    blocks = [np.arange(i * 1000, (i + 1) * 1000, dtype=np.int64) for i in range(6)]
    out = tmp_path / "s.npy"
    with _writeback_asked() as asked:
        schedule._write_npy(out, iter(blocks), 5500, False)
        assert asked == []
        schedule._write_npy(out, iter(blocks), 5500, False)
        assert len(asked) == 6 and asked[0][0] == 0
    ref = tmp_path / "ref.npy"
    np.save(ref, np.concatenate(blocks)[:5500])
    assert out.read_bytes() == ref.read_bytes()


# -- issue 16: the defaults follow the evidence, and say so ---------------------------------
def test_the_default_is_paced_at_r4_raised_to_fit_and_says_why(labels_file, tmp_path, capsys):
    path, labels = labels_file
    n = int((labels >= 0).sum())
    for t, want in ((5000, 4), (5 * n + 1, 6)):
        out = tmp_path / f"s{t}.npy"
        capsys.readouterr()
        assert main(["sample", "--labels", str(path), "--num-samples", str(t), "--out",
                     str(out), "--no-progress"]) == 0
        text = capsys.readouterr().out
        assert f"strategy:    paced (seed 0, clip {want}" in text
        assert f"clip:        {want} by default: paced's default 4" in text
        assert ("raised to" in text) == (want > 4)
        ref = ClusterClipSampler(labels, t, strategy="paced", clip=want)
        assert np.load(out).tolist() == list(ref)


def test_clusterclip_without_clip_takes_the_reports_recommended_r(labels_file, tmp_path,
                                                                  capsys):
    from clusterclip.sampling.clip import choose_clip

    path, labels = labels_file
    sizes = np.bincount(labels[labels >= 0])
    skewed = np.repeat(np.arange(sizes.size), np.geomspace(200, 20, sizes.size).astype(int))
    np.save(path, skewed)  # a long tail: the recommendation is above the smallest fit
    t = 3 * skewed.size
    best = choose_clip(skewed, t)["recommended_clip"]
    assert best is not None and best > 3
    out = tmp_path / "s.npy"
    assert main(["sample", "--labels", str(path), "--strategy", "clusterclip", "--num-samples",
                 str(t), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert f"clip:        {best} by default: the recommended R for this budget (R={best}:" in text
    assert np.load(out).tolist() == list(ClusterClipSampler(skewed, t, clip=best))


def test_with_groups_the_capacity_counts_groups(labels_file, tmp_path, capsys):
    path, labels = labels_file
    g = tmp_path / "g.npy"
    np.save(g, _valid_groups(labels))
    capsys.readouterr()
    assert main(["sample", "--labels", str(path), "--groups", str(g), "--num-samples", "500",
                 "--clip", "2", "--out", str(tmp_path / "s.npy"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    n_groups = np.unique(np.load(g)[np.load(g) >= 0]).size
    assert f"capacity:    {2 * n_groups:,} = clip 2 x {n_groups:,} near-duplicate groups" in text


def _valid_groups(labels: np.ndarray) -> np.ndarray:
    """Near-duplicate groups inside clusters: consecutive members of a cluster, in pairs."""
    groups = np.full(labels.size, -1, np.int64)
    for k in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == k)
        groups[members] = members[(np.arange(members.size) // 2) * 2]
    return groups


def test_running_sample_imports_only_what_sample_needs(tmp_path):
    """Issue 40: ``clusterclip sample`` builds its own parser only, so it imports no other
    command's module, no embedding, clustering, torch or stage code (a whole process at the
    issue's shape spent 0.3 s in imports and parser building)."""
    import subprocess
    import sys

    from _helpers import child_env

    np.save(tmp_path / "labels.npy", np.array([0, 1, 1, 2, 0], dtype=np.int64))
    code = ("import sys; from clusterclip.cli import main; "
            f"rc = main(['sample', '--labels', {str(tmp_path / 'labels.npy')!r}, "
            f"'--num-samples', '7', '--out', {str(tmp_path / 's.npy')!r}, '--no-progress']); "
            "print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), check=True,
                         capture_output=True, text=True).stdout.split()
    assert np.load(tmp_path / "s.npy").size == 7
    loaded = set(out)
    assert "clusterclip.cli.sample" in loaded
    others = {f"clusterclip.cli.{c}" for c in ("embed", "cluster", "run", "export", "report",
                                                "search", "experiment", "demo")}
    assert not loaded & others
    for heavy in ("torch", "clusterclip.embedding", "clusterclip.clustering",
                  "clusterclip.stages", "importlib.metadata"):
        assert heavy not in loaded, heavy


def test_sample_loads_openblas_with_one_thread_and_leaves_the_environment(tmp_path):
    """``clusterclip sample`` does no linear algebra: numpy's OpenBLAS gets one thread (its
    others spin when they start), and the environment is the user's again after; a limit
    the user set is kept."""
    import subprocess
    import sys

    from _helpers import child_env

    np.save(tmp_path / "labels.npy", np.array([0, 1, 1, 2, 0], dtype=np.int64))
    code = ("import os; from clusterclip.cli import main; "
            f"main(['sample', '--labels', {str(tmp_path / 'labels.npy')!r}, "
            f"'--num-samples', '7', '--out', {str(tmp_path / 's.npy')!r}, '--no-progress']); "
            "from threadpoolctl import threadpool_info; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), "
            "[i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas'])")
    for user, want in ((None, "None [1]"), ("2", "2 [2]")):
        env = {k: v for k, v in child_env().items() if k != "OPENBLAS_NUM_THREADS"}
        if user is not None:
            env["OPENBLAS_NUM_THREADS"] = user
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             capture_output=True, text=True).stdout.split("\n")[-2]
        assert out == want


def test_sample_and_the_sample_stage_draw_one_schedule_and_summary(pydocs_path, tmp_path):
    """Issue 39: ``clusterclip sample`` and the ``sample`` stage share one path (the mixture's
    exclusions and weights, the default clip and its reason, the summary's records): on
    the same labels and options they write the same bytes and the same summary, with the
    default clip (paced and clusterclip) and with a mixture file that excludes documents."""
    import gzip

    from clusterclip.sampling.mixture import Mixture, write_mixture
    from clusterclip.stages.sample import SampleOptions
    from clusterclip.stages.sample import run as sample_stage
    from clusterclip.storage.digests import sha256_file
    from clusterclip.workdir import Workdir

    corpus = tmp_path / "docs.jsonl"
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as src:
        corpus.write_text("".join(line for _, line in zip(range(200), src, strict=False)))
    w = tmp_path / "w"
    assert main(["run", str(corpus), "--workdir", str(w), "--clusters", "4", "--embedder",
                 "fast", "--no-progress"]) == 0
    labels = np.load(w / "labels.npy")
    m = tmp_path / "m.json"
    excluded = np.flatnonzero(labels >= 0)[:9]
    write_mixture(m, Mixture((1.0, 0.5, 0.0, 2.0), clip=3, timing="paced", objective="t"),
                  exclude=excluded.tolist())
    cases = [({"strategy": "paced"}, []), ({"strategy": "clusterclip"}, ["--strategy",
                                                                          "clusterclip"]),
             ({"strategy": "paced", "clip": 3, "mixture": str(m)}, ["--mixture", str(m)])]
    for options, flags in cases:
        info = sample_stage(Workdir(w, create=False),
                            SampleOptions(num_samples=400, seed=5, **options))
        out, summ = tmp_path / "s.npy", tmp_path / "s.json"
        assert main(["sample", "--labels", str(w / "labels.npy"), "--num-samples", "400",
                     "--seed", "5", "--out", str(out), "--summary-json", str(summ),
                     "--no-progress", *flags]) == 0
        assert out.read_bytes() == (w / "schedule.npy").read_bytes(), options
        s = json.loads(summ.read_text())
        assert s.pop("_written_by") == "clusterclip sample"
        assert s == json.loads(json.dumps({k: v for k, v in info.items() if k != "skipped"}))
        assert ("clip_default" in s) == ("clip" not in options)
        if "mixture" in options:
            drawn = np.load(out)
            assert s["mixture"] == {"path": str(m.resolve()), "sha256": sha256_file(m)}
            assert not np.isin(drawn, excluded).any() and not (labels[drawn] == 2).any()
