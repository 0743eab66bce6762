// logkeel console: polls the JSON endpoints and redraws; no framework, no build step.
"use strict";

let intervalMs = 2000;
let asHex = false;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) {
    node.append(c instanceof Node ? c : document.createTextNode(c == null ? "-" : String(c)));
  }
  return node;
}

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows);
}

function bytes(n) {
  if (n == null) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function time(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "-"; }

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  return [r.status, await r.json()];
}

function drawBrokers(data) {
  document.getElementById("cluster-id").textContent = data.cluster_id ? `cluster ${data.cluster_id}` : "";
  const status = document.getElementById("status");
  status.textContent = data.error ? `cannot reach the cluster: ${data.error}` : `updated ${time(data.updated_ms)} UTC`;
  status.className = data.error ? "status error" : "status";
  fillTable("brokers", data.brokers.map((b) => {
    const dirs = el("td", {});
    for (const d of b.log_dirs || []) {
      const line = el("div", { class: d.error ? "offline" : "" },
        `${d.log_dir}: ${d.error ? "offline (" + d.error + ")" : "online"}, ${bytes(d.bytes)}`);
      dirs.append(line);
    }
    if (!b.alive) dirs.append("unknown while the broker is dead");
    return el("tr", { "data-broker": b.id, class: b.alive ? "" : "dead" },
      el("td", {}, b.id), el("td", {}, `${b.host}:${b.port}`),
      el("td", { class: b.alive ? "ok" : "dead" }, b.alive ? "alive" : `dead (last seen ${time(b.last_seen_ms)})`),
      el("td", {}, b.rack), el("td", {}, b.controller ? "controller" : ""), dirs);
  }));
  for (const box of document.querySelectorAll(".actions")) box.hidden = !data.actions_allowed;
  document.getElementById("actions-off").hidden = data.actions_allowed;
  intervalMs = data.interval_ms || intervalMs;
}

function drawPartitions(data) {
  fillTable("partitions", data.partitions.map((p) => {
    const state = p.offline ? "offline" + (p.offline_reason ? `: ${p.offline_reason}` : "")
      : p.under_replicated ? "under-replicated" : "ok";
    return el("tr", { "data-partition": `${p.topic}-${p.partition}` },
      el("td", {}, p.topic), el("td", {}, p.partition), el("td", { class: "leader" }, p.leader < 0 ? "none" : p.leader),
      el("td", {}, p.leader_epoch), el("td", {}, p.replicas.join(",")), el("td", {}, p.isr.join(",")),
      el("td", { class: p.offline ? "offline" : p.under_replicated ? "under" : "ok" }, state),
      el("td", {}, p.log_end_offset), el("td", {}, bytes(p.size_bytes)));
  }));
  const leaderless = data.partitions.filter((p) => p.offline && p.designate);
  document.getElementById("designate-section").hidden = !leaderless.length;
  fillTable("designate", leaderless.map((p) => el("tr", { "data-partition": `${p.topic}-${p.partition}` },
    el("td", {}, `${p.topic}-${p.partition}`), el("td", { class: "best" }, p.designate.broker == null ? "unknown" : p.designate.broker),
    el("td", {}, p.designate.replicas.map((r) => `${r.broker}${r.live ? "" : " (down)"}: log end ${r.log_end_offset}, epoch ${r.last_leader_epoch}`).join("; ") || "-"),
    el("td", {}, el("code", { class: "command" }, p.designate.elect_command || "-")), el("td", {}, p.designate.note))));
}

function sparkline(points, width, height) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  if (points.length < 2) {
    const t = document.createElementNS(svg.namespaceURI, "text");
    t.setAttribute("x", 4); t.setAttribute("y", height / 2); t.textContent = "collecting samples…";
    svg.append(t);
    return svg;
  }
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const top = Math.max(...points.map((p) => p[1]), 1);
  const xy = points.map(([t, v]) =>
    `${((t - t0) / Math.max(t1 - t0, 1) * (width - 8) + 4).toFixed(1)},${(height - 4 - v / top * (height - 16)).toFixed(1)}`);
  const line = document.createElementNS(svg.namespaceURI, "polyline");
  line.setAttribute("points", xy.join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#3498db"); line.setAttribute("stroke-width", "2");
  const label = document.createElementNS(svg.namespaceURI, "text");
  label.setAttribute("x", 4); label.setAttribute("y", 11); label.setAttribute("font-size", "10");
  label.textContent = `max ${top.toFixed(1)}/s, now ${points[points.length - 1][1].toFixed(1)}/s`;
  svg.append(line, label);
  return svg;
}

function drawCharts(id, series, prefix) {
  const names = Object.keys(series).sort();
  document.getElementById(id).replaceChildren(...(names.length ? names.map((n) =>
    el("div", { class: "chart", "data-series": n }, el("div", {}, `${prefix}${n}`), sparkline(series[n], 260, 70)))
    : [el("p", { class: "note" }, "no samples yet")]));
}

function drawGroups(data) {
  const box = document.getElementById("groups");
  const parts = [];
  if (data.error) parts.push(el("p", { class: "note" }, `groups unavailable: ${data.error}`));
  if (!data.groups.length && !data.error) parts.push(el("p", { class: "note" }, "no consumer groups"));
  for (const g of data.groups) {
    parts.push(el("h3", {}, `${g.group}: ${g.state}` + (g.total_lag != null ? `, total lag ${g.total_lag}` : "")));
    if (g.error) { parts.push(el("p", { class: "note" }, g.error)); continue; }
    parts.push(el("div", { class: "chart" }, el("div", {}, "total lag"), sparkline(g.lag_trend || [], 260, 60)));
    const rows = g.offsets.map((r) => el("tr", {}, el("td", {}, r.topic), el("td", {}, r.partition),
      el("td", {}, r.current_offset), el("td", {}, r.log_end_offset), el("td", {}, r.lag), el("td", {}, r.member_id)));
    parts.push(el("table", { class: "group" }, el("thead", {}, el("tr", {}, ...["topic", "partition", "committed", "log end", "lag", "member"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows)));
  }
  box.replaceChildren(...parts);
}

function drawElections(data) {
  fillTable("observed", data.observed.map((c) => el("tr", {}, el("td", {}, time(c.time_ms)),
    el("td", {}, `${c.topic}-${c.partition}`), el("td", {}, c.from_leader < 0 ? "none" : c.from_leader),
    el("td", {}, c.to_leader < 0 ? "none" : c.to_leader), el("td", {}, c.leader_epoch), el("td", {}, c.in_isr ? "yes" : "no"))));
  document.getElementById("losses-note").textContent = data.losses_note || (data.losses.length ? "" : "none recorded");
  fillTable("losses", (data.losses || []).map((x) => el("tr", {}, el("td", {}, time(x.time_ms)),
    el("td", {}, `${x.topic}-${x.partition}`), el("td", {}, x.reason), el("td", {}, x.leader), el("td", {}, x.leader_epoch),
    el("td", {}, x.from_offset < 0 ? "not reported" : x.from_offset),
    el("td", {}, Object.entries(x.truncated).map(([r, n]) => `${r}: ${n}`).join(", ") || "-"))));
  document.getElementById("history-note").textContent = data.history_note || (data.history.length ? "" : "nothing recorded yet");
  fillTable("history", data.history.map((h) => el("tr", { class: h.kind.replaceAll(" ", "-") }, el("td", {}, time(h.time_ms)),
    el("td", {}, h.kind), el("td", {}, h.broker == null ? "-" : h.broker), el("td", {}, h.subject),
    el("td", {}, h.change), el("td", {}, h.reason))));
  document.getElementById("not-recorded").replaceChildren(...data.not_recorded.map((t) => el("li", {}, t)));
}

async function refresh() {
  try {
    const [, overview] = await getJson("/api/overview"); drawBrokers(overview);
    const [, parts] = await getJson("/api/partitions"); drawPartitions(parts);
    const [, groups] = await getJson("/api/groups"); drawGroups(groups);
    const [, elections] = await getJson("/api/elections"); drawElections(elections);
    const [, rates] = await getJson("/api/throughput");
    drawCharts("topic-charts", rates.topics, "");
    drawCharts("broker-charts", rates.brokers, "broker ");
  } catch (e) {
    const status = document.getElementById("status");
    status.textContent = `the console process does not answer: ${e}`;
    status.className = "status error";
  }
  setTimeout(refresh, intervalMs);
}

function shown(b) {
  if (b == null) return "null";
  return asHex || b.text == null ? b.hex : b.text;
}

async function browse(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  asHex = f.get("as") === "hex";
  const q = new URLSearchParams({ topic: f.get("topic"), partition: f.get("partition") });
  if (f.get("offset")) q.set("offset", f.get("offset"));
  else if (f.get("time")) q.set("timestamp_ms", String(Date.parse(f.get("time") + "Z")));
  const note = document.getElementById("browse-note");
  note.textContent = "reading…";
  const [code, data] = await getJson(`/api/messages?${q}`);
  if (code !== 200) { note.textContent = data.error; fillTable("messages", []); return; }
  note.textContent = `${data.records.length} record(s) from offset ${data.from_offset ?? "-"} of leader ${data.leader}` +
    ` (high watermark ${data.high_watermark ?? "-"}, last stable offset ${data.last_stable_offset ?? "-"})` + (data.note ? `: ${data.note}` : "");
  fillTable("messages", data.records.map((r) => el("tr", { "data-offset": r.offset }, el("td", {}, r.offset), el("td", {}, time(r.timestamp_ms)),
    el("td", { class: "bytes" }, shown(r.key)), el("td", { class: "bytes" }, shown(r.value)),
    el("td", { class: "bytes" }, r.headers.map((h) => `${h.key}=${shown(h.value)}`).join("; ")))));
}

const TOKEN = document.querySelector("meta[name='logkeel-console-token']").content;

async function act(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const body = { confirm: f.get("confirm") };
  for (const k of ["topic", "log_dir", "replicas"]) if (f.get(k)) body[k] = f.get(k);
  for (const k of ["partition", "replica", "broker"]) if (f.get(k)) body[k] = Number(f.get(k));
  body.force = f.get("force") === "on";
  const kind = (ev.submitter && ev.submitter.value) || ev.target.dataset.kind;
  const r = await fetch(`/api/actions/${kind}`, { method: "POST",
    headers: { "content-type": "application/json", "x-logkeel-console-token": TOKEN }, body: JSON.stringify(body) });
  ev.target.parentElement.querySelector(".action-result").textContent = JSON.stringify(await r.json(), null, 2);
}

for (const b of document.querySelectorAll("nav button")) {
  b.addEventListener("click", () => {
    for (const o of document.querySelectorAll("nav button")) o.classList.toggle("active", o === b);
    for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${b.dataset.view}`;
  });
}
document.getElementById("browse-form").addEventListener("submit", browse);
for (const form of document.querySelectorAll("form.action")) form.addEventListener("submit", act);
refresh();
