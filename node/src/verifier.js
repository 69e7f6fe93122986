// The judgement of every request a console receives (SPEC C1–C7), in the order of the Go package
// github.com/phase-console/fleet/console, and what a console wraps its handlers in.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ServerResponse } from "node:http";
import {
  FOLDED_FLEET,
  FOLDED_FLEET_LOGIN,
  foldName,
  isAssertionName,
  isLoopbackAddress,
  isLoopbackHost,
  logPath,
  parseBearer,
  sameOrigin,
} from "./contract.js";
import { TokenFollower, systemClock } from "./token.js";
import { peerUid } from "./peercred.js";
import { Registration } from "./register.js";

/** The identity header of a console's own --remote proxy (C3). */
export const DEFAULT_PROXY_HEADER = "Tailscale-User-Login";
/** How often the token file's stamp is polled; C1 wants a change seen within 2 s. */
export const WATCH_INTERVAL_MS = 1000;

/** Reason words, the spec's where it has them. */
export const Reason = Object.freeze({
  badToken: "fleet-bad-token", // 401, C1
  notLoopback: "fleet-not-loopback", // 421, C2
  andProxy: "fleet-and-proxy", // 403, C3
  host: "host", // 421: no assertion, Host not loopback (DNS rebinding)
  crossOrigin: "cross-origin", // 403: local request from a foreign Origin
  noAssertion: "no-assertion", // 403: no assertion, and not this user on this machine
  localOnly: "local-only", // 403, C5
  hookPeer: "not loopback", // 403, C6
  hookProxied: "not local", // 403, C6
  badRunToken: "bad-run-token", // 401, C6
  reachSettings: "reach-settings", // 403, C7
  badRequest: "bad-request", // 400: a request target that no HTTP server would take
});

/** Log event names. */
export const EVENT_REJECTED = "console.rejected";
export const EVENT_HOOK_REJECTED = "hook.rejected";

/** A Refusal is the answer to a request the console must not serve. It holds no secret. */
export class Refusal {
  constructor(status, reason, rule, detail) {
    this.refused = true;
    this.status = status;
    this.reason = reason;
    this.rule = rule;
    this.detail = detail;
  }
}

/**
 * stateHome resolves <stateHome>: flagValue (--state-dir), else $PHASE_CONSOLE_STATE_HOME, else
 * $XDG_STATE_HOME/phase-console (only when absolute), else ~/.local/state/phase-console.
 */
export function stateHome(flagValue = "", env = process.env) {
  if (flagValue) return path.resolve(flagValue);
  if (env.PHASE_CONSOLE_STATE_HOME) return path.resolve(env.PHASE_CONSOLE_STATE_HOME);
  if (env.XDG_STATE_HOME && path.isAbsolute(env.XDG_STATE_HOME)) return path.join(env.XDG_STATE_HOME, "phase-console");
  return path.join(os.homedir(), ".local", "state", "phase-console");
}

/** defaultTailscaleSocket is tailscaled's usual LocalAPI socket on this OS (as tailscale.com/paths). */
export function defaultTailscaleSocket() {
  if (process.platform === "darwin") return "/var/run/tailscaled.socket";
  return fs.existsSync("/var/run") ? "/var/run/tailscale/tailscaled.sock" : "tailscaled.sock";
}

/** jsonLogger writes one slog-shaped JSON line per event to stream (stderr by default). */
export function jsonLogger(stream = process.stderr) {
  return (level, msg, fields = {}) => {
    stream.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }) + "\n");
  };
}

const callers = new WeakMap(); // request → Caller, set by the middleware only
const runIds = new WeakMap(); // request → run id, set by permissionHook only
const peerVerdicts = new WeakMap(); // socket → Promise<string|null>: why the peer is not us, or null

/** callerOf returns the Caller that the middleware judged for req, or undefined. No client can set it. */
export function callerOf(req) {
  return callers.get(req);
}
/** runOf returns the id of the run whose bearer permissionHook accepted for req. */
export function runOf(req) {
  return runIds.get(req);
}

// The request's head as Go's net/http reads it, from rawHeaders (every line, nothing joined).
function headerLines(req) {
  const raw = req.rawHeaders;
  const out = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push([raw[i], raw[i + 1]]);
  return out;
}

// target splits a request target (by default what arrived: an Express-style router rewrites
// req.url below a mount point and keeps originalUrl) into its authority and raw path.
function target(req, u = req.originalUrl ?? req.url ?? "") {
  const m = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)([^?#]*)/.exec(u);
  if (m) return { authority: m[1], rawPath: m[2] || "/" };
  const q = u.search(/[?#]/);
  return { authority: null, rawPath: q >= 0 ? u.slice(0, q) : u };
}

// requestHost is what Go calls r.Host: the authority of an absolute-form target, else the one
// Host line; null when there are several (which Go's server refuses outright).
function requestHost(req, lines) {
  const t = target(req);
  if (t.authority) return t.authority;
  const hosts = lines.filter(([n]) => n.toLowerCase() === "host").map(([, v]) => v);
  if (hosts.length > 1) return null;
  return hosts[0] ?? "";
}

// decodePath percent-decodes a path byte by byte (as Go's URL.Path); null for a bad escape.
export function decodePath(raw) {
  let out = "";
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (c !== "%") {
      out += c;
      continue;
    }
    const h = raw.slice(i + 1, i + 3);
    if (!/^[0-9A-Fa-f]{2}$/.test(h)) return null;
    out += String.fromCharCode(parseInt(h, 16));
    i += 2;
  }
  return out;
}

// cleanPath is Go's path.Clean of "/"+p.
export function cleanPath(p) {
  const out = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") out.pop();
    else out.push(seg);
  }
  return "/" + out.join("/");
}

/** requestPath is the decoded path of req (Go's r.URL.Path), or null when it does not decode. */
export function requestPath(req) {
  return decodePath(target(req).rawPath);
}

/** isHookPath reports whether the first segment of the cleaned path is "hooks", any case. */
export function isHookPath(p) {
  const first = cleanPath(p).slice(1).split("/")[0];
  return first.toLowerCase() === "hooks";
}

/** isDeviceLogin: a login of the direct-reach door's shape, "device:…", any case. */
export function isDeviceLogin(login) {
  return typeof login === "string" && login.slice(0, 7).toLowerCase() === "device:";
}

// stripHeaders removes every header whose name drop(name) accepts from req.headers,
// req.headersDistinct and req.rawHeaders. The first two are computed (node:http builds them
// lazily from rawHeaders, by its original count) before rawHeaders is shortened.
function stripHeaders(req, drop) {
  const views = [req.headers, req.headersDistinct].filter(Boolean);
  for (const view of views) for (const k of Object.keys(view)) if (drop(k)) delete view[k];
  req.rawHeaders = req.rawHeaders.filter((_, i, raw) => !drop(raw[i - (i % 2)]));
}

function peerString(socket) {
  const a = socket?.remoteAddress ?? "";
  const p = socket?.remotePort ?? 0;
  return a.includes(":") ? `[${a}]:${p}` : `${a}:${p}`;
}

/**
 * A Verifier judges requests against the fleet token. Create one with createVerifier; it polls
 * the token file until close().
 */
export class Verifier {
  constructor(cfg = {}) {
    const home = stateHome(cfg.stateDir ?? "");
    this.home = home;
    this.fleetDir = path.join(home, "fleet");
    this.proxyFold = foldName(cfg.proxyHeader || DEFAULT_PROXY_HEADER);
    this.allowHost = cfg.allowHost ?? null;
    this.tsSocket = cfg.tailscaleSocket || defaultTailscaleSocket();
    this.trustTSUser = Boolean(cfg.trustTailscaledUser);
    this.log = cfg.logger ?? jsonLogger();
    this.platform = cfg.platform ?? process.platform; // a seam for tests
    this.token = new TokenFollower(path.join(this.fleetDir, "fleet.token"), cfg.clock ?? systemClock);
    if (this.token.err) this.#logToken(this.token.err);
    this.timer = null;
    if (cfg.watch !== false) {
      this.timer = setInterval(() => this.refresh(), cfg.watchIntervalMs ?? WATCH_INTERVAL_MS);
      this.timer.unref();
    }
  }

  /** refresh re-reads the token file if its stamp changed, and logs what changed (never the token). */
  refresh() {
    const { changed, err } = this.token.refresh();
    if (!changed) return;
    if (err) this.#logToken(err);
    else this.log("INFO", "console.token", { path: this.token.path, effect: "fleet token (re)loaded" });
  }

  #logToken(err) {
    this.log("ERROR", "console.token", {
      path: this.token.path,
      error: err.message,
      effect: "no assertion is believed until the token file is good",
    });
  }

  /** close stops following the token file; the verifier keeps judging with what it last read. */
  close() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** bearer returns the current fleet token, for registration only. Never log it. Throws when none. */
  bearer() {
    return this.token.currentToken();
  }

  #proxied(lines) {
    return lines.some(([n]) => {
      const f = foldName(n);
      return f === this.proxyFold || f === "forwarded" || f === "x-real-ip" || f.startsWith("x-forwarded-") || f.startsWith("tailscale-");
    });
  }

  #readAssertion(lines) {
    const a = { carried: false, trailer: false, bearers: [], logins: [] };
    for (const [n, v] of lines) {
      const f = foldName(n);
      if (f === FOLDED_FLEET) {
        a.carried = true;
        a.bearers.push(v);
      } else if (f === FOLDED_FLEET_LOGIN) {
        a.carried = true;
        a.logins.push(v);
      }
    }
    // A trailer is declared (and so counts) only on a chunked body, as Go's server reads it.
    const chunked = lines.some(([n, v]) => n.toLowerCase() === "transfer-encoding" && /(^|,)\s*chunked\s*$/i.test(v));
    if (chunked) {
      for (const [n, v] of lines) {
        if (n.toLowerCase() !== "trailer") continue;
        for (const name of v.split(",")) {
          if (isAssertionName(name.trim())) a.carried = a.trailer = true;
        }
      }
    }
    return a;
  }

  /**
   * verify judges req in the order of the Go package and resolves to the caller — {scope:"local",
   * login:""} or {scope:"remote", login} — or to a Refusal {refused, status, reason, rule, detail}.
   * It does not look at the path: the middleware and the guards add C5–C7. Any error refuses.
   */
  async verify(req) {
    try {
      return await this.#judge(req);
    } catch (err) {
      return new Refusal(403, Reason.noAssertion, "", "the request could not be judged: " + (err?.message ?? String(err)));
    }
  }

  async #judge(req) {
    const lines = headerLines(req);
    const host = requestHost(req, lines);
    const a = this.#readAssertion(lines);
    if (a.carried) return this.#judgeAssertion(lines, host, a);
    if (host === null || (!isLoopbackHost(host) && !(this.allowHost && this.allowHost(host)))) {
      return new Refusal(421, Reason.host, "", "Host is not a loopback name");
    }
    if (this.#proxied(lines) || !isLoopbackAddress(req.socket?.remoteAddress)) {
      return new Refusal(403, Reason.noAssertion, "", "only the supervisor's assertion makes a caller remote; this request came through a proxy or from another machine");
    }
    const why = await this.#sameUser(req.socket);
    if (why) return new Refusal(403, Reason.noAssertion, "", "the caller is not this console's user: " + why);
    const origins = lines.filter(([n]) => n.toLowerCase() === "origin").map(([, v]) => v);
    if (origins.length > 0) {
      const scheme = req.socket?.encrypted ? "https" : "http";
      if (origins.length !== 1 || !sameOrigin(origins[0], scheme, host)) {
        return new Refusal(403, Reason.crossOrigin, "", "Origin is not this console's own origin");
      }
    }
    return { scope: "local", login: "" };
  }

  #judgeAssertion(lines, host, a) {
    if (lines.some(([n]) => foldName(n) === this.proxyFold)) {
      return new Refusal(403, Reason.andProxy, "C3", "assertion beside the proxy identity header");
    }
    if (host === null || !isLoopbackHost(host)) {
      return new Refusal(421, Reason.notLoopback, "C2", "assertion on a Host that is not loopback");
    }
    let why = "";
    if (a.trailer) why = "declared as a trailer";
    else if (a.bearers.length !== 1) why = `${a.bearers.length} bearer values`;
    else if (a.logins.length !== 1) why = `${a.logins.length} login values`;
    else if (a.bearers[0] === "") why = "empty bearer";
    else if (a.logins[0] === "") why = "empty login";
    if (why) return new Refusal(401, Reason.badToken, "C1", "malformed assertion: " + why);
    if (!this.token.matchFresh(a.bearers[0])) {
      const detail = this.token.err
        ? "no fleet token is believed: the token file is unusable (see console.token)"
        : "bearer is not the fleet token";
      return new Refusal(401, Reason.badToken, "C1", detail);
    }
    return { scope: "remote", login: a.logins[0] };
  }

  // notTailscaledsUser: a console of tailscaled's own uid cannot tell a forwarded tailnet peer
  // from its own user, so it believes nobody local (unless trustTailscaledUser).
  #tailscaledsUser() {
    if (this.trustTSUser) return "";
    let st;
    try {
      st = fs.statSync(this.tsSocket);
    } catch {
      return ""; // no tailscaled here: nothing forwards tailnet peers to this machine's loopback
    }
    if (st.uid === process.geteuid?.()) {
      return `this console runs as tailscaled's user (uid ${st.uid}, owner of ${this.tsSocket}), so a tailnet peer that tailscaled forwards to 127.0.0.1 looks like you; run the console as another user (or set trustTailscaledUser when tailscaled uses a kernel TUN)`;
    }
    return "";
  }

  /**
   * judgeConnection judges once per connection whether its peer is this console's own user and
   * keeps the answer with the socket. attach(server) calls it as each connection arrives; verify
   * calls it for a socket it has not seen.
   */
  judgeConnection(socket) {
    let p = peerVerdicts.get(socket);
    if (!p) {
      p = this.#lookupPeer(socket);
      peerVerdicts.set(socket, p);
    }
    return p;
  }

  async #lookupPeer(socket) {
    try {
      const uid = await peerUid(socket.localAddress, socket.localPort, socket.remoteAddress, socket.remotePort, this.platform);
      if (socket.destroyed) return "the connection closed while its peer was looked up";
      const me = process.geteuid?.();
      if (uid !== me) return `run by another user (uid ${uid})`;
      return null;
    } catch (err) {
      return "cannot tell who is calling: " + err.message;
    }
  }

  async #sameUser(socket) {
    const ts = this.#tailscaledsUser();
    if (ts) return ts;
    if (!socket) return "the connection is unknown";
    return await this.judgeConnection(socket);
  }

  /** attach makes server judge each connection's peer as it arrives (once per connection). */
  attach(server) {
    server.on("connection", (socket) => {
      this.judgeConnection(socket);
    });
    return server;
  }

  // hookTransport is C6's first two checks.
  #hookTransport(req, lines) {
    if (!isLoopbackAddress(req.socket?.remoteAddress)) {
      return new Refusal(403, Reason.hookPeer, "C6", "the hook request did not arrive on loopback");
    }
    if (this.#readAssertion(lines).carried || this.#proxied(lines)) {
      return new Refusal(403, Reason.hookProxied, "C6", "the hook request came through a proxy");
    }
    return null;
  }

  /**
   * gate is the middleware's judgement: for /hooks and below the C6 transport checks first, then
   * verify. It resolves to {caller} or {refusal, event}.
   */
  async gate(req) {
    // The path as it arrived, and as a mounted app sees it: hooks under either name are hooks.
    const paths = [requestPath(req), decodePath(target(req, req.url ?? "").rawPath)];
    if (paths.includes(null)) return { refusal: new Refusal(400, Reason.badRequest, "", "the request target does not decode"), event: EVENT_REJECTED };
    let event = EVENT_REJECTED;
    if (paths.some(isHookPath)) {
      event = EVENT_HOOK_REJECTED;
      const ref = this.#hookTransport(req, headerLines(req));
      if (ref) return { refusal: ref, event };
    }
    const v = await this.verify(req);
    if (v.refused) return { refusal: v, event };
    return { caller: v };
  }

  // admit records the caller and removes every spelling of both assertion headers from req, so
  // that no handler or access log downstream holds the fleet token.
  #admit(req, caller) {
    callers.set(req, caller);
    stripHeaders(req, isAssertionName);
  }

  /**
   * middleware wraps a node:http request listener: every request is judged before handler sees
   * it; a refusal is answered and logged; otherwise handler(req, res) runs with callerOf(req) set
   * and the assertion headers removed.
   */
  middleware(handler) {
    return (req, res) => {
      this.gate(req).then(
        (g) => {
          if (g.refusal) return this.refuse(res, req, g.refusal, g.event);
          this.#admit(req, g.caller);
          return handler(req, res);
        },
        () => this.refuse(res, req, new Refusal(403, Reason.noAssertion, "", "the request could not be judged")),
      );
    };
  }

  /** express is middleware for Express-style apps: (req, res, next). */
  express() {
    return (req, res, next) => {
      this.gate(req).then(
        (g) => {
          if (g.refusal) return this.refuse(res, req, g.refusal, g.event);
          this.#admit(req, g.caller);
          next();
        },
        (err) => next(err),
      );
    };
  }

  /**
   * upgrade wraps a node:http 'upgrade' listener (WebSockets): the same judgement as middleware;
   * a refusal is written on the socket and the socket closed.
   */
  upgrade(handler) {
    return (req, socket, head) => {
      this.gate(req).then(
        (g) => {
          if (g.refusal) return this.refuseSocket(socket, req, g.refusal, g.event);
          this.#admit(req, g.caller);
          return handler(req, socket, head);
        },
        () => socket.destroy(),
      );
    };
  }

  // caller returns the middleware's Caller, or judges now (a guard without the middleware fails
  // closed the same way); null after it answered a refusal.
  async #caller(req, res, event) {
    const c = callerOf(req);
    if (c) return c;
    const v = await this.verify(req);
    if (v.refused) {
      this.refuse(res, req, v, event);
      return null;
    }
    return v;
  }

  /** localOnly serves handler to scope local only; remote is 403 local-only (C5: presence). */
  localOnly(handler) {
    return async (req, res, next) => {
      const c = await this.#caller(req, res, EVENT_REJECTED);
      if (!c) return;
      if (c.scope !== "local") return this.refuse(res, req, new Refusal(403, Reason.localOnly, "C5", "only a local caller may do this"));
      return handler(req, res, next);
    };
  }

  /**
   * permissionHook guards POST /hooks/permission-request (C6): not a loopback peer → 403 "not
   * loopback"; any assertion or proxy mark → 403 "not local" (both before the token and C1–C3);
   * then verify and C5 (remote → 403 local-only); then exactly one "Authorization: Bearer" that is
   * a live run's token, in constant time, else 401 bad-run-token. handler sees runOf(req) and no
   * Authorization header. Every refusal is logged as hook.rejected.
   */
  permissionHook(runs, handler) {
    return async (req, res, next) => {
      const ref = this.#hookTransport(req, headerLines(req));
      if (ref) return this.refuse(res, req, ref, EVENT_HOOK_REJECTED);
      const c = await this.#caller(req, res, EVENT_HOOK_REJECTED);
      if (!c) return;
      if (c.scope !== "local") {
        return this.refuse(res, req, new Refusal(403, Reason.localOnly, "C5", "the permission hook is local only"), EVENT_HOOK_REJECTED);
      }
      const auth = headerLines(req).filter(([n]) => n.toLowerCase() === "authorization").map(([, v]) => v);
      const tok = parseBearer(auth);
      const id = runs && tok !== null ? runs.match(tok) : null;
      if (id === null) {
        res.setHeader("WWW-Authenticate", 'Bearer realm="run"');
        return this.refuse(res, req, new Refusal(401, Reason.badRunToken, "C6", "no live run has this bearer"), EVENT_HOOK_REJECTED);
      }
      runIds.set(req, id);
      stripHeaders(req, (name) => name.toLowerCase() === "authorization");
      return handler(req, res, next);
    };
  }

  /** reachSettings guards reach settings (C7): a device login may GET/HEAD, anything else is 403 reach-settings. */
  reachSettings(handler) {
    return async (req, res, next) => {
      const c = await this.#caller(req, res, EVENT_REJECTED);
      if (!c) return;
      if (req.method !== "GET" && req.method !== "HEAD" && isDeviceLogin(c.login)) {
        return this.refuse(res, req, new Refusal(403, Reason.reachSettings, "C7", "a paired device cannot change reach settings"));
      }
      return handler(req, res, next);
    };
  }

  #logRefusal(req, ref, event) {
    this.log("WARN", event, {
      reason: ref.reason,
      status: ref.status,
      rule: ref.rule,
      method: req.method,
      path: logPath(req.originalUrl ?? req.url),
      peer: peerString(req.socket),
      detail: ref.detail,
    });
  }

  /**
   * refuse answers with ref and logs it: ref.status, X-Fleet-Reason, body {"error":"<reason>"},
   * and one JSON line with the event (console.rejected or hook.rejected). No secret in either.
   */
  refuse(res, req, ref, event = EVENT_REJECTED) {
    this.#logRefusal(req, ref, event);
    if (res.headersSent) return res.destroy();
    const body = JSON.stringify({ error: ref.reason }) + "\n";
    res.writeHead(ref.status, {
      "Content-Type": "application/json",
      "X-Content-Type-Options": "nosniff",
      "Cache-Control": "no-store",
      "X-Fleet-Reason": ref.reason,
      "Content-Length": Buffer.byteLength(body),
    });
    res.end(body);
  }

  /** refuseSocket is refuse for an upgrade: the answer is written on the socket, which is then closed. */
  refuseSocket(socket, req, ref, event = EVENT_REJECTED) {
    this.#logRefusal(req, ref, event);
    const res = new ServerResponse(req);
    res.shouldKeepAlive = false;
    res.assignSocket(socket);
    res.on("finish", () => socket.destroySoon?.() ?? socket.end());
    const body = JSON.stringify({ error: ref.reason }) + "\n";
    res.writeHead(ref.status, {
      "Content-Type": "application/json",
      "X-Content-Type-Options": "nosniff",
      "Cache-Control": "no-store",
      "X-Fleet-Reason": ref.reason,
      "Content-Length": Buffer.byteLength(body),
      Connection: "close",
    });
    res.end(body);
  }

  /**
   * register keeps the console registered with the supervisor (SPEC S8) until deregister(): see
   * Registration. opts.supervisor overrides <stateHome>/fleet/supervisor.addr.
   */
  register(opts) {
    const r = new Registration({ fleetDir: this.fleetDir, token: () => this.bearer(), log: this.log, ...opts });
    r.start();
    return r;
  }
}

/** createVerifier starts following <stateHome>/fleet/fleet.token. */
export function createVerifier(cfg = {}) {
  return new Verifier(cfg);
}
