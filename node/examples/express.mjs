#!/usr/bin/env node
// A console in Express 5 that believes the fleet supervisor: v.express() judges every request
// before any route, v.probeRoutes() adds the routes `fleet check-console` probes, and a guard keeps
// one route of its own local-only. Flags as console.mjs:
//
//   node examples/express.mjs --id ID [--port N] [--name NAME] [--state-dir DIR] [--supervisor ADDR]

import express from "express";
import { createVerifier, callerOf } from "@phase-console/fleet-console";
import { flags, registerUntilStopped } from "./cli.mjs";

const opts = flags("express.mjs");
const v = createVerifier({ ...opts.verifierConfig, logger: opts.logger });

const app = express();
app.disable("x-powered-by");
app.use(v.express()); // first: nothing of the app sees a request the verifier has not passed
app.use(v.probeRoutes()); // /whoami, /presence, /runs, /hooks/permission-request, /settings/reach
app.get("/", (req, res) => {
  const who = callerOf(req);
  res.type("text/plain").send(who.scope === "remote" ? `hello ${who.login}\n` : "hello, local user\n");
});
app.post("/build", v.localOnly((req, res) => res.json({ started: true })));

const server = app.listen(opts.port, "127.0.0.1", () => {
  const { port } = /** @type {import("node:net").AddressInfo} */ (server.address());
  registerUntilStopped(v, opts, `127.0.0.1:${port}`, () => new Promise((r) => server.close(r)));
});
v.attach(server); // judge each connection's peer once, as it arrives
