"""clusterclip.distributed: a world of one without a process group, and real gloo ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap

import numpy as np
import pytest
from _helpers import child_env, torchrun, torchrun_command

from clusterclip import distributed as D
from clusterclip.errors import InputError

WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from clusterclip import distributed as D
    from clusterclip.errors import InputError

    created = D.init_from_env("cpu")
    rank, world = D.rank_and_world()
    out = {"created": created, "rank": rank, "world": world, "main": D.is_main()}
    out["broadcast"] = D.broadcast_object({"from": rank})
    out["gathered"] = D.gather_objects(rank * 10)
    out["any"] = [D.any_rank(rank == 1), D.any_rank(False)]
    out["sizes"] = D.all_sizes(rank + 3)
    rows = D.gather_rows(np.full((rank + 2, 2), rank, dtype=np.int32))
    out["rows"] = None if rows is None else rows.tolist()
    out["on_main"] = D.on_main(lambda: [rank, "computed on the main rank"])
    out["mapped"] = D.map_in_order(lambda i: [i, rank], [5, 1, 1, 3])

    def fail_at(i):
        if i in (1, 2):
            raise InputError(f"item {i} failed on rank {rank}")
        return i

    try:
        D.map_in_order(fail_at, [1, 1, 1, 1])
        out["map_error"] = None
    except InputError as e:
        out["map_error"] = str(e)

    def refuse():
        raise InputError(f"refused by rank {rank}")

    try:
        D.on_main(refuse)
        out["error"] = None
    except InputError as e:
        out["error"] = str(e)
    D.barrier()
    with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
        json.dump(out, f)
    D.shutdown(created)
""")


def test_without_a_process_group_everything_is_a_world_of_one():
    assert D.rank_and_world() == (0, 1) and D.is_main()
    assert D.init_from_env("cpu") is False  # WORLD_SIZE unset: nothing to create
    assert D.broadcast_object({"a": 1}) == {"a": 1}
    assert D.gather_objects(5) == [5]
    assert D.all_sizes(7) == [7] and D.any_rank(True) and not D.any_rank(False)
    local = np.arange(6).reshape(3, 2)
    assert D.gather_rows(local) is local
    assert D.on_main(lambda: 42) == 42
    with pytest.raises(InputError, match="bad value"):
        D.on_main(lambda: (_ for _ in ()).throw(InputError("bad value")))
    assert [D.shard_bounds(10, r, 3) for r in range(3)] == [(0, 3), (3, 6), (6, 10)]
    # a share taken at once (``many``, as worker processes do) gives fn's list and errors
    assert D.map_in_order(lambda i: i * i, [1] * 4, many=lambda ix: (i * i for i in ix)) == \
        D.map_in_order(lambda i: i * i, [1] * 4) == [0, 1, 4, 9]
    closed = []

    def failing(ix):
        try:
            yield 0
            raise InputError("item 1 is bad")
        finally:
            closed.append(True)
    with pytest.raises(InputError, match="item 1"):
        D.map_in_order(lambda i: i, [1] * 3, many=failing)
    assert closed == [True]


def test_two_gloo_ranks_share_rank_0_results_and_errors(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    res = torchrun(script, tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert (r0["rank"], r0["world"], r0["main"]) == (0, 2, True)
    assert (r1["rank"], r1["world"], r1["main"]) == (1, 2, False)
    assert r0["created"] and r1["created"]
    for r in (r0, r1):
        assert r["broadcast"] == {"from": 0}
        assert r["gathered"] == [0, 10]
        assert r["any"] == [True, False]
        assert r["sizes"] == [3, 4]
        assert r["on_main"] == [0, "computed on the main rank"]
        # shares by weight: item 0 (5) to rank 0, item 3 (3) to rank 1, then 1 and 2 to
        # rank 1 (load 3, then 4): each item computed once, by its rank, results in order
        assert r["mapped"] == [[0, 0], [1, 1], [2, 1], [3, 1]]
        # items 0, 2 to rank 0 and 1, 3 to rank 1: the first failing item's error on both
        assert r["map_error"] == "item 1 failed on rank 1"
        # rank 0's InputError reaches every rank; rank 1 never runs the function
        assert r["error"] == "refused by rank 0"
    # rank 0 holds all rows in rank order (2 of rank 0, then 3 of rank 1); rank 1 none
    assert r0["rows"] == [[0, 0]] * 2 + [[1, 1]] * 3 and r1["rows"] is None


# Each rank runs the real command line on its own arguments: rank 1 is given centroids
# that do not exist (an InputError before any collective), rank 0 good ones (it goes on
# into the collectives). Each rank's exit status and stderr land in files of its own.
ONE_RANK_FAILS = textwrap.dedent("""
    import os, sys
    rank = int(os.environ["RANK"])
    out = sys.argv[1]
    with open(f"{out}/pid{rank}.txt", "w") as f:
        f.write(str(os.getpid()))
    err = open(f"{out}/stderr{rank}.txt", "w")
    sys.stderr = err
    from clusterclip.cli import main

    centroids = f"{out}/centroids.npy" if rank == 0 else f"{out}/missing.npy"
    code = main(["assign", "--centroids", centroids, "--embeddings", f"{out}/emb.npy",
                 "--out", f"{out}/labelled"])
    err.flush()
    with open(f"{out}/rc{rank}.txt", "w") as f:
        f.write(str(code))
    sys.exit(code)
""")


def test_one_rank_failing_stops_the_command_without_a_hang(tmp_path):
    # The error path of distributed.process_group meets no barrier: the failing rank
    # destroys its group and exits 2 with one line, and the other rank, left inside a
    # collective, is stopped (closed connection or torchrun) instead of waiting forever.
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "emb.npy", rng.standard_normal((40, 4)).astype(np.float32))
    np.save(tmp_path / "centroids.npy", rng.standard_normal((3, 4)).astype(np.float32))
    script = tmp_path / "worker.py"
    script.write_text(ONE_RANK_FAILS)
    # A hang (the failure this test looks for) must not outlive the test: torchrun's
    # workers run in sessions of their own, so each writes its pid and is killed by it;
    # torchrun's output goes to a file (an orphan would hold a pipe open).
    with open(tmp_path / "torchrun.txt", "w") as log:
        proc = subprocess.Popen(torchrun_command(script, tmp_path), env=child_env(),
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            for f in tmp_path.glob("pid*.txt"):
                try:
                    os.kill(int(f.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            pytest.fail("a rank hung after the other one failed")
    assert proc.returncode != 0
    assert (tmp_path / "rc1.txt").read_text() == "2"
    lines = (tmp_path / "stderr1.txt").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clusterclip assign: error: "), lines
    assert "missing.npy" in lines[0]
    assert not (tmp_path / "labelled" / "labels.npy").exists()  # no half-written output
