// Strata's web view. No framework and no build step: the root embeds this file as
// it is. Everything the page shows comes from the root's API with the session cookie;
// every action goes through the Kubernetes API, so the root's roles decide.
"use strict";

const CORDONED = "strata.dev/cordoned";
const DRAINED = "strata.dev/drained";
const ROLLOUT_ANNOTATION = "strata.dev/rollout";
// Below this many clusters every relay starts open; above, the page shows the
// tiers' counts and fetches a relay's clusters when it is opened.
const OPEN_ALL_BELOW = 200;

const state = {
  who: null,
  space: "default",
  tiers: null,
  open: new Set(),
  clusters: new Map(), // relay -> { digest, items }
  tab: "fleet",
  placementsDirty: true,
  lastEvent: 0,
  firstRender: true,
};

// ---- small helpers -------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "onclick") el.addEventListener("click", v);
    else if (k.startsWith("data-")) el.setAttribute(k, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function ago(ms, now) {
  if (ms === null || ms === undefined) return "never";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

function until(ms, now) {
  if (!ms) return null;
  const d = Math.round((ms - now) / 86400000);
  return d < 0 ? "expired" : d + "d";
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path, body, contentType) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-Strata-Csrf"] = "1";
  if (body !== undefined) headers["Content-Type"] = contentType || "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await resp.text();
  let value = null;
  try {
    value = text ? JSON.parse(text) : null;
  } catch (_) {
    value = text;
  }
  if (!resp.ok) {
    const message = (value && (value.message || value.error)) || resp.statusText;
    if (resp.status === 401) showNotice(message + " (run `relay ui` for a new login link)");
    throw new ApiError(resp.status, message);
  }
  return value;
}

function showNotice(text, kind) {
  const n = document.getElementById("notice");
  n.hidden = !text;
  n.className = "notice " + (kind || "error");
  n.textContent = text || "";
}

function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
    dialog.showModal();
  });
}

function canWrite(space) {
  const w = state.who;
  if (!w || w.role === "view") return false;
  return w.role === "admin" || !w.spaces || w.spaces.includes(space);
}

function canDebug() {
  return state.who && state.who.debug !== null;
}

// ---- the fleet -----------------------------------------------------------------

function counts(c) {
  return h(
    "span",
    { class: "counts" },
    h("span", { class: "count", title: "clusters" }, c.clusters + " clusters"),
    h("span", { class: "count available", title: "reachable and current" }, c.available + " available"),
    c.behind ? h("span", { class: "count behind", title: "reachable, revisions behind" }, c.behind + " behind") : null,
    c.unreachable ? h("span", { class: "count unreachable", title: "a link on the way is down" }, c.unreachable + " unreachable") : null,
  );
}

// What a link runs on, and whether its child reached its parent through a proxy.
function transportText(link) {
  return link.transport.toUpperCase() + (link.via === "proxied" ? ", proxied" : "");
}

function linkInfo(link, now) {
  if (!link) return null;
  const cls = !link.connected ? "down" : link.lag > 0 ? "lagging" : "up";
  const parts = [
    link.connected ? "connected" : "disconnected " + ago(link.since, now),
    link.transport ? transportText(link) : null,
    link.lag !== null && link.lag !== undefined ? "lag " + link.lag : null,
    "heard " + ago(link.lastHeard, now),
    link.certExpires ? "cert " + until(link.certExpires, now) : null,
  ].filter(Boolean);
  return h("span", { class: "link " + cls, "data-link": cls }, h("span", { class: "dot" }), parts.join(" · "));
}

function renderTotals() {
  const t = state.tiers;
  const el = document.getElementById("totals");
  el.replaceChildren(
    h("span", { class: "total" }, h("b", {}, t.totals.clusters), " clusters"),
    h("span", { class: "total available" }, h("b", { "data-total": "available" }, t.totals.available), " available"),
    h("span", { class: "total behind" }, h("b", { "data-total": "behind" }, t.totals.behind), " behind"),
    h("span", { class: "total unreachable" }, h("b", { "data-total": "unreachable" }, t.totals.unreachable), " unreachable"),
    h("span", { class: "total quiet" }, "revision " + t.head),
  );
}

function renderTree() {
  const t = state.tiers;
  const children = new Map();
  for (const r of t.relays) {
    if (r.parent === null) continue;
    if (!children.has(r.parent)) children.set(r.parent, []);
    children.get(r.parent).push(r);
  }
  const byName = new Map(t.relays.map((r) => [r.name, r]));
  const tree = document.getElementById("tree");
  tree.replaceChildren(relayNode(byName.get(t.root), children, t.now, 0));
}

function relayNode(r, children, now, depth) {
  const open = state.open.has(r.name);
  const kids = children.get(r.name) || [];
  const head = h(
    "div",
    { class: "relay-head", onclick: () => toggle(r.name) },
    h("span", { class: "caret" }, open ? "▾" : "▸"),
    h("span", { class: "name" }, r.name),
    depth === 0 ? h("span", { class: "tag" }, "root") : null,
    linkInfo(r.link, now),
    counts(r.counts),
  );
  const body = [];
  if (open) {
    for (const k of kids) body.push(relayNode(k, children, now, depth + 1));
    const own = state.clusters.get(r.name);
    if (r.own > 0) {
      if (own) body.push(h("div", { class: "clusters" }, own.items.map((c) => clusterRow(c, own.now))));
      else body.push(h("div", { class: "loading" }, "loading " + r.own + " clusters…"));
    }
  }
  return h("div", { class: "relay", "data-relay": r.name, "data-open": open ? "true" : "false" }, head, body);
}

function taintBadges(taints) {
  return (taints || []).map((t) => {
    const name = t.key === CORDONED ? "cordoned" : t.key === DRAINED ? "drained" : t.key;
    return h("span", { class: "badge taint", "data-taint": name, title: t.effect }, name);
  });
}

function clusterRow(c, now) {
  const taints = c.taints || [];
  const cordoned = taints.some((t) => t.key === CORDONED);
  const drained = taints.some((t) => t.key === DRAINED);
  const actions = [];
  if (canWrite(state.space)) {
    if (!cordoned && !drained) actions.push(actionButton("cordon", c.name));
    if (!drained) actions.push(actionButton("drain", c.name));
    if (cordoned || drained) actions.push(actionButton("uncordon", c.name));
  }
  if (canDebug()) {
    actions.push(h("button", { type: "button", class: "quiet", "data-action": "pods", onclick: () => openPods(c.name) }, "Pods"));
  }
  const props = Object.entries(c.properties || {}).map(([k, v]) => k + "=" + v);
  const link = c.link;
  return h(
    "div",
    { class: "cluster " + c.state, "data-cluster": c.name, "data-state": c.state },
    h("span", { class: "dot", title: c.state }),
    h("span", { class: "name" }, c.name),
    h("span", { class: "state" }, c.state),
    taintBadges(taints),
    h("span", { class: "labels" }, Object.entries(c.labels || {}).map(([k, v]) => h("span", { class: "label" }, k + "=" + v))),
    props.length ? h("span", { class: "props", title: "capacity and properties" }, props.join(" ")) : null,
    h("span", { class: "seen" }, c.state === "unreachable" ? "last seen " + ago(c.lastSeen, now) : link && link.lag ? "lag " + link.lag : ""),
    link && link.certExpires ? h("span", { class: "cert" }, "cert " + until(link.certExpires, now)) : null,
    link && link.transport ? h("span", { class: "transport", "data-via": link.via || "" }, transportText(link)) : null,
    h("span", { class: "runs" }, (c.placements || []).map((p) => h("span", { class: "badge " + p.state, title: p.state }, p.placement))),
    h("span", { class: "actions" }, actions),
  );
}

function actionButton(action, cluster) {
  return h(
    "button",
    { type: "button", "data-action": action, onclick: (ev) => { ev.stopPropagation(); clusterAction(action, cluster); } },
    action[0].toUpperCase() + action.slice(1),
  );
}

const ACTION_TEXT = {
  cordon: "Cordon cluster %s? Placements stop choosing it; what runs there stays.",
  drain: "Drain cluster %s? Every placement that does not tolerate it moves off, each once its new clusters run it.",
  uncordon: "Uncordon cluster %s? Placements may choose it again.",
};

// The read-modify-write `relay cordon|drain|uncordon` does, through the Kubernetes
// API: the Cluster object's taints, written back with its resourceVersion.
async function clusterAction(action, cluster) {
  if (!(await confirmAction(ACTION_TEXT[action].replace("%s", cluster)))) return;
  const path = "/spaces/" + encodeURIComponent(state.space) + "/apis/strata.dev/v1alpha1/clusters/" + encodeURIComponent(cluster);
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      const obj = await api("GET", path);
      const old = (obj.spec && obj.spec.taints) || [];
      let taints = old.filter((t) => t.key !== CORDONED && t.key !== DRAINED);
      if (action === "cordon") taints.push(old.find((t) => t.key === CORDONED) || { key: CORDONED, effect: "NoSchedule" });
      if (action === "drain") taints.push(old.find((t) => t.key === DRAINED) || { key: DRAINED, effect: "NoExecute" });
      obj.spec = Object.assign({}, obj.spec, { taints });
      delete obj.status;
      try {
        await api("PUT", path, obj);
        showNotice("cluster " + cluster + ": " + action + " done", "ok");
        refreshOpen(true);
        return;
      } catch (e) {
        if (e.status !== 409) throw e;
      }
    }
    showNotice("cluster " + cluster + " kept changing; try again");
  } catch (e) {
    showNotice("cluster " + cluster + ": " + action + " refused: " + e.message);
  }
}

function toggle(relay) {
  if (state.open.has(relay)) state.open.delete(relay);
  else state.open.add(relay);
  renderTree();
  refreshOpen(false);
}

// Fetches the own clusters of every open relay whose digest changed.
async function refreshOpen(force) {
  const t = state.tiers;
  if (!t) return;
  const wanted = t.relays.filter((r) => state.open.has(r.name) && r.own > 0);
  await Promise.all(
    wanted.map(async (r) => {
      const have = state.clusters.get(r.name);
      if (!force && have && have.digest === r.digest && have.head === t.head && have.space === state.space) return;
      try {
        const v = await api("GET", "/ui/api/clusters?relay=" + encodeURIComponent(r.name) + "&space=" + encodeURIComponent(state.space));
        state.clusters.set(r.name, { digest: r.digest, head: t.head, space: state.space, items: v.items, now: v.now });
      } catch (e) {
        showNotice("clusters of " + r.name + ": " + e.message);
      }
    }),
  );
  renderTree();
}

function onTiers(t) {
  const firstTime = !state.tiers;
  state.tiers = t;
  state.lastEvent = Date.now();
  if (firstTime && t.totals.clusters < OPEN_ALL_BELOW) {
    for (const r of t.relays) state.open.add(r.name);
  } else if (firstTime) {
    state.open.add(t.root);
  }
  renderTotals();
  renderTree();
  refreshOpen(false).then(() => {
    if (state.firstRender) {
      state.firstRender = false;
      document.body.setAttribute("data-ready", "true");
      performance.mark("strata-ready");
    }
  });
  state.placementsDirty = true;
  if (state.tab === "placements") schedulePlacements();
}

function follow() {
  const live = document.getElementById("live");
  const source = new EventSource("/ui/api/events");
  source.addEventListener("tiers", (ev) => {
    live.textContent = "live";
    live.className = "live on";
    onTiers(JSON.parse(ev.data));
  });
  source.addEventListener("error", () => {
    live.textContent = "reconnecting";
    live.className = "live off";
  });
}

// ---- placements ----------------------------------------------------------------

let placementsTimer = null;
function schedulePlacements() {
  if (placementsTimer) return;
  placementsTimer = setTimeout(() => {
    placementsTimer = null;
    loadPlacements();
  }, 500);
}

async function loadPlacements() {
  if (!state.placementsDirty) return;
  state.placementsDirty = false;
  const base = "/spaces/" + encodeURIComponent(state.space) + "/apis/strata.dev/v1alpha1/";
  let placements, statuses, clusterStatuses;
  try {
    [placements, statuses, clusterStatuses] = await Promise.all([
      api("GET", base + "placements"),
      api("GET", base + "fleetstatuses"),
      api("GET", base + "clusterfleetstatuses").catch(() => ({ items: [] })),
    ]);
  } catch (e) {
    showNotice("placements: " + e.message);
    return;
  }
  const byPlacement = new Map();
  for (const s of [...(statuses.items || []), ...(clusterStatuses.items || [])]) {
    const p = s.placement || (s.metadata && s.metadata.labels && s.metadata.labels["strata.dev/placement"]);
    if (!byPlacement.has(p)) byPlacement.set(p, []);
    byPlacement.get(p).push(s);
  }
  const list = document.getElementById("placement-list");
  const items = placements.items || [];
  if (!items.length) {
    list.replaceChildren(h("p", { class: "quiet" }, "No placements in space " + state.space + "."));
    return;
  }
  list.replaceChildren(...items.map((p) => placementCard(p, byPlacement.get(p.metadata.name) || [])));
}

function placementCard(p, statuses) {
  const name = p.metadata.name;
  const st = p.status || {};
  const d = st.decisions || {};
  const chosen = d.clusters || [];
  const excluded = Object.entries(d.excluded || {}).map(([why, n]) => n + " " + why);
  const spec = p.spec || {};
  const sel = spec.clusters || {};
  const how = [
    sel.count !== undefined ? "at most " + sel.count + " clusters" : "every matching cluster",
    sel.spreadBy ? "spread by " + sel.spreadBy : null,
    sel.prefer ? "preferring " + sel.prefer.length + " selector" + (sel.prefer.length === 1 ? "" : "s") + " in order" : null,
    sel.failoverAfter ? "failover after " + sel.failoverAfter : null,
  ].filter(Boolean);
  return h(
    "article",
    { class: "placement", "data-placement": name },
    h("h3", {}, name, h("span", { class: "quiet" }, " chose " + (d.chosen ?? chosen.length) + " of " + (d.matching ?? "?") + " matching")),
    how.length ? h("p", { class: "why" }, "how: " + how.join(", ")) : null,
    excluded.length ? h("p", { class: "why" }, "left out: " + excluded.join(", ")) : null,
    h("p", { class: "chosen" }, chosen.slice(0, 30).map((c) => h("span", { class: "badge chosen", "data-chosen": c }, c)), chosen.length > 30 ? " and " + (chosen.length - 30) + " more" : null),
    d.retiring ? h("p", { class: "why" }, "moving off: " + d.retiring.join(", ")) : null,
    spec.rollout ? rolloutView(p) : null,
    statuses.length ? statusTable(statuses) : h("p", { class: "quiet" }, "no object reports yet"),
  );
}

function rolloutView(p) {
  const name = p.metadata.name;
  const r = (p.status && p.status.rollout) || {};
  const waves = (p.spec.rollout && p.spec.rollout.waves) || [];
  const current = r.waveIndex || 0;
  const phase = r.phase || "pending";
  const steps = waves.map((w, i) => {
    const n = i + 1;
    const cls = n < current || phase === "Complete" ? "done" : n === current ? "current " + phase.toLowerCase() : "waiting";
    const label = w.name || (w.selector ? JSON.stringify(w.selector.matchLabels || w.selector) : w.clusters !== undefined ? w.clusters + " clusters" : "wave " + n);
    const gate = w.pause ? "pause" : w.gate ? "gate" : null;
    return h("li", { class: "wave " + cls, "data-wave": n }, h("b", {}, n), " ", label, gate ? h("span", { class: "badge" }, gate) : null);
  });
  const actions = canWrite(state.space)
    ? ["pause", "resume", "abort", "undo"].map((verb) =>
        h("button", { type: "button", "data-action": verb, onclick: () => rolloutAction(name, verb) }, verb[0].toUpperCase() + verb.slice(1)),
      )
    : [];
  return h(
    "div",
    { class: "rollout", "data-phase": phase, "data-wave-index": current, "data-revision": r.revision ?? "" },
    h("p", {}, "rollout revision " + (r.revision ?? "?") + ": ", h("b", {}, phase), r.wave ? " at wave " + r.wave : "", r.available && r.available !== "0/0" ? ", " + r.available + " available" : "", r.failed ? ", " + r.failed + " failed" : "", r.message ? " — " + r.message : ""),
    h("ol", { class: "waves" }, steps),
    h("span", { class: "actions" }, actions),
  );
}

async function rolloutAction(placement, verb) {
  if (!(await confirmAction("Rollout of " + placement + ": " + verb + "?"))) return;
  const path = "/spaces/" + encodeURIComponent(state.space) + "/apis/strata.dev/v1alpha1/placements/" + encodeURIComponent(placement);
  const patch = { metadata: { annotations: { [ROLLOUT_ANNOTATION]: verb + "@" + Date.now() } } };
  try {
    await api("PATCH", path, patch, "application/merge-patch+json");
    showNotice("placement " + placement + ": rollout " + verb + " asked", "ok");
    state.placementsDirty = true;
    schedulePlacements();
  } catch (e) {
    showNotice("placement " + placement + ": " + verb + " refused: " + e.message);
  }
}

function statusTable(statuses) {
  const rows = statuses.map((s) => {
    const o = s.object || {};
    const t = s.summary || {};
    const tiers = (s.tiers || []).map((x) => h("span", { class: "badge tier", title: "available/expected in this subtree" }, x.name + " " + (x.available ?? 0) + "/" + (x.expected ?? 0)));
    const clusters = (s.clusters || []).map((x) => h("span", { class: "badge " + String(x.health || "").toLowerCase(), title: x.message || x.health || "" }, x.name + " " + (x.health || "")));
    return h(
      "tr",
      { "data-object": (o.kind || "") + "/" + (o.name || "") },
      h("td", {}, (o.kind || "?") + " " + (o.namespace ? o.namespace + "/" : "") + (o.name || "?")),
      h("td", { "data-count": "expected" }, t.expected ?? 0),
      h("td", { "data-count": "available", class: "available" }, t.available ?? 0),
      h("td", { "data-count": "progressing" }, t.progressing ?? 0),
      h("td", { "data-count": "degraded", class: "behind" }, t.degraded ?? 0),
      h("td", { "data-count": "failed", class: "unreachable" }, t.failed ?? 0),
      h("td", {}, tiers, clusters),
    );
  });
  return h(
    "table",
    { class: "status" },
    h("thead", {}, h("tr", {}, ["object", "expected", "available", "progressing", "degraded", "failed", "per tier and cluster"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows),
  );
}

// ---- the debug tunnel ----------------------------------------------------------

async function openPods(cluster) {
  const panel = document.getElementById("debug");
  document.getElementById("debug-title").textContent = "Pods on " + cluster;
  const body = document.getElementById("debug-body");
  body.replaceChildren(h("p", { class: "loading" }, "asking the cluster through the tiers…"));
  panel.hidden = false;
  try {
    const pods = await api("GET", "/clusters/" + encodeURIComponent(cluster) + "/api/v1/pods?limit=500");
    const rows = (pods.items || []).map((p) =>
      h(
        "tr",
        { "data-pod": p.metadata.namespace + "/" + p.metadata.name },
        h("td", {}, p.metadata.namespace),
        h("td", {}, p.metadata.name),
        h("td", {}, (p.status && p.status.phase) || "?"),
        h("td", {}, h("button", { type: "button", class: "quiet", onclick: () => openLog(cluster, p) }, "Logs")),
      ),
    );
    body.replaceChildren(
      rows.length ? h("table", { class: "status" }, h("tbody", {}, rows)) : h("p", { class: "quiet" }, "no pods"),
      h("pre", { id: "log", class: "log", hidden: true }),
    );
  } catch (e) {
    body.replaceChildren(h("p", { class: "error" }, "cannot list pods: " + e.message));
  }
}

async function openLog(cluster, pod) {
  const pre = document.getElementById("log");
  pre.hidden = false;
  pre.textContent = "…";
  const path = "/clusters/" + encodeURIComponent(cluster) + "/api/v1/namespaces/" + encodeURIComponent(pod.metadata.namespace) + "/pods/" + encodeURIComponent(pod.metadata.name) + "/log?tailLines=200";
  try {
    const text = await fetch(path, { credentials: "same-origin" }).then((r) => r.text());
    pre.textContent = text || "(empty)";
  } catch (e) {
    pre.textContent = "cannot read the log: " + e.message;
  }
}

// ---- start ---------------------------------------------------------------------

function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("button.tab")) b.classList.toggle("active", b.dataset.tab === tab);
  document.getElementById("fleet").hidden = tab !== "fleet";
  document.getElementById("placements").hidden = tab !== "placements";
  if (tab === "placements") {
    state.placementsDirty = true;
    loadPlacements();
  }
}

async function start() {
  for (const b of document.querySelectorAll("button.tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
  document.getElementById("debug-close").addEventListener("click", () => (document.getElementById("debug").hidden = true));
  document.getElementById("logout").addEventListener("click", async () => {
    await api("POST", "/ui/logout").catch(() => {});
    showNotice("logged out; run `relay ui` to log in again", "ok");
  });
  try {
    state.who = await api("GET", "/ui/api/whoami");
  } catch (e) {
    if (e.status !== 401) showNotice("cannot reach the root: " + e.message);
    return;
  }
  const w = state.who;
  document.getElementById("who").textContent = w.user + " (" + w.role + ")";
  document.body.setAttribute("data-role", w.role);
  const select = document.getElementById("space");
  const spaces = w.spaces && w.spaces.length ? w.spaces : ["default"];
  state.space = spaces.includes("default") ? "default" : spaces[0];
  select.replaceChildren(...spaces.map((s) => h("option", { value: s, selected: s === state.space }, s)));
  select.addEventListener("change", () => {
    state.space = select.value;
    state.clusters.clear();
    state.placementsDirty = true;
    refreshOpen(true);
    if (state.tab === "placements") loadPlacements();
  });
  follow();
}

document.addEventListener("DOMContentLoaded", start);
