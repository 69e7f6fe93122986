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
//     caller's Connection line cannot delete what the hop set. (The loopback door's fast loop,
//     package proxy/fastloop, writes the console's request from the caller's lines instead; what
//     it asserts is written by this package, Judged.WriteAssertion, and only for a verdict to
//     forward.)
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
//   - S12: a request whose Origin is not its own origin is 403 cross-origin (CheckOrigin), with
//     one exception (SPEC G2): a GET of exactly "/" for JSON whose one Origin the door's
//     PeerOrigins allows goes to the door's pages, every answer to it naming that Origin in
//     Access-Control-Allow-Origin, with Vary: Origin. A console path never is one.
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
// relies on — the loopback door behind its fast loop (package proxy/fastloop).
//
// It fails closed: a Door missing any of them refuses every request (500 internal); a verifier
// that returns no login or no valid address, a lookup that fails, a token that cannot be read
// are refusals; Hop.Forward refuses a Target without what it asserts. Every refusal is one
// fleet.rejected line (WriteRefusal) with the spec's reason word, and never carries a secret; its
// body is in the caller's language (SPEC U5: the page or JSON, written by package look).
// NewHop's default dialer is DialConsole, the owner check of peercred.DialOwn: a Hop whose dialer
// was left out never sends the token to another user's process.
//
// # The seam of the fast loop
//
// The loopback door serves plain page loads with a connection loop of its own in front of
// net/http, for speed (package proxy/fastloop, whose doc comment says what it owns and the parity
// it keeps). That loop judges nothing and writes no rule: it imports this package, never the
// other way round, and goes through one narrow seam, each part of which is the Door's or the
// Hop's own code:
//
//   - Door.Judge is ServeHTTP's judgement, writing nothing; its Judged offers a forward
//     (Judged.Target) only for what Hop.Forward would send, and anything else — a refusal, a
//     redirect, a door page, a Target the Hop would refuse — is handed back to ServeHTTP with the
//     verdict (Judged.Context), which answers it as it answers its own: judged once, logged once;
//   - Judged.WriteAssertion writes the hop's own lines (S6) for such a forward; IsIdentityName
//     (S4) and ScrubbedFromAnswer (R9) say, line by line, what ScrubIdentity and
//     ScrubConsoleAnswer remove from a header map;
//   - Hop.Dial dials with the Hop's dialer (DialConsole's owner check), Hop.AnswerFailed answers
//     a failed forward as Forward answers one (the console marked down and logged, the caller
//     gone, another user's console, ErrUnwritable);
//   - a connection the loop hands to net/http with bytes read ahead gives an upgraded
//     connection's copy its bare socket once they are read (Drained).
//
// # What a door records
//
// A Door with an Audit tells it of every request it forwards and every refusal it writes, once
// each answer is complete — an upgraded stream when it closes — with the caller when it was
// identified before the door decided (SPEC G3, G4; record.go). It records nothing else: no
// header, query or body reaches an audit.Entry. With no Audit it costs nothing; with one, no
// allocation a request on either path.
//
// This package judges and forwards; it does not decide who the caller is. That is the door's job.
// This package must never forward a request it could not judge.
package proxy
