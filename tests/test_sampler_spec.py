"""One sampler specification: ``SamplerSpec`` checks, ``make_sampler`` builds, every
sampler is a ``BaseSampler`` with one state protocol; errors name parameters, and the
command line shows them as its options."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from clusterclip import ClusterClipSampler, make_sampler
from clusterclip.cli import main
from clusterclip.errors import InputError, flag_message
from clusterclip.sampling import BaseSampler, GroupClipSampler, SamplerSpec
from clusterclip.sampling.spec import (
    ALPHA_STRATEGIES,
    CLIP_STRATEGIES,
    STRATEGIES,
    rank_share,
    strategy_options,
)

LABELS = np.random.default_rng(0).integers(-1, 7, 400)
GROUPS = np.where(np.arange(400) % 2 & (LABELS == np.roll(LABELS, 1)), np.arange(400) - 1,
                  np.arange(400))


def test_make_sampler_returns_a_base_sampler_of_the_right_kind():
    plain = make_sampler(LABELS, 500, strategy="paced", clip=3)
    grouped = make_sampler(LABELS, 500, strategy="paced", clip=3, groups=GROUPS)
    assert type(plain) is ClusterClipSampler and type(grouped) is GroupClipSampler
    assert isinstance(plain, BaseSampler) and isinstance(grouped, BaseSampler)
    # the plain class is still a public constructor; groups go through make_sampler
    assert np.array_equal(np.fromiter(ClusterClipSampler(LABELS, 500, strategy="paced", clip=3),
                                      np.int64), np.fromiter(plain, np.int64))
    with pytest.raises(TypeError, match="make_sampler"):
        ClusterClipSampler(LABELS, 500, groups=GROUPS)


def test_the_signature_is_the_specs_fields_everywhere():
    fields = list(inspect.signature(SamplerSpec).parameters)
    assert fields[0] == "num_samples" and "groups" in fields
    for func, first in ((make_sampler, ["labels"]), (ClusterClipSampler, ["labels"]),
                        (GroupClipSampler, ["labels"])):
        names = list(inspect.signature(func).parameters)
        want = first + [f for f in fields if not (func is ClusterClipSampler and f == "groups")]
        assert names == want, func


def test_a_spec_checks_every_parameter_once_with_the_name():
    for kw, needle in [({"num_samples": 0}, "num_samples must be >= 1, got 0"),
                       ({"num_samples": 5, "rank": 2, "world_size": 2},
                        "rank must be < world_size 2, got 2"),
                       ({"num_samples": 5, "strategy": "uniform", "alpha": 0.5},
                        "alpha applies to temperature, clusterclip and paced only"),
                       ({"num_samples": 5, "strategy": "random", "cluster_weights": [1.0]},
                        "cluster_weights does not apply to strategy random"),
                       ({"num_samples": 5, "consumed_samples": 6},
                        "consumed_samples 6 exceeds num_samples 5")]:
        with pytest.raises(InputError, match=needle) as e:
            SamplerSpec(**kw)
        assert e.value.params  # the parameters it names, for a front end to rename
    s = SamplerSpec(10, strategy="uniform", clip=0, seed=np.uint64(3))
    assert s.clip is None and s.seed == 3 and type(s.seed) is int  # clip: clip strategies only


def test_strategy_options_and_rank_share_are_the_rules():
    for s in STRATEGIES:
        opts = strategy_options(s, clip=3, alpha=0.5, cluster_weights=np.ones(7))
        assert ("clip" in opts) == (s in CLIP_STRATEGIES)
        assert ("alpha" in opts) == (s in ALPHA_STRATEGIES)
        assert ("cluster_weights" in opts) == (s != "random")
        make_sampler(LABELS, 100, **opts)  # always valid for the sampler
    for T, c, W in ((10, 0, 3), (10, 4, 3), (7, 7, 2), (1000, 1, 7)):
        shares = [rank_share(T, r, W, c) for r in range(W)]
        served = sorted(f + i * W for f, n in shares for i in range(n))
        assert served == list(range(c, c + len(served)))  # no gap, no duplicate
        assert T - c - len(served) == (T - c) % W < W


@pytest.mark.parametrize("groups", [None, GROUPS])
def test_both_samplers_accept_version_1_states_and_numpy_integer_positions(groups):
    kw = {"strategy": "clusterclip", "clip": 3, "seed": 2, "groups": groups}
    full = np.fromiter(make_sampler(LABELS, 600, **kw), np.int64)
    s = make_sampler(LABELS, 600, **kw)
    it = iter(s)
    for _ in range(250):
        next(it)
    state = json.loads(json.dumps(s.state_dict()))
    old = {k: v for k, v in state.items() if k != "checksum"} | {"version": 1}
    for st in (old, {**old, "position": np.int64(250)}):
        r = make_sampler(LABELS, 600, world_size=2, rank=1, **kw)
        r.load_state_dict(st)
        assert np.array_equal(np.fromiter(r, np.int64), full[251::2])
    with pytest.raises(InputError, match="checksum"):
        make_sampler(LABELS, 600, **kw).load_state_dict({**state, "position": 251})


def test_flag_message_renames_the_named_parameters_only():
    e = InputError("rank must be < world_size 2, got 2; world_sizes and rank_x stay",
                   params=("rank", "world_size"))
    flags = {"rank": "--rank", "world_size": "--world-size"}
    assert flag_message(e, flags) == ("--rank must be < --world-size 2, got 2; world_sizes "
                                      "and rank_x stay")
    assert flag_message(InputError("rank 3"), flags) == "rank 3"  # names nothing
    # a path or a file that holds the name is the user's, not the parameter
    e = InputError("tokenizer /data/tokenizer: no tokenizer.json in C:\\tokenizer\\x",
                   params=("tokenizer",))
    assert flag_message(e, {"tokenizer": "--tokenizer"}) == (
        "--tokenizer /data/tokenizer: no tokenizer.json in C:\\tokenizer\\x")


def test_the_command_line_shows_core_errors_with_its_options(tmp_path, capsys):
    np.save(tmp_path / "l.npy", LABELS)
    assert main(["sample", "--labels", str(tmp_path / "l.npy"), "--out", str(tmp_path / "s.npy"),
                 "--num-samples", "10", "--consumed-samples", "11", "--strategy", "uniform",
                 "--no-progress"]) == 2
    assert "--consumed-samples 11 exceeds --num-samples 10" in capsys.readouterr().err
