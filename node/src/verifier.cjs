// The judgement of every request a console receives (SPEC C1–C7), in the order of the Go package
// github.com/phase-console/fleet/console, and what a console wraps its handlers in.

"use strict";

const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { ServerResponse } = require("node:http");
const {
  FOLDED_FLEET,
  FOLDED_FLEET_LOGIN,
  foldName,
  isAssertionName,
  isLoopbackAddress,
  isLoopbackHost,
  logPath,
  parseBearer,
  sameOrigin,
} = require("./contract.cjs");
const { TokenFollower, systemClock } = require("./token.cjs");
const { peerUid } = require("./peercred.cjs");
const { Registration, validateRegistration } = require("./register.cjs");
const { Runs } = require("./runs.cjs");

/** The identity header of a console's own --remote proxy (C3). */
const DEFAULT_PROXY_HEADER = "Tailscale-User-Login";
/** How often the token file's stamp is polled; C1 wants a change seen within 2 s. */
const WATCH_INTERVAL_MS = 1000;

/** Reason words, the spec's where it has them. */
const Reason = Object.freeze({
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
const EVENT_REJECTED = "console.rejected";
const EVENT_HOOK_REJECTED = "hook.rejected";

/** A Refusal is the answer to a request the console must not serve. It holds no secret. */
class Refusal {
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
function stateHome(flagValue = "", env = process.env) {
  if (flagValue) return path.resolve(flagValue);
  if (env.PHASE_CONSOLE_STATE_HOME) return path.resolve(env.PHASE_CONSOLE_STATE_HOME);
  if (env.XDG_STATE_HOME && path.isAbsolute(env.XDG_STATE_HOME)) return path.join(env.XDG_STATE_HOME, "phase-console");
  return path.join(os.homedir(), ".local", "state", "phase-console");
}

/** defaultTailscaleSocket is tailscaled's usual LocalAPI socket on this OS (as tailscale.com/paths). */
function defaultTailscaleSocket() {
  if (process.platform === "darwin") return "/var/run/tailscaled.socket";
  return fs.existsSync("/var/run") ? "/var/run/tailscale/tailscaled.sock" : "tailscaled.sock";
}

/** jsonLogger writes one slog-shaped JSON line per event to stream (stderr by default). */
function jsonLogger(stream = process.stderr) {
  return (level, msg, fields = {}) => {
    stream.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }) + "\n");
  };
}

const callers = new WeakMap(); // request → Caller, set by the middleware only
const runIds = new WeakMap(); // request → run id, set by permissionHook only
const peerVerdicts = new WeakMap(); // socket → Promise<string|null>: why the peer is not us, or null

// rawRequest is the node:http request behind what a handler is given: the request itself (node:http,
// Express), a Fastify request (.raw), or a Hono context on @hono/node-server (.env.incoming).
function rawRequest(x) {
  if (x && Array.isArray(x.rawHeaders)) return x;
  if (x && x.raw && Array.isArray(x.raw.rawHeaders)) return x.raw;
  const incoming = x && x.req && x.env ? x.env.incoming : undefined;
  if (incoming && Array.isArray(incoming.rawHeaders)) return incoming;
  return null;
}

/**
 * callerOf returns the Caller that the verifier judged for req (a node:http or Express request, a
 * Fastify request or a Hono context). It throws when the verifier has not passed req — a handler
 * mounted without the middleware, or before it — so that no handler mistakes "not judged" for a
 * caller. No client can set it.
 */
function callerOf(req) {
  const raw = rawRequest(req);
  const c = raw ? callers.get(raw) : undefined;
  if (!c) {
    throw new Error("callerOf: the fleet verifier has not passed this request; mount v.middleware(), v.express(), v.fastify() or v.hono() in front of this handler");
  }
  return c;
}
/** runOf returns the id of the run whose bearer permissionHook accepted for req, or undefined. */
function runOf(req) {
  const raw = rawRequest(req);
  return raw ? runIds.get(raw) : undefined;
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
function decodePath(raw) {
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
function cleanPath(p) {
  const out = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") out.pop();
    else out.push(seg);
  }
  return "/" + out.join("/");
}

/** requestPath is the decoded path of req (Go's r.URL.Path), or null when it does not decode. */
function requestPath(req) {
  return decodePath(target(req).rawPath);
}

/** isHookPath reports whether the first segment of the cleaned path is "hooks", any case. */
function isHookPath(p) {
  const first = cleanPath(p).slice(1).split("/")[0];
  return first.toLowerCase() === "hooks";
}

/** isDeviceLogin: a login of the direct-reach door's shape, "device:…", any case. */
function isDeviceLogin(login) {
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

// refusalParts is the answer to a refusal: its status, headers and body {"error":"<reason>"}.
function refusalParts(ref) {
  const body = JSON.stringify({ error: ref.reason }) + "\n";
  return {
    status: ref.status,
    head: {
      "Content-Type": "application/json",
      "X-Content-Type-Options": "nosniff",
      "Cache-Control": "no-store",
      "X-Fleet-Reason": ref.reason,
      "Content-Length": Buffer.byteLength(body),
    },
    body,
  };
}

// refusalSink stands in for a node:http response for the probe routes' guards: it keeps the
// refusal a guard writes, as {status, head, body}, for the framework's own answer.
function refusalSink() {
  const sink = {
    headersSent: false,
    answer: null,
    writeHead(status, head) {
      sink.answer = { status, head: { ...head }, body: "" };
      return sink;
    },
    end(body) {
      if (sink.answer) sink.answer.body = body ?? "";
    },
    destroy() {},
  };
  return sink;
}

// writeAnswer writes a probe route's answer {status, head?, body} on a node:http response.
function writeAnswer(res, a) {
  const head = { "Content-Type": "application/json", "Cache-Control": "no-store", ...(a.head ?? {}) };
  if (a.status === 204) {
    delete head["Content-Type"];
    res.writeHead(204, head);
    return res.end();
  }
  head["Content-Length"] = Buffer.byteLength(a.body);
  res.writeHead(a.status, head);
  res.end(a.body);
}

// readBody reads at most max bytes of req's body (more is an error); "" when already read.
function readBody(req, max) {
  return new Promise((resolve, reject) => {
    if (req.readableEnded) return resolve(Buffer.alloc(0));
    const chunks = [];
    let n = 0;
    req.on("data", (c) => {
      n += c.length;
      if (n > max) {
        req.destroy();
        reject(new Error("body too large"));
      } else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/**
 * A Verifier judges requests against the fleet token. Create one with createVerifier; it polls
 * the token file until close().
 */
class Verifier {
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
    this.#admit(req, v);
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
  // closed the same way); a refusal is {refusal} with the event to log it under.
  async #callerOrRefusal(req, event) {
    const c = callers.get(req);
    if (c) return { caller: c };
    const v = await this.verify(req);
    if (v.refused) return { refusal: v, event };
    this.#admit(req, v);
    return { caller: v };
  }

  // guard wraps a handler of any supported framework: check(req) resolves to null (serve) or
  // {refusal, event, headers}; a refusal is answered the framework's way. Arguments it cannot read
  // a node:http request from are refused 403 (a Hono app not on @hono/node-server among them).
  #guard(handler, check) {
    const v = this;
    return async function guarded(...args) {
      const [a, b] = args;
      const req = rawRequest(a);
      let out;
      if (!req) {
        out = { refusal: new Refusal(403, Reason.noAssertion, "", "the handler's arguments hold no node:http request (Hono runs on @hono/node-server only)"), event: EVENT_REJECTED };
      } else {
        try {
          out = await check(req);
        } catch (err) {
          out = { refusal: new Refusal(403, Reason.noAssertion, "", "the request could not be judged: " + (err?.message ?? String(err))), event: EVENT_REJECTED };
        }
      }
      if (!out) return handler.apply(this, args);
      return v.#answer(a, b, req, out.refusal, out.event, out.headers);
    };
  }

  // answer writes a refusal the way the handler's framework answers: on res (node:http, Express),
  // through the reply (Fastify), or as the Response a Hono handler returns.
  #answer(a, b, req, ref, event, headers = {}) {
    if (req) this.#logRefusal(req, ref, event);
    const { status, head, body } = refusalParts(ref);
    Object.assign(head, headers);
    if (a && Array.isArray(a.rawHeaders) && b && typeof b.writeHead === "function") {
      if (b.headersSent) return b.destroy();
      b.writeHead(status, head);
      return b.end(body);
    }
    if (b && typeof b.code === "function" && typeof b.send === "function") {
      return b.code(status).headers(head).send(body);
    }
    if (typeof Response === "function") return new Response(body, { status, headers: head });
    throw new Error("fleet-console: cannot answer this framework's request");
  }

  /** localOnly serves handler to scope local only; remote is 403 local-only (C5: presence). */
  localOnly(handler) {
    return this.#guard(handler, async (req) => {
      const g = await this.#callerOrRefusal(req, EVENT_REJECTED);
      if (g.refusal) return g;
      if (g.caller.scope !== "local") return { refusal: new Refusal(403, Reason.localOnly, "C5", "only a local caller may do this"), event: EVENT_REJECTED };
      return null;
    });
  }

  /**
   * permissionHook guards POST /hooks/permission-request (C6): not a loopback peer → 403 "not
   * loopback"; any assertion or proxy mark → 403 "not local" (both before the token and C1–C3);
   * then verify and C5 (remote → 403 local-only); then exactly one "Authorization: Bearer" that is
   * a live run's token, in constant time, else 401 bad-run-token. handler sees runOf(req) and no
   * Authorization header. Every refusal is logged as hook.rejected.
   */
  permissionHook(runs, handler) {
    return this.#guard(handler, async (req) => {
      const ref = this.#hookTransport(req, headerLines(req));
      if (ref) return { refusal: ref, event: EVENT_HOOK_REJECTED };
      const g = await this.#callerOrRefusal(req, EVENT_HOOK_REJECTED);
      if (g.refusal) return g;
      if (g.caller.scope !== "local") {
        return { refusal: new Refusal(403, Reason.localOnly, "C5", "the permission hook is local only"), event: EVENT_HOOK_REJECTED };
      }
      const auth = headerLines(req).filter(([n]) => n.toLowerCase() === "authorization").map(([, v]) => v);
      const tok = parseBearer(auth);
      const id = runs && tok !== null ? runs.match(tok) : null;
      if (id === null) {
        return {
          refusal: new Refusal(401, Reason.badRunToken, "C6", "no live run has this bearer"),
          event: EVENT_HOOK_REJECTED,
          headers: { "WWW-Authenticate": 'Bearer realm="run"' },
        };
      }
      runIds.set(req, id);
      stripHeaders(req, (name) => name.toLowerCase() === "authorization");
      return null;
    });
  }

  /** reachSettings guards reach settings (C7): a device login may GET/HEAD, anything else is 403 reach-settings. */
  reachSettings(handler) {
    return this.#guard(handler, async (req) => {
      const g = await this.#callerOrRefusal(req, EVENT_REJECTED);
      if (g.refusal) return g;
      if (req.method !== "GET" && req.method !== "HEAD" && isDeviceLogin(g.caller.login)) {
        return { refusal: new Refusal(403, Reason.reachSettings, "C7", "a paired device cannot change reach settings"), event: EVENT_REJECTED };
      }
      return null;
    });
  }

  /**
   * fastify is a Fastify plugin (`await app.register(v.fastify())`) that judges every request in an
   * onRequest hook, before routing, body parsing and every other hook of the app: a refusal is
   * answered and logged, otherwise callerOf(request) is set and the assertion headers are gone.
   * It applies to the whole app (the plugin is not encapsulated). WebSocket upgrades that bypass
   * Fastify's routing go through v.upgrade on the server's "upgrade" event.
   */
  fastify() {
    const v = this;
    function fleetVerifier(instance, _opts, done) {
      instance.addHook("onRequest", async (request, reply) => {
        let g;
        try {
          g = await v.gate(request.raw);
        } catch {
          g = { refusal: new Refusal(403, Reason.noAssertion, "", "the request could not be judged"), event: EVENT_REJECTED };
        }
        if (g.refusal) return v.#answer(request, reply, request.raw, g.refusal, g.event);
        v.#admit(request.raw, g.caller);
      });
      done();
    }
    fleetVerifier[Symbol.for("skip-override")] = true; // as fastify-plugin: the hook covers the app
    fleetVerifier[Symbol.for("fastify.display-name")] = "@phase-console/fleet-console";
    return fleetVerifier;
  }

  /**
   * hono is a Hono middleware (`app.use(v.hono())`, first) for a Hono app served by
   * @hono/node-server, whose context carries the node:http request (c.env.incoming) that the
   * verifier judges: a refusal is the Response, otherwise callerOf(c) is set and the assertion
   * headers are removed before Hono reads them. Without the node:http request (another runtime)
   * every request is refused 403: a console's peer cannot be judged there.
   */
  hono() {
    const v = this;
    return async function fleetVerifier(c, next) {
      const req = rawRequest(c);
      if (!req) {
        return v.#answer(c, null, null, new Refusal(403, Reason.noAssertion, "", "no node:http request in the Hono context: serve the app with @hono/node-server"), EVENT_REJECTED);
      }
      let g;
      try {
        g = await v.gate(req);
      } catch {
        g = { refusal: new Refusal(403, Reason.noAssertion, "", "the request could not be judged"), event: EVENT_REJECTED };
      }
      if (g.refusal) return v.#answer(c, null, req, g.refusal, g.event);
      v.#admit(req, g.caller);
      await next();
    };
  }

  /**
   * probeRoutes is the routes that `fleet check-console` probes (SPEC N5), for a console that wants
   * every probe to run rather than SKIP: GET /whoami, POST /presence (local only, C5), POST /runs and
   * DELETE /runs/<id> (local only), POST /hooks/permission-request (C6), GET|POST /settings/reach
   * (C7). It is a node:http/Express middleware (req, res, next) that answers those paths and passes
   * on the rest (404 without next); `.fastify` is the same as a Fastify plugin and `.hono` as a Hono
   * middleware. Mount it behind the verifier. opts.runs is the Runs whose tokens the hook takes
   * (default a new one); the reach setting is a value in memory.
   */
  probeRoutes(opts = {}) {
    const runs = opts.runs ?? new Runs();
    let reach = "off";
    const json = (status, value) => ({ status, body: value === null ? "" : JSON.stringify(value) + "\n" });
    const reachBody = async (req, parsed) => {
      let body = parsed;
      if (body === undefined) {
        const raw = (await readBody(req, 4 << 10)).toString("utf8");
        if (raw.trim() === "") body = {};
        else
          try {
            body = JSON.parse(raw);
          } catch {
            return null;
          }
      }
      return body && typeof body === "object" ? body : null;
    };
    const routes = {
      "GET /whoami": this.#guard(
        (req) => json(200, callers.get(req)),
        async (req) => {
          const g = await this.#callerOrRefusal(req, EVENT_REJECTED);
          return g.refusal ? g : null;
        },
      ),
      "POST /presence": this.localOnly(() => json(200, { presence: "ok" })),
      "POST /runs": this.localOnly(() => {
        try {
          return json(201, runs.start());
        } catch {
          return json(503, { error: "runs" });
        }
      }),
      "DELETE /runs/": this.localOnly((req, _sink, id) => (runs.end(id) ? json(204, null) : json(404, { error: "unknown-run" }))),
      "POST /hooks/permission-request": this.permissionHook(runs, async (req, _sink, parsed) => {
        if (parsed === undefined) await readBody(req, 1 << 20);
        return json(200, { run: runIds.get(req), decision: "ask" });
      }),
      "GET /settings/reach": this.reachSettings(() => json(200, { mode: reach })),
      "POST /settings/reach": this.reachSettings(async (req, _sink, parsed) => {
        const body = await reachBody(req, parsed);
        if (body === null) return json(400, { error: "bad-json" });
        const mode = typeof body.mode === "string" && body.mode !== "" ? body.mode : "off";
        if (mode !== "off" && mode !== "direct") return json(400, { error: "mode must be off or direct" });
        reach = mode;
        return json(200, { mode });
      }),
    };
    // pick finds the route of req: its handler and, for DELETE /runs/<id>, the id.
    const pick = (req) => {
      const p = requestPath(req) ?? "";
      const method = req.method === "HEAD" ? "GET" : req.method;
      const m = /^\/runs\/([^/]+)$/.exec(p);
      if (m && method === "DELETE") return { h: routes["DELETE /runs/"], arg: m[1] };
      const h = routes[`${method} ${p}`];
      return h ? { h, arg: undefined } : null;
    };
    // Each route handler is called as a guard-wrapped node:http handler with a stand-in response
    // that only records the refusal, so one answer path serves every framework.
    const run = async (req, parsed) => {
      const r = pick(req);
      if (!r) return null;
      const sink = refusalSink();
      const out = await r.h(req, sink, r.arg ?? parsed);
      return sink.answer ?? out;
    };
    const node = (req, res, next) => {
      run(req, req.body).then(
        (a) => {
          if (!a) return next ? next() : writeAnswer(res, { status: 404, head: {}, body: "" });
          writeAnswer(res, a);
        },
        (err) => (next ? next(err) : res.destroy()),
      );
    };
    node.fastify = function fleetProbeRoutes(instance, _opts, done) {
      instance.addHook("onRequest", async (request, reply) => {
        const a = await run(request.raw, undefined);
        if (!a) return;
        return reply.code(a.status).headers({ "Content-Type": "application/json", ...(a.head ?? {}) }).send(a.body);
      });
      done();
    };
    node.fastify[Symbol.for("skip-override")] = true;
    node.hono = async (c, next) => {
      const req = rawRequest(c);
      const a = req ? await run(req, undefined) : null;
      if (!a) return next();
      const status = a.status;
      return new Response(status === 204 ? null : a.body, { status, headers: { "Content-Type": "application/json", ...(a.head ?? {}) } });
    };
    return node;
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
    const { status, head, body } = refusalParts(ref);
    res.writeHead(status, head);
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
   * register keeps the console registered with the supervisor (SPEC S8, N3) until close(): see
   * Registration. It first checks id, addr, name (and supervisor) by the supervisor's own rules
   * and throws a TypeError naming every bad field, before anything is sent. opts.supervisor
   * overrides <stateHome>/fleet/supervisor.addr.
   */
  register(opts) {
    validateRegistration(opts);
    const r = new Registration({ fleetDir: this.fleetDir, token: () => this.bearer(), log: this.log, ...opts });
    r.start();
    return r;
  }
}

/** createVerifier starts following <stateHome>/fleet/fleet.token. */
function createVerifier(cfg = {}) {
  return new Verifier(cfg);
}

module.exports = { DEFAULT_PROXY_HEADER, WATCH_INTERVAL_MS, Reason, EVENT_REJECTED, EVENT_HOOK_REJECTED, Refusal, stateHome, defaultTailscaleSocket, jsonLogger, callerOf, runOf, decodePath, cleanPath, requestPath, isHookPath, isDeviceLogin, Verifier, createVerifier };
