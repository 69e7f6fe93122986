#!/usr/bin/env node
// A console in Hono on @hono/node-server that believes the fleet supervisor: the v.hono()
// middleware judges every request (from the node:http request the server hands Hono), before any
// other middleware; v.probeRoutes().hono adds the routes `fleet check-console` probes; a guard
// keeps one route of its own local-only. Flags as console.mjs:
//
//   node examples/hono.mjs --id ID [--port N] [--name NAME] [--state-dir DIR] [--supervisor ADDR]

import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { createVerifier, callerOf } from "@phase-console/fleet-console";
import { flags, registerUntilStopped } from "./cli.mjs";

const opts = flags("hono.mjs");
const v = createVerifier({ ...opts.verifierConfig, logger: opts.logger });

const app = new Hono();
app.use(v.hono()); // first: Hono reads no header the verifier has not judged
app.use(v.probeRoutes().hono);
app.get("/", (c) => {
  const who = callerOf(c);
  return c.text(who.scope === "remote" ? `hello ${who.login}\n` : "hello, local user\n");
});
app.post("/build", v.localOnly((c) => c.json({ started: true })));

const server = serve({ fetch: app.fetch, port: opts.port, hostname: "127.0.0.1" }, (info) => {
  registerUntilStopped(v, opts, `127.0.0.1:${info.port}`, () => new Promise((r) => server.close(r)));
});
v.attach(server);
