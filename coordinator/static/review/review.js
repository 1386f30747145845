// The review page: the pending list, one job at a time on a map, verdicts by keyboard.
// It holds no data of its own: every figure comes from /review/v1 with the reviewer's key.
// Photos are <img> elements pointing at the provider: the browser loads them from there, and what
// the engine measured on each (road edges and the rows read, object boxes) is drawn over it in SVG,
// so a reviewer checks a figure against the picture it came from. The base map's tiles, when the
// coordinator names a tile server, come from that server, never through the coordinator.
(function () {
  "use strict";
  const API = "/review/v1";
  const KINDS = { roadway: "#555", kerbs: "#999", gates: "#a60", entrances: "#c80", fences: "#684",
                  poles: "#06c", wires: "#60c", signage: "#c06", drainage: "#0aa", vegetation: "#2a2" };
  // Detector labels and the fact kind they feed (sweep_engine/labels.py DET_FACT_KIND); vehicles and people
  // feed none: they serve the calibration.
  const DET_KIND = { pole: "poles", sign: "signage", gate: "gates", entrance: "entrances", drainage: "drainage" };
  const SVGNS = "http://www.w3.org/2000/svg";
  const HL = "#9a7400";       // a selected fact's marker: 3:1 and more against the blank map and pale tiles
  const $ = (id) => document.getElementById(id);
  // index: the list position of the job shown (state.job), the only job a verdict acts on; cursor: the
  // position last asked for (j/k move from it); selecting: the number of the latest job fetch, so that
  // an answer overtaken by a later one is dropped; sending: a verdict is in flight (one at a time).
  const state = { key: sessionStorage.getItem("sisReviewKey") || "", pending: [], index: -1, cursor: -1, job: null,
                  links: null, fact: -1, markers: [], baseMap: undefined, selecting: 0, loadingJob: null,
                  listing: 0, sending: false };

  // The page's one remembered setting: the single-key shortcuts (j k a r s), on unless turned off (WCAG 2.1.4).
  const SHORTCUTS = "sisReviewShortcuts";
  const stored = (k) => { try { return localStorage.getItem(k); } catch (e) { return null; } };
  // No zooming or fading animation for a reviewer who asked the system for less motion.
  const still = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  const map = L.map("map", { zoomControl: true, attributionControl: true, zoomAnimation: !still, fadeAnimation: !still,
                             markerZoomAnimation: !still }).setView([0, 0], 2);
  map.attributionControl.setPrefix("Leaflet (BSD-2)");
  const areas = L.layerGroup().addTo(map);
  const detail = L.layerGroup().addTo(map);

  function escapeHtml(t) {
    return String(t).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  // The base map the coordinator names (SIS_REVIEW_TILES_URL), or none, said so under the map.
  function setBaseMap(base) {
    if (state.baseMap !== undefined) return;
    state.baseMap = base || null;
    const note = $("basemap");
    if (!base) {
      map.attributionControl.addAttribution("no base map");
      note.textContent = "No base map: the coordinator names no tile server (SIS_REVIEW_TILES_URL is empty). Facts are drawn on a blank map.";
      document.body.dataset.basemap = "none";
      return;
    }
    const text = escapeHtml(base.attribution || "");
    const attribution = base.attributionUrl ? '<a href="' + escapeHtml(base.attributionUrl) + '" target="_blank" rel="noopener noreferrer">' + text + "</a>" : text;
    let failed = 0;
    const host = new URL(base.tiles.replace(/\{[a-z]\}/g, "0")).host;
    note.textContent = "Base map: tiles loaded by your browser from " + host + ".";
    L.tileLayer(base.tiles, { attribution: attribution, maxZoom: base.maxZoom || 19, referrerPolicy: "strict-origin-when-cross-origin" })
      .on("tileerror", () => {
        failed += 1;
        note.textContent = "Base map: " + failed + " tile(s) from " + host + " failed to load; the streets may be missing.";
        note.className = "warn";
      })
      .on("tileload", () => { document.body.dataset.basemap = "loaded"; })
      .addTo(map);
    document.body.dataset.basemap = "configured";
  }

  // The one line of messages, above the list (never inside the job's detail, which is hidden while no job
  // is shown): what a verdict did, and what failed. Only a new message replaces it.
  function setStatus(text, error) {
    $("status").textContent = text;
    $("status").className = error ? "error" : "";
    if (error) document.body.dataset.error = text; else delete document.body.dataset.error;
  }

  // What is being loaded, beside the list's title; null when nothing is.
  const loads = new Map();
  function setLoading(what, text) {
    if (text) loads.set(what, text); else loads.delete(what);
    $("loading").textContent = [...loads.values()].join("; ");
    if (loads.size) document.body.dataset.loading = [...loads.keys()].join(" "); else delete document.body.dataset.loading;
  }

  // An API call. A failure is an Error whose message says what happened in words (the API's own message,
  // an answer that is not the API's, or no answer), with .status (0: no answer).
  function failure(message, status, parameter) { const e = new Error(message); e.status = status; e.parameter = parameter; return e; }
  async function call(path, options) {
    const opts = Object.assign({ headers: {} }, options || {});
    opts.headers["Authorization"] = "Bearer " + state.key;
    if (opts.body) opts.headers["Content-Type"] = "application/json";
    let r, text;
    try {
      r = await fetch(API + path, opts);
      text = await r.text();
    } catch (e) {
      throw failure("the coordinator did not answer (" + (e && e.message ? e.message : e) + ")", 0);
    }
    let body = null;
    try { body = JSON.parse(text); } catch (e) { body = null; }
    if (!r.ok) {
      const err = body && body.error;
      if (err && typeof err.message === "string") {
        const param = err.details && typeof err.details.parameter === "string" ? " (" + err.details.parameter + ")" : "";
        throw failure(err.message + param + " [HTTP " + r.status + "]", r.status, param ? err.details.parameter : undefined);
      }
      throw failure("HTTP " + r.status + (r.statusText ? " " + r.statusText : "") +
        " from the server, not an answer of the review API (a proxy's or server's error page)", r.status);
    }
    if (body === null || typeof body !== "object") throw failure("the answer (HTTP " + r.status + ") is not the review API's JSON", r.status);
    return body;
  }

  function td(row, text) { const c = document.createElement("td"); c.textContent = text; row.appendChild(c); return c; }
  function table(el, head, rows) {
    el.replaceChildren();
    const h = el.insertRow(); head.forEach((t) => { const c = document.createElement("th"); c.textContent = t; h.appendChild(c); });
    rows.forEach((cells) => { const r = el.insertRow(); cells.forEach((t) => td(r, t)); });
  }
  // A quantity as text: an unknown one (null) says "unknown", never "null"; unit appended to a known one.
  const qty = (v, unit) => v === null || v === undefined ? "unknown" : String(v) + (unit ? " " + unit : "");
  const fmt = (v, unit) => v !== null && typeof v === "object"
    ? Object.entries(v).map(([k, x]) => k + " " + qty(x, unit)).join(", ") : qty(v, unit);

  function setWho(text, cls) { $("who").textContent = text; $("who").className = cls || ""; }

  async function signIn() {
    if (!state.key) {
      setWho("not signed in");
      const empty = $("empty");
      empty.textContent = "Enter your reviewer key above (Use key) to see the jobs waiting for review.";
      return false;
    }
    setWho("checking the key…", "busy");
    try {
      const me = await call("/me");
      setWho("reviewer: " + me.name);
      setBaseMap(me.baseMap);
      return true;
    } catch (e) {
      // Only 401 and 403 are the key's refusal; anything else says nothing of the key.
      if (e.status === 401 || e.status === 403) setWho("key refused: " + e.message, "error");
      else setWho("could not check the key: " + e.message, "error");
      return false;
    }
  }

  function filterWords(q) {
    const w = [];
    if (q.get("sweep")) w.push("of sweep " + q.get("sweep"));
    if (q.get("bbox")) w.push("in bbox " + q.get("bbox"));
    return w.join(" ");
  }

  function clearJob() {
    state.job = null; state.index = -1; state.links = null; state.markers = [];
    $("detail").hidden = true; detail.clearLayers();
    $("reason").value = ""; setMode(null);
    delete document.body.dataset.selected;
    markList();
  }

  // The list's marks: "selected" on the job shown, "loading" on one being fetched, "failed" where it failed.
  function markList() {
    [...$("pending").children].forEach((li, k) => {
      li.classList.toggle("selected", k === state.index);
      const b = li.querySelector("button");
      if (b) { if (k === state.index) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current"); }
      li.classList.toggle("loading", state.loadingJob !== null && k === state.cursor && k !== state.index);
    });
  }

  // The pending list, by the filters. Returns the answer, or null where a later load overtook this one.
  // A failure is thrown with words saying what was being loaded; the list shown stays as it was.
  async function loadPending() {
    const q = new URLSearchParams();
    if ($("f-sweep").value.trim()) q.set("sweep", $("f-sweep").value.trim());
    if ($("f-bbox").value.trim()) q.set("bbox", $("f-bbox").value.trim());
    const n = ++state.listing;
    setLoading("pending", "loading the pending list…");
    let out;
    try {
      out = await call("/pending" + (q.toString() ? "?" + q : ""));
    } catch (e) {
      if (n !== state.listing) return null;
      setLoading("pending", null);
      // A filter refused: the field it names is marked invalid until a list loads again.
      if (e.status === 400) {
        const field = { bbox: "f-bbox", sweep: "f-sweep" }[e.parameter] || (q.get("bbox") ? "f-bbox" : "f-sweep");
        $(field).setAttribute("aria-invalid", "true");
      }
      const filtered = q.toString() ? " " + filterWords(q) : "";
      const kept = state.pending.length ? "; the list below is the previous one" : "";
      throw failure((e.status === 400 ? "filter refused: " : "could not load the pending list" + filtered + ": ") + e.message + kept, e.status, e.parameter);
    }
    if (n !== state.listing) return null;
    setLoading("pending", null);
    $("f-sweep").removeAttribute("aria-invalid"); $("f-bbox").removeAttribute("aria-invalid");
    const shownId = state.job ? state.job.jobId : null;
    state.pending = out.pending;
    $("count").textContent = "(" + out.count + (out.total > out.count ? " of " + out.total : "") + ")";
    const list = $("pending");
    list.replaceChildren();
    areas.clearLayers();
    out.pending.forEach((p, i) => {
      // Each item is a button (Tab, Enter and Space as any button), the job shown marked aria-current.
      const li = document.createElement("li");
      li.dataset.jobId = p.jobId;
      const b = document.createElement("button");
      b.type = "button"; b.className = "job";
      b.textContent = p.wireId + " · " + p.photos + " photos · " + p.facts + " facts · replicas " +
        p.replicas.accepted + "/" + p.replicas.quorum + " ";
      if (!p.unanimous) { const s = document.createElement("span"); s.className = "dissent"; s.textContent = "(dissent)"; b.appendChild(s); }
      b.addEventListener("click", () => select(i));
      li.appendChild(b);
      list.appendChild(li);
      L.geoJSON(p.area, { style: { color: p.unanimous ? "#36c" : "#c60", weight: 1, fillOpacity: 0.08 } })
        .on("click", () => select(i)).addTo(areas);
    });
    if (out.pending.length) {
      const b = L.geoJSON({ type: "FeatureCollection", features: out.pending.map((p) => ({ type: "Feature", geometry: p.area, properties: {} })) }).getBounds();
      map.fitBounds(b, { padding: [20, 20], animate: false });
    }
    // The message line is left alone: it may hold the confirmation of the verdict that emptied the list.
    const empty = $("empty");
    empty.textContent = out.pending.length ? "" : "No job waits for review" +
      (q.toString() ? " " + filterWords(q) + (q.get("sweep") ? " (or there is no such sweep)" : "") : "") + ".";
    // The job shown keeps its place if it is still listed; otherwise none is shown until one is selected.
    state.index = shownId === null ? -1 : out.pending.findIndex((p) => p.jobId === shownId);
    if (state.index < 0) clearJob();
    state.cursor = state.index;
    markList();
    document.body.dataset.pending = String(out.pending.length);
    return out;
  }

  // Show the i-th listed job. The list marks it as loading until its answer comes; a verdict waits for it
  // (it acts on the job shown, never on one only highlighted); an answer overtaken by a later selection is
  // dropped; a failure says so, and no job is shown (so that no key acts on the previous one by surprise).
  async function select(i) {
    if (i < 0 || i >= state.pending.length) return;
    const n = ++state.selecting;
    const want = state.pending[i];
    state.cursor = i;
    state.loadingJob = want.jobId;
    markList();
    setLoading("job", "loading " + want.wireId + "…");
    let job;
    try {
      job = await call("/jobs/" + want.jobId);
    } catch (e) {
      if (n !== state.selecting) return;
      state.loadingJob = null;
      setLoading("job", null);
      clearJob();
      const li = $("pending").children[i];
      if (li) li.classList.add("failed");
      setStatus("could not load " + want.wireId + ": " + e.message + " (select it again to retry)", true);
      return;
    }
    if (n !== state.selecting) return;
    state.loadingJob = null;
    setLoading("job", null);
    // The list may have been loaded again meanwhile: the job's place now, or nothing shown if it left it.
    i = state.pending.findIndex((p) => p.jobId === job.jobId);
    if (i < 0) { markList(); return; }
    const li = $("pending").children[i];
    if (li) li.classList.remove("failed");
    // Another job: the reason typed and the choice to reject were for the previous one.
    if (!state.job || state.job.jobId !== job.jobId) { $("reason").value = ""; setMode(null); }
    state.job = job;
    state.index = i;
    markList();
    render(job);
  }

  function render(job) {
    $("detail").hidden = false;
    $("d-title").textContent = job.wireId + " of sweep " + job.sweepId + " (" + job.state + ")";
    table($("replicas"), ["result", "node", "state", "facts", "agreement", "validation"], job.replicas.map((r) => [
      String(r.resultId) + (r.canonical ? " ★" : ""), r.nodeId + (r.node ? (r.node.trusted ? " (trusted)" : " (untrusted, streak " + r.node.streak + ")") : ""),
      r.state, String(r.facts),
      r.agreement ? (Math.round(r.agreement.share * 100) + "% matched" + (r.agreement.maxValueDiff !== null && r.agreement.maxValueDiff !== undefined ? ", max Δ " + qty(r.agreement.maxValueDiff, diffUnit(job)) : "")) : (r.canonical ? "canonical" : "—"),
      r.validation.passed ? "passed" : r.validation.reasons.join("; ")]));
    table($("facts"), ["kind", "value", "conf.", "basis", "photos", "where"], job.facts.map((f) => [f.kind, fmt(f.value, f.unit), qty(f.confidence), f.basis, f.source.join(" "), where(f)]));
    [...$("facts").rows].slice(1).forEach((row, i) => {
      row.className = "fact-row"; row.dataset.fact = String(i); row.tabIndex = 0;
      row.setAttribute("aria-selected", "false");
      row.setAttribute("aria-label", "fact " + (i + 1) + ": " + [...row.cells].map((c) => c.textContent).join(", "));
      row.addEventListener("click", () => selectFact(state.fact === i ? -1 : i));
      row.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); ev.stopPropagation(); selectFact(state.fact === i ? -1 : i); } });
    });
    table($("measurements"), ["photo", "road width", "scaleTrust", "objects"], job.measurements.map((m) => [
      m.photoId, m.roadWidth ? qty(m.roadWidth.widthM, "m") + " ± " + qty(m.roadWidth.spreadM, "m") + " (" + m.roadWidth.method + ")" : "—",
      qty(m.calibration && m.calibration.scaleTrust), m.objects.map((o) => o.label + " " + qty(o.distanceM, "m") + " away, h " +
        qty(o.size && o.size.heightM, "m") + (o.heightIsLowerBound ? " or more" : "")).join("; ")]));
    const photos = $("photos");
    photos.replaceChildren();
    const byPhoto = new Map(job.measurements.map((m) => [m.photoId, m]));
    const skipped = new Map((job.skipped || []).map((k) => [k.photoId, k.reason]));
    state.links = { facts: job.facts.map(() => ({ els: [], figs: new Set() })) };
    job.photos.forEach((p) => photos.appendChild(photoFigure(p, byPhoto.get(p.id), skipped.get(p.id))));
    linkFacts(job, byPhoto);
    const notes = $("notes"); notes.replaceChildren();
    job.validationNotes.forEach((n) => { const li = document.createElement("li"); li.textContent = n; notes.appendChild(li); });

    detail.clearLayers();
    L.geoJSON(job.area, { style: { color: "#36c", weight: 2, fillOpacity: 0.05 } }).addTo(detail);
    // The markers' tooltips make them focusable (Leaflet listens for focus): they are kept out of the Tab order,
    // each named; the keyboard's way to a fact is its row in the table, which highlights its marker.
    const offTab = (mk, name) => { const el = mk.getElement && mk.getElement(); if (el) { el.setAttribute("tabindex", "-1"); el.setAttribute("role", "img"); el.setAttribute("aria-label", name); } return mk; };
    job.photos.forEach((p) => offTab(L.circleMarker([p.lat, p.lon], { radius: 3, color: "#333", weight: 1, fillOpacity: 0.6 })
      .bindTooltip(escapeHtml("photo " + p.id)).addTo(detail), "photo " + p.id));
    state.markers = job.facts.map((f, i) => {
      const words = f.kind + ": " + fmt(f.value, f.unit) + " (" + qty(f.confidence) + ", " + f.basis + ")";
      // Leaflet writes a string tooltip as HTML, and every word of it came from a node or the photos' provider.
      return offTab(L.circleMarker([f.lat, f.lon], { radius: 6, color: KINDS[f.kind] || "#000", weight: 2, fillOpacity: 0.5, className: "fact fact-" + f.kind + " fact-n" + i })
        .bindTooltip(escapeHtml(words))
        .on("click", () => selectFact(state.fact === i ? -1 : i)).addTo(detail), "fact " + (i + 1) + ", " + words);
    });
    state.fact = -1;
    map.fitBounds(L.geoJSON(job.area).getBounds(), { padding: [30, 30], animate: false });
    document.body.dataset.selected = String(job.jobId);
    document.body.dataset.facts = String(job.facts.length);
  }

  // Where a fact is, as text (the map's marker in words): latitude, longitude.
  const where = (f) => (typeof f.lat === "number" && typeof f.lon === "number" ? f.lat.toFixed(5) + ", " + f.lon.toFixed(5) : "unknown");

  // The unit of the replicas' "max Δ" (the largest difference of a fact's primary value): the facts' unit
  // where they share one.
  function diffUnit(job) {
    const units = new Set(job.facts.map((f) => f.unit).filter((u) => u));
    return units.size === 1 ? [...units][0] : "(in each fact's unit)";
  }

  function svg(tag, attrs, parent) {
    const el = document.createElementNS(SVGNS, tag);
    Object.entries(attrs || {}).forEach(([k, v]) => el.setAttribute(k, String(v)));
    if (parent) parent.appendChild(el);
    return el;
  }

  function tag(g, x, y, text, size) {
    const t = svg("text", { x: x + size * 0.2, y: y - size * 0.25, "font-size": size, class: "tag" });
    t.textContent = text;
    const bg = svg("rect", { x: x, y: y - size * 1.1, width: size * 0.56 * text.length + size * 0.4, height: size * 1.1, class: "tagbg" }, g);
    g.appendChild(t);
    return bg;
  }

  // One photo from the provider with the engine's image evidence drawn over it, in the photo's own pixels
  // (its width x height as the provider lists it, which the coordinator checked the evidence against).
  function photoFigure(p, m, skipReason) {
    const fig = document.createElement("figure");
    fig.dataset.photo = p.id;
    const shot = document.createElement("div"); shot.className = "shot";
    shot.style.aspectRatio = p.width + " / " + p.height;
    const img = document.createElement("img"); img.alt = ""; img.referrerPolicy = "no-referrer";     // named by its button
    shot.appendChild(img);
    const cap = document.createElement("figcaption");
    const a = document.createElement("a"); a.href = p.url; a.target = "_blank"; a.rel = "noopener noreferrer"; a.textContent = p.id;
    cap.append(a, " · " + p.license);
    // A photo the provider does not give (gone, refused, unreachable) is said so, not left a grey box.
    img.addEventListener("error", () => {
      if (fig.dataset.photoError) return;
      fig.dataset.photoError = "1";
      let host = "";
      try { host = new URL(p.url, location.href).host; } catch (e) { host = ""; }
      const w = document.createElement("span"); w.className = "warn photo-error";
      w.textContent = " · the photo could not be loaded from its provider" + (host ? " (" + host + ")" : "") + "; open the link to retry";
      cap.appendChild(w);
    });
    img.src = p.url;
    let drawn = 0;
    if (m) {
      const layer = svg("svg", { class: "evidence", viewBox: "0 0 " + p.width + " " + p.height, preserveAspectRatio: "none" });
      const size = Math.max(6, p.height / 22);
      fig.evidence = { road: null, objects: [] };
      const rows = m.roadWidth && m.roadWidth.rows;
      if (rows && rows.length) {
        const g = svg("g", { class: "ev ev-road", "data-kind": "roadway" }, layer);
        svg("polygon", { points: rows.map((r) => r.uLeft + "," + r.v).concat(rows.slice().reverse().map((r) => r.uRight + "," + r.v)).join(" "), class: "road-area" }, g);
        rows.forEach((r) => svg("line", { x1: r.uLeft, y1: r.v, x2: r.uRight, y2: r.v, class: "road-row" }, g));
        svg("polyline", { points: rows.map((r) => r.uLeft + "," + r.v).join(" "), class: "road-edge" }, g);
        svg("polyline", { points: rows.map((r) => r.uRight + "," + r.v).join(" "), class: "road-edge" }, g);
        const near = rows.reduce((a, b) => (b.v > a.v ? b : a));
        tag(g, near.uLeft, near.v, "road " + m.roadWidth.widthM + " m", size);
        svg("title", {}, g).textContent = "road width " + m.roadWidth.widthM + " m ± " + m.roadWidth.spreadM + ", read on " +
          m.roadWidth.samples + " rows (" + rows.length + " drawn): " + m.roadWidth.method;
        fig.evidence.road = g; drawn += 1;
      }
      m.objects.forEach((o, j) => {
        if (!o.box) return;
        const [x0, y0, x1, y1] = o.box;
        const kind = DET_KIND[o.label];
        const scale = o.usedForScale === true;
        const colour = scale ? "#e60" : (kind ? KINDS[kind] : "#ddd");
        const g = svg("g", { class: "ev ev-obj obj-" + o.label, "data-object": j, "data-kind": kind || "" }, layer);
        svg("rect", { x: x0, y: y0, width: x1 - x0, height: y1 - y0, class: "box" + (scale ? " scale" : ""), stroke: colour }, g);
        tag(g, x0, y0 > size ? y0 : y1 + size * 1.1, o.label + " " + o.distanceM + " m", size * 0.85);
        svg("title", {}, g).textContent = o.label + ": " + o.distanceM + " m away, " + o.size.widthM + " × " + o.size.heightM +
          (o.heightIsLowerBound ? "+ (cut: a lower bound)" : "") + " m, bearing " + o.bearingDeg + "°" +
          (o.usedForScale === true ? "; the calibration's scale rests on it" : o.usedForScale === false ? "; not used for the scale" : "");
        fig.evidence.objects[j] = g; drawn += 1;
      });
      shot.appendChild(layer);
      const what = m.calibration ? " · scale " + m.calibration.scaleTrust : "";
      cap.append(what + " · " + (drawn ? drawn + " evidence marks" : "no image evidence in this result"));
      img.addEventListener("load", () => {
        // The evidence is in the listed size's pixels; an image of another shape would misplace it: say so.
        const listed = p.width / p.height, got = img.naturalWidth / img.naturalHeight;
        if (img.naturalWidth && Math.abs(got / listed - 1) > 0.02) {
          const w = document.createElement("span"); w.className = "warn";
          w.textContent = " · the provider's image is " + img.naturalWidth + "×" + img.naturalHeight + ", listed " + p.width + "×" + p.height + ": the marks may be misplaced";
          cap.appendChild(w);
        }
      });
    } else {
      cap.append(" · " + (skipReason ? "skipped: " + skipReason : "not measured"));
    }
    fig.dataset.evidence = String(drawn);
    const named = (large) => {
      shot.setAttribute("aria-expanded", String(large));
      shot.setAttribute("aria-label", (large ? "shrink photo " : "enlarge photo ") + p.id);
    };
    const enlarge = () => named(fig.classList.toggle("large"));
    shot.tabIndex = 0;
    shot.setAttribute("role", "button");
    named(false);
    shot.addEventListener("click", (ev) => {
      const hit = ev.target.closest && ev.target.closest("g.ev");
      if (hit && hit.factIndex !== undefined) { selectFact(state.fact === hit.factIndex ? -1 : hit.factIndex); return; }
      enlarge();
    });
    shot.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); ev.stopPropagation(); enlarge(); } });
    fig.append(shot, cap);
    return fig;
  }

  function metres(a, b) {
    const k = Math.cos(a.lat * Math.PI / 180);
    return Math.hypot((a.lon - b.lon) * k, a.lat - b.lat) * 111320;
  }

  // Which marks on which photos each fact rests on: a roadway fact, the road rows of its source photos; an
  // object's fact, the nearest object of its kind in each source photo; a fact read from the class mask
  // (kerbs, fences, wires, vegetation) has no box, so its photos are marked as a whole.
  function linkFacts(job, byPhoto) {
    const figs = new Map([...$("photos").children].map((f) => [f.dataset.photo, f]));
    job.facts.forEach((f, i) => {
      const link = state.links.facts[i];
      f.source.forEach((pid) => {
        const fig = figs.get(pid), m = byPhoto.get(pid);
        if (!fig) return;
        link.figs.add(fig);
        if (!m || !fig.evidence) return;
        let el = null;
        if (f.kind === "roadway") el = fig.evidence.road;
        else {
          let best = Infinity;
          m.objects.forEach((o, j) => {
            const d = metres(o, f);
            if (DET_KIND[o.label] === f.kind && fig.evidence.objects[j] && d < best) { best = d; el = fig.evidence.objects[j]; }
          });
        }
        if (el) { link.els.push(el); if (el.factIndex === undefined) { el.factIndex = i; el.dataset.fact = String(i); } }
      });
    });
  }

  // A fact selected (in the table, on the map or on a photo) is highlighted in all three; -1 clears.
  function selectFact(i) {
    if (!state.job || !state.links) return;
    state.fact = i;
    document.querySelectorAll("#facts tr.hl, #photos .hl, svg.evidence .hl").forEach((el) => el.classList.remove("hl"));
    document.querySelectorAll("#facts tr.fact-row").forEach((r) => r.setAttribute("aria-selected", "false"));
    document.querySelectorAll("svg.evidence").forEach((s) => s.classList.toggle("dim", i >= 0));
    state.markers.forEach((mk, k) => {
      const on = k === i;
      mk.setStyle({ weight: on ? 5 : 2, radius: on ? 11 : 6, color: on ? HL : (KINDS[state.job.facts[k].kind] || "#000") });
      const el = mk.getElement && mk.getElement();
      if (el) el.classList.toggle("hl", on);
      if (on) mk.bringToFront();
    });
    if (i < 0) { delete document.body.dataset.fact; return; }
    const row = $("facts").querySelector('tr[data-fact="' + i + '"]');
    if (row) { row.classList.add("hl"); row.setAttribute("aria-selected", "true"); }
    const link = state.links.facts[i];
    link.els.forEach((el) => el.classList.add("hl"));
    link.figs.forEach((fig) => fig.classList.add("hl"));
    const first = link.figs.values().next().value;
    if (first) first.scrollIntoView({ block: "nearest" });
    document.body.dataset.fact = String(i);
    document.body.dataset.factMarks = String(link.els.length);
  }

  // What Enter in the reason field does: nothing until the reviewer chooses to reject (r, or the Reject
  // button with the field empty); then it rejects the job shown, with the reason typed. Approving is its
  // own key or button, never Enter, so a note typed for an approval is never sent as a rejection.
  function setMode(mode) {
    const r = $("reason");
    if (mode) r.dataset.mode = mode; else delete r.dataset.mode;
    r.classList.toggle("rejecting", mode === "reject");
    r.placeholder = mode === "reject" ? "reason for rejecting, then Enter" : "note, or reason (needed to reject)";
    const keys = $("shortcuts").checked;
    $("mode").textContent = mode === "reject" && state.job
      ? "Enter rejects " + state.job.wireId + " with this reason; Esc cancels."
      : "Enter here does nothing until you choose: " + (keys ? "r (or Reject)" : "Reject") + " then Enter rejects with the reason; " +
        (keys ? "a (or Approve)" : "Approve") + " approves, the text as its note.";
  }

  const SENDING = "wait: a verdict is being sent";
  // Why no verdict can be sent now, or null: one verdict at a time, and only on a job shown in full.
  function blocked() {
    if (state.sending) return SENDING;
    if (state.loadingJob !== null) return "wait: the job selected is still loading; a verdict acts on the job shown";
    if (!state.job) return "no job is shown: select one in the list";
    return null;
  }
  // A verdict done: the buttons back; its confirmation back too where a key pressed again meanwhile
  // (a a) replaced it with the wait; focus put back where it was lost.
  function sent(said, had) {
    sending(false);
    if (said && $("status").textContent === SENDING) setStatus(said);
    refocus(had);
  }
  function sending(on) {
    state.sending = on;
    $("approve").disabled = on; $("reject").disabled = on; $("approve-sweep").disabled = on;
    if (on) document.body.dataset.sending = "1"; else delete document.body.dataset.sending;
  }

  function approvedWords(job, out) {
    let t = job.wireId + " " + out.state + " · " + out.factsPublished + " facts live";
    if (out.cellsSweptAgain) t += "; " + out.cellsSweptAgain + " of its cells, where no photo was read, are swept again as job-" + out.sweptAgainBy;
    // A cell split over several jobs is decided once all of them are (docs/review.md).
    if (out.cellsWaiting) t += "; " + out.cellsWaiting + " of its cells wait for the other jobs holding their photos";
    if (out.cellsParked) t += "; " + out.cellsParked + " cells parked, as another job over them was: " + out.parkedReason;
    return t;
  }

  function rejectedWords(job, out) {
    let t = job.wireId + " " + out.state;
    if (out.reissued) {
      const r = out.reissued;
      t += "; its ground is reissued as " + r.wireId + " (reissue " + r.generation + " of " + r.reissueMax + "), not offered to " +
        ((r.notOfferedTo || []).length ? r.notOfferedTo.join(", ") : "no node");
    } else if (out.parked) {
      const p = out.parked;
      t += "; its ground is parked (" + p.cells + " cells" + (p.waiting ? ", " + p.waiting + " more once the other jobs holding their photos are decided" : "") +
        "), not swept again: " + p.reason;
    }
    return t;
  }

  // After a verdict: the list again, the same place in it shown (the next job). A failure to reload is told
  // after the verdict's own words, which stay.
  async function afterVerdict(said, keep) {
    try {
      const out = await loadPending();
      if (out && state.pending.length && !state.job) await select(Math.min(Math.max(keep, 0), state.pending.length - 1));
    } catch (e) { setStatus(said + " — then " + e.message, true); }
  }

  // Focus lost by a verdict (its button disabled while it is sent, the job's detail hidden, the list
  // rebuilt) is put back: on the title of the job shown next, or on the list's title when none is.
  // Focus the reviewer moved elsewhere meanwhile, or never had on the page, is left where it is.
  const focusLost = () => {
    const el = document.activeElement;
    return !el || el === document.body || !el.isConnected || el.disabled === true ||
      (typeof el.checkVisibility === "function" && !el.checkVisibility());
  };
  function refocus(had) {
    if (!had || had === document.body || !focusLost()) return;
    const to = $("detail").hidden ? $("pending-title") : $("d-title");
    to.focus();
  }

  async function verdict(approve) {
    const why = blocked();
    if (why) { setStatus(why, true); return; }
    const job = state.job;
    const reason = $("reason").value.trim();
    if (!approve && !reason) {
      setMode("reject"); $("reason").focus();
      setStatus("type the reason for rejecting " + job.wireId + ", then press Enter");
      return;
    }
    const had = document.activeElement;
    let said = null;
    sending(true);
    try {
      setStatus((approve ? "approving " : "rejecting ") + job.wireId + "…");
      let out;
      try {
        out = await call("/jobs/" + job.jobId + (approve ? "/approve" : "/reject"), { method: "POST", body: JSON.stringify(reason ? { reason: reason } : {}) });
      } catch (e) {
        setStatus("could not " + (approve ? "approve " : "reject ") + job.wireId + ": " + e.message, true);
        return;
      }
      said = approve ? approvedWords(job, out) : rejectedWords(job, out);
      setStatus(said);
      $("reason").value = ""; setMode(null);
      document.body.dataset.lastVerdict = job.jobId + ":" + out.state;
      await afterVerdict(said, state.index);
    } finally { sent(said, had); }
  }

  function sweepWords(sweepId, out) {
    const left = out.left.length;
    let t = "sweep " + sweepId + ": " + out.approved.length + " approved" +
      (out.approved.length ? " (" + out.factsPublished + " facts live)" : "") + ", " + left + " left for a look" +
      (left ? " (a replica disagreed: review alone)" : "");
    const others = Object.entries(out.notInReview || {}).filter(([, n]) => n > 0).map(([st, n]) => n + " " + st);
    t += "; " + (others.length ? "not in review: " + others.join(", ") : "no other job in the sweep");
    return t;
  }

  // Approving a whole sweep decides many jobs at once: it is asked first, by key or by button.
  async function approveSweep() {
    const why = blocked();
    if (why) { setStatus(why, true); return; }
    const job = state.job;
    const listed = state.pending.filter((p) => p.sweepId === job.sweepId);
    const agreed = listed.filter((p) => p.unanimous).length;
    const ask = "Approve every job of sweep " + job.sweepId + " whose replicas agree? Of the " + listed.length + " listed here, " +
      agreed + " would be approved at once (with any other job of the sweep waiting in review); a job with a dissenting replica is left for a look.";
    if (!window.confirm(ask)) { setStatus("sweep " + job.sweepId + " not approved: cancelled"); return; }
    const had = document.activeElement;
    let said = null;
    sending(true);
    try {
      setStatus("approving sweep " + job.sweepId + "…");
      let out;
      try {
        out = await call("/sweeps/" + job.sweepId + "/approve", { method: "POST", body: JSON.stringify({}) });
      } catch (e) {
        setStatus("could not approve sweep " + job.sweepId + ": " + e.message, true);
        return;
      }
      said = sweepWords(job.sweepId, out);
      setStatus(said);
      document.body.dataset.lastSweep = job.sweepId + ":" + out.approved.length;
      await afterVerdict(said, 0);
    } finally { sent(said, had); }
  }

  // The single-key shortcuts, on unless the reviewer turned them off (remembered in localStorage).
  const shortcutsOn = () => $("shortcuts").checked;
  function setShortcuts(on, save) {
    $("shortcuts").checked = on;
    document.body.dataset.shortcuts = on ? "on" : "off";
    if (save) try { localStorage.setItem(SHORTCUTS, on ? "on" : "off"); } catch (e) { /* storage refused: this page only */ }
  }
  setShortcuts(stored(SHORTCUTS) !== "off", false);
  $("shortcuts").addEventListener("change", () => { setShortcuts($("shortcuts").checked, true); setMode($("reason").dataset.mode || null); });

  // Moving in the list with the arrows (only while focus is on it): the next job shown, focus following.
  function step(by, fromList) {
    const i = state.cursor + by;
    if (i < 0 || i >= state.pending.length) return;
    select(i);
    if (fromList) { const b = $("pending").children[i].querySelector("button"); if (b) b.focus(); }
  }

  document.addEventListener("keydown", (ev) => {
    const t = ev.target;
    const typing = (t instanceof HTMLInputElement && !["checkbox", "radio", "button", "submit", "reset"].includes(t.type)) ||
      t instanceof HTMLTextAreaElement || (t && t.isContentEditable);
    if (typing) {
      if (t.id === "reason" && ev.key === "Enter") {
        ev.preventDefault();
        if (t.dataset.mode === "reject") verdict(false);
        else setStatus("Enter does nothing until you choose: Reject (or Esc, then r) rejects with this reason; Approve (or Esc, then a) approves with it as a note");
      }
      if (ev.key === "Escape") {
        if (t.id === "reason" && t.dataset.mode) setMode(null);
        t.blur();
      }
      return;
    }
    if (ev.key === "Escape") {
      // Esc closes the map's tooltips (hover or focus) and clears the selected fact.
      map.eachLayer((l) => { if (l.closeTooltip) l.closeTooltip(); });
      selectFact(-1);
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.shiftKey) return;
    const inList = !!(t && t.closest && t.closest("#pending"));
    // The arrows are the list's own (not a shortcut): taken only while focus is in it, never elsewhere
    // (on the map they pan it, in the page they scroll).
    if (inList && (ev.key === "ArrowDown" || ev.key === "ArrowUp")) { ev.preventDefault(); step(ev.key === "ArrowDown" ? 1 : -1, true); return; }
    // Letters: only with the shortcuts on, and never while focus is in the map.
    if (!shortcutsOn() || (t && t.closest && t.closest("#map"))) return;
    if (ev.key === "a") { ev.preventDefault(); verdict(true); }
    else if (ev.key === "r") { ev.preventDefault(); if (!blocked()) setMode("reject"); verdict(false); }
    else if (ev.key === "s") { ev.preventDefault(); approveSweep(); }
    else if (ev.key === "j") { ev.preventDefault(); step(1, inList); }
    else if (ev.key === "k") { ev.preventDefault(); step(-1, inList); }
  });
  $("approve-sweep").addEventListener("click", () => approveSweep());
  $("approve").addEventListener("click", () => verdict(true));
  $("reject").addEventListener("click", () => { if (!blocked()) setMode("reject"); verdict(false); });
  $("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    loadPending()
      .then((out) => (out && state.pending.length && !state.job ? select(0) : null))
      .catch((e) => setStatus(e.message, true));
  });
  $("keyform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    state.key = $("key").value.trim(); $("key").value = "";
    $("key").blur();            // so that j, k, a, r, s act on the list at once, not type into the field
    sessionStorage.setItem("sisReviewKey", state.key);
    await start();
  });

  async function start() {
    delete document.body.dataset.ready;
    if (!(await signIn())) { document.body.dataset.ready = "failed"; return; }
    try {
      const out = await loadPending();
      if (out === null) return;
      if (state.pending.length && !state.job) await select(0);
      document.body.dataset.ready = "1";
    } catch (e) {
      setStatus(e.message, true);
      document.body.dataset.ready = "failed";
    }
  }

  setMode(null);
  // A key may arrive in the fragment (never sent to the server): #key=sisk_...
  const m = /(?:^|&)key=([^&]+)/.exec(location.hash.slice(1));
  if (m) { state.key = decodeURIComponent(m[1]); sessionStorage.setItem("sisReviewKey", state.key); history.replaceState(null, "", location.pathname); }
  start();
})();
