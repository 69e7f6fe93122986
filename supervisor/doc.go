// Package supervisor is the process the spec calls the supervisor: one per machine, it keeps the
// console registry and its API, the fleet token and the hop that every door shares, and runs
// both doors — the loopback door (127.0.0.1 and, optionally, a private unix socket), which
// Tailscale Serve publishes, and the direct-reach door (package reach), when the machine profile
// opens it.
//
// The judgement of a request — the order of the checks, S3, S7, S9, S12, CONNECT/TRACE, the
// console lookup, the token and the hop — is proxy.Door's, the same for every door. Who is
// calling through Tailscale (S5) and which Hosts name this machine (S10) are package tailnet's.
// This package plugs them into the loopback door (door.go), with what is its own: the registry
// (S8) and its own pages (the API and the index).
//
// It owns, by rule of docs/contract.md:
//   - S1: the listener is 127.0.0.1 (and, optionally, a private unix socket); nothing wider.
//   - S8: the registry API /fleet/v1/consoles (bearer, local only) and consoles.json.
//   - R1: the direct-reach door opens, moves and closes with the machine profile (reach.go),
//     never touching the loopback door.
//   - G1: the profile's access: section is in force from the first request and follows the
//     file as reach: does (access.go; a refused section is access.ModeGrants), and the index
//     lists only the consoles its caller may open (index.go).
//   - G4: GET /fleet/v1/metrics, local only as the API, with metrics.token's bearer and never
//     the fleet token; recorders (audit.go) is the one list of what keeps the doors' answered requests
//     (package audit), the metrics among them (metrics.go).
//   - G2: the index shows a tailnet caller a section for each of their other machines (and each
//     tagged peer listed in access.fleet_peers), which its one same-origin script
//     (assets/peers.js, /fleet-peers.js) fills from that machine's own answer; the page may run
//     only that script and ask only those origins. To a page of such a machine (the Door's
//     PeerOrigins, package tailnet's judgement) the index answers console ids, names, health
//     and links only (servePeerIndex). This door never asks another machine anything itself.
//   - U4 (owner.go): the machine's owner — the login owning this node in tailscaled's status —
//     sees on the index the direct-reach door's Devices, with Revoke, and Pair a phone; its two
//     POSTs, /fleet/owner/revoke and /fleet/owner/pair, are the only paths under /fleet/ that
//     answer through Serve, each re-verified (a fresh WhoIs, a fresh owner), same-origin and
//     carrying the page's token, else 403 not-owner; each is an access-log line.
//   - O3: a socket it did not open itself (handed by systemd, or by the process it takes over
//     from) is served only when it is what it would have opened (handed.go: 127.0.0.1, or a
//     0600 unix socket in a private place); once another process serves on its sockets, Drain
//     stops accepting, ends event streams and WebSockets (1001) cleanly and lets the rest
//     finish, at most 30 s (handoff.go).
//
// It must never serve a door whose connections the tailnet.Verifier did not see accepted (every
// listener's server takes its ConnContext, and each door is watched before its first accept), so
// that nothing reaches a console unverified: when tailscaled cannot be asked, every /c/… request
// is 401 unverified with a page that says why.
package supervisor
