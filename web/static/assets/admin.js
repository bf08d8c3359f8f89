// CodeHub dashboard, admin pages: users, every workspace, the nodes, the
// templates and their prebuilt homes, the audit log.
// It uses app.js's helpers ($, api, APIError, toast, relTime, exactTime,
// bytes) and shares its global scope: its names must not repeat app.js's.
"use strict";

const adminPages = new Set(["/admin/users", "/admin/workspaces", "/admin/nodes", "/admin/templates", "/admin/audit"]);

const adminState = {
  users: [],           // from /api/v1/admin/users
  wsNext: null,        // next page of the workspace list
  auditNext: null,     // next page of the audit log
  nodesTimer: 0,       // refreshes the nodes page while it shows
  templatesTimer: 0,   // refreshes the templates page while it shows
};

// showView shows the home page ("/") or one admin page.
function showView(path) {
  const admin = adminPages.has(path);
  $("home-view").hidden = admin;
  $("admin-view").hidden = !admin;
  $("admin-users").hidden = path !== "/admin/users";
  $("admin-workspaces").hidden = path !== "/admin/workspaces";
  $("admin-nodes").hidden = path !== "/admin/nodes";
  $("admin-templates").hidden = path !== "/admin/templates";
  clearInterval(adminState.nodesTimer);
  clearInterval(adminState.templatesTimer);
  // Homes move and prebuilds build while the page shows: follow them.
  if (path === "/admin/nodes") adminState.nodesTimer = setInterval(loadNodes, 5000);
  if (path === "/admin/templates") adminState.templatesTimer = setInterval(loadAdminTemplates, 5000);
  $("admin-audit").hidden = path !== "/admin/audit";
  for (const a of $("admin-nav").querySelectorAll("a")) {
    if (a.getAttribute("href") === path) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!admin) return;
  loadUsers().then(() => {
    if (path === "/admin/users") renderUsers();
    if (path === "/admin/workspaces") loadAllWorkspaces(false);
    if (path === "/admin/nodes") loadNodes();
    if (path === "/admin/templates") loadAdminTemplates();
    if (path === "/admin/audit") loadAudit(false);
  }).catch((err) => toast(err.message));
}

async function loadUsers() {
  adminState.users = (await api("GET", "/api/v1/admin/users")).users;
  fillUserSelect($("ws-filter-owner"), "every owner");
  fillUserSelect($("audit-user"), "every user");
}

function fillUserSelect(sel, all) {
  const keep = sel.value;
  sel.replaceChildren(new Option(all, ""));
  for (const u of adminState.users) sel.add(new Option(u.username, u.id));
  sel.value = keep;
}

function username(id) {
  const u = adminState.users.find((x) => x.id === id);
  return u ? u.username : id;
}

function cell(row, text, title) {
  const td = row.insertCell();
  td.textContent = text;
  if (title) td.title = title;
  return td;
}

function smallButton(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "btn btn-small";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

// ---------- Users ----------

function renderUsers() {
  const body = $("users-body");
  body.replaceChildren();
  for (const u of adminState.users) {
    const row = body.insertRow();
    row.dataset.user = u.username;
    cell(row, u.username);
    cell(row, u.sign_in === "oidc" ? "single sign-on" : "password");
    cell(row, u.is_admin ? "administrator" : "user");
    cell(row, u.disabled ? "disabled" : "active");
    cell(row, relTime(u.created_at), exactTime(u.created_at));
    const actions = row.insertCell();
    if (u.id === state.user.id) continue;
    actions.append(
      smallButton(u.disabled ? "Enable" : "Disable", () => patchUser(u, { disabled: !u.disabled })),
      smallButton(u.is_admin ? "Remove admin" : "Make admin", () => patchUser(u, { is_admin: !u.is_admin })),
    );
    if (u.sign_in === "password") {
      actions.append(smallButton("Reset password", () => {
        const password = prompt(`New password for ${u.username} (8 characters or more):`);
        if (password) patchUser(u, { password });
      }));
    }
  }
}

async function patchUser(u, change) {
  try {
    await api("PATCH", `/api/v1/admin/users/${u.id}`, change);
    toast(change.password ? `Password of ${u.username} changed; their sessions ended.` : `${u.username} updated.`);
    await loadUsers();
    renderUsers();
  } catch (err) {
    toast(err.message);
  }
}

async function createUser(e) {
  e.preventDefault();
  const errEl = $("user-create-error");
  errEl.hidden = true;
  try {
    await api("POST", "/api/v1/admin/users", {
      username: $("user-create-name").value.trim(),
      password: $("user-create-password").value,
      is_admin: $("user-create-admin").checked,
    });
    e.target.reset();
    await loadUsers();
    renderUsers();
  } catch (err) {
    errEl.textContent = err.message;
    errEl.hidden = false;
  }
}

// ---------- All workspaces ----------

async function loadAllWorkspaces(more) {
  const q = new URLSearchParams({ limit: "100" });
  if ($("ws-filter-owner").value) q.set("owner_id", $("ws-filter-owner").value);
  if ($("ws-filter-state").value) q.set("state", $("ws-filter-state").value);
  if (more && adminState.wsNext) q.set("after", adminState.wsNext);
  const page = await api("GET", `/api/v1/admin/workspaces?${q}`);
  const body = $("all-ws-body");
  if (!more) body.replaceChildren();
  for (const ws of page.workspaces) {
    const row = body.insertRow();
    cell(row, ws.name, ws.id);
    cell(row, username(ws.owner_id));
    cell(row, ws.phase, ws.error_message || "");
    cell(row, ws.desired_state);
    const volume = ws.conditions && ws.conditions["storage.volume_ready"];
    const moving = ws.conditions && ws.conditions["storage.moving"];
    cell(row, (volume && volume.node) || "—", [volume && volume.message, moving && moving.message].filter(Boolean).join("\n"));
    const saved = recoveryText(ws, volume && volume.node);
    cell(row, saved.text, saved.title).classList.add("recovery");
    cell(row, relTime(ws.last_access_at), exactTime(ws.last_access_at));
    cell(row, relTime(ws.created_at), exactTime(ws.created_at));
    row.dataset.id = ws.id;
    const actions = row.insertCell();
    if (ws.phase === "ERROR" || ws.phase === "DELETING") continue;
    if (ws.desired_state === "RUNNING") {
      actions.append(smallButton("Stop", () => adminSetDesired(ws, "STANDBY", "stop")));
    }
    if (ws.desired_state !== "ARCHIVED") {
      actions.append(smallButton("Archive", () => adminSetDesired(ws, "ARCHIVED", "archive")));
    }
  }
  adminState.wsNext = page.next;
  $("all-ws-more").hidden = !page.next;
}

// recoveryText says how much of a home losing its node would cost (its
// recovery point): nothing once its archive holds all of it, else what it
// gained since that archive was made, or all of it if there is none.
function recoveryText(ws, node) {
  const rp = ws.recovery_point || {};
  const where = node ? `node ${node}` : "its node";
  if (!rp.archived_at) return { text: "never", title: `Never archived: ${where} holds the only copy.` };
  if (rp.current) return { text: "all of it", title: `The archive made ${exactTime(rp.archived_at)} holds the whole home.` };
  return { text: relTime(rp.archived_at), title: `Archived ${exactTime(rp.archived_at)}; what changed since is only on ${where}.` };
}

// adminSetDesired stops or archives another user's workspace, after asking:
// its owner loses the open terminals and editors of a running one.
async function adminSetDesired(ws, desired, verb) {
  if (!confirm(`${verb[0].toUpperCase() + verb.slice(1)} ${ws.name} of ${username(ws.owner_id)}? They will see that an administrator did.`)) return;
  try {
    await api("PATCH", `/api/v1/admin/workspaces/${ws.id}`, { desired_state: desired });
    toast(`${ws.name}: asked to ${verb}.`);
    await loadAllWorkspaces(false);
  } catch (err) {
    toast(err.message);
  }
}

// ---------- Nodes ----------

// loadNodes lists the nodes with the homes they hold; each home row says
// its workspace and, while it moves, how far it got.
async function loadNodes() {
  const body = $("nodes-body");
  const note = $("nodes-note");
  let nodes;
  try {
    nodes = (await api("GET", "/api/v1/admin/nodes")).nodes;
  } catch (err) {
    body.replaceChildren();
    note.textContent = err.message;
    note.hidden = false;
    return;
  }
  note.hidden = true;
  body.replaceChildren();
  for (const n of nodes) {
    const row = body.insertRow();
    row.dataset.node = n.name;
    cell(row, n.name, `${n.id}\ndatacenter ${n.datacenter}, pool ${n.node_pool}`);
    cell(row, n.status);
    cell(row, n.draining ? "draining" : n.eligible ? "eligible" : "ineligible");
    cell(row, String(n.homes));
    cell(row, n.disk_used_bytes == null ? "not reported" : bytes(n.disk_used_bytes));
    cell(row, n.evacuation ? `asked by ${n.evacuation.requested_by} ${relTime(n.evacuation.requested_at)}` : "—",
      n.evacuation ? exactTime(n.evacuation.requested_at) : "");
    const actions = row.insertCell();
    actions.append(n.evacuation
      ? smallButton("Cancel evacuation", () => evacuate(n, false))
      : smallButton("Evacuate", () => evacuate(n, true)));
    for (const v of n.volumes) {
      const home = body.insertRow();
      home.className = "node-home";
      home.dataset.workspace = v.workspace_id;
      const what = v.known ? `${v.workspace_name} (${username(v.owner_id)})` : `no workspace: ${v.workspace_id}`;
      cell(home, `↳ ${what}`, v.volume_id);
      cell(home, v.phase || v.state);
      if (v.recovery_point) {
        const saved = recoveryText(v, n.name);
        cell(home, `saved to S3: ${saved.text}`, saved.title).classList.add("recovery");
      } else {
        cell(home, "");
      }
      const moving = v.moving && v.moving.status === "True" && v.moving.message;
      const td = cell(home, moving || v.unavailable || (v.moving && v.moving.message) || "");
      td.colSpan = 4;
    }
  }
}

async function evacuate(n, start) {
  const ask = start
    ? `Move every home off ${n.name}? Running workspaces there stop, are archived, and start again on another node.`
    : `Cancel the evacuation of ${n.name}? Homes already moved stay where they are.`;
  if (!confirm(ask)) return;
  try {
    await api(start ? "POST" : "DELETE", `/api/v1/admin/nodes/${encodeURIComponent(n.id)}/evacuate`);
    toast(start ? `${n.name}: evacuation asked.` : `${n.name}: evacuation cancelled.`);
  } catch (err) {
    toast(err.message);
  }
  await loadNodes();
}

// ---------- Templates and prebuilt homes ----------

// loadAdminTemplates lists the workspaces per template version, the warm
// pools, then every prebuild; each template with prebuilds gets a button to
// build one now.
async function loadAdminTemplates() {
  const note = $("templates-note");
  let usage;
  try {
    usage = await api("GET", "/api/v1/admin/templates");
  } catch (err) {
    note.textContent = err.message;
    note.hidden = false;
    return;
  }
  note.hidden = true;
  const prebuilt = new Set(usage.prebuilds.map((p) => p.template));
  const body = $("templates-body");
  body.replaceChildren();
  for (const t of usage.templates) {
    const row = body.insertRow();
    cell(row, t.template);
    cell(row, t.current ? `${t.version} (current)` : t.version);
    cell(row, String(t.count));
    cell(row, "");
  }
  const pools = $("pools-body");
  pools.replaceChildren();
  for (const p of usage.pools) {
    const row = pools.insertRow();
    row.dataset.template = p.template;
    cell(row, p.template);
    cell(row, String(p.warm));
    cell(row, String(p.ready));
    cell(row, String(p.filling));
  }
  const pre = $("prebuilds-body");
  pre.replaceChildren();
  for (const name of [...prebuilt].sort()) {
    const head = pre.insertRow();
    head.dataset.template = name;
    const title = cell(head, name);
    title.colSpan = 8;
    head.insertCell().append(smallButton("Build now", () => requestPrebuild(name)));
    for (const p of usage.prebuilds.filter((q) => q.template === name)) {
      const row = pre.insertRow();
      row.dataset.prebuild = p.id;
      cell(row, "", p.id);
      cell(row, p.version);
      // The commit the prebuilt home holds: short, the whole on hover.
      cell(row, p.commit ? p.commit.slice(0, 12) : "—", p.commit || "");
      cell(row, p.status);
      cell(row, relTime(p.created_at) + (p.requested_by ? ` by ${p.requested_by}` : ""), exactTime(p.created_at));
      cell(row, p.finished_at ? relTime(p.finished_at) : "—", p.finished_at ? exactTime(p.finished_at) : "");
      cell(row, p.workspace_id || "—");
      // The cause is at the end: a failed start's message ends with the
      // output's last lines.
      cell(row, (p.error || "").split("\n").filter((l) => l.trim()).pop() || "", p.error || "");
      cell(row, "");
    }
  }
}

async function requestPrebuild(name) {
  try {
    const p = await api("POST", `/api/v1/admin/templates/${encodeURIComponent(name)}/prebuilds`);
    toast(`${name}: prebuild ${p.id} asked for; it starts once the template's current build is done.`);
  } catch (err) {
    toast(err.message);
  }
  await loadAdminTemplates();
}

// ---------- Audit log ----------

// isoFrom turns a datetime-local value (local time) into RFC 3339.
function isoFrom(value) {
  return value ? new Date(value).toISOString().replace(/\.\d+Z$/, "Z") : "";
}

async function loadAudit(more) {
  const q = new URLSearchParams({ limit: "100" });
  if ($("audit-user").value) q.set("user_id", $("audit-user").value);
  if ($("audit-workspace").value.trim()) q.set("workspace_id", $("audit-workspace").value.trim());
  if ($("audit-since").value) q.set("since", isoFrom($("audit-since").value));
  if ($("audit-until").value) q.set("until", isoFrom($("audit-until").value));
  if (more && adminState.auditNext) q.set("before", adminState.auditNext);
  const errEl = $("audit-error");
  errEl.hidden = true;
  let page;
  try {
    page = await api("GET", `/api/v1/admin/audit?${q}`);
  } catch (err) {
    errEl.textContent = err.message;
    errEl.hidden = false;
    return;
  }
  const body = $("audit-body");
  if (!more) body.replaceChildren();
  for (const ev of page.events) {
    const row = body.insertRow();
    cell(row, new Date(Date.parse(ev.at)).toLocaleString());
    const who = ev.actor.username || ev.actor.user_id || "unknown";
    cell(row, ev.actor.token_id ? `${who} (token ${ev.actor.token_id})` : who);
    cell(row, ev.actor.address);
    cell(row, ev.action);
    cell(row, ev.target ? `${ev.target.type} ${ev.target.name || ev.target.id}` : "", ev.target ? ev.target.id : "");
    cell(row, ev.outcome).className = `outcome-${ev.outcome}`;
    cell(row, ev.detail);
  }
  adminState.auditNext = page.next;
  $("audit-more").hidden = !page.next;
}

// ---------- Wiring ----------

document.addEventListener("DOMContentLoaded", () => {
  $("admin-nav").addEventListener("click", (e) => {
    const a = e.target.closest("a");
    if (!a) return;
    e.preventDefault();
    history.pushState(null, "", a.getAttribute("href"));
    showView(location.pathname);
  });
  window.addEventListener("popstate", () => {
    if (state.user) showView(state.user.is_admin && adminPages.has(location.pathname) ? location.pathname : "/");
  });
  $("user-create-form").addEventListener("submit", createUser);
  $("ws-filter-owner").addEventListener("change", () => loadAllWorkspaces(false).catch((err) => toast(err.message)));
  $("ws-filter-state").addEventListener("change", () => loadAllWorkspaces(false).catch((err) => toast(err.message)));
  $("all-ws-more").addEventListener("click", () => loadAllWorkspaces(true).catch((err) => toast(err.message)));
  $("audit-filter").addEventListener("submit", (e) => { e.preventDefault(); loadAudit(false); });
  $("audit-more").addEventListener("click", () => loadAudit(true));
});
