// hetsched dashboard: plain JavaScript over the JSON API (/v1), refreshed every 2 s.
"use strict";

const ORDER = ["pending", "assigned", "running", "succeeded", "failed", "cancelled"];
const $ = (id) => document.getElementById(id);

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

// A secured master's API wants a bearer token: given once as /ui?token=TOKEN (then kept
// in this browser and removed from the address bar) or asked for when the API answers 401.
const TOKEN_KEY = "hetsched-token";
(function takeTokenFromUrl() {
  const q = new URLSearchParams(location.search);
  const t = q.get("token");
  if (t) {
    localStorage.setItem(TOKEN_KEY, t);
    history.replaceState(null, "", location.pathname + location.hash);
  }
})();

function authed(path) {
  const t = localStorage.getItem(TOKEN_KEY);
  return fetch(path, { cache: "no-store", headers: t ? { Authorization: "Bearer " + t } : {} });
}

async function authedRetry(path) {
  let r = await authed(path);
  if (r.status === 401) {
    const t = window.prompt("This cluster needs an API token (hetsched acl token create):");
    if (t) {
      localStorage.setItem(TOKEN_KEY, t.trim());
      r = await authed(path);
    }
  }
  return r;
}

async function api(path) {
  const r = await authedRetry(path);
  const body = await r.json();
  if (!r.ok) throw new Error((body.error && body.error.message) || r.statusText);
  return body;
}

function bar(used, total, label, hot) {
  const pct = total > 0 ? Math.min(100, Math.round((100 * used) / total)) : 0;
  return `<span class="bar${hot && pct >= 90 ? " hot" : ""}" title="${pct}%"><i style="width:${pct}%"></i></span><span class="label">${esc(label)}</span>`;
}

function state(s) {
  return `<span class="state state-${esc(s)}">${esc(s)}</span>`;
}

function progress(counts, total) {
  const parts = ORDER.filter((s) => counts[s]).map(
    (s) => `<i class="p-${s}" style="width:${(100 * counts[s]) / Math.max(total, 1)}%" title="${counts[s]} ${s}"></i>`);
  return `<span class="progress">${parts.join("")}</span>`;
}

function renderOverview(status, members, nodes) {
  $("cluster").textContent =
    `leader: ${status.leader ? "master " + status.leader : "none"} · term ${status.term} · ` +
    `${status.nodes.up}/${status.nodes.total} nodes up · ${status.jobs} jobs`;
  $("masters").tBodies[0].innerHTML = members.map((m) =>
    `<tr><td>master ${m.id}</td><td>${esc(m.addr || "")}</td><td>${m.leader ? "<b>leader</b>" : m.voter ? "follower" : "learner"}</td></tr>`).join("");
  $("nodes").tBodies[0].innerHTML = nodes.map((n) => {
    const cap = n.capacity, free = n.free;
    const cpu = bar(cap.cpu_milli - free.cpu_milli, cap.cpu_milli, `${((cap.cpu_milli - free.cpu_milli) / 1000).toFixed(1)}/${cap.cpu_milli / 1000} cores`, true);
    const mem = bar(cap.mem_mib - free.mem_mib, cap.mem_mib, `${cap.mem_mib - free.mem_mib}/${cap.mem_mib} MiB`, true);
    const gpuCap = cap.gpus.length * 1000;
    const gpuFree = free.gpus.reduce((a, g) => a + g.free_milli, 0);
    const gpu = cap.gpus.length === 0 ? '<span class="dim">none</span>'
      : bar(gpuCap - gpuFree, gpuCap, `${((gpuCap - gpuFree) / 1000).toFixed(1)}/${cap.gpus.length} ${cap.gpus[0].model}`, true) +
        (n.gpus_emulated ? '<span class="emulated">EMULATED</span>' : "");
    const st = n.draining ? `${n.state}, draining` : n.state;
    return `<tr><td><a href="#node-${n.id}">${esc(n.name)}</a> <span class="dim">node-${n.id}</span></td><td>${esc(st)}</td><td>${n.tasks}</td><td>${cpu}</td><td>${mem}</td><td>${gpu}</td></tr>`;
  }).join("");
  $("queues").innerHTML = ORDER.map((s) =>
    `<span class="queue">${state(s)} <b>${status.tasks[s] || 0}</b></span>`).join("");
}

function renderJobs(jobs) {
  $("jobs").tBodies[0].innerHTML = jobs.map((j) =>
    `<tr id="job-row-${j.id}"><td><a href="#job-${j.id}">job-${j.id}</a></td><td class="job-name">${esc(j.name)}</td><td>${esc(j.user)}</td>` +
    `<td class="job-state">${state(j.state)}</td><td>${progress(j.task_states, j.tasks)} <span class="dim">${j.task_states.succeeded || 0}/${j.tasks}</span></td>` +
    `<td>${new Date(j.submitted_ms).toLocaleTimeString()}</td></tr>`).join("") ||
    '<tr><td colspan="6" class="dim">no jobs</td></tr>';
}

// One small plot: `series` are [label, colour, values], values in [0, max]; `span` what the
// x axis covers.
function plot(title, series, max, fmt, span = "last hour") {
  const w = 260, h = 56;
  const n = Math.max(2, ...series.map((s) => s[2].length));
  const lines = series.map(([, colour, v]) => {
    const pts = v.map((y, i) => `${((i * w) / (n - 1)).toFixed(1)},${(h - (h * Math.min(y, max)) / Math.max(max, 1e-9)).toFixed(1)}`);
    return `<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${pts.join(" ")}"/>`;
  }).join("");
  const legend = series.map(([label, colour, v]) =>
    `<i style="background:${colour}"></i>${esc(label)} ${v.length ? fmt(v[v.length - 1]) : "-"}`).join("");
  return `<div class="plot"><div class="title">${esc(title)} <span class="dim">${esc(span)}, max ${fmt(max)}</span></div>` +
    `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><rect width="${w}" height="${h}" fill="#f9fafb"/>${lines}</svg>` +
    `<div class="legend dim">${legend}</div></div>`;
}

function renderPlots(history) {
  const pending = history.map((s) => Object.values(s.queues).reduce((a, b) => a + b, 0));
  const queued = history.map((s) => s.queued);
  const pct = (x) => `${Math.round(100 * x)}%`;
  $("plots").innerHTML =
    plot("Queue lengths", [["pending", "#e76f51", pending], ["in slave queues", "#264653", queued]],
      Math.max(1, ...pending, ...queued), (x) => String(Math.round(x))) +
    plot("Allocation", [["CPU", "#2a9d8f", history.map((s) => s.cpu_alloc)], ["GPU", "#7c3aed", history.map((s) => s.gpu_alloc)]],
      1, pct);
}

function renderWaiting(tasks) {
  const waiting = tasks.filter((t) => t.waiting);
  const by = {};
  waiting.forEach((t) => { by[t.waiting.reason] = (by[t.waiting.reason] || 0) + 1; });
  $("waiting-summary").innerHTML = Object.keys(by).sort().map((r) =>
    `<span class="queue"><span class="reason">${esc(r)}</span> <b>${by[r]}</b></span>`).join("");
  $("waiting").tBodies[0].innerHTML = waiting.map((t) =>
    `<tr id="waiting-task-${t.id}"><td><a href="#task-${t.id}">task-${t.id}</a></td><td><a href="#job-${t.job_id}">job-${t.job_id}</a></td>` +
    `<td>${esc(t.user)}</td><td class="reason">${esc(t.waiting.reason)}</td><td class="why">${esc(t.waiting.detail)}</td></tr>`).join("") ||
    '<tr><td colspan="5" class="dim">no task waits</td></tr>';
}

function limits(q, held) {
  if (!q) return '<span class="dim">no entry (base priority)</span>';
  const parts = [];
  if (q.cpus != null) parts.push(bar(held.cpus, q.cpus, `cpus ${held.cpus}/${q.cpus}`, true));
  if (q.mem != null) parts.push(bar(held.mem, q.mem, `mem ${held.mem}/${q.mem} MiB`, true));
  if (q.gpus != null) parts.push(bar(held.gpus, q.gpus, `gpus ${held.gpus}/${q.gpus}`, true));
  return parts.join("<br>") || '<span class="dim">no limit</span>';
}

function renderUsage(users) {
  $("usage").tBodies[0].innerHTML = users.map((u) =>
    `<tr class="usage-row"><td>${esc(u.user)}</td><td>${esc(u.partition)}</td><td>${u.priority}</td>` +
    `<td>${u.quota_of ? "quota " + esc(u.quota_of) + "<br>" : ""}${limits(u.quota, u.quota_used)}</td>` +
    `<td>cpus ${u.held.cpus}, mem ${u.held.mem} MiB, gpus ${u.held.gpus}</td>` +
    `<td>${bar(u.dominant_share, 1, `${(100 * u.dominant_share).toFixed(1)}%`, false)}</td><td>${u.waiting}</td></tr>`).join("") ||
    '<tr><td colspan="7" class="dim">no users yet</td></tr>';
}

async function renderTaskPage(id) {
  const e = await api(`/v1/tasks/${id}/explain`);
  const tasks = e.job_id ? await api(`/v1/tasks?job=${e.job_id}`) : [];
  const t = tasks.find((x) => x.id === Number(id)) || {};
  $("task-title").innerHTML = `task-${e.task} · <a href="#job-${e.job_id}">job-${e.job_id}</a> · ${state(e.state)}`;
  const w = e.waiting;
  $("task-summary").innerHTML = `<p class="summary">` +
    (w ? `<span>waiting: <span class="reason">${esc(w.reason)}</span> — <span class="why">${esc(w.detail)}</span></span>` : "<span>not waiting</span>") +
    (e.queue_position ? `<span>queue position <b>${e.queue_position}</b></span>` : "") + `</p>` +
    `<p class="summary"><span>priority ${t.priority ?? "?"}</span><span>attempt ${t.attempt ?? 0}</span><span>failures ${t.failures ?? 0}</span>` +
    `<span>preemptions ${t.preemptions ?? 0}</span><span>last end: ${esc(t.reason || "-")}</span></p>` +
    `<p class="summary">preemption: ${e.preemption.possible ? "<b>possible</b>" : "no"} — ${esc(e.preemption.detail)}</p>`;
  const rows = [];
  if (e.submitted_ms) rows.push([e.submitted_ms, "submitted (pending)"]);
  e.attempts.forEach((a) => rows.push([null, `attempt ${a.attempt} assigned to <a href="#node-${a.node}">node-${a.node}</a>`]));
  if (e.started_ms) rows.push([e.started_ms, `attempt ${t.attempt} started`]);
  if (t.not_before_ms) rows.push([t.not_before_ms, "retry not before"]);
  if (t.reason) rows.push([null, `attempt ${t.attempt} ended: ${esc(t.reason)}${t.exit_code != null ? ", exit " + t.exit_code : ""}`]);
  rows.push([null, `now ${esc(e.state)}${w ? ", waiting for " + esc(w.reason) : ""}`]);
  $("task-history").tBodies[0].innerHTML = rows.map(([ms, what]) =>
    `<tr><td>${ms ? new Date(ms).toLocaleTimeString() : ""}</td><td>${what}</td></tr>`).join("");
  $("task-nodes").tBodies[0].innerHTML = e.nodes.map((n) =>
    `<tr><td><a href="#node-${n.node}">${esc(n.name)}</a></td><td class="${n.verdict === "fits" ? "fits" : "fails"}">${esc(n.verdict)}</td><td>${esc(n.detail)}</td></tr>`).join("");
  const log = $("task-log");
  if ((t.attempt || 0) > 0) {
    const r = await fetch(`/v1/tasks/${id}/logs`, { cache: "no-store" });
    const text = r.ok ? await r.text() : `(${r.status}) ${await r.text()}`;
    log.textContent = text.split("\n").slice(-40).join("\n");
  } else {
    log.textContent = "(no attempt yet)";
  }
}

async function renderNodePage(id, nodes) {
  const n = nodes.find((x) => x.id === Number(id));
  if (!n) { $("node-title").textContent = `node-${id}: not registered`; return; }
  $("node-title").innerHTML = `${esc(n.name)} · node-${n.id} · ${esc(n.draining ? n.state + ", draining" : n.state)}`;
  $("node-summary").innerHTML = `<p class="summary"><span>address ${esc(n.addr)}</span><span>partitions ${esc((n.partitions.length ? n.partitions : ["default"]).join(", "))}</span>` +
    `<span>cpus ${(n.free.cpu_milli / 1000).toFixed(1)}/${n.capacity.cpu_milli / 1000} free</span><span>mem ${n.free.mem_mib}/${n.capacity.mem_mib} MiB free</span>` +
    `<span>GPU pool ${esc(n.gpu_pool || "-")}</span></p>` +
    `<p class="summary"><span>local queue <b>${n.queued}</b></span><span>steals in ${n.steals_in}, out ${n.steals_out}</span>` +
    `<span>probes: gpu ${esc(n.probes.gpu)}, membw ${esc(n.probes.membw)}</span><span>cgroup ${esc(n.cgroup)}</span></p>`;
  $("node-engines").tBodies[0].innerHTML = n.engines.map((e) =>
    `<tr><td>${esc(e.kind)}</td><td>${e.free}/${e.count}</td><td>${e.emulated ? '<span class="emulated">EMULATED</span>' : ""}</td></tr>`).join("");
  const tasks = (await api("/v1/tasks?limit=1000")).filter((t) => t.node === n.id && (t.state === "running" || t.state === "assigned"));
  $("node-tasks").tBodies[0].innerHTML = tasks.map((t) =>
    `<tr><td><a href="#task-${t.id}">task-${t.id}</a></td><td><a href="#job-${t.job_id}">job-${t.job_id}</a></td><td>${state(t.state)}</td><td>${t.cpus}</td>` +
    `<td>${t.waiting ? `<span class="reason">${esc(t.waiting.reason)}</span> <span class="why">${esc(t.waiting.detail)}</span>` : ""}</td></tr>`).join("") ||
    '<tr><td colspan="5" class="dim">no tasks</td></tr>';
}

// Issue 51: what a job follows (linked) and the open jobs that follow it.
function dependsHtml(job) {
  const links = (ids) => (ids || []).map((j) => `<a href="#job-${j}">job-${j}</a>`).join(", ");
  const parts = [];
  for (const [key, label] of [["after", "after"], ["after_any", "after any"], ["after_fail", "after fail"]]) {
    if ((job[key] || []).length) parts.push(`${label} ${links(job[key])}`);
  }
  if (job.after_each != null) parts.push(`task by task after ${links([job.after_each])}`);
  if (parts.length && job.after_mode === "any") parts.push("(any one is enough)");
  if (job.singleton) parts.push("singleton");
  if (job.max_running != null) parts.push(`at most ${job.max_running} running`);
  if ((job.dependents || []).length) parts.push(`followed by ${links(job.dependents)}`);
  return parts.length ? "depends: " + parts.join(" · ") : "";
}

// Issue 51: a flow's steps. Each step's column is its depth (one more than the deepest step
// it follows); a column draws at most FLOW_ROWS boxes and counts the rest.
const FLOW_ROWS = 30;
const FLOW_FILL = { pending: "#fde68a", assigned: "#bfdbfe", running: "#93c5fd", succeeded: "#bbf7d0",
  failed: "#fecaca", cancelled: "#e5e7eb", collected: "#f3f4f6" };

function upstream(s) {
  return [...(s.needs || []), ...(s.needs_any || []), ...(s.needs_fail || []), ...(s.each ? [s.each] : [])];
}

function needsText(s) {
  const parts = [];
  if ((s.needs || []).length) parts.push(s.needs.join(", "));
  if ((s.needs_any || []).length) parts.push("any end of " + s.needs_any.join(", "));
  if ((s.needs_fail || []).length) parts.push("failure of " + s.needs_fail.join(", "));
  if (s.each) parts.push("task by task " + s.each);
  return parts.join(" · ");
}

function flowGraph(steps) {
  const byName = new Map(steps.map((s) => [s.name, s]));
  const depth = new Map();
  const depthOf = (s, seen) => {
    if (depth.has(s.name)) return depth.get(s.name);
    if (seen.has(s.name)) return 0; // a cycle is refused at submission; never loop here
    seen.add(s.name);
    const d = Math.max(-1, ...upstream(s).filter((n) => byName.has(n)).map((n) => depthOf(byName.get(n), seen))) + 1;
    depth.set(s.name, d);
    return d;
  };
  const columns = [];
  steps.forEach((s) => { const d = depthOf(s, new Set()); (columns[d] = columns[d] || []).push(s); });
  const bw = 150, bh = 24, gx = 60, gy = 10;
  const at = new Map();
  const boxes = [];
  columns.forEach((col, c) => {
    col.slice(0, FLOW_ROWS).forEach((s, r) => {
      const x = 10 + c * (bw + gx), y = 10 + r * (bh + gy);
      at.set(s.name, { x, y });
      boxes.push(`<a href="#job-${s.job_id}"><g class="flow-step" data-step="${esc(s.name)}"><title>${esc(s.name)}: job-${s.job_id} ${esc(s.state)}</title>` +
        `<rect x="${x}" y="${y}" width="${bw}" height="${bh}" rx="4" fill="${FLOW_FILL[s.state] || "#fff"}" stroke="#6b7280"/>` +
        `<text x="${x + 6}" y="${y + 16}" font-size="12">${esc(s.name.length > 14 ? s.name.slice(0, 13) + "…" : s.name)} · ${esc(s.state)}</text></g></a>`);
    });
    if (col.length > FLOW_ROWS) {
      const x = 10 + c * (bw + gx), y = 10 + FLOW_ROWS * (bh + gy);
      boxes.push(`<text x="${x + 6}" y="${y + 16}" font-size="12">+${col.length - FLOW_ROWS} more steps</text>`);
    }
  });
  const edges = [];
  steps.forEach((s) => {
    const to = at.get(s.name);
    if (!to) return;
    upstream(s).forEach((n) => {
      const from = at.get(n);
      if (!from) return;
      const dash = s.each === n ? ' stroke-dasharray="4 3"' : "";
      edges.push(`<line x1="${from.x + bw}" y1="${from.y + bh / 2}" x2="${to.x}" y2="${to.y + bh / 2}" stroke="#9ca3af"${dash}/>`);
    });
  });
  const rows = Math.min(FLOW_ROWS + 1, Math.max(1, ...columns.map((c) => c.length)));
  const w = 20 + columns.length * (bw + gx) - gx, h = 20 + rows * (bh + gy) - gy;
  return `<svg id="flow-svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><rect width="${w}" height="${h}" fill="#fff"/>${edges.join("")}${boxes.join("")}</svg>`;
}

async function renderFlowPage(id) {
  const f = await api(`/v1/flows/${id}`);
  const counts = {};
  f.steps.forEach((s) => { counts[s.state] = (counts[s.state] || 0) + 1; });
  $("flow-title").textContent = `flow-${f.flow_id} of ${f.user}`;
  $("flow-summary").innerHTML = `<p class="summary"><span>${f.steps.length} steps</span>` +
    Object.keys(counts).sort().map((s) => `<span>${state(s)} ${counts[s]}</span>`).join("") +
    `<span>submitted ${new Date(f.submitted_ms).toLocaleTimeString()}</span></p>`;
  $("flow-graph").innerHTML = flowGraph(f.steps);
  $("flow-steps").tBodies[0].innerHTML = f.steps.map((s) =>
    `<tr id="flow-step-${esc(s.name)}"><td>${esc(s.name)}</td><td><a href="#job-${s.job_id}">job-${s.job_id}</a></td>` +
    `<td>${state(s.state)}</td><td>${s.tasks}</td><td class="needs">${esc(needsText(s))}</td></tr>`).join("");
}

// Issue 53: accounting. Each record's numbers as the dashboard shows them: null readings stay
// "-" (never 0), emulated GPU seconds are labelled.
const num = (x, digits) => (x == null ? "-" : Number(x).toFixed(digits));
const pctOf = (used, asked) => (used == null || !asked ? "-" : `${Math.round((100 * used) / asked)}%`);
const COLOURS = ["#2a9d8f", "#e76f51", "#264653", "#7c3aed", "#e9c46a", "#f4a261", "#6b7280", "#0ea5e9"];

// Per job: attempts, CPU-hours asked (CPUs × wall) and used (measured), GPU-hours.
function jobTotals(recs) {
  const jobs = {};
  recs.forEach((r) => {
    const j = jobs[r.job] || (jobs[r.job] = { job: r.job, user: r.user, attempts: 0, asked: 0, used: 0, measured: 0, gpu: 0, emulated: false });
    j.attempts += 1;
    if (r.elapsed_s != null) j.asked += (r.elapsed_s * r.cpus) / 3600;
    if (r.elapsed_s != null && r.cpu_s != null) { j.used += r.cpu_s / 3600; j.measured += (r.elapsed_s * r.cpus) / 3600; }
    if (r.gpu_s != null) j.gpu += r.gpu_s / 3600;
    j.emulated = j.emulated || r.gpu_emulated;
  });
  return Object.values(jobs);
}

function jobRows(list, kind) {
  return list.map((j) =>
    `<tr id="${kind}-job-${j.job}"><td><a href="#job-${j.job}">job-${j.job}</a></td><td>${esc(j.user)}</td><td>${j.attempts}</td>` +
    `<td>${j.asked.toFixed(3)}</td><td>${j.measured ? j.used.toFixed(3) : "-"}</td>` +
    `<td>${j.gpu.toFixed(3)}${j.emulated && j.gpu ? " (emulated)" : ""}</td><td>${j.measured ? pctOf(j.used, j.measured) : "-"}</td></tr>`).join("") ||
    '<tr><td colspan="7" class="dim">no ended attempts</td></tr>';
}

// Usage per user over the last 24 h (CPU-hours by the hour they ended in), the heaviest and
// least efficient jobs, each user's fair-share factor. Read every 30 s, not every refresh.
let acctAt = 0;
async function renderAccounting() {
  if (Date.now() - acctAt < 30000) return;
  acctAt = Date.now();
  let h, u;
  try {
    [h, u] = await Promise.all([api("/v1/accounting/history?since=24h"), api("/v1/accounting/usage?since=24h")]);
  } catch (e) {
    $("acct-plot").innerHTML = `<p class="dim">accounting unavailable: ${esc(e.message)}</p>`;
    return;
  }
  const recs = h.records || [];
  const hours = 24, now = Date.now();
  const users = [...new Set(recs.map((r) => r.user))].sort().slice(0, COLOURS.length);
  const series = users.map((user, i) => {
    const v = new Array(hours).fill(0);
    recs.filter((r) => r.user === user && r.elapsed_s != null).forEach((r) => {
      const b = hours - 1 - Math.floor((now - r.ended_ms) / 3600000);
      if (b >= 0 && b < hours) v[b] += (r.elapsed_s * r.cpus) / 3600;
    });
    return [user, COLOURS[i], v];
  });
  const max = Math.max(1e-3, ...series.flatMap((s) => s[2]));
  $("acct-plot").innerHTML = plot("CPU-hours per user, by hour", series, max, (x) => x.toFixed(3), "last 24 h");
  const jobs = jobTotals(recs);
  const heavy = [...jobs].sort((a, b) => b.asked + b.gpu - (a.asked + a.gpu) || a.job - b.job).slice(0, 5);
  const wasteful = jobs.filter((j) => j.measured > 0).sort((a, b) => a.used / a.measured - b.used / b.measured || a.job - b.job).slice(0, 5);
  $("heavy-jobs").tBodies[0].innerHTML = jobRows(heavy, "heavy");
  $("inefficient-jobs").tBodies[0].innerHTML = jobRows(wasteful, "inefficient");
  const off = u.half_life_ms == null;
  $("fair-share").tBodies[0].innerHTML = (u.fair_share || []).map((f) =>
    `<tr class="fair-share-row"><td>${esc(f.user)}</td><td>${num(f.decayed_usage, 1)}</td><td>${num(f.share, 3)}</td>` +
    `<td>${bar(f.factor, 1, num(f.factor, 3), false)}</td></tr>`).join("") ||
    `<tr><td colspan="4" class="dim">${off ? "fair share off (--fairshare-half-life off)" : "no usage yet: every factor is 1"}</td></tr>`;
}

// A job's page: the usage of each of its ended attempts.
async function renderJobUsage(jobId) {
  let h;
  try {
    h = await api(`/v1/accounting/history?job=${jobId}`);
  } catch (e) {
    $("job-usage").tBodies[0].innerHTML = `<tr><td colspan="9" class="dim">${esc(e.message)}</td></tr>`;
    return;
  }
  $("job-usage").tBodies[0].innerHTML = (h.records || []).map((r) =>
    `<tr class="job-usage-row"><td>task-${r.task}.${r.attempt}</td><td>node-${r.node}</td><td>${esc(r.state)}${r.reason ? " (" + esc(r.reason) + ")" : ""}</td>` +
    `<td>${num(r.elapsed_s, 1)}</td><td>${r.cpus}</td><td>${num(r.cpu_s, 2)}</td><td>${r.elapsed_s ? pctOf(r.cpu_s, r.elapsed_s * r.cpus) : "-"}</td>` +
    `<td>${r.max_mem_mib ?? "-"}</td><td>${num(r.gpu_s, 1)}${r.gpu_emulated && r.gpu_s ? " (emulated)" : ""}</td></tr>`).join("") ||
    '<tr><td colspan="9" class="dim">no attempt ended yet</td></tr>';
}

async function renderDetail(route) {
  const detail = $("detail");
  if (!route) { detail.hidden = true; return; }
  detail.hidden = false;
  const jobId = route.job;
  const job = await api(`/v1/jobs/${jobId}`);
  $("detail-title").innerHTML = `job-${job.id} · ${esc(job.name)} · ${state(job.state)}`;
  $("detail-progress").innerHTML = progress(job.task_states, job.tasks) +
    ` <span class="dim">${ORDER.filter((s) => job.task_states[s]).map((s) => job.task_states[s] + " " + s).join(", ")}</span>`;
  const flow = job.flow_id != null ? `step of <a href="#flow-${job.flow_id}">flow-${job.flow_id}</a>` : "";
  $("detail-deps").innerHTML = [flow, dependsHtml(job)].filter((x) => x).join(" · ");
  const tasks = await api(`/v1/tasks?job=${jobId}`);
  await renderJobUsage(jobId);
  $("tasks").tBodies[0].innerHTML = tasks.map((t) =>
    `<tr><td><a href="#job-${jobId}/task-${t.id}">task-${t.id}</a> <a class="dim" href="#task-${t.id}">why</a></td><td>${t.index}</td><td>${state(t.state)}</td>` +
    `<td>${t.waiting ? `<span class="reason">${esc(t.waiting.reason)}</span>` : esc(t.reason || "")}</td>` +
    `<td>${t.node ? "node-" + t.node : ""}</td><td>${t.attempt}</td><td>${t.exit_code ?? ""}</td></tr>`).join("");
  const log = $("log"), title = $("log-title");
  if (route.task) {
    const r = await authed(`/v1/tasks/${route.task}/logs`);
    title.hidden = log.hidden = false;
    title.textContent = `task-${route.task} output`;
    log.textContent = r.ok ? await r.text() : `(${r.status}) ${await r.text()}`;
  } else {
    title.hidden = log.hidden = true;
  }
}

function route() {
  const m = location.hash.match(/^#job-(\d+)(?:\/task-(\d+))?$/);
  return m ? { job: m[1], task: m[2] } : null;
}

// `#task-N`, `#node-N` and `#flow-N` are pages of their own; the rest is the main page.
function page() {
  const m = location.hash.match(/^#(task|node|flow)-(\d+)$/);
  return m ? { kind: m[1], id: m[2] } : null;
}

async function refresh() {
  try {
    // Reasons and usage are the leader's (not in the log): asked without ?stale.
    const [status, members, nodes, jobs, pending, assigned, usage] = await Promise.all([
      api("/v1/status?stale=true"), api("/v1/members?stale=true"), api("/v1/nodes?stale=true"), api("/v1/jobs?stale=true&limit=50"),
      api("/v1/tasks?state=pending&limit=200"), api("/v1/tasks?state=assigned&limit=200"), api("/v1/usage"),
    ]);
    const p = page();
    $("overview").hidden = $("jobs-section").hidden = p !== null;
    $("task-page").hidden = !(p && p.kind === "task");
    $("node-page").hidden = !(p && p.kind === "node");
    $("flow-page").hidden = !(p && p.kind === "flow");
    renderOverview(status, members, nodes);
    $("insecure").hidden = !status.insecure;
    renderPlots(usage.history);
    renderWaiting(pending.concat(assigned));
    renderUsage(usage.users);
    if (p === null) await renderAccounting();
    renderJobs(jobs);
    if (p && p.kind === "task") await renderTaskPage(p.id);
    if (p && p.kind === "node") await renderNodePage(p.id, nodes);
    if (p && p.kind === "flow") await renderFlowPage(p.id);
    await renderDetail(p ? null : route());
    $("error").hidden = true;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("error").hidden = false;
    $("error").textContent = "cannot reach the API: " + e.message;
  }
}

window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, 2000);
