package metrics

import (
	"strconv"

	"github.com/phase-console/fleet/audit"
)

// ReasonWords are the reason words a refusal is counted under (docs/contract.md's table and the
// pairing pages'); any other reason is counted as ReasonOther.
var ReasonWords = []string{
	// the loopback and direct-reach doors (docs/contract.md)
	"assertion-sent", "bad-path", "bad-upgrade", "bad-body", "bad-registration",
	"unverified", "tcp-forwardable", "identity-mismatch", "bearer",
	"tagged-node", "funnel", "self", "not-granted", "hooks", "cross-origin", "reach-settings", "local-only",
	"unknown-console", "not-found", "method", "body-timeout", "host", "rate-limited",
	"header-too-large", "console-down", "console-other-user", "no-token", "internal", "registry",
	// the pairing pages (package pairing)
	"pairing-code", "pairing-password", "pairing-form", "body-too-large", "pairing-unavailable",
	// the machine's owner's POSTs on the tailnet index (SPEC U4)
	"not-owner", "owner-form", "unknown-device",
}

// Label values for what falls outside the bounds.
const (
	ReasonOther = "other" // a reason that is not one of ReasonWords
	CodeOther   = "other" // a status outside 100–599
	DoorOther   = "other" // a door that is neither audit.DoorLoopback nor audit.DoorReach
	// NoConsole is the console label of a forwarded request whose id is not registered (one
	// deregistered while its request was answered).
	NoConsole = ""
)

// doors are the door label values, indexed as doorIndex returns.
var doors = [...]string{audit.DoorLoopback, audit.DoorReach, DoorOther}

const nDoors = len(doors)

func doorIndex(door string) int {
	switch door {
	case audit.DoorLoopback:
		return 0
	case audit.DoorReach:
		return 1
	}
	return 2
}

// reasonIndex maps a reason word to its place in ReasonWords; ReasonOther is len(ReasonWords).
var reasonIndex = func() map[string]int {
	m := make(map[string]int, len(ReasonWords))
	for i, w := range ReasonWords {
		m[w] = i
	}
	return m
}()

func reasonOf(reason string) int {
	if i, ok := reasonIndex[reason]; ok {
		return i
	}
	return len(ReasonWords)
}

func reasonLabel(i int) string {
	if i < len(ReasonWords) {
		return ReasonWords[i]
	}
	return ReasonOther
}

// codeLabels holds each status's label, made once: strconv.Itoa allocates for numbers over 99.
var codeLabels = func() (l [600]string) {
	for i := range l {
		l[i] = CodeOther
	}
	for c := 100; c < 600; c++ {
		l[c] = strconv.Itoa(c)
	}
	return l
}()

// codeOf is status's key: itself within 100–599, else 0 (CodeOther).
func codeOf(status int) uint16 {
	if status < 100 || status > 599 {
		return 0
	}
	return uint16(status)
}
