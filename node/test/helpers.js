// Shared by the tests: a state folder with a fleet token, a server with the verifier in front of
// an echo handler that records what the console saw, and raw HTTP over net sockets.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import net from "node:net";
import http from "node:http";
import { randomBytes } from "node:crypto";
import { createVerifier, callerOf, runOf, Runs } from "../src/index.mjs";

export function newToken() {
  return randomBytes(32).toString("base64url");
}

/** stateDir makes <stateHome>/fleet (0700) with a fleet.token (0600); returns {home, fleetDir, tokenPath, token}. */
export function stateDir(t) {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "fleet-node-"));
  t.after(() => fs.rmSync(home, { recursive: true, force: true }));
  const fleetDir = path.join(home, "fleet");
  fs.mkdirSync(fleetDir, { mode: 0o700 });
  const tokenPath = path.join(fleetDir, "fleet.token");
  const token = newToken();
  writePrivate(tokenPath, token + "\n");
  return { home, fleetDir, tokenPath, token };
}

/** writePrivate writes a file 0600 atomically (temp file, rename), as `fleet token rotate` does. */
export function writePrivate(file, data) {
  const tmp = file + ".tmp-" + randomBytes(4).toString("hex");
  fs.writeFileSync(tmp, data, { mode: 0o600 });
  fs.renameSync(tmp, file);
}

/**
 * consoleServer serves the verifier's middleware in front of routes that record what arrived:
 * /presence (localOnly), /hooks/permission-request (permissionHook), /settings/reach
 * (reachSettings), anything else the echo. Returns {port, seen, logs, runs, verifier}.
 */
export async function consoleServer(t, cfg = {}) {
  const logs = [];
  const verifier = createVerifier({ logger: (level, msg, fields) => logs.push({ level, msg, ...fields }), watch: false, ...cfg });
  t.after(() => verifier.close());
  const runs = new Runs();
  const seen = [];
  const echo = (req, res) => {
    seen.push({ url: req.url, caller: callerOf(req), run: runOf(req), headers: { ...req.headers }, rawHeaders: [...req.rawHeaders] });
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(callerOf(req) ?? null));
  };
  const presence = verifier.localOnly(echo);
  const hook = verifier.permissionHook(runs, echo);
  const reach = verifier.reachSettings(echo);
  const server = http.createServer(
    verifier.middleware((req, res) => {
      if (req.url === "/presence") return presence(req, res);
      if (req.url === "/hooks/permission-request") return hook(req, res);
      if (req.url === "/settings/reach") return reach(req, res);
      return echo(req, res);
    }),
  );
  verifier.attach(server);
  server.on(
    "upgrade",
    verifier.upgrade((req, socket) => {
      seen.push({ url: req.url, caller: callerOf(req), upgrade: true });
      socket.end("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    }),
  );
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
  return { port: server.address().port, seen, logs, runs, verifier, server };
}

/**
 * raw sends bytes on a fresh TCP connection and reads the answer until the server closes or the
 * response is complete. opts.localPort binds the client's end. Returns {status, reason, headers, body}.
 */
export function raw(port, bytes, opts = {}) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: opts.host ?? "127.0.0.1", localPort: opts.localPort });
    const chunks = [];
    s.on("connect", () => s.write(bytes));
    s.on("data", (c) => {
      chunks.push(c);
      const r = parseResponse(Buffer.concat(chunks));
      if (r) {
        s.destroy();
        resolve(r);
      }
    });
    s.on("error", reject);
    s.on("close", () => resolve(parseResponse(Buffer.concat(chunks), true) ?? { status: 0, reason: "", headers: {}, body: "" }));
  });
}

function parseResponse(buf, atEnd = false) {
  const text = buf.toString("latin1");
  const end = text.indexOf("\r\n\r\n");
  if (end < 0) return null;
  const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(":");
    headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
  }
  const status = Number(statusLine.split(" ")[1]);
  let body = text.slice(end + 4);
  if (headers["content-length"] !== undefined) {
    const n = Number(headers["content-length"]);
    if (body.length < n && !atEnd) return null;
    body = body.slice(0, n);
  } else if (headers["transfer-encoding"] === "chunked") {
    if (!body.endsWith("0\r\n\r\n") && !atEnd) return null;
    let out = "";
    let rest = body;
    for (;;) {
      const i = rest.indexOf("\r\n");
      const n = parseInt(rest.slice(0, i), 16);
      if (!n) break;
      out += rest.slice(i + 2, i + 2 + n);
      rest = rest.slice(i + 4 + n);
    }
    body = out;
  } else if (status !== 101 && status !== 204 && !atEnd) return null;
  return { status, reason: headers["x-fleet-reason"] ?? "", headers, body };
}

/** request builds a raw HTTP/1.1 request; header lines are [name, value] pairs, sent as given. */
export function request(method, target, lines, body = "") {
  let s = `${method} ${target} HTTP/1.1\r\n`;
  for (const [n, v] of lines) s += `${n}: ${v}\r\n`;
  if (body && !lines.some(([n]) => /^(content-length|transfer-encoding)$/i.test(n))) s += `Content-Length: ${Buffer.byteLength(body)}\r\n`;
  s += "Connection: close\r\n\r\n" + body;
  return s;
}

/** freePort returns a TCP port on 127.0.0.1 that nothing listens on (at the time). */
export async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const p = s.address().port;
  await new Promise((r) => s.close(r));
  return p;
}
