// Package reach owns the direct-reach door: the second way into fleet, for a phone that is not on
// the tailnet, over HTTPS to one literal LAN address of this machine (SPEC R1–R10).
//
// What opens it: only the machine profile, <stateHome>/machine-profile.yaml, with reach.mode set
// to direct and reach.listen set to one literal IP address and port (LoadProfile). What can never
// open it, move it or widen it: a command-line flag, an environment variable, a console, a paired
// device, a request of any kind; a wildcard or a hostname in the profile; a public address that
// reach.acknowledged does not name; a profile that does not parse, has a key this package does
// not know, or that group or world could have written. Each of those leaves the door closed with
// an error naming the key (or the file) and the rule, and never touches the loopback door.
//
// Callers on the door are judged before any console sees them, and a stranger's failures are
// counted per source — the TCP peer, never a header — and overall, so that guessing is slow
// (Limiter). What is not a failure matters as much, so that no one can lock a phone out:
//
//   - a request with a valid device credential is never held back by either count, and none of
//     its refusals is a failure (R6): a paired device guesses nothing, and neither strangers
//     sharing its address (a household's IPv6 /64) nor a page it loads can lock it out. That
//     holds for its pairing POST too (nothing in R7 or R8 keeps a paired browser from pairing
//     again, as another device): its wrong code is no failure, and a code is still one in 20^8,
//     lives five minutes and dies after five wrong passwords;
//   - a request that a browser marks as another site's (Sec-Fetch-Site: cross-site), other than a
//     top-level GET navigation, is 403 cross-origin and never counted, and neither is any S12
//     refusal, the pairing page's own included (R6b): any page a phone visits can make its
//     browser send those, and they guess nothing;
//   - a credential the door refuses (unknown or revoked) is cleared in the same answer and is a
//     failure only on a request that needs one — not on /ca.crt, the pairing page, its assets
//     (fleet's stylesheet among them) or its POST — so a revoked phone's page load counts at most once and it can pair again at
//     once (R10).
//
// The door answers a request itself — a refusal, the redirect to /pair, the pairing pages, the
// root, a device's index — unless it forwards it to a console. Such an answer to an HTTP/1
// request with a body closes the connection without reading the rest of the body (S9): net/http
// would otherwise wait for it, under no deadline, to keep the connection.
//
// Such an answer is also given up when its caller does not take it (S9, R6): net/http's HTTP/2
// server keeps a stream's handler goroutine for as long as its answer cannot be sent, so a
// stranger who never opened its flow-control window held about 16 KiB for every stream it
// opened, for as long as it kept the connection. The values, and why:
//
//   - AnswerTimeout, 10 s: each of the door's own answers has a write deadline, from the
//     request's start — or, for the pairing form, from the answer's first byte, so that neither a
//     form that keeps moving (S9) nor the door's own scrypt work is charged to the caller — past
//     which its HTTP/2 stream is reset or its HTTP/1.1 connection closed. The same 10 s a stranger has to send its head (ReadHeaderTimeout); the
//     largest such answer is a few KiB.
//   - No deadline on a paired device's request forwarded to a console: server-sent events and
//     WebSockets last as long as they last (its deadline is lifted before the hop sees it).
//   - HTTP2MaxStreams, 100 streams at once per HTTP/2 connection (net/http's default is 250;
//     100 is the least RFC 9113 §6.5.2 recommends): with AnswerTimeout, a caller that takes no
//     answer holds at most about 1.6 MiB per connection, for at most 10 s a stream.
//   - HTTP2WriteByteTimeout, 30 s: an HTTP/2 connection that takes no byte at all (a client that
//     stopped reading its socket, so that not even a stream's reset gets out) is closed.
//   - HTTP2PingAfter, 30 s, and HTTP2PingTimeout, 15 s: an HTTP/2 connection from which nothing
//     came for 30 s is pinged, and closed if the ping is not answered within 15 s.
//
// Connections are bounded too (R6c), so that a stranger cannot take either door down by holding
// them open. A connection is a stranger's until a request on it shows a valid device credential;
// from then on it is a device's. The values, and why:
//
//   - SourceConnLimit, 64 strangers' connections per source (the Limiter's sources: an IPv4
//     address, an IPv6 /64), and StrangerConnLimit, 1,024 in all: a new connection past either
//     evicts the oldest of that source, or of all, in the listener's Accept — before any TLS
//     work, so a connection that never starts TLS costs the door one descriptor and no more. A
//     browser opens six or so connections to a host; 64 leaves room for a household behind one
//     address, and one source can evict only its own: to evict another source's connections a
//     stranger needs 16 sources at least (fewer where half the limit on open files is below
//     1,024).
//   - StrangerIdleTimeout, 10 s: a stranger's connection with no request in flight — after its
//     accept or after its last answer — is closed; the same 10 s it has for its TLS handshake and
//     its request head (proxy.ReadHeaderTimeout). A device's is closed after net/http's
//     IdleTimeout, as the loopback door's are.
//   - A device's connection is never evicted and counts against neither bound: strangers cannot
//     cut a paired phone's streams. When its device is revoked it is a stranger's again.
//   - A connection that resumes, on TLS 1.3, a session begun on a connection where a device
//     showed its credential is that device's from its handshake on (R6d): each ticket carries an
//     opaque handle, mapped to the device when its credential shows (tickets.go). A handle admits
//     nothing; a revocation forgets the device's handles at once.
//   - Among strangers' connections, eviction takes first those whose ClientHello has not fully
//     arrived (read, or waiting in the kernel's buffer: hello.go), then those stalled in their
//     handshake, then the oldest (R6d): a flood of bare or stalled connections from a phone's own
//     address evicts its own first.
//   - DeviceConnLimit, 256 connections per device (R6e): a device's new connection past it closes
//     that device's oldest idle one, or itself when all are busy. No other bound closes a
//     device's connection.
//   - In all, the door holds at most half the soft limit on open files (read when it opens;
//     fleet serve raises it to the hard limit at start): past it a new connection evicts the
//     oldest stranger's, or is closed when only devices' connections are held. The other half is
//     the loopback door's, the registry API's and the consoles' connections', whatever the door
//     holds.
//
// The failure counts (R6) and the connections live in memory: the counts are kept when the door
// moves (the supervisor keeps one Limiter), and both are lost when fleet serve restarts.
//
// Revoking a device (Door.Revoke, R8) cancels its forwarded requests and sets their write
// deadline in the past, which resets an HTTP/2 stream at once even when its flow-control window
// is closed: a cancelled context alone does not end net/http's wait to write.
//
// Files, one job each:
//
//   - profile.go: the machine profile, parsed strictly and validated (R1–R3, F1): LoadProfile,
//     ParseProfile, Profile, ProfileError, IsPublic.
//   - limiter.go: the failure limiter (R6): Limiter, NewLimiter, PeerAddr.
//   - site.go: what a browser says of the site a request comes from (R6b).
//   - door.go: the door (Open, Door): its listener on exactly the profile's address, over TLS
//     from package ca (R2, R4), served by the fast loop (package proxy/fastloop) for a paired
//     device's plain requests and by net/http for everything else (P2), and the order in which it
//     judges a request.
//   - conns.go: the bounds on its connections (R6c, R6e): per source, in all, idle strangers',
//     per device, and half the limit on open files; a connection marked a device's by its
//     credential or its resumed session (R6d).
//   - tickets.go: the handle in each session ticket, and a resumed session's device (R6d).
//   - hello.go: whether a connection's ClientHello has fully arrived (R6d).
//   - answer.go: the bounds in time on what the door writes (S9, R6): AnswerTimeout on its own
//     answers, lifted for a forwarded request, and its HTTP/2 settings.
//   - host.go: Host and SNI admission (R5).
//   - routes.go: the door's own routes on httprouter — /ca.crt, fleet's stylesheet (/fleet.css,
//     package look), the pairing pages, the redirect of an unpaired caller (R7), and 403
//     reach-settings (R1).
//   - index.go: a paired device's own pages (U2, U3): its index (pages/index.html, in fleet's
//     one look), and Forget this device, which revokes that device and no other.
//   - devices.go: the paired device (R9): its cookie, its assertion through the shared
//     proxy.Door, the cookie kept from consoles, and the end of its live connections on
//     revocation.
//
// The pairing pages themselves (R7, R8) are given to the door as an http.Handler.
package reach
