// Compiled by `tsc --noEmit` only: the package's types as a CommonJS file sees them (require()).
import fleet = require("@phase-console/fleet-console");
import http = require("node:http");

const v = fleet.createVerifier({ stateDir: "/tmp/x" });
const handler = v.localOnly((req: http.IncomingMessage, res: http.ServerResponse) => {
  const who: fleet.Caller = fleet.callerOf(req);
  res.end(who.scope);
});
http.createServer(v.middleware(handler));
const reg: fleet.Registration = v.register({ id: "alpha", addr: "127.0.0.1:9001" });
void reg.close();
