// The fleet token file: read as a private file (SPEC F1) and followed through rotations (C1), as
// the Go module's internal/state reads and follows it.

"use strict";

const fs = require("node:fs");
const { createHmac, randomBytes, timingSafeEqual } = require("node:crypto");

/** How long the previous token is still believed after a rotation (SPEC C1). */
const ROTATION_GRACE_MS = 10_000;
/** How many random bytes a fleet token carries at least. */
const TOKEN_BYTES = 32;

/** A ModeError says that a file is too open, someone else's or not a regular file, and the fix. */
class ModeError extends Error {
  constructor(path, mode, why, fix) {
    const perm = (Number(mode) & 0o777).toString(8).padStart(4, "0");
    super(`${path} ${why} (mode ${perm})${fix ? "; fix: " + fix : ""}`);
    this.name = "ModeError";
    this.path = path;
  }
}

function euid() {
  return typeof process.geteuid === "function" ? process.geteuid() : -1;
}

// checkPrivateFile is the rule of a private file, on st (the fstat of what was opened, or an
// lstat): a regular file of this user, no group or world bits.
function checkPrivateFile(path, st) {
  const mode = Number(st.mode);
  if ((mode & fs.constants.S_IFMT) !== fs.constants.S_IFREG) {
    throw new ModeError(path, mode, "is not a regular file", "move it out of the way");
  }
  const me = euid();
  if (Number(st.uid) !== me) {
    throw new ModeError(path, mode, `is owned by uid ${st.uid}, not by this user (uid ${me})`, `chown ${me} ${path}`);
  }
  if (mode & 0o077) throw new ModeError(path, mode, "is group- or world-accessible", `chmod 600 ${path}`);
}

/**
 * readPrivateFile reads path, a regular file of this user with no group or world bits. The rule
 * is applied to the file actually read: it is opened without following a symlink (O_NOFOLLOW) and
 * without blocking on a FIFO (O_NONBLOCK), judged by the fstat of that descriptor, and read from
 * it. A symlink or another file swapped in at the path is never read. Returns {data, stat} (the
 * fstat, bigint, taken before the bytes were read). Fails closed where O_NOFOLLOW is unknown.
 */
function readPrivateFile(path, maxBytes = 1 << 20) {
  const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;
  if (O_NOFOLLOW === undefined) throw new Error(`${path}: this platform cannot open a file without following a symlink`);
  let fd;
  try {
    fd = fs.openSync(path, O_RDONLY | O_NOFOLLOW | (O_NONBLOCK ?? 0));
  } catch (err) {
    if (err.code === "ENOENT") throw err;
    if (err.code === "ELOOP") throw new ModeError(path, fs.constants.S_IFLNK | 0o777, "is not a regular file", "move it out of the way");
    let st;
    try {
      st = fs.lstatSync(path);
    } catch {
      throw err;
    }
    checkPrivateFile(path, st);
    throw err;
  }
  try {
    const st = fs.fstatSync(fd, { bigint: true });
    checkPrivateFile(path, st);
    const chunks = [];
    let total = 0;
    const buf = Buffer.alloc(64 << 10);
    for (;;) {
      const n = fs.readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      total += n;
      if (total > maxBytes) throw new Error(`${path}: larger than ${maxBytes} bytes`);
      chunks.push(Buffer.from(buf.subarray(0, n)));
    }
    return { data: Buffer.concat(chunks), stat: st };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * parseToken validates a token file's contents: one line of base64url (padding dropped) that
 * decodes to at least 32 bytes. The error never contains the token.
 */
function parseToken(data) {
  let s = Buffer.isBuffer(data) ? data.toString("latin1") : String(data);
  if (s.endsWith("\n")) s = s.slice(0, -1);
  if (s.endsWith("\r")) s = s.slice(0, -1);
  if (/[\r\n \t]/.test(s)) throw new Error("not one line of base64url");
  s = s.replace(/=+$/, "");
  // RawURLEncoding: the alphabet, and no length of 1 mod 4; trailing bits must be zero (Go's
  // strict decoder is not used, so they are not checked there either).
  if (!/^[A-Za-z0-9_-]*$/.test(s) || s.length % 4 === 1) throw new Error("not base64url");
  const raw = Buffer.from(s, "base64url");
  if (raw.length < TOKEN_BYTES) throw new Error(`too short: ${raw.length} bytes, want at least ${TOKEN_BYTES}`);
  return s;
}

function readTokenStamped(path) {
  const { data, stat } = readPrivateFile(path);
  let tok;
  try {
    tok = parseToken(data);
  } catch (err) {
    throw new Error(`${path}: ${err.message}`);
  }
  return { token: tok, stamp: stampOf(stat) };
}

function stampOf(st) {
  if (!st) return "";
  return [st.mtimeNs, st.size, st.ino, st.mode, st.uid].join("/");
}

function lstamp(path) {
  try {
    return stampOf(fs.lstatSync(path, { bigint: true }));
  } catch {
    return "";
  }
}

// Constant-time comparison of two strings of any lengths: both are reduced to an HMAC under a
// key of this process (fixed length), then compared with crypto.timingSafeEqual.
const compareKey = randomBytes(32);
function digest(s) {
  return createHmac("sha256", compareKey).update(s, "latin1").digest();
}
/** constantTimeEqual reports whether a === b, in time that does not depend on where they differ. */
function constantTimeEqual(a, b) {
  const ok = timingSafeEqual(digest(a), digest(b));
  return ok && a.length === b.length;
}

/**
 * The default clock: wall time for the file's age, a monotonic one for the grace's deadlines, so
 * that a step of the wall clock never stretches the grace.
 */
const systemClock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
};

/**
 * A TokenFollower follows the fleet token file as the Go package's state.Token does: it re-reads
 * the file when its stamp (mtime, size, inode, mode, owner) changes or the last read failed, and
 * believes the previous token for ROTATION_GRACE_MS after a rotation, never longer — the grace
 * ends at the earlier of: the rotation seen plus the grace minus the file's age then (clamped to
 * [0, grace]), and the last moment the old token was confirmed in the file plus the grace. A file
 * that is missing, unreadable, too open or malformed believes no token at all (fail closed) until
 * it reads right again, which the next refresh tries whether or not the file changed.
 */
class TokenFollower {
  /** @param {string} path @param {{now(): number, monotonic?(): number}} [clock] */
  constructor(path, clock = systemClock) {
    this.path = path;
    this.clock = clock;
    this.read = readTokenStamped; // a seam for tests
    this.stamp = "";
    this.current = "";
    this.confirmed = null; // monotonic ms
    this.previous = "";
    this.prevSeen = null;
    this.prevUntil = null;
    this.err = null;
    this.refresh();
  }

  mono() {
    return this.clock.monotonic ? this.clock.monotonic() : this.clock.now();
  }

  /** refresh re-reads the file if needed; returns {changed, err}. */
  refresh() {
    const looked = this.mono();
    const st = lstamp(this.path);
    if (st !== "" && st === this.stamp && this.err === null) {
      this.confirmed = looked;
      return { changed: false, err: null };
    }
    let got;
    try {
      got = this.read(this.path);
    } catch (err) {
      const changed = this.err === null || this.err.message !== err.message;
      this.stamp = "";
      this.current = "";
      this.confirmed = null;
      this.err = err;
      this.previous = "";
      this.prevSeen = this.prevUntil = null;
      return { changed, err };
    }
    this.stamp = got.stamp;
    const changed = this.err !== null || got.token !== this.current;
    if (got.token !== this.current) {
      if (this.current !== "") {
        const mtimeMs = Number(BigInt(got.stamp.split("/")[0]) / 1_000_000n);
        let age = this.clock.now() - mtimeMs;
        age = Math.max(0, Math.min(age, ROTATION_GRACE_MS));
        let until = looked + ROTATION_GRACE_MS - age;
        if (this.confirmed !== null && this.confirmed + ROTATION_GRACE_MS < until) until = this.confirmed + ROTATION_GRACE_MS;
        this.previous = this.current;
        this.prevSeen = looked;
        this.prevUntil = until;
      }
      this.current = got.token;
    }
    this.confirmed = looked;
    this.err = null;
    return { changed, err: null };
  }

  /** current returns the token to send; it throws the reason there is none. */
  currentToken() {
    if (this.err) throw this.err;
    if (this.current === "") throw new Error("no fleet token");
    return this.current;
  }

  /** match: got is the current token, or the previous one within its grace (constant time). */
  match(got) {
    const now = this.mono();
    if (this.previous !== "" && (now >= this.prevUntil || now < this.prevSeen)) {
      this.previous = "";
      this.prevSeen = this.prevUntil = null;
    }
    if (this.err || this.current === "") return false;
    let ok = constantTimeEqual(got, this.current);
    if (this.previous !== "") ok = constantTimeEqual(got, this.previous) || ok;
    return ok;
  }

  /** matchFresh is match, and on a miss one re-read of the file and match again. */
  matchFresh(got) {
    if (this.match(got)) return true;
    this.refresh();
    return this.match(got);
  }
}

module.exports = { ROTATION_GRACE_MS, TOKEN_BYTES, ModeError, readPrivateFile, parseToken, constantTimeEqual, systemClock, TokenFollower };
