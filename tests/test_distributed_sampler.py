"""The torch adapter with real DataLoaders and a real 2-process gloo group."""

from __future__ import annotations

import json
import pickle
import textwrap

import numpy as np
import pytest
from _helpers import child_env, torchrun

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from clusterclip import ClusterClipSampler  # noqa: E402
from clusterclip.sampling.torch import ClusterClipTorchSampler  # noqa: E402

LABELS = np.random.default_rng(0).integers(-1, 12, 400)
T = 900


class _Indices(Dataset):
    """Returns the index it is asked for, so batches show the sampler's order."""

    def __len__(self) -> int:
        return LABELS.size

    def __getitem__(self, i: int) -> int:
        return i


def _flat(batches) -> list[int]:
    return [int(x) for b in batches for x in b]


def test_dataloader_with_worker_processes_sees_the_schedule():
    s = ClusterClipTorchSampler(LABELS, T, seed=2, rank=0, world_size=1)
    ref = list(ClusterClipSampler(LABELS, T, seed=2))
    loader = DataLoader(_Indices(), batch_size=16, sampler=s, num_workers=2)
    assert len(loader) == -(-T // 16)
    assert _flat(loader) == ref
    assert _flat(loader) == ref  # a second epoch replays the same schedule
    s2 = pickle.loads(pickle.dumps(s))
    assert list(s2) == ref


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_mid_epoch_with_exactly_the_rest(num_workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    ref = list(ClusterClipSampler(LABELS, T, strategy="temperature", alpha=0.5, seed=1))

    def loader():
        s = ClusterClipTorchSampler(LABELS, T, strategy="temperature", alpha=0.5, seed=1,
                                    rank=0, world_size=1)
        return StatefulDataLoader(_Indices(), batch_size=10, sampler=s,
                                  num_workers=num_workers)

    first = loader()
    it = iter(first)
    head = _flat(next(it) for _ in range(17))
    state = first.state_dict()
    del it, first
    second = loader()
    second.load_state_dict(state)
    rest = _flat(second)
    assert head == ref[:170]
    assert rest == ref[170:]


_WORKER = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import torch.distributed as dist
    from clusterclip.sampling.torch import ClusterClipTorchSampler

    dist.init_process_group("gloo")
    labels = np.asarray(json.loads(os.environ["CC_LABELS"]))
    s = ClusterClipTorchSampler(labels, int(os.environ["CC_T"]), seed=7)  # rank from dist
    mine = list(s)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"rank": dist.get_rank(), "indices": mine,
                                      "state": s.state_dict()})
    if dist.get_rank() == 0:
        with open(os.environ["CC_OUT"], "w") as f:
            json.dump(everyone, f)
    dist.destroy_process_group()
""")


def test_two_gloo_ranks_get_disjoint_parts_whose_union_is_the_global_schedule(tmp_path):
    T_odd = 901  # one trailing position served to nobody
    out = tmp_path / "gathered.json"
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = child_env(CC_LABELS=json.dumps(LABELS.tolist()), CC_T=str(T_odd), CC_OUT=str(out))
    res = torchrun(script, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    gathered = sorted(json.loads(out.read_text()), key=lambda g: g["rank"])
    full = list(ClusterClipSampler(LABELS, T_odd, seed=7))
    r0, r1 = gathered[0]["indices"], gathered[1]["indices"]
    assert len(r0) == len(r1) == T_odd // 2
    # disjoint by position: rank 0 has the even positions, rank 1 the odd ones
    assert r0 == full[0:900:2] and r1 == full[1:900:2]
    assert gathered[0]["state"] == gathered[1]["state"]
    assert gathered[0]["state"]["position"] == 900
