// CodeHub dashboard: one page, the REST API and its event stream, no reloads.
"use strict";

const $ = (id) => document.getElementById(id);

const state = {
  user: null,
  workspaces: new Map(), // id -> workspace object (highest version seen)
  pending: new Set(),    // ids with a request in flight from this page
  opSeen: new Map(),     // id -> {op, since}: when this page first saw the operation
  moved: new Map(),      // id -> {op, view, timer}: progress of a running archive or restore
  events: null,
  limit: null,           // {id, message}: the start the running limit refused
  stopAsk: null,         // {stop, open}: a stop asked for by link (the proxy's limit page)
  templates: null,       // name -> template the user may create workspaces of
};

// ---------- API ----------

class APIError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

// request answers {data, headers}; api answers the data alone.
async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 204) return { data: null, headers: res.headers };
  let data = null;
  try { data = await res.json(); } catch (_) { /* empty or non-JSON body */ }
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new APIError(res.status, err.code, err.message, res.headers.get("Retry-After"));
  }
  return { data, headers: res.headers };
}

async function api(method, path, body) {
  return (await request(method, path, body)).data;
}

// ---------- What each state allows (pure) ----------

const busyLabels = {
  PROVISIONING: "Preparing home directory",
  RESTORING: "Restoring from archive",
  STARTING: "Starting",
  STOPPING: "Stopping",
  ARCHIVING: "Archiving",
  CREATE_EMPTY_ARCHIVE: "Preparing archive",
  DELETING: "Deleting",
};

// stepWords says in a user's words which step of coming up or going down
// failed (error_step).
const stepWords = {
  provision: "Preparing the home directory failed",
  restore: "Restoring the home directory failed",
  archive: "Archiving failed",
  schedule: "Finding a machine to run it failed",
  pull: "Fetching the image failed",
  start: "Starting the program failed",
  health: "The program did not answer",
  stop: "Stopping failed",
};

const towards = { RUNNING: "Starting", STANDBY: "Stopping", ARCHIVED: "Archiving" };

// towardsLabel names the change a workspace waits for between operations.
function towardsLabel(ws) {
  if (ws.desired_state === "RUNNING") return "Starting";
  if (ws.phase === "PENDING") return "Preparing";
  if (ws.phase === "ARCHIVED") return "Restoring";
  return towards[ws.desired_state] || "Working";
}

// Steps shown while a workspace comes up, each done when its condition holds.
const upSteps = [
  ["storage.volume_ready", "home ready"],
  ["infra.container_ready", "process running"],
  ["infra.upstream_ready", "editor answering"],
];

function condTrue(ws, name) {
  const c = ws.conditions && ws.conditions[name];
  return !!c && c.status === "True";
}

// The API's phase is the display phase: while an operation runs it names
// the operation (STARTING, RESTORING, ...) instead of the stored phase.
const comingUp = new Set(["PROVISIONING", "RESTORING", "STARTING"]);
// The phases a workspace rests in when no operation runs.
const steady = new Set(["PENDING", "ARCHIVED", "STANDBY", "RUNNING"]);

// Words for the API's display phase; the API's values are for programs.
const phaseWords = {
  PENDING: "New",
  ARCHIVED: "Archived",
  STANDBY: "Stopped",
  RUNNING: "Running",
  ERROR: "Failed",
  PROVISIONING: "Preparing…",
  RESTORING: "Restoring…",
  STARTING: "Starting…",
  STOPPING: "Stopping…",
  ARCHIVING: "Archiving…",
  DELETING: "Deleting…",
  UNAVAILABLE: "Unavailable",
};

// retrying reports a start (or another change) whose last attempt failed
// and that the engine tries again: not ERROR, nothing running now.
function retrying(ws) {
  return !!ws.error_reason && ws.operation === "NONE" && ws.phase !== "ERROR" && ws.desired_state !== ws.phase;
}

// phaseLabel says where a workspace is, as its owner would put it.
function phaseLabel(ws) {
  if (retrying(ws)) return "Retrying…";
  const stable = steady.has(ws.phase);
  if (stable && ws.operation === "NONE" && ws.desired_state !== ws.phase) {
    // Between two operations of one transition, or about to claim one.
    return towardsLabel(ws) + "…";
  }
  return phaseWords[ws.phase] || ws.phase;
}

// actionsFor decides which buttons a workspace shows and enables.
function actionsFor(ws, pending) {
  const idle = ws.operation === "NONE" && !pending;
  // A backup yields to a start or a deletion, and an archiving follows it.
  const settable = idle || (!!ws.backup && !pending);
  const p = ws.phase;
  return {
    open: { show: p === "RUNNING" || p === "STANDBY" || comingUp.has(p) || !!ws.backup, enabled: true },
    start: { show: p === "STANDBY" || p === "PENDING" || !!ws.backup, enabled: settable && ws.desired_state !== "RUNNING" },
    stop: { show: p === "RUNNING" || p === "STOPPING", enabled: idle && ws.desired_state === "RUNNING" },
    extend: { show: p === "RUNNING" && ws.desired_state === "RUNNING", enabled: !pending },
    archive: { show: p === "STANDBY" || p === "RUNNING" || p === "ARCHIVING", enabled: settable && ws.desired_state !== "ARCHIVED" },
    restore: { show: p === "ARCHIVED", enabled: idle && ws.desired_state === "ARCHIVED" },
    del: { show: p !== "DELETING", enabled: !pending && (settable || p === "ERROR") },
  };
}

// progressFor describes what is happening, or null when nothing is.
function progressFor(ws) {
  // A home moving off an evacuated node, or waiting for its node: the
  // engine's own words name the node.
  const moving = ws.conditions && ws.conditions["storage.moving"];
  if (moving && moving.status === "True") return { label: capitalized(moving.message), steps: null };
  const volume = ws.conditions && ws.conditions["storage.volume_ready"];
  if (ws.phase === "UNAVAILABLE" && volume) return { label: capitalized(volume.message), steps: null };
  if (ws.operation !== "NONE") {
    const up = ws.operation === "STARTING" || ws.operation === "RESTORING" || ws.operation === "PROVISIONING";
    const label = ws.backup ? "Backing up" : busyLabels[ws.operation] || ws.operation;
    return { label, steps: up ? upSteps : null };
  }
  // Between two operations of one transition (ARCHIVED -> STANDBY ->
  // RUNNING) the engine is about to claim the next one.
  const stable = steady.has(ws.phase);
  if (stable && ws.desired_state !== ws.phase) {
    if (ws.error_reason) return { label: "Retrying", steps: null };
    return { label: towardsLabel(ws), steps: ws.desired_state === "RUNNING" ? upSteps : null };
  }
  return null;
}

function capitalized(s) {
  return s ? s[0].toUpperCase() + s.slice(1) : "";
}

// ---------- Rendering ----------

function relTime(iso) {
  const t = Date.parse(iso);
  if (!t) return "";
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

// exactTime is the full local date and time, shown on hover.
function exactTime(iso) {
  const t = Date.parse(iso);
  return t ? new Date(t).toLocaleString() : "";
}

// timeSpan fills el with a relative time and puts the exact one on hover.
function timeSpan(el, iso) {
  el.textContent = relTime(iso);
  el.title = exactTime(iso);
}

function bytes(n) {
  const units = ["bytes", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return i === 0 ? `${n} ${units[0]}` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

// retryText says which attempt failed and when the next one runs; the
// third failure in a row stops the workspace in ERROR (docs/api.md).
function retryText(ws) {
  const attempt = `Attempt ${ws.error_count || 1} of 3 failed.`;
  if (!ws.next_attempt_at || Date.parse(ws.next_attempt_at) <= Date.now()) return `${attempt} Trying again shortly.`;
  return `${attempt} Next attempt ${inTime(ws.next_attempt_at)}.`;
}

// inTime says how far ahead an instant is, as a person would.
function inTime(iso) {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s < 60) return "in under a minute";
  const m = Math.round(s / 60);
  if (m < 60) return `in ${m} min`;
  if (m < 24 * 60) return m % 60 ? `in ${Math.floor(m / 60)} h ${m % 60} min` : `in ${m / 60} h`;
  return `on ${new Date(Date.parse(iso)).toLocaleString()}`;
}

function duration(seconds) {
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

// timers is the card's line about idle stops: what happened last and what
// happens next if nobody uses the workspace. The title holds the exact times.
function timers(ws) {
  const said = [];
  const exact = [];
  if ((ws.phase === "STANDBY" || ws.phase === "ARCHIVED") && ws.desired_at) {
    const what = ws.phase === "ARCHIVED" ? "Archived" : "Stopped";
    if (ws.desired_by === "idle") {
      said.push(ws.phase === "ARCHIVED"
        ? `${what} after ${duration(ws.archive_ttl_seconds)} stopped`
        : `${what} after ${duration(ws.standby_ttl_seconds)} unused`);
    } else {
      said.push(`${what} by ${ws.desired_by === "admin" ? "an administrator" : "you"}`);
    }
    exact.push(`${what} ${new Date(Date.parse(ws.desired_at)).toLocaleString()}`);
  }
  const sched = scheduleText(ws);
  if (sched) {
    said.push(sched);
    if (ws.next_autostart_at) exact.push(`Next start ${new Date(Date.parse(ws.next_autostart_at)).toLocaleString()}`);
  }
  if (ws.keep_until) {
    said.push(`kept running ${inTime(ws.keep_until).replace(/^in /, "for ")}`);
  }
  if (ws.stops_at) {
    said.push(`stops ${inTime(ws.stops_at)} if unused`);
    exact.push(`Stops ${new Date(Date.parse(ws.stops_at)).toLocaleString()}`);
  } else if (ws.archives_at) {
    said.push(`archived ${inTime(ws.archives_at)} if not started`);
  }
  if (ws.archives_at) exact.push(`Archived ${new Date(Date.parse(ws.archives_at)).toLocaleString()} if left alone`);
  const text = said.join(" · ");
  return { text: text.charAt(0).toUpperCase() + text.slice(1), title: exact.join("\n") };
}

const dayLabels = { sun: "Sun", mon: "Mon", tue: "Tue", wed: "Wed", thu: "Thu", fri: "Fri", sat: "Sat" };

function scheduleText(ws) {
  const a = ws.autostart;
  if (!a) return "";
  const days = a.days.length === 7 ? "every day"
    : a.days.join(",") === "mon,tue,wed,thu,fri" ? "weekdays"
    : a.days.map((d) => dayLabels[d]).join(", ");
  const next = ws.next_autostart_at ? `, next ${inTime(ws.next_autostart_at)}` : "";
  return `starts ${days} at ${a.time} (${a.time_zone})${next}`;
}

// fillSchedule shows the stored schedule in the card's form, unless the
// user is editing it.
function fillSchedule(el, ws) {
  const form = el.querySelector(".schedule-form");
  if (form.contains(document.activeElement)) return;
  const a = ws.autostart;
  for (const box of form.querySelectorAll(".schedule-days input")) {
    box.checked = a ? a.days.includes(box.value) : ["mon", "tue", "wed", "thu", "fri"].includes(box.value);
  }
  if (a) form.querySelector(".schedule-time").value = a.time;
  const zone = form.querySelector(".schedule-zone");
  zone.value = a ? a.time_zone : (zone.value || Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
  form.querySelector(".act-schedule-remove").hidden = !a;
}

function saveSchedule(id, form) {
  const days = [...form.querySelectorAll(".schedule-days input:checked")].map((b) => b.value);
  const autostart = { days, time: form.querySelector(".schedule-time").value, time_zone: form.querySelector(".schedule-zone").value.trim() };
  return withPending(id, () => api("PATCH", `/api/v1/workspaces/${id}`, { autostart }));
}

// showFieldError shows a refused name or field next to its form; any other
// failure goes to the toast.
function showFieldError(err, errEl) {
  if (err instanceof APIError && (err.code === "INVALID_INPUT" || err.code === "NAME_TAKEN")) {
    errEl.textContent = err.message;
    errEl.hidden = false;
  } else {
    handleError(err);
  }
}

function keepRunning(id) {
  return withPending(id, () => api("POST", `/api/v1/workspaces/${id}/extend`, { hours: 2 }));
}

function elapsed(since) {
  const s = Math.round((Date.now() - since) / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${s % 60}s`;
}

function card(id) {
  let el = document.querySelector(`article[data-id="${id}"]`);
  if (el) return el;
  el = $("card-template").content.firstElementChild.cloneNode(true);
  el.dataset.id = id;
  el.querySelector(".act-start").addEventListener("click", () => setDesired(id, "RUNNING"));
  el.querySelector(".act-restore").addEventListener("click", () => setDesired(id, "RUNNING"));
  el.querySelector(".act-stop").addEventListener("click", () => setDesired(id, "STANDBY"));
  el.querySelector(".act-extend").addEventListener("click", () => keepRunning(id));
  const form = el.querySelector(".schedule-form");
  form.addEventListener("submit", (e) => { e.preventDefault(); saveSchedule(id, form); });
  el.querySelector(".act-schedule-remove").addEventListener("click", () =>
    withPending(id, () => api("PATCH", `/api/v1/workspaces/${id}`, { autostart: null })));
  el.querySelector(".act-archive").addEventListener("click", () => setDesired(id, "ARCHIVED"));
  el.querySelector(".act-delete").addEventListener("click", () => remove(id));
  el.querySelector(".act-recover").addEventListener("click", () => recover(id));
  el.querySelector(".act-open").addEventListener("click", (e) => {
    if (e.currentTarget.getAttribute("aria-disabled") === "true") e.preventDefault();
  });
  el.querySelector(".act-rename").addEventListener("click", () => startRename(id));
  el.querySelector(".rename-cancel").addEventListener("click", () => endRename(id));
  el.querySelector(".rename-form").addEventListener("submit", (e) => rename(e, id));
  el.querySelector(".archives").addEventListener("toggle", (e) => {
    if (e.currentTarget.open) loadArchives(id);
  });
  el.querySelector(".ports").addEventListener("toggle", (e) => {
    if (e.currentTarget.open) loadPorts(id);
  });
  el.querySelector(".act-ports-refresh").addEventListener("click", () => loadPorts(id));
  return el;
}

function setButton(btn, a) {
  btn.hidden = !a.show;
  if (btn.tagName === "A") btn.setAttribute("aria-disabled", String(!a.enabled));
  else btn.disabled = !a.enabled;
}

function renderCard(ws) {
  const el = card(ws.id);
  const pending = state.pending.has(ws.id);
  el.dataset.phase = ws.phase;
  el.dataset.operation = ws.operation;
  el.dataset.desired = ws.desired_state;
  el.querySelector(".ws-name").textContent = ws.name;
  el.querySelector(".ws-desc").textContent = ws.description || "";
  el.querySelector(".ws-template").textContent = ws.template === "default" && !ws.template_outdated ? "" :
    `Template ${ws.template}` + (ws.template_outdated ? " · runs an older version until its next start" : "");
  const phase = el.querySelector(".phase");
  phase.textContent = phaseLabel(ws);
  phase.className = `phase phase-${ws.phase}`;

  const prog = progressFor(ws);
  const moved = watchMove(ws);
  const progEl = el.querySelector(".progress");
  progEl.hidden = !prog;
  if (prog) {
    // The clock runs for the whole transition, across its operations.
    const seen = state.opSeen.get(ws.id);
    const key = ws.desired_state;
    if (!seen || seen.key !== key) state.opSeen.set(ws.id, { key, since: Date.now() });
    el.querySelector(".progress-text").textContent = prog.label + "…" + movedText(moved);
    const since = state.opSeen.get(ws.id).since;
    el.querySelector(".progress-time").textContent = elapsed(since);
    el.querySelector(".progress-time").title = `Since ${new Date(since).toLocaleString()}`;
    const steps = el.querySelector(".steps");
    steps.replaceChildren();
    const bar = el.querySelector(".bar");
    if (prog.steps) {
      let done = 0;
      for (const [cond, label] of prog.steps) {
        const li = document.createElement("li");
        li.textContent = label;
        if (stepDone(ws, cond)) { li.className = "done"; done++; }
        else if (cond === "storage.volume_ready" && ws.operation === "RESTORING" && moved && moved.percent != null) {
          li.textContent = `restoring home ${moved.percent}%`;
        }
        steps.append(li);
      }
      bar.classList.remove("indeterminate");
      el.querySelector(".bar-fill").style.width = `${Math.max(8, (done / prog.steps.length) * 100)}%`;
    } else if (moved && moved.percent != null) {
      bar.classList.remove("indeterminate");
      el.querySelector(".bar-fill").style.width = `${Math.max(2, moved.percent)}%`;
    } else {
      bar.classList.add("indeterminate");
      el.querySelector(".bar-fill").style.width = "";
    }
  } else {
    state.opSeen.delete(ws.id);
  }

  const errBox = el.querySelector(".error-box");
  const showErr = ws.phase === "ERROR" || (ws.error_reason && ws.operation === "NONE");
  errBox.hidden = !showErr;
  if (showErr) {
    const step = stepWords[ws.error_step];
    el.querySelector(".error-reason").textContent = (step ? `${step}: ` : "") + (ws.error_reason || "Error");
    el.querySelector(".error-message").textContent = ws.error_message || "";
    const retry = el.querySelector(".error-retry");
    retry.hidden = ws.phase === "ERROR";
    retry.textContent = retry.hidden ? "" : retryText(ws);
    retry.title = ws.next_attempt_at ? `Next attempt ${exactTime(ws.next_attempt_at)}` : "";
    el.querySelector(".act-recover").hidden = !(state.user && state.user.is_admin && ws.phase === "ERROR");
  }

  const acts = actionsFor(ws, pending);
  const open = el.querySelector(".act-open");
  open.href = ws.url || `/w/${ws.id}/`;
  setButton(open, acts.open);
  setButton(el.querySelector(".act-start"), acts.start);
  setButton(el.querySelector(".act-stop"), acts.stop);
  setButton(el.querySelector(".act-extend"), acts.extend);
  setButton(el.querySelector(".act-archive"), acts.archive);
  setButton(el.querySelector(".act-restore"), acts.restore);
  setButton(el.querySelector(".act-delete"), acts.del);

  timeSpan(el.querySelector(".created"), ws.created_at);
  timeSpan(el.querySelector(".used"), ws.last_access_at);
  const archives = el.querySelector(".archives");
  archives.hidden = !condTrue(ws, "storage.archive_ready");
  if (archives.open && el.dataset.archivedBy !== archiveMark(ws)) loadArchives(ws.id);
  fillSchedule(el, ws);
  const t = timers(ws);
  const timersEl = el.querySelector(".timers");
  timersEl.hidden = !t.text;
  timersEl.textContent = t.text;
  timersEl.title = t.title;
  return el;
}

// stepDone reports a step of coming up as done. The volume exists before a
// restore fills it, so the home is ready only once nothing writes it.
function stepDone(ws, cond) {
  if (cond === "storage.volume_ready" && (ws.operation === "RESTORING" || ws.operation === "PROVISIONING" || ws.phase === "ARCHIVED")) {
    return false;
  }
  return condTrue(ws, cond);
}

// watchMove polls the progress of a running archive or restore (the event
// stream carries changes of state, not bytes) and answers the latest one
// seen for the current operation, or null.
function watchMove(ws) {
  const moving = ws.operation === "ARCHIVING" || ws.operation === "RESTORING";
  let m = state.moved.get(ws.id);
  if (!moving || !m || m.op !== ws.operation) {
    if (m) clearTimeout(m.timer);
    state.moved.delete(ws.id);
    if (!moving) return null;
    m = { op: ws.operation, view: null, timer: 0 };
    state.moved.set(ws.id, m);
    pollMove(ws.id, m);
  }
  return m.view;
}

async function pollMove(id, m) {
  try {
    const view = await api("GET", `/api/v1/workspaces/${id}/progress`);
    if (state.moved.get(id) !== m) return;
    m.view = view;
    const ws = state.workspaces.get(id);
    if (ws) renderCard(ws);
  } catch (err) {
    // The operation goes on without its progress; try again.
  }
  if (state.moved.get(id) === m) m.timer = setTimeout(() => pollMove(id, m), 2000);
}

function movedText(v) {
  if (!v || v.bytes_done == null) return "";
  if (v.percent == null) return ` ${bytes(v.bytes_done)}`;
  return ` ${v.percent}% (${bytes(v.bytes_done)} of ${bytes(v.bytes_total)})`;
}

// archiveMark changes whenever the workspace's archives may have: a new
// archive or restore ends with a new transition time of its condition.
function archiveMark(ws) {
  const c = ws.conditions && ws.conditions["storage.archive_ready"];
  return c ? c.last_transition_time + ws.phase : "";
}

async function loadArchives(id) {
  const el = card(id);
  const ws = state.workspaces.get(id);
  if (!ws) return;
  el.dataset.archivedBy = archiveMark(ws);
  const list = el.querySelector(".archive-list");
  try {
    const { archives } = await api("GET", `/api/v1/workspaces/${id}/archives`);
    list.replaceChildren(...archives.map((a) => archiveItem(id, a)));
    if (archives.length === 0) list.textContent = "No archives.";
  } catch (err) {
    list.textContent = err instanceof APIError && err.status === 401 ? "" : "The archives could not be read: " + err.message;
    if (err instanceof APIError && err.status === 401) showLogin();
  }
}

// shareWords say who reaches a port at each level.
const shareWords = { owner: "Only me", authenticated: "Logged-in users", public: "Anyone (public)" };
const shareLevels = ["owner", "authenticated", "public"];

// loadPorts lists what the workspace listens on and what it shares, each
// with its address and a control for its share level.
async function loadPorts(id) {
  const el = card(id);
  const list = el.querySelector(".port-list");
  const note = el.querySelector(".ports-note");
  try {
    const { ports, max_share: max } = await api("GET", `/api/v1/workspaces/${id}/ports`);
    list.replaceChildren(...ports.map((p) => portItem(id, p, max)));
    const ws = state.workspaces.get(id);
    note.textContent = ports.length > 0 ? "" : ws && ws.phase === "RUNNING" ?
      "Nothing listens on a port yet. Start a server in the workspace (for example python3 -m http.server 8000), then refresh." :
      "Ports are listed while the workspace runs.";
  } catch (err) {
    list.replaceChildren();
    note.textContent = err instanceof APIError && err.status === 401 ? "" : "The ports could not be read: " + err.message;
    if (err instanceof APIError && err.status === 401) showLogin();
  }
}

function portItem(id, p, max) {
  const li = document.createElement("li");
  li.dataset.port = String(p.port);
  const link = document.createElement("a");
  link.className = "port-link";
  link.href = p.url;
  link.target = "_blank";
  link.rel = "noopener";
  link.textContent = String(p.port);
  link.title = p.url;
  const what = document.createElement("span");
  what.className = "muted port-process";
  what.textContent = p.listening ? (p.process || "") : "not listening";
  const share = document.createElement("select");
  share.className = "port-share";
  share.setAttribute("aria-label", `Who may open port ${p.port}`);
  for (const level of shareLevels) {
    const opt = document.createElement("option");
    opt.value = level;
    opt.textContent = shareWords[level];
    // Levels wider than the server allows cannot be chosen.
    opt.disabled = shareLevels.indexOf(level) > shareLevels.indexOf(max);
    share.append(opt);
  }
  share.value = p.share;
  share.addEventListener("change", async () => {
    share.disabled = true;
    try {
      await api("PUT", `/api/v1/workspaces/${id}/ports/${p.port}`, { share: share.value });
    } catch (err) {
      handleError(err);
    }
    loadPorts(id);
  });
  li.append(link, what, share);
  return li;
}

function archiveItem(id, a) {
  const li = document.createElement("li");
  const when = document.createElement("time");
  when.dateTime = a.created_at;
  when.textContent = new Date(Date.parse(a.created_at)).toLocaleDateString(undefined, { dateStyle: "medium" });
  when.title = exactTime(a.created_at);
  const size = document.createElement("span");
  size.className = "muted";
  size.textContent = bytes(a.size_bytes);
  li.append(when, size);
  if (a.current) {
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.textContent = "current";
    badge.title = "A restore reads this archive; older ones are kept a while";
    li.append(badge);
  }
  // The server checks the archive's checksum as it streams: a damaged one
  // breaks off, and the browser reports the download failed.
  const download = document.createElement("a");
  download.className = "archive-download";
  download.href = `/api/v1/workspaces/${encodeURIComponent(id)}/archives/${encodeURIComponent(a.id)}/home.tar.zst`;
  download.download = "home.tar.zst";
  download.textContent = "Download";
  download.title = "The home as a zstd-compressed tar archive";
  li.append(download);
  return li;
}

function startRename(id) {
  const el = card(id);
  const ws = state.workspaces.get(id);
  const form = el.querySelector(".rename-form");
  form.hidden = false;
  el.querySelector(".name-row").hidden = true;
  el.querySelector(".rename-error").hidden = true;
  const input = el.querySelector(".rename-input");
  input.value = ws ? ws.name : "";
  input.focus();
  input.select();
}

function endRename(id) {
  const el = card(id);
  el.querySelector(".rename-form").hidden = true;
  el.querySelector(".name-row").hidden = false;
}

async function rename(e, id) {
  e.preventDefault();
  const el = card(id);
  const name = el.querySelector(".rename-input").value.trim();
  const errEl = el.querySelector(".rename-error");
  const ws = state.workspaces.get(id);
  if (ws && ws.name === name) { endRename(id); return; }
  try {
    upsert(await api("PATCH", `/api/v1/workspaces/${id}`, { name }));
    endRename(id);
  } catch (err) {
    showFieldError(err, errEl);
  }
}

function renderAll() {
  const list = $("list");
  const sorted = [...state.workspaces.values()].sort((a, b) => (a.id < b.id ? 1 : -1));
  const wanted = sorted.map(renderCard);
  // Keep order newest first without re-creating cards.
  wanted.forEach((el, i) => {
    if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
  });
  for (const el of [...list.children]) {
    if (!state.workspaces.has(el.dataset.id)) el.remove();
  }
  $("empty").hidden = state.workspaces.size > 0;
  renderLimit();
  renderStopAsk();
}

function upsert(ws) {
  const have = state.workspaces.get(ws.id);
  if (have && have.version >= ws.version) return;
  state.workspaces.set(ws.id, ws);
  renderAll();
}

function forget(id) {
  state.workspaces.delete(id);
  state.opSeen.delete(id);
  state.moved.delete(id);
  renderAll();
}

let toastTimer = 0;
function toast(msg) {
  const t = $("toast");
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 5000);
}

// The limit banner lists the workspaces that count toward the limit, each
// with its Stop, and offers the refused start again once one stopped.
function renderLimit() {
  const lim = state.limit;
  $("limit").hidden = !lim;
  if (!lim) return;
  const running = [...state.workspaces.values()].filter((w) => w.desired_state === "RUNNING");
  $("limit-text").textContent = running.length ? "Stop one of these to make room:" : `${lim.message}. Try again when others have stopped.`;
  const list = $("limit-running");
  const kept = new Map([...list.children].map((li) => [li.dataset.id, li]));
  list.replaceChildren(...running.map((w) => {
    let li = kept.get(w.id);
    if (!li) {
      li = document.createElement("li");
      li.dataset.id = w.id;
      const name = document.createElement("span");
      name.className = "ws-ref";
      const stop = document.createElement("button");
      stop.type = "button";
      stop.className = "btn btn-small limit-stop";
      stop.addEventListener("click", () => setDesired(w.id, "STANDBY"));
      li.append(name, stop);
    }
    li.firstChild.textContent = w.name;
    li.lastChild.textContent = `Stop ${w.name}`;
    li.lastChild.disabled = state.pending.has(w.id) || w.operation !== "NONE";
    return li;
  }));
  const target = state.workspaces.get(lim.id);
  const retry = $("limit-retry");
  retry.hidden = !target || target.desired_state === "RUNNING";
  if (target) retry.textContent = `Start ${target.name}`;
}

// renderStopAsk shows the stop a link asked for (the proxy's running-limit
// page sends the user here): a link alone never stops anything.
function renderStopAsk() {
  const ask = state.stopAsk;
  const stopWs = ask && state.workspaces.get(ask.stop);
  $("stop-ask").hidden = !stopWs;
  document.querySelectorAll("article.highlight").forEach((el) => {
    if (!stopWs || el.dataset.id !== ask.stop) el.classList.remove("highlight");
  });
  if (!stopWs) return;
  card(ask.stop).classList.add("highlight");
  const open = state.workspaces.get(ask.open);
  const confirm = $("stop-ask-confirm");
  const openLink = $("stop-ask-open");
  if (stopWs.desired_state !== "RUNNING") {
    $("stop-ask-text").textContent = `${stopWs.name} is stopped.` + (open ? ` You can open ${open.name} now.` : "");
    confirm.hidden = true;
    openLink.hidden = !open;
    if (open) {
      openLink.textContent = `Open ${open.name}`;
      openLink.href = open.url || `/w/${open.id}/`;
    }
    $("stop-ask-close").textContent = "Dismiss";
    return;
  }
  $("stop-ask-text").textContent = `Stop ${stopWs.name}` + (open ? ` to make room for ${open.name}?` : "?") +
    " Its editor closes; its files stay.";
  confirm.hidden = false;
  confirm.textContent = `Stop ${stopWs.name}`;
  confirm.disabled = state.pending.has(stopWs.id) || stopWs.operation !== "NONE";
  openLink.hidden = true;
  $("stop-ask-close").textContent = "Cancel";
}

function showLimit(err, id) {
  state.limit = { id, message: (err.message || "Running limit reached").replace(/\.$/, "") };
  renderLimit();
}

function handleError(err, id) {
  if (err instanceof APIError) {
    if (err.status === 401) { showLogin(); return; }
    if (err.code === "LIMIT_EXCEEDED") { showLimit(err, id); return; }
    toast(err.message);
    return;
  }
  toast("Network error: " + err.message);
}

// ---------- Actions ----------

async function withPending(id, fn) {
  state.pending.add(id);
  const ws = state.workspaces.get(id);
  if (ws) renderCard(ws);
  try {
    const updated = await fn();
    if (updated) upsert(updated);
  } catch (err) {
    handleError(err, id);
  } finally {
    state.pending.delete(id);
    const cur = state.workspaces.get(id);
    if (cur) renderCard(cur);
  }
}

function setDesired(id, desired) {
  return withPending(id, () => api("PATCH", `/api/v1/workspaces/${id}`, { desired_state: desired }));
}

function remove(id) {
  const ws = state.workspaces.get(id);
  if (!ws || !confirm(`Delete workspace "${ws.name}" and its files? This cannot be undone.`)) return;
  return withPending(id, async () => {
    await api("DELETE", `/api/v1/workspaces/${id}`);
    forget(id);
    return null;
  });
}

function recover(id) {
  return withPending(id, () => api("POST", `/api/v1/admin/workspaces/${id}/recover`));
}

async function create(e) {
  e.preventDefault();
  const btn = $("create-submit");
  const errEl = $("create-error");
  errEl.hidden = true;
  btn.disabled = true;
  $("create-notice").hidden = true;
  try {
    const body = { name: $("create-name").value.trim() };
    const desc = $("create-description").value.trim();
    if (desc) body.description = desc;
    if (!$("create-image").hidden) body.image = $("create-image").value;
    if (!$("create-template").hidden) body.template = $("create-template").value;
    const params = readParameters();
    if (Object.keys(params).length) body.parameters = params;
    const { data: ws, headers } = await request("POST", "/api/v1/workspaces", body);
    upsert(ws);
    $("create-form").reset();
    renderParameters();
    // At a running limit the workspace is made stopped; the server says why.
    const notice = headers.get("CodeHub-Notice");
    if (notice) {
      $("create-notice").textContent = notice;
      $("create-notice").hidden = false;
    }
  } catch (err) {
    showFieldError(err, errEl);
  } finally {
    btn.disabled = false;
  }
}

// ---------- Live updates ----------

function connectEvents() {
  if (state.events) state.events.close();
  const es = new EventSource("/api/v1/events");
  state.events = es;
  const live = $("live");
  es.onopen = () => { live.textContent = "live"; live.classList.add("on"); };
  es.onerror = () => {
    live.textContent = "reconnecting";
    live.classList.remove("on");
    // A lost session closes the stream for good; find out which it was.
    if (es.readyState === EventSource.CLOSED) checkSession();
  };
  es.addEventListener("workspace_updated", (e) => upsert(JSON.parse(e.data)));
  es.addEventListener("workspace_deleted", (e) => forget(JSON.parse(e.data).id));
}

// loadImages offers an image picker where the server allows several.
async function loadImages() {
  const { default: def, images } = await api("GET", "/api/v1/images");
  const select = $("create-image");
  select.replaceChildren(...images.map((img) => {
    const o = document.createElement("option");
    o.value = img;
    o.textContent = img;
    o.selected = img === def;
    return o;
  }));
  select.hidden = images.length < 2;
  $("create-form").classList.toggle("with-image", !select.hidden);
}

// loadTemplates offers the templates the user may use; each template's
// parameters become fields built from its JSON Schema.
async function loadTemplates() {
  const { templates } = await api("GET", "/api/v1/templates");
  state.templates = new Map(templates.map((t) => [t.name, t]));
  const select = $("create-template");
  select.replaceChildren(...templates.map((t) => {
    const o = document.createElement("option");
    o.value = t.name;
    o.textContent = t.name;
    o.title = t.description;
    return o;
  }));
  select.hidden = templates.length < 2;
  select.onchange = renderParameters;
  renderParameters();
}

function renderParameters() {
  const box = $("create-params");
  const t = state.templates && state.templates.get($("create-template").value);
  const schema = t ? t.parameters : { properties: {}, required: [] };
  box.replaceChildren(...Object.entries(schema.properties).map(([name, p]) => {
    const label = document.createElement("label");
    label.className = "param";
    label.title = p.description || "";
    const caption = document.createElement("span");
    caption.textContent = (p.description || name) + (schema.required.includes(name) ? " *" : "");
    let input;
    if (p.enum) {
      input = document.createElement("select");
      input.replaceChildren(...p.enum.map((v) => {
        const o = document.createElement("option");
        o.value = v;
        o.textContent = v;
        o.selected = v === p.default;
        return o;
      }));
    } else {
      input = document.createElement("input");
      if (p.type === "boolean") {
        input.type = "checkbox";
        input.checked = p.default === true;
      } else {
        input.type = p.type === "number" ? "number" : "text";
        input.step = "any";
        if (p.minimum !== undefined) input.min = p.minimum;
        if (p.maximum !== undefined) input.max = p.maximum;
        if (p.pattern) input.pattern = p.pattern.replace(/^\^|\$$/g, "");
        if (p.default !== undefined) input.value = p.default;
        input.required = schema.required.includes(name);
      }
    }
    input.dataset.param = name;
    input.dataset.type = p.type;
    label.append(caption, input);
    return label;
  }));
}

// readParameters collects the parameter fields as JSON values; an empty
// text field is left out, so its default applies.
function readParameters() {
  const out = {};
  for (const input of $("create-params").querySelectorAll("[data-param]")) {
    const name = input.dataset.param;
    if (input.dataset.type === "boolean") out[name] = input.checked;
    else if (input.value === "") continue;
    else if (input.dataset.type === "number") out[name] = Number(input.value);
    else out[name] = input.value;
  }
  return out;
}

async function loadAll() {
  const all = [];
  let after = "";
  for (;;) {
    const page = await api("GET", `/api/v1/workspaces?limit=200${after ? "&after=" + after : ""}`);
    all.push(...page.workspaces);
    if (!page.next) break;
    after = page.next;
  }
  for (const ws of all) upsert(ws);
  renderAll();
}

// ---------- API tokens ----------

async function loadTokens() {
  const list = await api("GET", "/api/v1/tokens");
  $("token-rows").replaceChildren(...list.tokens.map(tokenRow));
  $("token-table").hidden = list.tokens.length === 0;
  $("token-empty").hidden = list.tokens.length > 0;
}

function localDate(iso) {
  return new Date(Date.parse(iso)).toLocaleDateString();
}

function tokenRow(t) {
  const tr = document.createElement("tr");
  tr.dataset.token = t.id;
  const expired = Date.parse(t.expires_at) <= Date.now();
  if (expired) tr.classList.add("token-expired");
  const cells = [
    t.name + (t.admin ? " (admin)" : ""),
    t.scope === "read" ? "read only" : "read and write",
    localDate(t.created_at),
    (expired ? "expired " : "") + localDate(t.expires_at),
    t.last_used_at ? relTime(t.last_used_at) : "never",
  ];
  for (const text of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  const td = document.createElement("td");
  const btn = document.createElement("button");
  btn.type = "button";
  btn.className = "btn btn-small btn-danger-ghost act-revoke";
  btn.textContent = "Revoke";
  btn.addEventListener("click", () => revokeToken(t));
  td.append(btn);
  tr.append(td);
  return tr;
}

async function revokeToken(t) {
  if (!confirm(`Revoke the token "${t.name}"? Programs using it stop working at once.`)) return;
  try {
    await api("DELETE", `/api/v1/tokens/${t.id}`);
  } catch (err) {
    // Already gone is what was asked for.
    if (!(err instanceof APIError && err.status === 404)) toast(err.message);
  }
  await loadTokens().catch(handleError);
}

async function loadSettings() {
  showSettings(await api("GET", "/api/v1/settings"));
}

function showSettings(v) {
  $("settings-dotfiles").value = v.dotfiles_repository;
  $("settings-token").value = "";
  $("settings-token-state").textContent = v.git_credential_set ? "A git token is stored." : "No git token is stored.";
  $("settings-token-remove").hidden = !v.git_credential_set;
}

// saveSettings sends the dotfiles repository, and the git token only when
// one was typed: an empty field keeps the stored one.
async function saveSettings(body) {
  const errEl = $("settings-error");
  errEl.hidden = true;
  $("settings-submit").disabled = true;
  try {
    showSettings(await api("PATCH", "/api/v1/settings", body));
    toast("Settings saved.");
  } catch (err) {
    errEl.textContent = err.message;
    errEl.hidden = false;
  } finally {
    $("settings-submit").disabled = false;
  }
}

// ---------- password ----------

// changePassword replaces the user's own password. The server ends every
// other session (and the tokens unless kept) and gives this browser a
// fresh session, so the page stays signed in.
async function changePassword(e) {
  e.preventDefault();
  const errEl = $("password-error");
  const btn = $("password-submit");
  errEl.hidden = true;
  btn.disabled = true;
  try {
    const keep = $("password-keep-tokens").checked;
    await api("POST", "/api/v1/password", {
      current_password: $("password-current").value,
      new_password: $("password-new").value,
      keep_tokens: keep,
    });
    $("password-form").reset();
    toast(keep ? "Password changed; other sessions ended." : "Password changed; other sessions and your API tokens ended.");
    await loadTokens();
  } catch (err) {
    errEl.textContent = err.message;
    errEl.hidden = false;
  } finally {
    btn.disabled = false;
  }
}

async function createToken(e) {
  e.preventDefault();
  const errEl = $("token-error");
  const btn = $("token-submit");
  errEl.hidden = true;
  btn.disabled = true;
  try {
    const body = {
      name: $("token-name").value.trim(),
      scope: $("token-scope").value,
      expires_in_days: Number($("token-days").value),
    };
    if (state.user && state.user.is_admin && $("token-admin").checked) body.admin = true;
    const created = await api("POST", "/api/v1/tokens", body);
    $("token-secret").textContent = created.secret;
    $("token-secret-box").hidden = false;
    $("token-form").reset();
    await loadTokens();
  } catch (err) {
    errEl.textContent = err.message;
    errEl.hidden = false;
  } finally {
    btn.disabled = false;
  }
}

async function copySecret() {
  try {
    await navigator.clipboard.writeText($("token-secret").textContent);
    toast("Token copied.");
  } catch (_) {
    toast("Select the token and copy it.");
  }
}

// The secret is shown once: closing the box forgets it.
function closeSecret() {
  $("token-secret").textContent = "";
  $("token-secret-box").hidden = true;
}

// ---------- CLI login ----------

// cliRequest reads what "codehub login" asks to approve: the loopback port
// its listener waits on, its state value, the token's name and the S256
// challenge of the verifier only that command holds, which the code is
// bound to. Anything else is no request (an older codehub sends no
// challenge). The answer only ever goes to 127.0.0.1.
function cliRequest() {
  const q = new URLSearchParams(location.search);
  const port = Number(q.get("port"));
  const st = q.get("state") || "";
  const challenge = q.get("challenge") || "";
  const name = (q.get("name") || "codehub CLI").trim().slice(0, 100);
  if (!Number.isInteger(port) || port < 1 || port > 65535 || !/^[A-Za-z0-9_-]{1,100}$/.test(st)) return null;
  if (!/^[A-Za-z0-9_-]{43}$/.test(challenge)) return null;
  return { port, state: st, name, challenge };
}

function cliCallback(req, params) {
  const q = new URLSearchParams({ ...params, state: req.state });
  return `http://127.0.0.1:${req.port}/callback?${q}`;
}

function showCliLogin(user) {
  const req = cliRequest();
  $("boot").hidden = true;
  $("login-view").hidden = true;
  $("app-view").hidden = true;
  $("signout-view").hidden = true;
  $("cli-view").hidden = false;
  $("cli-user").textContent = user.username;
  $("cli-name").textContent = req ? `"${req.name}"` : "a program";
  const errEl = $("cli-error");
  const allow = $("cli-allow");
  if (!req) {
    errEl.textContent = "This approval address is incomplete. Run codehub login again (an older codehub must be updated first).";
    errEl.hidden = false;
    allow.disabled = true;
    $("cli-deny").onclick = () => showApp(user);
    return;
  }
  allow.onclick = async () => {
    allow.disabled = true;
    errEl.hidden = true;
    try {
      const grant = await api("POST", "/api/v1/token-grants", { name: req.name, code_challenge: req.challenge });
      location.assign(cliCallback(req, { code: grant.code }));
    } catch (err) {
      errEl.textContent = err.message;
      errEl.hidden = false;
      allow.disabled = false;
    }
  };
  $("cli-deny").onclick = () => location.assign(cliCallback(req, { error: "denied" }));
  allow.focus();
}

// ---------- Views ----------

// loginTarget is where to go after logging in, or "" for the dashboard.
// The server judges next (GET /api/v1/auth/next): a path on this site, or
// in subdomain mode an address on one of the user's own workspace hosts.
// The login page is never an open redirect, and has one rule with the
// single sign-on login.
async function loginTarget() {
  const next = new URLSearchParams(location.search).get("next") || "";
  if (!next) return "";
  try {
    const target = (await api("GET", "/api/v1/auth/next?next=" + encodeURIComponent(next))).next;
    return target === "/" ? "" : target;
  } catch (_) {
    return "";
  }
}

function showLogin() {
  if (state.events) { state.events.close(); state.events = null; }
  state.user = null;
  state.workspaces.clear();
  $("boot").hidden = true;
  $("app-view").hidden = true;
  $("signout-view").hidden = true;
  $("cli-view").hidden = true;
  $("login-view").hidden = false;
  if (location.pathname === "/cli-login") {
    // Back to the approval once logged in.
    history.replaceState(null, "", "/login?next=" + encodeURIComponent("/cli-login" + location.search));
  } else if (location.pathname !== "/login") {
    history.replaceState(null, "", "/login" + location.search);
  }
  $("login-username").focus();
  offerSignIn();
}

// offerSignIn shows the ways to log in the server offers: the password
// form, single sign-on, or both.
async function offerSignIn() {
  let methods;
  try { methods = await api("GET", "/api/v1/auth/methods"); } catch (_) { return; }
  $("login-password-fields").hidden = !methods.password;
  $("login-sso").hidden = !methods.oidc;
  $("login-or").hidden = !methods.password;
  if (methods.oidc) {
    $("login-sso-link").textContent = `Sign in with ${methods.oidc.label}`;
    // The server checks next at the end of the single sign-on login too.
    const next = new URLSearchParams(location.search).get("next");
    $("login-sso-link").href = methods.oidc.login_url + (next ? "?next=" + encodeURIComponent(next) : "");
  }
}

async function showApp(user) {
  state.user = user;
  $("boot").hidden = true;
  $("login-view").hidden = true;
  $("signout-view").hidden = true;
  $("cli-view").hidden = true;
  $("app-view").hidden = false;
  $("user-name").textContent = user.username;
  $("user-admin").hidden = !user.is_admin;
  $("token-admin-label").hidden = !user.is_admin;
  $("admin-nav").hidden = !user.is_admin;
  const q = new URLSearchParams(location.search);
  if (q.get("stop")) state.stopAsk = { stop: q.get("stop"), open: q.get("open") };
  const adminPage = user.is_admin && adminPages.has(location.pathname);
  if (!adminPage && (location.pathname !== "/" || location.search)) history.replaceState(null, "", "/");
  showView(adminPage ? location.pathname : "/");
  connectEvents();
  try {
    await Promise.all([loadAll(), loadImages(), loadTokens(), loadTemplates()]);
  } catch (err) {
    handleError(err);
  }
  if (state.stopAsk && state.workspaces.has(state.stopAsk.stop)) {
    card(state.stopAsk.stop).scrollIntoView({ block: "center" });
  }
}

async function checkSession() {
  try {
    const s = await api("GET", "/api/v1/session");
    return s.user;
  } catch (err) {
    if (err instanceof APIError && err.status === 401) { showLogin(); return null; }
    throw err;
  }
}

async function login(e) {
  e.preventDefault();
  const btn = $("login-submit");
  const errEl = $("login-error");
  errEl.hidden = true;
  btn.disabled = true;
  try {
    const s = await api("POST", "/api/v1/login", {
      username: $("login-username").value.trim(),
      password: $("login-password").value,
    });
    $("login-password").value = "";
    const next = await loginTarget();
    if (next && next !== "/") { location.assign(next); return; }
    await showApp(s.user);
  } catch (err) {
    if (err instanceof APIError && err.code === "TOO_MANY_ATTEMPTS") {
      errEl.textContent = `Too many attempts. Try again in ${err.retryAfter || "a few"} seconds.`;
    } else if (err instanceof APIError && err.status === 401) {
      errEl.textContent = "Wrong username or password.";
    } else {
      errEl.textContent = err.message;
    }
    errEl.hidden = false;
  } finally {
    btn.disabled = false;
  }
}

// showSignout asks before ending the session: /logout is where a
// workspace's own "Sign out" lands, and a link alone must not sign anyone
// out. After a single sign-on login it offers to end the session at the
// identity provider too.
async function showSignout(user) {
  $("boot").hidden = true;
  $("login-view").hidden = true;
  $("app-view").hidden = true;
  $("signout-view").hidden = false;
  $("signout-cancel").onclick = () => showApp(user);
  $("signout-confirm").focus();
  const offer = await providerLogoutOffer();
  $("signout-provider").hidden = !offer;
  if (offer) $("signout-provider").textContent = `Sign out of CodeHub and ${offer.label}`;
}

// providerLogoutOffer is the identity provider whose session a logout may
// end too, or null.
async function providerLogoutOffer() {
  try {
    const offer = await api("GET", "/api/v1/auth/oidc/logout");
    return offer.offered ? offer : null;
  } catch (_) {
    return null;
  }
}

async function logout() {
  try { await api("POST", "/api/v1/logout"); } catch (_) { /* signed out either way */ }
  showLogin();
}

// logoutAtProvider ends the CodeHub session, then sends the browser to the
// identity provider to end its session; the provider sends it back to the
// dashboard.
async function logoutAtProvider() {
  let out = null;
  try { out = await api("POST", "/api/v1/auth/oidc/logout"); } catch (_) { /* signed out here either way */ }
  if (out && out.end_session_url) { location.assign(out.end_session_url); return; }
  showLogin();
}

// signOutClicked is the header's "Sign out": at once, unless there is a
// provider session to offer ending too.
async function signOutClicked() {
  if (await providerLogoutOffer()) { showSignout(state.user); return; }
  logout();
}

async function boot() {
  $("login-form").addEventListener("submit", login);
  $("create-form").addEventListener("submit", create);
  $("logout").addEventListener("click", signOutClicked);
  $("token-form").addEventListener("submit", createToken);
  $("password-form").addEventListener("submit", changePassword);
  $("settings-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const body = { dotfiles_repository: $("settings-dotfiles").value.trim() };
    const token = $("settings-token").value;
    if (token) body.git_credential = token;
    saveSettings(body);
  });
  $("settings-token-remove").addEventListener("click", () => saveSettings({ git_credential: "" }));
  $("settings").addEventListener("toggle", (e) => {
    if (e.currentTarget.open) loadSettings().catch((err) => handleError(err));
  });
  $("token-copy").addEventListener("click", copySecret);
  $("token-secret-close").addEventListener("click", closeSecret);
  $("signout-confirm").addEventListener("click", logout);
  $("signout-provider").addEventListener("click", logoutAtProvider);
  $("limit-close").addEventListener("click", () => { state.limit = null; renderLimit(); });
  $("limit-retry").addEventListener("click", () => {
    const id = state.limit && state.limit.id;
    state.limit = null;
    renderLimit();
    if (id) setDesired(id, "RUNNING");
  });
  $("stop-ask-confirm").addEventListener("click", () => {
    if (state.stopAsk) setDesired(state.stopAsk.stop, "STANDBY");
  });
  $("stop-ask-close").addEventListener("click", () => { state.stopAsk = null; renderStopAsk(); });
  // Elapsed times and "last used" stay current without events.
  setInterval(() => { if (state.user) renderAll(); }, 1000);
  try {
    const user = await checkSession();
    if (user && location.pathname === "/logout") showSignout(user);
    else if (user && location.pathname === "/cli-login") showCliLogin(user);
    else if (user) await showApp(user);
  } catch (err) {
    $("boot").textContent = "CodeHub is not reachable: " + err.message;
  }
}

document.addEventListener("DOMContentLoaded", boot);
