// Who is at the other end of a loopback TCP connection on this machine: the uid that owns the
// peer's socket, read from Linux's /proc/net/tcp and /proc/net/tcp6 as the Go module's
// internal/peercred reads them where it may not use netlink. Everywhere else there is no answer,
// and every caller fails closed.
//
// Guarantee: any doubt is an error, never a uid — no matching socket, two matching sockets of
// different uids, a socket no process holds (inode 0: TIME_WAIT, orphans, with a made-up uid 0),
// the invalid uid 4294967295, a table past its bound, a read error, or a platform other than Linux.

"use strict";

const fs = require("node:fs/promises");
const os = require("node:os");

/** The tables searched; tests point it at samples. */
const procNetFiles = ["/proc/net/tcp", "/proc/net/tcp6"];
/** How much of one table is read at most (as the Go package): past it the lookup fails closed. */
const PROC_NET_MAX_BYTES = 32 << 20;
const INVALID_UID = 4294967295;
const LITTLE_ENDIAN = os.endianness() === "LE";

/** PeerUidError is every failure to tell who owns a socket; callers refuse. */
class PeerUidError extends Error {
  constructor(message) {
    super(message);
    this.name = "PeerUidError";
  }
}

// normalize puts an address in the form the tables compare against: IPv4-mapped IPv6 unmapped,
// IPv6 expanded to eight 16-bit words joined by ':', no zone.
function normalizeAddr(addr) {
  addr = String(addr).replace(/%.*$/, "");
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(addr);
  if (m) return m[1];
  if (/^\d+\.\d+\.\d+\.\d+$/.test(addr)) return addr;
  return expand6(addr);
}

function expand6(a) {
  let tail = [];
  if (a.includes(".")) {
    const i = a.lastIndexOf(":");
    const v4 = a.slice(i + 1).split(".").map(Number);
    tail = [((v4[0] << 8) | v4[1]).toString(16), ((v4[2] << 8) | v4[3]).toString(16)];
    a = a.slice(0, i + 1);
    if (!a.endsWith("::")) a = a.slice(0, -1);
  }
  const [l, r] = a.includes("::") ? a.split("::") : [a, undefined];
  const left = l ? l.split(":") : [];
  const right = r ? r.split(":") : [];
  const fill = r === undefined ? [] : new Array(8 - left.length - right.length - tail.length).fill("0");
  const words = [...left, ...fill, ...right, ...tail].map((w) => parseInt(w, 16).toString(16));
  const s = words.join(":");
  // An IPv4-mapped address written out in full is the IPv4 address.
  const mapped = /^0:0:0:0:0:ffff:([0-9a-f]+):([0-9a-f]+)$/.exec(s);
  if (mapped) {
    const hi = parseInt(mapped[1], 16);
    const lo = parseInt(mapped[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return s;
}

function hexWord(s) {
  if (!/^[0-9A-Fa-f]{1,8}$/.test(s)) return null;
  return parseInt(s, 16) >>> 0;
}

// parseAddrPort parses "0100007F:1CF4" or a 32-digit IPv6 form: each 32-bit word in host byte order.
function parseAddrPort(s) {
  const i = s.indexOf(":");
  if (i < 0 || s.length - i - 1 !== 4) return null;
  const hex = s.slice(0, i);
  const port = hexWord(s.slice(i + 1));
  if (port === null || (hex.length !== 8 && hex.length !== 32)) return null;
  const bytes = Buffer.alloc(hex.length / 2);
  for (let w = 0; w < hex.length / 8; w++) {
    const v = hexWord(hex.slice(8 * w, 8 * w + 8));
    if (v === null) return null;
    if (LITTLE_ENDIAN) bytes.writeUInt32LE(v, 4 * w);
    else bytes.writeUInt32BE(v, 4 * w);
  }
  let addr;
  if (bytes.length === 4) addr = `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
  else {
    const words = [];
    for (let k = 0; k < 8; k++) words.push(bytes.readUInt16BE(2 * k).toString(16));
    addr = normalizeAddr(words.join(":"));
  }
  return { addr, port };
}

/** parseLine parses one table line; null for anything that is not exactly one with a valid uid. */
function parseLine(line) {
  const f = line.trim().split(/\s+/);
  if (f.length < 10) return null;
  if (!/^[0-9]+:$/.test(f[0])) return null;
  const local = parseAddrPort(f[1]);
  const remote = parseAddrPort(f[2]);
  if (!local || !remote || f[1].length !== f[2].length) return null;
  if (!/^[0-9A-Fa-f]{2}$/.test(f[3])) return null;
  if (!/^[0-9]+$/.test(f[7]) || !/^[0-9]+$/.test(f[9])) return null;
  const uid = Number(f[7]);
  if (uid >= INVALID_UID) return null;
  return { local, remote, state: parseInt(f[3], 16), uid, inode: BigInt(f[9]) };
}

// live: an owned socket in a state in which it can be the peer of an accepted connection.
function live(e) {
  return [0x01, 0x04, 0x05, 0x08, 0x09, 0x0b].includes(e.state) && e.inode !== 0n;
}

function same(ap, addr, port) {
  return ap.port === port && ap.addr === addr;
}

const hexPort = (port) => ":" + port.toString(16).toUpperCase().padStart(4, "0");

// searchTables runs match over every parsed line of every table that contains each of needles
// (a cheap filter: the ports in hex), each table read up to PROC_NET_MAX_BYTES. A table that does
// not exist (tcp6 with IPv6 off) is skipped; one that cannot be read or is too large is an error;
// different uids are ambiguous.
async function searchTables(needles, match) {
  let read = 0;
  let found = null;
  for (const name of procNetFiles) {
    let fh;
    try {
      fh = await fs.open(name, "r");
    } catch (err) {
      if (err.code === "ENOENT") continue;
      throw new PeerUidError(`${name}: ${err.message}`);
    }
    let text;
    try {
      const chunks = [];
      let total = 0;
      const buf = Buffer.alloc(1 << 20);
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) break;
        total += bytesRead;
        if (total > PROC_NET_MAX_BYTES) throw new PeerUidError(`${name}: socket table too large to read`);
        chunks.push(Buffer.from(buf.subarray(0, bytesRead)));
      }
      text = Buffer.concat(chunks).toString("latin1");
    } catch (err) {
      throw err instanceof PeerUidError ? err : new PeerUidError(`${name}: ${err.message}`);
    } finally {
      await fh.close();
    }
    read++;
    for (const line of text.split("\n")) {
      if (line.length > 4096 || !needles.every((n) => line.includes(n))) continue;
      const e = parseLine(line);
      if (!e || !match(e)) continue;
      if (found !== null && e.uid !== found) throw new PeerUidError("peer socket is ambiguous");
      found = e.uid;
    }
  }
  if (read === 0) throw new PeerUidError(`none of ${procNetFiles.join(", ")} could be read`);
  return found;
}

const backoff = [0, 1, 5, 20, 50, 170];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * peerUid returns the uid that owns the socket at the other end of a loopback TCP connection that
 * this end sees as local <- remote: the table line whose local_address is remote and whose
 * rem_address is local, live and held by a process. Rejects with a PeerUidError on any doubt, and
 * always outside Linux.
 */
async function peerUid(localAddr, localPort, remoteAddr, remotePort, platform = process.platform) {
  if (platform !== "linux") throw new PeerUidError("peer uid lookup is not supported on this platform");
  const la = normalizeAddr(localAddr);
  const ra = normalizeAddr(remoteAddr);
  if (!localPort || !remotePort) throw new PeerUidError("invalid address");
  if (!(la.startsWith("127.") || la === "0:0:0:0:0:0:0:1")) throw new PeerUidError("local address is not loopback");
  for (const wait of backoff) {
    if (wait) await sleep(wait);
    const uid = await searchTables([hexPort(remotePort), hexPort(localPort)], (e) => live(e) && same(e.local, ra, remotePort) && same(e.remote, la, localPort));
    if (uid !== null) return uid;
  }
  throw new PeerUidError(`peer socket of ${localAddr}:${localPort} <- ${remoteAddr}:${remotePort} not found`);
}

/**
 * serverUid returns the uid of whoever holds the server end of a connection that this client sees
 * as local -> remote: the process that accepted it or, while it waits in the queue, the owner of
 * the socket listening there. It waits for the accept up to waitMs, then the listener decides.
 */
async function serverUid(localAddr, localPort, remoteAddr, remotePort, waitMs = 3000, platform = process.platform) {
  if (platform !== "linux") throw new PeerUidError("peer uid lookup is not supported on this platform");
  const la = normalizeAddr(localAddr);
  const ra = normalizeAddr(remoteAddr);
  const loop = (a) => a.startsWith("127.") || a === "0:0:0:0:0:0:0:1";
  if (!loop(la) || !loop(ra)) throw new PeerUidError("not a loopback connection");
  const stop = Date.now() + waitMs;
  for (let i = 0; ; i++) {
    const accepted = await searchTables([hexPort(remotePort), hexPort(localPort)], (e) => live(e) && same(e.local, ra, remotePort) && same(e.remote, la, localPort));
    if (accepted !== null) return accepted;
    const listener = await searchTables(
      [hexPort(remotePort)],
      (e) =>
        e.state === 0x0a &&
        e.inode !== 0n &&
        e.local.port === remotePort &&
        (e.local.addr === ra || e.local.addr === "0:0:0:0:0:0:0:0" || (e.local.addr === "0.0.0.0" && !ra.includes(":"))),
    );
    if (listener === null) throw new PeerUidError(`nobody listens on ${remoteAddr}:${remotePort}`);
    // Another user's listener is the answer at once; this user's waits for the accept a while.
    if (listener !== process.geteuid?.() || Date.now() >= stop) return listener;
    await sleep([1, 2, 5, 10, 20, 50][Math.min(i, 5)]);
  }
}

module.exports = { procNetFiles, PROC_NET_MAX_BYTES, PeerUidError, normalizeAddr, parseLine, peerUid, serverUid };
