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
    return `<tr><td>${esc(n.name)} <span class="dim">node-${n.id}</span></td><td>${esc(st)}</td><td>${n.tasks}</td><td>${cpu}</td><td>${mem}</td><td>${gpu}</td></tr>`;
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

async function renderDetail(route) {
  const detail = $("detail");
  if (!route) { detail.hidden = true; return; }
  detail.hidden = false;
  const jobId = route.job;
  const job = await api(`/v1/jobs/${jobId}`);
  $("detail-title").innerHTML = `job-${job.id} · ${esc(job.name)} · ${state(job.state)}`;
  $("detail-progress").innerHTML = progress(job.task_states, job.tasks) +
    ` <span class="dim">${ORDER.filter((s) => job.task_states[s]).map((s) => job.task_states[s] + " " + s).join(", ")}</span>`;
  const tasks = await api(`/v1/tasks?job=${jobId}`);
  $("tasks").tBodies[0].innerHTML = tasks.map((t) =>
    `<tr><td><a href="#job-${jobId}/task-${t.id}">task-${t.id}</a></td><td>${t.index}</td><td>${state(t.state)}</td><td>${esc(t.reason || "")}</td>` +
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

async function refresh() {
  try {
    const [status, members, nodes, jobs] = await Promise.all([
      api("/v1/status?stale=true"), api("/v1/members?stale=true"), api("/v1/nodes?stale=true"), api("/v1/jobs?stale=true&limit=50"),
    ]);
    renderOverview(status, members, nodes);
    $("insecure").hidden = !status.insecure;
    renderJobs(jobs);
    await renderDetail(route());
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
