"""griffe extension: the code's numpydoc-like sections as Markdown lists.

The docstrings write ``name : what it is`` with the description in the type slot
(``num_samples : int >= 1. Length T of the global schedule.``), which numpydoc parsers
split into a misleading type/description table. This rewrites each section (a title
underlined with dashes) into a bold title and one bullet per entry, and the site renders
the docstrings as plain Markdown (``docstring_style: null`` in mkdocs.yml). Only the
docs see it: the source is unchanged.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ENTRY = re.compile(r"^([\w*, ]+?) : (.*)$")
_SECTIONS = ("Parameters", "Attributes", "Returns", "Raises", "Yields", "Notes",
             "Examples", "See Also", "Other Parameters")


def to_markdown(text: str) -> str:
    """``text`` with every dash-underlined section rewritten as a Markdown list."""
    lines, out, in_list = text.splitlines(), [], False
    i = 0
    while i < len(lines):
        line, nxt = lines[i], lines[i + 1] if i + 1 < len(lines) else ""
        i += 1
        if line.strip() in _SECTIONS and nxt.strip() and set(nxt.strip()) == {"-"}:
            out += [f"**{line.strip()}**", ""]
            in_list = line.strip() not in ("Notes", "Examples")
            i += 1
            continue
        entry = _ENTRY.match(line) if in_list else None
        if entry:
            names = ", ".join(f"`{n.strip()}`" for n in entry.group(1).split(","))
            out.append(f"- {names}: {entry.group(2)}")
        elif in_list and line.strip() and not line.startswith(" "):
            in_list = False  # prose after the entries ends the list
            out += ["", line]
        else:
            out.append(line)  # blank, or an entry's indented continuation
    return "\n".join(out)


class DocstringsAsMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(textwrap.dedent(obj.docstring.value))
