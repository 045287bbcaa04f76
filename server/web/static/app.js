// The steering pages' script: a machine page (its sessions, launch) and a
// session page (live events, permission requests, controls, worktree).
// Everything it says to the daemon travels end to end encrypted
// (remote.js); the server only hands it a relay token.

import { Remote } from "./remote.js";
import { fingerprint, normFingerprint, b64decode } from "./e2e.js";
import { handleFrame, clearNotice, resync, watchRemote } from "./notify.js";
import { $, el } from "./dom.js";

const app = $("#app");
const cfg = app ? app.dataset : {};

function showError(msg) {
  const e = $("#app-error");
  if (!e) return;
  e.textContent = msg || "";
  e.hidden = !msg;
}

// What a failure means for a person, by kind.
function explain(err) {
  switch (err && err.kind) {
    case "anchor": return "This machine did not prove it holds its trust anchor " + cfg.fingerprint + ". Nothing was sent to it. If the machine was re-installed, pair it again; otherwise someone may be in the middle.";
    case "fingerprint": return err.message + ". Nothing was sent to it.";
    case "refused": return err.message + ". Unlock it on the machine with `reeve pair unlock`, or pair it with --auto-unlock.";
    case "auth": return err.message + ".";
    case "tampered": return "A message from the machine failed its integrity check (" + err.message + "). The channel was closed; a new one is being opened.";
    case "replay": return "A message from the machine arrived out of order or twice (" + err.message + "). The channel was closed; a new one is being opened.";
    case "unsupported": return err.message;
  }
  return err ? err.message : "";
}

function setConn(s) {
  const c = $("#conn");
  if (!c) return;
  c.dataset.state = s.state;
  c.textContent = s.state === "connected" ? "connected · end-to-end encrypted" : s.message;
  if (s.state === "connected") showError("");
  else if (s.error) showError(explain(s.error).replace(/\.?$/, ".") + (s.state === "reconnecting" ? " Reconnecting…" : ""));
  if (s.error && s.error.kind === "auth") {
    const a = el("a", "", "Sign in again");
    a.href = "/login?next=" + encodeURIComponent(location.pathname);
    $("#app-error").append(" ", a);
  }
}

// checkAnchor refuses to start when the anchor the server gave does not
// have the fingerprint shown on the page.
async function checkAnchor() {
  const fp = await fingerprint(b64decode(cfg.anchor));
  if (normFingerprint(fp) !== normFingerprint(cfg.fingerprint)) {
    throw Object.assign(new Error("the machine's anchor key " + fp + " does not match its fingerprint " + cfg.fingerprint), { kind: "fingerprint" });
  }
}

function newRemote(extra) {
  return new Remote(Object.assign({
    workspace: cfg.workspace, target: cfg.install, anchor: cfg.anchor, fingerprint: cfg.fingerprint, relayURL: cfg.relay,
    onState: setConn,
  }, extra));
}

// ---- rendering events ----

// ANSI SGR to spans; other escape sequences are dropped.
const SGR_FG = { 30: "k", 31: "r", 32: "g", 33: "y", 34: "b", 35: "m", 36: "c", 37: "w", 90: "K", 91: "R", 92: "G", 93: "Y", 94: "B", 95: "M", 96: "C", 97: "W" };
class Ansi {
  constructor() { this.fg = ""; this.bold = false; }
  render(text, into) {
    const re = /\x1b\[([0-9;]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r(?!\n)/g;
    let last = 0, m;
    while ((m = re.exec(text))) {
      this.emit(text.slice(last, m.index), into);
      last = re.lastIndex;
      if (m[2] === "m") {
        for (const c of (m[1] || "0").split(";").map(Number)) {
          if (c === 0) { this.fg = ""; this.bold = false; }
          else if (c === 1) this.bold = true;
          else if (c === 22) this.bold = false;
          else if (c === 39) this.fg = "";
          else if (SGR_FG[c]) this.fg = SGR_FG[c];
        }
      }
    }
    this.emit(text.slice(last), into);
  }
  emit(s, into) {
    if (!s) return;
    if (!this.fg && !this.bold) { into.append(s); return; }
    const span = el("span", (this.fg ? "a-" + this.fg : "") + (this.bold ? " a-bold" : ""), s);
    into.append(span);
  }
}

function short(v, n) {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s && s.length > n ? s.slice(0, n) + "…" : s || "";
}

function toolInput(input) {
  if (!input) return "";
  if (typeof input === "object" && input.command) return input.command;
  if (typeof input === "object" && input.file_path) return input.file_path;
  return short(input, 400);
}

// Log keeps every event's data and at most `windowSize` rows in the
// document: long sessions stay light (the rest are a click away).
class Log {
  constructor(node, earlier) {
    this.node = node;
    this.earlier = earlier;
    this.events = [];
    this.first = 0; // index of the first rendered event
    this.windowSize = 500;
    this.ansi = new Ansi();
    this.lat = [];
    earlier.onclick = () => this.showEarlier();
  }

  // add keeps the event and renders it with the others that arrived in
  // the same frame: one layout per frame, not one per event.
  add(u) {
    this.events.push({ seq: u.seq, kind: u.kind, ts: u.ts, data: u.data });
    (this.queued || (this.queued = [])).push(u);
    if (!this.flushing) {
      this.flushing = true;
      if (document.hidden) setTimeout(() => this.flush(), 100);
      else requestAnimationFrame(() => this.flush());
    }
  }

  flush() {
    this.flushing = false;
    const batch = this.queued || [];
    this.queued = [];
    if (!batch.length) return;
    const atBottom = this.node.scrollHeight - this.node.scrollTop - this.node.clientHeight < 40;
    const frag = document.createDocumentFragment();
    for (const u of batch) frag.append(this.row(u));
    this.node.append(frag);
    this.node.dataset.lastSeq = batch[batch.length - 1].seq;
    const rendered = this.events.length - this.first;
    if (rendered > this.windowSize + 100) {
      const drop = rendered - this.windowSize;
      for (let i = 0; i < drop && this.node.firstElementChild; i++) this.node.firstElementChild.remove();
      this.first += drop;
    }
    this.earlier.hidden = this.first === 0;
    if (atBottom) this.node.scrollTop = this.node.scrollHeight;
    const now = Date.now();
    for (const u of batch) {
      const t = u.ts ? Date.parse(u.ts) : NaN;
      if (!Number.isNaN(t)) this.lat.push(now - t);
    }
    if (this.lat.length > 20000) this.lat.splice(0, 10000);
  }

  showEarlier() {
    const from = Math.max(0, this.first - this.windowSize);
    const frag = document.createDocumentFragment();
    const ansi = new Ansi();
    for (let i = from; i < this.first; i++) frag.append(this.row(this.events[i], ansi));
    this.node.prepend(frag);
    this.first = from;
    this.earlier.hidden = this.first === 0;
  }

  row(u, ansi) {
    const d = u.data || {};
    const r = el("div", "ev k-" + u.kind);
    r.dataset.seq = u.seq;
    const body = el("div", "ev-body");
    switch (u.kind) {
      case "user-prompt":
        r.append(el("span", "who", "you"));
        body.textContent = d.text || "";
        break;
      case "agent-message":
        r.append(el("span", "who", "agent"));
        body.textContent = d.text || "";
        break;
      case "tool-call":
        r.append(el("span", "who", "tool"));
        body.append(el("strong", "", d.name || "tool"), " ", el("code", "", toolInput(d.input)));
        break;
      case "tool-result": {
        r.append(el("span", "who", d.is_error ? "error" : "result"));
        const pre = el("pre", d.is_error ? "out bad" : "out");
        pre.textContent = short(d.output, 20000);
        body.append(pre);
        break;
      }
      case "terminal-output": {
        const pre = el("pre", "term");
        (ansi || this.ansi).render(d.text !== undefined ? d.text : (d.base64 ? atob(d.base64) : ""), pre);
        body.append(pre);
        break;
      }
      case "status":
        body.textContent = "status: " + d.status + (d.reason ? " (" + d.reason + ")" : "");
        r.classList.add("meta");
        break;
      case "permission-request":
        r.append(el("span", "who", "asks"));
        body.textContent = "permission for " + d.tool + ": " + toolInput(d.input) + (d.reason ? " — " + d.reason : "");
        break;
      case "permission-decision":
        r.append(el("span", "who", d.decision));
        body.textContent = d.tool + " " + (d.decision === "allow" ? "allowed" : "denied") + " by " + d.decided_by + (d.reason ? ": " + d.reason : "");
        break;
      case "access-refused":
        r.append(el("span", "who", "refused"));
        body.textContent = (d.frame || "request") + (d.subject ? " from " + d.subject : "") + ": " + (d.reason || "");
        r.classList.add("bad");
        break;
      case "usage":
        body.textContent = "usage: " + (d.input_tokens || 0) + " in, " + (d.output_tokens || 0) + " out" + (d.cost_usd ? ", $" + Number(d.cost_usd).toFixed(4) : "");
        r.classList.add("meta");
        break;
      case "error":
        r.append(el("span", "who", "error"));
        body.textContent = d.message || "";
        r.classList.add("bad");
        break;
      case "mode":
        body.textContent = "mode: " + d.mode + (d.by ? " (by " + d.by + ")" : "");
        r.classList.add("meta");
        break;
      case "hook-event":
        body.textContent = "hook " + (d.event || "") + (d.tool ? " " + d.tool : "");
        r.classList.add("meta", "hook");
        break;
      case "checkpoint":
        body.textContent = "checkpoint " + (d.sha || "").slice(0, 10) + " (" + d.action + ")";
        r.classList.add("meta");
        break;
      case "worktree":
        body.textContent = "worktree " + d.action + (d.sha ? " " + d.sha.slice(0, 10) : "") + (d.note ? ": " + d.note : "");
        r.classList.add("meta");
        break;
      case "launch":
        body.textContent = "turn " + d.turn + " launched: " + short((d.argv || []).join(" "), 300);
        r.classList.add("meta");
        break;
      case "policy":
        body.textContent = "policy " + d.change + ": " + d.hash + (d.previous ? " (was " + d.previous + ")" : "");
        r.classList.add("meta");
        break;
      default:
        body.textContent = u.kind + " " + short(d, 200);
        r.classList.add("meta");
    }
    r.append(body);
    return r;
  }
}

// ---- the session page ----

async function sessionPage() {
  const sid = cfg.session;
  const log = new Log($("#log"), $("#earlier"));
  const pending = new Map();
  const where = { workspace: cfg.workspace, install: cfg.install, name: cfg.machineName };
  watchRemote(cfg.install);
  const remote = newRemote({
    // The daemon pushes the requests of every session this person may
    // decide: this session's get a card, all get a notice (notify.js).
    onFrame: (f) => {
      if (f.type === "hook-permission-request" && f.request && f.request.session_id === sid) addPending(f.request);
      if (f.type === "hook-permission-resolved" && f.decision) removePending(f.decision.request_id);
      // Following the session brings its requests to a viewer too: the
      // card shows (the daemon refuses a viewer's decision, and the page
      // says so), the notification only to those who may decide.
      if (f.type !== "hook-permission-request" || !f.request || remote.mayDecide(f.request.session_id)) handleFrame(f, where);
    },
    onConnected: (r) => resync(r, cfg.install),
    onAccess: () => { for (const card of pending.values()) roleNote(card); },
  });
  // roleNote says on a request's card when this person's token does not
  // let them decide it (and says nothing once a refresh does).
  const roleNote = (card) => {
    const note = card.querySelector(".may-not");
    note.hidden = remote.mayDecide(sid);
    note.textContent = "You are " + remote.role(sid) + " of this session: deciding needs the approver role, so the machine will refuse it.";
  };
  window.reeve = { remote, log, pending };

  function addPending(req) {
    if (pending.has(req.id)) return;
    const card = el("div", "perm");
    card.dataset.request = req.id;
    card.append(el("p", "", req.tool + ": "), el("pre", "out", toolInput(req.input)));
    if (req.reason) card.append(el("p", "muted", req.reason));
    const reason = el("input");
    reason.placeholder = "Reason (the agent is told)";
    reason.className = "reason";
    const remember = el("input");
    remember.type = "checkbox";
    remember.className = "remember";
    const rl = el("label", "inline");
    rl.append(remember, " remember for this session");
    const allow = el("button", "primary allow", "Allow");
    const deny = el("button", "danger deny", "Deny");
    const out = el("p", "error decide-error");
    out.setAttribute("role", "alert");
    const decide = async (decision) => {
      allow.disabled = deny.disabled = true;
      out.textContent = "";
      try {
        await remote.request("respond-permission", { request_id: req.id, decision, reason: reason.value, remember: remember.checked });
        removePending(req.id);
      } catch (e) {
        if (e.code === "already_decided" || e.code === "unknown_request") {
          removePending(req.id);
          return;
        }
        out.textContent = "The machine refused this decision: " + e.message;
        allow.disabled = deny.disabled = false;
      }
    };
    allow.onclick = () => decide("allow");
    deny.onclick = () => decide("deny");
    card.append(reason, rl, el("div", "row buttons"), out);
    card.querySelector(".buttons").append(allow, deny);
    $("#pending-list").append(card);
    $("#pending").hidden = false;
    pending.set(req.id, card);
    card.append(el("p", "muted small may-not"));
    roleNote(card);
    if (remote.mayDecide(req.session_id || sid)) handleFrame({ type: "hook-permission-request", request: req }, where);
  }

  function removePending(id) {
    const card = pending.get(id);
    if (card) card.remove();
    pending.delete(id);
    $("#pending").hidden = pending.size === 0;
    clearNotice(id);
  }

  // A subscription ends with the session's turn (session-ended); the
  // session can go on (a prompt from here or elsewhere), so the page
  // follows it again, soon after an end and then less and less often.
  let followDelay = 1000, refollow = null;
  const lastSeq = () => (log.events.length ? log.events[log.events.length - 1].seq : 0);
  const followNow = () => {
    clearTimeout(refollow);
    if (!remote.subs.has(sid)) remote.follow(sid, lastSeq(), onUpdate, onEnded, (e) => showError(explain(e)));
  };
  let mode = $("#mode").value; // the session's mode as last known
  const onUpdate = (u) => {
    followDelay = 1000;
    log.add(u);
    const d = u.data || {};
    if (u.kind === "status") {
      $("#status").textContent = d.status;
      delete $("#status").dataset.ended;
    }
    if (u.kind === "permission-request") addPending(d);
    if (u.kind === "permission-decision") removePending(d.request_id);
    if (u.kind === "mode") { $("#mode").value = d.mode; mode = d.mode; }
  };
  const onEnded = (f) => {
    $("#status").textContent = f.status + (f.reason ? " (" + f.reason + ")" : "");
    $("#status").dataset.ended = "true";
    clearTimeout(refollow);
    refollow = setTimeout(followNow, followDelay);
    followDelay = Math.min(followDelay * 2, 15000);
  };
  followNow();

  $("#prompt-form").onsubmit = async (ev) => {
    ev.preventDefault();
    const text = $("#prompt").value.trim();
    if (!text) return;
    $("#send").disabled = true;
    try {
      await remote.request("prompt", { session_id: sid, text });
      $("#prompt").value = "";
      showError("");
      followDelay = 1000;
      followNow();
    } catch (e) {
      showError("The prompt was not sent: " + e.message);
    } finally {
      $("#send").disabled = false;
    }
  };
  $("#stop").onclick = async () => {
    if (!confirm("Stop this session? The agent's current turn is killed.")) return;
    try { await remote.request("kill", { session_id: sid }); } catch (e) { showError("Stop refused: " + e.message); }
  };
  // The select shows the session's mode: it goes back when the switch is
  // cancelled or refused, and follows the mode events of the log.
  $("#mode").onchange = async (ev) => {
    const want = ev.target.value;
    if (want === "bypass" && !confirm("Bypass mode lets the agent use tools without asking (the policy's denials still apply). Switch?")) {
      ev.target.value = mode;
      return;
    }
    try {
      await remote.request("set-mode", { session_id: sid, mode: want });
      mode = want;
    } catch (e) {
      ev.target.value = mode;
      showError("The machine refused the mode change: " + e.message);
    }
  };
  worktree(remote, sid);
  try { await checkAnchor(); } catch (e) { setConn({ state: "failed", message: e.message, error: e }); return; }
  remote.start();
}

function worktree(remote, sid) {
  const out = $("#wt-out");
  const fail = (what) => (e) => { out.replaceChildren(el("p", "error", what + " refused: " + e.message)); };
  $("#wt-diff").onclick = () => remote.request("worktree-diff", { session_id: sid }).then((d) => {
    const pre = el("pre", "diff");
    for (const line of (d.patch || "").split("\n")) {
      const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
      pre.append(el("span", cls, line + "\n"));
    }
    out.replaceChildren(el("p", "muted", d.files_changed + " files, +" + d.insertions + " −" + d.deletions + (d.uncommitted ? " (with uncommitted changes)" : "")), pre);
  }, fail("Diff"));
  $("#wt-summary").onclick = () => remote.request("worktree-summary", { session_id: sid }).then((s) => {
    const ul = el("ul", "checkpoints");
    for (const c of (s.checkpoints || []).slice().reverse()) {
      const li = el("li", "", "");
      li.dataset.sha = c.sha;
      li.append(el("code", "", c.sha.slice(0, 10)), el("span", "cp-subject", c.subject || c.action));
      const rb = el("button", "danger rollback", "Roll back here");
      rb.onclick = () => {
        if (!confirm("Roll the worktree back to " + c.sha.slice(0, 10) + "? Uncommitted work is saved as a checkpoint first.")) return;
        remote.request("rollback", { session_id: sid, sha: c.sha }).then((r) => out.prepend(el("p", "notice", "Rolled back to " + r.to.slice(0, 10) + ".")), fail("Rollback"));
      };
      const rt = el("button", "retry", "Retry from here");
      rt.onclick = () => {
        if (!confirm("Start a new session from " + c.sha.slice(0, 10) + "?")) return;
        remote.request("branch-retry", { session_id: sid, sha: c.sha }).then((r) => { location.href = "/w/" + cfg.workspace + "/m/" + cfg.install + "/s/" + r.session.id; }, fail("Retry"));
      };
      li.append(rb, rt);
      ul.append(li);
    }
    out.replaceChildren(el("p", "muted", (s.checkpoints || []).length + " checkpoints on " + s.branch), ul);
  }, fail("Checkpoints"));
  $("#wt-squash").onclick = () => {
    const msg = prompt("Squash the session's work into one commit on " + "its base branch. Commit message:", "");
    if (msg === null) return;
    remote.request("squash-merge", { session_id: sid, message: msg }).then((r) => out.replaceChildren(el("p", "notice", "Merged as " + r.commit.slice(0, 10) + " on " + r.base_branch + ".")), fail("Squash"));
  };
}

// ---- the machine page ----

async function machinePage() {
  const list = $("#sessions");
  const base = "/w/" + cfg.workspace + "/m/" + cfg.install + "/s/";
  const render = (sessions) => {
    list.replaceChildren();
    if (!sessions.length) list.append(el("li", "muted", "No sessions on this machine yet."));
    for (const s of sessions.slice().reverse()) {
      const li = el("li", "card session");
      li.dataset.session = s.id;
      li.dataset.status = s.status;
      const a = el("a", "title", short(s.prompt || s.id, 80));
      a.href = base + s.id;
      li.append(a, el("span", "status s-" + s.status, s.status), el("span", "muted", s.agent + " in " + (s.directory || "")));
      list.append(li);
    }
  };
  const refresh = () => remote.request("list", { scope: "ALL" }).then((r) => render(r.sessions || []), (e) => showError("The sessions could not be listed: " + e.message));
  const where = { workspace: cfg.workspace, install: cfg.install, name: cfg.machineName };
  watchRemote(cfg.install);
  const remote = newRemote({
    onConnected: (r) => { refresh(); resync(r, cfg.install); },
    onFrame: (f) => {
      if (f.type === "session-started") refresh();
      handleFrame(f, where);
    },
  });
  window.reeve = { remote };
  $("#launch").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    $("#launch-go").disabled = true;
    try {
      const req = { directory: f.directory.value.trim(), prompt: f.prompt.value, mode: f.mode.value };
      if (f.agent.value.trim()) req.agent = f.agent.value.trim();
      const si = await remote.request("launch", req);
      location.href = base + si.id;
    } catch (e) {
      showError("The machine did not launch the session: " + e.message);
    } finally {
      $("#launch-go").disabled = false;
    }
  };
  try { await checkAnchor(); } catch (e) { setConn({ state: "failed", message: e.message, error: e }); return; }
  remote.start();
}

if (cfg.page === "session") sessionPage();
else if (cfg.page === "machine") machinePage();
