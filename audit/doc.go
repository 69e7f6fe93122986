// Package audit carries what a door did with a request — forwarded it to a console, or refused it —
// to the consumers that keep that fact: the access log (SPEC G3), the metrics (G4) and the index's
// recent activity.
//
// It owns the Entry a door fills in, the Recorder seam the doors call, and the access log's line
// format (Line), which the writer and `fleet log` share. It must not decide anything about a
// request, hold a secret (an Entry has no field for a token, cookie, code, password, query or
// body), or make a door wait: a Recorder's Record returns at once.
package audit
