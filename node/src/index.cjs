// @phase-console/fleet-console — what a Node console requires or imports to believe the fleet
// supervisor (SPEC C1–C7, N1–N5): the same decision, in the same order, as the Go package
// github.com/phase-console/fleet/console. This is the entry for require(); index.mjs hands the very
// same objects to ES modules, so the package has one implementation and a process that loads it
// both ways keeps one verifier state (who was judged, which runs live), not two.

"use strict";

const verifier = require("./verifier.cjs");
const runs = require("./runs.cjs");
const register = require("./register.cjs");
const token = require("./token.cjs");
const contract = require("./contract.cjs");

module.exports = {
  Verifier: verifier.Verifier,
  createVerifier: verifier.createVerifier,
  Refusal: verifier.Refusal,
  Reason: verifier.Reason,
  callerOf: verifier.callerOf,
  runOf: verifier.runOf,
  isDeviceLogin: verifier.isDeviceLogin,
  isHookPath: verifier.isHookPath,
  requestPath: verifier.requestPath,
  stateHome: verifier.stateHome,
  defaultTailscaleSocket: verifier.defaultTailscaleSocket,
  jsonLogger: verifier.jsonLogger,
  DEFAULT_PROXY_HEADER: verifier.DEFAULT_PROXY_HEADER,
  EVENT_REJECTED: verifier.EVENT_REJECTED,
  EVENT_HOOK_REJECTED: verifier.EVENT_HOOK_REJECTED,
  WATCH_INTERVAL_MS: verifier.WATCH_INTERVAL_MS,
  Runs: runs.Runs,
  MAX_RUNS: runs.MAX_RUNS,
  Registration: register.Registration,
  RegistrationError: register.RegistrationError,
  checkSupervisorAddr: register.checkSupervisorAddr,
  TokenFollower: token.TokenFollower,
  readPrivateFile: token.readPrivateFile,
  parseToken: token.parseToken,
  constantTimeEqual: token.constantTimeEqual,
  ModeError: token.ModeError,
  ROTATION_GRACE_MS: token.ROTATION_GRACE_MS,
  HEADER_FLEET: contract.HEADER_FLEET,
  HEADER_FLEET_LOGIN: contract.HEADER_FLEET_LOGIN,
  foldName: contract.foldName,
  isAssertionName: contract.isAssertionName,
  isLoopbackHost: contract.isLoopbackHost,
  sameOrigin: contract.sameOrigin,
  validConsoleId: contract.validConsoleId,
};
