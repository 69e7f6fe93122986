#!/usr/bin/env node
// The reference console in Node: the same pages, routes, answers and flags as `fleet console`
// (console/refconsole in the Go module), built on @phase-console/fleet-console for everything it
// believes, so that `fleet check-console` can be run against it and its decisions compared with
// the Go one's.
//
//   node examples/console.mjs --id ID [--port N] [--name NAME] [--state-dir DIR]
//        [--supervisor ADDR] [--tailscale-socket PATH] [--trust-tailscaled-user]
//
// Endpoints (all behind the verifier's middleware, so a foreign Host is 421 on every request):
//
//   GET  /                           page: the caller's scope and login, an SSE counter, a WebSocket echo
//   GET  /app.js                     the page's script (no inline script: CSP script-src 'self')
//   GET  /whoami                     {"scope":"local"|"remote","login":"…"}; local callers have login ""
//   POST /presence                   C5: local only (403 local-only)      → {"presence":"ok"}
//   POST /runs                       local only: starts a run            → 201 {"id":"…","token":"…"}
//   DELETE /runs/{id}                local only: ends it; its token is dead at once → 204 (404 unknown)
//   POST /hooks/permission-request   C6: loopback, not proxied, run bearer → {"run":"…","decision":"ask"}
//   GET|POST /settings/reach         C7: a device login may not POST     → {"mode":"off"|"direct"}
//   GET  /events                     text/event-stream: "event: tick", data {"n":1}, {"n":2}, … every second
//   GET  /ws                         WebSocket echo
//
// The reach setting is a value in memory: the console only shows that C7 is enforced.

import http from "node:http";
import { createHash } from "node:crypto";
import path from "node:path";
import {
  createVerifier,
  callerOf,
  runOf,
  Runs,
  checkSupervisorAddr,
  validConsoleId,
  stateHome,
  readPrivateFile,
  parseToken,
  requestPath,
  defaultTailscaleSocket,
  jsonLogger,
} from "../src/index.mjs";

const SUMMARY =
  "Run the reference console on 127.0.0.1: whoami, presence, runs, the permission hook, reach settings, SSE, WebSocket (the C rules of docs/contract.md).";

const FLAGS = [
  ["id", "ID", "the console `ID`, [a-z0-9][a-z0-9-]{0,62} (required)", ""],
  ["port", "N", "TCP port on 127.0.0.1 (0: any free port)", "0"],
  ["name", "NAME", "a display `NAME` (default: the id)", ""],
  ["state-dir", "DIR", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)", ""],
  ["supervisor", "ADDR", "the supervisor's address `ADDR`, a loopback literal like 127.0.0.1:7420 (default: from <stateHome>/fleet/supervisor.addr)", ""],
  ["tailscale-socket", "PATH", "tailscaled's LocalAPI socket `PATH`: a console running as its owner believes nobody local", defaultTailscaleSocket()],
  ["trust-tailscaled-user", null, "believe local callers even when running as tailscaled's user (only with tailscaled on a kernel TUN)", false],
];

function usage(out) {
  out.write(`Usage: node examples/console.mjs [flags]\n\n${SUMMARY}\nIt registers with the supervisor at start-up and deregisters on exit (SIGINT, SIGTERM).\nLocal callers are scope local with login "".\n\nFlags:\n`);
  for (const [name, arg, help, def] of FLAGS) {
    out.write(`  --${name}${arg ? " " + arg : ""}\n    \t${help.replace(/`/g, "")}${def !== "" && def !== false ? ` (default ${JSON.stringify(def)})` : ""}\n`);
  }
}

// parseArgs reads flags as Go's flag package does: -x or --x, "--x value" or "--x=value", booleans
// without a value; the first non-flag argument ends them. Bad usage exits 2.
function parseArgs(argv) {
  const o = Object.fromEntries(FLAGS.map(([n, , , d]) => [n, d]));
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") break;
    if (!a.startsWith("-") || a === "-") {
      fail(`unexpected argument ${JSON.stringify(a)}`);
    }
    let [name, value] = a.replace(/^--?/, "").split(/=(.*)/s, 2);
    if (name === "h" || name === "help") {
      usage(process.stdout);
      process.exit(0);
    }
    const flag = FLAGS.find(([n]) => n === name);
    if (!flag) fail(`flag provided but not defined: -${name}`);
    if (flag[1] === null) {
      if (value === undefined) o[name] = true;
      else if (/^(1|t|true|T|TRUE|True)$/.test(value)) o[name] = true;
      else if (/^(0|f|false|F|FALSE|False)$/.test(value)) o[name] = false;
      else fail(`invalid boolean value ${JSON.stringify(value)} for -${name}`);
      continue;
    }
    if (value === undefined) {
      if (i + 1 >= argv.length) fail(`flag needs an argument: -${name}`);
      value = argv[++i];
    }
    o[name] = value;
  }
  return o;
}

function fail(msg) {
  process.stderr.write(`fleet console: ${msg}\n`);
  usage(process.stderr);
  process.exit(2);
}

const opts = parseArgs(process.argv.slice(2));
if (!validConsoleId(opts.id)) {
  process.stderr.write(`fleet console: --id ${JSON.stringify(opts.id)}: want [a-z0-9][a-z0-9-]{0,62}, e.g. --id alpha\n`);
  process.exit(2);
}
if (!/^[0-9]{1,5}$/.test(String(opts.port)) || Number(opts.port) > 65535) {
  process.stderr.write(`fleet console: --port ${JSON.stringify(opts.port)}: want 0-65535\n`);
  process.exit(2);
}
if (opts.supervisor) {
  try {
    checkSupervisorAddr(opts.supervisor);
  } catch (err) {
    process.stderr.write(`fleet console: --supervisor: ${err.message}; the fleet token is only ever sent to loopback\n`);
    process.exit(2);
  }
}
const home = stateHome(opts["state-dir"]);
// Without a usable token the console could believe nobody and register nowhere: say so once and stop.
{
  const tokenPath = path.join(home, "fleet", "fleet.token");
  try {
    parseToken(readPrivateFile(tokenPath).data);
  } catch (err) {
    const msg =
      err.code === "ENOENT"
        ? `no fleet token at ${tokenPath}; 'fleet serve' creates it on first start`
        : `cannot use the fleet token: ${err.message.startsWith(tokenPath) ? err.message : tokenPath + ": " + err.message}`;
    process.stderr.write(`fleet console: ${msg}\n`);
    process.exit(1);
  }
}

const log = jsonLogger(process.stderr);
const verifier = createVerifier({
  stateDir: home,
  logger: log,
  tailscaleSocket: opts["tailscale-socket"],
  trustTailscaledUser: opts["trust-tailscaled-user"],
});
const runs = new Runs();
const name = opts.name || opts.id;
let reach = "off";

function writeJSON(res, status, v) {
  const body = JSON.stringify(v) + "\n";
  res.writeHead(status, {
    "Content-Type": "application/json",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Length": Buffer.byteLength(body),
  });
  res.end(body);
}

function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on("data", (c) => {
      if (n < limit) chunks.push(c.subarray(0, limit - n));
      n += c.length;
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function securityHeaders(res) {
  res.setHeader("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.setHeader("X-Frame-Options", "DENY");
  res.setHeader("Referrer-Policy", "no-referrer");
  res.setHeader("Cache-Control", "no-store");
}

const escapeHTML = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;" })[c]);

function page(req, res) {
  const who = callerOf(req);
  securityHeaders(res);
  res.setHeader("Content-Type", "text/html; charset=utf-8");
  const login = who.login ? ` as <strong id="login">${escapeHTML(who.login)}</strong>` : "";
  res.end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHTML(name)} — fleet reference console</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body>
<h1>${escapeHTML(name)}</h1>
<p>Console <code>${escapeHTML(opts.id)}</code>. You are <strong id="scope">${escapeHTML(who.scope)}</strong>${login}.</p>
<p>Server-sent events: <output id="tick">waiting…</output></p>
<p>WebSocket echo: <input id="msg" value="hello"> <button id="send">send</button> <output id="echo"></output></p>
<script src="app.js"></script>
</body></html>
`);
}

// The script uses URLs relative to the page, so it works at / and behind the supervisor at /c/<id>/.
const appJS = `"use strict";
const tick = document.getElementById("tick");
const es = new EventSource("events");
es.addEventListener("tick", (e) => { tick.textContent = JSON.parse(e.data).n; });
const echo = document.getElementById("echo");
const u = new URL("ws", location.href);
u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
const sock = new WebSocket(u);
sock.onmessage = (e) => { echo.textContent = e.data; };
document.getElementById("send").onclick = () => sock.send(document.getElementById("msg").value);
`;

function script(req, res) {
  securityHeaders(res);
  res.setHeader("Content-Type", "text/javascript; charset=utf-8");
  res.end(appJS);
}

const whoami = (req, res) => writeJSON(res, 200, callerOf(req));
const presence = verifier.localOnly((req, res) => writeJSON(res, 200, { presence: "ok" }));
const startRun = verifier.localOnly((req, res) => {
  let run;
  try {
    run = runs.start();
  } catch {
    return writeJSON(res, 503, { error: "runs" });
  }
  log("INFO", "console.run-started", { run: run.id });
  writeJSON(res, 201, run);
});
const endRun = verifier.localOnly((req, res, id) => {
  if (!runs.end(id)) return writeJSON(res, 404, { error: "unknown-run" });
  log("INFO", "console.run-ended", { run: id });
  res.writeHead(204);
  res.end();
});
const hook = verifier.permissionHook(runs, async (req, res) => {
  await readBody(req, 1 << 20);
  writeJSON(res, 200, { run: runOf(req), decision: "ask" });
});
const getReach = verifier.reachSettings((req, res) => writeJSON(res, 200, { mode: reach }));
const setReach = verifier.reachSettings(async (req, res) => {
  const raw = (await readBody(req, 4 << 10)).toString("utf8");
  let body = {};
  if (raw.trim() !== "") {
    try {
      body = JSON.parse(raw);
    } catch {
      return writeJSON(res, 400, { error: "bad-json" });
    }
  }
  let mode = body && typeof body === "object" && typeof body.mode === "string" ? body.mode : "";
  if (mode === "") mode = "off";
  if (mode !== "off" && mode !== "direct") return writeJSON(res, 400, { error: "mode must be off or direct" });
  reach = mode;
  writeJSON(res, 200, { mode });
});

const streams = new Set();
function events(req, res) {
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no" });
  res.write("retry: 3000\n\n");
  let n = 0;
  const t = setInterval(() => res.write(`event: tick\ndata: {"n":${++n}}\n\n`), 1000);
  streams.add(res);
  res.on("close", () => {
    clearInterval(t);
    streams.delete(res);
  });
}

// The routes, as Go's ServeMux patterns of the Go reference console: GET also serves HEAD; a
// known path with another method is 405 with Allow; anything else 404.
const routes = [
  ["/", { GET: page }],
  ["/app.js", { GET: script }],
  ["/whoami", { GET: whoami }],
  ["/presence", { POST: presence }],
  ["/runs", { POST: startRun }],
  [/^\/runs\/([^/]+)$/, { DELETE: endRun }],
  ["/hooks/permission-request", { POST: hook }],
  ["/settings/reach", { GET: getReach, POST: setReach }],
  ["/events", { GET: events }],
  ["/ws", { GET: wsNotUpgraded }],
];

// goCleanPath is Go's ServeMux cleanPath: a rooted path.Clean that keeps one trailing slash.
function goCleanPath(p) {
  if (p === "") return "/";
  if (p[0] !== "/") p = "/" + p;
  const out = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") out.pop();
    else out.push(seg);
  }
  let np = "/" + out.join("/");
  if (p.endsWith("/") && np !== "/") np += "/";
  return np;
}

function route(req, res) {
  const p = requestPath(req) ?? "";
  if (req.method !== "CONNECT") {
    const clean = goCleanPath(p);
    if (clean !== p) {
      const q = (req.url ?? "").indexOf("?");
      res.writeHead(307, { Location: clean + (q >= 0 ? req.url.slice(q) : ""), "Content-Type": "text/html; charset=utf-8" });
      return res.end(`<a href="${escapeHTML(clean)}">Temporary Redirect</a>.\n\n`);
    }
  }
  for (const [pattern, methods] of routes) {
    let args = [];
    if (typeof pattern === "string") {
      if (pattern !== p) continue;
    } else {
      const m = pattern.exec(p);
      if (!m) continue;
      args = m.slice(1);
    }
    const h = methods[req.method] ?? (req.method === "HEAD" ? methods.GET : undefined);
    if (!h) {
      const allow = Object.keys(methods).flatMap((m) => (m === "GET" ? ["GET", "HEAD"] : [m])).sort();
      res.writeHead(405, { Allow: allow.join(", "), "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff" });
      return res.end("Method Not Allowed\n");
    }
    return h(req, res, ...args);
  }
  res.writeHead(404, { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff" });
  res.end("404 page not found\n");
}

function wsNotUpgraded(req, res) {
  res.writeHead(426, { Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Version": "13", "Content-Type": "text/plain; charset=utf-8" });
  res.end("WebSocket protocol violation: Connection header does not contain Upgrade\n");
}

// A request that asks for an upgrade reaches node:http's 'upgrade' event, not 'request'; all
// but a WebSocket handshake for /ws are answered as ordinary requests, then the socket is closed.
function asOrdinaryRequest(req, socket) {
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket);
  res.on("finish", () => socket.end());
  route(req, res);
}

const sockets = new Set();
function upgrade(req, socket, head) {
  const p = requestPath(req);
  const token = (name) => (req.headers[name] ?? "").split(",").map((s) => s.trim().toLowerCase());
  if (p !== "/ws" || req.method !== "GET" || !token("upgrade").includes("websocket")) {
    return asOrdinaryRequest(req, socket);
  }
  const key = req.headers["sec-websocket-key"] ?? "";
  if (req.headers["sec-websocket-version"] !== "13" || Buffer.from(key, "base64").length !== 16 || !token("connection").includes("upgrade")) {
    socket.end("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nWebSocket protocol violation\n");
    return;
  }
  const accept = createHash("sha1").update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  sockets.add(socket);
  socket.on("close", () => sockets.delete(socket));
  echo(socket, head);
}

// echo is a WebSocket echo (RFC 6455): every message back with its own opcode; pings answered;
// unmasked client frames and messages over 64 KiB close the connection.
function echo(socket, head) {
  const LIMIT = 64 << 10;
  let buf = head.length ? Buffer.from(head) : Buffer.alloc(0);
  let msg = [];
  let msgLen = 0;
  let msgOp = 0;
  const frame = (op, payload) => {
    const n = payload.length;
    const hdr = n < 126 ? Buffer.from([0x80 | op, n]) : n < 65536 ? Buffer.from([0x80 | op, 126, n >> 8, n & 255]) : Buffer.concat([Buffer.from([0x80 | op, 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; })()]);
    socket.write(Buffer.concat([hdr, payload]));
  };
  const close = (code) => {
    const b = Buffer.alloc(2);
    b.writeUInt16BE(code);
    frame(0x8, b);
    socket.end();
  };
  const onData = (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (buf.length < 2) return;
      const fin = buf[0] & 0x80;
      const op = buf[0] & 0x0f;
      const masked = buf[1] & 0x80;
      let len = buf[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        const big = buf.readBigUInt64BE(2);
        if (big > BigInt(LIMIT)) return close(1009);
        len = Number(big);
        off = 10;
      }
      if (!masked) return close(1002);
      if (len > LIMIT) return close(1009);
      if (buf.length < off + 4 + len) return;
      const mask = buf.subarray(off, off + 4);
      const payload = Buffer.from(buf.subarray(off + 4, off + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      buf = buf.subarray(off + 4 + len);
      if (op === 0x8) return close(payload.length >= 2 ? payload.readUInt16BE(0) : 1000);
      if (op === 0x9) {
        frame(0xa, payload);
        continue;
      }
      if (op === 0xa) continue;
      if (op === 0x1 || op === 0x2) {
        msgOp = op;
        msg = [];
        msgLen = 0;
      } else if (op !== 0x0) return close(1002);
      msg.push(payload);
      msgLen += payload.length;
      if (msgLen > LIMIT) return close(1009);
      if (fin) {
        frame(msgOp, Buffer.concat(msg));
        msg = [];
        msgLen = 0;
      }
    }
  };
  socket.on("data", onData);
  socket.on("error", () => socket.destroy());
  if (buf.length) onData(Buffer.alloc(0));
}

const server = http.createServer(
  { maxHeaderSize: 64 << 10, headersTimeout: 10_000, requestTimeout: 0, keepAliveTimeout: 120_000 },
  verifier.middleware(route),
);
verifier.attach(server); // who is "local" is judged once per connection
server.on("upgrade", verifier.upgrade(upgrade));
server.on("clientError", (err, socket) => {
  if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
  else socket.destroy();
});

server.listen(Number(opts.port), "127.0.0.1", () => {
  const addr = `127.0.0.1:${server.address().port}`;
  process.stdout.write(`fleet console ${opts.id} listening on http://${addr}/\n`);
  log("INFO", "console.listening", { console: opts.id, addr });
  const registration = verifier.register({ id: opts.id, addr, name, supervisor: opts.supervisor });
  let stopping = false;
  // A registration the supervisor refuses for good (any 4xx but 429) is said once, and the
  // console stops: it would otherwise run unreachable through the supervisor.
  registration.ready.catch((err) => {
    if (stopping) return;
    process.stderr.write(`fleet console: the supervisor refused the registration of ${opts.id}: ${err.message}\n`);
    process.exit(1);
  });
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await registration.close();
    for (const s of streams) s.destroy();
    for (const s of sockets) s.destroy();
    server.close();
    server.closeIdleConnections?.();
    verifier.close();
    log("INFO", "console.stopped", { console: opts.id });
    setTimeout(() => process.exit(0), 5000).unref();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
});
server.on("error", (err) => {
  process.stderr.write(`fleet console: listen on 127.0.0.1:${opts.port}: ${err.message} (pick another --port, or 0 for any)\n`);
  process.exit(1);
});

