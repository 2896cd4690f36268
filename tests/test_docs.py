"""The documentation: the site builds strictly and offline, the API reference is numpydoc
whose cross-references land, and README and the benchmarks page stay within their lengths
and true to what the code prints.

The build is real (``mkdocs build --strict``: any warning, e.g. a broken link or anchor, a
cross-reference mkdocstrings cannot resolve or a docstring section griffe cannot parse,
fails it) into a temporary folder.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
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
    for page, html in pages.items():  # no Sphinx role left as raw text
        assert not re.search(r":(?:class|func|meth|mod|data|attr|exc|obj):`", html), page


def _api_paths() -> list[str]:
    """The dotted paths docs/api/*.md render: each ``::: path``, or the members it lists."""
    paths = []
    for page in sorted((DOCS / "api").glob("*.md")):
        for m in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", page.read_text(encoding="utf-8"),
                             re.M):
            listed = re.search(r"members: \[(.*)\]", m.group(2))
            paths += ([f"{m.group(1)}.{n.strip()}" for n in listed.group(1).split(",")]
                      if listed else [m.group(1)])
    return paths


def _documented(section) -> set[str]:
    return {p.name.lstrip("*") for p in section.value}


def test_the_public_api_docstrings_are_numpydoc():
    """Every object of the API reference, and every public method the site shows of a
    class there, is numpydoc as griffe (mkdocstrings) reads it: each parameter of its
    signature in a Parameters section, what it returns in Returns or Yields, and no Sphinx
    role (which the site would show as raw text)."""
    import griffe

    root = griffe.load("clusterclip", search_paths=[str(ROOT / "src")],
                       docstring_parser="numpy")
    paths = _api_paths()
    assert len(paths) >= 15, paths
    checked = 0
    for path in paths:
        obj = root[path.removeprefix("clusterclip.")]
        if obj.is_attribute:
            continue  # a constant: the site shows its value
        assert obj.docstring is not None, path
        shown = [obj]
        if obj.is_class:
            shown += [m for name, m in obj.members.items() if not name.startswith("_")
                      and m.is_function and m.docstring is not None]
        for o in shown:
            text = o.docstring.value
            assert not re.search(r":(?:class|func|meth|mod|data|attr|exc|obj):`", text), o.path
            if o.is_module or "property" in o.labels:
                continue
            sections = {s.kind.value: s for s in o.docstring.parsed}
            params = [p.name for p in o.parameters if p.name not in ("self", "cls")]
            if params:
                assert "parameters" in sections, (o.path, "no Parameters section")
                missing = set(params) - _documented(sections["parameters"])
                assert not missing, (o.path, "parameters not documented", missing)
            if o.is_function and str(o.returns) not in ("None", "") and o.returns is not None:
                assert {"returns", "yields"} & set(sections), (o.path, "no Returns section")
            checked += 1
    assert checked >= 25, checked  # the classes' methods were reached too


def test_the_public_api_examples_print_what_they_say():
    """The Examples sections of the API reference run as doctests (``>>>`` lines and
    their output), so an example cannot drift from the code."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    seen = 0
    for path in _api_paths():
        try:  # a module: only its own docstring is shown
            obj, finder = importlib.import_module(path), doctest.DocTestFinder(recurse=False)
        except ImportError:  # a class (with its methods), a function or a constant
            module, _, name = path.rpartition(".")
            obj = getattr(importlib.import_module(module), name)
            finder = doctest.DocTestFinder(recurse=True)
        if isinstance(obj, (int, str, tuple)):
            continue  # a constant: no docstring of its own
        for test in finder.find(obj, path, module=False, globs={}):
            if test.examples:
                seen += 1
                runner.run(test, out=lambda _: None)
    assert seen >= 10, seen
    assert runner.summarize(verbose=False).failed == 0


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "autorefs" in (a.get("class") or "") and a.get("href"):
            self.refs.append(a["href"])


def test_every_cross_reference_on_the_site_lands_on_its_anchor(site):
    """mkdocstrings' cross-references ([`name`][dotted.path] in a docstring, the types of
    a Parameters table) are links to the page and anchor of the object they name."""
    pages = {}
    for html in site.rglob("*.html"):
        parser = _Links()
        parser.feed(html.read_text(encoding="utf-8"))
        pages[html.resolve()] = parser
    refs = 0
    for page, parser in pages.items():
        for href in parser.refs:
            assert "://" not in href, (page, href)
            target, _, anchor = href.partition("#")
            dest = (page.parent / target).resolve() if target else page
            assert dest in pages, (page.name, href)
            assert anchor and anchor in pages[dest].ids, (page.name, href)
            refs += 1
    clustering = pages[(site / "api" / "clustering.html").resolve()].refs
    assert "#clusterclip.clustering.KMeans.fit" in clustering  # KMeans' docstring links fit
    assert refs >= 100, refs


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
