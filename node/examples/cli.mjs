// What the framework examples (express.mjs, fastify.mjs, hono.mjs, ts/*.ts) share with
// console.mjs: its flags, its check of the fleet token at start-up, and registering with the
// supervisor once listening (deregistering on SIGINT and SIGTERM). Nothing here is needed to use
// the library: it keeps each example down to the lines that differ by framework.

import path from "node:path";
import { checkSupervisorAddr, defaultTailscaleSocket, jsonLogger, parseToken, readPrivateFile, stateHome, validConsoleId } from "@phase-console/fleet-console";

const FLAGS = [
  ["id", "ID", "the console `ID`, [a-z0-9][a-z0-9-]{0,62} (required)", ""],
  ["port", "N", "TCP port on 127.0.0.1 (0: any free port)", "0"],
  ["name", "NAME", "a display `NAME` (default: the id)", ""],
  ["state-dir", "DIR", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)", ""],
  ["supervisor", "ADDR", "the supervisor's address `ADDR`, a loopback literal like 127.0.0.1:7420 (default: from <stateHome>/fleet/supervisor.addr)", ""],
  ["tailscale-socket", "PATH", "tailscaled's LocalAPI socket `PATH`: a console running as its owner believes nobody local", defaultTailscaleSocket()],
  ["trust-tailscaled-user", null, "believe local callers even when running as tailscaled's user (only with tailscaled on a kernel TUN)", false],
];

/**
 * flags reads console.mjs's flags from argv (as Go's flag package: -x or --x, "--x v" or "--x=v")
 * and checks them; bad usage exits 2, an unusable fleet token exits 1. It returns the options a
 * verifier and a registration need.
 * @param {string} program
 * @param {string[]} [argv]
 */
export function flags(program, argv = process.argv.slice(2)) {
  const usage = (out) => {
    out.write(`Usage: node ${program} [flags]\n\nA console on 127.0.0.1 that believes the fleet supervisor, registered with it at start-up.\n\nFlags:\n`);
    for (const [name, arg, help, def] of FLAGS) {
      out.write(`  --${name}${arg ? " " + arg : ""}\n    \t${help.replace(/`/g, "")}${def !== "" && def !== false ? ` (default ${JSON.stringify(def)})` : ""}\n`);
    }
  };
  const fail = (msg, code = 2) => {
    process.stderr.write(`${program}: ${msg}\n`);
    if (code === 2) usage(process.stderr);
    process.exit(code);
  };
  /** @type {Record<string, string | boolean>} */
  const o = Object.fromEntries(FLAGS.map(([n, , , d]) => [n, d]));
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") break;
    if (!a.startsWith("-") || a === "-") fail(`unexpected argument ${JSON.stringify(a)}`);
    let [name, value] = a.replace(/^--?/, "").split(/=(.*)/s, 2);
    if (name === "h" || name === "help") {
      usage(process.stdout);
      process.exit(0);
    }
    const flag = FLAGS.find(([n]) => n === name);
    if (!flag) fail(`flag provided but not defined: -${name}`);
    if (flag[1] === null) {
      if (value === undefined || /^(1|t|true|T|TRUE|True)$/.test(value)) o[name] = true;
      else if (/^(0|f|false|F|FALSE|False)$/.test(value)) o[name] = false;
      else fail(`invalid boolean value ${JSON.stringify(value)} for -${name}`);
      continue;
    }
    if (value === undefined) {
      if (i + 1 >= argv.length) fail(`flag needs an argument: -${name}`);
      value = argv[++i];
    }
    o[name] = value;
  }
  const id = String(o.id);
  if (!validConsoleId(id)) fail(`--id ${JSON.stringify(id)}: want [a-z0-9][a-z0-9-]{0,62}, e.g. --id alpha`);
  if (!/^[0-9]{1,5}$/.test(String(o.port)) || Number(o.port) > 65535) fail(`--port ${JSON.stringify(o.port)}: want 0-65535`);
  const supervisor = String(o.supervisor);
  if (supervisor) {
    try {
      checkSupervisorAddr(supervisor);
    } catch (err) {
      fail(`--supervisor: ${/** @type {Error} */ (err).message}; the fleet token is only ever sent to loopback`);
    }
  }
  const home = stateHome(String(o["state-dir"]));
  const tokenPath = path.join(home, "fleet", "fleet.token");
  try {
    parseToken(readPrivateFile(tokenPath).data);
  } catch (err) {
    const e = /** @type {NodeJS.ErrnoException} */ (err);
    fail(e.code === "ENOENT" ? `no fleet token at ${tokenPath}; 'fleet serve' creates it on first start` : `cannot use the fleet token: ${e.message}`, 1);
  }
  return {
    id,
    port: Number(o.port),
    name: String(o.name) || id,
    supervisor,
    logger: jsonLogger(process.stderr),
    verifierConfig: { stateDir: home, tailscaleSocket: String(o["tailscale-socket"]), trustTailscaledUser: o["trust-tailscaled-user"] === true },
  };
}

/**
 * registerUntilStopped prints "<program> <id> listening on http://ADDR/", registers with the
 * supervisor and, on SIGINT or SIGTERM, deregisters and calls stop. A registration the supervisor
 * refuses for good (a 4xx) ends the process with status 1, saying why.
 * @param {import("@phase-console/fleet-console").Verifier} v
 * @param {{id: string, name: string, supervisor: string}} opts
 * @param {string} addr the console's own 127.0.0.1:PORT
 * @param {() => unknown} stop closes the server
 */
export function registerUntilStopped(v, opts, addr, stop) {
  process.stdout.write(`fleet console ${opts.id} listening on http://${addr}/\n`);
  const reg = v.register({ id: opts.id, addr, name: opts.name, supervisor: opts.supervisor || undefined });
  let stopping = false;
  reg.ready.catch((err) => {
    if (stopping) return;
    process.stderr.write(`fleet console ${opts.id}: the supervisor refused the registration: ${err.message}\n`);
    process.exit(1);
  });
  const onSignal = async () => {
    if (stopping) return;
    stopping = true;
    await reg.close();
    v.close();
    await stop();
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return reg;
}
