// Package tailnet is who is calling through Tailscale: for a door that Tailscale Serve publishes
// on this machine (the supervisor's loopback door, on TCP or on its unix socket), a Verifier
// tells a tailnet user's request from everything else, by asking tailscaled's LocalAPI, and
// admits only Hosts that name this machine. It is a proxy.CallerVerifier and a
// proxy.HostAdmitter; package proxy's Door runs it in the spec's order, and package supervisor
// runs the doors.
//
// It owns, by rule of docs/contract.md:
//   - S5a, S5b (peer.go): facts of the connection, judged once per connection and kept with it:
//     its peer is tailscaled's uid (SO_PEERCRED on the unix door), and on the TCP door it is not
//     a netstack forward of a tailnet peer (WhoIs of its remote address finds no peer, skipped
//     while tailscaled runs on a kernel TUN). On the unix door, and only when the peer is
//     tailscaled, the Host is Serve's X-Forwarded-Host (RestoreServeHost).
//   - S5c, S5d (whois.go): per request, exactly one X-Forwarded-For that is a Tailscale address
//     whose WhoIs names a user — not a tagged node, not Funnel, not this node itself — and a
//     Tailscale-User-Login, RFC 2047-decoded, that agrees with WhoIs. WhoIs answers are cached
//     for 5 s, tailscaled's status for 30 s.
//   - S5e (forwards.go): while tailscaled could carry a peer's own bytes to a door — Tailscale
//     SSH, a raw Serve TCP forward, an outbound proxy of tailscaled's — nothing on that door is
//     verified (401 tcp-forwardable).
//   - S10 (host.go): a loopback name, or this machine's Tailscale name or address.
//   - G1 (grants.go): which consoles a verified user may open — the app capability
//     phase-console.dev/cap/fleet in WhoIs's CapMap, read once per WhoIs answer and cached with
//     it, else the profile's access.mode (SetAccess) — judged after S5 and before the door
//     looks the console up: 403 not-granted, the same for a console that does not exist.
//   - G2 (fleetpeers.go): the tailnet's other machines, from tailscaled's status of peers
//     (cached 5 s): their MagicDNS names under this machine's own suffix, owners and tags; and
//     the one Origin that may read the index cross-origin — a peer of the caller's own login,
//     or a tagged peer listed in access.fleet_peers (AllowsPeerOrigin). An empty or unknown
//     suffix lists no peer and allows no Origin.
//   - U4 (owner.go): the machine's owner, the login of Self.UserID in tailscaled's status (none
//     for a tagged node), and VerifyFresh, S5 with a WhoIs asked for that request alone, for
//     the owner's POSTs.
//
// It must never forward anything or write a response: it returns a proxy.Caller or a
// proxy.Refusal, and the door writes it. The login it asserts is WhoIs's, never the caller's
// word, and never one that looks like device:… (a paired device's, SPEC R9). It fails closed:
// no error — a LocalAPI that does not answer, a uid that cannot be read, a connection it did not
// see accepted, a door it does not watch — ever becomes a verified caller or an admitted Host.
// A refusal's page names the fix and nothing of this machine's set-up (tailscaled's socket, its
// flags, a forward's target), which goes to the log line only.
package tailnet
