// Package proxy is the hop from a fleet door to a console: path judgement, header scrubbing, the
// assertion, and streaming. Both doors (the loopback door in package supervisor and the
// direct-reach door) use it, so the rules below hold on each.
//
// Guarantees, each with its rule in docs/contract.md:
//
//   - S3: a request that carries an assertion header (X-Phase-Console-Fleet or
//     X-Phase-Console-Fleet-Login) under any spelling — any case, '_' or any other character in place
//     of '-', duplicated, empty, named in Connection or declared as a trailer — is refused 400
//     assertion-sent (CheckNoAssertion) and never forwarded. Request trailers are never forwarded.
//   - S4: every identity header the caller wrote (Tailscale-*, Forwarded, X-Forwarded-*, X-Real-Ip,
//     Remote-*, X-Remote-*, X-Webauth-*, X-Auth-Request-*, X-Pomerium-*, Cf-Access-*,
//     Teleport-Jwt-Assertion, Authorization, Proxy-Authorization), under any spelling, is removed
//     (ScrubIdentity); the hop then sets its own X-Forwarded-For, -Host, -Proto and -Prefix.
//   - S6: the hop sets both assertion headers, strips the /c/<id> prefix and sets Host to the
//     console's loopback address. It is httputil.ReverseProxy with Rewrite, never Director, so a
//     caller's Connection line cannot delete what the hop set.
//   - S7: the decision about /c/<id>/hooks is made on the decoded, canonical path (JudgePath), and the
//     path forwarded is exactly the path judged; a path that is not canonical is 400 bad-path.
//   - S9: only "Upgrade: websocket" is let through (CheckUpgrade); bodies are streamed, never
//     buffered; server-sent events and responses of unknown length are flushed as they come, any
//     other response at least every 50 ms. A request body that sends nothing for
//     Hop.BodyIdleTimeout (60 s) is cut off: the console's request aborted, 408 body-timeout to
//     the caller on a closed connection. Operational errors are logged at warning level.
//   - S12: a request whose Origin is not its own origin is 403 cross-origin (CheckOrigin).
//
// The names, the folding of header names, the console-id grammar and the same-origin rule are
// package contract's, shared with the console library; this package applies them on the hop.
//
// This package judges and forwards; it does not decide who the caller is. That is the door's job,
// and the door hands the verified login to Hop.Forward. This package must never forward a request
// it could not judge.
package proxy
