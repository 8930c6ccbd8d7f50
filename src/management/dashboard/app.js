// The convoke dashboard: reads the node's own management routes and redraws every few seconds.
// No framework, no build step, nothing fetched from elsewhere. The page is served at
// <base>/dashboard; every route it reads is relative to <base>.
"use strict";

const BASE = location.pathname.replace(/\/dashboard\/?$/, "");
const READ_ONLY = document.body.dataset.readOnly !== "false";
const POLL_MS = 2000;
const TOKEN_KEY = "convoke-dashboard-token";
const MAX_EVENTS = 200;

const $ = (id) => document.getElementById(id);
let stoppedSince = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const response = await fetch(BASE + path, {
    ...options,
    headers: { ...headers(), ...(options.headers || {}) },
    cache: "no-store",
  });
  if (response.status === 401) throw new Unauthorized();
  return response;
}

async function json(path) {
  const r = await api(path);
  if (!r.ok) throw new Error(path + " answered " + r.status);
  return r.json();
}

function askForToken() {
  $("main").hidden = true;
  $("login").hidden = false;
  $("token").focus();
}

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  $("login").hidden = true;
  refresh();
  startEvents();
});

function setConnection(ok) {
  const c = $("connection");
  if (ok) {
    stoppedSince = null;
    c.textContent = "live";
    c.className = "badge ok";
  } else {
    stoppedSince = stoppedSince || new Date();
    c.textContent = "node not answering since " + stoppedSince.toLocaleTimeString();
    c.className = "badge bad";
  }
}

function shortAddress(a) {
  return a.replace(/^[a-z]+:\/\//, "");
}

function renderMembers(m) {
  $("self").textContent = m.selfNode;
  $("member-count").textContent = "(" + m.members.length + ")";
  const unreachable = new Set(m.unreachable.map((u) => u.node));
  const body = $("members").tBodies[0];
  body.replaceChildren(
    ...m.members.map((member) => {
      const row = el(
        "tr",
        { "data-node": member.node, "data-status": member.status, class: unreachable.has(member.node) ? "unreachable" : "" },
        el("td", { class: "addr" }, member.node),
        el("td", { class: "status status-" + member.status }, member.status + (unreachable.has(member.node) ? " (unreachable)" : "")),
        el("td", {}, member.roles.join(", ")),
        el("td", { class: "version" }, member.appVersion ?? ""),
        el("td", {}, member.upNumber ?? ""),
        el("td", { class: "mark leader" }, member.node === m.leader ? "★" : ""),
        el("td", { class: "mark oldest" }, member.node === m.oldest ? "●" : ""),
        el("td", { class: "muted" }, member.nodeUid),
      );
      if (!READ_ONLY) row.append(el("td", { class: "write" }, actionButton("Leave", member.node, "leave"), " ", actionButton("Down", member.node, "down")));
      return row;
    }),
  );
  renderReachability(m);
}

function actionButton(label, node, operation) {
  const b = el("button", { type: "button", class: operation === "down" ? "danger" : "" }, label);
  b.dataset.operation = operation;
  b.addEventListener("click", async () => {
    if (!confirm(label + " " + node + "?")) return;
    const path = "/cluster/members/" + encodeURIComponent(shortAddress(node));
    try {
      const r = await api(path, {
        method: "PUT",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: "operation=" + operation,
      });
      const answer = await r.json().catch(() => ({ message: r.statusText }));
      $("action-result").textContent = r.status + ": " + answer.message;
    } catch (e) {
      if (e instanceof Unauthorized) return askForToken();
      $("action-result").textContent = String(e);
    }
    refresh();
  });
  return b;
}

function renderReachability(m) {
  const grid = $("reachability");
  const subjects = m.unreachable.map((u) => u.node);
  const observers = [...new Set(m.unreachable.flatMap((u) => u.observedBy))].sort();
  $("all-reachable").hidden = subjects.length > 0;
  grid.hidden = subjects.length === 0;
  grid.tHead.replaceChildren(
    el("tr", {}, el("th", {}, "unreachable ↓ / observer →"), ...observers.map((o) => el("th", { class: "addr" }, shortAddress(o)))),
  );
  grid.tBodies[0].replaceChildren(
    ...m.unreachable.map((u) =>
      el(
        "tr",
        { "data-node": u.node },
        el("td", { class: "addr" }, u.node),
        ...observers.map((o) => {
          const x = u.observedBy.includes(o);
          return el("td", { class: "cell" + (x ? " x" : ""), title: x ? o + " sees " + u.node + " unreachable" : "" }, x ? "✕" : "");
        }),
      ),
    ),
  );
}

function renderBootstrap(s) {
  const forming = s.phase === "probing" || s.phase === "joining-existing" || s.phase === "forming-new";
  $("bootstrap-panel").hidden = !forming;
  if (!forming) return;
  $("bootstrap-phase").textContent = s.phase;
  $("bootstrap-verdict").textContent = s.verdict ? s.verdict.decision + ": " + s.verdict.reason : "no verdict yet";
  $("bootstrap-stable").textContent =
    s.stableForMs == null ? "no current discovery observation" : "contact points stable for " + (s.stableForMs / 1000).toFixed(1) + " s";
  $("contact-points").tBodies[0].replaceChildren(
    ...s.contactPoints.map((c) => {
      const p = c.lastProbe;
      const probe = !p ? "not probed yet" : p.error ? "error: " + p.error : "answered by " + p.selfNode + " (" + (p.seedNodes.length ? "seeds: " + p.seedNodes.join(", ") : "no cluster") + ")";
      return el("tr", {}, el("td", { class: "addr" }, c.host + (c.port ? ":" + c.port : "")), el("td", {}, probe), el("td", {}, c.failures));
    }),
  );
  $("dropped-targets").replaceChildren(...(s.droppedTargets || []).map((d) => el("li", {}, "not probed: " + d.target + ": " + d.reason)));
}

async function renderHealth() {
  const parts = [];
  for (const probe of ["ready", "alive"]) {
    let ok = false;
    try {
      ok = (await api("/" + probe)).ok;
    } catch (e) {
      ok = false;
    }
    parts.push(el("span", { class: "badge " + (ok ? "ok" : "bad"), "data-probe": probe }, "/" + probe + (ok ? " ✓" : " ✕")));
  }
  $("health").replaceChildren(...parts.flatMap((p) => [p, " "]));
}

async function renderShards() {
  try {
    const r = await api("/cluster/shards");
    if (!r.ok) throw new Error("no shards");
    const body = await r.json();
    $("shards").replaceChildren(...(body.entityTypeKeys || []).map((k) => el("li", {}, k)));
    $("shards-panel").hidden = false;
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    $("shards-panel").hidden = true;
  }
}

function bytes(n) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

// The store's figures, when it runs on this node (/data/stats answers 503 otherwise).
async function renderData() {
  try {
    const r = await api("/data/stats");
    if (!r.ok) throw new Error("no store");
    const s = await r.json();
    $("data-figures").replaceChildren(
      el("span", { "data-figure": "keys" }, s.keys + " keys"), " · ",
      el("span", { "data-figure": "bytes" }, bytes(s.bytesOnDisk) + " on disk"), " · ",
      el("span", { "data-figure": "ring" }, s.ringMembers + " members on the ring"), " · ",
      el("span", { "data-figure": "hints" }, s.hintedHandoffsPending + " writes held for unreachable replicas"), " · ",
      el("span", { "data-figure": "in-flight" }, s.requestsInFlight + " requests in flight"),
    );
    const peers = Object.entries(s.lastAntiEntropy || {}).sort();
    $("anti-entropy").tBodies[0].replaceChildren(...peers.map(([peer, ago]) =>
      el("tr", { "data-peer": peer }, el("td", {}, shortAddress(peer)), el("td", {}, ago.toFixed(1) + " s ago"))));
    $("data-panel").hidden = false;
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    $("data-panel").hidden = true;
  }
}

let refreshing = false;
async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    renderMembers(await json("/cluster/members"));
    $("main").hidden = false;
    setConnection(true);
    renderBootstrap(await json("/bootstrap/status"));
    await renderShards();
    await renderData();
    await renderHealth();
  } catch (e) {
    if (e instanceof Unauthorized) askForToken();
    else setConnection(false);
  } finally {
    refreshing = false;
  }
}

// The event stream is read with fetch, not EventSource, so that the token goes in a header.
let streaming = false;
async function startEvents() {
  if (streaming) return;
  streaming = true;
  let delay = 1000;
  for (;;) {
    try {
      const r = await api("/cluster/domain-events");
      if (!r.ok || !r.body) throw new Error("events answered " + r.status);
      delay = 1000;
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          addEvent(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
      addNote("event stream ended; reconnecting");
    } catch (e) {
      if (e instanceof Unauthorized) {
        streaming = false;
        return askForToken();
      }
      addNote("event stream lost (" + e.message + "); reconnecting in " + delay / 1000 + " s");
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 15000);
  }
}

function addEvent(block) {
  let type = "";
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) type = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!type) return; // keep-alive comment
  let subject = "";
  try {
    const e = JSON.parse(data);
    subject = e.member ? e.member.uniqueAddress.address + " (" + e.member.status + ")" : e.address || e.role || "";
  } catch (err) {
    subject = data;
  }
  prepend(el("li", { "data-type": type }, new Date().toLocaleTimeString() + " ", el("span", { class: "type" }, type), " " + subject));
  refresh();
}

function addNote(text) {
  prepend(el("li", { class: "muted" }, new Date().toLocaleTimeString() + " " + text));
}

function prepend(item) {
  const list = $("events");
  list.prepend(item);
  while (list.children.length > MAX_EVENTS) list.lastChild.remove();
}

$("metrics-link").href = BASE + "/metrics";
$("openapi-link").href = BASE + "/openapi.yaml";
refresh();
startEvents();
setInterval(refresh, POLL_MS);
