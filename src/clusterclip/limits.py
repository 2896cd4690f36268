"""The ranges of the numbers clusterclip takes, in one place, and their checks.

Every integer and float of the command line (``clusterclip.cli._options``) and every
number read from a file (a mixture, ``clusterclip.sampling.mixture``) is checked here
where it enters, so that no value reaches numpy, C or torch as an overflow: the bounds
keep every product the code forms (a clip times a cluster size, a seed plus a run's
offset, a budget in tokens) inside int64, and every float finite.

The bounds are generous for real use: a schedule of 2**40 (1.1e12) positions, a budget
of 2**50 (1.1e15) tokens, a clip of 2**20 repetitions, 2**31 - 1 documents per row
count. A value outside them is refused with one line naming it (:class:`InputError`,
or ``argparse``'s error on the command line).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from clusterclip.errors import InputError

#: Seeds of the command line: 0 .. 2**63 - 1 (a command adds small offsets to its seed,
#: which stay below the 2**64 that the sampler and torch take).
MAX_SEED = 2**63 - 1
#: The repetition clip R: R times a cluster's size (< 2**31) or tokens stays in int64.
MAX_CLIP = 2**20
#: Schedule positions: num_samples and consumed_samples.
MAX_SAMPLES = 2**40
#: Token budgets (``--num-tokens``, ``experiment --tokens``).
MAX_TOKENS = 2**50
#: Counts of documents or rows (samples, shards, chunks, files) and of clusters.
MAX_ROWS = 2**31 - 1
#: Tokens of one document (a token-count file): a block of 2**20 positions of them sums
#: well inside int64.
MAX_DOCUMENT_TOKENS = 2**32
#: The cluster weights' exponent alpha (n_k ** alpha) lies in [-MAX_ALPHA, MAX_ALPHA].
MAX_ALPHA = 1000.0
#: Epochs-equivalent of a budget or a schedule's length.
MAX_EPOCHS = 1000.0
#: Tokens of an embedder's window (``--max-length``) and documents of its batch.
MAX_WINDOW = 2**20
#: Threads and worker processes of one command.
MAX_THREADS = 4_096
#: Ranks and world sizes.
MAX_WORLD = 2**20
#: The largest over the smallest positive cluster weight: beyond it the water-filling of
#: ``paced`` (a clip times a size over a weight) would overflow float64.
MAX_WEIGHT_SPAN = 1e200


def shown(value: Any) -> str:
    """``value`` for a message: a huge integer by its first digits, not 400 of them."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def weight_span_problem(weights: Any) -> str | None:
    """What is wrong with finite weights >= 0 whose positive ones span more than
    :data:`MAX_WEIGHT_SPAN` (one phrase), or None."""
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    w = w[w > 0]
    if w.size and float(w.max()) > float(w.min()) * MAX_WEIGHT_SPAN:
        return (f"the largest weight {float(w.max()):g} is more than {MAX_WEIGHT_SPAN:g} "
                f"times the smallest positive one {float(w.min()):g}; set the smallest to 0 "
                f"(never drawn) or raise it")
    return None


def int_problem(value: Any, lo: int, hi: int) -> str | None:
    """What is wrong with ``value`` as an integer in [lo, hi] (one phrase), or None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return f"must be an integer, got {shown(repr(value))}"
    if not lo <= int(value) <= hi:
        return f"{shown(int(value))} is out of range (an integer in {lo} .. {hi})"
    return None


def real_problem(value: Any, lo: float, hi: float, lo_open: bool = False) -> str | None:
    """What is wrong with ``value`` as a finite number in [lo, hi] (``lo_open``: (lo, hi]),
    or None. An integer too large for a float is out of range too."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"must be a number, got {shown(repr(value))}"
    try:
        x = float(value)
    except OverflowError:  # an int beyond float's range
        x = math.inf if value > 0 else -math.inf
    if not math.isfinite(x) or not (lo < x if lo_open else lo <= x) or not x <= hi:
        return f"{shown(value)} is out of range (a number in {real_range(lo, hi, lo_open)})"
    return None


def real_range(lo: float, hi: float, lo_open: bool = False) -> str:
    return f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi]; else InputError naming parameter ``name``."""
    problem = int_problem(value, lo, hi)
    if problem:
        raise InputError(f"{name}: {problem}", params=(name,))
    return int(value)


def check_real(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """``value`` as a finite float in [lo, hi] (``lo_open``: (lo, hi]), -0.0 as 0.0;
    else InputError naming parameter ``name``."""
    problem = real_problem(value, lo, hi, lo_open)
    if problem:
        raise InputError(f"{name}: {problem}", params=(name,))
    return float(value) + 0.0  # -0.0 -> 0.0


# -- a number's range, declared once on the options field that holds it -------------------

def ranged(lo: float, hi: float, *, real: bool = False, lo_open: bool = False,
           words: tuple[str, ...] = (), each: bool = False, **field_options: Any) -> Any:
    """A dataclass field holding an integer in [lo, hi] (``real``: a finite number,
    ``lo_open``: in (lo, hi]), None when its annotation allows it (``int | None``), or one
    of ``words`` (``"auto"``); ``each``: a sequence of such numbers (a list, tuple, range or
    array), at least one, each in range (``ks=(50, 200)``): the one declaration of its
    range. :func:`check_ranges` checks it when the options are made; the command line's
    option that sets it parses the number (:func:`field_range` gives its range to
    ``--help``). ``field_options``: :func:`dataclasses.field`'s (``default=``).

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Options:
    ...     runs: int = ranged(1, 100, default=4)
    ...     def __post_init__(self) -> None:
    ...         check_ranges(self)
    >>> Options(runs=0)
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: runs: 0 is out of range (an integer in 1 .. 100)
    """
    import dataclasses

    return dataclasses.field(metadata={"range": (lo, hi, real, lo_open, words),
                                       "each": each}, **field_options)


def field_range(cls: Any, name: str) -> tuple[float, float, bool, bool, tuple[str, ...]]:
    """``(lo, hi, real, lo_open, words)`` of field ``name`` of options class ``cls``
    (declared with :func:`ranged`); KeyError when it has none."""
    import dataclasses

    return {f.name: f for f in dataclasses.fields(cls)}[name].metadata["range"]


def check_ranges(options: Any) -> None:
    """Check every field of ``options`` declared with :func:`ranged` (InputError naming the
    first bad one; of a list, its first bad element); the values are left as given."""
    import dataclasses

    for f in dataclasses.fields(options):
        if "range" not in f.metadata:
            continue
        lo, hi, real, lo_open, words = f.metadata["range"]
        value = getattr(options, f.name)
        optional = "None" in str(f.type)  # the field's annotation: ``int | None``
        if (value is None and optional) or (isinstance(value, str) and value in words):
            continue  # None where the field takes it, or a word (auto)
        if f.metadata.get("each"):
            try:
                items = [] if isinstance(value, (str, bytes)) else list(value)
            except TypeError:  # not iterable
                items = []
            if not items:
                raise InputError(f"{f.name}: expected a list of at least one number, got "
                                 f"{shown(repr(value))}", params=(f.name,))
            for x in items:
                _check_one(f.name, x, lo, hi, real, lo_open)
        else:
            _check_one(f.name, value, lo, hi, real, lo_open)


def _check_one(name: str, value: Any, lo: float, hi: float, real: bool, lo_open: bool) -> None:
    if real:
        check_real(name, value, lo, hi, lo_open=lo_open)
    else:
        check_int(name, value, int(lo), int(hi))
