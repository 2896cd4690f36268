"use strict";
(function () {
  var D = JSON.parse(document.getElementById("data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var fmt = function (v) { return Number(v).toLocaleString("en-US"); };
  var pct = function (v, d) { return v === null || v === undefined ? "-" : (100 * v).toFixed(d === undefined ? 1 : d) + "%"; };
  var api = { ready: false, pointsDrawn: 0, sample: D.map ? D.map.n : 0, drawMs: 0, matches: 0,
              matchedClusters: [] };
  window.clusterclip = api;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  var SVGNS = "http://www.w3.org/2000/svg";
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function decode(b64, Type) {
    var s = atob(b64), n = s.length, bytes = new Uint8Array(n);
    for (var i = 0; i < n; i++) bytes[i] = s.charCodeAt(i);
    return new Type(bytes.buffer);
  }

  // -- clusters: records, colours (by size rank), lookup by id --------------------------
  var byId = {}, rank = {};
  D.cluster.forEach(function (c, i) { byId[c.id] = c; rank[c.id] = i; });
  function color(id) {
    if (!(id in rank)) return "#9a9a9a";
    var i = rank[id];
    return "hsl(" + ((i * 137.508) % 360).toFixed(1) + "," + (i % 3 === 1 ? 52 : 68) + "%," +
      (i % 2 ? 40 : 52) + "%)";
  }
  var strategyColor = {};
  D.strategies.forEach(function (s) { strategyColor[s.name] = s.color; });

  // -- header ---------------------------------------------------------------------------
  (function facts() {
    var epochs = D.budget / Math.max(1, D.eligible);
    var t = fmt(D.documents) + " documents (" + fmt(D.eligible) + " eligible) in " +
      fmt(D.clusters) + " clusters · budget T = " + fmt(D.budget) + " samples (" +
      epochs.toFixed(2) + " epochs)";
    if (D.recommended !== null && D.recommended !== undefined) t += " · recommended clip R = " + D.recommended + " (for clusterclip's greedy course)";
    $("facts").textContent = t;
  })();

  // -- small line charts (SVG) ----------------------------------------------------------
  function lineChart(opt) {
    var W = opt.width, H = opt.height, L = 46, R = 22, T = 20, B = 30;
    var svg = sv("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" });
    var ends = D.tenthEnd, mids = ends.map(function (e, i) { return (e + (i ? ends[i - 1] : 0)) / 2; });
    var top = opt.ref || 0;
    opt.series.forEach(function (s) { s.values.forEach(function (v) { top = Math.max(top, v); }); });
    top = top > 0 ? top * 1.15 : 1;
    var X = function (f) { return L + f * (W - L - R); };
    var Y = function (v) { return T + (1 - v / top) * (H - T - B); };
    svg.appendChild(sv("text", { x: L, y: 13 }, opt.title));
    for (var i = 0; i <= 4; i++) {
      var v = top * i / 4, y = Y(v);
      svg.appendChild(sv("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#eee" }));
      svg.appendChild(sv("text", { x: L - 4, y: y + 3, "text-anchor": "end" }, pct(v, top < 0.05 ? 2 : 0)));
    }
    [0, 0.5, 1].forEach(function (f) {
      svg.appendChild(sv("text", { x: X(f), y: H - 16, "text-anchor": "middle" }, Math.round(100 * f) + "%"));
    });
    svg.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle" }, "training progress"));
    if (opt.ref !== undefined) {
      svg.appendChild(sv("line", { x1: X(0), x2: X(1), y1: Y(opt.ref), y2: Y(opt.ref),
                                   stroke: "#333", "stroke-dasharray": "4 3" }));
    }
    var k = opt.series.length;
    opt.series.forEach(function (s, j) {
      // Coinciding series stay visible: each is shifted by a few pixels.
      var dx = (j - (k - 1) / 2) * 3;
      var pts = s.values.map(function (v, i) { return (X(mids[i]) + dx).toFixed(1) + "," + Y(v).toFixed(1); });
      svg.appendChild(sv("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 1.8 }));
      s.values.forEach(function (v, i) {
        svg.appendChild(sv("circle", { cx: (X(mids[i]) + dx).toFixed(1), cy: Y(v).toFixed(1), r: 2.6,
                                       fill: s.color, "data-series": s.name }));
      });
    });
    var box = el("div", { "class": "chart" });
    box.appendChild(svg);
    var legend = el("div", { "class": "caption" });
    opt.series.forEach(function (s) {
      var item = el("span", { style: "margin-right:12px" });
      item.appendChild(el("span", { "class": "swatch", style: "background:" + s.color }));
      item.appendChild(document.createTextNode(s.name));
      legend.appendChild(item);
    });
    if (opt.ref !== undefined) legend.appendChild(document.createTextNode("- - " + opt.refLabel));
    box.appendChild(legend);
    return box;
  }

  // -- the cluster panel ----------------------------------------------------------------
  var selected = null;
  function openCluster(id) {
    var c = byId[id];
    if (!c) return;
    selected = id;
    var p = $("panel");
    p.textContent = "";
    p.dataset.cluster = String(id);
    var h = el("h3");
    h.appendChild(el("span", { "class": "swatch", style: "background:" + color(id) }));
    h.appendChild(document.createTextNode("Cluster " + id));
    p.appendChild(h);
    var line = fmt(c.size) + " documents, " + pct(c.share, 2) + " of the corpus";
    if (c.cohesion !== null) line += "; cohesion " + c.cohesion.toFixed(3) + " (mean cosine to its centroid)";
    p.appendChild(el("p", {}, line + "."));
    var terms = el("div", { id: "terms" });
    terms.appendChild(el("b", {}, "Top terms: "));
    c.terms.forEach(function (t) { terms.appendChild(el("span", { "class": "chip term" }, t)); });
    if (!c.terms.length) terms.appendChild(document.createTextNode("(no corpus index: no terms)"));
    p.appendChild(terms);
    var tab = el("table"), head = el("tr");
    ["", "share of documents"].concat(D.tokens ? ["share of tokens"] : []).concat(["vs corpus"])
      .forEach(function (t) { head.appendChild(el("th", {}, t)); });
    tab.appendChild(head);
    var rowOf = function (name, doc, tok, swatch) {
      var tr = el("tr"), td = el("td");
      if (swatch) td.appendChild(el("span", { "class": "swatch", style: "background:" + swatch }));
      td.appendChild(document.createTextNode(name));
      tr.appendChild(td);
      tr.appendChild(el("td", {}, pct(doc, 2)));
      if (D.tokens) tr.appendChild(el("td", {}, pct(tok, 2)));
      tr.appendChild(el("td", {}, c.share > 0 ? (doc / c.share).toFixed(2) + "x" : "-"));
      tab.appendChild(tr);
    };
    rowOf("corpus", c.share, c.tokenShare.corpus, null);
    D.strategies.forEach(function (s) { rowOf(s.name, c.docShare[s.name], c.tokenShare[s.name], s.color); });
    p.appendChild(tab);
    p.appendChild(lineChart({
      width: 350, height: 170, title: "Share of each tenth of training",
      series: D.strategies.map(function (s) { return { name: s.name, color: s.color, values: c.tenths[s.name] }; }),
      ref: c.share, refLabel: "corpus share"
    }));
    if (c.nearest.length) {
      p.appendChild(el("b", {}, "Documents nearest its centroid"));
      var ol = el("ol");
      c.nearest.forEach(function (d) {
        var li = el("li", {}, d.text || "(no text)");
        li.title = "document " + d.doc;
        ol.appendChild(li);
      });
      p.appendChild(ol);
    }
    var rows = document.querySelectorAll("#clusters tbody tr");
    for (var i = 0; i < rows.length; i++) rows[i].classList.toggle("selected", rows[i].dataset.id === String(id));
    requestDraw();
  }
  api.openCluster = openCluster;

  // -- the map --------------------------------------------------------------------------
  var M = D.map, canvas = $("map"), ctx = canvas.getContext("2d"), tip = $("tip");
  var X, Y, CL, texts, lowered = null, n = 0, order, hits = null, hitClusters = {};
  var view = { s: 1, tx: 0, ty: 0 }, fit0 = 1, bbox, grid, G = 128, labelBoxes = [];
  if (M) {
    X = decode(M.x, Float32Array); Y = decode(M.y, Float32Array); CL = decode(M.cluster, Int32Array);
    texts = M.text; n = M.n;
    order = new Uint32Array(n);
    for (var i = 0; i < n; i++) order[i] = i;
    // Largest clusters first, so that the small ones are drawn on top.
    var key = function (i) { return CL[i] in rank ? rank[CL[i]] : -1; };
    order.sort(function (a, b) { return key(a) - key(b) || a - b; });
    bbox = { x0: Infinity, x1: -Infinity, y0: Infinity, y1: -Infinity };
    for (i = 0; i < n; i++) {
      bbox.x0 = Math.min(bbox.x0, X[i]); bbox.x1 = Math.max(bbox.x1, X[i]);
      bbox.y0 = Math.min(bbox.y0, Y[i]); bbox.y1 = Math.max(bbox.y1, Y[i]);
    }
    if (!(bbox.x1 > bbox.x0)) { bbox.x0 -= 1; bbox.x1 += 1; }
    if (!(bbox.y1 > bbox.y0)) { bbox.y0 -= 1; bbox.y1 += 1; }
    buildGrid();
    $("mapcaption").textContent = "Map of " + fmt(n) + " documents of " + fmt(M.of) +
      " (a seeded sample; UMAP of the embeddings). Colour: cluster; labels: top terms at each " +
      "cluster's centre. Drag to pan, scroll to zoom, hover for a document, click for its cluster.";
  } else {
    $("mapwrap").textContent = "";
    $("mapwrap").appendChild(el("div", { "class": "nomap" }, D.mapNote || "no map"));
  }

  function buildGrid() {
    var cells = new Uint32Array(G * G + 1), cellOf = new Uint32Array(n);
    for (var i = 0; i < n; i++) {
      var gx = Math.min(G - 1, Math.floor((X[i] - bbox.x0) / (bbox.x1 - bbox.x0) * G));
      var gy = Math.min(G - 1, Math.floor((Y[i] - bbox.y0) / (bbox.y1 - bbox.y0) * G));
      cellOf[i] = gy * G + gx; cells[cellOf[i] + 1]++;
    }
    for (var c = 0; c < G * G; c++) cells[c + 1] += cells[c];
    var fill = cells.slice(0, G * G), items = new Uint32Array(n);
    for (i = 0; i < n; i++) items[fill[cellOf[i]]++] = i;
    grid = { start: cells, items: items };
  }

  function size() {
    var r = canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(r.width * dpr));
    canvas.height = Math.max(1, Math.round(r.height * dpr));
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return r;
  }
  function resetView() {
    var r = size(), m = 24;
    var s = Math.min((r.width - 2 * m) / (bbox.x1 - bbox.x0), (r.height - 2 * m) / (bbox.y1 - bbox.y0));
    view.s = fit0 = s;
    view.tx = (r.width - s * (bbox.x0 + bbox.x1)) / 2;
    view.ty = (r.height + s * (bbox.y0 + bbox.y1)) / 2;
    requestDraw();
  }
  var sx = function (x) { return x * view.s + view.tx; };
  var sy = function (y) { return view.ty - y * view.s; };  // y up, as in the projection
  api.screenOf = function (i) {
    var r = canvas.getBoundingClientRect();
    return { x: sx(X[i]), y: sy(Y[i]), left: r.left, top: r.top };
  };
  api.pointsOf = function (id) {
    var out = [];
    for (var i = 0; i < n; i++) if (CL[i] === id) out.push(i);
    return out;
  };

  var pending = false;
  function requestDraw() {
    if (!M || pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; draw(); });
  }
  // Points are squares written straight into the canvas's pixels (an ImageData blended
  // over the map's background), not one fillRect each: at 10^5 points a redraw while
  // zooming or panning stays a few tens of milliseconds in a software-rendered canvas.
  function rgbOfCss(css) {  // any CSS colour as [r, g, b], as the canvas itself parses it
    var probe = document.createElement("canvas").getContext("2d");
    probe.fillStyle = "#fff"; probe.fillRect(0, 0, 1, 1);
    probe.fillStyle = css; probe.fillRect(0, 0, 1, 1);
    var d = probe.getImageData(0, 0, 1, 1).data;
    return [d[0], d[1], d[2]];
  }
  var BG = rgbOfCss(getComputedStyle($("mapwrap")).backgroundColor), rgbCache = {};
  function rgbOf(c) { return c in rgbCache ? rgbCache[c] : (rgbCache[c] = rgbOfCss(color(c))); }
  var pixels = null;
  function draw() {
    var t0 = performance.now(), w = canvas.clientWidth, h = canvas.clientHeight;
    var W = canvas.width, H = canvas.height, dpr = W / Math.max(1, w);
    if (!pixels || pixels.width !== W || pixels.height !== H) {
      pixels = ctx.createImageData(W, H);
      var blank = pixels.data;
      for (var q = 0; q < blank.length; q += 4) {
        blank[q] = BG[0]; blank[q + 1] = BG[1]; blank[q + 2] = BG[2]; blank[q + 3] = 255;
      }
      pixels.blank = new Uint32Array(blank.buffer).slice();  // the empty map, copied per draw
    }
    var px8 = pixels.data;
    new Uint32Array(px8.buffer).set(pixels.blank);
    var base = Math.max(1.6, Math.min(4.5, 3.2 * Math.sqrt(20000 / Math.max(1, n))));
    var r = base * Math.min(2.5, Math.sqrt(view.s / fit0));
    var focus = hits !== null || selected !== null;
    var isHit = function (i) { return hits !== null ? hits[i] === 1 : CL[i] === selected; };
    var drawn = 0;
    for (var pass = 0; pass < (focus ? 2 : 1); pass++) {
      var a = focus && pass === 0 ? 0.13 : 0.85, b = 1 - a;
      var rr = focus && pass === 1 ? r + 2 : r, hh = rr / 2;
      var side = Math.max(1, Math.round(rr * dpr));
      for (var j = 0; j < n; j++) {
        var i = order[j];
        if (focus && (pass === 1) !== isHit(i)) continue;
        var px = sx(X[i]), py = sy(Y[i]);
        if (px < -rr || py < -rr || px > w + rr || py > h + rr) continue;
        var rgb = rgbOf(CL[i]), cr = a * rgb[0], cg = a * rgb[1], cb = a * rgb[2];
        var bx = Math.round((px - hh) * dpr), by = Math.round((py - hh) * dpr);  // device pixels
        var x0 = Math.max(0, bx), x1 = Math.min(W, bx + side);
        var y0 = Math.max(0, by), y1 = Math.min(H, by + side);
        for (var yy = y0; yy < y1; yy++) {
          for (var o = (yy * W + x0) * 4, end = (yy * W + x1) * 4; o < end; o += 4) {
            px8[o] = cr + b * px8[o]; px8[o + 1] = cg + b * px8[o + 1]; px8[o + 2] = cb + b * px8[o + 2];
          }
        }
        drawn++;
      }
    }
    ctx.putImageData(pixels, 0, 0);
    drawLabels(w, h);
    api.pointsDrawn = drawn;
    canvas.dataset.pointsDrawn = String(drawn);
    api.drawMs = performance.now() - t0;
    if (!api.ready) { api.ready = true; api.firstDrawAt = performance.now(); document.body.dataset.ready = "1"; }
  }
  function drawLabels(w, h) {
    labelBoxes = [];
    ctx.font = "600 12px system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif";
    ctx.textAlign = "center"; ctx.textBaseline = "middle"; ctx.lineJoin = "round";
    var ids = D.cluster.map(function (c) { return c.id; });
    var first = function (id) { return id === selected || hitClusters[id] ? 0 : 1; };
    ids.sort(function (a, b) { return first(a) - first(b) || rank[a] - rank[b]; });
    for (var k = 0; k < ids.length && labelBoxes.length < 80; k++) {
      var id = ids[k], cen = M.centres[String(id)], text = M.labels[String(id)];
      if (!cen || !text) continue;
      var x = sx(cen[0]), y = sy(cen[1]), tw = ctx.measureText(text).width + 8, th = 16;
      var box = { x0: x - tw / 2, x1: x + tw / 2, y0: y - th / 2, y1: y + th / 2, id: id };
      if (box.x1 < 0 || box.x0 > w || box.y1 < 0 || box.y0 > h) continue;
      var clash = labelBoxes.some(function (b) {
        return b.x0 < box.x1 && box.x0 < b.x1 && b.y0 < box.y1 && box.y0 < b.y1; });
      if (clash) continue;
      labelBoxes.push(box);
      ctx.lineWidth = 4; ctx.strokeStyle = "rgba(255,255,255,0.92)";
      ctx.strokeText(text, x, y);
      ctx.fillStyle = id === selected || hitClusters[id] ? "#000" : "#2a2a2a";
      ctx.fillText(text, x, y);
    }
  }

  function nearest(mx, my) {
    var dx = (mx - view.tx) / view.s, dy = (view.ty - my) / view.s, rad = 7 / view.s;
    var gw = (bbox.x1 - bbox.x0) / G, gh = (bbox.y1 - bbox.y0) / G;
    var gx0 = Math.max(0, Math.floor((dx - rad - bbox.x0) / gw)), gx1 = Math.min(G - 1, Math.floor((dx + rad - bbox.x0) / gw));
    var gy0 = Math.max(0, Math.floor((dy - rad - bbox.y0) / gh)), gy1 = Math.min(G - 1, Math.floor((dy + rad - bbox.y0) / gh));
    var best = -1, bd = rad * rad;
    for (var gy = gy0; gy <= gy1; gy++) for (var gx = gx0; gx <= gx1; gx++) {
      var c = gy * G + gx;
      for (var k = grid.start[c]; k < grid.start[c + 1]; k++) {
        var i = grid.items[k], ex = X[i] - dx, ey = Y[i] - dy, d = ex * ex + ey * ey;
        if (hits !== null && hits[i] !== 1) d *= 4;  // prefer what is highlighted
        if (d <= bd) { bd = d; best = i; }
      }
    }
    return best;
  }
  function showTip(i, mx, my) {
    if (i < 0) { tip.hidden = true; return; }
    var c = byId[CL[i]];
    tip.textContent = "";
    tip.appendChild(el("b", {}, CL[i] < 0 ? "excluded (label -1)" :
      "Cluster " + CL[i] + (c && c.terms.length ? ": " + c.terms.slice(0, 4).join(", ") : "")));
    tip.appendChild(document.createTextNode(texts ? (texts[i] || "(no text)") : "(no corpus index: no text)"));
    tip.hidden = false;
    var wrap = $("mapwrap").getBoundingClientRect();
    var left = mx + 14, top = my + 14;
    if (left + 360 > wrap.width) left = Math.max(4, mx - 374);
    if (top + tip.offsetHeight > wrap.height) top = Math.max(4, my - tip.offsetHeight - 10);
    tip.style.left = left + "px"; tip.style.top = top + "px";
    api.hovered = i;
  }
  api.hoverAt = function (mx, my) { var t0 = performance.now(); showTip(nearest(mx, my), mx, my); return performance.now() - t0; };
  api.redraw = function () { draw(); return api.drawMs; };
  api.zoomBy = function (f, mx, my) {
    view.tx = mx - (mx - view.tx) * f; view.ty = my - (my - view.ty) * f; view.s *= f; draw(); return api.drawMs;
  };
  api.panBy = function (dx, dy) { view.tx += dx; view.ty += dy; draw(); return api.drawMs; };

  if (M) {
    var drag = null, moved = false;
    canvas.addEventListener("mousedown", function (e) {
      drag = { x: e.clientX, y: e.clientY, tx: view.tx, ty: view.ty }; moved = false;
      canvas.classList.add("dragging");
    });
    window.addEventListener("mouseup", function (e) {
      if (!drag) return;
      canvas.classList.remove("dragging");
      var was = moved;
      drag = null;
      if (was || e.target !== canvas) return;
      var r = canvas.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
      var i = nearest(mx, my);
      if (i >= 0 && CL[i] >= 0) { openCluster(CL[i]); return; }
      var box = labelBoxes.filter(function (b) { return mx >= b.x0 && mx <= b.x1 && my >= b.y0 && my <= b.y1; })[0];
      if (box) openCluster(box.id);
    });
    canvas.addEventListener("mousemove", function (e) {
      var r = canvas.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
      if (drag) {
        if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 3) moved = true;
        view.tx = drag.tx + e.clientX - drag.x; view.ty = drag.ty + e.clientY - drag.y;
        tip.hidden = true; requestDraw(); return;
      }
      showTip(nearest(mx, my), mx, my);
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    canvas.addEventListener("wheel", function (e) {
      e.preventDefault();
      var r = canvas.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
      var f = Math.exp(-e.deltaY * 0.0015);
      view.tx = mx - (mx - view.tx) * f; view.ty = my - (my - view.ty) * f; view.s *= f;
      tip.hidden = true; requestDraw();
    }, { passive: false });
    window.addEventListener("resize", function () { size(); requestDraw(); });
    $("reset").addEventListener("click", function () { selected = null; resetView(); });
  } else {
    $("reset").hidden = true;
  }

  // -- search -----------------------------------------------------------------------------
  function search(q) {
    q = q.trim().toLowerCase();
    hitClusters = {};
    if (q.length < 2) {
      hits = null; api.matches = 0; api.matchedClusters = [];
      $("matches").textContent = "";
    } else {
      var count = 0;
      if (M) {
        if (!lowered) lowered = (texts || []).map(function (t) { return (t || "").toLowerCase(); });
        hits = new Uint8Array(n);
        for (var i = 0; i < lowered.length; i++) if (lowered[i].indexOf(q) >= 0) { hits[i] = 1; count++; }
      }
      D.cluster.forEach(function (c) {
        if (c.terms.some(function (t) { return t.indexOf(q) >= 0; })) hitClusters[c.id] = true;
      });
      api.matches = count;
      api.matchedClusters = Object.keys(hitClusters).map(Number);
      if (M) {  // a matching cluster's documents light up too
        for (i = 0; i < n; i++) if (hitClusters[CL[i]]) hits[i] = hits[i] || 2;
      }
      $("matches").textContent = fmt(count) + " documents" + (M ? " on the map" : "") + " and " +
        fmt(api.matchedClusters.length) + " clusters (by their terms) match";
    }
    $("matches").dataset.documents = String(api.matches);
    var rows = document.querySelectorAll("#clusters tbody tr");
    for (var j = 0; j < rows.length; j++) rows[j].classList.toggle("hit", !!hitClusters[rows[j].dataset.id]);
    var chips = document.querySelectorAll("#panel .term");
    for (j = 0; j < chips.length; j++) chips[j].classList.toggle("hit", q.length >= 2 && chips[j].textContent.indexOf(q) >= 0);
    var lit = 0;
    if (hits !== null) for (j = 0; j < n; j++) if (hits[j]) { hits[j] = 1; lit++; }
    api.highlighted = lit;
    canvas.dataset.highlighted = String(lit);
    requestDraw();
  }
  api.search = search;
  var timer = null;
  $("search").addEventListener("input", function (e) {
    clearTimeout(timer);
    var q = e.target.value;
    timer = setTimeout(function () { search(q); }, 120);
  });

  // -- mixture over training --------------------------------------------------------------
  (function mixture() {
    var mx = D.mixture, q = mx.quartileClusters;
    $("mixcaption").textContent = "Share of each tenth of training drawn from the smallest and " +
      "the largest 25% of clusters by size (" + q + " clusters each), one line per schedule. " + D.late;
    var series = function (part) {
      return D.strategies.map(function (s) { return { name: s.name, color: s.color, values: mx[part][s.name] }; });
    };
    $("mixcharts").appendChild(lineChart({ width: 470, height: 230, series: series("tail"),
      title: "Smallest 25% of clusters", ref: mx.corpusTail,
      refLabel: "their share of the corpus (" + pct(mx.corpusTail) + ")" }));
    $("mixcharts").appendChild(lineChart({ width: 470, height: 230, series: series("head"),
      title: "Largest 25% of clusters", ref: mx.corpusHead,
      refLabel: "their share of the corpus (" + pct(mx.corpusHead) + ")" }));
  })();

  // -- the cluster table ------------------------------------------------------------------
  var columns = [
    { key: "id", label: "cluster", get: function (c) { return c.id; }, show: String },
    { key: "size", label: "documents", get: function (c) { return c.size; }, show: fmt },
    { key: "share", label: "% corpus", get: function (c) { return c.share; }, show: function (v) { return pct(v, 2); } }
  ];
  D.strategies.forEach(function (s) {
    columns.push({ key: "s:" + s.name, label: "% " + s.name, get: function (c) { return c.docShare[s.name]; },
                   show: function (v) { return pct(v, 2); } });
  });
  if (D.cluster.some(function (c) { return c.cohesion !== null; })) {
    columns.push({ key: "cohesion", label: "cohesion", get: function (c) { return c.cohesion; },
                   title: "mean cosine similarity of the cluster's documents to its centroid; " +
                     "a low value among large clusters marks a catch-all",
                   show: function (v) { return v === null ? "-" : v.toFixed(3); } });
  }
  columns.push({ key: "terms", label: "top terms", text: true, get: function (c) { return c.terms.join(" "); },
                 show: String });
  var sortKey = "size", sortAsc = false;
  function renderTable() {
    var thead = document.querySelector("#clusters thead"), tbody = document.querySelector("#clusters tbody");
    thead.textContent = ""; tbody.textContent = "";
    var tr = el("tr");
    columns.forEach(function (col) {
      var th = el("th", { "data-key": col.key, "class": (col.text ? "terms " : "") +
        (col.key === sortKey ? "sorted" + (sortAsc ? " asc" : "") : "") }, col.label);
      if (col.title) th.title = col.title;
      th.addEventListener("click", function () {
        if (sortKey === col.key) sortAsc = !sortAsc; else { sortKey = col.key; sortAsc = !!col.text || col.key === "id"; }
        renderTable();
      });
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    var col = columns.filter(function (c) { return c.key === sortKey; })[0];
    var rows = D.cluster.slice().sort(function (a, b) {
      var x = col.get(a), y = col.get(b), d;
      if (col.text) d = x < y ? -1 : x > y ? 1 : 0;
      else d = (x === null ? -Infinity : x) - (y === null ? -Infinity : y);
      return (sortAsc ? d : -d) || a.id - b.id;
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (c) {
      var row = el("tr", { "data-id": String(c.id) });
      if (c.id === selected) row.classList.add("selected");
      if (hitClusters[c.id]) row.classList.add("hit");
      columns.forEach(function (k, j) {
        var td = el("td", { "class": k.text ? "terms" : "" });
        if (j === 0) td.appendChild(el("span", { "class": "swatch", style: "background:" + color(c.id) }));
        td.appendChild(document.createTextNode(k.show(k.get(c))));
        row.appendChild(td);
      });
      row.addEventListener("click", function () { openCluster(c.id); });
      frag.appendChild(row);
    });
    tbody.appendChild(frag);
  }
  renderTable();

  // -- notes ------------------------------------------------------------------------------
  if (D.notes.length) {
    var notes = $("notes");
    notes.appendChild(el("h2", {}, "Notes"));
    var ul = el("ul");
    D.notes.forEach(function (t) { ul.appendChild(el("li", {}, t)); });
    notes.appendChild(ul);
  }

  if (M) resetView(); else { api.ready = true; document.body.dataset.ready = "1"; }
})();
