// A typed Express console (SPEC N1, N2): every handler typed with Express's own types, every guard
// given and returning that type, callerOf a Caller — no cast anywhere. `npm run build` compiles it
// to dist/ts/express.js, which runs with console.mjs's flags:
//
//   node examples/dist/ts/express.js --id ID [--port N] [--state-dir DIR] [--supervisor ADDR]

import express, { type NextFunction, type Request, type Response } from "express";
import { createVerifier, callerOf, runOf, Runs, type Caller } from "@phase-console/fleet-console";
import { flags, registerUntilStopped } from "../cli.mjs";

const opts = flags("express.ts");
const v = createVerifier({ ...opts.verifierConfig, logger: opts.logger });
const runs = new Runs();
let reach: "off" | "direct" = "off";

const app = express();
app.use(v.express());
app.use(express.json());

const whoami = (req: Request, res: Response): void => {
  const who: Caller = callerOf(req);
  res.json(who);
};
const presence = v.localOnly((req: Request, res: Response, _next: NextFunction): void => {
  res.json({ presence: "ok" });
});
const startRun = v.localOnly((_req: Request, res: Response) => {
  res.status(201).json(runs.start());
});
const endRun = v.localOnly((req: Request<{ id: string }>, res: Response) => {
  if (!runs.end(req.params.id)) {
    res.status(404).json({ error: "unknown-run" });
    return;
  }
  res.status(204).end();
});
const hook = v.permissionHook(runs, (req: Request, res: Response) => {
  res.json({ run: runOf(req), decision: "ask" });
});
const getReach = v.reachSettings((_req: Request, res: Response) => {
  res.json({ mode: reach });
});
const setReach = v.reachSettings((req: Request<object, unknown, { mode?: string }>, res: Response) => {
  const mode = req.body?.mode || "off";
  if (mode !== "off" && mode !== "direct") {
    res.status(400).json({ error: "mode must be off or direct" });
    return;
  }
  reach = mode;
  res.json({ mode });
});

app.get("/whoami", whoami);
app.post("/presence", presence);
app.post("/runs", startRun);
app.delete("/runs/:id", endRun);
app.post("/hooks/permission-request", hook);
app.get("/settings/reach", getReach);
app.post("/settings/reach", setReach);
app.get("/", (req: Request, res: Response) => {
  const who = callerOf(req);
  res.type("text/plain").send(who.scope === "remote" ? `hello ${who.login}\n` : "hello, local user\n");
});

const server = app.listen(opts.port, "127.0.0.1", () => {
  const bound = server.address();
  const port = bound !== null && typeof bound === "object" ? bound.port : opts.port;
  registerUntilStopped(v, opts, `127.0.0.1:${port}`, () => new Promise<void>((r) => server.close(() => r())));
});
v.attach(server);
