// raftlock's console: polls this member's /console/api/ once a second and
// draws what it answers. Everything a key, an owner or an event says is
// set as text, never as markup.
"use strict";

const POLL_MS = 1000;
const PAGE = 50;
const state = {
  prefix: "", after: "", stack: [], // stack: the "after" of each earlier page
  locks: null, locksAt: 0, cluster: null, clusterOK: false, locksOK: false,
};

function $(id) { return document.getElementById(id); }

// h makes an element with attributes and children (strings become text).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v; else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) {
    const err = new Error((body && body.error) || `${r.status} ${r.statusText}`);
    err.body = body;
    throw err;
  }
  return body;
}

function fmtNum(n) { return Number(n).toLocaleString("en-US"); }
function shortDigest(d) { return d ? d.slice(0, 12) : "–"; }
function hms(t) { return new Date(t).toLocaleTimeString("en-GB", { hour12: false }); }

function healthClass(h) {
  if (h === "healthy") return "ok";
  if (h && h.startsWith("catching up")) return "warn";
  return "bad";
}

function renderCluster(c) {
  $("cluster").textContent = c.cluster ? `cluster ${c.cluster}` : "cluster";
  document.title = `raftlock · ${c.leader ? "leader " + c.leader : "no leader"} · cluster ${c.cluster || ""}`;
  const badge = $("leader-badge");
  badge.textContent = c.leader ? `★ Leader: member ${c.leader}` : "No leader";
  badge.classList.toggle("none", !c.leader);
  badge.dataset.leader = c.leader || 0;
  const self = c.members.find((m) => m.self);
  $("viewing").textContent = `this console: member ${c.self}${self && self.role ? " (" + self.role + ")" : ""}` +
    (c.identity ? ` · you are ${c.identity}` : "");
  $("term").textContent = fmtNum(c.term);
  $("locks-total").textContent = fmtNum(c.locks);
  $("waiters-total").textContent = c.leader === c.self ? fmtNum(c.waiters) : "at leader";

  $("members").replaceChildren(...c.members.map((m) => h("tr",
    { "data-member": m.id, "data-role": m.role || "", class: [m.role === "leader" ? "leader" : "", m.self ? "self" : ""].join(" ").trim() },
    h("td", { class: "mono" }, `${m.id}`),
    h("td", {}, h("span", { class: `role ${m.role || ""}` }, m.role || "—")),
    h("td", { class: "mono" }, m.role ? fmtNum(m.term) : "—"),
    h("td", { class: "mono" }, m.role ? fmtNum(m.applied) : "—"),
    h("td", { class: "mono" }, m.role ? fmtNum(m.commit) : "—"),
    h("td", { class: "mono" }, m.role ? fmtNum(m.locks) : "—"),
    h("td", { class: "mono", title: m.digest || "" }, shortDigest(m.digest)),
    h("td", {}, h("span", { class: `health ${healthClass(m.health)}` }, m.health),
      m.error ? h("div", { class: "err" }, m.error) : null),
    h("td", { class: "mono" }, m.addr || "—"),
  )));

  const chips = (ids) => ids.length ? ids.map((id) => h("span", { class: id === c.leader ? "chip lead" : "chip" }, `${id}`)) : [h("span", { class: "err" }, "none")];
  $("voters").replaceChildren(...chips(c.voters));
  $("learners").replaceChildren(...chips(c.learners));

  const prefixes = c.read_prefixes;
  if (prefixes && prefixes.length && !prefixes.includes("") && !state.prefixChosen) {
    state.prefixChosen = true; // this identity may not list every key: start where it may
    setPrefix(prefixes[0]);
  }
  if (prefixes && !prefixes.includes("")) {
    $("prefixes").replaceChildren(h("span", { class: "label" }, "you may read"),
      ...prefixes.map((p) => { const b = h("button", { class: "chip", type: "button" }, p || "(all)"); b.onclick = () => setPrefix(p); return b; }));
  } else {
    $("prefixes").replaceChildren();
  }

  $("events").replaceChildren(...(c.events.length ? c.events.map((e) => h("li", {},
    h("time", {}, hms(e.time)), h("span", { class: `kind ${e.kind}` }, e.kind), h("span", {}, e.text))) :
    [h("li", { class: "empty" }, "no events yet")]));
  $("expiries").replaceChildren(...(c.expiries.length ? c.expiries.slice(0, 8).map((e) => h("tr", {},
    h("td", { class: "mono" }, hms(e.time)), h("td", { class: "key", title: e.key }, e.key),
    h("td", { class: "mono" }, fmtNum(e.token)), h("td", { class: "owner", title: e.owner }, e.owner || "—"))) :
    [h("tr", {}, h("td", { class: "empty", colspan: 4 }, "none while this page was open"))]));

  drawChart($("chart-rate"), c.series, [
    { key: "requests", name: "client requests / s", color: "#2f6fde" },
    { key: "commits", name: "lock commands applied / s", color: "#1f9d55" },
  ]);
  drawChart($("chart-latency"), c.series, [
    { key: "p50_ms", name: "request p50", color: "#2f6fde" },
    { key: "p99_ms", name: "request p99", color: "#d2373c" },
    { key: "fsync_p99_ms", name: "fsync p99", color: "#8a5cd6" },
  ]);
}

// drawChart draws series as lines over the last two minutes, in SVG.
function drawChart(el, points, lines) {
  const W = Math.max(300, Math.round(el.clientWidth || 600)), H = 130, L = 50, R = 6, T = 8, B = 18;
  const now = points.length ? points[points.length - 1].t : Date.now();
  const from = now - 120000;
  // The scale fits the 95th percentile, so one burst (a restarted member
  // replaying its log) does not flatten the rest; lines above it are cut.
  const vals = [];
  for (const p of points) for (const l of lines) if (p[l.key] != null && p.t >= from) vals.push(p[l.key]);
  vals.sort((a, b) => a - b);
  const top = niceTop(vals.length ? vals[Math.floor(0.95 * (vals.length - 1))] * 1.2 : 0);
  const x = (t) => L + (W - L - R) * (t - from) / 120000;
  const y = (v) => T + (H - T - B) * (1 - Math.min(v, top) / top);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img" });
  for (const f of [0, 0.5, 1]) {
    s.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: y(top * f), y2: y(top * f) }));
    const t = svg("text", { x: L - 6, y: y(top * f) + 4, "text-anchor": "end" });
    t.textContent = fmtAxis(top * f);
    s.append(t);
  }
  for (const [label, at] of [["−2 min", from], ["−1 min", from + 60000], ["now", now]]) {
    const t = svg("text", { x: x(at), y: H - 3, "text-anchor": at === from ? "start" : at === now ? "end" : "middle" });
    t.textContent = label;
    s.append(t);
  }
  for (const l of lines) {
    let d = "", pen = false;
    for (const p of points) {
      if (p.t < from) continue;
      const v = p[l.key];
      if (v == null) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${x(p.t).toFixed(1)},${y(v).toFixed(1)} `;
      pen = true;
    }
    if (d) s.append(svg("path", { d, fill: "none", stroke: l.color, "stroke-width": 2, "vector-effect": "non-scaling-stroke", "stroke-linejoin": "round" }));
  }
  if (!vals.length) {
    const t = svg("text", { x: (L + W - R) / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = "nothing measured yet";
    s.append(t);
  }
  const legend = h("div", { class: "legend" }, ...lines.map((l) => {
    const i = h("i"); i.style.background = l.color;
    const seen = points.filter((p) => p[l.key] != null);
    const last = seen.length ? seen[seen.length - 1][l.key] : null;
    return h("span", {}, i, `${l.name}: `, h("b", {}, last == null ? "–" : fmtAxis(last)));
  }));
  el.replaceChildren(s, legend);
}

function niceTop(v) {
  if (!(v > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * e >= v) return m * e;
  return 10 * e;
}

function fmtAxis(v) {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e4) return `${+(v / 1e3).toFixed(0)}k`;
  if (v >= 1000) return fmtNum(Math.round(v));
  if (v >= 10) return String(Math.round(v));
  if (v >= 1) return v.toFixed(1);
  return v === 0 ? "0" : v.toFixed(2);
}

function renderLocks(page) {
  const rows = page.locks.map((l) => h("tr", { "data-key": l.key },
    h("td", { class: "key", title: l.key }, l.key),
    h("td", { class: "owner", title: l.owner }, l.owner || "—"),
    h("td", { class: "mono" }, fmtNum(l.token)),
    h("td", {}, h("span", { class: "bar" }, h("span")), h("span", { class: "secs" })),
    h("td", { class: page.waiters_known && l.waiters > 0 ? "waiters some" : "waiters" },
      page.waiters_known ? fmtNum(l.waiters) : "—"),
  ));
  $("locks").replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { class: "empty", colspan: 5 },
    state.prefix ? `no lock held under "${state.prefix}"` : "no lock held"))]));
  $("page").textContent = `page ${state.stack.length + 1}`;
  $("prev").disabled = state.stack.length === 0;
  $("next").disabled = !page.more;
  const first = page.locks.length ? state.stack.length * PAGE + 1 : 0;
  $("locks-sub").textContent = page.locks.length ?
    `${fmtNum(first)}–${fmtNum(first + page.locks.length - 1)}${page.more ? "" : " of " + fmtNum(first + page.locks.length - 1)}${state.prefix ? ` under "${state.prefix}"` : ""}` : "";
  const note = $("locks-note");
  note.className = "note";
  note.textContent = page.waiters_known ? "Lease bars count down on this member's clock." :
    "Waiting acquires queue at the leader: its console shows them per key.";
  tickBars();
}

// tickBars moves the lease bars on between polls.
function tickBars() {
  const page = state.locks;
  if (!page) return;
  const gone = Date.now() - state.locksAt;
  const rows = $("locks").children;
  page.locks.forEach((l, i) => {
    const row = rows[i];
    if (!row) return;
    const left = Math.max(0, l.remaining_ms - gone);
    const frac = l.lease_ms > 0 ? Math.min(1, left / l.lease_ms) : 0;
    const bar = row.querySelector(".bar");
    bar.firstChild.style.width = `${(frac * 100).toFixed(1)}%`;
    bar.classList.toggle("low", frac < 0.25 && left > 0);
    bar.classList.toggle("out", left === 0);
    row.querySelector(".secs").textContent = left > 0 ? `${(left / 1000).toFixed(1)} s of ${(l.lease_ms / 1000).toFixed(0)} s` : "expiring";
  });
}

function locksURL() {
  const q = new URLSearchParams({ prefix: state.prefix, after: state.after, limit: PAGE });
  return `/console/api/locks?${q}`;
}

async function pollCluster() {
  try {
    state.cluster = await getJSON("/console/api/cluster");
    renderCluster(state.cluster);
    state.clusterOK = true;
    live(true);
  } catch (e) {
    live(false, e.message);
  }
  ready();
  setTimeout(pollCluster, POLL_MS);
}

async function pollLocks() {
  const url = locksURL();
  try {
    const page = await getJSON(url);
    if (url === locksURL()) { // the search or page did not change meanwhile
      state.locks = page; state.locksAt = Date.now();
      renderLocks(page);
      state.locksOK = true;
    }
  } catch (e) {
    state.locks = null;
    $("locks").replaceChildren();
    const note = $("locks-note");
    note.className = "note error";
    const p = e.body && e.body.read_prefixes;
    note.textContent = e.message + (p && p.length ? ` — you may read: ${p.map((x) => x || "(all)").join(", ")}` : "");
  }
  ready();
  clearTimeout(state.locksTimer);
  state.locksTimer = setTimeout(pollLocks, POLL_MS);
}

function live(ok, why) {
  const el = $("live");
  el.classList.toggle("ok", ok);
  el.classList.toggle("stale", !ok);
  $("live-text").textContent = ok ? `live · ${hms(Date.now())}` : `not answering: ${why}`;
}

// ready marks the page for tests and scripts once both parts have shown data.
function ready() {
  if (state.clusterOK && state.locksOK) document.body.dataset.ready = "true";
}

function setPrefix(p) {
  $("prefix").value = p;
  state.prefix = p; state.after = ""; state.stack = [];
  pollLocks();
}

function init() {
  let debounce;
  $("prefix").addEventListener("input", (e) => {
    clearTimeout(debounce);
    state.prefixChosen = true;
    debounce = setTimeout(() => setPrefix(e.target.value), 250);
  });
  $("next").onclick = () => {
    const page = state.locks;
    if (!page || !page.more || !page.locks.length) return;
    state.stack.push(state.after);
    state.after = page.locks[page.locks.length - 1].key;
    pollLocks();
  };
  $("prev").onclick = () => {
    if (!state.stack.length) return;
    state.after = state.stack.pop();
    pollLocks();
  };
  const fromURL = new URLSearchParams(location.search).get("prefix");
  if (fromURL) { $("prefix").value = fromURL; state.prefix = fromURL; state.prefixChosen = true; }
  setInterval(tickBars, 250);
  pollCluster();
  pollLocks();
}

init();
