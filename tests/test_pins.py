"""Outputs pinned by SHA-256: a refactoring of the sampler must not change one byte.

Every case gives its parameters explicitly (strategy, clip, alpha, seed), so a change
of a default elsewhere does not move a pin. A change that is *meant* to change an
output updates the pin in its own commit and says why.

Each digest covers the schedule's int64 bytes (little-endian), and where noted the
canonical JSON (sorted keys) of the summary and of a ``state_dict``.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from clusterclip import make_sampler
from clusterclip.cli import main
from clusterclip.sampling import write_schedule

N, K = 3000, 30


def _labels() -> np.ndarray:
    return np.random.default_rng(20).integers(-1, K, N)


def _groups(labels: np.ndarray) -> np.ndarray:
    g = np.arange(labels.size)
    for k in range(K):  # a third of each cluster in 2-4 groups of near-duplicates
        m = np.flatnonzero(labels == k)
        third = m[: m.size // 3]
        g[third] = m[(np.arange(third.size) % 3)]
    return g


def _weights() -> np.ndarray:
    return np.random.default_rng(21).uniform(0.1, 2.0, K)


def _doc_tokens(labels: np.ndarray) -> np.ndarray:
    return np.random.default_rng(22).integers(1, 400, labels.size)


def _blob(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(np.ascontiguousarray(p, "<i8").tobytes())
        else:
            h.update(json.dumps(p, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()[:32]  # 128 bits


def _params(strategy: str, weighted: bool) -> dict:
    kw: dict = {"strategy": strategy, "clip": 3, "seed": 11, "cache_dir": False}
    if weighted:
        kw["cluster_weights"] = _weights()
    elif strategy in ("temperature", "clusterclip", "paced"):
        kw["alpha"] = 0.5
    else:
        kw["alpha"] = 0.0
    return kw


STRATEGIES = ("random", "uniform", "temperature", "clusterclip", "paced")
CASES = [(s, w, g) for s in STRATEGIES for w in (False, True) for g in (False, True)
         if not (w and s == "random")]


def _sampler_case(strategy: str, weighted: bool, grouped: bool) -> str:
    labels = _labels()
    kw = _params(strategy, weighted)
    if grouped:
        kw["groups"] = _groups(labels)
    T = 5501
    full = make_sampler(labels, T, **kw)
    sched = np.concatenate(list(full.blocks(1000)))
    summary = full.summary()
    share = make_sampler(labels, T, rank=1, world_size=3, consumed_samples=1234, **kw)
    part = np.concatenate(list(share.blocks(777)))
    s = make_sampler(labels, T, **kw)
    it = iter(s)
    for _ in range(2345):
        next(it)
    state = s.state_dict()
    resumed = make_sampler(labels, T, rank=2, world_size=4, **kw)
    resumed.load_state_dict(state)
    rest = np.concatenate(list(resumed.blocks(500)))
    return _blob(sched, summary, part, share.summary(), state, rest)


@pytest.mark.parametrize(("strategy", "weighted", "grouped"), CASES)
def test_sampler_outputs_are_pinned(strategy, weighted, grouped):
    assert _sampler_case(strategy, weighted, grouped) == SAMPLER_PINS[
        (strategy, weighted, grouped)]


def _budget_case(strategy: str, balance_by: str, tmp_path) -> str:
    labels = _labels()
    kw = _params(strategy, False)
    kw.pop("cache_dir")
    out = tmp_path / "s.npy"
    summary = write_schedule(labels, out, num_tokens=900_000, doc_tokens=_doc_tokens(labels),
                             balance_by=balance_by, rank=1, world_size=2,
                             consumed_samples=17, cache_dir=False, **kw)
    return _blob(np.load(out), summary, out.read_bytes().hex())


BUDGETS = [("random", "docs"), ("uniform", "tokens"), ("clusterclip", "docs"),
           ("clusterclip", "tokens"), ("paced", "docs"), ("paced", "tokens")]


@pytest.mark.parametrize(("strategy", "balance_by"), BUDGETS)
def test_token_budget_schedules_are_pinned(strategy, balance_by, tmp_path):
    assert _budget_case(strategy, balance_by, tmp_path) == BUDGET_PINS[(strategy, balance_by)]


def _cli_case(tmp_path, extra: list[str]) -> str:
    labels = _labels()
    lp, wp, gp = tmp_path / "labels.npy", tmp_path / "w.npy", tmp_path / "g.npy"
    np.save(lp, labels)
    np.save(wp, _weights())
    np.save(gp, _groups(labels))
    out, summ = tmp_path / "out.npy", tmp_path / "summary.json"
    args = [a.replace("W.NPY", str(wp)).replace("G.NPY", str(gp)) for a in extra]
    assert main(["sample", "--labels", str(lp), "--out", str(out), "--summary-json", str(summ),
                 "--seed", "5", "--no-progress", *args]) == 0
    return _blob(out.read_bytes().hex(), summ.read_text())


CLI = {
    "paced": ["--strategy", "paced", "--clip", "3", "--alpha", "0.5", "--num-samples", "6000",
              "--rank", "1", "--world-size", "2", "--consumed-samples", "100"],
    "weights-groups": ["--strategy", "clusterclip", "--clip", "2", "--alpha", "0",
                       "--num-samples", "4000", "--cluster-weights", "W.NPY",
                       "--groups", "G.NPY"],
    "random": ["--strategy", "random", "--clip", "4", "--alpha", "0", "--num-samples", "5000"],
}


@pytest.mark.parametrize("name", sorted(CLI))
def test_sample_command_outputs_are_pinned(name, tmp_path, capsys):
    assert _cli_case(tmp_path, CLI[name]) == CLI_PINS[name]
    capsys.readouterr()


# Digests at commit 892c927 (main before the sampler refactor), numpy path and kernel alike.
SAMPLER_PINS = {
    ('random', False, False): '33275f96ae813a2a302af2965b3c436a',
    ('random', False, True): '2cff2cff9f584508a1de3f10602e1d87',
    ('uniform', False, False): '0253b41b711f8822c6176047d58a42e7',
    ('uniform', False, True): '0af2180b17f0f6fb9af8456c1d0f8726',
    ('uniform', True, False): 'ce20c2b7687379e5c2f18035f923c344',
    ('uniform', True, True): 'dcc0bc2347d3f34cbc9babd2bf6263ee',
    ('temperature', False, False): 'fe65fbae4269045cc8a36c0f0eb9771c',
    ('temperature', False, True): 'b77ca56f9fc6487e4c4d07a9ce97e271',
    ('temperature', True, False): '71689a3b36e7adc46b22070f95b2f416',
    ('temperature', True, True): 'c6c6f8c69fcb248cf14122ef94a6e23d',
    ('clusterclip', False, False): 'da65bd0dd19889a9b63b5077af76d3b4',
    ('clusterclip', False, True): '1c1b75fff43e887f7f572020e8b77793',
    ('clusterclip', True, False): 'b0278e97aadf89f92c2a59c75dd6816f',
    ('clusterclip', True, True): '4c55d269adbcf839e8fedbb25cb11e33',
    ('paced', False, False): 'f36a4c9e49cce24e4b122a97ecbca675',
    ('paced', False, True): 'e177d4aef34393b3ccd4a35f244aac4c',
    ('paced', True, False): '21d42f7d3d126dab45e2a3e137cb524b',
    ('paced', True, True): '470f68b5e8a31f6d8c28e832bb3270da',
}
BUDGET_PINS = {
    ('random', 'docs'): '7fbf201276ecc33fc4c30604f4c49553',
    ('uniform', 'tokens'): 'b1a6909c8e9d21bd8d149a43f4248cfb',
    ('clusterclip', 'docs'): '2cfdc3018f25dbd8b74d4637661842f0',
    ('clusterclip', 'tokens'): '27ea05a29dc399ca901ca605f34b354e',
    ('paced', 'docs'): 'ba289b083d6aa16af74fb6ff347b346b',
    ('paced', 'tokens'): '2728c0f57605b094a116da0cf344456d',
}
CLI_PINS = {
    'weights-groups': '5687f020c96675ac0da893d7cf911dcb',
    'paced': 'fb9367be6feaa6d2b993914694332ed9',
    'random': '0a17fbb3012745b1322e2933d7f6df89',
}
