// The end-to-end channel to a paired daemon, in the browser: the same
// handshake and frames as server/sdk/e2e (docs/e2e.md), with WebCrypto.
//
// Secrets stay in memory: the ephemeral X25519 key is generated
// non-extractable, the two transport keys are imported as non-extractable
// AES-GCM keys, and the handshake's intermediate bytes are dropped with the
// handshake object.

const enc = new TextEncoder();
const PROTOCOL = "reeve-e2e/1 NK X25519 AES-256-GCM SHA-256 HKDF";
export const KIND_HELLO1 = 1, KIND_HELLO2 = 2, KIND_DATA = 3, KIND_ANCHOR_REQUEST = 4, KIND_ANCHOR_ANSWER = 5;
const HEADER = 10, TAG = 16;
export const MAX_CHUNK = 32 << 10;
export const MAX_FRAME = HEADER + MAX_CHUNK + TAG;

// E2EError carries a kind the page words for a person: anchor, fingerprint,
// tampered, replay, malformed, refused, unsupported.
export class E2EError extends Error {
  constructor(kind, message) { super(message); this.kind = kind; }
}

const subtle = () => {
  if (!globalThis.crypto || !crypto.subtle) {
    throw new E2EError("unsupported", "this browser has no WebCrypto here (the page must be served over HTTPS or from localhost)");
  }
  return crypto.subtle;
};

function concat(...parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let i = 0;
  for (const p of parts) { out.set(p, i); i += p.length; }
  return out;
}

async function sha256(...parts) {
  return new Uint8Array(await subtle().digest("SHA-256", concat(...parts)));
}

async function hmac(key, data) {
  const k = await subtle().importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await subtle().sign("HMAC", k, data));
}

// hkdf is RFC 5869 over SHA-256, written on HMAC so that an empty input
// key (the split) needs no special case; salt is always the 32-byte
// chaining key.
async function hkdf(ikm, salt, info, length) {
  const prk = await hmac(salt, ikm);
  const infoBytes = enc.encode(info);
  let t = new Uint8Array(0);
  const out = [];
  for (let i = 1; out.length * 32 < length; i++) {
    t = await hmac(prk, concat(t, infoBytes, new Uint8Array([i])));
    out.push(t);
  }
  return concat(...out).slice(0, length);
}

async function aesKey(raw, usages) {
  return subtle().importKey("raw", raw, { name: "AES-GCM" }, false, usages);
}

function nonce(n) {
  const b = new Uint8Array(12);
  new DataView(b.buffer).setBigUint64(4, BigInt(n));
  return b;
}

// fingerprint is the first 16 bytes of SHA-256 of the anchor, as eight
// groups of four upper-case hex digits (e2e.Fingerprint).
export async function fingerprint(anchor) {
  const sum = await sha256(anchor);
  const hex = Array.from(sum.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("").toUpperCase();
  return hex.match(/.{4}/g).join("-");
}

export function normFingerprint(fp) {
  return (fp || "").toUpperCase().replace(/[^0-9A-F]/g, "");
}

export function prologue(workspace, target) {
  return enc.encode("reeve relay channel\0" + workspace + "\0" + target);
}

// checkAnchorAnswer returns the anchor of a daemon's answer (0x05 || key)
// when it has the expected fingerprint.
export async function checkAnchorAnswer(msg, expected) {
  if (msg.length !== 33 || msg[0] !== KIND_ANCHOR_ANSWER) {
    throw new E2EError("malformed", "the daemon's anchor answer is malformed");
  }
  const key = msg.slice(1);
  const fp = await fingerprint(key);
  if (normFingerprint(fp) !== normFingerprint(expected)) {
    throw new E2EError("fingerprint", "the daemon's anchor " + fp + " does not match the expected fingerprint " + expected);
  }
  return key;
}

// Handshake is the client's side of the one-round-trip key exchange.
export class Handshake {
  static async start(anchor, prologueBytes) {
    const s = subtle();
    const h = new Handshake();
    let anchorKey;
    try {
      anchorKey = await s.importKey("raw", anchor, { name: "X25519" }, true, []);
    } catch (e) {
      throw new E2EError("unsupported", "this browser cannot use X25519 keys in WebCrypto (" + e.message + "); use a current Chromium, Firefox or Safari");
    }
    h.anchorKey = anchorKey;
    h.eph = await s.generateKey({ name: "X25519" }, false, ["deriveBits"]);
    h.h = await sha256(enc.encode(PROTOCOL));
    h.ck = h.h;
    h.h = await sha256(h.h, prologueBytes);
    h.h = await sha256(h.h, anchor);
    return h;
  }

  async mixKey(ikm) {
    const out = await hkdf(ikm, this.ck, "reeve-e2e/1 mix", 64);
    this.ck = out.slice(0, 32);
    return out.slice(32);
  }

  // hello returns message 1 carrying payload.
  async hello(payload) {
    const s = subtle();
    const e = new Uint8Array(await s.exportKey("raw", this.eph.publicKey));
    this.h = await sha256(this.h, e);
    const es = new Uint8Array(await s.deriveBits({ name: "X25519", public: this.anchorKey }, this.eph.privateKey, 256));
    const k = await this.mixKey(es);
    const ct = new Uint8Array(await s.encrypt({ name: "AES-GCM", iv: new Uint8Array(12), additionalData: this.h }, await aesKey(k, ["encrypt"]), payload));
    this.h = await sha256(this.h, ct);
    return concat(new Uint8Array([KIND_HELLO1]), e, ct);
  }

  // finish reads message 2 and returns {session, payload}. A daemon that
  // does not hold the anchor cannot produce a message 2 that opens.
  async finish(msg) {
    const s = subtle();
    if (msg.length < 1 + 32 + TAG || msg[0] !== KIND_HELLO2) {
      throw new E2EError("malformed", "the daemon's handshake answer is malformed");
    }
    const re = msg.slice(1, 33), ct = msg.slice(33);
    this.h = await sha256(this.h, re);
    let ee;
    try {
      const reKey = await s.importKey("raw", re, { name: "X25519" }, true, []);
      ee = new Uint8Array(await s.deriveBits({ name: "X25519", public: reKey }, this.eph.privateKey, 256));
    } catch (e) {
      throw new E2EError("anchor", "the daemon's handshake key is not usable: " + e.message);
    }
    const k = await this.mixKey(ee);
    let payload;
    try {
      payload = new Uint8Array(await s.decrypt({ name: "AES-GCM", iv: new Uint8Array(12), additionalData: this.h }, await aesKey(k, ["decrypt"]), ct));
    } catch {
      throw new E2EError("anchor", "the daemon did not prove it holds this machine's trust anchor (wrong anchor, or someone in the middle)");
    }
    this.h = await sha256(this.h, ct);
    const split = await hkdf(new Uint8Array(0), this.ck, "reeve-e2e/1 split", 64);
    const session = new Session(await aesKey(split.slice(0, 32), ["encrypt"]), await aesKey(split.slice(32), ["decrypt"]));
    this.ck = this.h = null;
    return { session, payload };
  }
}

// Session seals and opens transport frames with one counter per
// direction; the receiver accepts only the exact next counter, and any
// failure is final.
export class Session {
  constructor(sendKey, recvKey) {
    this.sendKey = sendKey;
    this.recvKey = recvKey;
    this.sendN = 0;
    this.recvN = 0;
    this.partial = [];
    this.partialLen = 0;
    this.failed = null;
    this.maxMessage = 16 << 20;
    // Seal runs one message at a time so frames go out in counter order.
    this.sendChain = Promise.resolve();
  }

  // seal encrypts msg into frames, calling write with each in order.
  seal(msg, write) {
    const run = async () => {
      let off = 0;
      for (;;) {
        const end = Math.min(msg.length, off + MAX_CHUNK);
        const final = end === msg.length;
        const header = new Uint8Array(HEADER);
        header[0] = KIND_DATA;
        header[1] = final ? 1 : 0;
        new DataView(header.buffer).setBigUint64(2, BigInt(this.sendN));
        const ct = new Uint8Array(await subtle().encrypt({ name: "AES-GCM", iv: nonce(this.sendN), additionalData: header }, this.sendKey, msg.subarray(off, end)));
        this.sendN++;
        write(concat(header, ct));
        off = end;
        if (final) return;
      }
    };
    const p = this.sendChain.then(run);
    this.sendChain = p.catch(() => {});
    return p;
  }

  // open authenticates one frame; it returns the message when its last
  // frame has arrived, else null.
  async open(frame) {
    if (this.failed) throw this.failed;
    try {
      return await this.open1(frame);
    } catch (e) {
      this.failed = e;
      this.partial = [];
      throw e;
    }
  }

  async open1(frame) {
    if (frame.length > MAX_FRAME) throw new E2EError("malformed", "a frame from the daemon is over the size bound");
    if (frame.length < HEADER + TAG || frame[0] !== KIND_DATA || (frame[1] & ~1) !== 0) {
      throw new E2EError("malformed", "a frame from the daemon is malformed");
    }
    const header = frame.subarray(0, HEADER);
    const counter = Number(new DataView(frame.buffer, frame.byteOffset, HEADER).getBigUint64(2));
    if (counter !== this.recvN) {
      throw new E2EError("replay", "frame " + counter + " arrived where " + this.recvN + " was due (replayed, reordered or dropped)");
    }
    if (this.partialLen + frame.length - HEADER - TAG > this.maxMessage) {
      throw new E2EError("malformed", "a message from the daemon is over the size bound");
    }
    let pt;
    try {
      pt = new Uint8Array(await subtle().decrypt({ name: "AES-GCM", iv: nonce(counter), additionalData: header }, this.recvKey, frame.subarray(HEADER)));
    } catch {
      throw new E2EError("tampered", "frame " + counter + " failed authentication (altered in transit, or sealed with another key)");
    }
    this.recvN++;
    if (frame[1] & 1) {
      const whole = this.partial.length ? concat(...this.partial, pt) : pt;
      this.partial = [];
      this.partialLen = 0;
      return whole;
    }
    this.partial.push(pt);
    this.partialLen += pt.length;
    return null;
  }
}

export function b64encode(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

export function b64decode(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
