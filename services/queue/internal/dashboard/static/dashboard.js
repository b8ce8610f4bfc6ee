// The dashboard polls /api/members, /api/queues, /api/workers and
// /api/observer once a second, /api/parked every fifth, and draws the
// health of the parts, the members of a replicated queue, each queue's row
// and its depth sparkline (pending + delayed + leased + parked, stacked as
// SVG areas), the workers and the keys they hold, the parked keys, and the
// controllers the observer reads; the inspector asks /api/inspect.
//
// Keys, errors, worker and queue names are user data: they reach the page
// as textContent (or a URL's fragment, built by URLSearchParams), never as
// markup.
"use strict";

const fmtRate = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
function fmtAge(s) {
  if (!s) return "—";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

const STATES = ["pending", "delayed", "leased", "parked"];
const COLORS = { pending: "#2f7de1", delayed: "#e0a21b", leased: "#2bb673", parked: "#d64545" };

function sparkline(history) {
  const w = 180, h = 28, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  if (!history || history.length < 2) return svg;
  const max = Math.max(1, ...history.map((s) => STATES.reduce((a, k) => a + s[k], 0)));
  const x = (i) => (i / (history.length - 1)) * w;
  const y = (v) => h - (v / max) * (h - 2) - 1;
  // Stacked areas, bottom state first.
  let base = history.map(() => 0);
  for (const st of STATES) {
    const top = history.map((s, i) => base[i] + s[st]);
    if (top.some((v, i) => v !== base[i])) {
      let d = "M" + top.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join("L");
      for (let i = history.length - 1; i >= 0; i--) d += `L${x(i).toFixed(1)},${y(base[i]).toFixed(1)}`;
      const p = document.createElementNS(ns, "path");
      p.setAttribute("d", d + "Z");
      p.setAttribute("fill", COLORS[st]);
      p.setAttribute("fill-opacity", "0.75");
      svg.appendChild(p);
    }
    base = top;
  }
  const t = document.createElementNS(ns, "title");
  t.textContent = `max depth ${max} over the last ${history.length} s`;
  svg.appendChild(t);
  return svg;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  td.className = "n " + (cls || "");
  tr.appendChild(td);
  return td;
}

// members draws the members of a replicated queue (null for a single
// member: the section stays hidden) and returns the leader's name.
async function members() {
  let m = null;
  try {
    const r = await fetch("api/members", { cache: "no-store" });
    if (r.ok) m = await r.json();
  } catch (e) {
    return "";
  }
  const section = document.getElementById("members-section");
  if (!m) {
    section.hidden = true;
    return "";
  }
  section.hidden = false;
  let leader = "";
  const rows = document.createDocumentFragment();
  for (const mb of m.members) {
    const tr = document.createElement("tr");
    tr.dataset.member = mb.name;
    cell(tr, mb.name + (mb.name === m.self ? " (this one)" : "")).className = "";
    cell(tr, mb.peer_addr).className = "";
    cell(tr, mb.client_addr || "—").className = "";
    cell(tr, mb.leader ? "leader" : mb.unreachable ? "unreachable" : "follower", mb.leader ? "leased" : mb.unreachable ? "parked" : "");
    cell(tr, mb.lag_known && !mb.unreachable ? String(mb.lag) : "—");
    if (mb.leader) leader = mb.name;
    rows.appendChild(tr);
  }
  document.querySelector("#members tbody").replaceChildren(rows);
  return leader;
}

// td is a cell holding text (or a node).
function td(content, cls) {
  const c = document.createElement("td");
  if (content instanceof Node) c.appendChild(content);
  else c.textContent = content === undefined || content === null ? "" : String(content);
  if (cls) c.className = cls;
  return c;
}

// fill replaces a table's rows, or shows empty (a muted row) when there
// are none.
function fill(id, rows, empty) {
  const tbody = document.querySelector(`#${id} tbody`);
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const c = td(empty, "muted");
    c.colSpan = document.querySelectorAll(`#${id} thead th`).length;
    tr.appendChild(c);
    tbody.replaceChildren(tr);
    return;
  }
  tbody.replaceChildren(...rows);
}

function tr(cells, data) {
  const r = document.createElement("tr");
  for (const c of cells) r.appendChild(c);
  for (const [k, v] of Object.entries(data || {})) r.dataset[k] = v;
  return r;
}

const when = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "—");
function ago(ms) {
  if (!ms) return "—";
  return fmtAge(Math.max(0, (Date.now() - ms) / 1000)) + " ago";
}
function until(ms) {
  if (!ms) return "—";
  const s = (ms - Date.now()) / 1000;
  return s <= 0 ? "now" : "in " + fmtAge(s);
}

// keyLink links a key to the inspector.
function keyLink(queue, key) {
  const a = document.createElement("a");
  a.href = "#" + new URLSearchParams({ queue, key }).toString();
  a.textContent = key;
  return a;
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(r.status === 503 ? await r.text() : r.status + " " + r.statusText);
  return r.json();
}

// The health table: one row per part, each drawn by its own poll.
const health = {};
function setHealth(part, state, cls, detail) {
  health[part] = { state, cls, detail };
  const rows = ["queue", "observer", "workers"].filter((p) => health[p]).map((p) =>
    tr([td(p, ""), td(health[p].state, "state " + (health[p].cls || "")), td(health[p].detail, "detail")], { part: p }));
  fill("health", rows, "checking…");
}

async function workers() {
  let w;
  try {
    w = await getJSON("api/workers");
  } catch (e) {
    setHealth("workers", "unknown", "parked", "the queue does not answer: " + e.message);
    return;
  }
  const streams = w.workers.reduce((a, x) => a + x.streams, 0);
  const names = new Set(w.workers.map((x) => x.worker)).size;
  const note = document.getElementById("streams-note");
  if (w.streams_known) {
    note.hidden = true;
    setHealth("workers", `${streams} work stream${streams === 1 ? "" : "s"} open`, streams > 0 ? "leased" : "",
      `${names} worker${names === 1 ? "" : "s"} asked for keys in the last two minutes, hold a lease or have a stream open; ${w.leases_total} key${w.leases_total === 1 ? "" : "s"} leased`);
  } else {
    note.hidden = false;
    note.textContent = "The work streams end on the leader: its page lists them; here, the workers the queue's Stats names.";
    setHealth("workers", `${names} seen`, "", "the work streams are listed on the leader's page");
  }
  fill("workers", w.workers.map((x) => tr([
    td(x.worker), td(x.queue), td(x.leased, "n leased"),
    td(x.streams ? `${x.streams}${x.draining ? ` (${x.draining} draining)` : ""}${x.identities.length ? " as " + x.identities.join(", ") : ""}` : (w.streams_known ? "none" : "—")),
    td(x.streams ? `${x.in_flight} / ${x.max_in_flight}` : "—", "n"),
    td(x.streams ? when(x.connected_since_ms) : "—"), td(ago(x.last_lease_ms)),
  ], { worker: x.worker, queue: x.queue })), "no worker: none has asked for keys in the last two minutes, holds a lease or has a work stream open");
  fill("leases", w.leases.map((l) => tr([
    td(keyLink(l.queue, l.key), "key"), td(l.queue), td(l.worker), td(when(l.leased_since_ms)), td(until(l.expires_ms)),
    td(l.attempts + (l.dirty ? " (dirty)" : ""), "n"), td(l.last_error || "—", "err"),
  ], { key: l.key, queue: l.queue })), "no key is leased");
  more("leases-more", w.leases_more, w.limit);
}

function more(id, n, limit) {
  const p = document.getElementById(id);
  p.hidden = n <= 0;
  p.textContent = `and ${n} more (the page lists ${limit} keys over every queue, in queue and key order; batonctl queue list lists them all)`;
}

async function parked() {
  let p;
  try {
    p = await getJSON("api/parked");
  } catch (e) {
    return;
  }
  fill("parked", p.parked.map((k) => tr([
    td(keyLink(k.queue, k.key), "key"), td(k.queue), td(k.attempts, "n"), td(k.last_error || "—", "err"),
  ], { key: k.key, queue: k.queue })), "no key is parked");
  more("parked-more", p.more, p.limit);
}

async function observer() {
  let o;
  try {
    o = await getJSON("api/observer");
  } catch (e) {
    return;
  }
  const note = document.getElementById("controllers-note");
  if (!o.configured) {
    setHealth("observer", "not configured", "", "start the queue with --observer-addr to see the observer's health, its lag and the controllers here");
    note.textContent = "the observer is not configured (--observer-addr): the queue does not know the controllers";
    for (const id of ["declarations", "rules", "prefixes"]) fill(id, [], "not known: no observer is configured");
    return;
  }
  if (!o.checked_ms) {
    setHealth("observer", "not checked yet", "", o.address || "");
    return;
  }
  const parts = [o.address];
  if (o.answered_ms) {
    parts.push(`${o.lag_revisions} revision${o.lag_revisions === 1 ? "" : "s"} behind etcd`, `outbox ${o.outbox_size} key${o.outbox_size === 1 ? "" : "s"}`);
    const unlisted = o.prefixes.filter((p) => !p.listed).map((p) => p.prefix);
    if (unlisted.length) parts.push("first list not done for " + unlisted.join(", "));
    for (const b of o.outboxes) if (b.last_error) parts.push(`adding to ${b.queue} failed: ${b.last_error}`);
  }
  if (o.status_error) parts.push("its Status: " + o.status_error);
  parts.push("checked " + when(o.checked_ms));
  if (!o.reachable) {
    parts.unshift(o.error);
    if (o.answered_ms) parts.push("last answer " + when(o.answered_ms));
    setHealth("observer", "unreachable", "parked", parts.join(" · "));
  } else if (!o.ready) {
    parts.unshift(o.not_ready);
    setHealth("observer", "not ready", "delayed", parts.join(" · "));
  } else {
    setHealth("observer", "ready", "leased", parts.join(" · "));
  }
  note.textContent = o.answered_ms
    ? `as the observer at ${o.address} read them, ${when(o.answered_ms)}${o.reachable ? "" : " (its last answer)"}`
    : "the observer has not answered yet";
  if (!o.answered_ms) return;
  fill("declarations", o.declarations.map((d) => {
    const watches = document.createElement("div");
    for (const w of d.watches) watches.appendChild(Object.assign(document.createElement("div"), { textContent: watchText(w) }));
    let state = "in force", cls = "leased";
    if (d.refused) {
      state = "refused: " + d.refused + (d.in_force_revision ? ` (revision ${d.in_force_revision} stays in force)` : "");
      cls = "parked";
    }
    return tr([td(d.key), td(d.queue || "—"), td(watches), td(state, "state " + cls)], { declaration: d.key });
  }), "no controller has declared itself");
  fill("rules", o.rules.map((r) => tr([td(r.queue), td(r.prefix), td(r.owner_kind ? `its ${r.owner_kind} owner's key` : "its own key"), td(r.source)])), "none");
  fill("prefixes", o.prefixes.map((p) => tr([
    td(p.prefix), td(p.observed_revision, "n"), td(p.head_revision, "n"), td(p.lag_revisions, "n" + (p.lag_revisions > 0 ? " delayed" : "")),
    td(p.listed ? "done" : "not yet", p.listed ? "" : "delayed"),
  ], { prefix: p.prefix })), "no watch");
}

function watchText(w) {
  return w.owner_kind ? `${w.prefix} → the owning ${w.owner_kind}` : w.prefix + (w.ignore_own_status ? " (not its own status writes)" : "");
}

let known = "";
let ticks = 0;
async function refresh() {
  const slow = ticks++ % 5 === 0;
  await Promise.all([queuesAndMembers(), workers(), observer(), slow ? parked() : null]);
}

async function queuesAndMembers() {
  const status = document.getElementById("status");
  const leader = await members();
  let queues;
  try {
    const r = await fetch("api/queues", { cache: "no-store" });
    if (r.status === 503) {
      status.textContent = "this member knows no leader yet: the queues show once one leads";
      setHealth("queue", "no leader", "delayed", "this member knows no leader of the queue yet");
      return;
    }
    if (!r.ok) throw new Error(r.status + " " + r.statusText);
    queues = await r.json();
  } catch (e) {
    status.textContent = "cannot reach the queue: " + e.message;
    setHealth("queue", "unreachable", "parked", e.message);
    return;
  }
  setHealth("queue", "serving", "leased", `${queues.length} queue${queues.length === 1 ? "" : "s"}${leader ? `; ${leader} leads` : ""}`);
  const since = queues.length > 0 && queues[0].counting_since_ms
    ? ` · totals since ${new Date(queues[0].counting_since_ms).toLocaleTimeString()}${leader ? ` (${leader} leads)` : ""}`
    : "";
  status.textContent = `${queues.length} queue${queues.length === 1 ? "" : "s"} · updated ${new Date().toLocaleTimeString()}${since}`;
  if (queues.length === 0) return;
  const tbody = document.querySelector("#queues tbody");
  const rows = document.createDocumentFragment();
  for (const q of queues) {
    const tr = document.createElement("tr");
    tr.dataset.queue = q.name;
    cell(tr, q.name).className = "";
    for (const st of STATES) cell(tr, q[st], st);
    cell(tr, fmtRate(q.add_rate));
    cell(tr, fmtRate(q.collapse_rate));
    cell(tr, fmtRate(q.ack_rate));
    cell(tr, fmtAge(q.oldest_pending_seconds));
    cell(tr, fmtAge(q.longest_lease_seconds));
    cell(tr, "").appendChild(sparkline(q.history));
    rows.appendChild(tr);
  }
  tbody.replaceChildren(rows);
  const names = queues.map((q) => q.name).join(",");
  if (names !== known) {
    known = names;
    const sel = document.getElementById("iq");
    const cur = sel.value;
    sel.replaceChildren(...queues.map((q) => new Option(q.name, q.name)));
    if (cur) sel.value = cur;
  }
}

async function inspect(q, k) {
  const dl = document.getElementById("item");
  const r = await fetch(`api/inspect?queue=${encodeURIComponent(q)}&key=${encodeURIComponent(k)}`, { cache: "no-store" });
  if (!r.ok) {
    dl.replaceChildren(Object.assign(document.createElement("dt"), { textContent: "error" }),
      Object.assign(document.createElement("dd"), { textContent: await r.text() }));
    return;
  }
  const it = await r.json();
  const fields = [
    ["key", it.key], ["state", it.state + (it.dirty ? " (dirty)" : "")], ["attempts", it.attempts],
    ["last error", it.last_error || "—"], ["announcements", it.announcements], ["lease holder", it.worker || "—"],
    ["pending since", when(it.pending_since_ms)], ["not before", when(it.not_before_ms)], ["leased since", when(it.leased_since_ms)],
    ["lease expires", when(it.lease_expires_at_ms)],
  ];
  dl.className = "";
  dl.id = "item";
  dl.replaceChildren(...fields.flatMap(([k, v]) => [
    Object.assign(document.createElement("dt"), { textContent: k }),
    Object.assign(document.createElement("dd"), { textContent: String(v), className: k === "state" ? it.state : "" }),
  ]));
  history.replaceState(null, "", `#queue=${encodeURIComponent(q)}&key=${encodeURIComponent(k)}`);
}

document.getElementById("inspect").addEventListener("submit", (ev) => {
  ev.preventDefault();
  inspect(document.getElementById("iq").value, document.getElementById("ik").value);
});

// A link to #queue=Q&key=K opens the inspector on that key, as the keys
// of the workers' and parked tables do.
function openFromHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.get("queue") && h.get("key")) {
    const sel = document.getElementById("iq");
    if (![...sel.options].some((o) => o.value === h.get("queue"))) sel.add(new Option(h.get("queue"), h.get("queue")));
    sel.value = h.get("queue");
    document.getElementById("ik").value = h.get("key");
    inspect(h.get("queue"), h.get("key"));
  }
}

async function start() {
  await refresh();
  openFromHash();
  window.addEventListener("hashchange", openFromHash);
  setInterval(refresh, 1000);
}
start();
