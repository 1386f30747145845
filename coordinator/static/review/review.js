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
  const $ = (id) => document.getElementById(id);
  const state = { key: sessionStorage.getItem("sisReviewKey") || "", pending: [], index: -1, job: null,
                  links: null, fact: -1, markers: [], baseMap: undefined };

  const map = L.map("map", { zoomControl: true, attributionControl: true }).setView([0, 0], 2);
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

  function setStatus(text, error) {
    $("status").textContent = text;
    $("status").className = error ? "error" : "";
  }

  async function call(path, options) {
    const opts = Object.assign({ headers: {} }, options || {});
    opts.headers["Authorization"] = "Bearer " + state.key;
    if (opts.body) opts.headers["Content-Type"] = "application/json";
    const r = await fetch(API + path, opts);
    const body = await r.json();
    if (!r.ok) throw new Error((body.error && body.error.message) || ("HTTP " + r.status));
    return body;
  }

  function td(row, text) { const c = document.createElement("td"); c.textContent = text; row.appendChild(c); return c; }
  function table(el, head, rows) {
    el.replaceChildren();
    const h = el.insertRow(); head.forEach((t) => { const c = document.createElement("th"); c.textContent = t; h.appendChild(c); });
    rows.forEach((cells) => { const r = el.insertRow(); cells.forEach((t) => td(r, t)); });
  }
  const fmt = (v) => v === null || v === undefined ? "—" : (typeof v === "object" ? Object.entries(v).map(([k, x]) => k + " " + x).join(", ") : String(v));

  async function signIn() {
    if (!state.key) { $("who").textContent = "not signed in"; return false; }
    try {
      const me = await call("/me");
      $("who").textContent = "reviewer: " + me.name;
      setBaseMap(me.baseMap);
      return true;
    } catch (e) {
      $("who").textContent = "key refused: " + e.message;
      return false;
    }
  }

  async function loadPending() {
    const q = new URLSearchParams();
    if ($("f-sweep").value.trim()) q.set("sweep", $("f-sweep").value.trim());
    if ($("f-bbox").value.trim()) q.set("bbox", $("f-bbox").value.trim());
    const out = await call("/pending" + (q.toString() ? "?" + q : ""));
    state.pending = out.pending;
    $("count").textContent = "(" + out.count + (out.total > out.count ? " of " + out.total : "") + ")";
    const list = $("pending");
    list.replaceChildren();
    areas.clearLayers();
    out.pending.forEach((p, i) => {
      const li = document.createElement("li");
      li.dataset.jobId = p.jobId;
      li.textContent = p.wireId + " · " + p.photos + " photos · " + p.facts + " facts · replicas " +
        p.replicas.accepted + "/" + p.replicas.quorum + " ";
      if (!p.unanimous) { const s = document.createElement("span"); s.className = "dissent"; s.textContent = "(dissent)"; li.appendChild(s); }
      li.addEventListener("click", () => select(i));
      list.appendChild(li);
      L.geoJSON(p.area, { style: { color: p.unanimous ? "#36c" : "#c60", weight: 1, fillOpacity: 0.08 } })
        .on("click", () => select(i)).addTo(areas);
    });
    if (out.pending.length) {
      const b = L.geoJSON({ type: "FeatureCollection", features: out.pending.map((p) => ({ type: "Feature", geometry: p.area, properties: {} })) }).getBounds();
      map.fitBounds(b, { padding: [20, 20], animate: false });
    }
    if (!out.pending.length) { $("detail").hidden = true; detail.clearLayers(); setStatus(""); }
    document.body.dataset.pending = String(out.pending.length);
    return out;
  }

  async function select(i) {
    if (i < 0 || i >= state.pending.length) return;
    state.index = i;
    [...$("pending").children].forEach((li, k) => li.classList.toggle("selected", k === i));
    const job = await call("/jobs/" + state.pending[i].jobId);
    state.job = job;
    render(job);
  }

  function render(job) {
    $("detail").hidden = false;
    $("d-title").textContent = job.wireId + " of sweep " + job.sweepId + " (" + job.state + ")";
    table($("replicas"), ["result", "node", "state", "facts", "agreement", "validation"], job.replicas.map((r) => [
      String(r.resultId) + (r.canonical ? " ★" : ""), r.nodeId + (r.node ? (r.node.trusted ? " (trusted)" : " (untrusted, streak " + r.node.streak + ")") : ""),
      r.state, String(r.facts),
      r.agreement ? (Math.round(r.agreement.share * 100) + "% matched" + (r.agreement.maxValueDiff !== null ? ", max Δ " + r.agreement.maxValueDiff : "")) : (r.canonical ? "canonical" : "—"),
      r.validation.passed ? "passed" : r.validation.reasons.join("; ")]));
    table($("facts"), ["kind", "value", "conf.", "basis", "photos"], job.facts.map((f) => [f.kind, fmt(f.value) + " " + f.unit, f.confidence, f.basis, f.source.join(" ")]));
    [...$("facts").rows].slice(1).forEach((row, i) => {
      row.className = "fact-row"; row.dataset.fact = String(i);
      row.addEventListener("click", () => selectFact(state.fact === i ? -1 : i));
    });
    table($("measurements"), ["photo", "road width", "scaleTrust", "objects"], job.measurements.map((m) => [
      m.photoId, m.roadWidth ? m.roadWidth.widthM + " m ± " + m.roadWidth.spreadM + " (" + m.roadWidth.method + ")" : "—",
      m.calibration.scaleTrust, m.objects.map((o) => o.label + " " + o.distanceM + " m, h " + o.size.heightM + (o.heightIsLowerBound ? "+" : "")).join("; ")]));
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
    job.photos.forEach((p) => L.circleMarker([p.lat, p.lon], { radius: 3, color: "#333", weight: 1, fillOpacity: 0.6 })
      .bindTooltip(escapeHtml("photo " + p.id)).addTo(detail));
    state.markers = job.facts.map((f, i) => L.circleMarker([f.lat, f.lon], { radius: 6, color: KINDS[f.kind] || "#000", weight: 2, fillOpacity: 0.5, className: "fact fact-" + f.kind + " fact-n" + i })
      // Leaflet writes a string tooltip as HTML, and every word of it came from a node or the photos' provider.
      .bindTooltip(escapeHtml(f.kind + ": " + fmt(f.value) + " " + f.unit + " (" + f.confidence + ", " + f.basis + ")"))
      .on("click", () => selectFact(state.fact === i ? -1 : i)).addTo(detail));
    state.fact = -1;
    map.fitBounds(L.geoJSON(job.area).getBounds(), { padding: [30, 30], animate: false });
    document.body.dataset.selected = String(job.jobId);
    document.body.dataset.facts = String(job.facts.length);
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
    const img = document.createElement("img"); img.src = p.url; img.alt = p.id; img.referrerPolicy = "no-referrer";
    shot.appendChild(img);
    const cap = document.createElement("figcaption");
    const a = document.createElement("a"); a.href = p.url; a.target = "_blank"; a.rel = "noopener noreferrer"; a.textContent = p.id;
    cap.append(a, " · " + p.license);
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
    shot.addEventListener("click", (ev) => {
      const hit = ev.target.closest && ev.target.closest("g.ev");
      if (hit && hit.factIndex !== undefined) { selectFact(state.fact === hit.factIndex ? -1 : hit.factIndex); return; }
      fig.classList.toggle("large");
    });
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
    document.querySelectorAll("svg.evidence").forEach((s) => s.classList.toggle("dim", i >= 0));
    state.markers.forEach((mk, k) => {
      const on = k === i;
      mk.setStyle({ weight: on ? 5 : 2, radius: on ? 11 : 6, color: on ? "#f0c000" : (KINDS[state.job.facts[k].kind] || "#000") });
      const el = mk.getElement && mk.getElement();
      if (el) el.classList.toggle("hl", on);
      if (on) mk.bringToFront();
    });
    if (i < 0) { delete document.body.dataset.fact; return; }
    const row = $("facts").querySelector('tr[data-fact="' + i + '"]');
    if (row) row.classList.add("hl");
    const link = state.links.facts[i];
    link.els.forEach((el) => el.classList.add("hl"));
    link.figs.forEach((fig) => fig.classList.add("hl"));
    const first = link.figs.values().next().value;
    if (first) first.scrollIntoView({ block: "nearest" });
    document.body.dataset.fact = String(i);
    document.body.dataset.factMarks = String(link.els.length);
  }

  async function verdict(approve) {
    const job = state.job;
    if (!job) return;
    const reason = $("reason").value.trim();
    if (!approve && !reason) { setStatus("type a reason, then press Enter to reject", true); $("reason").focus(); $("reason").dataset.mode = "reject"; return; }
    try {
      const out = await call("/jobs/" + job.jobId + (approve ? "/approve" : "/reject"), { method: "POST", body: JSON.stringify(reason ? { reason: reason } : {}) });
      setStatus(job.wireId + " " + out.state + (approve ? " · " + out.factsPublished + " facts live" : ""));
      $("reason").value = ""; delete $("reason").dataset.mode;
      document.body.dataset.lastVerdict = job.jobId + ":" + out.state;
      const keep = state.index;
      await loadPending();
      if (state.pending.length) await select(Math.min(keep, state.pending.length - 1));
    } catch (e) { setStatus(e.message, true); }
  }

  async function approveSweep() {
    const job = state.job;
    if (!job) return;
    try {
      const out = await call("/sweeps/" + job.sweepId + "/approve", { method: "POST", body: JSON.stringify({}) });
      setStatus("sweep " + job.sweepId + ": " + out.approved.length + " jobs approved, " + out.left.length + " left for a look");
      await loadPending();
      if (state.pending.length) await select(0);
    } catch (e) { setStatus(e.message, true); }
  }

  document.addEventListener("keydown", (ev) => {
    const typing = ev.target instanceof HTMLInputElement;
    if (typing) {
      if (ev.target.id === "reason" && ev.key === "Enter") { ev.preventDefault(); verdict(ev.target.dataset.mode !== "approve" ? false : true); }
      if (ev.key === "Escape") { ev.target.blur(); }
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "a") { ev.preventDefault(); verdict(true); }
    else if (ev.key === "r") { ev.preventDefault(); $("reason").dataset.mode = "reject"; if ($("reason").value.trim()) verdict(false); else { $("reason").focus(); setStatus("reason for rejecting, then Enter"); } }
    else if (ev.key === "s") { ev.preventDefault(); approveSweep(); }
    else if (ev.key === "j" || ev.key === "ArrowDown") { ev.preventDefault(); select(state.index + 1); }
    else if (ev.key === "k" || ev.key === "ArrowUp") { ev.preventDefault(); select(state.index - 1); }
    else if (ev.key === "Escape") { selectFact(-1); }
  });
  $("approve").addEventListener("click", () => verdict(true));
  $("reject").addEventListener("click", () => verdict(false));
  $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadPending().catch((e) => setStatus(e.message, true)); });
  $("keyform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    state.key = $("key").value.trim(); $("key").value = "";
    sessionStorage.setItem("sisReviewKey", state.key);
    await start();
  });

  async function start() {
    if (!(await signIn())) return;
    try {
      await loadPending();
      if (state.pending.length) await select(0);
      document.body.dataset.ready = "1";
    } catch (e) { setStatus(e.message, true); }
  }

  // A key may arrive in the fragment (never sent to the server): #key=sisk_...
  const m = /(?:^|&)key=([^&]+)/.exec(location.hash.slice(1));
  if (m) { state.key = decodeURIComponent(m[1]); sessionStorage.setItem("sisReviewKey", state.key); history.replaceState(null, "", location.pathname); }
  start();
})();
