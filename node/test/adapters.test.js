// The guards and adapters across frameworks (SPEC N1, N2, N5), without the frameworks: a guard
// given a Fastify-shaped (request, reply) or a Hono-shaped context answers a refusal that
// framework's way, callerOf reads the caller from each, and throws on a request no verifier
// passed; probeRoutes serves the probe routes on node:http. Real Express, Fastify and Hono consoles
// are run by CI (.ci/node-consoles) against `fleet check-console --require-all`.

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { createVerifier, callerOf, runOf } from "../src/index.mjs";
import { stateDir, raw, request } from "./helpers.js";

const alice = "alice@example.com";

// served starts a node:http server whose handler is given each request; returns its port.
async function served(t, v, handler) {
  const server = http.createServer(handler);
  v.attach(server);
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
  return server.address().port;
}

function verifier(t, st, logs = []) {
  const v = createVerifier({ stateDir: st.home, watch: false, logger: (level, msg, f) => logs.push({ level, msg, ...f }) });
  t.after(() => v.close());
  return v;
}

// fakeReply records what a guard asks of a Fastify reply.
function fakeReply() {
  const r = { status: 0, head: {}, body: undefined };
  r.code = (s) => ((r.status = s), r);
  r.headers = (h) => (Object.assign(r.head, h), r);
  r.send = (b) => ((r.body = b), r);
  return r;
}

test("N1 callerOf throws on a request no verifier passed; never undefined", async (t) => {
  const st = stateDir(t);
  const v = verifier(t, st);
  let thrown = null;
  const port = await served(t, v, (req, res) => {
    try {
      callerOf(req);
    } catch (err) {
      thrown = err;
    }
    res.end();
  });
  await raw(port, request("GET", "/", [["Host", `127.0.0.1:${port}`]]));
  assert.match(thrown?.message ?? "", /has not passed this request/);
  assert.throws(() => callerOf({}), /has not passed/);
  assert.throws(() => callerOf({ raw: {} }), /has not passed/);
});

test("N2 guards answer a Fastify (request, reply) the Fastify way, and callerOf/runOf read a Fastify request", async (t) => {
  const st = stateDir(t);
  const logs = [];
  const v = verifier(t, st, logs);
  const seen = [];
  const handler = async (request, reply) => {
    seen.push(callerOf(request));
    return reply.send("ran");
  };
  const presence = v.localOnly(handler);
  let outcome;
  const port = await served(t, v, async (req, res) => {
    const reply = fakeReply();
    outcome = await presence({ raw: req, headers: req.headers }, reply);
    res.end(JSON.stringify(reply));
  });
  // A remote caller: 403 local-only through reply.code().headers().send(), the handler not run.
  const got = JSON.parse((await raw(port, request("GET", "/presence", [["Host", `127.0.0.1:${port}`], ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", alice]]))).body);
  assert.equal(got.status, 403);
  assert.equal(got.head["X-Fleet-Reason"], "local-only");
  assert.equal(JSON.parse(got.body).error, "local-only");
  assert.equal(seen.length, 0);
  assert.ok(logs.some((l) => l.msg === "console.rejected" && l.reason === "local-only" && l.rule === "C5"));
  // A local caller: the handler runs, with the guard's judgement behind callerOf.
  const ok = JSON.parse((await raw(port, request("GET", "/presence", [["Host", `127.0.0.1:${port}`]]))).body);
  assert.equal(ok.body, "ran");
  assert.deepEqual(seen, [{ scope: "local", login: "" }]);
  assert.equal(outcome.body, "ran", "the guard returns what the handler returned");
  // A bad bearer: 401 before anything.
  const bad = JSON.parse((await raw(port, request("GET", "/presence", [["Host", `127.0.0.1:${port}`], ["X-Phase-Console-Fleet", st.token + "x"], ["X-Phase-Console-Fleet-Login", alice]]))).body);
  assert.equal(bad.status, 401);
  assert.equal(bad.head["X-Fleet-Reason"], "fleet-bad-token");
  void runOf;
});

test("N2 guards answer a Hono context with a Response; without the node:http request every request is refused", async (t) => {
  const st = stateDir(t);
  const v = verifier(t, st);
  const reach = v.reachSettings((c) => new Response(JSON.stringify({ mode: "off", who: callerOf(c) }), { status: 200 }));
  let answered;
  const port = await served(t, v, async (req, res) => {
    const c = { req: { raw: null }, env: { incoming: req, outgoing: res }, json: () => {}, header: () => {} };
    answered = await reach(c);
    res.end();
  });
  await raw(port, request("POST", "/settings/reach", [["Host", `127.0.0.1:${port}`], ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", "device:phone#abc234"]], "{}"));
  assert.ok(answered instanceof Response);
  assert.equal(answered.status, 403);
  assert.equal(answered.headers.get("X-Fleet-Reason"), "reach-settings");
  await raw(port, request("POST", "/settings/reach", [["Host", `127.0.0.1:${port}`], ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", alice]], "{}"));
  assert.equal(answered.status, 200);
  assert.deepEqual((await answered.json()).who, { scope: "remote", login: alice });

  // Hono elsewhere than @hono/node-server: no request to judge, so 403 (fail closed).
  const elsewhere = await v.hono()({ req: { raw: new Request("http://127.0.0.1/") }, env: {} }, async () => assert.fail("next() ran"));
  assert.equal(elsewhere.status, 403);
  const guarded = await v.localOnly(() => assert.fail("the handler ran"))({ req: {}, env: {}, json() {}, header() {} });
  assert.equal(guarded.status, 403);
});

test("N5 probeRoutes serves the probe routes on node:http behind the middleware, and passes on the rest", async (t) => {
  const st = stateDir(t);
  const v = verifier(t, st);
  const probes = v.probeRoutes();
  const port = await served(t, v, v.middleware((req, res) => probes(req, res, () => res.writeHead(418).end())));
  const H = ["Host", `127.0.0.1:${port}`];
  const A = [["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", alice]];
  assert.deepEqual(JSON.parse((await raw(port, request("GET", "/whoami", [H]))).body), { scope: "local", login: "" });
  assert.deepEqual(JSON.parse((await raw(port, request("GET", "/whoami", [H, ...A]))).body), { scope: "remote", login: alice });
  assert.equal((await raw(port, request("POST", "/presence", [H], "{}"))).status, 200);
  assert.equal((await raw(port, request("POST", "/presence", [H, ...A], "{}"))).reason, "local-only");
  const run = JSON.parse((await raw(port, request("POST", "/runs", [H], "{}"))).body);
  assert.ok(run.id && run.token);
  const hook = await raw(port, request("POST", "/hooks/permission-request", [H, ["Authorization", `Bearer ${run.token}`]], '{"tool":"Bash"}'));
  assert.deepEqual(JSON.parse(hook.body), { run: run.id, decision: "ask" });
  assert.equal((await raw(port, request("POST", "/hooks/permission-request", [H, ["Authorization", `Bearer ${run.token}`], ["X-Forwarded-For", "127.0.0.1"]], "{}"))).reason, "not local");
  assert.equal((await raw(port, request("DELETE", `/runs/${run.id}`, [H]))).status, 204);
  assert.equal((await raw(port, request("POST", "/hooks/permission-request", [H, ["Authorization", `Bearer ${run.token}`]], "{}"))).reason, "bad-run-token");
  assert.deepEqual(JSON.parse((await raw(port, request("POST", "/settings/reach", [H], '{"mode":"direct"}'))).body), { mode: "direct" });
  assert.equal((await raw(port, request("POST", "/settings/reach", [H, ["X-Phase-Console-Fleet", st.token], ["X-Phase-Console-Fleet-Login", "device:phone#abc234"]], "{}"))).reason, "reach-settings");
  assert.deepEqual(JSON.parse((await raw(port, request("GET", "/settings/reach", [H]))).body), { mode: "direct" });
  assert.equal((await raw(port, request("GET", "/elsewhere", [H]))).status, 418, "another path goes to next()");
  assert.equal((await raw(port, request("GET", "/whoami", [["Host", "evil.example"]]))).status, 421);
});
