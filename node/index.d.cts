// Types of @phase-console/fleet-console, written by hand beside src/ and checked by `tsc --strict
// --noEmit` (test/types.ts uses every export; examples/ts/ types Express, Fastify and Hono consoles
// with them). These are the types of require(); index.d.mts gives the same to import.

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Server as NetServer, Socket } from "node:net";
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
export type UpgradeListener = (req: IncomingMessage, socket: Duplex, head: Buffer) => unknown;

/**
 * Any request handler a guard can wrap: node:http `(req, res)`, Express `(req, res, next)`,
 * Fastify `(request, reply)` and Hono `(c, next)` on @hono/node-server. A guard returns the very
 * type it is given, so a typed handler stays typed, with no cast.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyHandler = (...args: any[]) => unknown;

/** What callerOf and runOf read the caller from: a node:http or Express request, a Fastify request, a Hono context. */
export type JudgedRequest = IncomingMessage | { readonly raw: IncomingMessage } | { readonly env: unknown; readonly req: unknown };

/** A Fastify plugin (register it with `await app.register(…)`), typed without depending on fastify. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type FastifyPlugin = (instance: any, opts: Record<string, unknown>, done: (err?: Error) => void) => void;

/** A Hono middleware, typed without depending on hono. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type HonoMiddleware = (c: any, next: () => Promise<void>) => Promise<Response | void>;

/** An Express/Connect-style middleware; next is optional so that node:http can call it too. */
export type ExpressMiddleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;

/**
 * The routes `fleet check-console` probes (N5): GET /whoami, POST /presence, POST /runs,
 * DELETE /runs/<id>, POST /hooks/permission-request, GET|POST /settings/reach. As a function it is
 * node:http/Express middleware (passes other paths to next, else 404); `.fastify` and `.hono` are
 * the same routes for those frameworks.
 */
export interface ProbeRoutes {
  (req: IncomingMessage, res: ServerResponse, next?: (err?: unknown) => void): void;
  readonly fastify: FastifyPlugin;
  readonly hono: HonoMiddleware;
}

export interface ProbeRoutesOptions {
  /** The runs whose tokens the permission hook takes; default a new Runs. */
  runs?: Runs;
}

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

/** Why the supervisor refused a registration for good (any 4xx but 429), or "closed". */
export class RegistrationError extends Error {
  private constructor();
  /** The supervisor's status; 0 when close() came first. */
  readonly status: number;
  /** The supervisor's reason word ("bad-registration", "fleet-bad-token", …), or "closed". */
  readonly reason: string;
}

export class Registration {
  private constructor();
  readonly id: string;
  readonly addr: string;
  /** Where the supervisor was last registered with, "" before. */
  readonly registeredAt: string;
  /**
   * Resolves at the first success; rejects with a RegistrationError on any 4xx but 429 (after which
   * nothing of the registration keeps running) or when close() comes first. Never unhandled.
   */
  readonly ready: Promise<{ status: number; supervisor: string }>;
  /** Stops everything at once (a retry's wait too) and DELETEs the registration if it was taken (best effort, two seconds). */
  close(): Promise<void>;
  /** The same as close(). */
  deregister(): Promise<void>;
}

export class Verifier {
  constructor(cfg?: VerifierConfig);
  /** <stateHome>/fleet */
  readonly fleetDir: string;
  /** Judges req in the Go package's order. Any error refuses. */
  verify(req: IncomingMessage): Promise<Verdict>;
  /** For node:http: every request judged before handler; refusals answered and logged. */
  middleware<H extends RequestListener>(handler: H): H;
  /** For Express (and Connect): app.use(v.express()), before every route. */
  express(): ExpressMiddleware;
  /** For Fastify: await app.register(v.fastify()) — an onRequest hook on the whole app. */
  fastify(): FastifyPlugin;
  /** For Hono on @hono/node-server: app.use(v.hono()), first. */
  hono(): HonoMiddleware;
  /** For server.on("upgrade", …): the same judgement; a refusal is written on the socket. */
  upgrade<H extends UpgradeListener>(handler: H): H;
  /** C5: scope remote is 403 local-only. */
  localOnly<H extends AnyHandler>(handler: H): H;
  /** C6: the permission hook's guard; handler sees runOf(req). */
  permissionHook<H extends AnyHandler>(runs: Runs | null, handler: H): H;
  /** C7: a device login may read reach settings, never change them. */
  reachSettings<H extends AnyHandler>(handler: H): H;
  /** The routes `fleet check-console` probes, so that every probe runs (N5). Mount behind the verifier. */
  probeRoutes(opts?: ProbeRoutesOptions): ProbeRoutes;
  /** Judge each connection's peer once, as it arrives. */
  attach<S extends NetServer>(server: S): S;
  judgeConnection(socket: Socket): Promise<string | null>;
  refuse(res: ServerResponse, req: IncomingMessage, ref: Refusal, event?: string): void;
  refuseSocket(socket: Duplex, req: IncomingMessage, ref: Refusal, event?: string): void;
  /**
   * Registers with the supervisor now, and keeps it registered until close().
   * @throws {TypeError} naming every bad field (id, addr, name, supervisor) and its rule, before anything is sent.
   */
  register(opts: RegisterOptions): Registration;
  /** The current fleet token, for registration only; throws when none is believed. */
  bearer(): string;
  /** Re-reads the token file if it changed. */
  refresh(): void;
  /** Stops polling the token file. */
  close(): void;
}

export function createVerifier(cfg?: VerifierConfig): Verifier;
/**
 * The caller the verifier judged for req.
 * @throws {Error} when the verifier has not passed req (no middleware in front of the handler).
 */
export function callerOf(req: JudgedRequest): Caller;
/** The run whose bearer permissionHook accepted for req, else undefined. */
export function runOf(req: JudgedRequest): string | undefined;
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
