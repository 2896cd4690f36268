"""mkdocs hook: the docstrings' Sphinx roles (:class:`~a.b.C`) shown as code (`C`).

The code's docstrings are written for Sphinx-style readers; mkdocstrings renders them as
Markdown, where a role would stay as literal text. Only the rendered HTML is changed.
"""

from __future__ import annotations

import re

_NAMES = r"(?:class|func|meth|mod|data|attr|exc|obj)"
# a role in prose: Markdown made its target a code span
_ROLE = re.compile(rf":{_NAMES}:<code>(~?)([\w.\s]+?)</code>")
# a role inside a code span already (a parameter's type): the backticks are still there
_RAW = re.compile(rf":{_NAMES}:`(~?)([\w.]+)`?")


def _target(tilde: str, target: str) -> str:
    target = re.sub(r"\s+", "", target)
    short = target.rsplit(".", 1)[-1]
    return short if tilde and short else target


def on_page_content(html: str, **_: object) -> str:
    html = _ROLE.sub(lambda m: f"<code>{_target(m[1], m[2])}</code>", html)
    return _RAW.sub(lambda m: _target(m[1], m[2]), html)
