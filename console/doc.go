// Package console is what a console imports to believe the fleet supervisor (SPEC C1–C7).
//
// The supervisor tells a console who is calling through two assertion headers,
// X-Phase-Console-Fleet (the fleet bearer, the contents of <stateHome>/fleet/fleet.token) and
// X-Phase-Console-Fleet-Login (the verified login). This package judges them, so that a console
// never believes a header that anybody else could have written. The header names and the rules it
// shares with the supervisor (how names fold, which Hosts are loopback, when an Origin is the
// request's own) are package contract's, the same code the supervisor judges by.
//
// A console adds three lines:
//
//	v, err := console.New(console.Config{StateDir: stateDir}) // follow <stateHome>/fleet/fleet.token
//	http.Serve(ln, v.Middleware(mux))                         // judge every request, refuse the rest
//	caller, _ := console.CallerFrom(r.Context())              // in a handler: caller.Scope, caller.Login
//
// and wraps the handlers that need it in the guards: v.LocalOnly (presence, C5),
// v.PermissionHook (POST /hooks/permission-request, C6) and v.ReachSettings (C7).
//
// # Order of checks
//
// For a request that carries an assertion (either header, under any spelling that folds to it:
// lower-cased, every non-alphanumeric byte read as '-', so X_Phase_Console_Fleet counts), the
// first failing check answers:
//
//  1. C3: the console's own proxy identity header (Config.ProxyHeader, Tailscale-User-Login by
//     default, any spelling) is present: 403 fleet-and-proxy.
//  2. C2: Host is not 127.0.0.1, [::1] or localhost (any case), with an optional port:
//     421 fleet-not-loopback.
//  3. C1: the assertion is not well-formed (exactly one bearer value and one login value over all
//     spellings, both non-empty, none declared as a trailer), or the bearer is not the current
//     token (or the previous one within its 10 s grace after a rotation), compared in constant
//     time: 401 fleet-bad-token.
//
// Otherwise the caller is scope remote with the asserted login (C4): whatever the login, whatever
// the peer address, whatever X-Forwarded-For says.
//
// A request without an assertion:
//
//   - Host is not a loopback name (nor one Config.AllowHost admits): 421 host. This keeps
//     DNS-rebinding pages out.
//   - It came through a proxy (the proxy identity header, Forwarded, X-Forwarded-*, X-Real-Ip or
//     any Tailscale-* header, any spelling), or from a peer that is not loopback: 403
//     no-assertion. Only the supervisor's assertion makes a caller remote; a proxy's identity
//     header is a claim any local process can write.
//   - Its socket is not owned by this console's own uid (another user on the machine, or
//     tailscaled forwarding a tailnet peer to 127.0.0.1 under userspace networking): 403
//     no-assertion. The owner is read with internal/peercred, once per connection when the
//     console sets Verifier.ConnContext on its http.Server, and any doubt refuses (fail closed;
//     Linux only for now, so elsewhere no request is local).
//   - This console runs as tailscaled's user (the owner of Config.TailscaleSocket, root in most
//     containers): 403 no-assertion for everyone, since tailscaled with userspace networking
//     forwards tailnet peers to 127.0.0.1 from that very uid. Run consoles as another user, or set
//     Config.TrustTailscaledUser when tailscaled uses a kernel TUN.
//   - Otherwise it is scope local with login "". A local request whose Origin header is present
//     and is not the request's own origin (http://<Host>, compared as contract.SameOrigin does:
//     no path, the default port the same as none; Origin: null too) is 403 cross-origin, so that
//     no web page can act as the local user.
//
// Requests for /hooks and below are judged by C6 before all of the above (see PermissionHook).
//
// # Guarantees
//
//   - Fail closed: when the token file is missing, unreadable, too open (F1) or malformed, no
//     assertion is believed (401 fleet-bad-token) and the reason is logged; local callers are
//     still served.
//   - The token file is re-read within 1 s of a change (polling its stamp; a bearer that does not
//     match looks at the stamp once more, so a supervisor that saw a rotation first is not
//     refused). The previous token is believed for state.RotationGrace (10 s) after a rotation,
//     never longer, so `fleet token rotate` fails no request. Never longer holds across two
//     rotations between two polls as well: the grace also ends 10 s after the console last saw
//     the old token in the file (state.Token).
//   - The token file is read as state.ReadPrivateFile reads it: opened without following a
//     symlink, judged (a regular file of this user, no group or world bits) by the fstat of what
//     was opened, and read from that descriptor; the stamp kept is that file's own. Whoever can
//     write the folder cannot get a file of theirs read as the token by swapping it in between a
//     check and the read; at most they make it unusable (fail closed).
//   - Every token comparison — fleet bearer and run tokens — is constant-time in the token.
//   - Every refusal is the status, the reason word in the body as JSON {"error":"<reason>"} and in
//     the X-Fleet-Reason response header, and one JSON log line (log/slog) with the event name
//     (console.rejected, or hook.rejected for the permission hook), the reason, the rule, the
//     method, the path (never the query) and the peer. No token ever appears in a log line, a
//     body or a URL.
//   - After Middleware, the handler sees the request with every spelling of both assertion headers
//     removed; the caller lives only in the context (CallerFrom), where no client can write it.
package console
