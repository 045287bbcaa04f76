// A paired daemon through the relay, from the browser: the relay
// WebSocket (server/relay/relaywire envelopes), the end-to-end channel
// (e2e.js) and the control protocol (docs/protocol.md): hello, requests
// with acks, subscriptions that resume from after_seq with no gap and no
// duplicate, and reconnection with backoff. It is the browser's twin of
// daemon/wireclient over server/sdk/remote.

import { Handshake, E2EError, prologue, checkAnchorAnswer, b64encode, b64decode, KIND_ANCHOR_REQUEST } from "./e2e.js";

const enc = new TextEncoder();
const dec = new TextDecoder();
export const VERSION = "reeve-web/1";

// RemoteError is a failure with a kind the page words: relay, refused,
// auth, closed, request (an error ack, with code), plus E2EError's kinds.
export class RemoteError extends Error {
  constructor(kind, message, code) { super(message); this.kind = kind; this.code = code || ""; }
}

// Final failures: reconnecting cannot cure them.
const FINAL = new Set(["anchor", "fingerprint", "refused", "unsupported", "auth"]);

// csrfToken reads the page's CSRF token (a meta tag: no inline script).
export function csrfToken() {
  const m = document.querySelector('meta[name="reeve-csrf"]');
  return m ? m.content : "";
}

// relayToken asks the pages for a client relay JWT with the HttpOnly
// session cookie; the page never holds the session token itself.
async function relayToken(workspace, target) {
  let res;
  try {
    res = await fetch("/app/relay-token", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Reeve-CSRF": csrfToken() },
      body: JSON.stringify({ workspace, runtime_target_id: target }),
    });
  } catch (e) {
    throw new RemoteError("relay", "the server cannot be reached (" + e.message + ")");
  }
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) throw new RemoteError("auth", "your sign-in has ended; sign in again");
  if (!res.ok) throw new RemoteError(res.status === 403 ? "auth" : "relay", body.error || ("the server answered " + res.status));
  return body;
}

// The session roles, weakest first (server/sdk).
const RANK = { none: 0, viewer: 1, commenter: 2, steerer: 3, approver: 4, owner: 5 };

// claimsOf reads an access token's claims, to word the page: the daemon
// verifies the token and decides; the page never trusts them for more.
function claimsOf(token) {
  try {
    const p = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(p + "=".repeat((4 - p.length % 4) % 4)));
  } catch {
    return null;
  }
}

// Link is one relay WebSocket with its end-to-end channel.
class Link {
  constructor(url, token) {
    this.queue = [];
    this.waiters = [];
    this.closed = null;
    this.ws = new WebSocket(url, ["reeve.relay.v1", "reeve.jwt." + token]);
    this.opened = new Promise((resolve, reject) => {
      this.ws.onopen = resolve;
      this.ws.onerror = () => {};
      this.ws.onclose = (ev) => {
        const err = this.closeError(ev);
        this.fail(err);
        reject(err);
      };
    });
    this.ws.onmessage = (ev) => this.onEnvelope(ev.data);
    this.bytesIn = 0;
  }

  closeError(ev) {
    if (!this.everOpen) {
      // A browser is told nothing about a refused upgrade.
      return new RemoteError("relay", "the relay refused the connection (the relay token may have expired or be for another workspace, or the server is restarting)");
    }
    return new RemoteError("closed", "the relay closed the connection" + (ev.reason ? ": " + ev.reason : ""));
  }

  fail(err) {
    if (this.closed) return;
    this.closed = err;
    for (const w of this.waiters.splice(0)) w.reject(err);
    if (this.onFail) this.onFail(err);
  }

  onEnvelope(text) {
    let env;
    try { env = JSON.parse(text); } catch { return this.fail(new RemoteError("relay", "the relay sent a message that is not an envelope")); }
    if (env.t === "data") {
      let p;
      try { p = b64decode(env.p || ""); } catch { return this.fail(new RemoteError("relay", "the relay sent a payload that is not base64")); }
      this.bytesIn += p.length;
      if (this.onPayload) return this.onPayload(p);
      const w = this.waiters.shift();
      if (w) w.resolve(p); else this.queue.push(p);
    } else if (env.t === "close") {
      this.fail(new RemoteError(env.reason && /lock|refus|not allowed|denied/i.test(env.reason) ? "refused" : "closed", "the daemon closed the channel" + (env.reason ? ": " + env.reason : "")));
      this.ws.close();
    } else if (env.t === "error") {
      this.fail(new RemoteError("relay", "the relay: " + (env.reason || "cannot reach the machine")));
      this.ws.close();
    }
  }

  next() {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (this.closed) return Promise.reject(this.closed);
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  send(payload) {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ t: "data", p: b64encode(payload) }));
  }

  close(code, reason) {
    try { this.ws.close(code || 1000, reason || ""); } catch { /* already closed */ }
  }
}

// Remote drives one daemon. Callbacks: onState({state, message, error}),
// onFrame(frame) for frames that are not acks or subscription events.
export class Remote {
  constructor(opts) {
    this.o = opts; // workspace, target, anchor (base64), fingerprint, relayURL
    this.subs = new Map(); // session id -> {last, onUpdate, onEnded}
    this.pending = new Map(); // request id -> {resolve, reject}
    this.nextId = 1;
    this.link = null;
    this.session = null;
    this.stopped = false;
    this.ready = null;
    this.backoff = 200;
    this.admission = null;
    this.connects = 0;
    this.refreshes = 0; // access tokens presented again on a live channel
    this.refreshTimer = null;
  }

  state(state, message, error) {
    if (this.o.onState) this.o.onState({ state, message, error });
  }

  wsURL() {
    const u = new URL(this.o.relayURL || location.origin, location.href);
    u.protocol = u.protocol === "https:" || u.protocol === "wss:" ? "wss:" : "ws:";
    if (!u.pathname.endsWith("/ws")) u.pathname = u.pathname.replace(/\/$/, "") + "/ws";
    u.search = new URLSearchParams({ role: "client", workspaceId: this.o.workspace, runtimeTargetId: this.o.target }).toString();
    return u.toString();
  }

  // start connects and keeps connecting until stop or a final failure.
  start() {
    this.ready = this.loop();
    return this.ready;
  }

  async loop() {
    while (!this.stopped) {
      try {
        await this.connectOnce();
        this.backoff = 200;
        await this.dropped;
      } catch (e) {
        if (this.stopped) return; // stopped on purpose, and said why
        const err = e instanceof RemoteError || e instanceof E2EError ? e : new RemoteError("closed", e.message || String(e));
        this.teardown(err);
        if (FINAL.has(err.kind)) {
          this.stopped = true;
          this.state("failed", err.message, err);
          return;
        }
        this.state("reconnecting", err.message + "; reconnecting", err);
        await new Promise((r) => setTimeout(r, this.backoff * (0.75 + Math.random() / 2)));
        this.backoff = Math.min(this.backoff * 2, 10000);
      }
    }
  }

  async connectOnce() {
    this.state("connecting", this.connects ? "reconnecting to the machine" : "connecting to the machine");
    const tok = await relayToken(this.o.workspace, this.o.target);
    const link = new Link(this.wsURL(), tok.token);
    this.link = link;
    await link.opened;
    link.everOpen = true;
    let anchor = this.o.anchor ? b64decode(this.o.anchor) : null;
    if (!anchor) {
      link.send(new Uint8Array([KIND_ANCHOR_REQUEST]));
      anchor = await checkAnchorAnswer(await link.next(), this.o.fingerprint);
    }
    const hs = await Handshake.start(anchor, prologue(this.o.workspace, this.o.target));
    link.send(await hs.hello(enc.encode(JSON.stringify({ client: VERSION }))));
    const { session, payload } = await hs.finish(await link.next());
    let adm;
    try { adm = JSON.parse(dec.decode(payload)); } catch { throw new E2EError("malformed", "the daemon's admission is not JSON"); }
    if (!adm.admitted) throw new RemoteError("refused", "the machine refused remote control: " + (adm.reason || "no reason given"));
    this.admission = adm;
    this.session = session;
    // From here every payload is a sealed frame, opened in arrival order.
    let chain = Promise.resolve();
    const dropped = new Promise((resolve, reject) => { link.onFail = reject; });
    this.dropped = dropped;
    const queued = link.queue.splice(0);
    link.onPayload = (p) => {
      chain = chain.then(() => this.onSealed(link, session, p));
    };
    for (const p of queued) link.onPayload(p);
    const daemonHello = await this.nextFrame();
    if (daemonHello.type !== "hello") throw new RemoteError("closed", "the daemon did not say hello first");
    this.daemonHello = daemonHello;
    // The access token (who this person is, their roles) goes to the
    // daemon inside the sealed channel, never to the relay.
    const hello = { type: "hello", protocol_version: 1, version: VERSION };
    if (tok.access_token) hello.access_token = tok.access_token;
    await this.sendFrame(hello);
    this.connects++;
    this.claims = claimsOf(tok.access_token || "");
    if (this.o.onAccess) this.o.onAccess(this);
    this.scheduleRefresh(link, tok);
    this.state("connected", "connected, end-to-end encrypted", null);
    // Resubscribe from the last seq each subscription handled.
    for (const [sid, sub] of this.subs) {
      this.request("subscribe", { session_id: sid, after_seq: sub.last, batch: true }).catch((e) => sub.onError && sub.onError(e));
    }
    if (this.o.onConnected) this.o.onConnected(this);
  }

  // The access token expires with the relay token (10 minutes by
  // default). Before it does, the page gets a new one and presents it in
  // a new hello on the same channel; the daemon decides with it from then
  // on, so a role changed or taken away on the control plane counts from
  // the next refresh. A sign-in that ended, or a person no longer allowed
  // in the workspace, stops the channel; a failure to reach the server is
  // tried again (the daemon closes the channel if the token runs out).
  scheduleRefresh(link, tok) {
    clearTimeout(this.refreshTimer);
    const life = Math.max(1, Number(tok.expires_in) || 600) * 1000;
    const delay = Math.max(1000, life - 60000, life * 0.75);
    this.accessExpires = Date.now() + life;
    this.refreshTimer = setTimeout(() => this.refreshAccess(link), delay);
  }

  async refreshAccess(link) {
    if (link !== this.link || this.stopped) return;
    let tok;
    try {
      tok = await relayToken(this.o.workspace, this.o.target);
    } catch (e) {
      if (link !== this.link || this.stopped) return;
      if (e.kind === "auth") {
        this.stopped = true;
        this.teardown(e);
        this.state("failed", e.message, e);
        return;
      }
      this.refreshTimer = setTimeout(() => this.refreshAccess(link), 5000);
      return;
    }
    if (link !== this.link || this.stopped) return;
    try {
      await this.sendFrame({ type: "hello", protocol_version: 1, version: VERSION, access_token: tok.access_token || "" });
      this.refreshes++;
      this.claims = claimsOf(tok.access_token || "");
      if (this.o.onAccess) this.o.onAccess(this);
    } catch { return; /* the channel dropped: the reconnection gets a fresh token */ }
    this.scheduleRefresh(link, tok);
  }

  async onSealed(link, session, p) {
    if (link !== this.link) return;
    let msg;
    try {
      msg = await session.open(p);
    } catch (e) {
      // A refused frame kills the channel for good; a new one gets new keys.
      link.close(1008, "e2e frame refused");
      link.fail(e);
      return;
    }
    if (msg === null) return;
    let f;
    try { f = JSON.parse(dec.decode(msg)); } catch { return; }
    if (this.frameWaiter) {
      const w = this.frameWaiter;
      this.frameWaiter = null;
      w(f);
      return;
    }
    this.dispatch(f);
  }

  nextFrame() {
    return new Promise((resolve, reject) => {
      this.frameWaiter = resolve;
      this.dropped.catch(reject);
    });
  }

  dispatch(f) {
    switch (f.type) {
      case "ack": {
        const p = this.pending.get(f.id);
        if (!p) return;
        this.pending.delete(f.id);
        if (f.ok) p.resolve(f.result);
        else p.reject(new RemoteError("request", (f.error && f.error.message) || "refused", f.error && f.error.code));
        return;
      }
      case "session-update":
        return this.deliver(f);
      case "session-updates":
        for (const u of f.updates || []) this.deliver(u);
        return;
      case "session-ended": {
        const sub = this.subs.get(f.session_id);
        if (sub) {
          this.subs.delete(f.session_id);
          if (sub.onEnded) sub.onEnded(f);
        }
        return;
      }
    }
    if (this.o.onFrame) this.o.onFrame(f);
  }

  deliver(u) {
    const sub = this.subs.get(u.session_id);
    if (!sub || u.seq <= sub.last) return; // resumed: drop what was handled
    sub.last = u.seq;
    sub.onUpdate(u);
  }

  sendFrame(obj) {
    const s = this.session, link = this.link;
    if (!s || !link || link.closed) return Promise.reject(new RemoteError("closed", "not connected"));
    return s.seal(enc.encode(JSON.stringify(obj)), (frame) => link.send(frame));
  }

  teardown(err) {
    clearTimeout(this.refreshTimer);
    const link = this.link;
    this.link = null;
    this.session = null;
    if (link) link.close(1000, "");
    for (const p of this.pending.values()) p.reject(new RemoteError("closed", "the connection dropped before the machine answered (it may or may not have been done)"));
    this.pending.clear();
    if (this.frameWaiter) this.frameWaiter = null;
  }

  // role is this person's role on a session by their access token (the
  // project's .reeve/access.yaml may lower it on the daemon); "" when not
  // known yet.
  role(sessionId) {
    const c = this.claims;
    if (!c) return "";
    return (c.sroles && c.sroles[sessionId]) || c.srole || "none";
  }

  // mayDecide is whether the token lets this person decide a session's
  // permission requests (approver or owner).
  mayDecide(sessionId) {
    const r = this.role(sessionId);
    return r === "" || (RANK[r] || 0) >= RANK.approver;
  }

  // request sends a request and resolves with its ack's result.
  request(type, fields) {
    const id = "w" + this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.sendFrame(Object.assign({ type, id }, fields)).catch((e) => {
        this.pending.delete(id);
        reject(e);
      });
    });
  }

  // follow subscribes to a session from after; updates arrive once each,
  // in seq order, across reconnections.
  follow(sessionId, after, onUpdate, onEnded, onError) {
    this.subs.set(sessionId, { last: after, onUpdate, onEnded, onError });
    if (this.session) {
      return this.request("subscribe", { session_id: sessionId, after_seq: after, batch: true });
    }
    return Promise.resolve();
  }

  stop() {
    this.stopped = true;
    this.teardown(new RemoteError("closed", "stopped"));
  }
}
