// Registration (SPEC S8): against a fake supervisor that is away at first, then up, then
// restarted with an empty registry; deregistration on exit; the bearer only to loopback.

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import path from "node:path";
import { EventEmitter } from "node:events";
import { createVerifier, checkSupervisorAddr } from "../src/index.mjs";
import { stateDir, writePrivate, freePort } from "./helpers.js";

// fakeSupervisor answers the registration API on port, keeping its registry in memory (so a
// restart loses it) and recording every call. It emits "call" on each.
function fakeSupervisor(port, token) {
  const calls = [];
  const registry = new Map();
  const events = new EventEmitter();
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const auth = req.headers.authorization;
      const call = { method: req.method, url: req.url, auth, body: body ? JSON.parse(body) : null };
      calls.push(call);
      let status = 401;
      if (auth === `Bearer ${token}`) {
        if (req.method === "POST" && req.url === "/fleet/v1/consoles") {
          status = registry.has(call.body.id) ? 200 : 201;
          registry.set(call.body.id, call.body);
        } else if (req.method === "DELETE" && req.url.startsWith("/fleet/v1/consoles/")) {
          status = registry.delete(req.url.split("/").pop()) ? 204 : 404;
        }
      }
      call.status = status;
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(status >= 400 ? JSON.stringify({ error: "unauthorized", detail: "" }) : "{}");
      events.emit("call", call);
    });
  });
  return {
    calls,
    registry,
    events,
    start: () => new Promise((r) => server.listen(port, "127.0.0.1", r)),
    stop: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}
// next resolves with the first call that pred accepts, from now on.
function next(sup, pred) {
  return new Promise((resolve) => sup.events.on("call", (c) => pred(c) && resolve(c)));
}

test("S8 register at start-up, retried while the supervisor is away, again after it restarts; deregister on exit", async (t) => {
  const st = stateDir(t);
  const port = await freePort();
  writePrivate(path.join(st.fleetDir, "supervisor.addr"), `127.0.0.1:${port}\n`);
  const logs = [];
  const v = createVerifier({ stateDir: st.home, watch: false, logger: (level, msg, f) => logs.push({ level, msg, ...f }) });
  t.after(() => v.close());
  const sup = fakeSupervisor(port, st.token);

  const attempts = new EventEmitter();
  const failures = [];
  let sawFailure;
  const failed = new Promise((r) => (sawFailure = r));
  const attempt = (pred) => new Promise((resolve) => attempts.on("attempt", (err, status) => pred(err, status) && resolve()));
  const reg = v.register({
    id: "alpha",
    addr: "127.0.0.1:9001",
    name: "Alpha",
    refreshMs: 20,
    minBackoffMs: 5,
    maxBackoffMs: 20,
    onAttempt: (err, status) => {
      attempts.emit("attempt", err, status);
      if (err) {
        failures.push(err.message);
        if (failures.length === 3) sawFailure();
      }
    },
  });

  await failed; // away: three attempts failed, nothing sent
  assert.equal(sup.calls.length, 0);
  assert.equal(logs.filter((l) => l.msg === "console.register-failed").length, 1, "a lasting failure is logged once");

  const first = next(sup, (c) => c.method === "POST");
  const registered = attempt((err, status) => !err && status === 201);
  await sup.start();
  const c1 = await first;
  await registered;
  assert.equal(c1.status, 201);
  assert.deepEqual(c1.body, { id: "alpha", addr: "127.0.0.1:9001", name: "Alpha" });
  assert.equal(c1.auth, `Bearer ${st.token}`);
  assert.ok(logs.some((l) => l.msg === "console.registered" && l.status === 201));

  const refreshed = await next(sup, (c) => c.method === "POST");
  assert.equal(refreshed.status, 200, "a refresh re-POSTs: 200 refreshed");

  // The supervisor restarts with an empty registry: the console is back at the next refresh.
  await sup.stop();
  sup.registry.clear();
  const back = next(sup, (c) => c.method === "POST" && c.status === 201);
  await sup.start();
  assert.equal((await back).body.id, "alpha");

  const gone = next(sup, (c) => c.method === "DELETE");
  await reg.deregister();
  const del = await gone;
  assert.equal(del.url, "/fleet/v1/consoles/alpha");
  assert.equal(del.auth, `Bearer ${st.token}`);
  assert.equal(sup.registry.size, 0);
  const posts = sup.calls.filter((c) => c.method === "POST").length;
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(sup.calls.filter((c) => c.method === "POST").length, posts, "registered after deregister()");
  assert.ok(!JSON.stringify(logs).includes(st.token), "the token is in a log line");
  await sup.stop();
});

test("S8 the bearer goes only to a loopback literal", async (t) => {
  for (const bad of ["localhost:7420", "10.0.0.1:7420", "127.0.0.1", "127.0.0.1:0", "[::ffff:127.0.0.1]:7420", "[fe80::1%lo]:7420", "127.0.0.1:7420/x", "example.com:80"]) {
    assert.throws(() => checkSupervisorAddr(bad), /not a loopback literal/, bad);
  }
  assert.deepEqual(checkSupervisorAddr("127.0.0.1:7420"), { host: "127.0.0.1", port: 7420 });
  assert.deepEqual(checkSupervisorAddr("[::1]:7420"), { host: "::1", port: 7420 });

  const st = stateDir(t);
  writePrivate(path.join(st.fleetDir, "supervisor.addr"), "localhost:7420\n");
  const v = createVerifier({ stateDir: st.home, watch: false, logger: () => {} });
  t.after(() => v.close());
  let told;
  const attempted = new Promise((r) => (told = r));
  const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", onAttempt: (err) => told(err) });
  const err = await attempted;
  assert.match(err.message, /not a loopback literal.*the fleet token is not sent/);
  await reg.deregister();
});

test("S8 the bearer is never sent to a supervisor run by another user", { skip: process.platform !== "linux" || process.geteuid?.() !== 0 ? "needs root on Linux to run a listener as another uid" : false }, async (t) => {
  const { spawn } = await import("node:child_process");
  const st = stateDir(t);
  const port = await freePort();
  // A listener of uid 65534 that says how many bytes it was sent.
  const child = spawn(process.execPath, ["-e", `
    const s = require("net").createServer((c) => { let n = 0; c.on("data", (d) => { n += d.length; process.stdout.write("got " + n + "\\n"); }); });
    s.listen(${port}, "127.0.0.1", () => process.stdout.write("listening\\n"));
  `], { uid: 65534, gid: 65534, stdio: ["ignore", "pipe", "inherit"] });
  t.after(() => child.kill());
  let out = "";
  await new Promise((r) => child.stdout.on("data", (d) => { out += d; if (out.includes("listening")) r(); }));
  writePrivate(path.join(st.fleetDir, "supervisor.addr"), `127.0.0.1:${port}\n`);
  const v = createVerifier({ stateDir: st.home, watch: false, logger: () => {} });
  t.after(() => v.close());
  let told;
  const attempted = new Promise((r) => (told = r));
  const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", onAttempt: (err) => told(err) });
  const err = await attempted;
  await reg.deregister();
  assert.match(err.message, /run by another user \(uid 65534/);
  assert.ok(!out.includes("got"), "bytes reached the other user's listener");
});
