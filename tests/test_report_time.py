"""The report's view of training time: quartile shares per tenth, and the starvation sentence.

Per-tenth shares are checked against a plain per-position loop; the sentence
against the stated rule (late share < fraction x corpus share), both directions.
"""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.report.stats import (
    LATE_TENTHS,
    STARVE_FRACTION,
    ScheduleStats,
    schedule_summary,
    tail_starvation,
)
from clusterclip.sampling.clip import quartile_clusters


def _brute_tenths(labels: np.ndarray, sched: np.ndarray, ids: np.ndarray) -> list[float]:
    """Share of ``ids`` in each tenth: tenth j holds positions i with floor(10 i / T) == j."""
    total = sched.size
    parts = min(10, total)
    num = [0] * parts
    den = [0] * parts
    members = set(ids.tolist())
    for i, doc in enumerate(sched.tolist()):
        # Position i lies in part j when j*T//P <= i < (j+1)*T//P.
        j = next(j for j in range(parts) if j * total // parts <= i < (j + 1) * total // parts)
        den[j] += 1
        num[j] += int(labels[doc]) in members
    return [a / b for a, b in zip(num, den, strict=True)]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_quartile_shares_per_tenth_match_a_per_position_loop(data):
    k = data.draw(st.integers(1, 9), label="K")
    n = data.draw(st.integers(k, 40), label="N")
    labels = np.array(data.draw(st.lists(st.integers(-1, k - 1), min_size=n, max_size=n)),
                      dtype=np.int64)
    labels[:k] = np.arange(k)  # every cluster non-empty
    total = data.draw(st.integers(1, 300), label="T")
    sched = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=total,
                                        max_size=total)), dtype=np.int64)
    block = data.draw(st.integers(1, total), label="block")
    sizes = np.bincount(labels[labels >= 0], minlength=k)
    stats = ScheduleStats(labels, k, total, windows=7)
    stats.consume(sched[i:i + block] for i in range(0, total, block))
    s = schedule_summary(stats, sizes, labels >= 0)
    tail, head = quartile_clusters(sizes)
    assert np.allclose(s["tail_quartile_share_per_tenth"], _brute_tenths(labels, sched, tail))
    assert np.allclose(s["head_quartile_share_per_tenth"], _brute_tenths(labels, sched, head))
    assert s["tenth_end"][-1] == total and len(s["tenth_end"]) == min(10, total)
    # Late share: the last LATE_TENTHS parts, counted directly.
    start = s["late_start"]
    assert start == (min(10, total) - min(LATE_TENTHS, min(10, total))) * total // min(10, total)
    late = labels[sched[start:]]
    assert np.isclose(s["tail_quartile_share_late"], np.isin(late, tail).mean())
    assert np.isclose(s["head_quartile_share_late"], np.isin(late, head).mean())
    # The whole-schedule share is the length-weighted mean of the tenths.
    lengths = np.diff([0] + s["tenth_end"])
    assert np.isclose(np.dot(lengths, s["tail_quartile_share_per_tenth"]) / total,
                      s["tail_quartile_share"])


def _pct_in(sentence: str, name: str) -> None:
    assert re.search(rf"\b{re.escape(name)}\b", sentence), (name, sentence)


@settings(max_examples=200, deadline=None)
@given(late=st.lists(st.floats(0.0, 0.5), min_size=1, max_size=5),
       corpus=st.floats(0.001, 0.5))
def test_starvation_sentence_fires_exactly_below_the_threshold(late, corpus):
    names = [f"s{i}" for i in range(len(late))]
    schedules = {n: {"tail_quartile_share_late": v} for n, v in zip(names, late, strict=True)}
    got = tail_starvation(schedules, corpus)
    threshold = STARVE_FRACTION * corpus
    assert got["threshold"] == threshold
    want = [n for n, v in zip(names, late, strict=True) if v < threshold]
    assert got["starving"] == want
    sentence = got["sentence"]
    # The rule and its numbers are stated in the sentence.
    assert f"{100 * threshold:.1f}%" in sentence and f"{STARVE_FRACTION:g} x" in sentence
    if want:
        assert not sentence.startswith("No strategy starves")
        assert sentence.startswith(f"{want[0]}: the smallest quartile of clusters gets "
                                   f"{100 * schedules[want[0]]['tail_quartile_share_late']:.1f}%")
        for n in names:
            _pct_in(sentence, n)
    else:
        assert sentence.startswith("No strategy starves the tail")


def test_starvation_threshold_both_sides_exactly():
    corpus = 0.2
    at = STARVE_FRACTION * corpus
    below = np.nextafter(at, 0.0)
    assert tail_starvation({"a": {"tail_quartile_share_late": at}}, corpus)["starving"] == []
    assert tail_starvation({"a": {"tail_quartile_share_late": below}}, corpus)["starving"] == ["a"]
