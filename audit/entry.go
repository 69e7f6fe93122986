package audit

import (
	"net/netip"
	"time"
)

// Door names, as G3 spells them. The TCP and the unix-socket loopback doors are both DoorLoopback.
const (
	DoorLoopback = "loopback"
	DoorReach    = "reach"
)

// Entry is one request a door answered: forwarded to a console (Reason empty) or refused (Reason is
// the spec's reason word). A door fills one in on its own goroutine once the answer is complete (an
// upgraded stream: when it closes) and hands it to a Recorder; it holds no secret by construction.
type Entry struct {
	Time     time.Time     // when the request arrived
	Door     string        // DoorLoopback or DoorReach
	Login    string        // the identified caller (S5 login or R9 device:<slug>#<id6>); empty if not identified
	Console  string        // the console id the request named, if the door got that far
	Method   string        // the request's method
	Path     string        // the path as forwarded (or as it would have been), without /c/<id> and without the query
	Status   int           // the status the caller was answered (the console's, or the refusal's)
	Bytes    int64         // answer body bytes sent to the caller
	Duration time.Duration // from arrival to the answer's end (an upgraded stream: to its close)
	Peer     netip.Addr    // the verified Tailscale address, or the device's TCP peer
	Reason   string        // the refusal's reason word; empty when forwarded (or paired)
	// Pairing is a pairing attempt's result (SPEC O7), one of PairingResults; empty for every
	// request that is not a pairing POST on the direct-reach door.
	Pairing string

	// Identified says the caller was identified (S5 verified or R9 paired) before the door decided.
	// Only forwarded requests and identified refusals belong in the access log (G3); metrics count
	// every refusal (G4).
	Identified bool
}

// Pairing results (SPEC O7): what one pairing attempt on the direct-reach door came to. Every
// one but PairingPaired and PairingLimited is also the reason word of the refusal.
const (
	PairingPaired      = "paired"              // a device was paired
	PairingCode        = "pairing-code"        // no such code, or expired, used or burned
	PairingPassword    = "pairing-password"    // a live code, a wrong password
	PairingForm        = "pairing-form"        // a form refused: not one, too large, from another origin
	PairingLimited     = "limited"             // its source was held back (429), before anything was judged
	PairingUnavailable = "pairing-unavailable" // the machine could not judge it or keep the device
)

// PairingResults are the values of Entry.Pairing, as fleet_pairing_attempts_total's result label
// takes them.
var PairingResults = []string{PairingPaired, PairingCode, PairingPassword, PairingForm, PairingLimited, PairingUnavailable}

// Forwarded reports whether the door forwarded the request to a console.
func (e *Entry) Forwarded() bool { return e.Reason == "" && e.Pairing == "" }

// Audited reports whether the entry belongs in the access log (G3): a forwarded request, a
// refusal made after the caller was identified, or a pairing attempt (O7), whatever it came to.
func (e *Entry) Audited() bool { return e.Forwarded() || e.Identified || e.Pairing != "" }

// A Recorder keeps entries. Record is called once per answered request, on the door's goroutine:
// it must return at once, never block, and not keep e after it returns (copy what it needs).
type Recorder interface {
	Record(e *Entry)
}

// Recorders hands each entry to every recorder in order. A nil or empty Recorders records nothing.
type Recorders []Recorder

// Record implements Recorder.
func (rs Recorders) Record(e *Entry) {
	for _, r := range rs {
		r.Record(e)
	}
}

// Discard is a Recorder that keeps nothing.
var Discard Recorder = discard{}

type discard struct{}

func (discard) Record(*Entry) {}
