// Registration with the supervisor (SPEC S8), as the Go reference console's Registrar does it.

import net from "node:net";
import http from "node:http";
import path from "node:path";
import { readPrivateFile } from "./token.js";
import { isLoopbackAddress } from "./contract.js";
import { serverUid } from "./peercred.js";

/**
 * checkSupervisorAddr accepts a loopback IP literal with a port (127.0.0.0/8 or [::1], no zone,
 * not IPv4-mapped, port 1-65535) and returns {host, port}; it throws for anything else — a name,
 * even localhost, is refused: the bearer would go wherever a resolver points it.
 */
export function checkSupervisorAddr(addr) {
  const bad = () => new Error(`supervisor address ${JSON.stringify(addr)}: not a loopback literal with a port (want 127.0.0.1:PORT or [::1]:PORT)`);
  let m = /^\[([0-9A-Fa-f:]+)\]:([0-9]{1,5})$/.exec(addr);
  let host;
  if (m) {
    host = m[1];
    if (net.isIPv6(host) !== true || !isLoopbackAddress(host) || /ffff/i.test(host)) throw bad();
  } else {
    m = /^([0-9.]+):([0-9]{1,5})$/.exec(addr);
    if (!m || net.isIPv4(m[1]) !== true || !isLoopbackAddress(m[1])) throw bad();
    host = m[1];
  }
  const port = Number(m[2]);
  if (port < 1 || port > 65535 || m[2] !== String(port)) throw bad();
  return { host, port };
}

// sleep waits ms, or until signal aborts.
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });

/**
 * dialOwn connects to a loopback supervisor and resolves to the socket only when the process that
 * accepted it (or, until it does, the socket listening there) is this user's: the fleet token is
 * never sent to another user's process that took the port. Outside Linux it fails closed.
 */
export function dialOwn(host, port, timeoutMs = 5000, platform = process.platform) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port });
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error(`connect ${host}:${port}: timed out`));
    }, timeoutMs);
    s.once("error", (err) => {
      clearTimeout(t);
      reject(err);
    });
    s.once("connect", async () => {
      clearTimeout(t);
      try {
        const uid = await serverUid(s.localAddress, s.localPort, s.remoteAddress, s.remotePort, 3000, platform);
        const me = process.geteuid?.();
        if (uid !== me) throw new Error(`${host}:${port} is run by another user (uid ${uid}, not ${me}); refusing to send it the fleet token`);
        if (s.destroyed) throw new Error(`${host}:${port}: the connection closed while its owner was looked up`);
        resolve(s);
      } catch (err) {
        s.destroy();
        reject(err);
      }
    });
  });
}

/**
 * A Registration keeps one console registered for as long as it runs:
 *
 *  - before every attempt it finds the supervisor — opts.supervisor, else the first line of
 *    <fleetDir>/supervisor.addr (a private file) — and checks that it is a loopback literal, else
 *    nothing is sent, the bearer least of all;
 *  - it POSTs /fleet/v1/consoles with the fleet bearer and {"id","addr","name"} at once, then every
 *    refreshMs (5 s), so that a supervisor that restarted has the console back within refreshMs;
 *    a failure is retried with back-off from minBackoffMs (250 ms) doubling to maxBackoffMs (5 s);
 *  - deregister() stops it and DELETEs /fleet/v1/consoles/<id> (best effort, two seconds).
 *
 * Log lines: console.registered, console.register-failed (when the failure changes),
 * console.deregistered. The token is never logged; no proxy is used, no redirect followed.
 */
export class Registration {
  constructor(opts) {
    this.id = opts.id;
    this.addr = opts.addr;
    this.name = opts.name || opts.id;
    this.supervisor = opts.supervisor || "";
    this.fleetDir = opts.fleetDir;
    this.token = opts.token;
    this.log = opts.log;
    this.refreshMs = opts.refreshMs ?? 5000;
    this.minBackoffMs = opts.minBackoffMs ?? 250;
    this.maxBackoffMs = Math.max(opts.maxBackoffMs ?? 5000, this.minBackoffMs);
    this.platform = opts.platform ?? process.platform;
    this.onAttempt = opts.onAttempt ?? null; // tests: told of every attempt's outcome
    this.abort = new AbortController();
    this.done = null;
    this.registeredAt = "";
  }

  start() {
    this.done = this.#run();
  }

  async #run() {
    const signal = this.abort.signal;
    let backoff = this.minBackoffMs;
    let lastErr = "";
    while (!signal.aborted) {
      let wait = this.refreshMs;
      let outcome;
      try {
        outcome = await this.#registerOnce();
      } catch (err) {
        outcome = { err };
      }
      this.onAttempt?.(outcome.err ?? null, outcome.status ?? 0);
      if (signal.aborted) break;
      if (outcome.err) {
        const msg = outcome.err.message;
        if (msg !== lastErr) {
          this.log("WARN", "console.register-failed", { console: this.id, error: msg, retry: "with back-off" });
          lastErr = msg;
        }
        wait = backoff;
        backoff = Math.min(2 * backoff, this.maxBackoffMs);
      } else {
        if (outcome.status === 201 || lastErr !== "" || outcome.addr !== this.registeredAt) {
          this.log("INFO", "console.registered", { console: this.id, addr: this.addr, supervisor: outcome.addr, status: outcome.status });
        }
        this.registeredAt = outcome.addr;
        lastErr = "";
        backoff = this.minBackoffMs;
      }
      await sleep(wait, signal);
    }
  }

  supervisorAddr() {
    let addr = this.supervisor;
    if (!addr) {
      const file = path.join(this.fleetDir, "supervisor.addr");
      let data;
      try {
        data = readPrivateFile(file, 4096).data.toString("utf8");
      } catch (err) {
        throw new Error(`find the supervisor: ${err.message} (is \`fleet serve\` running?)`);
      }
      addr = data.split("\n")[0].trim();
    }
    try {
      return { addr, ...checkSupervisorAddr(addr) };
    } catch (err) {
      throw new Error(`${err.message}; the fleet token is not sent`);
    }
  }

  async #registerOnce() {
    const sup = this.supervisorAddr();
    const body = JSON.stringify({ id: this.id, addr: this.addr, name: this.name });
    const { status, why } = await this.#send(sup, "POST", "/fleet/v1/consoles", body, this.abort.signal);
    if (status === 401) {
      return { addr: sup.addr, status, err: new Error("supervisor answered 401 to the fleet token: do the console and `fleet serve` use the same --state-dir?") };
    }
    if (status !== 200 && status !== 201) {
      return { addr: sup.addr, status, err: new Error(`supervisor ${sup.addr} answered ${status} to the registration${why}`) };
    }
    return { addr: sup.addr, status };
  }

  async #send(sup, method, reqPath, body, signal, timeoutMs = 5000) {
    const tok = this.token();
    const scrub = (s) => String(s).split(tok).join("<fleet token>");
    const socket = await dialOwn(sup.host, sup.port, timeoutMs, this.platform);
    return await new Promise((resolve, reject) => {
      const headers = { Authorization: `Bearer ${tok}`, Accept: "application/json", Connection: "close" };
      if (body !== null) {
        headers["Content-Type"] = "application/json";
        headers["Content-Length"] = Buffer.byteLength(body);
      }
      const req = http.request({
        method,
        host: sup.host,
        port: sup.port,
        path: reqPath,
        headers,
        createConnection: () => socket,
        signal,
        timeout: timeoutMs,
      });
      req.on("timeout", () => req.destroy(new Error("timed out")));
      req.on("error", (err) => reject(new Error(scrub(err.message))));
      req.on("response", (res) => {
        const chunks = [];
        let n = 0;
        res.on("data", (c) => {
          n += c.length;
          if (n <= 64 << 10) chunks.push(c);
        });
        res.on("end", () => {
          let why = "";
          if (res.statusCode >= 400) {
            try {
              const e = JSON.parse(Buffer.concat(chunks).toString("utf8"));
              if (e && e.error) why = `: ${e.error}: ${scrub(e.detail ?? "")}`;
            } catch {
              const r = res.headers["x-fleet-reason"];
              if (r) why = `: ${r}`;
            }
          }
          resolve({ status: res.statusCode, why });
        });
        res.on("error", (err) => reject(new Error(scrub(err.message))));
      });
      req.end(body ?? undefined);
    });
  }

  /** deregister stops registering and removes the console from the supervisor (best effort, 2 s). */
  async deregister() {
    if (this.abort.signal.aborted) return this.done;
    this.abort.abort();
    await this.done;
    let sup;
    try {
      sup = this.supervisorAddr();
    } catch {
      if (!this.registeredAt) return;
      try {
        sup = { addr: this.registeredAt, ...checkSupervisorAddr(this.registeredAt) };
      } catch {
        return;
      }
    }
    try {
      const { status } = await this.#send(sup, "DELETE", "/fleet/v1/consoles/" + encodeURIComponent(this.id), null, AbortSignal.timeout(2000), 2000);
      this.log("INFO", "console.deregistered", { console: this.id, supervisor: sup.addr, status });
    } catch (err) {
      this.log("WARN", "console.deregister-failed", { console: this.id, supervisor: sup.addr, error: err.message });
    }
  }
}
