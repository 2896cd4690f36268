"""``W/report/index.html``: the report as one self-contained page.

The page opens from disk with no network: its script and style are inlined
from ``report/assets/`` and its data is one JSON block (coordinates as
base64 float32, so 10^5 points stay small). No CDN, no web fonts, no
external request. It shows the map of the clusters (``W/map/``, see
:mod:`clusterclip.report.projection`), a panel per cluster, the sortable
cluster table, the mixture over training per strategy (one colour per
strategy, :func:`clusterclip.plotting.strategy_color`) and the experiment's
and the search's verdicts when they exist.

:func:`page_data` gathers plain data (arrays in, JSON-ready dict out);
:func:`render_page` writes the HTML. The same data gives the same bytes.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.plotting import strategy_color

FILE = "index.html"
HOVER_CHARS = 200  # characters of a document shown on hover
LABEL_TERMS = 3  # top terms in a cluster's label on the map


@dataclass(frozen=True)
class MapPoints:
    """The sampled documents drawn on the map: ``rows`` int64[n] document indices,
    ``coords`` float32[n, 2], ``labels`` int[n] their clusters, ``texts`` their first
    :data:`HOVER_CHARS` characters (None without a corpus index), ``of`` the number
    of documents in the corpus."""

    rows: np.ndarray
    coords: np.ndarray
    labels: np.ndarray
    texts: list[str] | None
    of: int


def _b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def _round(values: Sequence[float] | np.ndarray, digits: int = 5) -> list[float]:
    return [float(f"{float(v):.{digits}g}") for v in np.asarray(values, dtype=np.float64)]


def verdict_text(path: Path) -> str | None:
    """The verdict of a results.md: its lines from the first up to the first line that
    starts with ``## `` (CONTRACTS.md, section 3), or None when the file is absent."""
    if not path.is_file():
        return None
    lines = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("## "):
            break
        lines.append(line)
    return "\n".join(lines).strip() or None


_INLINE = [(re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
           (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
           (re.compile(r"(?<![*\w])\*([^*]+)\*(?![*\w])"), r"<em>\1</em>")]


def _inline(text: str) -> str:
    out = html.escape(text, quote=True)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def markdown_html(text: str) -> str:
    """The small markdown of a verdict (headings, paragraphs, ``- `` lists, code, bold,
    emphasis) as HTML; everything else shows as text (escaped, never markup)."""
    out: list[str] = []
    para: list[str] = []
    items: list[str] = []

    def flush() -> None:
        if para:
            out.append("<p>" + _inline(" ".join(para)) + "</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
        elif line.startswith("#"):
            flush()
            out.append("<h3>" + _inline(line.lstrip("#").strip()) + "</h3>")
        elif line.startswith(("- ", "* ")):
            if para:
                flush()
            items.append(line[2:])
        elif items and raw.startswith("  "):
            items[-1] += " " + line
        else:
            if items:
                flush()
            para.append(line)
    flush()
    return "\n".join(out)


def _clusters(sizes: np.ndarray, shares: Mapping[str, np.ndarray],
              token_parts: Mapping[str, np.ndarray], tenths: Mapping[str, np.ndarray],
              readable: Mapping[str, Any], cohesion: np.ndarray | None) -> list[dict[str, Any]]:
    """One record per non-empty cluster, largest first."""
    from clusterclip.report.readable import by_size

    total = max(1, int(sizes.sum()))
    out = []
    for c in by_size(sizes).tolist():
        if sizes[c] == 0:
            continue
        docs = [{"doc": int(i), "text": readable["snippets"].get(int(i), "")}
                for i in readable["nearest"][c].tolist()]
        out.append({
            "id": c, "size": int(sizes[c]), "share": float(f"{sizes[c] / total:.5g}"),
            "terms": list(readable["terms"][c]),
            "docShare": {s: float(f"{v[c]:.5g}") for s, v in shares.items()},
            "tokenShare": {s: float(f"{v[c]:.5g}") for s, v in token_parts.items()},
            "tenths": {s: _round(v[:, c]) for s, v in tenths.items()},
            "cohesion": None if cohesion is None or not np.isfinite(cohesion[c])
            else float(f"{cohesion[c]:.4g}"),
            "nearest": docs})
    return out


def _map(points: MapPoints | None, readable: Mapping[str, Any]) -> dict[str, Any] | None:
    if points is None:
        return None
    labels = np.asarray(points.labels, dtype=np.int64)
    centres = {}
    for c in np.unique(labels[labels >= 0]).tolist():
        member = points.coords[labels == c]
        centres[str(c)] = _round(np.median(member, axis=0), 6)
    return {"n": int(points.rows.size), "of": int(points.of),
            "x": _b64(points.coords[:, 0], "<f4"), "y": _b64(points.coords[:, 1], "<f4"),
            "cluster": _b64(labels, "<i4"), "doc": _b64(points.rows, "<i4")
            if points.rows.size == 0 or points.rows.max() < 2**31 else None,
            "text": points.texts, "centres": centres,
            "labels": {str(c): " · ".join(t[:LABEL_TERMS])
                       for c, t in enumerate(readable["terms"]) if t}}


def page_data(summary: Mapping[str, Any], *, sizes: np.ndarray,
              shares: Mapping[str, np.ndarray], token_parts: Mapping[str, np.ndarray],
              tenths: Mapping[str, np.ndarray], tenth_end: Sequence[float],
              readable: Mapping[str, Any], cohesion: np.ndarray | None,
              points: MapPoints | None, verdicts: Sequence[Mapping[str, str]],
              links: Sequence[Mapping[str, str]], map_note: str | None) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data.

    ``shares``/``tenths``: per schedule, float[K] share of its samples and float[P, K]
    share of each part of training (P tenths ending at fractions ``tenth_end``) per
    cluster; ``token_parts``: float[K] token shares (schedules and ``corpus``);
    ``cohesion``: float[K] mean cosine to the centroid (None without scores);
    ``verdicts``: ``{"title", "html", "href"}``; ``links``: ``{"text", "href"}``."""
    names = list(shares)
    sched = summary["schedules"]
    choose = summary.get("choose_clip") or {}
    return {
        "documents": summary["documents"], "eligible": summary["eligible_documents"],
        "clusters": summary["clusters"]["clusters"], "budget": summary["num_samples"],
        "recommended": choose.get("recommended_clip"), "reason": choose.get("reason"),
        "late": summary["tail_starvation"]["sentence"],
        "strategies": [{"name": s, "color": strategy_color(s, i)} for i, s in enumerate(names)],
        "tenthEnd": _round(tenth_end),
        "mixture": {"tail": {s: sched[s]["tail_quartile_share_per_tenth"] for s in names},
                    "head": {s: sched[s]["head_quartile_share_per_tenth"] for s in names},
                    "corpusTail": summary["corpus_tail_share"],
                    "corpusHead": summary["corpus_head_share"],
                    "quartileClusters": summary["quartile_clusters"]},
        "tokens": bool(token_parts),
        "cluster": _clusters(np.asarray(sizes), shares, token_parts, tenths, readable,
                             cohesion),
        "map": _map(points, readable), "mapNote": map_note,
        "verdicts": list(verdicts), "links": list(links), "notes": list(summary["notes"]),
    }


def _asset(name: str) -> str:
    return resources.files("clusterclip.report").joinpath("assets", name).read_text("utf-8")


def _script_json(data: Any) -> str:
    """JSON that is safe inside ``<script>``: no ``<``, ``>`` or ``&`` left raw."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_page(data: Mapping[str, Any]) -> str:
    """The HTML text of index.html (script, style and data inlined)."""
    verdicts = "".join(
        f'<section class="verdict"><div class="vhead">{html.escape(v["title"])} · '
        f'<a href="{html.escape(v["href"], quote=True)}">{html.escape(v["href"])}</a></div>'
        f'{v["html"]}</section>' for v in data["verdicts"])
    links = " · ".join(f'<a href="{html.escape(a["href"], quote=True)}">'
                       f'{html.escape(a["text"])}</a>' for a in data["links"])
    parts = {"/*STYLE*/": _asset("page.css"), "<!--LINKS-->": links,
             "<!--VERDICTS-->": verdicts, "/*DATA*/": _script_json(data),
             "/*SCRIPT*/": _asset("page.js")}
    # One pass: what is inserted is never searched for markers again.
    return _MARKERS.sub(lambda m: parts[m.group(0)], _asset("page.html"))


_MARKERS = re.compile(r"/\*STYLE\*/|<!--LINKS-->|<!--VERDICTS-->|/\*DATA\*/|/\*SCRIPT\*/")
