// The review page: the pending list, one job at a time on a map, verdicts by keyboard.
// It holds no data of its own: every figure comes from /review/v1 with the reviewer's key.
// Photos are <img> elements pointing at the provider: the browser loads them from there.
(function () {
  "use strict";
  const API = "/review/v1";
  const KINDS = { roadway: "#555", kerbs: "#999", gates: "#a60", entrances: "#c80", fences: "#684",
                  poles: "#06c", wires: "#60c", signage: "#c06", drainage: "#0aa", vegetation: "#2a2" };
  const $ = (id) => document.getElementById(id);
  const state = { key: sessionStorage.getItem("sisReviewKey") || "", pending: [], index: -1, job: null };

  // No base tiles: the page must work offline and never call a tile server. Areas, facts and
  // photos are drawn on a blank map, which is all a verdict needs.
  const map = L.map("map", { zoomControl: true, attributionControl: true }).setView([0, 0], 2);
  map.attributionControl.addAttribution("Leaflet (BSD-2); no base map");
  const areas = L.layerGroup().addTo(map);
  const detail = L.layerGroup().addTo(map);

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
    table($("measurements"), ["photo", "road width", "scaleTrust", "objects"], job.measurements.map((m) => [
      m.photoId, m.roadWidth ? m.roadWidth.widthM + " m ± " + m.roadWidth.spreadM + " (" + m.roadWidth.method + ")" : "—",
      m.calibration.scaleTrust, m.objects.map((o) => o.label + " " + o.distanceM + " m, h " + o.size.heightM + (o.heightIsLowerBound ? "+" : "")).join("; ")]));
    const photos = $("photos");
    photos.replaceChildren();
    job.photos.forEach((p) => {
      const fig = document.createElement("figure");
      const a = document.createElement("a"); a.href = p.url; a.target = "_blank"; a.rel = "noopener noreferrer";
      const img = document.createElement("img"); img.src = p.url; img.alt = p.id; img.loading = "lazy"; img.referrerPolicy = "no-referrer";
      a.appendChild(img); fig.appendChild(a);
      const cap = document.createElement("figcaption"); cap.textContent = p.id + " · " + p.license; fig.appendChild(cap);
      photos.appendChild(fig);
    });
    const notes = $("notes"); notes.replaceChildren();
    job.validationNotes.forEach((n) => { const li = document.createElement("li"); li.textContent = n; notes.appendChild(li); });

    detail.clearLayers();
    L.geoJSON(job.area, { style: { color: "#36c", weight: 2, fillOpacity: 0.05 } }).addTo(detail);
    job.photos.forEach((p) => L.circleMarker([p.lat, p.lon], { radius: 3, color: "#333", weight: 1, fillOpacity: 0.6 })
      .bindTooltip("photo " + p.id).addTo(detail));
    job.facts.forEach((f) => L.circleMarker([f.lat, f.lon], { radius: 6, color: KINDS[f.kind] || "#000", weight: 2, fillOpacity: 0.5, className: "fact fact-" + f.kind })
      .bindTooltip(f.kind + ": " + fmt(f.value) + " " + f.unit + " (" + f.confidence + ", " + f.basis + ")").addTo(detail));
    map.fitBounds(L.geoJSON(job.area).getBounds(), { padding: [30, 30], animate: false });
    document.body.dataset.selected = String(job.jobId);
    document.body.dataset.facts = String(job.facts.length);
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

  // A key may arrive in the fragment (never sent to the server): #key=sisr_...
  const m = /(?:^|&)key=([^&]+)/.exec(location.hash.slice(1));
  if (m) { state.key = decodeURIComponent(m[1]); sessionStorage.setItem("sisReviewKey", state.key); history.replaceState(null, "", location.pathname); }
  start();
})();
