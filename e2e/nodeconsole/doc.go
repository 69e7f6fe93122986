// Package nodeconsole keeps the Node console library (node/, @phase-console/fleet-console) and the
// Go package console from drifting apart: it runs the Go reference console (console/refconsole)
// and the Node one (node/examples/console.mjs) side by side on one state folder, sends both the
// same raw requests over net.Dial, and requires the same decision from each — status, reason word
// and, where a caller was admitted, the same {"scope","login"} — then runs the conformance checker
// (fleet check-console) against the Node console.
//
// TestNodeConsoleThroughDirectReach_R9_C4 shows the Node console as a person sees it: it
// registers itself with the real supervisor, whose direct-reach door a headless chromium pairs
// with, and the page at /c/noderef/ shows scope remote and the device's login, device:….
//
// The tests need node (Node.js 20 or later) on $PATH, and the browser test /usr/bin/chromium.
// Without them they skip, and say so; under CI=true they fail instead: .ci/run installs both.
//
// The package holds only tests.
package nodeconsole
