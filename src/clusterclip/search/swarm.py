"""The swarm layout: a *ratios* table and a *metrics* table, one row per proxy run.

This is how RegMix and Olmix publish their proxy swarms, and what ``clusterclip
search propose`` writes and ``clusterclip search fit`` reads. Two CSV tables,
joined on their first column (the run id):

- RegMix: the first column is ``index``; every other column of the ratios table
  is a domain's weight (``train_the_pile_arxiv``, ...), every other column of
  the metrics table a metric (``metric/the_pile_pile_cc_val_loss``, ...).
- Olmix: the first column is ``run`` (or ``run_id``), followed by the metadata
  columns ``name`` and ``index`` (``run,name,index,dclm,wikipedia,arxiv``); its
  metrics table has the same three first columns.

The weight columns are all the others, except ``clip`` and ``timing`` (the
mixture's clip R and timing, where the table has them) and pandas' index
columns (``Unnamed: N``, or an empty name). A row's weights are normalised to
sum 1 (RegMix rounds them to 3 decimals: its rows sum to 0.996-1.003).

Pure Python and numpy; every problem is an :class:`~clusterclip.errors.InputError`
naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.errors import InputError

#: First-column names of the Olmix layout; its metadata columns after the id.
OLMIX_IDS = ("run", "run_id")
OLMIX_META = ("name", "index")
#: Columns that are a mixture's settings, not weights.
SETTINGS = ("clip", "timing")
#: Weight columns a ratios table may have: the predictor fits one length scale per column
#: (RegMix's swarm has 17; a work directory's space at most 32).
MAX_COLUMNS = 256
#: Columns that describe a run, not weights: where its mixture came from, and in a
#: verification round its arm and seed.
LABELS = ("origin", "arm", "seed")
_PANDAS_INDEX = re.compile(r"^(Unnamed: \d+)?$")


@dataclass(frozen=True)
class Table:
    """One swarm table: ``ids`` (the first column, as text), ``meta`` (the Olmix metadata
    columns, by name), ``columns`` (the other columns) and their cells (text)."""

    path: str
    id_column: str
    ids: tuple[str, ...]
    meta: dict[str, tuple[str, ...]]
    columns: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]   # one row per id, one cell per column
    lines: tuple[int, ...]               # each row's line number in the file (1-based)

    @property
    def layout(self) -> str:
        return "olmix" if self.id_column in OLMIX_IDS else "regmix"

    def column(self, name: str) -> list[str]:
        j = self.columns.index(name)
        return [row[j] for row in self.cells]


def read_table(path: str | os.PathLike[str], option: str) -> Table:
    """The CSV table at ``path`` (``option``: the parameter that gave it, named in
    messages and their ``params``): the first column that
    is not a pandas index is the run id; with an Olmix id column, ``name`` and ``index``
    right after it are metadata."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise InputError(f"{option} {path}: cannot read ({e.strerror or e})",
                         params=(option,)) from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{option} {path}: not a CSV table ({e})", params=(option,)) from None
    if not rows or not rows[0]:
        raise InputError(f"{option} {path}: empty; a header line and one row per run are "
                         "expected", params=(option,))
    header = [h.strip() for h in rows[0]]
    keep = [j for j, h in enumerate(header) if not _PANDAS_INDEX.match(h)]
    if not keep:
        raise InputError(f"{option} {path}: no named column in the header", params=(option,))
    id_j = keep[0]
    meta_j = []
    if header[id_j] in OLMIX_IDS:
        meta_j = [j for j in keep[1:3] if header[j] in OLMIX_META]
    other = [j for j in keep[1:] if j not in meta_j]
    names = [header[j] for j in other]
    from collections import Counter

    dup = sorted(n for n, c in Counter(names).items() if c > 1)  # linear: 10^5 columns
    if dup:
        raise InputError(f"{option} {path}: column {dup[0]!r} appears twice in the header",
                         params=(option,))
    ids: list[str] = []
    cells: list[tuple[str, ...]] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{option} {path}: line {i} has {len(row)} fields, the header "
                             f"{len(header)}", params=(option,))
        rid = row[id_j].strip()
        if not rid:
            raise InputError(f"{option} {path}: line {i} has no run id (column "
                             f"{header[id_j]!r})", params=(option,))
        if rid in seen:
            raise InputError(f"{option} {path}: line {i}: run id {rid!r} already on line "
                             f"{seen[rid]}", params=(option,))
        seen[rid] = i
        ids.append(rid)
        cells.append(tuple(row[j].strip() for j in other))
        lines.append(i)
    if not ids:
        raise InputError(f"{option} {path}: no rows below the header", params=(option,))
    meta = {header[j]: tuple(rows[i - 1][j].strip() for i in lines) for j in meta_j}
    return Table(str(path), header[id_j], tuple(ids), meta, tuple(names), tuple(cells),
                 tuple(lines))


def weight_columns(table: Table) -> tuple[str, ...]:
    return tuple(c for c in table.columns if c not in SETTINGS + LABELS)


@dataclass(frozen=True)
class Ratios:
    """The mixtures of a ratios table: ``weights[i]`` normalised over ``columns``, and each
    run's clip and timing where the table has them (else None)."""

    table: Table
    columns: tuple[str, ...]
    weights: np.ndarray                  # float64 (runs, columns), rows sum to 1
    clip: tuple[int, ...] | None
    timing: tuple[str, ...] | None

    @property
    def ids(self) -> tuple[str, ...]:
        return self.table.ids


def _number(text: str, table: Table, i: int, column: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{option} {table.path}: line {table.lines[i]}, column {column!r}: "
                         f"{text!r:.40} is not a number", params=(option,)) from None


def read_ratios(path: str | os.PathLike[str], option: str = "ratios") -> Ratios:
    """The ratios table at ``path``: every weight finite and >= 0, each row's sum > 0 (then
    normalised), clip an integer >= 1 and timing one of the mixture timings where given."""
    from clusterclip.limits import MAX_CLIP
    from clusterclip.sampling.mixture import MIXTURE_TIMINGS

    t = read_table(path, option)
    cols = weight_columns(t)
    if len(cols) > MAX_COLUMNS:
        raise InputError(f"{option} {path}: {len(cols):,} weight columns; the predictor fits "
                         f"one length scale per column and takes at most {MAX_COLUMNS} (group "
                         "the domains first, as super-clusters group clusters)", params=(option,))
    if not cols:
        raise InputError(f"{option} {path}: no weight column (only the run id"
                         f"{', clip and timing' if set(SETTINGS) & set(t.columns) else ''})",
                         params=(option,))
    w = np.empty((len(t.ids), len(cols)))
    for j, c in enumerate(cols):
        for i, text in enumerate(t.column(c)):
            v = _number(text, t, i, c, option)
            if not math.isfinite(v) or v < 0:
                raise InputError(f"{option} {path}: line {t.lines[i]}, column {c!r}: weight "
                                 f"{text} is {'negative' if v < 0 else 'not finite'}; every "
                                 "weight must be finite and >= 0", params=(option,))
            w[i, j] = v
    total = w.sum(axis=1)
    if np.any(total <= 0):
        i = int(np.flatnonzero(total <= 0)[0])
        raise InputError(f"{option} {path}: line {t.lines[i]}: every weight is 0", params=(option,))
    clip = timing = None
    if "clip" in t.columns:
        clip = []
        for i, text in enumerate(t.column("clip")):
            v = _number(text, t, i, "clip", option)
            if not (math.isfinite(v) and v == int(v) and 1 <= v <= MAX_CLIP):
                raise InputError(f"{option} {path}: line {t.lines[i]}, column 'clip': {text} "
                                 f"is not an integer in [1, {MAX_CLIP}]", params=(option,))
            clip.append(int(v))
        clip = tuple(clip)
    if "timing" in t.columns:
        timing = tuple(t.column("timing"))
        for i, v in enumerate(timing):
            if v not in MIXTURE_TIMINGS:
                raise InputError(f"{option} {path}: line {t.lines[i]}, column 'timing': "
                                 f"{v!r:.40} is not one of {', '.join(MIXTURE_TIMINGS)}",
                                 params=(option,))
    return Ratios(t, cols, w / total[:, None], clip, timing)


def read_objective(path: str | os.PathLike[str], objective: list[str],
                   option: str = "metrics") -> tuple[Table, dict[str, float]]:
    """``(table, {run id: objective})``: the mean of the ``objective`` columns for each run
    that has them all (an empty cell or NaN: the run is left out)."""
    t = read_table(path, option)
    missing = [c for c in objective if c not in t.columns]
    if missing:
        shown = ", ".join(t.columns[:8]) + (", ..." if len(t.columns) > 8 else "")
        raise InputError(f"objective {missing[0]}: no such column in {option} {path} (its "
                         f"columns: {shown})", params=("objective", option))
    out: dict[str, float] = {}
    values = [t.column(c) for c in objective]
    for i, rid in enumerate(t.ids):
        row = []
        for c, col in zip(objective, values, strict=True):
            text = col[i]
            v = math.nan if text.lower() in ("", "nan", "na", "null", "none") else \
                _number(text, t, i, c, option)
            if math.isinf(v):
                raise InputError(f"{option} {path}: line {t.lines[i]}, column {c!r}: {text} "
                                 "is not finite", params=(option,))
            row.append(v)
        if not any(math.isnan(v) for v in row):
            out[rid] = float(np.mean(row))
    return t, out


def check_same_columns(a: Ratios, b: Ratios, what: str) -> Ratios:
    """``b`` with its weight columns in ``a``'s order; InputError when the two tables do not
    weigh the same columns (``what`` names ``b``'s parameter)."""
    if set(a.columns) != set(b.columns):
        only_a = sorted(set(a.columns) - set(b.columns))
        only_b = sorted(set(b.columns) - set(a.columns))
        diff = "; ".join([f"{only_b[0]!r} only in {b.table.path}"] * bool(only_b)
                         + [f"{only_a[0]!r} only in {a.table.path}"] * bool(only_a))
        raise InputError(f"{what} {b.table.path}: its weight columns are not those of "
                         f"{a.table.path} ({diff})", params=(what,))
    order = [b.columns.index(c) for c in a.columns]
    return Ratios(b.table, a.columns, b.weights[:, order], b.clip, b.timing)


def format_weight(v: float) -> str:
    """A weight as written in a ratios table: 12 decimals, trailing zeros dropped."""
    text = f"{v:.12f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def ratios_rows(id_column: str, ids: list[str], columns: list[str], weights: np.ndarray,
                clip: list[int] | None = None, timing: list[str] | None = None,
                meta: bool = False, labels: dict[str, list[str]] | None = None
                ) -> list[list[str]]:
    """The rows (header first) of a ratios table: ``id_column``, with ``meta`` Olmix's
    ``name`` (the id) and ``index`` (the row number), the weights, clip and timing, then
    the ``labels`` columns (of :data:`LABELS`: not weights)."""
    olmix = meta
    labels = labels or {}
    head = [id_column, *(OLMIX_META if olmix else ()), *columns,
            *(["clip"] if clip is not None else []), *(["timing"] if timing is not None else []),
            *labels]
    rows = [head]
    for i, rid in enumerate(ids):
        rows.append([rid, *([rid, str(i)] if olmix else []),
                     *(format_weight(float(v)) for v in weights[i]),
                     *([str(clip[i])] if clip is not None else []),
                     *([timing[i]] if timing is not None else []),
                     *(str(v[i]) for v in labels.values())])
    return rows


def write_csv(path: str | os.PathLike[str], rows: list[list[Any]]) -> None:
    """``rows`` as a CSV file (``\\n`` line ends), written atomically."""
    import io

    from clusterclip.storage.atomic import write_text

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    write_text(path, buf.getvalue())


def run_id(weights: np.ndarray, clip: int | None, timing: str | None) -> str:
    """A stable run id from a mixture's content (``mix-`` and 10 hex digits): the same
    mixture gets the same id in every round and every file."""
    from clusterclip.storage.digests import fingerprint

    return "mix-" + fingerprint({"w": [format_weight(float(v)) for v in weights],
                                 "clip": clip, "timing": timing})[:10]


def group_names(groups: np.ndarray) -> list[str]:
    """The swarm's column names of the groups ``groups`` (int[K], group of each cluster):
    ``cluster_K`` when every cluster is its own group, else ``super_cluster_G``."""
    g = int(np.max(groups)) + 1
    direct = g == len(groups)
    return [f"cluster_{i}" if direct else f"super_cluster_{i}" for i in range(g)]


def search_tables(results: dict[str, Any]) -> tuple[list[list[str]], list[list[str]]]:
    """The proxies of a ``clusterclip search`` (its results dict) as a swarm: the ratios
    rows (``run``, the group weights, clip, timing) and the metrics rows (``run``, then the
    val metrics: ``objective`` and the losses), so that ``search fit`` reads the offline
    search's proxies as it reads a trainer's."""
    groups = np.asarray(results["space"]["groups"], dtype=np.int64)
    names = group_names(groups)
    proxies = results["proxies"]
    g = np.stack([np.bincount(groups, weights=np.asarray(p["weights"], dtype=np.float64),
                              minlength=len(names)) for p in proxies])
    ids = [run_id(g[i], p["clip"], p["timing"]) for i, p in enumerate(proxies)]
    ratios = ratios_rows("run", ids, names, g, [p["clip"] for p in proxies],
                         [p["timing"] for p in proxies])
    keys = list(proxies[0]["val"])
    metrics = [["run", *keys]] + [[rid, *(repr(float(p["val"][k])) for k in keys)]
                                  for rid, p in zip(ids, proxies, strict=True)]
    return ratios, metrics
