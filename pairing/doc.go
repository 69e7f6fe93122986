// Package pairing owns the secrets of the direct-reach door's pairing (SPEC R8, R9): the pairing
// password, the one-time pairing codes and the register of paired devices. All of its state is in
// files in one folder given by the caller, <stateHome>/fleet/reach/:
//
//	password      the scrypt hash of the pairing password, one line
//	codes.json    the outstanding pairing codes, by their SHA-256, with what each pairs for
//	devices.json  the device register: names, ids, SHA-256 of each credential, last seen, and
//	              the consoles each may open (SPEC G1; package access's patterns)
//	lock          an flock(2) taken around every read-modify-write of the files above
//
// The folder is 0700 and every file 0600 (SPEC F1): one that is too open or someone else's is
// refused with an error that names it and the chmod that fixes it, never re-permissioned. Every
// write is atomic (SPEC F2); a file that does not parse is an error that names it and is left as
// it is, never replaced. The files are shared between processes — `fleet serve` and the `fleet
// reach pair|revoke|devices` commands — so every change is made under the lock: a code pairs
// exactly once even when raced from two processes, and a [Register] in `fleet serve` sees a
// revocation made by another process at its next [Register.Authenticate] (one fstat of the file it
// holds open) or [Register.Refresh].
//
// It also gives what a person is handed to pair a device, wherever it is shown (steps.go: the
// door's root and pairing links and their QR codes, for `fleet reach pair` and the owner's page),
// and serves the pairing page (NewHandler: GET and POST /pair and the page's own assets),
// which the direct-reach door mounts for callers that are not paired yet (SPEC R7); the door
// judges everything else — Host, the limiter, TLS, /ca.crt — before a request gets there.
//
// What it must never do: know anything of the tailnet, the supervisor or the proxy (the door
// builds on it); log, show or return a secret (code, password, credential) in an error, a page or
// a log line; keep a pairing code or a device credential in clear at rest — only their SHA-256
// is stored, and only the scrypt hash of the password.
package pairing

// CookieName is the name of a paired device's credential cookie on the direct-reach door. The
// __Host- prefix makes a browser keep it only when it was set Secure, with Path=/ and no Domain,
// so nothing but the door's own origin can set or read it.
const CookieName = "__Host-fleet-device"

// ClearCookie is the Set-Cookie value that deletes the credential cookie from a browser (SPEC
// R10): the door sends it in the answer that refuses a credential (unknown or revoked), so that
// the browser stops sending it. A pairing that succeeds in that same answer replaces it with the
// new credential (NewHandler).
const ClearCookie = CookieName + "=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict"
