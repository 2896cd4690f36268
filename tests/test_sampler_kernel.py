"""The compiled kernel (``clusterclip.sampling._kernel``) against the numpy path.

The numpy path is the reference (and what an install without a C compiler runs);
the kernel must give byte-identical schedules, summaries and states for every
strategy, world size, resume and group setting. ``CLUSTERCLIP_KERNEL=off`` forces
the numpy path (read when a sampler is constructed).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip import ClusterClipSampler, make_sampler
from clusterclip.sampling import _engine
from clusterclip.sampling._rng import TAG_EPOCH, TAG_PASS, KeyedStreams
from clusterclip.sampling.schedule import write_schedule

kernel = _engine._kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason="C kernel not built "
                                  "(python setup.py build_ext --inplace)")


def test_the_kernel_is_built_in_ci():
    # CI proves the fast path: there the extension must have been built (pip
    # install -e . compiles it); elsewhere a missing build only skips the tests below.
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert kernel is not None, "CI: clusterclip.sampling._kernel was not built"
        assert _engine.kernel_enabled()
    elif kernel is None:
        pytest.skip("C kernel not built")


def test_a_stale_kernel_build_is_ignored_with_a_warning():
    # an in-place .so built from an older _kernel.c (another VERSION) is not used
    code = ("import sys, types, warnings\n"
            "sys.modules['clusterclip.sampling._kernel'] = types.ModuleType('stale')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    from clusterclip.sampling import _engine\n"
            "print(_engine.kernel_enabled(), [str(x.message) for x in w])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.startswith("False [") and "stale build" in out.stdout


@contextlib.contextmanager
def numpy_path():
    old = os.environ.get("CLUSTERCLIP_KERNEL")
    os.environ["CLUSTERCLIP_KERNEL"] = "off"
    try:
        yield
    finally:
        if old is None:
            del os.environ["CLUSTERCLIP_KERNEL"]
        else:
            os.environ["CLUSTERCLIP_KERNEL"] = old


def _run(labels, T, kw, blocks, *, rank=0, world_size=1, consumed=0, state_at=None):
    """(indices, summary, state_dict after ``state_at`` of them, which engine ran)."""
    s = make_sampler(labels, T, rank=rank, world_size=world_size,
                     consumed_samples=consumed, cache_dir=False, **kw)
    out, state = [], None
    for b in s.blocks(blocks):
        out.append(b.copy())
        if state is None and state_at is not None and sum(x.size for x in out) >= state_at:
            state = s.state_dict()
    engine = s._engine if hasattr(s, "_engine") else s._inner()._engine
    idx = np.concatenate(out) if out else np.empty(0, np.int64)
    return idx, s.summary(), state, engine._use_kernel


def _both(labels, T, kw, blocks=1 << 12, **run):
    fast = _run(labels, T, kw, blocks, **run)
    with numpy_path():
        ref = _run(labels, T, kw, blocks, **run)
    assert fast[3] is True and ref[3] is False  # each path really ran
    assert np.array_equal(fast[0], ref[0])
    assert fast[1] == ref[1]
    assert fast[2] == ref[2]
    return fast[0]


# cluster ids from a few (large clusters, clip events at many positions) to many
# (tiny clusters of 1-3 documents: many groups loaded per block), -1 excluded
labels_st = st.tuples(st.integers(1, 400), st.integers(1, 2000), st.integers(0, 2**31),
                      st.booleans()).map(
    lambda a: np.random.default_rng(a[2]).integers(-1 if a[3] else 0, a[0], a[1]))


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(labels_st, st.sampled_from(["random", "uniform", "temperature", "clusterclip", "paced"]),
       st.integers(1, 5), st.floats(0.05, 1.0), st.integers(0, 2**64 - 1),
       st.sampled_from([0.0, 0.5, -1.0]), st.integers(1, 3), st.floats(0, 0.9),
       st.sampled_from([1, 7, 1 << 12]))
def test_kernel_equals_numpy_path(labels, strategy, clip, frac, seed, alpha, world, resume,
                                  blocks):
    if not (labels >= 0).any():
        labels[0] = 0
    ne = int((labels >= 0).sum())
    cap = clip * ne if strategy in ("clusterclip", "paced") else 3 * ne + 11
    T = max(1, int(frac * cap))
    kw = {"strategy": strategy, "clip": clip, "seed": seed}
    if strategy in ("temperature", "clusterclip", "paced"):
        kw["alpha"] = alpha
    consumed = int(resume * T)
    rank = seed % world
    _both(labels, T, kw, blocks, rank=rank, world_size=world, consumed=consumed,
          state_at=max(1, (T - consumed) // world // 2))


@needs_kernel
@pytest.mark.parametrize("strategy", ["uniform", "temperature", "clusterclip", "paced"])
def test_kernel_equals_numpy_path_on_many_tiny_clusters(strategy):
    # 70,000 cluster ids (beyond 2**16), ~3 documents each: groups of passes
    # loaded by the thousand, clips all along the schedule (more per call than the
    # kernel's buffer of clip events holds: it then stops at a clip as it does
    # for weighted choices)
    labels = np.random.default_rng(3).integers(0, 70_000, 200_000)
    kw = {"strategy": strategy, "clip": 3, "seed": 9}
    if strategy == "temperature":
        kw["alpha"] = 0.5
    _both(labels, 550_000, kw, 1 << 16, state_at=300_000)


@needs_kernel
@pytest.mark.parametrize("impl", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("strategy", ["uniform", "clusterclip", "paced"])
def test_kernel_equals_numpy_path_across_groups(strategy, impl):
    # 6 clusters of ~3,333 documents: one pass per group, every cluster loads
    # groups 0-2, so most loads start from a stream computed ahead (in a batch of
    # 4 at an earlier load)
    labels = np.random.default_rng(4).integers(0, 6, 20_000)
    with streams4(impl):
        _both(labels, 60_000, {"strategy": strategy, "clip": 4, "seed": 5}, 1 << 14)


@needs_kernel
def test_kernel_resume_from_a_state_equals_numpy_path():
    labels = np.random.default_rng(5).integers(0, 300, 20_000)
    for strategy in ("uniform", "clusterclip", "paced"):
        T = 100_000
        s = ClusterClipSampler(labels, T, strategy=strategy, clip=8, seed=2, cache_dir=False)
        it = iter(s)
        for _ in range(33_333):
            next(it)
        state = s.state_dict()
        outs = []
        for off in (False, True):
            with numpy_path() if off else contextlib.nullcontext():
                r = ClusterClipSampler(labels, T, strategy=strategy, clip=8, seed=2,
                                       world_size=3, rank=1, cache_dir=False)
                r.load_state_dict(state)
                outs.append(np.concatenate(list(r.blocks(5000))))
                assert r._engine._use_kernel is not off
        assert np.array_equal(outs[0], outs[1])
        full = np.concatenate(list(ClusterClipSampler(labels, T, strategy=strategy, clip=8,
                                                      seed=2, cache_dir=False).blocks()))
        assert np.array_equal(outs[0], full[33_333 + 1::3][:outs[0].size])


@needs_kernel
def test_kernel_equals_numpy_path_with_groups():
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 40, 3000)
    groups = np.arange(3000)
    for k in range(40):  # merge some documents of each cluster into groups
        members = np.flatnonzero(labels == k)
        groups[members[: members.size // 2]] = members[0]
    for strategy in ("uniform", "clusterclip", "paced"):
        _both(labels, 4000, {"strategy": strategy, "clip": 3, "seed": 4, "groups": groups},
              1000, consumed=1234, state_at=700)


@needs_kernel
def test_written_schedules_are_byte_identical(tmp_path):
    labels = np.random.default_rng(1).integers(-1, 50, 5000)
    for strategy in ("random", "temperature", "clusterclip", "paced"):
        kw = {"strategy": strategy, "clip": 4, "num_samples": 12_345, "seed": 6,
              "rank": 1, "world_size": 2, "consumed_samples": 999, "cache_dir": False}
        if strategy != "random":
            kw["alpha"] = 0.3
        a = write_schedule(labels, tmp_path / "fast.npy", **kw)
        with numpy_path():
            b = write_schedule(labels, tmp_path / "ref.npy", **kw)
        assert a == b
        assert (tmp_path / "fast.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()


# --------------------------------------------------------------- the primitives
@needs_kernel
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1))
def test_pass_state_is_keyed_streams_blake2b(seed, tag, a, b):
    digest = hashlib.blake2b(struct.pack("<4Q", seed, tag, a, b), digest_size=32,
                             person=b"clusterclip").digest()
    assert list(kernel.pass_state(seed, tag, a, b)) == list(struct.unpack("<4Q", digest))


@needs_kernel
@pytest.mark.parametrize("n", [0, 1, 2, 3, 31, 32, 33, 100, 5000, 200_001])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_shuffle_is_numpy_generator_shuffle(n, dtype):
    # swap partners drawn ahead for prefetching: the same draws, the same order
    for e in (0, 7):
        want = np.arange(n, dtype=np.int64) * 3
        KeyedStreams(11, TAG_EPOCH)(e).shuffle(want)
        got = (np.arange(n) * 3).astype(dtype)
        kernel.shuffle(got, 11, TAG_EPOCH, e, 0)
        assert np.array_equal(got, want)


@contextlib.contextmanager
def streams4(name):
    """The kernel's 4-lane stream hashing set to ``name`` (skip where the CPU lacks it)."""
    before, available = kernel.streams4()
    if name not in available:
        pytest.skip(f"{name} is not available on this CPU")
    kernel.streams4(name)
    try:
        yield
    finally:
        kernel.streams4(before)


@needs_kernel
@pytest.mark.parametrize("impl", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("seed", [0, 2**64 - 1])
def test_streams_computed_ahead_are_the_keyed_streams(seed, impl):
    # A group load computes the stream of the cluster's next group, four at a time
    # (vectorised); each one kept must be KeyedStreams(seed, TAG_PASS)(k, g) after
    # its 16 discarded outputs, whether or not a later load uses it.
    labels = np.random.default_rng(1).integers(0, 3000, 30_000)
    s = ClusterClipSampler(labels, 200_000, strategy="clusterclip", clip=8, seed=seed,
                           cache_dir=False)
    with streams4(impl):
        for _ in s.blocks(50_000):
            pass
    ahead = s._engine._kctx()[10].reshape(-1, 5)
    kept = np.flatnonzero(ahead[:, 0] != np.iinfo(np.uint64).max)
    assert kept.size > 2900  # nearly every cluster loaded a group
    streams = KeyedStreams(s._engine.seed, TAG_PASS)
    for k in kept[::7].tolist():
        g = int(ahead[k, 0])
        want = streams(k, g).bit_generator.state["state"]["state"]
        assert [int(x) for x in ahead[k, 1:]] == [int(x) for x in want], (k, g)


@needs_kernel
def test_kernel_refuses_bad_arrays_instead_of_reading_out_of_bounds():
    s = ClusterClipSampler(np.arange(10) % 3, 50, strategy="uniform", cache_dir=False)
    eng = s._engine
    ctx = eng._kctx()
    u = np.full(4, 2**32 - 1, np.uint32)  # picks the last pool entry
    with pytest.raises(ValueError):  # a pool entry that is no cluster
        kernel.draw(ctx, u, np.array([0, 99]), None, None, 0, None, eng.counts.copy(),
                    np.empty(4, np.int64), None, None)
    with pytest.raises(TypeError):  # wrong item size
        kernel.draw(ctx, u.astype(np.int64), eng.pool, None, None, 0, None, eng.counts,
                    np.empty(4, np.int64), None, None)
    with pytest.raises(ValueError):  # more groups than the pass buffer holds
        kernel.take_grouped(ctx, np.array([1]), np.array([5]), np.array([0]),
                            np.empty(2, np.int64))
    with pytest.raises(ValueError):  # a cluster id beyond K
        kernel.take_grouped(ctx, np.array([3]), np.array([1]), np.array([0]),
                            np.empty(1, np.int64))
    assert ctx[9] == TAG_PASS
    with pytest.raises(ValueError):  # streams computed ahead: 5 words per cluster
        kernel.take_grouped(ctx[:10] + (np.zeros(5 * 3 - 1, np.uint64),) + ctx[11:],
                            np.array([1]), np.array([1]), np.array([0]),
                            np.empty(1, np.int64))
    with pytest.raises(ValueError):  # groups loaded ahead: a buffer like the passes'
        kernel.take_grouped(ctx[:11] + (np.empty(ctx[6].size - 1, ctx[6].dtype),
                                        np.full(3, -1, np.int64), np.zeros(3, np.int64)),
                            np.array([1]), np.array([1]), np.array([0]),
                            np.empty(1, np.int64))


@needs_kernel
@pytest.mark.parametrize("strategy", ["uniform", "temperature", "clusterclip", "paced"])
def test_kernel_equals_numpy_path_with_zero_cluster_weights(strategy):
    # a mixture's zeros: those clusters are never drawn, in the kernel as in numpy
    rng = np.random.default_rng(12)
    labels = rng.integers(-1, 300, 20_000)
    weights = rng.uniform(0.1, 3.0, 300) * (rng.random(300) < 0.6)
    kw = {"strategy": strategy, "clip": 3, "seed": 8, "cluster_weights": weights}
    idx = _both(labels, 25_000, kw, 1 << 12, rank=1, world_size=2, consumed=3001,
                state_at=5000)
    assert (weights[labels[idx]] > 0).all()
    groups = np.where(np.arange(labels.size) % 3 == 1, np.arange(labels.size) - 1,
                      np.arange(labels.size))
    groups = np.where(labels[groups] == labels, groups, np.arange(labels.size))
    _both(labels, 9000, {**kw, "groups": groups}, 1000, consumed=77, state_at=700)


# --------------------------------------------- groups loaded ahead, blocks given back
@contextlib.contextmanager
def helper_from(n, drain=False):
    """draw's helper thread on calls of ``n`` draws or more, whatever this machine's CPUs
    (its groups loaded ahead are the engines' ``nxt``); ``drain``: each call waits for
    the groups its helper was asked for, so that the next calls copy them for certain."""
    old, old_ahead = kernel.helper_min(n, drain), _engine.load_ahead
    _engine.load_ahead = lambda nbytes: True
    try:
        yield
    finally:
        kernel.helper_min(*old)
        _engine.load_ahead = old_ahead


needs_helper = pytest.mark.skipif(kernel is None or not kernel.HELPER,
                                  reason="the kernel has no helper thread here")


@needs_kernel
@needs_helper
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(200, 6000), st.integers(0, 2**31),
       st.sampled_from(["uniform", "temperature", "clusterclip"]), st.integers(1, 6),
       st.floats(0.1, 1.0), st.sampled_from([1, 64, 4096]), st.sampled_from([1, 300, 1 << 14]),
       st.booleans())
def test_groups_loaded_ahead_change_no_draw(k, n, seed, strategy, clip, frac, helper_min,
                                            blocks, drain):
    # A helper thread loads each cluster's next group while the draws run; the draws
    # copy it when it came first, else load it themselves: the same schedule, summary
    # and state as the numpy path whichever came first, on calls of any length.
    labels = np.random.default_rng(seed).integers(0, k, n) ** 2 % (k + 1)  # skewed sizes
    T = max(1, int(frac * clip * n))
    kw = {"strategy": strategy, "clip": clip, "seed": seed}
    if strategy == "temperature":
        kw["alpha"] = 0.5
    with helper_from(helper_min, drain):
        _both(labels, T, kw, blocks, state_at=T // 3)


@needs_kernel
@needs_helper
@pytest.mark.parametrize("strategy", ["uniform", "clusterclip", "temperature"])
def test_groups_loaded_ahead_are_the_groups(strategy):
    # every group the helper published in nxt is the group the numpy path loads
    labels = np.random.default_rng(2).integers(0, 40, 60_000) ** 2 % 1201
    s = ClusterClipSampler(labels, 400_000, strategy=strategy, clip=12, seed=3,
                           cache_dir=False, **({"alpha": 0.5} if strategy == "temperature"
                                               else {}))
    with helper_from(1 << 12, drain=True):
        for _ in s.blocks(1 << 16):
            pass
    ctx = s._engine._kctx()
    nxt, nxt_group = ctx[11], ctx[12]
    published = np.flatnonzero(nxt_group >= 0)
    assert published.size > 10  # the helper ran
    with numpy_path():
        ref = ClusterClipSampler(labels, 400_000, strategy=strategy, clip=12, seed=3,
                                 cache_dir=False)._engine
    ref._ensure_cur()
    for k in published.tolist():
        ref._load_group(k, int(nxt_group[k]))
        a, b = int(ref.seg_off[k]), int(ref.seg_off[k + 1])
        assert np.array_equal(nxt[a:b], ref._cur[a:b]), k


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.booleans(), min_size=1, max_size=40),
       st.sampled_from(["uniform", "clusterclip", "paced", "random"]),
       st.sampled_from([1, 2]))
def test_blocks_given_back_never_change_blocks_held(seed, give, strategy, world):
    # The .npy writer gives back each block once written, and later blocks are drawn
    # into its memory: a block the caller still holds (or any view of it) never changes,
    # and the schedule is the one drawn without giving back.
    labels = np.random.default_rng(seed).integers(-1, 30, 3000)
    kw = {"strategy": strategy, "clip": 5, "seed": seed, "world_size": world,
          "cache_dir": False}
    T = 4 * int((labels >= 0).sum())
    want = np.concatenate(list(make_sampler(labels, T, **kw).blocks(700)))
    s = make_sampler(labels, T, **kw)
    held, got = [], []
    for i, b in enumerate(s.blocks(700)):
        got.append(b.copy())
        if give[i % len(give)]:
            s._give_back(b)
        else:
            held.append((b, b[1:], b.copy()))
        del b
    assert np.array_equal(np.concatenate(got), want)
    for b, view, copy in held:
        assert np.array_equal(b, copy) and np.array_equal(view, copy[1:])
    foreign = np.zeros(700, np.int64)
    s._give_back(foreign)  # not the sampler's: never drawn into
    assert not any(x is foreign for x in getattr(s._engine, "_spares", []))
