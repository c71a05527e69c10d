// Live dashboard: loads the queue, reservations, teams and model over the API, then applies every
// change from the WebSocket stream (/v1/stream) as it arrives. No build step, no dependencies.
"use strict";

const FACTOR_COLORS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#65a30d", "#db2777"];
const state = { token: null, jobs: new Map(), reservations: new Map(), teams: [], model: null,
  lastSeq: 0, ws: null, retryMs: 500, factorNames: [], teamsTimer: null, startsTimer: null };

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "style") node.style.cssText = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};

function fmtDuration(s) {
  if (s === null || s === undefined || !isFinite(s)) return "?";
  if (s < 90) return `${Math.round(s)}s`;
  if (s < 5400) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}
const fmtMiB = (m) => (m === null || m === undefined) ? "-" : (m >= 1024 ? `${(m / 1024).toFixed(1)} GiB` : `${Math.round(m)} MiB`);
const fmtTime = (ts) => new Date(ts * 1000).toLocaleTimeString();
// Priorities are integers up to ~10^9: shown in millions, one scale for the whole column ("1,517M",
// "962M"), the exact value and the rank in the tooltip.
const fmtPriority = (p) => Math.abs(p) >= 1e8 ? `${Math.round(p / 1e6).toLocaleString("en")}M`
  : Math.abs(p) >= 1e5 ? `${(p / 1e6).toFixed(1)}M` : p.toLocaleString("en");
const fmtAllocation = (parts) => (parts || []).map((a) => `${a.node}: GPU ${a.gpu_indices.join(", ")}`).join("; ");

async function api(path, options = {}) {
  const resp = await fetch(path, { ...options, headers: { ...(options.headers || {}), Authorization: `Bearer ${state.token}` } });
  if (resp.status === 401) { showLogin("token rejected"); throw new Error("unauthorized"); }
  if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}`);
  return resp.json();
}

function showLogin(message) {
  sessionStorage.removeItem("predictor-token");
  state.token = null;
  $("#main").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
}

// ---- rendering ---------------------------------------------------------------------------
function factorColor(name) {
  let i = state.factorNames.indexOf(name);
  if (i < 0) { state.factorNames.push(name); i = state.factorNames.length - 1; renderLegend(); }
  return FACTOR_COLORS[i % FACTOR_COLORS.length];
}

function renderLegend() {
  const legend = $("#legend");
  legend.replaceChildren(...state.factorNames.map((n) => el("span", {}, el("i", { style: `background:${factorColor(n)}` }), n)));
}

function scoreBar(decision) {
  const bar = el("div", { class: "stack" });
  if (!decision) return bar;
  const total = decision.factors.reduce((a, f) => a + Math.max(f.weight || 0, 0), 0) || 1;
  for (const f of decision.factors) {
    const w = Math.max(f.contribution || 0, 0) / total * 100;
    const part = el("span", { style: `width:${w}%;background:${factorColor(f.name)}` });
    part.title = `${f.name}: value ${(f.value ?? 0).toFixed(3)} x weight ${f.weight} = ${(f.contribution ?? 0).toFixed(3)}${f.detail ? " (" + f.detail + ")" : ""}`;
    bar.append(part);
  }
  bar.title = decision.factors.map((f) => `${f.name} ${(f.contribution ?? 0).toFixed(2)}`).join(", ");
  return bar;
}

function intervalBar(pred, range) {
  const wrap = el("div");
  if (!pred) return wrap;
  const d = pred.duration;
  const [lo, hi] = range;  // log scale shared by every row, so intervals compare at a glance
  const scale = (s) => Math.max(0, Math.min(100, (Math.log(Math.max(s, 1)) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) * 100));
  const box = el("div", { class: "interval" },
    el("div", { class: "range", style: `left:${scale(d.p10_s)}%;width:${Math.max(scale(d.p90_s) - scale(d.p10_s), 1)}%` }),
    el("div", { class: "p50", style: `left:${scale(d.p50_s)}%` }));
  box.title = `p10 ${fmtDuration(d.p10_s)}, p50 ${fmtDuration(d.p50_s)}, p90 ${fmtDuration(d.p90_s)}`;
  wrap.append(box, el("div", { class: "interval-label" }, `${fmtDuration(d.p10_s)} - ${fmtDuration(d.p50_s)} - ${fmtDuration(d.p90_s)}`));
  return wrap;
}

function queueOrder() {
  const live = [...state.jobs.values()].filter((j) => j.status === "pending" || j.status === "running");
  const pending = live.filter((j) => j.status === "pending")
    .sort((a, b) => (b.decision?.priority ?? -1) - (a.decision?.priority ?? -1) || a.submit_ts - b.submit_ts || (a.job_id < b.job_id ? -1 : 1));
  const running = live.filter((j) => j.status === "running").sort((a, b) => (a.start_ts ?? 0) - (b.start_ts ?? 0));
  return [...pending, ...running];
}

function renderQueue(highlight) {
  const rows = queueOrder();
  const p10s = rows.map((j) => j.prediction?.duration?.p10_s).filter((s) => s > 0);
  const p90s = rows.map((j) => j.prediction?.duration?.p90_s).filter((s) => s > 0);
  const range = [Math.min(60, ...p10s) / 1.5, Math.max(3600, ...p90s) * 1.5];
  const body = $("#queue tbody");
  const pendingCount = rows.filter((j) => j.status === "pending").length;
  body.replaceChildren(...rows.map((j, i) => {
    const d = j.decision, p = j.prediction, running = j.status === "running";
    const tr = el("tr", { "data-job-id": j.job_id, class: highlight === j.job_id ? "new" : "" },
      el("td", { class: "num" }, j.status === "pending" ? i + 1 : "-"),
      el("td", { class: "name" }, j.job_id),
      el("td", { class: "name" }, j.team ?? "-"),
      el("td", {}, d?.tier ?? j.tier ?? "-"),
      el("td", {}, j.status),
      el("td", { class: "num" }, `${j.request.num_gpus ?? "-"}${d?.flavor ? " x " + d.flavor : ""}`),
      el("td", { class: "num priority", title: d ? `priority ${d.priority.toLocaleString("en")}` +
        (running ? "" : ` (rank ${i + 1} of ${pendingCount} pending)`) : "" }, d ? fmtPriority(d.priority) : "-"),
      el("td", { class: "wide" }, scoreBar(d)),
      el("td", { class: "wide" }, intervalBar(p, range)),
      el("td", { class: "num memory", title: p?.fits_gpu_types?.length ? `fits ${p.fits_gpu_types.join(", ")}` : "" },
        ...(p && p.peak_vram_mib !== null
          ? [fmtMiB(p.peak_vram_mib), el("div", { class: "sub" }, `<= ${fmtMiB(p.peak_vram_upper_mib)}`)] : ["unknown"])),
      el("td", {}, running
        ? el("span", { class: "action running", title: fmtAllocation(j.allocation) || "GPUs not reported" }, "running")
        : d ? el("span", { class: `action ${d.action}`, title: d.reason }, d.action) : "-"),
      el("td", { class: "num start", title: startTitle(j.start_estimate) }, startText(j, running)));
    if (!running) tr.addEventListener("click", () => explainJob(j.job_id));
    return tr;
  }));
  $("#queue-count").textContent = `${rows.filter((j) => j.status === "pending").length} pending, ${rows.filter((j) => j.status === "running").length} running`;
}

// ---- start estimates and the explain panel (GET /v1/jobs/{id}/explain) -------------------------
const fmtIn = (ts) => (ts === null || ts === undefined) ? "?" : fmtDuration(Math.max(ts - Date.now() / 1000, 0));
function startText(j, running) {
  if (running) return "-";
  const e = j.start_estimate;
  if (!e) return "?";
  if (e.basis === "starts now") return "now";
  return e.p50_ts === null ? "never" : fmtIn(e.p50_ts);
}
const startTitle = (e) => e && e.p50_ts !== null ? `p10 ${fmtIn(e.p10_ts)}, p50 ${fmtIn(e.p50_ts)}, p90 ${fmtIn(e.p90_ts)} (${e.basis})` : "";

async function explainJob(jobId) {
  const doc = await api(`/v1/jobs/${encodeURIComponent(jobId)}/explain`);
  const ch = doc.chain;
  $("#explain-job").textContent = jobId;
  $("#explain-summary").replaceChildren(...doc.summary.map((s) => el("li", {}, s)));
  const row = (rank, id, team, prio, factors, cls) => el("tr", { class: cls },
    el("td", { class: "num" }, rank), el("td", { class: "name" }, id ?? "(another team)"), el("td", {}, team ?? "-"),
    el("td", { class: "num" }, fmtPriority(prio)),
    el("td", { class: "wide" }, factors.map((f) => `${f.name} ${f.value.toFixed(2)} x ${f.weight}`).join("; ")));
  $("#explain-ahead tbody").replaceChildren(
    ...ch.ahead.just_ahead.map((a) => row(a.rank, a.job_id, a.team, a.priority, a.factors, "")),
    row(ch.ahead.rank, jobId, ch.limits.fairshare?.team, ch.ahead.priority, ch.ahead.factors, "self"));
  $("#explain-whatif").replaceChildren(...ch.what_if.options.map((o) =>
    el("li", { class: o === ch.what_if.best || (ch.what_if.best && o.change === ch.what_if.best.change) ? "best" : "" },
      `${o.change}: ${o.gain_s ? fmtDuration(o.gain_s) + " sooner" : "no gain"}`)));
  $("#explain-section").hidden = false;
}

function renderTimeline() {
  const svg = $("#timeline");
  const res = [...state.reservations.values()].sort((a, b) => a.start_ts - b.start_ts);
  $("#no-reservations").hidden = res.length > 0;
  svg.style.display = res.length ? "block" : "none";
  if (!res.length) return;
  const now = Date.now() / 1000;
  const t0 = Math.min(now, ...res.map((r) => r.start_ts));
  const t1 = Math.max(...res.map((r) => Math.max(r.expires_ts, r.predicted_end_ts))) + 60;
  const width = svg.clientWidth || 800, rowH = 22, top = 18;
  svg.setAttribute("height", top + rowH * res.length + 8);
  svg.style.height = `${top + rowH * res.length + 8}px`;
  const ns = "http://www.w3.org/2000/svg";
  const s = (tag, attrs, text) => { const n = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); if (text !== undefined) n.textContent = text; return n; };
  // the label column is as wide as the longest label (measured), so no label is cut
  const labels = res.map((r, i) => s("text", { class: "label", x: 4, y: top + i * rowH + 14 }, `${r.job_id} (${r.num_gpus} x ${r.gpu_type})`));
  svg.replaceChildren(...labels);
  const left = Math.min(Math.max(...labels.map((t) => t.getComputedTextLength()), 60) + 14, width * 0.6);
  const x = (t) => left + (t - t0) / (t1 - t0) * (width - left - 10);
  const parts = [...labels, s("line", { class: "axis", x1: left, x2: width - 10, y1: top - 4, y2: top - 4 }),
    s("text", { x: left, y: 11 }, fmtTime(t0)), s("text", { x: width - 70, y: 11 }, fmtTime(t1)),
    s("line", { class: "now", x1: x(now), x2: x(now), y1: top - 8, y2: top + rowH * res.length })];
  res.forEach((r, i) => {
    const y = top + i * rowH;
    const bar = s("rect", { x: x(r.start_ts), y: y + 3, width: Math.max(x(r.predicted_end_ts) - x(r.start_ts), 2), height: 14, rx: 3, fill: "#60a5fa" });
    bar.append(s("title", {}, `${r.job_id}: starts ${fmtTime(r.start_ts)}, predicted end ${fmtTime(r.predicted_end_ts)}, held until ${fmtTime(r.expires_ts)}`));
    parts.push(bar, s("line", { x1: x(r.expires_ts), x2: x(r.expires_ts), y1: y + 2, y2: y + 18, stroke: "#1e3a8a" }));
  });
  svg.replaceChildren(...parts);
}

function renderTeams() {
  const total = state.teams.reduce((a, t) => a + t.usage_gpu_hours, 0) || 1;
  const shares = state.teams.reduce((a, t) => a + t.share, 0) || 1;
  $("#teams tbody").replaceChildren(...state.teams.map((t) => el("tr", { "data-team": t.team },
    el("td", {}, t.team), el("td", { class: "num" }, `${t.share}`),
    el("td", { class: "num" }, t.usage_gpu_hours.toFixed(2)),
    el("td", { class: "wide" }, el("div", { class: "share", title: `uses ${(100 * t.usage_gpu_hours / total).toFixed(1)}% of usage, entitled to ${(100 * t.share / shares).toFixed(1)}%` },
      el("div", { class: "used", style: `width:${100 * t.usage_gpu_hours / total}%` }),
      el("div", { class: "entitled", style: `left:${100 * t.share / shares}%` }))),
    el("td", { class: "num" }, t.factor.toFixed(3)),
    el("td", { class: "num" }, `${t.running_gpus}`), el("td", { class: "num" }, `${t.pending_jobs}`))));
}

function renderModel() {
  const m = state.model;
  const badge = $("#model");
  if (!m) return;
  badge.textContent = m.fallback ? "model: fallback" : `model: ${m.version}`;
  badge.className = `badge ${m.fallback ? "fallback" : "on"}`;
  badge.title = m.fallback ? `fallback: ${m.fallback_reason}` : `${m.uri} loaded ${m.loaded_at ? fmtTime(m.loaded_at) : ""}`;
  const note = $("#fallback-note");
  note.hidden = !m.fallback;
  note.textContent = m.fallback ? `Scoring with the rules-only fallback: ${m.fallback_reason}` : "";
}

// ---- data ----------------------------------------------------------------------------------
async function loadAll() {
  const [queue, reservations, teams, model] = await Promise.all([
    api("/v1/queue"), api("/v1/reservations"), api("/v1/teams"), api("/v1/models")]);
  state.jobs = new Map(queue.jobs.map((j) => [j.job_id, j]));
  state.reservations = new Map(reservations.reservations.map((r) => [r.job_id, r]));
  state.teams = teams.teams;
  state.model = model;
  state.lastSeq = Math.max(state.lastSeq, queue.last_seq);
  renderQueue(); renderTimeline(); renderTeams(); renderModel();
  $("#seq").textContent = `seq ${state.lastSeq}`;
}

function refreshTeamsSoon() {
  clearTimeout(state.teamsTimer);
  state.teamsTimer = setTimeout(async () => { state.teams = (await api("/v1/teams")).teams; renderTeams(); }, 300);
}

// start estimates come on the stream (?estimates=true): all of them after the hello, then the ones
// that moved; they carry no seq (derived state, not replayed)
function applyEstimates(msg) {
  if (msg.full) for (const job of state.jobs.values()) if (job.status === "pending") job.start_estimate = null;
  for (const [id, e] of Object.entries(msg.estimates)) { const job = state.jobs.get(id); if (job) job.start_estimate = e; }
  renderQueue();
}

function applyEvent(ev) {
  if (ev.seq <= state.lastSeq) return;
  state.lastSeq = ev.seq;
  $("#seq").textContent = `seq ${ev.seq}`;
  const data = ev.data || {};
  if (ev.kind.startsWith("job.")) {
    const isNew = !state.jobs.has(data.job.job_id);
    const before = state.jobs.get(data.job.job_id);
    if (before && data.job.start_estimate === undefined) data.job.start_estimate = before.start_estimate;
    state.jobs.set(data.job.job_id, data.job);
    renderQueue(isNew ? data.job.job_id : null);
    refreshTeamsSoon();
  } else if (ev.kind === "decision") {
    const job = state.jobs.get(ev.job_id);
    if (job) { job.decision = data.decision; renderQueue(); }
  } else if (ev.kind === "reservation.created" || ev.kind === "reservation.updated") {
    state.reservations.set(ev.job_id, data.reservation); renderTimeline();
  } else if (ev.kind === "reservation.released") {
    state.reservations.delete(ev.job_id); renderTimeline();
  } else if (ev.kind === "policy.updated") {
    refreshTeamsSoon();
  }
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${proto}://${location.host}/v1/stream?since=${state.lastSeq}&estimates=true`, ["bearer", `bearer.${state.token}`]);
  state.ws = ws;
  ws.onopen = () => { $("#conn").textContent = "live"; $("#conn").className = "badge on"; state.retryMs = 500; };
  ws.onmessage = (msg) => {
    const ev = JSON.parse(msg.data);
    if (ev.kind === "stream.hello") return;
    if (ev.kind === "start_estimates") { applyEstimates(ev); return; }
    applyEvent(ev);
  };
  ws.onclose = (e) => {
    $("#conn").textContent = e.code === 4429 ? "catching up" : "offline";
    $("#conn").className = "badge off";
    if (e.code === 1008) { showLogin("token rejected by the stream"); return; }
    setTimeout(connect, state.retryMs);  // resume from lastSeq: nothing is missed
    state.retryMs = Math.min(state.retryMs * 2, 10000);
  };
}

async function start() {
  $("#login").hidden = true;
  $("#main").hidden = false;
  try { await loadAll(); } catch (e) { if (state.token) $("#conn").textContent = "error"; console.error(e); return; }
  connect();
  setInterval(() => api("/v1/models").then((m) => { state.model = m; renderModel(); }).catch(() => {}), 30000);
}

window.addEventListener("DOMContentLoaded", () => {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) { sessionStorage.setItem("predictor-token", fromHash); history.replaceState(null, "", location.pathname); }
  state.token = sessionStorage.getItem("predictor-token");
  $("#explain-close").addEventListener("click", () => { $("#explain-section").hidden = true; });
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("#token-input").value.trim();
    sessionStorage.setItem("predictor-token", state.token);
    start();
  });
  if (state.token) start(); else showLogin();
});
