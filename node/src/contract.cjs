// The rules a console shares with the supervisor, as package contract of the Go module holds them:
// how header names fold (SPEC S3), which Hosts are loopback (C2), when an Origin is a request's own
// (S12), how a bearer is read from Authorization, the console-id grammar, and what of a request a
// log line may name (S11). Pure functions of strings; no I/O.

"use strict";

/** The assertion headers: only the supervisor writes them (SPEC S3, S6). */
const HEADER_FLEET = "X-Phase-Console-Fleet";
const HEADER_FLEET_LOGIN = "X-Phase-Console-Fleet-Login";
const FOLDED_FLEET = "x-phase-console-fleet";
const FOLDED_FLEET_LOGIN = "x-phase-console-fleet-login";

/**
 * foldName is how fleet and a console compare header names (S3): lower-cased, every byte that is
 * not an ASCII letter or digit read as '-'. It works on the name's bytes as Node's parser gave them
 * (latin1), so a non-ASCII byte is one '-' as in Go.
 */
function foldName(name) {
  let out = "";
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if ((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39)) out += name[i];
    else if (c >= 0x41 && c <= 0x5a) out += String.fromCharCode(c + 0x20);
    else out += "-";
  }
  return out;
}

/** isAssertionName reports whether name is either assertion header under any S3 spelling. */
function isAssertionName(name) {
  const f = foldName(name);
  return f === FOLDED_FLEET || f === FOLDED_FLEET_LOGIN;
}

/** equalFoldASCII compares with ASCII letters folded and every other character exactly. */
function equalFoldASCII(s, t) {
  if (s.length !== t.length) return false;
  for (let i = 0; i < s.length; i++) {
    let a = s.charCodeAt(i);
    let b = t.charCodeAt(i);
    if (a >= 0x41 && a <= 0x5a) a += 0x20;
    if (b >= 0x41 && b <= 0x5a) b += 0x20;
    if (a !== b) return false;
  }
  return true;
}

/** validPort: one to five decimal digits, 1-65535. */
function validPort(p) {
  if (p.length === 0 || p.length > 5 || !/^[0-9]+$/.test(p)) return false;
  const n = Number(p);
  return n >= 1 && n <= 65535;
}

// IPv6 literal without a zone, as netip.ParseAddr accepts one (including an embedded IPv4 tail).
function parseIPv6(s) {
  if (s.includes("%") || !/^[0-9A-Fa-f:.]+$/.test(s)) return null;
  let tail = [];
  let head = s;
  const lastColon = s.lastIndexOf(":");
  if (s.includes(".")) {
    const v4 = parseIPv4(s.slice(lastColon + 1));
    if (!v4) return null;
    tail = [(v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]];
    head = s.slice(0, lastColon + 1); // "…:" or "…::"; keep a "::", drop a lone ":"
    if (!head.endsWith("::")) head = head.slice(0, -1);
  }
  const parts = head.split("::");
  if (parts.length > 2) return null;
  const words = (p) => (p === "" ? [] : p.split(":"));
  const left = words(parts[0]);
  const right = parts.length === 2 ? words(parts[1]) : [];
  for (const w of [...left, ...right]) if (!/^[0-9A-Fa-f]{1,4}$/.test(w)) return null;
  const given = left.length + right.length + tail.length;
  let all;
  if (parts.length === 2) {
    if (given > 7) return null;
    all = [...left.map((w) => parseInt(w, 16)), ...new Array(8 - given).fill(0), ...right.map((w) => parseInt(w, 16)), ...tail];
  } else {
    if (given !== 8) return null;
    all = [...left.map((w) => parseInt(w, 16)), ...tail];
  }
  return all;
}

function parseIPv4(s) {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  const out = [];
  for (const p of parts) {
    // netip: decimal, no leading zeros, 0-255.
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > 255) return null;
    out.push(Number(p));
  }
  return out;
}

/**
 * parseHost reads a Host header: [host lower-cased without port, brackets or trailing dot, dotted]
 * only when it is a name of [A-Za-z0-9.-] labels or an IP literal (IPv6 in brackets, no zone) with
 * an optional port 1-65535; else null.
 */
function parseHost(h) {
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    if (end < 0) return null;
    const lit = h.slice(1, end);
    const rest = h.slice(end + 1);
    if (!parseIPv6(lit)) return null;
    if (rest !== "" && (rest[0] !== ":" || !validPort(rest.slice(1)))) return null;
    return { host: lit.toLowerCase(), dotted: false, ipv6: true };
  }
  const i = h.lastIndexOf(":");
  if (i >= 0) {
    if (!validPort(h.slice(i + 1))) return null;
    h = h.slice(0, i);
  }
  const dotted = h.endsWith(".");
  const name = dotted ? h.slice(0, -1) : h;
  if (name === "" || name.startsWith(".") || name.endsWith(".") || name.includes("..")) return null;
  if (!/^[A-Za-z0-9.-]+$/.test(name)) return null;
  return { host: name.toLowerCase(), dotted, ipv6: false };
}

/**
 * isLoopbackHost: 127.0.0.1, [::1] or localhost (any case), any port or none (C2). Not 127.0.0.2,
 * not "localhost.", not [::ffff:127.0.0.1], not 127.0.0.1.evil.example.
 */
function isLoopbackHost(h) {
  if (typeof h !== "string") return false;
  const p = parseHost(h);
  if (!p || p.dotted) return false;
  if (p.host === "localhost") return true;
  if (p.ipv6) {
    const w = parseIPv6(p.host);
    return w !== null && w.slice(0, 7).every((x) => x === 0) && w[7] === 1;
  }
  const v4 = parseIPv4(p.host);
  return v4 !== null && v4[0] === 127 && v4[1] === 0 && v4[2] === 0 && v4[3] === 1;
}

/** isLoopbackAddress: an IP address (as net.Socket reports it) in 127.0.0.0/8 or ::1, IPv4-mapped unmapped. */
function isLoopbackAddress(addr) {
  if (typeof addr !== "string") return false;
  const v4 = parseIPv4(addr);
  if (v4) return v4[0] === 127;
  const w = parseIPv6(addr);
  if (!w) return false;
  if (w.slice(0, 5).every((x) => x === 0) && w[5] === 0xffff) return w[6] >> 8 === 127;
  return w.slice(0, 7).every((x) => x === 0) && w[7] === 1;
}

function validOriginHost(h) {
  if (h === "" || /[/\\?#@ \t\r\n]/.test(h)) return false;
  let name = h;
  const i = h.lastIndexOf(":");
  if (i >= 0 && !h.endsWith("]")) {
    name = h.slice(0, i);
    if (!validPort(h.slice(i + 1))) return false;
  }
  if (name.startsWith("[")) return name.indexOf("]") === name.length - 1 && name.length > 2;
  return name !== "" && !/[:[\]]/.test(name);
}

function withoutDefaultPort(host, scheme) {
  if (equalFoldASCII(scheme, "http") && host.endsWith(":80")) return host.slice(0, -3);
  if (equalFoldASCII(scheme, "https") && host.endsWith(":443")) return host.slice(0, -4);
  return host;
}

/**
 * sameOrigin reports whether origin (one Origin header) is the request's own: scheme plus Host,
 * compared as RFC 6454 serialises them (no path, ASCII case folded, the default port the same as
 * none). "null" is never the same.
 */
function sameOrigin(origin, scheme, host) {
  const i = origin.indexOf("://");
  if (i < 0) return false;
  const oscheme = origin.slice(0, i);
  const ohost = origin.slice(i + 3);
  if (!equalFoldASCII(oscheme, scheme) || !validOriginHost(ohost)) return false;
  return equalFoldASCII(withoutDefaultPort(ohost, scheme), withoutDefaultPort(host, scheme));
}

/**
 * parseBearer reads the one Authorization value: "Bearer" (any case), spaces, one token without
 * space or control byte, optional trailing spaces and tabs. values are every Authorization line;
 * anything but exactly one is null.
 */
function parseBearer(values) {
  if (values.length !== 1) return null;
  const v = values[0];
  const sp = v.indexOf(" ");
  if (sp < 0 || !equalFoldASCII(v.slice(0, sp), "Bearer")) return null;
  const tok = v.slice(sp + 1).replace(/^ +/, "").replace(/[ \t]+$/, "");
  if (tok === "") return null;
  for (let i = 0; i < tok.length; i++) {
    const c = tok.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return null;
  }
  return tok;
}

/** validConsoleId: [a-z0-9][a-z0-9-]{0,62}. */
function validConsoleId(id) {
  return typeof id === "string" && /^[a-z0-9][a-z0-9-]{0,62}$/.test(id);
}

/** logPath is the request target for a log line: the path only, never the query, at most 512 bytes. */
function logPath(url) {
  let p = url ?? "";
  const q = p.indexOf("?");
  if (q >= 0) p = p.slice(0, q);
  if (p.length > 512) p = p.slice(0, 512) + "…";
  return p;
}

module.exports = { HEADER_FLEET, HEADER_FLEET_LOGIN, FOLDED_FLEET, FOLDED_FLEET_LOGIN, foldName, isAssertionName, equalFoldASCII, parseHost, isLoopbackHost, isLoopbackAddress, sameOrigin, parseBearer, validConsoleId, logPath };
