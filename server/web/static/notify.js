// Notifications of pending permission requests on every signed-in page.
//
// The feed comes from the machines themselves, through the relay and end
// to end encrypted: the page opens a channel to each online machine of the
// person's workspaces (GET /app/machines), and each daemon pushes on it
// every permission request that this person may decide (approver on the
// session, by their access token and the project's access.yaml), the ones
// waiting when the channel opens and each new one, and every decision.
// So a notification shows on every page of each person allowed to decide,
// and a decision made anywhere (another page, the command line) clears it
// on all of them. The server never sees what is asked.
//
// A machine or session page already has a channel to its machine: it
// hands that channel's frames here (watchRemote) instead of opening a
// second one.

import { Remote, csrfToken } from "./remote.js";
import { $, el } from "./dom.js";

// Notices by request id: {node, notification, install, stale}.
const notices = new Map();

function sessionURL(workspace, install, session) {
  return "/w/" + workspace + "/m/" + install + "/s/" + session;
}

// notify shows one waiting request (once).
export function notify(req, where) {
  const known = notices.get(req.id);
  if (known) {
    known.stale = false;
    return;
  }
  const href = sessionURL(where.workspace, where.install, req.session_id);
  const text = req.tool + " wants permission" + (where.name ? " on " + where.name : "") + " (" + (req.agent || "agent") + ")";
  const n = { node: null, notification: null, install: where.install, stale: false };
  if (window.Notification && Notification.permission === "granted") {
    try {
      n.notification = new Notification("reeve: permission wanted", { body: text, tag: req.id });
      n.notification.onclick = () => { window.focus(); location.href = href; };
    } catch { /* not allowed in this context */ }
  }
  const box = $("#notify");
  if (box) {
    n.node = el("a", "notice-item", text);
    n.node.href = href;
    n.node.dataset.request = req.id;
    n.node.dataset.session = req.session_id;
    box.prepend(n.node);
  }
  notices.set(req.id, n);
}

// clearNotice removes a request's notice, when it was decided.
export function clearNotice(id) {
  const n = notices.get(id);
  if (!n) return;
  if (n.node) n.node.remove();
  if (n.notification) n.notification.close();
  notices.delete(id);
}

// handleFrame takes the permission frames of a machine's channel.
export function handleFrame(f, where) {
  if (f.type === "hook-permission-request" && f.request) notify(f.request, where);
  if (f.type === "hook-permission-resolved" && f.decision) clearNotice(f.decision.request_id);
}

// resync runs when a channel to a machine (re)opens: the daemon sends the
// requests waiting right after the hello, so once a request made after it
// is answered, any notice of that machine not sent again was decided
// while the channel was down.
export async function resync(remote, install) {
  for (const n of notices.values()) if (n.install === install) n.stale = true;
  try {
    await remote.request("list", { scope: "ACTIVE" });
  } catch {
    return; // keep them: we could not tell
  }
  for (const [id, n] of notices) if (n.install === install && n.stale) clearNotice(id);
}

// askPermission offers to turn on the browser's notifications (the
// button is in the page from the start: showing it moves nothing).
function askPermission() {
  const b = $("#notify-enable");
  if (!b || !window.Notification || Notification.permission !== "default") return;
  b.onclick = () => Notification.requestPermission().finally(() => { b.hidden = true; });
  b.hidden = false;
}

// ---- the watcher: one quiet channel per online machine ----

const watched = new Map(); // install -> Remote
let own = null; // the install this page already has a channel to

// watchRemote is how a machine or session page hands its own channel's
// frames to the notifier.
export function watchRemote(install) {
  own = install;
  const old = watched.get(install);
  if (old) { old.stop(); watched.delete(install); }
}

async function machines() {
  const res = await fetch("/app/machines", { credentials: "same-origin", headers: { "X-Reeve-CSRF": csrfToken() } });
  if (!res.ok) throw new Error("the machines could not be listed (" + res.status + ")");
  return res.json();
}

function watch(m, relayURL) {
  const where = { workspace: m.workspace, install: m.install, name: m.name };
  const r = new Remote({
    workspace: m.workspace, target: m.install, anchor: m.anchor, fingerprint: m.fingerprint, relayURL,
    onState: (s) => { if (s.error && (s.error.kind === "anchor" || s.error.kind === "fingerprint")) r.refusedForGood = true; },
    onFrame: (f) => handleFrame(f, where),
    onConnected: () => resync(r, m.install),
  });
  watched.set(m.install, r);
  r.start();
}

async function refresh() {
  let list;
  try { list = await machines(); } catch { return; }
  for (const m of list.machines || []) {
    if (m.install === own || !m.online) continue;
    const r = watched.get(m.install);
    // A machine that failed its anchor check stays refused.
    if (r && (!r.stopped || r.refusedForGood)) continue;
    watch(m, list.relay_url);
  }
}

if ($("#notify")) {
  askPermission();
  // The page's own machine, when it has one, is followed by app.js.
  const app = $("#app");
  if (app && app.dataset.install) own = app.dataset.install;
  refresh();
  // Machines come online later: look again now and then.
  setInterval(refresh, 30000);
  window.reeveNotices = { notices, watched };
}
