// A typed Fastify console (SPEC N1, N2): handlers typed with Fastify's own types, guards that give
// them back unchanged, callerOf a Caller — no cast anywhere. Checked by `tsc --strict`; built like
// express.ts.

import Fastify, { type FastifyReply, type FastifyRequest } from "fastify";
import { createVerifier, callerOf, runOf, Runs, type Caller } from "@phase-console/fleet-console";
import { flags, registerUntilStopped } from "../cli.mjs";

const opts = flags("fastify.ts");
const v = createVerifier({ ...opts.verifierConfig, logger: opts.logger });
const runs = new Runs();
let reach: "off" | "direct" = "off";

const app = Fastify();
v.attach(app.server);
await app.register(v.fastify());

app.get("/whoami", async (request: FastifyRequest) => {
  const who: Caller = callerOf(request);
  return who;
});
app.post("/presence", v.localOnly(async (_request: FastifyRequest, reply: FastifyReply) => reply.send({ presence: "ok" })));
app.post("/runs", v.localOnly(async (_request: FastifyRequest, reply: FastifyReply) => reply.code(201).send(runs.start())));
app.delete(
  "/runs/:id",
  v.localOnly(async (request: FastifyRequest<{ Params: { id: string } }>, reply: FastifyReply) =>
    runs.end(request.params.id) ? reply.code(204).send() : reply.code(404).send({ error: "unknown-run" }),
  ),
);
app.post(
  "/hooks/permission-request",
  v.permissionHook(runs, async (request: FastifyRequest, reply: FastifyReply) => reply.send({ run: runOf(request), decision: "ask" })),
);
app.get("/settings/reach", v.reachSettings(async (_request: FastifyRequest, reply: FastifyReply) => reply.send({ mode: reach })));
app.post(
  "/settings/reach",
  v.reachSettings(async (request: FastifyRequest<{ Body: { mode?: string } | null }>, reply: FastifyReply) => {
    const mode = request.body?.mode || "off";
    if (mode !== "off" && mode !== "direct") return reply.code(400).send({ error: "mode must be off or direct" });
    reach = mode;
    return reply.send({ mode });
  }),
);
app.get("/", async (request: FastifyRequest, reply: FastifyReply) => {
  const who = callerOf(request);
  return reply.type("text/plain").send(who.scope === "remote" ? `hello ${who.login}\n` : "hello, local user\n");
});

const addr = await app.listen({ port: opts.port, host: "127.0.0.1" });
registerUntilStopped(v, opts, new URL(addr).host, () => app.close());
