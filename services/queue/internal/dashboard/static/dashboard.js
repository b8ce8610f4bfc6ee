// The dashboard polls /api/members and /api/queues once a second and draws
// the members of a replicated queue, each queue's row and its depth
// sparkline (pending + delayed + leased + parked, stacked as SVG areas); the
// inspector asks /api/inspect.
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
    cell(tr, mb.leader ? "leader" : "follower", mb.leader ? "leased" : "");
    cell(tr, mb.lag_known ? String(mb.lag) : "—");
    if (mb.leader) leader = mb.name;
    rows.appendChild(tr);
  }
  document.querySelector("#members tbody").replaceChildren(rows);
  return leader;
}

let known = "";
async function refresh() {
  const status = document.getElementById("status");
  const leader = await members();
  let queues;
  try {
    const r = await fetch("api/queues", { cache: "no-store" });
    if (r.status === 503) {
      status.textContent = leader
        ? `this member follows: ${leader} leads, and its dashboard shows the queues`
        : "this member follows and knows no leader yet";
      return;
    }
    if (!r.ok) throw new Error(r.status + " " + r.statusText);
    queues = await r.json();
  } catch (e) {
    status.textContent = "cannot reach the queue: " + e.message;
    return;
  }
  status.textContent = `${queues.length} queue${queues.length === 1 ? "" : "s"} · updated ${new Date().toLocaleTimeString()}`;
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
  const when = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "—");
  const fields = [
    ["key", it.key], ["state", it.state + (it.dirty ? " (dirty)" : "")], ["attempts", it.attempts],
    ["last error", it.last_error || "—"], ["announcements", it.announcements], ["lease holder", it.worker || "—"],
    ["pending since", when(it.pending_since_ms)], ["not before", when(it.not_before_ms)], ["lease expires", when(it.lease_expires_at_ms)],
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

// A link to #queue=Q&key=K opens the inspector on that key.
async function start() {
  await refresh();
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.get("queue") && h.get("key")) {
    const sel = document.getElementById("iq");
    if (![...sel.options].some((o) => o.value === h.get("queue"))) sel.add(new Option(h.get("queue"), h.get("queue")));
    sel.value = h.get("queue");
    document.getElementById("ik").value = h.get("key");
    inspect(h.get("queue"), h.get("key"));
  }
  setInterval(refresh, 1000);
}
start();
