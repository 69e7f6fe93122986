// A typed Hono console on @hono/node-server (SPEC N1, N2): handlers typed with Hono's Context,
// guards that give them back unchanged, callerOf a Caller — no cast anywhere. Checked by
// `tsc --strict`; built like express.ts.

import { Hono, type Context } from "hono";
import { serve, type HttpBindings } from "@hono/node-server";
import { createVerifier, callerOf, runOf, Runs, type Caller } from "@phase-console/fleet-console";
import { flags, registerUntilStopped } from "../cli.mjs";

const opts = flags("hono.ts");
const v = createVerifier({ ...opts.verifierConfig, logger: opts.logger });
const runs = new Runs();
let reach: "off" | "direct" = "off";

type Env = { Bindings: HttpBindings };
const app = new Hono<Env>();
app.use(v.hono());

app.get("/whoami", (c: Context<Env>) => {
  const who: Caller = callerOf(c);
  return c.json(who);
});
app.post("/presence", v.localOnly((c: Context<Env>) => c.json({ presence: "ok" })));
app.post("/runs", v.localOnly((c: Context<Env>) => c.json(runs.start(), 201)));
app.delete(
  "/runs/:id",
  v.localOnly((c: Context<Env, "/runs/:id">) => (runs.end(c.req.param("id")) ? c.body(null, 204) : c.json({ error: "unknown-run" }, 404))),
);
app.post("/hooks/permission-request", v.permissionHook(runs, (c: Context<Env>) => c.json({ run: runOf(c), decision: "ask" })));
app.get("/settings/reach", v.reachSettings((c: Context<Env>) => c.json({ mode: reach })));
app.post(
  "/settings/reach",
  v.reachSettings(async (c: Context<Env>) => {
    const text = await c.req.text();
    const body: { mode?: unknown } = text.trim() === "" ? {} : JSON.parse(text);
    const mode = typeof body.mode === "string" && body.mode !== "" ? body.mode : "off";
    if (mode !== "off" && mode !== "direct") return c.json({ error: "mode must be off or direct" }, 400);
    reach = mode;
    return c.json({ mode });
  }),
);
app.get("/", (c: Context<Env>) => {
  const who = callerOf(c);
  return c.text(who.scope === "remote" ? `hello ${who.login}\n` : "hello, local user\n");
});

const server = serve({ fetch: app.fetch, port: opts.port, hostname: "127.0.0.1" }, (info) => {
  registerUntilStopped(v, opts, `127.0.0.1:${info.port}`, () => new Promise<void>((r) => server.close(() => r())));
});
v.attach(server);
