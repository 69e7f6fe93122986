// The token file (SPEC C1, F1): read as a private file, never through a swapped symlink, and
// followed through rotations with the 10 s grace on a fake clock.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { TokenFollower, readPrivateFile, parseToken, ROTATION_GRACE_MS } from "../src/token.cjs";
import { stateDir, newToken, writePrivate } from "./helpers.js";

// fakeClock: wall and monotonic time that move only when told to.
function fakeClock(start = Date.parse("2026-01-01T00:00:00Z")) {
  let wall = start;
  let mono = 1_000_000;
  return {
    now: () => wall,
    monotonic: () => mono,
    advance(ms) {
      wall += ms;
      mono += ms;
    },
    stepWall(ms) {
      wall += ms;
    },
  };
}

// rotate writes a new token as `fleet token rotate` does, dated at the clock's wall time.
function rotate(file, clock) {
  const tok = newToken();
  writePrivate(file, tok + "\n");
  const at = new Date(clock.now());
  fs.utimesSync(file, at, at);
  return tok;
}

test("C1 after a rotation the previous token is believed for 10 s, never longer", (t) => {
  const st = stateDir(t);
  const clock = fakeClock();
  const a = rotate(st.tokenPath, clock);
  const f = new TokenFollower(st.tokenPath, clock);
  assert.ok(f.match(a));
  clock.advance(500);
  f.refresh(); // A confirmed in the file at this moment, as the poll does every second
  const b = rotate(st.tokenPath, clock);
  f.refresh();
  assert.ok(f.match(b), "the new token");
  assert.ok(f.match(a), "the old one, at once");
  clock.advance(ROTATION_GRACE_MS - 1);
  assert.ok(f.match(a), "the old one, 1 ms before its grace ends");
  clock.advance(1);
  assert.ok(!f.match(a), "the old one, when its grace ends");
  clock.advance(-5_000); // a clock that comes back does not revive it
  assert.ok(!f.match(a));
  assert.ok(f.match(b));
});

test("C1 a rotation seen late has its grace shortened by the file's age", (t) => {
  const st = stateDir(t);
  const clock = fakeClock();
  const a = rotate(st.tokenPath, clock);
  const f = new TokenFollower(st.tokenPath, clock);
  rotate(st.tokenPath, clock); // written now …
  clock.advance(1_500); // … seen 1.5 s later
  f.refresh();
  clock.advance(ROTATION_GRACE_MS - 1_500 - 1);
  assert.ok(f.match(a));
  clock.advance(1);
  assert.ok(!f.match(a), "believed past 10 s after the rotation");
});

test("C1 a wall clock stepped forward or back does not stretch the grace", (t) => {
  const st = stateDir(t);
  const clock = fakeClock();
  const a = rotate(st.tokenPath, clock);
  const f = new TokenFollower(st.tokenPath, clock);
  rotate(st.tokenPath, clock);
  f.refresh();
  clock.stepWall(-3_600_000); // an hour back: the mtime is ahead, counted as just now
  clock.advance(ROTATION_GRACE_MS);
  assert.ok(!f.match(a));
});

test("C1 two rotations between two looks: A's grace ends 10 s after it was last confirmed", (t) => {
  const st = stateDir(t);
  const clock = fakeClock();
  const a = rotate(st.tokenPath, clock);
  const f = new TokenFollower(st.tokenPath, clock); // A confirmed now
  clock.advance(4_000);
  rotate(st.tokenPath, clock); // B
  clock.advance(4_000);
  const c = rotate(st.tokenPath, clock); // C, dated now: its age says nothing of A
  f.refresh();
  assert.ok(f.match(c));
  clock.advance(ROTATION_GRACE_MS - 8_000 - 1);
  assert.ok(f.match(a), "A within 10 s of its last confirmation");
  clock.advance(1);
  assert.ok(!f.match(a), "A believed more than 10 s after it was last seen in the file");
});

test("C1 a bearer that misses re-reads the file at once (the supervisor saw the rotation first)", (t) => {
  const st = stateDir(t);
  const clock = fakeClock();
  rotate(st.tokenPath, clock);
  const f = new TokenFollower(st.tokenPath, clock);
  clock.advance(100);
  const b = rotate(st.tokenPath, clock);
  assert.ok(f.matchFresh(b));
});

test("C1 an unusable token file believes nothing, and heals at the next look", (t) => {
  const st = stateDir(t);
  const clock = fakeClock();
  const f = new TokenFollower(st.tokenPath, clock);
  assert.ok(f.match(st.token));
  for (const [name, spoil, fix] of [
    ["too open", () => fs.chmodSync(st.tokenPath, 0o640), () => fs.chmodSync(st.tokenPath, 0o600)],
    ["malformed", () => writePrivate(st.tokenPath, "short\n"), () => writePrivate(st.tokenPath, st.token + "\n")],
    ["missing", () => fs.renameSync(st.tokenPath, st.tokenPath + ".away"), () => fs.renameSync(st.tokenPath + ".away", st.tokenPath)],
  ]) {
    spoil();
    const { err } = f.refresh();
    assert.ok(err, `${name}: no error`);
    assert.ok(!err.message.includes(st.token), `${name}: the error holds the token`);
    assert.ok(!f.match(st.token), `${name}: a token believed`);
    assert.throws(() => f.currentToken());
    fix();
    f.refresh();
    assert.ok(f.match(st.token), `${name}: not believed again`);
  }
});

test("C1 a passing read error does not stick: the next refresh reads again, file changed or not", (t) => {
  const st = stateDir(t);
  const f = new TokenFollower(st.tokenPath, fakeClock());
  const real = f.read;
  f.read = () => {
    throw Object.assign(new Error("EMFILE: too many open files"), { code: "EMFILE" });
  };
  fs.utimesSync(st.tokenPath, new Date(), new Date(Date.now() + 5000)); // a change, so it reads
  f.refresh();
  assert.ok(!f.match(st.token));
  f.read = real;
  f.refresh(); // nothing changed on disk since
  assert.ok(f.match(st.token));
});

test("F1 the token is never read through a symlink, a FIFO, or someone else's file", (t) => {
  const st = stateDir(t);
  const real = path.join(st.home, "real.token");
  writePrivate(real, newToken() + "\n");
  const link = path.join(st.fleetDir, "link.token");
  fs.symlinkSync(real, link);
  assert.throws(() => readPrivateFile(link), /is not a regular file/);
  const fifo = path.join(st.fleetDir, "fifo.token");
  execFileSync("mkfifo", ["-m", "600", fifo]);
  assert.throws(() => readPrivateFile(fifo), /is not a regular file/);
  // The follower, swapped to a symlink at the path: fails closed.
  const f = new TokenFollower(st.tokenPath, fakeClock());
  assert.ok(f.match(st.token));
  fs.rmSync(st.tokenPath);
  fs.symlinkSync(real, st.tokenPath);
  f.refresh();
  assert.ok(!f.match(st.token));
  assert.ok(!f.match(parseToken(fs.readFileSync(real))), "read through the symlink");
  if (process.geteuid() === 0) {
    const other = path.join(st.fleetDir, "other.token");
    writePrivate(other, newToken() + "\n");
    fs.chownSync(other, 4242, 4242);
    assert.throws(() => readPrivateFile(other), /owned by uid 4242/);
  }
});

test("parseToken takes one line of base64url of at least 32 bytes", () => {
  const tok = newToken();
  assert.equal(parseToken(tok + "\n"), tok);
  assert.equal(parseToken(tok + "\r\n"), tok);
  assert.equal(parseToken(tok + "="), tok);
  for (const bad of ["", "abc", tok + " x", tok + "\n\n", tok.slice(0, 40), tok.replace(/.$/, "+"), "\t" + tok]) {
    assert.throws(() => parseToken(bad), undefined, JSON.stringify(bad));
  }
});
