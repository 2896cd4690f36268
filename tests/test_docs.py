"""The documentation: the site builds strictly and offline, and README and the benchmarks
page stay within their lengths and true to what the code prints.

The build is real (``mkdocs build --strict``: any warning, e.g. a broken link or anchor or
a docstring mkdocstrings cannot render, fails it) into a temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 200
BENCHMARKS_MAX_LINES = 400


def _nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_every_page_is_in_the_nav_and_built(site):
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    sources = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == sources  # no page left out of the nav, none missing
    for page in nav:
        html = site / page.replace(".md", ".html")
        assert html.is_file(), page
        assert "<h1" in html.read_text(encoding="utf-8"), page


def test_the_site_loads_nothing_from_the_network(site):
    pages = list(site.rglob("*.html"))
    assert pages
    for page in pages:
        html = page.read_text(encoding="utf-8")
        # scripts, stylesheets, icons and images: all from the site itself
        remote = re.findall(r"<(?:script|link|img)[^>]*(?:src|href)=\"(?:https?:)?//[^\"]*\"",
                            html)
        assert remote == [], (page, remote)
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
    for css in site.rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*['\"]?https?:", css.read_text()), css


def test_the_api_reference_is_generated_from_the_docstrings(site):
    from clusterclip.sampling import make_sampler, read_mixture
    from clusterclip.sampling.spec import SamplerSpec

    pages = {p: (site / "api" / f"{p}.html").read_text(encoding="utf-8")
             for p in ("sampling", "mixture", "integrations", "clustering")}
    # the start of each docstring, as the code has it, is the page's text
    for page, obj in (("sampling", make_sampler), ("sampling", SamplerSpec),
                      ("mixture", read_mixture)):
        first = obj.__doc__.strip().splitlines()[0].split("(")[0].replace("``", "").strip()
        text = " ".join(re.sub(r"<[^>]+>", "", pages[page]).split())
        assert len(first) > 20 and first in text, (page, first)
    for page, name in (("sampling", "ClusterClipSampler"), ("sampling", "GroupClipSampler"),
                       ("sampling", "rank_share"), ("integrations", "ClusterClipTorchSampler"),
                       ("integrations", "schedule_dataset"), ("clustering", "KMeans")):
        assert 'id="clusterclip.' in pages[page] and name in pages[page], (page, name)
    for page, html in pages.items():  # Sphinx roles are shown as code, not as raw text
        assert not re.search(r":(?:class|func|meth|mod|data|attr):`", html), page


def test_readme_and_benchmarks_page_stay_within_their_lengths():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    benchmarks = (DOCS / "benchmarks.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= README_MAX_LINES, len(readme)
    assert len(benchmarks) <= BENCHMARKS_MAX_LINES, len(benchmarks)


def test_readme_links_to_docs_pages_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", readme)
    assert links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_readme_sampler_example_prints_what_its_comments_say():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## In Python\n\n```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.splitlines()) <= 10
    said = [line.split("#", 1)[1].rsplit(": ", 1)[1].strip() for line in code.splitlines()
            if line.startswith("print(")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's example
    assert said and out.getvalue().splitlines() == said
