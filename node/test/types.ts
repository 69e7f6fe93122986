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
} from "@phase-console/fleet-console";

const v = createVerifier({ stateDir: "/tmp/x", proxyHeader: "Tailscale-User-Login", trustTailscaledUser: false });
const runs = new Runs();
const server = http.createServer(
  v.middleware((req, res) => {
    const who: Caller | undefined = callerOf(req);
    res.end(JSON.stringify(who ?? null));
  }),
);
v.attach(server);
server.on("upgrade", v.upgrade((req, socket) => socket.end()));
const hook = v.permissionHook(runs, (req: http.IncomingMessage, res: http.ServerResponse) => {
  const id: string | undefined = runOf(req);
  res.end(id);
});
const presence = v.localOnly((_req: http.IncomingMessage, res: http.ServerResponse) => res.end("ok"));
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
void reg.deregister().then(() => v.close());
const { host, port }: { host: string; port: number } = checkSupervisorAddr("127.0.0.1:7420");
void host;
void port;
const word: "reach-settings" = Reason.reachSettings;
void word;
void isDeviceLogin("device:phone#abc234");
