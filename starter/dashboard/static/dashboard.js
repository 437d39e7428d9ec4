// The dashboard page: fetches /api/dashboard every interval and redraws. Every figure and name
// is set as text (never as HTML): topics, agents and failure types come from outside.
"use strict";

const charts = {};

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function figure(value) {
  return value === null || value === undefined ? "-" : Math.round(value).toLocaleString("en-US");
}

function rows(id, items, cells, empty, columns) {
  const body = document.getElementById(id);
  body.replaceChildren();
  if (!items.length) {
    const row = el("tr");
    const cell = el("td", empty, "empty");
    cell.colSpan = columns;
    row.append(cell);
    body.append(row);
    return;
  }
  for (const item of items) {
    const row = el("tr");
    for (const [text, cls] of cells(item)) row.append(el("td", text, cls));
    body.append(row);
  }
}

function throughput(frame) {
  const t = frame.throughput;
  const items = [
    ["Events Published", t.published],
    ["Events Consumed", t.consumed],
    ["Events Failed", t.failed],
    ["Events in DLQ", t.in_dlq],
  ];
  const scale = Math.max(1, ...items.map(([, v]) => v || 0));
  const list = document.getElementById("throughput-bars");
  list.replaceChildren();
  for (const [label, value] of items) {
    const bar = el("div", null, "bar");
    const fill = el("div");
    fill.style.width = `${(100 * (value || 0)) / scale}%`;
    bar.append(fill);
    const dd = el("dd");
    dd.append(bar);
    list.append(el("dt", label), dd, el("dd", figure(value), "n"));
  }
  document.getElementById("window").textContent = `(${frame.window})`;
}

function health(frame) {
  const h = frame.health;
  const list = document.getElementById("health-list");
  list.replaceChildren();
  // The light is drawn by CSS, not an emoji: a browser without an emoji font shows a box.
  const bus = el("dd", null, `bus ${h.bus}`);
  bus.append(el("span", null, "light"), `${h.bus[0].toUpperCase()}${h.bus.slice(1)}`);
  const latency = h.latency_ms === null ? "-" : `${figure(h.latency_ms)}ms`;
  const lag = h.consumer_lag === null ? "-" : `${h.consumer_lag} (${figure(h.lag)} events)`;
  list.append(el("dt", "Event Bus"), bus, el("dt", "Average Latency"), el("dd", latency));
  list.append(el("dt", "Consumer Lag"), el("dd", lag));
  const reasons = document.getElementById("health-reasons");
  reasons.replaceChildren(...h.reasons.map((reason) => el("li", reason)));
}

function patterns(frame) {
  const p = frame.patterns || { sagas: {}, in_flight: {}, parked: null, oldest: [], breakers: [] };
  const sagas = Object.entries(p.sagas).filter(([, n]) => n > 0);
  rows("sagas-rows", sagas, ([k, n]) => [[k, k], [figure(n), "n"]], "none", 2);
  rows("flight-rows", Object.entries(p.in_flight), ([k, n]) => [[k], [figure(n), "n"]], "-", 2);
  rows(
    "breakers-rows",
    p.breakers,
    (b) => [[b.agent], [b.state, b.state], [b.status, b.status]],
    "no agent declared or serving",
    3,
  );
  document.getElementById("dlq-parked").textContent = figure(p.parked);
  rows(
    "dlq-rows",
    p.oldest,
    (e) => [
      [e.entry_id],
      [e.failure_type],
      [e.event_type || "-"],
      [e.target || "-"],
      [new Date(e.parked_at).toISOString().replace("T", " ").slice(0, 19)],
    ],
    "the queue is empty",
    5,
  );
}

function chart(id, series, data) {
  const target = document.getElementById(id);
  if (!charts[id]) {
    const options = {
      width: Math.max(target.clientWidth, 200),
      height: 160,
      legend: { show: true },
      scales: { x: { time: true } },
      series: [{}, ...series.map(([label, stroke]) => ({ label, stroke, width: 2 }))],
    };
    charts[id] = new uPlot(options, data, target);
  } else {
    charts[id].setData(data);
  }
}

function history(page) {
  const points = page.history;
  const x = points.map((p) => Date.parse(p.at) / 1000);
  const pick = (key) => points.map((p) => p[key]);
  chart(
    "chart-throughput",
    [["published", "#3b6fd8"], ["consumed", "#1a7f37"], ["failed", "#cf222e"]],
    [x, pick("published_per_s"), pick("consumed_per_s"), pick("failed_per_s")],
  );
  chart("chart-lag", [["lag", "#9a6700"]], [x, pick("lag")]);
  chart("chart-latency", [["latency", "#6f42c1"]], [x, pick("latency_ms")]);
}

function draw(page) {
  const frame = page.frame;
  throughput(frame);
  rows(
    "topics-rows",
    frame.topics,
    (r) => [[r.topic], [figure(r.published), "n"], [figure(r.consumed), "n"], [figure(r.lag), "n"]],
    "no events in the window",
    4,
  );
  rows(
    "agents-rows",
    frame.agents,
    (r) => [[r.agent], [figure(r.published), "n"], [figure(r.consumed), "n"], [figure(r.processing), "n"]],
    "no agent runs in the window",
    4,
  );
  health(frame);
  patterns(frame);
  history(page);
  const at = new Date(frame.at).toISOString().replace("T", " ").slice(0, 19);
  document.getElementById("stamp").textContent = `${at} UTC, every ${page.interval}s`;
  const sources = frame.sources.map((s) => `${s.name}: ${s.ok ? "ok" : s.error}`);
  document.getElementById("sources").textContent = `Sources: ${sources.join("; ")}`;
  document.body.dataset.state = "loaded";
}

async function refresh() {
  let interval = 5;
  try {
    const response = await fetch("/api/dashboard", { cache: "no-store" });
    const page = await response.json();
    interval = page.interval;
    draw(page);
  } catch (error) {
    document.getElementById("stamp").textContent = `cannot reach the dashboard server: ${error}`;
  }
  setTimeout(refresh, interval * 1000);
}

refresh();
