// register() (SPEC N3): every field checked at once before anything is sent; `ready` resolves at
// the first success and rejects for good on a 4xx but 429 (nothing left running); only 429 and
// 5xx are retried; close() ends everything, a retry's wait included. No unhandled rejection: the
// hook below fails every test that leaves one.

import { test, afterEach } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import path from "node:path";
import { createVerifier, RegistrationError } from "../src/index.mjs";
import { stateDir, writePrivate, freePort } from "./helpers.js";

const unhandled = [];
process.on("unhandledRejection", (reason) => unhandled.push(reason));
afterEach(async () => {
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(unhandled.splice(0), [], "an unhandled rejection");
});

// scripted is a supervisor that answers the n-th registration with statuses[n] (the last one
// after that) and the reason word of that status; it records every call.
async function scripted(t, statuses, token) {
  const calls = [];
  const words = { 400: "bad-registration", 401: "fleet-bad-token", 409: "conflict", 429: "slow-down", 503: "unavailable" };
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const status = req.method === "DELETE" ? 204 : statuses[Math.min(calls.filter((c) => c.method === "POST").length, statuses.length - 1)];
      calls.push({ method: req.method, url: req.url, status, auth: req.headers.authorization, body });
      const head = { "Content-Type": "application/json" };
      if (status >= 400) head["X-Fleet-Reason"] = words[status];
      res.writeHead(status, head);
      res.end(status >= 400 ? JSON.stringify({ error: words[status], detail: "scripted" }) : status === 204 ? "" : "{}");
    });
  });
  const port = await freePort();
  await new Promise((r) => server.listen(port, "127.0.0.1", r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
  return { calls, addr: `127.0.0.1:${port}`, token };
}

function verifier(t, st, logs = []) {
  const v = createVerifier({ stateDir: st.home, watch: false, logger: (level, msg, f) => logs.push({ level, msg, ...f }) });
  t.after(() => v.close());
  return v;
}

const fast = { refreshMs: 10_000, minBackoffMs: 5, maxBackoffMs: 10 };
const settle = (p) => p.then((v) => ({ ok: true, v }), (err) => ({ ok: false, err }));
const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
const sockets = () => process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;
// socketsSettle is the socket count once closing ones are gone (a close is seen on the next turns).
async function socketsSettle(want) {
  for (let i = 0; i < 100 && sockets() !== want; i++) await new Promise((r) => setTimeout(r, 10));
  return sockets();
}

test("N3 register() with each invalid field throws a TypeError naming the field and its rule; nothing is sent", async (t) => {
  const st = stateDir(t);
  const sup = await scripted(t, [201], st.token);
  const v = verifier(t, st);
  const good = { id: "alpha", addr: "127.0.0.1:9001", name: "Alpha", supervisor: sup.addr };
  const cases = [
    ["id upper case", { id: "Bad_ID" }, /id "Bad_ID": want \[a-z0-9\]\[a-z0-9-\]\{0,62\}/],
    ["id leading dash", { id: "-alpha" }, /id "-alpha": want/],
    ["id too long", { id: "a".repeat(64) }, /id "a{64}": want/],
    ["id empty", { id: "" }, /id "": want/],
    ["id not a string", { id: 7 }, /id 7: want/],
    ["addr not loopback", { addr: "10.0.0.1:80" }, /addr "10.0.0.1:80": want a loopback IP literal with a port/],
    ["addr a name", { addr: "localhost:9001" }, /addr "localhost:9001": want a loopback/],
    ["addr without a port", { addr: "127.0.0.1" }, /addr "127.0.0.1": want/],
    ["addr port 0", { addr: "127.0.0.1:0" }, /addr "127.0.0.1:0": want/],
    ["name over 100 bytes", { name: "é".repeat(51) }, /name: want at most 100 bytes of UTF-8 \(it has 102\)/],
    ["name with a newline", { name: "Alpha\nBeta" }, /name: control characters are not allowed/],
    ["name with DEL", { name: "Alpha\u007f" }, /name: control characters/],
    ["name a lone surrogate", { name: "Alpha\ud800" }, /name: want UTF-8 text/],
    ["supervisor not loopback", { supervisor: "10.0.0.1:7420" }, /supervisor: .*not a loopback literal/],
  ];
  for (const [what, change, want] of cases) {
    assert.throws(() => v.register({ ...good, ...change }), (err) => err instanceof TypeError && want.test(err.message), what);
  }
  assert.throws(
    () => v.register({ id: "Bad_ID", addr: "10.0.0.1:80", name: "x\n" }),
    (err) => err instanceof TypeError && /^register: id .*; addr .*; name: /.test(err.message),
    "all bad fields in one message",
  );
  // Exactly 100 bytes and the Go check's other edges pass.
  const ok = v.register({ ...good, id: "a" + "-".repeat(62), name: "é".repeat(50), addr: "[::1]:9001" });
  await ok.ready;
  await ok.close();
  assert.equal(sup.calls.filter((c) => c.method === "POST").length, 1, "an invalid registration was sent");
});

for (const [status, word] of [[400, "bad-registration"], [409, "conflict"], [401, "fleet-bad-token"]]) {
  test(`N3 a supervisor answering ${status}: ready rejects with ${word}, not retried, nothing left running`, async (t) => {
    const st = stateDir(t);
    const sup = await scripted(t, [status], st.token);
    const logs = [];
    const v = verifier(t, st, logs);
    const timersBefore = timers();
    const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", supervisor: sup.addr, ...fast });
    const got = await settle(reg.ready);
    assert.equal(got.ok, false);
    assert.ok(got.err instanceof RegistrationError);
    assert.equal(got.err.status, status);
    assert.equal(got.err.reason, word);
    assert.match(got.err.message, new RegExp(`answered ${status}`));
    assert.ok(!got.err.message.includes(st.token));
    await reg.done;
    await new Promise((r) => setTimeout(r, 60)); // many back-off periods
    assert.equal(sup.calls.length, 1, "a final 4xx was retried");
    assert.equal(timers(), timersBefore, "a timer of the registration remains");
    assert.equal(await socketsSettle(0), 0, "a socket of the registration remains");
    assert.ok(logs.some((l) => l.msg === "console.register-refused" && l.reason === word && l.level === "ERROR"));
    await reg.close(); // never registered: no DELETE
    assert.equal(sup.calls.length, 1);
  });
}

for (const status of [429, 503]) {
  test(`N3 a supervisor answering ${status}: retried until it takes the registration; ready resolves`, async (t) => {
    const st = stateDir(t);
    const sup = await scripted(t, [status, status, 201, 200], st.token);
    const v = verifier(t, st);
    const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", supervisor: sup.addr, ...fast });
    const got = await reg.ready;
    assert.deepEqual(got, { status: 201, supervisor: sup.addr });
    assert.deepEqual(sup.calls.map((c) => c.status), [status, status, 201]);
    await reg.close();
    assert.equal(sup.calls.at(-1).method, "DELETE", "close() removes a registration that was taken");
  });
}

test("N3 a rejection nobody awaits is not an unhandled rejection", async (t) => {
  const st = stateDir(t);
  const sup = await scripted(t, [400], st.token);
  const v = verifier(t, st);
  const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", supervisor: sup.addr, ...fast });
  await reg.done; // nobody looks at reg.ready
  await new Promise((r) => setTimeout(r, 20));
});

test("N3 close() during a retry ends everything at once: ready rejects (closed), no more attempts", async (t) => {
  const st = stateDir(t);
  const sup = await scripted(t, [503], st.token);
  const v = verifier(t, st);
  const timersBefore = timers();
  let attempts = 0;
  let second;
  const twice = new Promise((r) => (second = r));
  // A long back-off: close() must cut the wait short rather than wait it out.
  const reg = v.register({
    id: "alpha",
    addr: "127.0.0.1:9001",
    supervisor: sup.addr,
    refreshMs: 60_000,
    minBackoffMs: 30_000,
    maxBackoffMs: 60_000,
    onAttempt: () => ++attempts === 1 && second(),
  });
  await twice; // the first attempt got 503; the registration now waits 30 s to retry
  const started = process.hrtime.bigint();
  await reg.close();
  assert.ok(process.hrtime.bigint() - started < 5_000_000_000n, "close() waited out the back-off");
  const got = await settle(reg.ready);
  assert.equal(got.ok, false);
  assert.equal(got.err.reason, "closed");
  assert.equal(timers(), timersBefore, "a timer of the registration remains");
  assert.equal(await socketsSettle(0), 0, "a socket of the registration remains");
  assert.deepEqual(sup.calls.map((c) => c.method), ["POST"], "attempted after close(), or DELETEd what was never taken");
});

test("N3 close() while an attempt is in flight stops it", async (t) => {
  const st = stateDir(t);
  // A supervisor that never answers.
  const port = await freePort();
  const held = [];
  const server = http.createServer((req) => held.push(req));
  await new Promise((r) => server.listen(port, "127.0.0.1", r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
  const v = verifier(t, st);
  const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", supervisor: `127.0.0.1:${port}`, ...fast });
  while (held.length === 0) await new Promise((r) => setTimeout(r, 5));
  await reg.close();
  assert.equal((await settle(reg.ready)).err.reason, "closed");
  assert.equal(await socketsSettle(0), 0, "a socket of the registration remains");
});

test("N3 the supervisor.addr file is also where a registration goes; the bearer is sent", async (t) => {
  const st = stateDir(t);
  const sup = await scripted(t, [201], st.token);
  writePrivate(path.join(st.fleetDir, "supervisor.addr"), sup.addr + "\n");
  const v = verifier(t, st);
  const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001" });
  await reg.ready;
  await reg.close();
  assert.equal(sup.calls[0].auth, `Bearer ${st.token}`);
  assert.deepEqual(JSON.parse(sup.calls[0].body), { id: "alpha", addr: "127.0.0.1:9001", name: "alpha" });
});
