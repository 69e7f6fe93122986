// Package supervisor is fleet's loopback door: one process per machine that listens on 127.0.0.1
// only, is published by Tailscale Serve, keeps the console registry, verifies every caller with
// tailscaled's LocalAPI and hands verified requests to the hop (package proxy).
//
// The judgement of a request — the order of the checks, S3, S7, S9, S12, CONNECT/TRACE, the
// console lookup, the token and the hop — is proxy.Door's, the same for every door; this package
// plugs into it only what is the loopback door's own (door.go): its Host admission (S10), who is
// calling (S5), the registry (S8) and its own pages (the API and the index).
//
// It owns, by rule of docs/contract.md:
//   - S1: the listener is 127.0.0.1 (and, optionally, a private unix socket); nothing wider.
//   - S5: who is calling. A request to /c/… is verified only when the TCP peer is owned by
//     tailscaled's uid, tailscaled does not recognise the connection itself as a tailnet peer (no
//     netstack forward), X-Forwarded-For holds exactly one Tailscale address whose WhoIs names a
//     user (not a tagged node, not Funnel), and a Tailscale-User-Login that Serve set agrees with
//     WhoIs. The login asserted is WhoIs's, never the caller's word. And (S5e) while tailscaled
//     could carry a peer's own bytes to the door — Tailscale SSH on, or a raw Serve TCP forward
//     to it — nothing on that door is verified (401 tcp-forwardable; forwards.go).
//   - S8: the registry API /fleet/v1/consoles (bearer, local only) and consoles.json.
//   - S10: Host admission, before anything else.
//   - S11: one fleet.rejected JSON log line per refusal.
//
// It must never forward a request it has not verified, never assert a login that looks like
// device:…, and never let a LocalAPI error turn into a forward: when tailscaled cannot be asked,
// every /c/… request is 401 unverified with a page that says why.
package supervisor
