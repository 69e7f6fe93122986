// Package proxy is the judgement of a request at a fleet door and the hop from the door to a
// console: the order of the checks (Door), path judgement, header scrubbing, the assertion, and
// streaming. Both doors (the loopback door in package supervisor and the direct-reach door) use
// it, so the rules below hold on each.
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
//     caller's Connection line cannot delete what the hop set — but for the plain page loads of
//     the loopback door's fast loop (below), whose exchange admits no Connection line but
//     "keep-alive" or "close", writes the console's request straight from the caller's header
//     lines, leaving out Host, Connection and every identity header and adding the hop's own
//     (writeConsoleHead): the same head assertOnto and net/http's Request.Write make, which
//     FuzzFastHead checks on every head it admits, and the same request as ReverseProxy sends
//     (TestFastLoopAnswersAsReverseProxy_S6_S9).
//   - S7: the decision about /c/<id>/hooks is made on the decoded, canonical path (JudgePath), and the
//     path forwarded is exactly the path judged; a path that is not canonical is 400 bad-path, and
//     so is a request-target with a space, a control byte or DEL anywhere, its query included
//     (HTTP/2's :path may hold one; no console is sent a request line it would split otherwise).
//   - S9: a request head over 64 KiB is 431 (MaxHeaderBytes: NewServer makes net/http read no
//     more, the Door refuses what net/http still read, 431 header-too-large); only
//     "Upgrade: websocket" is let through (CheckUpgrade); bodies are streamed, never
//     buffered; server-sent events and responses of unknown length are flushed as they come, any
//     other response at least every 50 ms. A request body that sends nothing for
//     Hop.BodyIdleTimeout (60 s) is cut off: the console's request aborted, 408 body-timeout to
//     the caller on a closed connection. A body is read by the Transport alone, while the answer
//     streams back (full duplex on HTTP/1); an answer that comes before the body's end closes the
//     caller's connection after it, and what is left of the body is never read, so nothing reads
//     a body without the idle timeout. Operational errors are logged at warning level.
//   - R9: no console's answer — a 103 Early Hints included — sets one of fleet's own cookies
//     (named, or nameless with such a value) nor speaks for the whole origin (ScrubConsoleAnswer).
//   - S12: a request whose Origin is not its own origin is 403 cross-origin (CheckOrigin).
//
// The names, the folding of header names, the console-id grammar and the same-origin rule are
// package contract's, shared with the console library; this package applies them on the hop.
//
// # One judgement for every door
//
// Door is the one entry point: an http.Handler that judges a request in SPEC order and answers,
// refuses or forwards it, so that no door keeps its own copy of a rule or of the order. The first
// failing check answers: S9 head size (431 header-too-large) → the door's Host admission → S3
// (400 assertion-sent) → S7 (400 bad-path for a target with a space or a control byte; then, on a
// /c/… path, 400 bad-path, then 403 hooks) → S9 upgrade (400
// bad-upgrade) → S12 (403 cross-origin) → the door's own Site check, if it has one (the reach
// door's R6b, 403 cross-origin); then a request that is not for a console goes to the
// door's own pages, "/c/<id>" is 308 to "/c/<id>/", and a console request goes on: CONNECT and
// TRACE (405 method) → the door's caller verification → the console (404 unknown-console) → the
// token (503 no-token) → Hop.Forward, to exactly the path judged, as exactly the caller verified.
//
// A door supplies only what is its own, as small interfaces: its Host admission (HostAdmitter),
// who is calling (CallerVerifier: a login and an address, or a Refusal), where consoles listen
// (Consoles), the fleet token (TokenSource), and whom to tell that a console is down
// (DownMarker, to NewHop). It serves the Door with NewServer, whose limits (SPEC S9) the Door
// relies on, behind a ConnServer when it is a plain (not TLS) door.
//
// It fails closed: a Door missing any of them refuses every request (500 internal); a verifier
// that returns no login or no valid address, a lookup that fails, a token that cannot be read
// are refusals; Hop.Forward refuses a Target without what it asserts. Every refusal is one
// fleet.rejected line (WriteRefusal) with the spec's reason word, and never carries a secret.
// NewHop's default dialer is DialConsole, the owner check of peercred.DialOwn: a Hop whose dialer
// was left out never sends the token to another user's process.
//
// # The fast loop
//
// The loopback door serves its connections through a ConnServer: a connection loop of fleet's own
// that serves the plain requests every page load is made of — a GET or HEAD of HTTP/1.1 with no
// body and no upgrade, whose head fits 8 KiB and is written as every browser and Tailscale Serve
// write one (fastHead) — on one goroutine, over kept connections to the console. It exists for
// speed alone: net/http's server and Transport spend twice the CPU per request that fleet's checks
// do (bench/RESULTS.md). It changes no rule:
//
//   - fastHead admits only heads that net/http's server accepts, and the loop reads an admitted
//     head (every line of it checked already) into exactly the request http.ReadRequest makes of
//     it (FuzzFastHead); a console's answer is read the same way when fastAnswer admits its head
//     — a status line, one Content-Length, nothing that frames it otherwise — into exactly what
//     http.ReadResponse makes of it (FuzzFastAnswer), and by http.ReadResponse when not;
//   - both heads of such an exchange are written straight from the admitted lines (rawhead.go:
//     no header map is read, changed and written again), and are the heads the map path writes
//     for the same bytes — assertOnto and Request.Write's for the console, writeAnswerHead's
//     (ReverseProxy's scrubbing) for the caller; FuzzFastHead and FuzzFastAnswer check both;
//   - every request is judged by the Door's one judgement, in the same order; the fast loop
//     forwards only what it would forward, with the same assertion, and answers the console's
//     answer as ReverseProxy does (TestFastLoopAnswersAsReverseProxy_S6_S9 sends the same
//     requests both ways, to a console scripted with every kind of answer, and compares both ends);
//   - anything else — a refusal, a redirect, a door page, a body, an upgrade, a head it does not
//     admit — hands the connection, with the bytes read, to net/http's server, which serves that
//     request (with the verdict already made: judged once) and everything after it on the
//     connection, as it does when no fast loop is in front of it.
//
// The direct-reach door (TLS, HTTP/2) is served by net/http alone.
//
// This package judges and forwards; it does not decide who the caller is. That is the door's job.
// This package must never forward a request it could not judge.
package proxy
