// Package access is who may open which console (SPEC G1), as far as it is fleet's own to decide:
// a Grant — the consoles one caller may open, written as console ids, prefixes ("build-*") and
// "*" — and the machine profile's access: section, which says what a verified caller the
// tailnet policy names no consoles for may open (Mode).
//
// Where a Grant comes from is its users' business: package tailnet reads a tailnet user's from
// the app capability CapabilityName in tailscaled's WhoIs answer, package pairing keeps a paired
// device's with the device. Package proxy's Door asks, through its caller verification, after
// the caller is verified and before the console is looked up, so that the answer to a console
// the caller may not open — 403 not-granted — is the same whether that console exists or not.
//
// It must never widen what it is given: a pattern it cannot read grants nothing, a nil Grant
// allows nothing, and a refused access: section is ModeGrants.
package access
