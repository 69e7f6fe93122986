// Registration with the supervisor (SPEC S8), as the Go reference console's Registrar does it.

"use strict";

const net = require("node:net");
const http = require("node:http");
const path = require("node:path");
const { readPrivateFile } = require("./token.cjs");
const { isLoopbackAddress, validConsoleId } = require("./contract.cjs");
const { serverUid } = require("./peercred.cjs");

/**
 * checkSupervisorAddr accepts a loopback IP literal with a port (127.0.0.0/8 or [::1], no zone,
 * not IPv4-mapped, port 1-65535) and returns {host, port}; it throws for anything else — a name,
 * even localhost, is refused: the bearer would go wherever a resolver points it.
 */
function checkSupervisorAddr(addr) {
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
function dialOwn(host, port, timeoutMs = 5000, platform = process.platform, signal = undefined) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new Error(`connect ${host}:${port}: stopped`));
    const s = net.connect({ host, port });
    const onAbort = () => {
      clearTimeout(t);
      s.destroy();
      reject(new Error(`connect ${host}:${port}: stopped`));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      s.destroy();
      reject(new Error(`connect ${host}:${port}: timed out`));
    }, timeoutMs);
    s.once("error", (err) => {
      clearTimeout(t);
      signal?.removeEventListener("abort", onAbort);
      reject(err);
    });
    s.once("connect", async () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", onAbort);
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
 * validateRegistration checks what register() is given, all fields at once, by the supervisor's own
 * rules (SPEC S8, N3): id [a-z0-9][a-z0-9-]{0,62}; addr a loopback IP literal with a port; name at
 * most 100 bytes of UTF-8 without control characters; supervisor, when given, a loopback literal
 * with a port. It throws one TypeError naming every bad field and its rule.
 */
function validateRegistration(opts) {
  if (!opts || typeof opts !== "object") throw new TypeError("register: want {id, addr, name?}");
  const bad = [];
  const { id, addr, name, supervisor } = opts;
  if (typeof id !== "string" || !validConsoleId(id)) bad.push(`id ${show(id)}: want [a-z0-9][a-z0-9-]{0,62}`);
  if (typeof addr !== "string" || !loopbackAddrPort(addr)) bad.push(`addr ${show(addr)}: want a loopback IP literal with a port, like 127.0.0.1:9001`);
  if (name !== undefined && name !== null && name !== "") {
    if (typeof name !== "string") bad.push(`name: want a string`);
    else if (!name.isWellFormed()) bad.push(`name: want UTF-8 text (it holds a lone surrogate)`);
    else if (Buffer.byteLength(name, "utf8") > 100) bad.push(`name: want at most 100 bytes of UTF-8 (it has ${Buffer.byteLength(name, "utf8")})`);
    else if (/[\u0000-\u001f\u007f]/.test(name)) bad.push(`name: control characters are not allowed`);
  }
  if (supervisor !== undefined && supervisor !== null && supervisor !== "") {
    try {
      if (typeof supervisor !== "string") throw new Error("want a string");
      checkSupervisorAddr(supervisor);
    } catch (err) {
      bad.push(`supervisor: ${err.message}`);
    }
  }
  if (bad.length > 0) throw new TypeError("register: " + bad.join("; "));
}

function show(v) {
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

// loopbackAddrPort is the supervisor's addr rule (Go's netip.ParseAddrPort, IsLoopback, port not
// 0, no zone): 127.0.0.0/8 or [::1] with a decimal port 1-65535.
function loopbackAddrPort(addr) {
  try {
    checkSupervisorAddr(addr);
    return true;
  } catch {
    return false;
  }
}

/** A RegistrationError is why the supervisor refused a registration for good: its status and reason word. */
class RegistrationError extends Error {
  constructor(status, reason, message) {
    super(message);
    this.name = "RegistrationError";
    this.status = status;
    this.reason = reason;
  }
}

/**
 * A Registration keeps one console registered for as long as it runs:
 *
 *  - before every attempt it finds the supervisor — opts.supervisor, else the first line of
 *    <fleetDir>/supervisor.addr (a private file) — and checks that it is a loopback literal, else
 *    nothing is sent, the bearer least of all;
 *  - it POSTs /fleet/v1/consoles with the fleet bearer and {"id","addr","name"} at once, then every
 *    refreshMs (5 s), so that a supervisor that restarted has the console back within refreshMs;
 *  - only what may pass is retried, with back-off from minBackoffMs (250 ms) doubling to
 *    maxBackoffMs (5 s): no supervisor yet, a connection that failed, 429 (after Retry-After, when
 *    it says more) and 5xx. Any other 4xx — 400 bad-registration, 401, 409 — is the supervisor's
 *    final word: `ready` rejects with a RegistrationError holding its status and reason word, the
 *    loop ends, and no timer or socket of it remains;
 *  - `ready` resolves at the first success ({status, supervisor}); it rejects too when close()
 *    comes first (reason "closed"). It never goes unhandled: awaiting it is optional;
 *  - close() (or deregister()) stops everything at once, a retry's wait or a request in flight
 *    included, and DELETEs /fleet/v1/consoles/<id> when it was registered (best effort, two seconds).
 *
 * Log lines: console.registered, console.register-failed (when the failure changes),
 * console.register-refused (the final 4xx), console.deregistered. The token is never logged; no
 * proxy is used, no redirect followed.
 */
class Registration {
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
    this.closing = null;
    this.ready = new Promise((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    this.ready.catch(() => {}); // a rejection nobody awaits is not an unhandled one
    this.settled = false;
  }

  start() {
    this.done = this.#run();
  }

  #resolve(value) {
    if (this.settled) return;
    this.settled = true;
    this.settle.resolve(value);
  }

  #reject(err) {
    if (this.settled) return;
    this.settled = true;
    this.settle.reject(err);
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
      if (signal.aborted) break;
      try {
        this.onAttempt?.(outcome.err ?? null, outcome.status ?? 0);
      } catch {
        // a test's observer does not stop registration
      }
      if (outcome.err instanceof RegistrationError) {
        this.log("ERROR", "console.register-refused", { console: this.id, status: outcome.status, reason: outcome.err.reason, error: outcome.err.message, effect: "not retried" });
        this.#reject(outcome.err);
        this.abort.abort();
        break;
      }
      if (outcome.err) {
        const msg = outcome.err.message;
        if (msg !== lastErr) {
          this.log("WARN", "console.register-failed", { console: this.id, error: msg, retry: "with back-off" });
          lastErr = msg;
        }
        wait = Math.max(backoff, Math.min(outcome.retryAfterMs ?? 0, 60_000));
        backoff = Math.min(2 * backoff, this.maxBackoffMs);
      } else {
        if (outcome.status === 201 || lastErr !== "" || outcome.addr !== this.registeredAt) {
          this.log("INFO", "console.registered", { console: this.id, addr: this.addr, supervisor: outcome.addr, status: outcome.status });
        }
        this.registeredAt = outcome.addr;
        lastErr = "";
        backoff = this.minBackoffMs;
        this.#resolve({ status: outcome.status, supervisor: outcome.addr });
      }
      await sleep(wait, signal);
    }
    if (!this.settled) {
      const err = new RegistrationError(0, "closed", `register ${this.id}: closed before the supervisor took the registration`);
      this.#reject(err);
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
    const { status, why, reason, retryAfterMs } = await this.#send(sup, "POST", "/fleet/v1/consoles", body, this.abort.signal);
    if (status === 200 || status === 201) return { addr: sup.addr, status };
    if (status >= 400 && status < 500 && status !== 429) {
      const hint = status === 401 ? " (do the console and `fleet serve` use the same --state-dir?)" : "";
      return { addr: sup.addr, status, err: new RegistrationError(status, reason || String(status), `supervisor ${sup.addr} answered ${status} to the registration${why}${hint}`) };
    }
    return { addr: sup.addr, status, retryAfterMs, err: new Error(`supervisor ${sup.addr} answered ${status} to the registration${why}`) };
  }

  async #send(sup, method, reqPath, body, signal, timeoutMs = 5000) {
    const tok = this.token();
    const scrub = (s) => String(s).split(tok).join("<fleet token>");
    const socket = await dialOwn(sup.host, sup.port, timeoutMs, this.platform, signal);
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
          let reason = typeof res.headers["x-fleet-reason"] === "string" ? scrub(res.headers["x-fleet-reason"]) : "";
          if (res.statusCode >= 400) {
            try {
              const e = JSON.parse(Buffer.concat(chunks).toString("utf8"));
              if (e && typeof e.error === "string" && e.error) {
                reason = reason || scrub(e.error);
                why = `: ${scrub(e.error)}: ${scrub(e.detail ?? "")}`;
              }
            } catch {
              if (reason) why = `: ${reason}`;
            }
          }
          const ra = Number(res.headers["retry-after"]);
          resolve({ status: res.statusCode, why, reason, retryAfterMs: Number.isFinite(ra) && ra > 0 ? ra * 1000 : 0 });
        });
        res.on("error", (err) => reject(new Error(scrub(err.message))));
      });
      req.end(body ?? undefined);
    });
  }

  /**
   * close stops registering at once — a retry's wait and a request in flight included — and, when
   * the supervisor had taken the registration, DELETEs it (best effort, two seconds). After it
   * resolves no timer or socket of this registration remains. Calling it again returns the same
   * promise.
   */
  close() {
    if (!this.closing) this.closing = this.#close();
    return this.closing;
  }

  /** deregister is close(). */
  deregister() {
    return this.close();
  }

  async #close() {
    this.abort.abort();
    await this.done;
    if (!this.registeredAt) return;
    let sup;
    try {
      sup = this.supervisorAddr();
    } catch {
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

module.exports = { checkSupervisorAddr, dialOwn, Registration, RegistrationError, validateRegistration };
