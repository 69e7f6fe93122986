// Package tailnet proves fleet's identity and grant rules on a real tailnet, inside one `go test`
// process, with no internet: a control server (tailscale.com/tstest/integration/testcontrol), a
// DERP relay and STUN on 127.0.0.1, and tsnet nodes.
//
//	user nodes "alice", "bob"  ─┐
//	tagged node "robot"        ─┼─ HTTP :80 ─▶ node "sup" (Tailscale Serve) ─▶ 127.0.0.1:<port> supervisor ─▶ echo consoles "alpha", "build-1"
//	(tag:robot)                ─┘                         LocalAPI ◀── WhoIs, status ──┘
//
// The supervisor is the real one (supervisor.New + Serve), verifying callers through sup's
// LocalAPI. tsnet runs in this process, so the uid that owns Serve's backend connections (S5a)
// is os.Getuid(). Serve is HTTP on port 80 there.
//
// O6 has a tailnet of its own (TestDoctorServeCertificate_O6): real Serve on HTTPS 443, its
// certificates from tsnet's test hook — refusing at first, as tailscaled does when the tailnet
// has no HTTPS certificates, then issuing those of a test CA (internal/testca) — and fleet doctor
// judging the address by a TLS handshake through the node's own LocalAPI dial, beside a peer's
// handshake over the tailnet: both fail without a certificate (doctor FAILs with the fix) and
// succeed with one (OK).
//
// What a real tailnet cannot produce here is a netstack direct forward to 127.0.0.1 (tsnet never
// forwards unhandled ports to localhost), so S5b is proven with a LocalAPI wrapper whose WhoIs
// recognises one test connection's ip:port as a tailnet peer — the answer real tailscaled gives
// with --tun=userspace-networking.
//
// S5e is proven twice on the TCP door: with Tailscale SSH turned on in sup's prefs (testcontrol
// sends an SSH policy that lets nobody in, so the pref can be set), and with a raw TCP forward in
// sup's Serve config (TCPForward to fleet's port) through which alice writes bob's address in
// X-Forwarded-For. fleet must refuse (401 tcp-forwardable) every /c/ request meanwhile, Serve's
// own included, and serve again once SSH is off or the forward is gone.
//
// G1 is proven with a second echo console, "build-1", and a grant in the tailnet policy:
// testcontrol's global app capabilities (a grant from every source to every node) give
// phase-console.dev/cap/fleet = {"consoles": ["alpha"]}. Once sup's WhoIs of alice carries it, alice
// opens alpha through Serve, gets 403 not-granted for build-1 (and for an id nobody registered)
// while build-1 sees nothing, and the JSON index lists only alpha. With the grant withdrawn, alice
// opens both again within the WhoIs cache's life (5 s): the waits are bounded polls, not sleeps.
//
// The package holds only tests; it lives apart so that the rest of `go test ./...` stays fast and
// runs beside it. Its cold build (tsnet + testcontrol) takes minutes on two cores; once built, the
// tailnet is up in about a second.
package tailnet
