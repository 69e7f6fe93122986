// Package reach owns the direct-reach door: the second way into fleet, for a phone that is not on
// the tailnet, over HTTPS to one literal LAN address of this machine (SPEC R1–R9).
//
// What opens it: only the machine profile, <stateHome>/machine-profile.yaml, with reach.mode set
// to direct and reach.listen set to one literal IP address and port (LoadProfile). What can never
// open it, move it or widen it: a command-line flag, an environment variable, a console, a paired
// device, a request of any kind; a wildcard or a hostname in the profile; a public address that
// reach.acknowledged does not name; a profile that does not parse, has a key this package does
// not know, or that group or world could have written. Each of those leaves the door closed with
// an error naming the key (or the file) and the rule, and never touches the loopback door.
//
// Callers on the door are judged before any console sees them, and failures are counted per
// source — the TCP peer, never a header — and overall, so that guessing is slow (Limiter).
//
// A paired device may post the pairing form too: R7 says what an unpaired caller gets, and
// nothing in R7 or R8 keeps a paired browser from pairing again (as another device, under a new
// cookie), so it is not refused. But its pairing POST is a guess like a stranger's: it holds the
// place of one failure of its source while it is judged (Limiter.AdmitGuess), so a device's
// cookie buys no more guesses at once than a stranger gets. Like every request with a valid
// device credential (R6), it is held back by its own source's count only, never the overall one.
//
// The door answers a request itself — a refusal, the redirect to /pair, the pairing pages, the
// root, a device's index — unless it forwards it to a console. Such an answer to an HTTP/1
// request with a body closes the connection without reading the rest of the body (S9): net/http
// would otherwise wait for it, under no deadline, to keep the connection.
//
// Files, one job each:
//
//   - profile.go: the machine profile, parsed strictly and validated (R1–R3, F1): LoadProfile,
//     ParseProfile, Profile, ProfileError, IsPublic.
//   - limiter.go: the failure limiter (R6): Limiter, NewLimiter, PeerAddr.
//   - door.go: the door (Open, Door): its listener on exactly the profile's address, over TLS
//     from package ca (R2, R4), and the order in which it judges a request.
//   - host.go: Host and SNI admission (R5).
//   - routes.go: the door's own routes on httprouter — /ca.crt, the pairing pages, the redirect
//     of an unpaired caller (R7), and a paired device's index and 403 reach-settings (R1).
//   - devices.go: the paired device (R9): its cookie, its assertion through the shared
//     proxy.Door, the cookie kept from consoles, and the end of its live connections on
//     revocation.
//
// The pairing pages themselves (R7, R8) are given to the door as an http.Handler.
package reach
