#!/usr/bin/env node
// A console in Fastify 5 that believes the fleet supervisor: the v.fastify() plugin judges every
// request in an onRequest hook, before routing and body parsing; v.probeRoutes().fastify adds the
// routes `fleet check-console` probes; a guard keeps one route of its own local-only. Flags as
// console.mjs:
//
//   node examples/fastify.mjs --id ID [--port N] [--name NAME] [--state-dir DIR] [--supervisor ADDR]

import Fastify from "fastify";
import { createVerifier, callerOf } from "@phase-console/fleet-console";
import { flags, registerUntilStopped } from "./cli.mjs";

const opts = flags("fastify.mjs");
const v = createVerifier({ ...opts.verifierConfig, logger: opts.logger });

const app = Fastify();
v.attach(app.server); // judge each connection's peer once, as it arrives
await app.register(v.fastify()); // first: an onRequest hook for the whole app
await app.register(v.probeRoutes().fastify);
app.get("/", async (request, reply) => {
  const who = callerOf(request);
  return reply.type("text/plain").send(who.scope === "remote" ? `hello ${who.login}\n` : "hello, local user\n");
});
app.post("/build", v.localOnly(async (request, reply) => reply.send({ started: true })));

const addr = await app.listen({ port: opts.port, host: "127.0.0.1" });
registerUntilStopped(v, opts, new URL(addr).host, () => app.close());
