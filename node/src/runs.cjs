// The bearer of every live run, for the permission hook (SPEC C6), as the Go package's Runs.

"use strict";

const { randomBytes } = require("node:crypto");
const { constantTimeEqual } = require("./token.cjs");

/** How many runs may be live at once. */
const MAX_RUNS = 1024;

/**
 * Runs holds the token of every live run. A run's token is dead the moment end() returns: the
 * event loop runs one judgement at a time, and match() reads the live set as it is then.
 */
class Runs {
  #live = new Map(); // id → token

  /** start begins a run: {id: 16 hex digits, token: 32 random bytes base64url}. Never log the token. */
  start() {
    if (this.#live.size >= MAX_RUNS) throw new Error("too many live runs");
    const id = randomBytes(8).toString("hex");
    if (this.#live.has(id)) throw new Error("run id collision");
    const token = randomBytes(32).toString("base64url");
    this.#live.set(id, token);
    return { id, token };
  }

  /** end ends run id; its token is refused from now on. Reports whether it was live. */
  end(id) {
    return this.#live.delete(id);
  }

  /**
   * match returns the id of the live run whose token is token, or null. Every live token is
   * compared, each in constant time, whatever matches; an empty token matches nothing.
   */
  match(token) {
    if (typeof token !== "string") return null;
    let found = null;
    for (const [id, t] of this.#live) if (constantTimeEqual(token, t)) found = id;
    return token === "" ? null : found;
  }
}

module.exports = { MAX_RUNS, Runs };
