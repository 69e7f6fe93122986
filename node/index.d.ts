// Types of @phase-console/fleet-console, written by hand beside src/ and checked by `tsc --noEmit`
// (test/types.ts uses every export).

import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Stats } from "node:fs";

/** A local caller: this console's own user on this machine. */
export interface LocalCaller {
  readonly scope: "local";
  readonly login: "";
  readonly refused?: undefined;
}
/** A remote caller: whoever the supervisor asserted (C4), whatever the login. */
export interface RemoteCaller {
  readonly scope: "remote";
  readonly login: string;
  readonly refused?: undefined;
}
export type Caller = LocalCaller | RemoteCaller;

/** The reason words of the contract. */
export type ReasonWord =
  | "fleet-bad-token"
  | "fleet-not-loopback"
  | "fleet-and-proxy"
  | "host"
  | "cross-origin"
  | "no-assertion"
  | "local-only"
  | "not loopback"
  | "not local"
  | "bad-run-token"
  | "reach-settings"
  | "bad-request";

/** The answer to a request the console must not serve. It holds no secret. */
export class Refusal {
  constructor(status: number, reason: ReasonWord, rule: string, detail: string);
  readonly refused: true;
  readonly scope?: undefined;
  readonly status: number;
  readonly reason: ReasonWord;
  /** "C1" … "C7", or "" for the console-wide Host and Origin checks. */
  readonly rule: string;
  /** For the log only; never a secret. */
  readonly detail: string;
}

export type Verdict = Caller | Refusal;

export declare const Reason: Readonly<{
  badToken: "fleet-bad-token";
  notLoopback: "fleet-not-loopback";
  andProxy: "fleet-and-proxy";
  host: "host";
  crossOrigin: "cross-origin";
  noAssertion: "no-assertion";
  localOnly: "local-only";
  hookPeer: "not loopback";
  hookProxied: "not local";
  badRunToken: "bad-run-token";
  reachSettings: "reach-settings";
  badRequest: "bad-request";
}>;

export type LogLevel = "DEBUG" | "INFO" | "WARN" | "ERROR";
/** Receives one structured event; the default writes one slog-shaped JSON line on stderr. */
export type Logger = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void;

/** The clock of the rotation grace: wall milliseconds, and a monotonic one for deadlines. */
export interface Clock {
  now(): number;
  monotonic?(): number;
}

export interface VerifierConfig {
  /** --state-dir; "" or absent resolves <stateHome> from the environment. */
  stateDir?: string;
  /** The console's own proxy identity header (C3); default Tailscale-User-Login, any spelling. */
  proxyHeader?: string;
  /** Admits more Host values for requests without an assertion; never widens C2. */
  allowHost?: (host: string) => boolean;
  logger?: Logger;
  clock?: Clock;
  /** tailscaled's LocalAPI socket, whose owner is tailscaled's uid. */
  tailscaleSocket?: string;
  /** Believe local callers even when running as tailscaled's uid (kernel TUN only). */
  trustTailscaledUser?: boolean;
  /** Poll the token file (default true). */
  watch?: boolean;
  watchIntervalMs?: number;
}

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => unknown;
export type ExpressStyleHandler = (req: IncomingMessage, res: ServerResponse, next?: (err?: unknown) => void) => unknown;
export type UpgradeListener = (req: IncomingMessage, socket: Duplex, head: Buffer) => unknown;

export interface RegisterOptions {
  /** The console id, [a-z0-9][a-z0-9-]{0,62}. */
  id: string;
  /** The console's own loopback address, 127.0.0.1:PORT. */
  addr: string;
  /** Shown by the supervisor; default the id. */
  name?: string;
  /** --supervisor: a loopback literal; default <stateHome>/fleet/supervisor.addr. */
  supervisor?: string;
  refreshMs?: number;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Told of every attempt's outcome (tests). */
  onAttempt?: (err: Error | null, status: number) => void;
}

export class Registration {
  private constructor();
  readonly id: string;
  readonly addr: string;
  /** Where the supervisor was last registered with, "" before. */
  readonly registeredAt: string;
  /** Stops registering and DELETEs the registration (best effort, two seconds). */
  deregister(): Promise<void>;
}

export class Verifier {
  constructor(cfg?: VerifierConfig);
  /** <stateHome>/fleet */
  readonly fleetDir: string;
  /** Judges req in the Go package's order. Any error refuses. */
  verify(req: IncomingMessage): Promise<Verdict>;
  /** For node:http: every request judged before handler; refusals answered and logged. */
  middleware(handler: RequestListener): RequestListener;
  /** For Express-style apps: app.use(v.express()). */
  express(): (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
  /** For server.on("upgrade", …): the same judgement; a refusal is written on the socket. */
  upgrade(handler: UpgradeListener): UpgradeListener;
  /** C5: scope remote is 403 local-only. */
  localOnly<H extends ExpressStyleHandler>(handler: H): H;
  /** C6: the permission hook's guard; handler sees runOf(req). */
  permissionHook<H extends ExpressStyleHandler>(runs: Runs | null, handler: H): H;
  /** C7: a device login may read reach settings, never change them. */
  reachSettings<H extends ExpressStyleHandler>(handler: H): H;
  /** Judge each connection's peer once, as it arrives. */
  attach<S extends Server>(server: S): S;
  judgeConnection(socket: Socket): Promise<string | null>;
  refuse(res: ServerResponse, req: IncomingMessage, ref: Refusal, event?: string): void;
  refuseSocket(socket: Duplex, req: IncomingMessage, ref: Refusal, event?: string): void;
  /** Registers with the supervisor now, and keeps it registered until deregister(). */
  register(opts: RegisterOptions): Registration;
  /** The current fleet token, for registration only; throws when none is believed. */
  bearer(): string;
  /** Re-reads the token file if it changed. */
  refresh(): void;
  /** Stops polling the token file. */
  close(): void;
}

export function createVerifier(cfg?: VerifierConfig): Verifier;
export function callerOf(req: IncomingMessage): Caller | undefined;
export function runOf(req: IncomingMessage): string | undefined;
export function isDeviceLogin(login: string): boolean;
export function isHookPath(decodedPath: string): boolean;
export function requestPath(req: IncomingMessage): string | null;
export function stateHome(flagValue?: string, env?: NodeJS.ProcessEnv): string;
export function defaultTailscaleSocket(): string;
export function jsonLogger(stream?: NodeJS.WritableStream): Logger;
export declare const DEFAULT_PROXY_HEADER: "Tailscale-User-Login";
export declare const EVENT_REJECTED: "console.rejected";
export declare const EVENT_HOOK_REJECTED: "hook.rejected";
export declare const WATCH_INTERVAL_MS: number;

export class Runs {
  start(): { id: string; token: string };
  end(id: string): boolean;
  match(token: string): string | null;
}
export declare const MAX_RUNS: number;

export function checkSupervisorAddr(addr: string): { host: string; port: number };

export class TokenFollower {
  constructor(path: string, clock?: Clock);
  readonly path: string;
  readonly err: Error | null;
  refresh(): { changed: boolean; err: Error | null };
  currentToken(): string;
  match(got: string): boolean;
  matchFresh(got: string): boolean;
}
export function readPrivateFile(path: string, maxBytes?: number): { data: Buffer; stat: Stats | import("node:fs").BigIntStats };
export function parseToken(data: Buffer | string): string;
export function constantTimeEqual(a: string, b: string): boolean;
export class ModeError extends Error {
  readonly path: string;
}
export declare const ROTATION_GRACE_MS: number;

export declare const HEADER_FLEET: "X-Phase-Console-Fleet";
export declare const HEADER_FLEET_LOGIN: "X-Phase-Console-Fleet-Login";
export function foldName(name: string): string;
export function isAssertionName(name: string): boolean;
export function isLoopbackHost(host: string): boolean;
export function sameOrigin(origin: string, scheme: string, host: string): boolean;
export function validConsoleId(id: string): boolean;
