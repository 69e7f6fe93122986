// Compiled by `tsc --noEmit` only: every export used as a console would use it.
import http from "node:http";
import {
  createVerifier,
  callerOf,
  runOf,
  Runs,
  Reason,
  type Verdict,
  type Caller,
  checkSupervisorAddr,
  isDeviceLogin,
  RegistrationError,
} from "@phase-console/fleet-console";

const v = createVerifier({ stateDir: "/tmp/x", proxyHeader: "Tailscale-User-Login", trustTailscaledUser: false });
const runs = new Runs();
const server = http.createServer(
  v.middleware((req, res) => {
    const who: Caller = callerOf(req); // never undefined: it throws on a request not judged
    res.end(who.scope === "remote" ? who.login : "local");
  }),
);
v.attach(server);
server.on("upgrade", v.upgrade((req, socket) => socket.end()));
const hook = v.permissionHook(runs, (req: http.IncomingMessage, res: http.ServerResponse) => {
  const id: string | undefined = runOf(req);
  res.end(id);
});
const presence = v.localOnly((_req: http.IncomingMessage, res: http.ServerResponse) => res.end("ok"));
// N1: a guard returns the handler's own type, whatever it is.
type Typed = (req: http.IncomingMessage, res: http.ServerResponse<http.IncomingMessage>) => void;
const typed: Typed = v.localOnly<Typed>((req, res) => void res.end(callerOf(req).scope));
const plain: http.RequestListener = v.reachSettings((req: http.IncomingMessage, res: http.ServerResponse) => void res.end(callerOf(req).login));
void typed;
void plain;
const probes = v.probeRoutes({ runs });
http.createServer(v.middleware((req, res) => probes(req, res, () => res.writeHead(404).end())));
const reach = v.reachSettings((_req: http.IncomingMessage, res: http.ServerResponse) => res.end("ok"));
void hook;
void presence;
void reach;

async function judge(req: http.IncomingMessage): Promise<string> {
  const verdict: Verdict = await v.verify(req);
  if (verdict.refused) {
    const status: number = verdict.status;
    return `${status} ${verdict.reason}`;
  }
  if (verdict.scope === "remote") return verdict.login;
  const empty: "" = verdict.login;
  return empty;
}
void judge;

const reg = v.register({ id: "alpha", addr: "127.0.0.1:9001", name: "Alpha" });
reg.ready.then(
  ({ status, supervisor }: { status: number; supervisor: string }) => console.log(status, supervisor),
  (err: unknown) => console.error(err instanceof RegistrationError ? err.reason : err),
);
void reg.close().then(() => v.close());
const { host, port }: { host: string; port: number } = checkSupervisorAddr("127.0.0.1:7420");
void host;
void port;
const word: "reach-settings" = Reason.reachSettings;
void word;
void isDeviceLogin("device:phone#abc234");
