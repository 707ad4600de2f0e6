// app.js - the luagent operator console. Plain DOM, no framework; every
// value from the server goes in as text (never as HTML). Sections are hash
// routes (#/runs, #/runs/ID, #/approvals, #/chat, #/automations, #/skills,
// #/audit); Alt+1..6 jump between them.
import { validate } from "/assets/schema.js";

let csrf = "";
let stopView = () => {};
const main = document.getElementById("main");

// ------------------------------------------------------------------ helpers

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function toast(msg, bad) {
  const t = h("div", { class: bad ? "bad" : "" }, msg);
  document.getElementById("toast").append(t);
  setTimeout(() => t.remove(), bad ? 8000 : 3500);
}

function when(t) {
  if (!t) return "-";
  return new Date(t * 1000).toLocaleString();
}

function pretty(v) {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

class HttpError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(method, path, body) {
  const opt = { method, credentials: "same-origin", headers: {} };
  if (method !== "GET") {
    opt.headers["X-CSRF-Token"] = csrf;
    opt.headers["Content-Type"] = "application/json";
    opt.body = JSON.stringify(body || {});
  }
  const r = await fetch(path, opt);
  let j = null;
  try { j = await r.json(); } catch (_) { /* not JSON */ }
  if (r.status === 401 && path !== "/api/login") { showLogin(); throw new HttpError(401, "not logged in"); }
  if (!r.ok) throw new HttpError(r.status, (j && j.error) || `HTTP ${r.status}`);
  return j;
}

// Polls fn every ms while the view is shown; returns a stopper.
function every(ms, fn) {
  let live = true, timer = 0;
  const tick = async () => {
    if (!live) return;
    try { await fn(); } catch (e) { if (e.status !== 401) console.warn(e); }
    if (live) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { live = false; clearTimeout(timer); };
}

// ------------------------------------------------------------------ login

function showLogin(msg) {
  stopView();
  document.getElementById("nav").hidden = true;
  const err = h("p", { class: "error-text", role: "alert" }, msg || "");
  const input = h("input", { type: "password", id: "token", autocomplete: "off", required: true });
  const form = h("form", { class: "card login", onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    if (!(await login(input.value.trim()))) err.textContent = "Wrong token.";
  } },
    h("h1", {}, "Log in"),
    h("p", { class: "muted" }, "Paste the token from .luagent/console.token, or open the URL the console printed at first start."),
    h("label", { for: "token" }, "Token"), input,
    h("p", {}, h("button", { class: "primary", type: "submit" }, "Log in")), err);
  main.replaceChildren(form);
  input.focus();
}

async function login(token) {
  try {
    const j = await api("POST", "/api/login", { token });
    csrf = j.csrf;
    start();
    return true;
  } catch (e) {
    return false;
  }
}

// ------------------------------------------------------------------ runs

function runsView() {
  const thead = h("thead"), tbody = h("tbody");
  main.replaceChildren(h("h1", {}, "Runs"), h("table", {}, thead, tbody));
  return every(1500, async () => {
    const runs = await api("GET", "/api/runs?limit=100");
    // with a cluster, automation runs are every host's: say which ran each
    const nodes = runs.some((r) => r.node);
    const cols = ["Run", "Kind", "Name", "Status", "Started", "Tools", "Result"];
    if (nodes) cols.splice(4, 0, "Node");
    thead.replaceChildren(h("tr", {}, cols.map((x) => h("th", {}, x))));
    tbody.replaceChildren(...runs.map((r) => h("tr", {},
      h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.id)}` }, r.id)),
      h("td", {}, r.kind), h("td", {}, r.name), h("td", { class: `status-${r.status}` }, r.status),
      nodes ? h("td", {}, r.node || "") : null,
      h("td", {}, when(r.started)), h("td", {}, r.tool_calls),
      h("td", {}, (r.error || r.result || "").slice(0, 120)))));
  });
}

// Renders a stream of run events (a run page and the chat share it).
function eventRenderer(box) {
  const calls = new Map(); // "run:index" -> {el, args}
  let answer = null, top = null;
  return (ev) => {
    const d = ev.data || {};
    // a run without a parent is a top run (each chat turn is one); the
    // runs inside it (delegate) are shown indented
    if (ev.type === "run_start" && !d.parent) top = ev.run_id;
    if (!top) top = ev.run_id;
    const nested = ev.run_id !== top;
    const cls = (x) => `ev ${x}${nested ? " nested" : ""}`;
    switch (ev.type) {
      case "run_start":
        if (!nested) answer = null;
        box.append(h("div", { class: cls("") }, nested ? `delegate ${d.kind || ""} started` : `run ${ev.run_id} started${d.message ? `: "${d.message}"` : ""}`));
        break;
      case "text_delta":
        if (nested) break;
        if (!answer) { answer = h("div", { class: "answer", "data-testid": "answer" }); box.append(answer); }
        answer.append(d.text || "");
        break;
      case "tool_call_start": {
        const args = h("pre", { "data-testid": "tool-args" });
        const el = h("div", { class: cls("tool"), "data-testid": "tool-call" }, h("strong", {}, `→ ${d.name}`), args);
        calls.set(`${ev.run_id}:${d.index}`, { el, args, text: "" });
        box.append(el);
        answer = null;
        break;
      }
      case "tool_args_delta": {
        const c = calls.get(`${ev.run_id}:${d.index}`);
        if (c) { c.text += d.delta || ""; c.args.textContent = c.text; }
        break;
      }
      case "approval_requested":
        box.append(h("div", { class: cls("approval"), "data-testid": "approval-requested" },
          h("strong", {}, `approval requested for ${d.tool || d.name || ""}`), ` (${d.reason || ""}) `,
          h("a", { href: "#/approvals" }, "decide"), h("pre", {}, pretty(d.args)), h("div", { class: "muted" }, `hash ${d.args_hash || ""}`)));
        break;
      case "approval_decided":
        box.append(h("div", { class: cls("approval"), "data-testid": "approval-decided" },
          h("strong", {}, `approval ${d.verdict}`), ` by ${d.by || "?"}${d.reason ? `: ${d.reason}` : ""}`));
        break;
      case "tool_result":
        box.append(h("div", { class: cls(d.ok ? "tool" : "error"), "data-testid": "tool-result" },
          h("strong", { class: d.ok ? "ok" : "bad" }, `← ${d.name} ${d.ok ? "ok" : `failed${d.code ? ` (${d.code})` : ""}`}`),
          d.ms !== undefined ? h("span", { class: "muted" }, ` ${d.ms} ms`) : null, h("pre", {}, d.content || "")));
        answer = null;
        break;
      case "script_tool_call": // a script's tools.call (automations, luagent run)
        box.append(h("div", { class: cls(d.ok ? "tool" : "error"), "data-testid": "script-call" },
          h("strong", { class: d.ok ? "ok" : "bad" }, `${d.tool} ${d.ok ? "ok" : `failed${d.code ? ` (${d.code})` : ""}`}`),
          h("span", { class: "muted" }, ` called by ${d.caller} ${d.caller_name || ""}, ${d.ms} ms`),
          h("pre", {}, d.args_text || JSON.stringify(d.args)), d.error ? h("div", { class: "error-text" }, d.error) : null));
        break;
      case "print": case "log":
        box.append(h("div", { class: cls("") }, h("span", { class: "muted" }, `[${ev.type}${d.level ? ` ${d.level}` : ""}] `), d.text || d.message || pretty(d)));
        break;
      case "steer":
        box.append(h("div", { class: cls(""), "data-testid": "steer" }, h("strong", {}, "steer: "), d.text || pretty(d)));
        break;
      case "error": case "refusal":
        box.append(h("div", { class: cls("error") }, h("strong", {}, `${ev.type}: `), d.message || d.text || pretty(d)));
        break;
      case "note": case "retry": case "compaction": case "reflexion":
        box.append(h("div", { class: cls(""), }, h("span", { class: "muted" }, `[${ev.type}] `), d.text || d.reason || pretty(d)));
        break;
      case "run_end":
        box.append(h("div", { class: cls(d.status === "ok" ? "" : "error"), "data-testid": nested ? "nested-end" : "run-end" },
          h("strong", { class: `status-${d.status}` }, nested ? `delegate ${d.status}` : `run ${d.status}`),
          d.error ? ` ${d.error}` : ""));
        if (!nested) answer = null;
        break;
      default:
        break; // usage, turn_complete, thinking: not shown
    }
  };
}

function runView(id) {
  const head = h("div", { class: "card" }, "loading…");
  const box = h("div", { id: "events", "aria-live": "polite" });
  const status = h("p", { class: "muted", "data-testid": "stream-state" }, "streaming…");
  main.replaceChildren(h("h1", {}, `Run ${id}`), head, status, box);
  const render = eventRenderer(box);
  const es = new EventSource(`/api/runs/${encodeURIComponent(id)}/stream`);
  const refresh = async () => {
    try {
      const j = await api("GET", `/api/runs/${encodeURIComponent(id)}`);
      const r = j.run;
      head.replaceChildren(h("dl", { class: "kv" },
        h("dt", {}, "kind"), h("dd", {}, r.kind), h("dt", {}, "name"), h("dd", {}, r.name),
        h("dt", {}, "status"), h("dd", { class: `status-${r.status}`, "data-testid": "run-status" }, r.status),
        r.node ? [h("dt", {}, "node"), h("dd", {}, r.node)] : null,
        h("dt", {}, "started"), h("dd", {}, when(r.started)),
        h("dt", {}, "finished"), h("dd", {}, when(r.finished)),
        r.parent ? [h("dt", {}, "inside"), h("dd", {}, h("a", { href: `#/runs/${r.parent}` }, r.parent))] : null,
        r.error ? [h("dt", {}, "error"), h("dd", { class: "error-text" }, r.error)] : null));
    } catch (e) { head.textContent = e.message; }
  };
  refresh();
  es.onmessage = (m) => render(JSON.parse(m.data));
  es.addEventListener("end", (m) => { status.textContent = `finished (${JSON.parse(m.data).status})`; es.close(); refresh(); });
  es.addEventListener("error", (m) => { if (m.data) { status.textContent = JSON.parse(m.data).error; es.close(); } });
  return () => es.close();
}

// ------------------------------------------------------------------ approvals

let toolsCache = null;
async function toolSchema(name) {
  if (!toolsCache) toolsCache = await api("GET", "/api/tools");
  const t = toolsCache.find((x) => x.name === name);
  return t ? t.params : undefined;
}

function approvalCard(a) {
  const reason = h("input", { type: "text", placeholder: "reason for denying (shown to the caller)", "aria-label": "Reason for denying" });
  const editor = h("textarea", { class: "code", rows: 6, "aria-label": "Modified arguments (JSON)", "data-testid": "args-editor" });
  const problems = h("div", { class: "error-text", role: "alert", "data-testid": "schema-problems" });
  const edit = h("div", { hidden: true }, h("label", {}, "Modified arguments"), editor, problems,
    h("div", { class: "row" }, h("button", { type: "button", class: "primary", onclick: async () => {
      problems.textContent = "";
      let args;
      try { args = JSON.parse(editor.value); } catch (e) { problems.textContent = `not JSON: ${e.message}`; return; }
      if (typeof args !== "object" || args === null || Array.isArray(args)) { problems.textContent = "the arguments must be a JSON object"; return; }
      const schema = await toolSchema(a.tool);
      const errs = validate(schema, args);
      if (errs.length) { problems.textContent = `does not fit ${a.tool}'s schema: ${errs.join("; ")}`; return; }
      decide(a.id, "approve", { args });
    } }, "Approve modified")));
  editor.value = JSON.stringify(a.args, null, 2);
  return h("section", { class: "card", "data-testid": "approval", "data-id": a.id, "aria-label": `approval ${a.id}` },
    h("h2", {}, `#${a.id} ${a.tool}`),
    h("dl", { class: "kv" },
      h("dt", {}, "caller"), h("dd", {}, `${a.caller_kind} ${a.caller_name || ""}`),
      h("dt", {}, "impact"), h("dd", {}, a.impact),
      h("dt", {}, "reason"), h("dd", {}, a.reason),
      h("dt", {}, "run"), h("dd", {}, a.run_id ? h("a", { href: `#/runs/${a.run_id}` }, a.run_id) : "-"),
      h("dt", {}, "requested"), h("dd", {}, when(a.created)),
      h("dt", {}, "arguments"), h("dd", {}, h("pre", { "data-testid": "approval-args" }, JSON.stringify(a.args, null, 2))),
      h("dt", {}, "hash"), h("dd", {}, h("code", {}, a.args_hash))),
    h("div", { class: "row" },
      h("button", { type: "button", class: "primary", onclick: () => decide(a.id, "approve", {}) }, "Approve"),
      h("button", { type: "button", onclick: () => { edit.hidden = !edit.hidden; if (!edit.hidden) editor.focus(); } }, "Edit arguments…"),
      reason,
      h("button", { type: "button", class: "danger", onclick: () => decide(a.id, "deny", reason.value ? { reason: reason.value } : {}) }, "Deny")),
    edit);
}

async function decide(id, verb, body) {
  try {
    const j = await api("POST", `/api/approvals/${id}/${verb}`, body);
    toast(`approval ${id} ${j.status}`);
    refreshApprovals && refreshApprovals();
  } catch (e) { toast(e.message, true); }
}

let refreshApprovals = null;
function approvalsView() {
  const list = h("div", { "aria-live": "polite" });
  const done = h("tbody");
  main.replaceChildren(h("h1", {}, "Approvals"), list, h("h2", {}, "Decided"),
    h("table", {}, h("thead", {}, h("tr", {}, ["#", "Tool", "Status", "By", "Why"].map((x) => h("th", {}, x)))), done));
  let shown = "";
  const load = async () => {
    const all = await api("GET", "/api/approvals?all=1");
    const pending = all.filter((a) => a.status === "pending");
    const key = pending.map((a) => a.id).join(",");
    if (key !== shown) { // keep an editor the operator is typing in
      shown = key;
      list.replaceChildren(...(pending.length ? pending.map(approvalCard) : [h("p", { class: "muted" }, "No pending approvals.")]));
    }
    done.replaceChildren(...all.filter((a) => a.status !== "pending").reverse().slice(0, 50).map((a) => h("tr", {},
      h("td", {}, a.id), h("td", {}, a.tool), h("td", { class: `status-${a.status}` }, a.status),
      h("td", {}, a.decided_by || ""), h("td", {}, a.decision_reason || ""))));
  };
  refreshApprovals = load;
  const stop = every(1000, load);
  return () => { refreshApprovals = null; stop(); };
}

// ------------------------------------------------------------------ chat

function chatView() {
  const box = h("div", { id: "chat-events", "aria-live": "polite" });
  const msg = h("input", { type: "text", id: "chat-message", "aria-label": "Message", placeholder: "Message" });
  const mode = h("select", { "aria-label": "Mode" }, h("option", { value: "chat" }, "chat"), h("option", { value: "ask" }, "one-off ask"));
  const steer = h("input", { type: "text", id: "chat-steer", "aria-label": "Steer", placeholder: "steer the running turn", disabled: true });
  const stopBtn = h("button", { type: "button", class: "danger", disabled: true, onclick: () => post("stop", {}) }, "Stop");
  const steerBtn = h("button", { type: "button", disabled: true, onclick: () => { if (steer.value) post("steer", { text: steer.value }).then(() => { steer.value = ""; }); } }, "Steer");
  const state = h("span", { class: "muted", "data-testid": "chat-state" }, "idle");
  let chat = null, es = null, busy = false, top = null;
  const setBusy = (b) => {
    busy = b;
    state.textContent = chat ? (chat.exited ? "ended" : b ? "working…" : "idle") : "idle";
    steer.disabled = steerBtn.disabled = stopBtn.disabled = !b;
  };
  const post = async (verb, body) => {
    try { await api("POST", `/api/chat/${chat.id}/${verb}`, body); } catch (e) { toast(e.message, true); }
  };
  const render = eventRenderer(box);
  const listen = () => {
    es = new EventSource(`/api/chat/${chat.id}/stream`);
    es.onmessage = (m) => {
      const ev = JSON.parse(m.data);
      if (ev.type === "stderr") { box.append(h("div", { class: "ev error" }, ev.text)); return; }
      if (ev.type === "exit") { chat.exited = true; setBusy(false); return; }
      if (ev.type === "output") return;
      if (ev.type === "run_start" && !(ev.data && ev.data.parent)) { top = ev.run_id; setBusy(true); }
      if (ev.type === "run_end" && ev.run_id === top) setBusy(false);
      render(ev);
    };
    es.addEventListener("end", () => es.close());
  };
  const form = h("form", { class: "row", onsubmit: async (ev) => {
    ev.preventDefault();
    const text = msg.value.trim();
    if (!text) return;
    // busy before the request: a fast turn's run_end may arrive on the
    // stream before the request returns
    const mine = h("div", { class: "ev" }, h("strong", {}, "you: "), text);
    try {
      if (chat && !chat.exited && chat.kind === "chat" && mode.value === "chat") {
        if (busy) { toast("a turn is running: steer it or stop it", true); return; }
        box.append(mine);
        setBusy(true);
        await api("POST", `/api/chat/${chat.id}/send`, { message: text });
      } else {
        if (es) es.close();
        box.replaceChildren(mine);
        chat = await api("POST", "/api/chat", { message: text, mode: mode.value });
        setBusy(true);
        listen();
      }
      msg.value = "";
    } catch (e) { mine.remove(); setBusy(false); toast(e.message, true); }
  } }, mode, msg, h("button", { class: "primary", type: "submit" }, "Send"));
  const steerForm = h("form", { class: "row", onsubmit: (ev) => { ev.preventDefault(); steerBtn.click(); } }, steer, steerBtn, stopBtn, state);
  main.replaceChildren(h("h1", {}, "Chat"), form, steerForm, box);
  msg.focus();
  // back on this page: the newest open chat again, replayed from its start
  api("GET", "/api/chat").then((list) => {
    const open = list.filter((x) => !x.exited && x.kind === "chat").sort((a, b) => b.id - a.id)[0];
    if (!open || chat) return;
    chat = open;
    listen();
    setBusy(open.busy);
  }).catch(() => {});
  return () => { if (es) es.close(); };
}

// ------------------------------------------------------------------ automations

function automationsView() {
  const tbody = h("tbody");
  const hist = h("div");
  main.replaceChildren(h("h1", {}, "Automations"),
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Trigger", "Zone", "Enabled", "Next run", "Last", ""].map((x) => h("th", {}, x)))), tbody), hist);
  const act = async (name, verb) => {
    try {
      const j = await api("POST", `/api/automations/${encodeURIComponent(name)}/${verb}`, {});
      toast(verb === "run" ? `${name}: ${j.status}${j.error ? ` - ${j.error}` : ""}` : `${name} ${verb}d`, j.status === "failed");
      load();
    } catch (e) { toast(e.message, true); }
  };
  const showHistory = async (name) => {
    const rows = await api("GET", `/api/automations/${encodeURIComponent(name)}/history?n=20`);
    hist.replaceChildren(h("h2", {}, `History of ${name}`), h("table", {}, h("tbody", {}, rows.map((r) => h("tr", {},
      h("td", {}, h("a", { href: `#/runs/${r.run_id}` }, r.run_id)), h("td", { class: `status-${r.status}` }, r.status),
      h("td", {}, when(r.started)), h("td", {}, (r.error || r.result || "").slice(0, 120)))))));
  };
  const load = async () => {
    const list = await api("GET", "/api/automations");
    tbody.replaceChildren(...list.map((a) => h("tr", { "data-testid": "automation", "data-name": a.name },
      h("td", {}, a.name, a.error ? h("div", { class: "error-text" }, a.error) : null),
      h("td", {}, a.trigger), h("td", {}, a.zone || "-"),
      h("td", { "data-testid": "enabled" }, a.enabled ? "yes" : "no"),
      h("td", { title: a.next_run_at || "" }, a.enabled ? (a.zone && a.next_run_at ? `${a.next_run_at.replace("T", " ")} (${a.zone})` : when(a.next_run)) : "-"),
      h("td", { class: `status-${a.last_status}` }, a.last_status ? `${a.last_status} ${when(a.last_run)}` : "-"),
      h("td", { class: "row" },
        h("button", { type: "button", onclick: () => act(a.name, "run") }, "Run now"),
        h("button", { type: "button", onclick: () => act(a.name, a.enabled ? "disable" : "enable") }, a.enabled ? "Disable" : "Enable"),
        h("button", { type: "button", onclick: () => showHistory(a.name) }, "History")))));
  };
  return every(5000, load);
}

// ------------------------------------------------------------------ skills

function skillsView() {
  const list = h("tbody");
  const problems = h("div");
  const out = h("div");
  const q = h("input", { type: "text", "aria-label": "Message to select skills for", placeholder: "a message, to see which skills it selects" });
  main.replaceChildren(h("h1", {}, "Skills"), h("h2", {}, "Problems (luagent skills check)"), problems,
    h("table", {}, h("thead", {}, h("tr", {}, ["Skill", "Tools", "Source"].map((x) => h("th", {}, x)))), list),
    h("h2", {}, "Selection"),
    h("form", { class: "row", onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const j = await api("GET", `/api/skills/select?message=${encodeURIComponent(q.value)}`);
        out.replaceChildren(h("pre", {}, JSON.stringify(j, null, 2)));
      } catch (e) { out.replaceChildren(h("p", { class: "error-text" }, e.message)); }
    } }, q, h("button", { type: "submit" }, "Explain")), out);
  (async () => {
    const [skills, check] = await Promise.all([api("GET", "/api/skills"), api("GET", "/api/skills/check")]);
    const items = Array.isArray(check) ? check : [check];
    problems.replaceChildren(items.length ? h("ul", {}, items.map((p) => h("li", { class: "error-text" }, p.file ? `${p.file}:${p.line || ""}: ${p.message || pretty(p)}` : pretty(p)))) : h("p", { class: "ok" }, "No problems."));
    list.replaceChildren(...skills.map((s) => h("tr", {}, h("td", {}, s.name), h("td", {}, (s.tools || []).join(", ")), h("td", {}, s.source || s.file || ""))));
  })().catch((e) => problems.replaceChildren(h("p", { class: "error-text" }, e.message)));
  return () => {};
}

// ------------------------------------------------------------------ audit

function auditView() {
  const state = h("div", { class: "card" }, "checking…");
  const tbody = h("tbody");
  main.replaceChildren(h("h1", {}, "Audit chain"), state,
    h("table", {}, h("thead", {}, h("tr", {}, ["Seq", "Time", "Tool", "Caller", "Decision", "By", "Approver"].map((x) => h("th", {}, x)))), tbody));
  (async () => {
    const [v, head, tail] = await Promise.all([api("GET", "/api/audit/verify"), api("GET", "/api/audit/head"), api("GET", "/api/audit/tail?n=100")]);
    state.replaceChildren(h("p", { class: v.intact ? "ok" : "bad", "data-testid": "audit-state" }, v.intact ? `intact: ${v.rows} rows` : `BROKEN: ${v.problem || ""}`),
      h("p", { class: "muted" }, `anchored up to row ${v.anchored_seq} (${v.anchors} anchor lines)${v.signed ? ", signed" : ""}${v.warning ? ` - ${v.warning}` : ""}`),
      h("p", { class: "muted" }, `head: ${head.head || JSON.stringify(head)}`));
    const rows = Array.isArray(tail) ? tail.flat() : [];
    tbody.replaceChildren(...rows.reverse().map((r) => h("tr", {}, h("td", {}, r.seq), h("td", {}, when(r.ts)), h("td", {}, r.tool || ""),
      h("td", {}, `${r.caller_kind || ""} ${r.caller_name || ""}`), h("td", {}, r.decision), h("td", {}, r.decided_by || ""), h("td", {}, r.approver || ""))));
  })().catch((e) => state.replaceChildren(h("p", { class: "error-text" }, e.message)));
  return () => {};
}

// ------------------------------------------------------------------ routing

function route() {
  stopView();
  const hash = location.hash || "#/runs";
  const [, section, id] = hash.match(/^#\/([a-z]+)\/?(.*)$/) || [null, "runs", ""];
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === `#/${section}`);
  const views = { runs: () => (id ? runView(decodeURIComponent(id)) : runsView()), approvals: approvalsView, chat: chatView,
    automations: automationsView, skills: skillsView, audit: auditView };
  stopView = (views[section] || runsView)();
}

let badgeStop = null;
function start() {
  document.getElementById("nav").hidden = false;
  if (!badgeStop) badgeStop = every(2000, async () => {
    const p = await api("GET", "/api/approvals");
    document.getElementById("pending").textContent = p.length ? String(p.length) : "";
  });
  route();
}

// A login link opened in a tab that already shows the console.
async function tokenFromHash() {
  const m = location.hash.match(/token=([0-9a-f]{64})/);
  if (!m) return false;
  history.replaceState(null, "", location.pathname); // the token leaves the address bar
  if (!(await login(m[1]))) showLogin("That link's token is wrong.");
  return true;
}

window.addEventListener("hashchange", async () => {
  if (await tokenFromHash()) return;
  if (csrf) route();
});
document.addEventListener("keydown", (ev) => {
  if (!ev.altKey || !csrf) return;
  const a = document.querySelector(`nav a[data-key="${ev.key}"]`);
  if (a) { ev.preventDefault(); location.hash = a.getAttribute("href"); }
});
document.getElementById("logout").addEventListener("click", async () => {
  try { await api("POST", "/api/logout", {}); } catch (_) { /* gone anyway */ }
  csrf = "";
  if (badgeStop) { badgeStop(); badgeStop = null; }
  showLogin("Logged out.");
});

(async () => {
  if (await tokenFromHash()) return;
  try {
    const s = await fetch("/api/session", { credentials: "same-origin" });
    if (s.ok) { csrf = (await s.json()).csrf; start(); return; }
  } catch (_) { /* fall through */ }
  showLogin();
})();
