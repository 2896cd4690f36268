"""The rounds of the own-trainer loop on a work directory: every row of every ratios
table names exactly one per-cluster mixture file.

``search propose`` writes round 1 (``ratios.csv``, ``mixtures/<run>.json``,
``round.json``); ``search fit --propose`` writes the next one the same way
(``proposals.csv``, ``mixtures/<run>.json``, ``round.json``, and with a budget and a
format each run's schedule and export). ``round.json`` holds what the next round must
draw alike: the groups, the prior that splits a group's weight among its clusters
(:attr:`~clusterclip.search.space.SearchSpace.within`), the corpus documents kept out
(the target's copies), the budget and seed. A row's mixture is its file beside its
table (:func:`row_candidates`); only a row without one (a mixture the user added) is
its group weights split by that rule. ``--choose`` copies the chosen run's own file
(:func:`chosen_mixture`): the weights, clip, timing, exclusions, budget and seed its
schedule was drawn with, so ``sample --mixture`` of it reproduces that schedule.

Pure Python and numpy; the work directory is read by the caller.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.search.space import Candidate, SearchSpace
from clusterclip.storage import jsonfile

#: Group weights of a row and of its mixture file agree to this (the table keeps 12
#: decimals).
ROW_TOLERANCE = 1e-9
#: The keys of ``round.json`` that rounds of one search share.
SHARED = ("groups", "prior", "exclude")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``what`` it should hold), read by the one bounded
    reader of every JSON file (:func:`clusterclip.storage.jsonfile.read_json`); InputError
    naming the file otherwise."""
    try:
        data = jsonfile.read_json(path, what)
    except FileNotFoundError:
        raise InputError(f"{path}: cannot read it (no such file; expected {what})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object (expected {what})")
    return data


def round_record(tables: tuple[str, ...]) -> dict[str, Any] | None:
    """The ``round.json`` beside the ratios ``tables`` (None when none has one); the rounds
    must agree on :data:`SHARED` (InputError naming both files otherwise)."""
    found = []
    for t in tables:
        f = Path(t).resolve().parent / "round.json"
        if f.is_file():
            found.append((f, read_json(f, "a round record of `search propose`")))
    if not found:
        return None
    (f0, r0), rest = found[0], found[1:]
    for f, r in rest:
        for key in SHARED:
            if r.get(key) != r0.get(key):
                raise InputError(f"ratios: the rounds do not match: {f} and {f0} differ in "
                                 f"{key} (rounds of one search share the work directory's "
                                 "groups, the target's prior and its kept-out copies)",
                                 params=("ratios",))
    return r0


def check_record(record: dict[str, Any], groups: np.ndarray, workdir: str) -> None:
    """InputError when ``record``'s groups are not the work directory's (it was clustered
    again, or the round is of another one)."""
    if record.get("groups") != groups.tolist():
        raise InputError(f"workdir {workdir}: its clusters are not those of the rounds' "
                         f"round.json (written for {record.get('workdir')}); give the work "
                         "directory the rounds were proposed on", params=("workdir",))


def with_prior(space: SearchSpace, record: dict[str, Any] | None) -> SearchSpace:
    """``space`` with the prior of ``record`` (the rule that split round 1's group weights
    among the clusters), when it has one."""
    if record is None or record.get("prior") is None:
        return space
    return replace(space, prior=np.asarray(record["prior"], dtype=np.float64))


def mixture_file(folder: Path, run: str) -> Path:
    """Where the mixture file of run ``run`` of a table in ``folder`` is."""
    return folder / "mixtures" / f"{run}.json"


def row_candidates(space: SearchSpace, ratios: Any, rows: list[int], folders: list[Path],
                   expand: Any) -> list[Candidate]:
    """The mixture of each row of ``ratios`` in ``rows``: its own file beside its table
    (checked against the row: the same group weights, clip and timing), else
    ``expand(i)`` (its group weights split by the rule). ``origin`` is the run id."""
    from clusterclip.sampling.mixture import read_mixture

    out = []
    for i in rows:
        rid = ratios.ids[i]
        f = mixture_file(folders[i], rid)
        if not f.is_file():
            out.append(expand(i))
            continue
        m = read_mixture(f, space.num_clusters)
        w = np.asarray(m.weights, dtype=np.float64)
        if abs(float(w.sum()) - 1.0) > ROW_TOLERANCE:  # a file the rounds wrote sums to 1:
            w = w / w.sum()  # its weights are the run's, bit for bit (the offline search's)
        same = np.abs(space.group_sums(w) - ratios.weights[i]).max() <= ROW_TOLERANCE
        if ratios.clip is not None:
            same &= ratios.clip[i] == m.clip
        if ratios.timing is not None:
            same &= ratios.timing[i] == m.timing
        if not same:
            raise InputError(f"ratios: run {rid!r} (line {ratios.table.lines[i]}): its row "
                             f"is not the mixture of its file {f} (weights, clip or timing "
                             "differ); the row and the file must name one mixture",
                             params=("ratios",))
        out.append(Candidate(tuple(float(x) for x in w), m.clip, m.timing, rid))
    return out


def chosen_mixture(folder: Path, run: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The mixture file of the chosen run ``run`` as it is, plus ``extra``; InputError when
    it is not beside its table (a mixture that never ran is not written)."""
    f = mixture_file(folder, run)
    if not f.is_file():
        raise InputError(f"choose: the chosen run {run!r} has no mixture file {f}; the "
                         "mixture written must be the one trained, so give the tables of "
                         "ratios in the folders `search propose` / `search fit --propose` "
                         "wrote them in", params=("choose",))
    data = read_json(f, "a mixture file")
    return {**data, **extra, "mixture_file": str(f)}
