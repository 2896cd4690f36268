"""``W/report/index.html`` in a real browser (headless Chromium, ``_browser.py``), and the
``map`` stage that draws its map (umap-learn, cached in ``W/map/``).

One work directory and one report (600 documents, a map of 400 of them) are shared by
every test of this module; each browser test loads the page afresh from ``file://``.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from _browser import chromium, wait_for
from _report_workdir import make_report_workdir
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.cli import main
from clusterclip.report.projection import sample_rows
from clusterclip.report.terms import one_line

MAP_SAMPLE = 400
SEARCH_VERDICT = ("# Mixture search\n\nThe searched mixture is **measurably better** than "
                  "random on `target`: <script>alert(1)</script>\n\n- macro: no measurable "
                  "difference\n\n## Setup\n\nnot part of the verdict\n")


@pytest.fixture(scope="module")
def reported(tmp_path_factory, pydocs_path) -> Path:
    """The work directory after one `report` (with an experiment's and a search's results)."""
    w = make_report_workdir(tmp_path_factory.mktemp("page_wd"), pydocs_path)
    (w / "experiment").mkdir()
    (w / "experiment" / "results.md").write_text(
        "# ClusterClip experiment\n\n**Verdict: no strategy is measurably better.**\n\n"
        "## Setup\n\nhidden\n", encoding="utf-8")
    (w / "search").mkdir()
    (w / "search" / "results.md").write_text(SEARCH_VERDICT, encoding="utf-8")
    assert main(["report", "--workdir", str(w), "--map-sample", str(MAP_SAMPLE)]) == 0
    return w


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def _open(browser, w: Path):
    browser.get_log("browser")  # drained: only what this page logs and requests is checked
    browser.get_log("performance")
    browser.get((w / "report" / "index.html").resolve().as_uri())
    wait_for(browser, "window.clusterclip && window.clusterclip.ready")
    return browser


def _clusters(w: Path) -> dict[int, list[str]]:
    with open(w / "report" / "clusters.csv", newline="", encoding="utf-8") as f:
        return {int(r["label"]): r["top_terms"].split() for r in csv.DictReader(f)
                if int(r["size"]) > 0}


def _sample_texts(w: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The map's documents, their clusters and their first 200 characters, from the corpus."""
    from clusterclip.corpus import Corpus

    rows = np.load(w / "map" / "sample.npy")
    labels = np.load(w / "labels.npy")[rows]
    texts = [one_line(t, 200) for _, t in Corpus.load(w / "corpus").iter_texts_at(rows)]
    return rows, labels, texts


def test_page_loads_offline_with_no_error_and_no_request_outside_file(reported, browser,
                                                                      tmp_path):
    html = (reported / "report" / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)[^>]*\s(src|href)=", html)
    # outside the inlined data (the documents' own text may hold any URL, the base64 may
    # spell "cdn"), every URL the page's code and style hold is SVG's XML namespace
    code = re.sub(r'(<script type="application/json" id="data">).*?(</script>)', r"\1\2",
                  html, flags=re.S)
    urls = re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s\"'<>)]*", code)
    assert all(u.startswith("http://www.w3.org/") for u in urls), urls[:5]
    assert "fonts.googleapis" not in code and "cdn" not in code.lower()
    _open(browser, reported)
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    page = (reported / "report" / "index.html").resolve().as_uri()
    sent = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    # The page's requests (the browser's own pages, chrome://, are not the page's).
    urls = [m["params"]["request"]["url"] for m in sent
            if m["method"] == "Network.requestWillBeSent"
            and m["params"].get("documentURL") == page]
    assert page in urls  # the log does hold the page's own load
    urls += browser.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    assert urls and all(u.split(":", 1)[0] in ("file", "data", "blob") for u in urls), urls
    browser.save_screenshot(str(tmp_path / "report_page.png"))
    assert (tmp_path / "report_page.png").stat().st_size > 10_000


def test_points_drawn_equal_the_sample(reported, browser):
    rows = np.load(reported / "map" / "sample.npy")
    summary = json.loads((reported / "report" / "summary.json").read_text(encoding="utf-8"))
    assert rows.size == MAP_SAMPLE == summary["map"]["documents"]
    _open(browser, reported)
    drawn = browser.execute_script("return window.clusterclip.pointsDrawn")
    assert drawn == MAP_SAMPLE
    assert int(browser.find_element("id", "map").get_attribute("data-points-drawn")) == drawn
    caption = browser.find_element("id", "mapcaption").text
    assert f"Map of {MAP_SAMPLE} documents of {summary['documents']}" in caption


# The screen position of a point of cluster k at least 9 px from every point of another
# cluster (so that a click there can only mean k), or null.
_ISOLATED = """
var k = arguments[0], api = window.clusterclip, n = api.sample, own = api.pointsOf(k);
for (var a = 0; a < own.length; a++) {
  var p = api.screenOf(own[a]), ok = true;
  for (var j = 0; j < n && ok; j++) {
    if (own.indexOf(j) >= 0) continue;
    var q = api.screenOf(j);
    if (Math.abs(q.x - p.x) < 9 && Math.abs(q.y - p.y) < 9) ok = false;
  }
  if (ok) return [p.x, p.y];
}
return null;
"""


def test_clicking_cluster_k_shows_its_top_terms(reported, browser):
    from selenium.webdriver.common.action_chains import ActionChains

    terms = _clusters(reported)
    _, labels, _ = _sample_texts(reported)
    _open(browser, reported)
    canvas = browser.find_element("id", "map")
    size = canvas.size
    clicked = 0
    for k in sorted(set(labels[labels >= 0].tolist()), key=lambda c: -np.sum(labels == c)):
        spot = browser.execute_script(_ISOLATED, k)
        if spot is None:
            continue
        ActionChains(browser).move_to_element_with_offset(
            canvas, int(spot[0] - size["width"] / 2), int(spot[1] - size["height"] / 2)
        ).click().perform()
        panel = browser.find_element("id", "panel")
        assert panel.get_attribute("data-cluster") == str(k)
        chips = [e.text for e in panel.find_elements("css selector", ".term")]
        assert chips == terms[k]
        clicked += 1
        if clicked == 2:
            break
    assert clicked == 2, "no two clusters with an isolated point on the map"
    # The table opens a cluster too: the smallest cluster's row.
    smallest = min(terms, key=lambda c: (len(terms[c]) == 0, c))
    browser.find_element("css selector", f'#clusters tbody tr[data-id="{smallest}"]').click()
    panel = browser.find_element("id", "panel")
    assert panel.get_attribute("data-cluster") == str(smallest)
    assert [e.text for e in panel.find_elements("css selector", ".term")] == terms[smallest]


def test_searching_a_term_highlights_its_documents_and_clusters(reported, browser, tmp_path):
    terms = _clusters(reported)
    _, labels, texts = _sample_texts(reported)
    query = "socket"
    by_text = np.array([query in t.lower() for t in texts])
    by_terms = {c for c, ts in terms.items() if any(query in t for t in ts)}
    lit = by_text | np.isin(labels, list(by_terms))
    assert 0 < by_text.sum() < len(texts)  # the query separates documents
    _open(browser, reported)
    box = browser.find_element("id", "search")
    box.send_keys(query)
    wait_for(browser, f"document.getElementById('matches').dataset.documents === "
                      f"'{int(by_text.sum())}'")
    api = browser.execute_script("return window.clusterclip")
    assert api["matches"] == int(by_text.sum())
    assert api["highlighted"] == int(lit.sum())
    assert sorted(api["matchedClusters"]) == sorted(by_terms)
    hit_rows = browser.find_elements("css selector", "#clusters tbody tr.hit")
    assert sorted(int(r.get_attribute("data-id")) for r in hit_rows) == sorted(by_terms)
    browser.save_screenshot(str(tmp_path / "report_page_search.png"))


def test_cluster_table_sorts_by_size(reported, browser):
    sizes = {}
    with open(reported / "report" / "clusters.csv", newline="", encoding="utf-8") as f:
        sizes = {int(r["label"]): int(r["size"]) for r in csv.DictReader(f)}
    _open(browser, reported)

    def order() -> list[int]:
        return [int(r.get_attribute("data-id"))
                for r in browser.find_elements("css selector", "#clusters tbody tr")]

    assert [sizes[c] for c in order()] == sorted((s for s in sizes.values() if s), reverse=True)
    browser.find_element("css selector", '#clusters th[data-key="size"]').click()
    assert [sizes[c] for c in order()] == sorted(s for s in sizes.values() if s)


def test_verdicts_are_shown_escaped_and_linked(reported, browser):
    md = (reported / "report" / "report.md").read_text(encoding="utf-8")
    assert "](index.html)" in md and "](../search/results.md)" in md
    _open(browser, reported)
    verdicts = browser.find_elements("css selector", ".verdict")
    assert len(verdicts) == 2
    text = verdicts[1].text
    assert "measurably better" in text and "<script>alert(1)</script>" in text
    assert "not part of the verdict" not in text
    links = [a.get_attribute("href") for a in browser.find_elements("css selector", ".verdict a")]
    assert links[0].endswith("/experiment/results.md") and links[1].endswith(
        "/search/results.md")


def test_rerun_reuses_the_map_and_a_new_sample_redraws_it(reported, tmp_path):
    from clusterclip.workdir import Workdir

    before = Workdir(reported, create=False).stage("map")["finished"]
    coords = (reported / "map" / "coords.npy").read_bytes()
    assert main(["report", "--workdir", str(reported), "--map-sample", str(MAP_SAMPLE),
                 "--strategies", "random", "--out", str(tmp_path / "other")]) == 0
    assert Workdir(reported, create=False).stage("map")["finished"] == before
    assert (reported / "map" / "coords.npy").read_bytes() == coords
    assert (tmp_path / "other" / "index.html").is_file()
    assert main(["report", "--workdir", str(reported), "--map-sample", "0",
                 "--out", str(tmp_path / "none")]) == 0
    page = (tmp_path / "none" / "index.html").read_text(encoding="utf-8")
    assert '"map":null' in page and "no map: map_sample 0" in page


def test_map_sample_is_seeded_and_within_the_valid_documents():
    valid = np.ones(1000, dtype=bool)
    valid[::7] = False
    a = sample_rows(valid, 1000, 300, seed=3)
    assert a.size == 300 and np.all(np.diff(a) > 0) and valid[a].all()
    assert np.array_equal(a, sample_rows(valid, 1000, 300, seed=3))
    assert not np.array_equal(a, sample_rows(valid, 1000, 300, seed=4))
    assert np.array_equal(sample_rows(valid, 1000, 5000, seed=3), np.flatnonzero(valid))


def test_projection_is_deterministic(reported):
    from clusterclip.report.projection import project

    X = np.load(reported / "embeddings.npy")[:200]
    a, b = project(X, seed=1), project(X, seed=1)
    assert a.shape == (200, 2) and a.dtype == np.float32
    assert a.tobytes() == b.tobytes()


def _neighbours_reference(Z: np.ndarray, k: int) -> np.ndarray:
    """Every pairwise float64 distance, sorted: itself first, then nearest, ties by index."""
    Z = Z.astype(np.float64)
    n = Z.shape[0]
    d = np.sqrt(((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1))
    d[np.arange(n), np.arange(n)] = -1.0
    return np.lexsort((np.broadcast_to(np.arange(n), (n, n)), d), axis=1)[:, :k]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 120), d=st.integers(1, 12), k=st.integers(1, 20),
       copies=st.integers(0, 5), grid=st.booleans(), seed=st.integers(0, 2**16))
def test_exact_neighbours_equal_a_brute_force_reference(n, d, k, copies, grid, seed):
    """Against all pairwise distances: the same neighbours in the same order, itself in
    column 0 even among exact copies, ties (a small integer grid makes many) by index."""
    from clusterclip.report.projection import nearest_neighbours

    rng = np.random.default_rng(seed)
    Z = (rng.integers(-2, 3, (n, d)) if grid else rng.standard_normal((n, d))).astype(np.float32)
    for _ in range(copies):
        Z[rng.integers(n)] = Z[rng.integers(n)]
    indices, dists = nearest_neighbours(Z, k)
    k = min(k, n)
    assert indices.shape == dists.shape == (n, k)
    assert np.array_equal(indices, _neighbours_reference(Z, k))
    assert np.array_equal(indices[:, 0], np.arange(n)) and not dists[:, 0].any()
    ref = np.linalg.norm(Z[indices].astype(np.float64) - Z[:, None, :].astype(np.float64), axis=2)
    assert np.allclose(dists, ref, rtol=1e-6, atol=1e-6)
    assert np.all(np.diff(dists, axis=1) >= 0)


def test_exact_neighbours_do_not_depend_on_the_block_or_the_threads(monkeypatch):
    import torch

    from clusterclip.report import projection

    Z = np.random.default_rng(0).standard_normal((700, 20)).astype(np.float32)
    a = projection.nearest_neighbours(Z, 15)
    monkeypatch.setattr(projection, "_KNN_BLOCK_BYTES", 4 * 700 * 3)  # 3 rows a block
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        b = projection.nearest_neighbours(Z, 15)
    finally:
        torch.set_num_threads(threads)
    assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()


def test_above_the_exact_limit_nn_descent_finds_most_of_the_exact_graph():
    """Above ``exact_neighbours_up_to`` the graph comes from umap-learn's NN-descent:
    seeded (the same graph twice), itself first, and most of the exact neighbours."""
    from clusterclip.report.projection import MapParams, nearest_neighbours, neighbour_graph

    rng = np.random.default_rng(0)
    Z = (rng.standard_normal((30, 10))[rng.integers(0, 30, 1500)]
         + rng.standard_normal((1500, 10)) * 0.3).astype(np.float32)
    params = MapParams(exact_neighbours_up_to=1499)
    indices, dists = neighbour_graph(Z, 15, seed=3, params=params)
    again = neighbour_graph(Z, 15, seed=3, params=params)
    assert indices.tobytes() == again[0].tobytes() and dists.tobytes() == again[1].tobytes()
    assert indices.shape == (1500, 15) and np.array_equal(indices[:, 0], np.arange(1500))
    exact, _ = nearest_neighbours(Z, 15)
    recall = np.mean([len(set(a) & set(b)) / 15 for a, b in zip(indices, exact, strict=True)])
    assert recall > 0.9
    same = neighbour_graph(Z, 15, seed=3, params=MapParams(exact_neighbours_up_to=1500))
    assert np.array_equal(same[0], exact)


def test_searched_mixture_is_shown_like_a_strategy(reported, tmp_path):
    import shutil

    from clusterclip.sampling.mixture import Mixture, write_mixture

    w = tmp_path / "w"
    shutil.copytree(reported, w)
    labels = np.load(w / "labels.npy")
    k = int(labels.max()) + 1
    weights = [0.0] + [1.0] * (k - 1)  # cluster 0 never drawn
    write_mixture(w / "search" / "mixture.json", Mixture(tuple(weights), 3, "paced", "target"))
    assert main(["report", "--workdir", str(w), "--map-sample", "0", "--num-samples", "900",
                 "--out", str(tmp_path / "r")]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text(encoding="utf-8"))
    mix = summary["schedules"]["mixture"]
    assert mix["parameters"]["timing"] == "paced" and mix["parameters"]["clip"] == 3
    shares = {int(r["label"]): float(r["mixture_share"])
              for r in csv.DictReader(open(tmp_path / "r" / "clusters.csv", encoding="utf-8"))}
    assert shares[0] == 0.0 and abs(sum(shares.values()) - 1) < 1e-4
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert '{"color":"#e69f00","name":"mixture"}' in page
    # A mixture made for other labels is a note, not a failure, unless asked for.
    write_mixture(w / "search" / "mixture.json", Mixture((1.0, 1.0), 3, "paced", "target"))
    assert main(["report", "--workdir", str(w), "--map-sample", "0", "--num-samples", "900",
                 "--out", str(tmp_path / "r2")]) == 0
    notes = json.loads((tmp_path / "r2" / "summary.json").read_text(encoding="utf-8"))["notes"]
    assert any(n.startswith("mixture not shown:") and "2 weights" in n for n in notes)
    assert main(["report", "--workdir", str(w), "--map-sample", "0", "--num-samples", "900",
                 "--strategies", "random,mixture", "--out", str(tmp_path / "r3")]) == 2
    # A staged mixture: the mixture-over-training panel gets its stage boundaries.
    from clusterclip.sampling.mixture import Stage

    staged = Mixture((), 3, "paced", "target", (Stage(0.5, (1.0,) * k),
                                                Stage(1.0, tuple(weights))))
    write_mixture(w / "search" / "mixture.json", staged)
    assert main(["report", "--workdir", str(w), "--map-sample", "0", "--num-samples", "900",
                 "--out", str(tmp_path / "r4")]) == 0
    mix = json.loads((tmp_path / "r4" / "summary.json").read_text())["schedules"]["mixture"]
    assert mix["stage_ends"] == [0.5, 1.0]


def test_changing_the_projection_recomputes_the_map_with_moving_progress(reported, tmp_path,
                                                                          capsys):
    import shutil

    from clusterclip.report.projection import MapParams, map_key
    from clusterclip.stages import map as map_stage
    from clusterclip.workdir import Workdir

    variants = [MapParams(), MapParams(method="other"), MapParams(init="spectral"),
                MapParams(n_epochs=30), MapParams(min_dist=0.2), MapParams(n_neighbors=10),
                MapParams(pca_dims=20)]
    keys = {json.dumps(map_key(MAP_SAMPLE, 0, p), sort_keys=True) for p in variants}
    assert len(keys) == len(variants)
    assert map_key(MAP_SAMPLE, 0) != map_key(MAP_SAMPLE + 1, 0) != map_key(MAP_SAMPLE, 1)
    w = tmp_path / "w"
    shutil.copytree(reported, w)
    coords = (w / "map" / "coords.npy").read_bytes()
    wd = Workdir(w, create=False)
    before = wd.stage("map")["finished"]
    capsys.readouterr()
    assert map_stage.run(wd, map_stage.MapOptions(sample=MAP_SAMPLE, seed=0, progress=True,
                                                  params=MapParams(n_epochs=30))) is None
    err = capsys.readouterr().err
    assert "map: UMAP of 400 of 600 documents" in err and "map: layout" in err
    assert re.search(r"map: neighbours: +100%.*\b400/400\b", err)  # the neighbour search's bar
    assert re.search(r"\b[1-9]\d*/30\b", err)  # the bar over the layout's epochs moved
    assert Workdir(w, create=False).stage("map")["finished"] != before
    assert (w / "map" / "coords.npy").read_bytes() != coords


# -- export --format atlas: the map for Embedding Atlas ---------------------------------
def test_atlas_export_holds_the_pages_map_with_terms_and_texts(reported, tmp_path, capsys):
    """One Parquet, read back with pyarrow and pandas: the map's documents in order, their
    places, clusters, the report's top terms of each cluster and the whole texts."""
    import shutil

    import pandas as pd
    import pyarrow.parquet as pq

    from clusterclip.corpus import Corpus
    from clusterclip.report.projection import load_map

    w = tmp_path / "w"
    shutil.copytree(reported, w)
    out = tmp_path / "atlas"
    assert main(["export", "--workdir", str(w), "--format", "atlas", "--out", str(out)]) == 0
    assert "embedding-atlas" in capsys.readouterr().out
    table = pq.read_table(out / "atlas.parquet")
    assert table.column_names == ["doc_index", "x", "y", "cluster", "terms", "text"]
    rows, coords = load_map(w / "map")
    labels = np.load(w / "labels.npy")
    assert table.num_rows == rows.size == MAP_SAMPLE
    assert np.array_equal(table.column("doc_index").to_numpy(), rows)
    assert np.array_equal(table.column("x").to_numpy(), coords[:, 0])
    assert np.array_equal(table.column("y").to_numpy(), coords[:, 1])
    assert np.array_equal(table.column("cluster").to_numpy(), labels[rows])
    terms = _clusters(w)  # the report's clusters.csv
    for c, t in zip(table.column("cluster").to_pylist(), table.column("terms").to_pylist(),
                    strict=True):
        assert t.replace(", ", " ") == " ".join(terms.get(c, []))
    corpus = Corpus.load(w / "corpus")
    assert table.column("text").to_pylist() == [t for _, t in corpus.iter_texts_at(rows)]
    assert pd.read_parquet(out / "atlas.parquet").shape == (MAP_SAMPLE, 6)
    summary = json.loads((out / "_export.json").read_text(encoding="utf-8"))
    assert summary["rows"] == MAP_SAMPLE and summary["format"] == "atlas"
    first = (out / "atlas.parquet").read_bytes()
    assert main(["export", "--workdir", str(w), "--format", "atlas", "--out", str(out)]) == 0
    assert (out / "atlas.parquet").read_bytes() == first  # deterministic, replaced as ours


def test_atlas_export_is_refused_without_a_map_or_with_a_schedules_options(reported, tmp_path,
                                                                           capsys):
    import shutil

    w = tmp_path / "w"
    shutil.copytree(reported, w)
    base = ["export", "--workdir", str(w), "--format", "atlas", "--out", str(tmp_path / "a")]
    for extra in (["--rank", "1", "--world-size", "2"], ["--schedule", str(w / "x.npy")],
                  ["--rows-per-shard", "10"]):
        assert main(base + extra) == 2
        err = capsys.readouterr().err
        assert "does not apply to --format atlas" in err and err.count("\n") == 1
        assert extra[0] in err
    shutil.rmtree(w / "map")
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "no map yet" in err and "clusterclip report" in err and err.count("\n") == 1
    assert not (tmp_path / "a").exists()
