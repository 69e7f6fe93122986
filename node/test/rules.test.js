// The C rules as a table of raw requests over net sockets against a real listener, with an echo
// handler that records what the console saw (SPEC C1–C7, and the console-wide Host, proxy-mark
// and Origin checks). Row names cite the rule they prove.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { consoleServer, stateDir, raw, request, freePort } from "./helpers.js";
import { procNetFiles } from "../src/peercred.cjs";

const alice = "alice@example.com";
const device = "device:phone#abc234";

test("C1–C7 and the console-wide checks, one row per trick", async (t) => {
  const st = stateDir(t);
  const c = await consoleServer(t, { stateDir: st.home });
  const tok = st.token;
  const flip = (s, i) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
  const H = (port) => ["Host", `127.0.0.1:${port}`];
  const good = [["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", alice]];
  const bad = [["X-Phase-Console-Fleet", flip(tok, tok.length - 1)], ["X-Phase-Console-Fleet-Login", alice]];
  const run = c.runs.start();
  const runAuth = ["Authorization", `Bearer ${run.token}`];

  // [name, method, target, header lines (Host first unless given), body, want {status, reason, caller}]
  const rows = [
    ["C4 no assertion: scope local", "GET", "/whoami", [H(c.port)], "", { status: 200, caller: { scope: "local", login: "" } }],
    ["C1 right bearer: scope remote, login as asserted", "GET", "/whoami", [H(c.port), ...good], "", { status: 200, caller: { scope: "remote", login: alice } }],
    ["C1 bearer wrong by its last byte", "GET", "/whoami", [H(c.port), ...bad], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 bearer wrong by its first byte", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", flip(tok, 0)], ["X-Phase-Console-Fleet-Login", alice]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 bearer one byte short", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", tok.slice(0, -1)], ["X-Phase-Console-Fleet-Login", alice]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 bearer one byte too long", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", tok + "A"], ["X-Phase-Console-Fleet-Login", alice]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 empty bearer", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", ""], ["X-Phase-Console-Fleet-Login", alice]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 empty login", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", ""]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 bearer without login", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", tok]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 login without bearer", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet-Login", alice]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 two bearer lines", "GET", "/whoami", [H(c.port), ...good, ["X-Phase-Console-Fleet", tok]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 two login lines", "GET", "/whoami", [H(c.port), ...good, ["X-Phase-Console-Fleet-Login", "bob@example.com"]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 second bearer spelled X_Phase_Console_Fleet", "GET", "/whoami", [H(c.port), ...good, ["X_Phase_Console_Fleet", tok]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 spelling x.phase.console.fleet.login alone", "GET", "/whoami", [H(c.port), ["x.phase.console.fleet.login", alice]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C1 right bearer spelled X_PHASE_CONSOLE_FLEET: believed", "GET", "/whoami", [H(c.port), ["X_PHASE_CONSOLE_FLEET", tok], ["X-Phase-Console-Fleet-Login", alice]], "", { status: 200, caller: { scope: "remote", login: alice } }],
    ["C1 assertion declared as a trailer", "POST", "/whoami", [H(c.port), ...good, ["Transfer-Encoding", "chunked"], ["Trailer", "X-Phase-Console-Fleet"]], "0\r\n\r\n", { status: 401, reason: "fleet-bad-token" }],
    ["C2 Host evil.example with the right bearer", "GET", "/whoami", [["Host", "evil.example"], ...good], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C2 Host 127.0.0.1.evil.example", "GET", "/whoami", [["Host", `127.0.0.1.evil.example:${c.port}`], ...good], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C2 Host 127.0.0.2", "GET", "/whoami", [["Host", `127.0.0.2:${c.port}`], ...good], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C2 Host localhost.", "GET", "/whoami", [["Host", "localhost."], ...good], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C2 Host [::ffff:127.0.0.1]", "GET", "/whoami", [["Host", "[::ffff:127.0.0.1]"], ...good], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C2 absolute-form target names evil.example", "GET", "http://evil.example/whoami", [H(c.port), ...good], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C2 Host LOCALHOST believed", "GET", "/whoami", [["Host", `LOCALHOST:${c.port}`], ...good], "", { status: 200, caller: { scope: "remote", login: alice } }],
    ["C2 Host [::1] believed", "GET", "/whoami", [["Host", `[::1]:${c.port}`], ...good], "", { status: 200, caller: { scope: "remote", login: alice } }],
    ["C2 Host 127.0.0.1 without a port believed", "GET", "/whoami", [["Host", "127.0.0.1"], ...good], "", { status: 200, caller: { scope: "remote", login: alice } }],
    ["C3 proxy header beside the right assertion", "GET", "/whoami", [H(c.port), ...good, ["Tailscale-User-Login", alice]], "", { status: 403, reason: "fleet-and-proxy" }],
    ["C3 proxy header spelled tailscale_user_login", "GET", "/whoami", [H(c.port), ...good, ["tailscale_user_login", alice]], "", { status: 403, reason: "fleet-and-proxy" }],
    ["C3 order: proxy header + foreign Host + bad bearer", "GET", "/whoami", [["Host", "evil.example"], ...bad, ["Tailscale-User-Login", alice]], "", { status: 403, reason: "fleet-and-proxy" }],
    ["C2 order: foreign Host + malformed assertion", "GET", "/whoami", [["Host", "evil.example"], ["X-Phase-Console-Fleet-Login", ""]], "", { status: 421, reason: "fleet-not-loopback" }],
    ["C4 asserted with X-Forwarded-For 127.0.0.1: remote", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", "root"], ["X-Forwarded-For", "127.0.0.1"]], "", { status: 200, caller: { scope: "remote", login: "root" } }],
    ["C4 asserted login \"local\": remote", "GET", "/whoami", [H(c.port), ["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", "local"]], "", { status: 200, caller: { scope: "remote", login: "local" } }],
    ["host: no assertion, foreign Host (DNS rebinding)", "POST", "/presence", [["Host", `evil.example:${c.port}`], ["Origin", `http://evil.example:${c.port}`]], "{}", { status: 421, reason: "host" }],
    ["host: no assertion, two Host lines", "GET", "/whoami", [H(c.port), ["Host", "evil.example"]], "", { status: [400, 421] }],
    ["no-assertion: proxy header alone", "GET", "/whoami", [H(c.port), ["Tailscale-User-Login", alice]], "", { status: 403, reason: "no-assertion" }],
    ["no-assertion: X-Forwarded-For", "GET", "/whoami", [H(c.port), ["X-Forwarded-For", "100.101.102.103"]], "", { status: 403, reason: "no-assertion" }],
    ["no-assertion: Forwarded", "GET", "/whoami", [H(c.port), ["Forwarded", "for=100.101.102.103"]], "", { status: 403, reason: "no-assertion" }],
    ["no-assertion: X_Real_Ip", "GET", "/whoami", [H(c.port), ["X_Real_Ip", "100.101.102.103"]], "", { status: 403, reason: "no-assertion" }],
    ["no-assertion: Tailscale-User-Name", "GET", "/whoami", [H(c.port), ["Tailscale-User-Name", "Alice"]], "", { status: 403, reason: "no-assertion" }],
    ["cross-origin: Origin of another site", "POST", "/presence", [H(c.port), ["Origin", "http://evil.example"]], "{}", { status: 403, reason: "cross-origin" }],
    ["cross-origin: Origin null", "POST", "/presence", [H(c.port), ["Origin", "null"]], "{}", { status: 403, reason: "cross-origin" }],
    ["cross-origin: two Origin lines", "POST", "/presence", [H(c.port), ["Origin", `http://127.0.0.1:${c.port}`], ["Origin", `http://127.0.0.1:${c.port}`]], "{}", { status: 403, reason: "cross-origin" }],
    ["cross-origin: the console's own origin is local", "POST", "/presence", [H(c.port), ["Origin", `http://127.0.0.1:${c.port}`]], "{}", { status: 200, caller: { scope: "local", login: "" } }],
    ["C5 presence open to a local caller", "POST", "/presence", [H(c.port)], "{}", { status: 200, caller: { scope: "local", login: "" } }],
    ["C5 presence shut to scope remote", "POST", "/presence", [H(c.port), ...good], "{}", { status: 403, reason: "local-only" }],
    ["C6 run token accepted; the hook sees no Authorization", "POST", "/hooks/permission-request", [H(c.port), runAuth], "{}", { status: 200, run: run.id }],
    ["C6 no bearer", "POST", "/hooks/permission-request", [H(c.port)], "{}", { status: 401, reason: "bad-run-token" }],
    ["C6 run token wrong by one byte", "POST", "/hooks/permission-request", [H(c.port), ["Authorization", `Bearer ${flip(run.token, run.token.length - 1)}`]], "{}", { status: 401, reason: "bad-run-token" }],
    ["C6 two Authorization lines", "POST", "/hooks/permission-request", [H(c.port), runAuth, runAuth], "{}", { status: 401, reason: "bad-run-token" }],
    ["C6 the fleet token as the run bearer", "POST", "/hooks/permission-request", [H(c.port), ["Authorization", `Bearer ${tok}`]], "{}", { status: 401, reason: "bad-run-token" }],
    ["C6 run token + X-Forwarded-For", "POST", "/hooks/permission-request", [H(c.port), runAuth, ["X-Forwarded-For", "127.0.0.1"]], "{}", { status: 403, reason: "not local" }],
    ["C6 run token + X_Forwarded_Host", "POST", "/hooks/permission-request", [H(c.port), runAuth, ["X_Forwarded_Host", "127.0.0.1"]], "{}", { status: 403, reason: "not local" }],
    ["C6 run token + X-Real-Ip", "POST", "/hooks/permission-request", [H(c.port), runAuth, ["X-Real-Ip", "127.0.0.1"]], "{}", { status: 403, reason: "not local" }],
    ["C6 run token + proxy header", "POST", "/hooks/permission-request", [H(c.port), runAuth, ["Tailscale-User-Login", alice]], "{}", { status: 403, reason: "not local" }],
    ["C6 run token + the right assertion", "POST", "/hooks/permission-request", [H(c.port), runAuth, ...good], "{}", { status: 403, reason: "not local" }],
    ["C6 order: assertion with a bad bearer + foreign Host + proxy header", "POST", "/hooks/permission-request", [["Host", "evil.example"], runAuth, ...bad, ["Tailscale-User-Login", alice]], "{}", { status: 403, reason: "not local" }],
    ["C6 %68ooks with X-Forwarded-For: judged on the decoded path", "POST", "/%68ooks/permission-request", [H(c.port), runAuth, ["X-Forwarded-For", "127.0.0.1"]], "{}", { status: 403, reason: "not local" }],
    ["C6 /HOOKS/x with an assertion: hooks in any case", "GET", "/HOOKS/x", [H(c.port), ...good], "", { status: 403, reason: "not local" }],
    ["C7 device login cannot change reach settings", "POST", "/settings/reach", [H(c.port), ["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", device]], `{"mode":"off"}`, { status: 403, reason: "reach-settings" }],
    ["C7 DEVICE: in capitals cannot either", "POST", "/settings/reach", [H(c.port), ["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", "DEVICE:phone#abc234"]], `{"mode":"off"}`, { status: 403, reason: "reach-settings" }],
    ["C7 device login may read them", "GET", "/settings/reach", [H(c.port), ["X-Phase-Console-Fleet", tok], ["X-Phase-Console-Fleet-Login", device]], "", { status: 200, caller: { scope: "remote", login: device } }],
    ["C7 a tailnet login may change them", "POST", "/settings/reach", [H(c.port), ...good], `{"mode":"off"}`, { status: 200, caller: { scope: "remote", login: alice } }],
    ["C7 a local caller may change them", "POST", "/settings/reach", [H(c.port)], `{"mode":"off"}`, { status: 200, caller: { scope: "local", login: "" } }],
    ["bad-request: a target that does not decode", "GET", "/%zz", [H(c.port)], "", { status: 400, reason: "bad-request" }],
    ["C1 upgrade with a bad bearer is refused on the socket", "GET", "/ws", [H(c.port), ...bad, ["Connection", "Upgrade"], ["Upgrade", "websocket"]], "", { status: 401, reason: "fleet-bad-token" }],
    ["C2 upgrade from a foreign Host without an assertion", "GET", "/ws", [["Host", "evil.example"], ["Connection", "Upgrade"], ["Upgrade", "websocket"]], "", { status: 421, reason: "host" }],
    ["C4 upgrade with the right bearer", "GET", "/ws", [H(c.port), ...good, ["Connection", "Upgrade"], ["Upgrade", "websocket"]], "", { status: 101, caller: { scope: "remote", login: alice } }],
  ];

  for (const [name, method, target, lines, body, want] of rows) {
    await t.test(name, async () => {
      const before = c.seen.length;
      const logsBefore = c.logs.length;
      const got = await raw(c.port, request(method, target, lines, body));
      const statuses = [].concat(want.status);
      assert.ok(statuses.includes(got.status), `status ${got.status} ${got.reason} ${got.body}, want ${statuses}`);
      const arrived = c.seen.slice(before);
      if (want.reason) {
        assert.equal(got.reason, want.reason);
        assert.deepEqual(JSON.parse(got.body), { error: want.reason });
        assert.equal(arrived.length, 0, "a refused request reached the console");
        const line = c.logs.slice(logsBefore).find((l) => l.reason === want.reason);
        assert.ok(line, "no log line for the refusal");
        assert.equal(line.msg, target.toLowerCase().includes("ooks") ? "hook.rejected" : "console.rejected");
      }
      if (want.caller) {
        assert.equal(arrived.length, 1, "the request did not reach the console once");
        assert.deepEqual(arrived[0].caller, want.caller);
        if (!arrived[0].upgrade) {
          assert.deepEqual(JSON.parse(got.body), want.caller);
          // The console never holds the fleet token: every spelling of both headers is gone.
          for (const n of [...Object.keys(arrived[0].headers), ...arrived[0].rawHeaders.filter((_, i) => i % 2 === 0)]) {
            assert.ok(!/^x.phase.console.fleet(.login)?$/i.test(n), `the console saw ${n}`);
          }
        }
      }
      if (want.run) {
        assert.equal(arrived.length, 1);
        assert.equal(arrived[0].run, want.run);
        assert.equal(arrived[0].headers.authorization, undefined);
        assert.ok(!arrived[0].rawHeaders.some((h) => /^authorization$/i.test(h)));
      }
    });
  }

  await t.test("C6 a run's token is dead the moment the run ends", async () => {
    c.runs.end(run.id);
    const got = await raw(c.port, request("POST", "/hooks/permission-request", [H(c.port), runAuth], "{}"));
    assert.equal(got.status, 401);
    assert.equal(got.reason, "bad-run-token");
  });

  await t.test("S11 no token appears in any log line", () => {
    const all = JSON.stringify(c.logs);
    assert.ok(!all.includes(tok), "the fleet token is in a log line");
    assert.ok(!all.includes(tok.slice(0, 20)), "part of the fleet token is in a log line");
    assert.ok(!all.includes(run.token), "a run token is in a log line");
  });
});

test("C1 a token file that is too open believes no assertion; local callers are still served", async (t) => {
  const st = stateDir(t);
  fs.chmodSync(st.tokenPath, 0o644);
  const c = await consoleServer(t, { stateDir: st.home });
  const H = ["Host", `127.0.0.1:${c.port}`];
  const got = await raw(c.port, request("GET", "/whoami", [H, ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", alice]]));
  assert.equal(got.status, 401);
  assert.equal(got.reason, "fleet-bad-token");
  const line = c.logs.find((l) => l.msg === "console.token");
  assert.match(line.error, /chmod 600/);
  const local = await raw(c.port, request("GET", "/whoami", [H]));
  assert.deepEqual(JSON.parse(local.body), { scope: "local", login: "" });
});

test("no-assertion: a peer socket of another uid is not local (its owner read from /proc/net/tcp)", { skip: process.platform !== "linux" }, async (t) => {
  const st = stateDir(t);
  const c = await consoleServer(t, { stateDir: st.home });
  // A table in which the client's end of the coming connection is owned by uid 4242.
  const hex = (p) => p.toString(16).toUpperCase().padStart(4, "0");
  const table = path.join(st.home, "tcp");
  const saved = procNetFiles.splice(0, procNetFiles.length, table);
  t.after(() => procNetFiles.splice(0, procNetFiles.length, ...saved));
  // The client's port is chosen before the connection; on a busy machine the kernel may hand it to
  // another socket in between (EADDRINUSE), so a few are tried.
  let got;
  for (let attempt = 0; ; attempt++) {
    const localPort = await freePort();
    fs.writeFileSync(
      table,
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
        `   0: 0100007F:${hex(localPort)} 0100007F:${hex(c.port)} 01 00000000:00000000 00:00000000 00000000  4242        0 999999 1 0000000000000000 20 4 30 10 -1\n`,
    );
    try {
      got = await raw(c.port, request("GET", "/whoami", [["Host", `127.0.0.1:${c.port}`]]), { localPort });
      break;
    } catch (err) {
      if (err.code !== "EADDRINUSE" || attempt >= 20) throw err;
    }
  }
  assert.equal(got.status, 403);
  assert.equal(got.reason, "no-assertion");
  assert.match(c.logs.find((l) => l.reason === "no-assertion").detail, /another user \(uid 4242\)/);
  assert.equal(c.seen.length, 0);
});

test("no-assertion: where the peer's owner cannot be read, nobody is local (fail closed)", async (t) => {
  const st = stateDir(t);
  const c = await consoleServer(t, { stateDir: st.home, platform: "darwin" });
  const H = ["Host", `127.0.0.1:${c.port}`];
  const got = await raw(c.port, request("GET", "/whoami", [H]));
  assert.equal(got.status, 403);
  assert.equal(got.reason, "no-assertion");
  // An assertion does not depend on the peer: still believed.
  const remote = await raw(c.port, request("GET", "/whoami", [H, ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", alice]]));
  assert.deepEqual(JSON.parse(remote.body), { scope: "remote", login: alice });
});

test("no-assertion: a console running as tailscaled's user believes nobody local", async (t) => {
  const st = stateDir(t);
  const sock = path.join(st.home, "tailscaled.sock");
  fs.writeFileSync(sock, ""); // owned by this user, like tailscaled's socket when we are its user
  const c = await consoleServer(t, { stateDir: st.home, tailscaleSocket: sock });
  const H = ["Host", `127.0.0.1:${c.port}`];
  const got = await raw(c.port, request("GET", "/whoami", [H]));
  assert.equal(got.status, 403);
  assert.equal(got.reason, "no-assertion");
  const trusting = await consoleServer(t, { stateDir: st.home, tailscaleSocket: sock, trustTailscaledUser: true });
  const ok = await raw(trusting.port, request("GET", "/whoami", [["Host", `127.0.0.1:${trusting.port}`]]));
  assert.deepEqual(JSON.parse(ok.body), { scope: "local", login: "" });
});

test("express() judges as middleware() does, below a mount point too", async (t) => {
  const st = stateDir(t);
  const { createVerifier, callerOf } = await import("../src/index.mjs");
  const http = await import("node:http");
  const v = createVerifier({ stateDir: st.home, watch: false, logger: () => {} });
  t.after(() => v.close());
  const mw = v.express();
  const seen = [];
  // The smallest Express-style app: a mount at /api that rewrites req.url, as a router does.
  const server = http.createServer((req, res) => {
    req.originalUrl = req.url;
    if (req.url.startsWith("/api/")) req.url = req.url.slice(4);
    mw(req, res, (err) => {
      if (err) return res.writeHead(500).end();
      seen.push({ url: req.url, caller: callerOf(req), headers: { ...req.headers } });
      res.end(JSON.stringify(callerOf(req)));
    });
  });
  v.attach(server);
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => server.close(r)));
  const port = server.address().port;
  const H = ["Host", `127.0.0.1:${port}`];
  const ok = await raw(port, request("GET", "/api/whoami", [H, ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", alice]]));
  assert.deepEqual(JSON.parse(ok.body), { scope: "remote", login: alice });
  assert.equal(seen[0].headers["x-phase-console-fleet"], undefined);
  const hook = await raw(port, request("POST", "/api/hooks/permission-request", [H, ["X-Forwarded-For", "127.0.0.1"]], "{}"));
  assert.equal(hook.status, 403);
  assert.equal(hook.reason, "not local");
  const refused = await raw(port, request("GET", "/api/whoami", [["Host", "evil.example"]]));
  assert.equal(refused.status, 421);
  assert.equal(seen.length, 1);
});
