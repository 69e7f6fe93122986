// Package fastloop is the doors' own HTTP/1.1 connection loop in front of net/http
// (ConnServer): it serves the plain requests every page load is made of — a GET or HEAD of
// HTTP/1.1 with no body and no upgrade, whose head fits 8 KiB and is written as every browser and
// Tailscale Serve write one (fastHead) — on one goroutine per connection, over kept connections
// to the console, and hands everything else to net/http's server.
//
// # Why it exists
//
// Speed alone. net/http's server and Transport spend more CPU per request than everything fleet
// checks: per request the server starts a goroutine that watches the connection and moves
// deadlines twice, and the Transport behind httputil.ReverseProxy hands every exchange to two
// more goroutines. This loop reads a request, has it judged and exchanges it with the console on
// one goroutine, with reused buffers, header maps and console connections. It is what puts fleet
// ahead of Caddy on the same machine (about 1.7–2× its requests a second on small answers, and
// ahead on 64 KiB answers and new connections, with a lower p99) and near nginx: bench/RESULTS.md.
//
// # What it owns, and what it must not do
//
// It owns the framing only: accepting and serving connections (workers, Shutdown, Close),
// admitting a head (fastHead, fastAnswer) and reading it into exactly what net/http's parsers
// make of the same bytes, writing both heads from the admitted lines (rawhead.go), the exchange
// and its pool of console connections, and the hand-over of a connection to net/http.
//
// It must not judge a request, nor decide who the caller is, nor write a rule of its own. Every
// request is judged by package proxy's Door (Door.Judge: the same code, in the same order, as
// Door.ServeHTTP), and the door's own rules (Host admission, caller verification) stay the
// door's. The rules this loop applies while writing heads are package proxy's, asked line by
// line: what the hop asserts (Judged.WriteAssertion, S6), which caller lines are identity
// headers (proxy.IsIdentityName, S4), which answer lines are scrubbed (proxy.ScrubbedFromAnswer
// and proxy.ScrubConsoleAnswer, R9); consoles are dialled by the Hop's dialer (Hop.Dial: the
// owner check of the console's socket), and every failure is answered by the Hop
// (Hop.AnswerFailed: marked down, logged, refused as Forward answers it). Package proxy does not
// import this one; only the two doors (package supervisor's loopback door, package reach's
// direct-reach door, SPEC P2) and tests do.
//
// On the direct-reach door the loop also makes each connection's TLS handshake, hands one that
// negotiated h2 to net/http untouched, and asks the door's own judgement first (ConnServer.Admit:
// the device credential, Host and SNI) and the door's own rule on what a console never sees
// (ConnServer.ConsoleField: the device cookie); the loop applies them, it decides none of them.
//
// # Parity: it changes no rule
//
//   - fastHead admits only heads that net/http's server accepts, and the loop reads an admitted
//     head (every line of it checked already) into exactly the request http.ReadRequest makes of
//     it (FuzzFastHead); a console's answer is read the same way when fastAnswer admits its head
//     — a status line, one Content-Length, nothing that frames it otherwise — into exactly what
//     http.ReadResponse makes of it (FuzzFastAnswer), and by http.ReadResponse when not;
//   - both heads of such an exchange are written straight from the admitted lines (no header map
//     is read, changed and written again), and are the heads the map path writes for the same
//     bytes — ReverseProxy's steps, the Hop's assertion and Request.Write's for the console,
//     writeAnswerHead's (ReverseProxy's scrubbing) for the caller; FuzzFastHead and
//     FuzzFastAnswer check both on every head they admit;
//   - a request is forwarded only when the Door's verdict is to forward it (Judged.Target), to
//     exactly its Target, with exactly its assertion; the console's answer is answered as
//     ReverseProxy answers it (TestFastLoopAnswersAsReverseProxy_S6_S9 sends the same requests
//     both ways, to a console scripted with every kind of answer, and compares both ends);
//   - anything else — a refusal, a redirect, a door page, a body, an upgrade, a head it does not
//     admit — hands the connection, with the bytes read, to net/http's server, which serves that
//     request (with the verdict already made, Judged.Context: judged once, logged once) and
//     everything after it on the connection, as it does when no loop is in front of it;
//   - every door test of package proxy runs through this loop (proxy/loopback_door_test.go), and
//     so do the loopback door's own (package supervisor).
package fastloop
