// @phase-console/fleet-console — what a Node console imports to believe the fleet supervisor
// (SPEC C1–C7): the same decision, in the same order, as the Go package
// github.com/phase-console/fleet/console. See README.md beside this folder.

export {
  Verifier,
  createVerifier,
  Refusal,
  Reason,
  callerOf,
  runOf,
  isDeviceLogin,
  isHookPath,
  requestPath,
  stateHome,
  defaultTailscaleSocket,
  jsonLogger,
  DEFAULT_PROXY_HEADER,
  EVENT_REJECTED,
  EVENT_HOOK_REJECTED,
  WATCH_INTERVAL_MS,
} from "./verifier.js";
export { Runs, MAX_RUNS } from "./runs.js";
export { Registration, checkSupervisorAddr } from "./register.js";
export { TokenFollower, readPrivateFile, parseToken, constantTimeEqual, ModeError, ROTATION_GRACE_MS } from "./token.js";
export { HEADER_FLEET, HEADER_FLEET_LOGIN, foldName, isAssertionName, isLoopbackHost, sameOrigin, validConsoleId } from "./contract.js";
