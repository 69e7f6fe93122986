package reach

// Fault test: a device revoked while it and another device drive the door hard.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/echoconsole"
)

// loadWait bounds every wait of the load test: a guard against a hang, never an assertion. It is
// generous because -race on a busy two-core machine is slow.
const loadWait = 90 * time.Second

// TestRevocationUnderLoad_R8_F2: devices A and B drive the door at once — five goroutines for A
// and four for B, each device on kept-alive TLS connections and on a new one per request, plus
// one SSE stream and one WebSocket each — and A is revoked through the register mid-load, as
// `fleet reach revoke` does (Register.Revoke). Every request names itself in its path, and the
// console records, in the order it received them, each request's path and asserted login.
//
// What is guaranteed, exactly. "After the revocation" is defined on the client's side: a request
// is begun after it when the test read "Revoke has returned" before writing its first byte.
//   - No A request begun after the revocation reaches the console (none of their paths is in
//     the console's record), and each is refused: 303 to /pair (an unknown credential, R7), or
//     429 once its source is held back (R6). None is 200.
//   - The console receives at most one A request per A goroutine after the moment Revoke
//     returned (the console's own sequence number, marked then), and each is one that was in
//     flight at that instant (begun before Revoke returned, finished after it was called):
//     admitted while A was paired, the revocation cancels it but cannot call back bytes the hop
//     may already have written.
//   - Every A request that finished before Revoke was called was 200, with A's login.
//   - A's SSE stream and WebSocket end when Revoke returns (R8).
//   - Every B request, before, during and after, is 200 and reached the console as B's login;
//     B's SSE stream still delivers events and its WebSocket still echoes afterwards.
//   - R6: A's refused requests are failures. A's goroutines each use their own source address
//     (127.0.0.10–14), B uses 127.0.0.1. A valid device is held back by neither count (checked
//     at the end: B's cookie from one of A's sources is 200). Five sources of ten
//     failures fill the overall count (fifty): the test goes on until every A goroutine has been
//     answered 429, then checks that B is still never held back, and that a stranger now is
//     (so the overall count really was full while B went on).
func TestRevocationUnderLoad_R8_F2(t *testing.T) {
	const roundsPerStep = 3
	con := heldConsole(t)
	d := startTestDoor(t, func(c *Config) { c.Consoles = consoleMap{"alpha": con.Addr()} })
	devA, cookieA := d.pair("phone")
	devB, cookieB := d.pair("tablet")
	loginA, loginB := devA.Login(), devB.Login()

	// The streams, opened before the load.
	openSSE := func(who, cookie string) (net.Conn, *bufio.Reader) {
		conn, _, resp := d.Open(d.req("GET", "/c/alpha/sse/"+who, cookie))
		conn.SetDeadline(time.Now().Add(loadWait))
		if resp.StatusCode != 200 {
			t.Fatalf("%s's SSE: %d", who, resp.StatusCode)
		}
		body := bufio.NewReader(resp.Body)
		if line, err := body.ReadString('\n'); err != nil || line != "data: hello\n" {
			t.Fatalf("%s's SSE: %q %v", who, line, err)
		}
		return conn, body
	}
	openWS := func(who, cookie string) (net.Conn, *bufio.Reader) {
		conn, br, resp := d.Open(d.req("GET", "/c/alpha/ws/"+who, cookie, "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
		conn.SetDeadline(time.Now().Add(loadWait))
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s's WebSocket: %d", who, resp.StatusCode)
		}
		return conn, br
	}
	echo := func(who string, conn net.Conn, br *bufio.Reader, msg string) {
		t.Helper()
		io.WriteString(conn, msg+"\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo:"+msg+"\n" {
			t.Fatalf("%s's WebSocket: %q %v, want the echo of %q", who, line, err, msg)
		}
	}
	tick := func(who string, body *bufio.Reader) {
		t.Helper()
		if line, err := skipBlank(body); err != nil || line != "data: tick\n" {
			t.Fatalf("%s's SSE: %q %v, want a tick", who, line, err)
		}
	}
	sseA, sseBodyA := openSSE("A", cookieA)
	defer sseA.Close()
	sseB, sseBodyB := openSSE("B", cookieB)
	defer sseB.Close()
	wsA, wsBrA := openWS("A", cookieA)
	defer wsA.Close()
	wsB, wsBrB := openWS("B", cookieB)
	defer wsB.Close()
	echo("A", wsA, wsBrA, "before")
	echo("B", wsB, wsBrB, "before")
	con.Tick()
	tick("A", sseBodyA)
	tick("B", sseBodyB)

	// The load.
	type worker struct {
		who, cookie, src string
		keepAlive        bool
	}
	var workers []worker
	for i := range 5 {
		workers = append(workers, worker{"A", cookieA, fmt.Sprintf("127.0.0.%d", 10+i), i < 3})
	}
	for i := range 4 {
		workers = append(workers, worker{"B", cookieB, "127.0.0.1", i < 2})
	}
	var (
		revokeBegun, revokeDone atomic.Bool
		gen                     atomic.Int64
		reached                 = make([]atomic.Int64, len(workers)) // the gen at which each worker's last finished request began
		limited                 = make([]atomic.Bool, len(workers))  // an A worker was answered 429 after the revocation
		stop                    = make(chan struct{})
		wg                      sync.WaitGroup
		fails                   loadFailures
		mu                      sync.Mutex
		afterA                  = map[string]bool{} // paths of A requests begun after Revoke returned
		inFlightA               = map[string]bool{} // paths of A requests begun before Revoke returned and finished after it began
		tally                   = map[string]int{}  // outcomes, for the log
		okB                     atomic.Int64        // B requests answered 200
	)
	count := func(k string) { mu.Lock(); tally[k]++; mu.Unlock() }
	var stopOnce sync.Once
	stopLoad := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopLoad) // a failed wait ends the load too, before the door closes

	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn *tls.Conn
			var br *bufio.Reader
			// metRevocation: conn carried a request in flight while the revocation ran. The
			// revocation may close it (R8) even once that request's answer is out, before the
			// door has forgotten the request; the next request on it then finds it closed.
			metRevocation := false
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				began := gen.Load()
				after := revokeDone.Load()
				path := fmt.Sprintf("/c/alpha/r/%s/%d/%d", w.who, i, n)
				if w.who == "A" && after {
					mu.Lock()
					afterA[path] = true
					mu.Unlock()
				}
				var err error
				if conn == nil {
					if conn, err = dialTLSFrom(d, w.src); err != nil {
						fails.add("%s worker %d: dial: %v", w.who, i, err)
						reached[i].Store(began)
						continue
					}
					br = bufio.NewReader(conn)
				}
				resp, body, err := roundTrip(conn, br, d.req("GET", path, w.cookie))
				finishedBefore := !revokeBegun.Load()
				switch {
				case w.who == "B":
					if err != nil || resp.StatusCode != 200 || body != "echo "+strings.TrimPrefix(path, "/c/alpha") {
						fails.add("B worker %d (source %s, keep-alive %v): %s", i, w.src, w.keepAlive, outcome(resp, body, err))
					} else {
						okB.Add(1)
					}
					count("B " + outcome(resp, "", err))
				case after:
					switch {
					case err != nil && metRevocation:
						// Closed with the revocation: nothing was answered or forwarded on it.
					case err == nil && resp.StatusCode == http.StatusSeeOther && resp.Header.Get("Location") == PairPath:
					case err == nil && resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
						limited[i].Store(true)
					default:
						fails.add("A worker %d: a request begun after the revocation: %s, want 303 to %s or 429", i, outcome(resp, body, err), PairPath)
					}
					count("A after " + outcome(resp, "", err))
				case finishedBefore:
					if err != nil || resp.StatusCode != 200 {
						fails.add("A worker %d, before the revocation: %s", i, outcome(resp, body, err))
					}
					count("A before " + outcome(resp, "", err))
				default:
					count("A in flight " + outcome(resp, "", err)) // anything: it met the revocation
					metRevocation = true
					mu.Lock()
					inFlightA[path] = true
					mu.Unlock()
				}
				if err != nil || resp.Close || !w.keepAlive {
					conn.Close()
					conn, metRevocation = nil, false
				}
				reached[i].Store(began)
			}
		}()
	}
	round := func(what string) {
		t.Helper()
		g := gen.Add(1)
		waitLoadFor(t, what, func() bool {
			for i := range reached {
				if reached[i].Load() < g {
					return false
				}
			}
			return true
		})
	}
	rounds := func(what string) {
		t.Helper()
		for range roundsPerStep {
			round(what)
		}
	}

	rounds("load before the revocation")
	revokeBegun.Store(true)
	if err := d.register.Revoke(devA.ID6); err != nil {
		t.Fatal(err)
	}
	revokeDone.Store(true)
	mark := con.Count()

	// A's streams ended with the revocation (R8).
	fresh := func(conns ...net.Conn) { // each wait below gets its own bound
		for _, c := range conns {
			c.SetDeadline(time.Now().Add(loadWait))
		}
	}
	fresh(wsA)
	if _, err := wsBrA.ReadString('\n'); !ended(err) {
		t.Errorf("A's WebSocket after the revocation: %v, want closed", err)
	}
	fresh(sseA)
	if _, err := skipBlank(sseBodyA); !ended(err) {
		t.Errorf("A's SSE after the revocation: %v, want ended", err)
	}

	rounds("load after the revocation")
	waitLoadFor(t, "every A goroutine to be held back (429)", func() bool {
		for i, w := range workers {
			if w.who == "A" && !limited[i].Load() {
				return false
			}
		}
		return true
	})
	rounds("B's load with the overall count full")

	// B's streams are still open and live.
	fresh(wsB, sseB)
	echo("B", wsB, wsBrB, "after")
	con.Tick()
	tick("B", sseBodyB)
	stopLoad()

	if n, first := fails.get(); n > 0 {
		t.Errorf("%d request(s) went wrong; the first: %s", n, first)
	}
	t.Logf("outcomes: %v", tally)

	// What the console received.
	recs := seqRecords(con)
	var aAfterMark, bAfterMark, bSeen int
	for _, r := range recs {
		tag := r.path[strings.Index(r.path, "/r/")+1:]
		switch {
		case strings.HasPrefix(tag, "r/A/"):
			if r.login != loginA {
				t.Errorf("A's request %s reached the console as %q, want %q", tag, r.login, loginA)
			}
			if afterA["/c/alpha/"+tag] {
				t.Errorf("A's request %s, begun after Revoke returned, reached the console", tag)
			}
			if r.seq > mark {
				aAfterMark++
				if !inFlightA["/c/alpha/"+tag] {
					t.Errorf("A's request %s reached the console after Revoke returned, and was not in flight then", tag)
				}
			}
		case strings.HasPrefix(tag, "r/B/"):
			if r.login != loginB {
				t.Errorf("B's request %s reached the console as %q, want %q", tag, r.login, loginB)
			}
			bSeen++
			if r.seq > mark {
				bAfterMark++
			}
		}
	}
	if aAfterMark > 5 {
		t.Errorf("the console received %d A requests after Revoke returned; at most one in flight per A goroutine (5) may arrive", aAfterMark)
	}
	if int64(bSeen) != okB.Load() || bAfterMark == 0 {
		t.Errorf("the console received %d B requests (%d after the revocation); B was answered 200 %d times", bSeen, bAfterMark, okB.Load())
	}
	t.Logf("the console received %d requests; after Revoke returned: %d of A's (in flight then), %d of B's; %d A requests begun after were refused",
		len(recs), aAfterMark, bAfterMark, len(afterA))

	// R6, as the SPEC says it: the overall count is full, so a stranger is held back; B is not,
	// from its own source or from one that failed ten times.
	if r := d.rawFrom("127.0.0.99", d.req("GET", "/c/alpha/")); r.Status != http.StatusTooManyRequests {
		t.Errorf("a stranger with the overall count full: %d, want 429", r.Status)
	}
	if r := d.rawFrom("127.0.0.1", d.req("GET", "/c/alpha/r/B/end", cookieB)); r.Status != 200 {
		t.Errorf("B with the overall count full: %d %q, want 200", r.Status, r.Reason)
	}
	if r := d.rawFrom("127.0.0.10", d.req("GET", "/c/alpha/r/B/end2", cookieB)); r.Status != 200 {
		t.Errorf("B's cookie from a source with ten failures: %d %q, want 200 (R6: held back by neither count)", r.Status, r.Reason)
	}
}

// seqRecord is one request as the console received it: its sequence number (1, 2, …), path
// and asserted login.
type seqRecord struct {
	seq         int
	path, login string
}

// seqRecords is what c received, in order.
func seqRecords(c *echoconsole.Console) []seqRecord {
	var recs []seqRecord
	for i, r := range c.All() {
		recs = append(recs, seqRecord{seq: i + 1, path: r.Path, login: r.Header.Get("X-Phase-Console-Fleet-Login")})
	}
	return recs
}

// dialTLSFrom is testDoor.dialFrom for the load's goroutines: it returns its error.
func dialTLSFrom(d *testDoor, src string) (*tls.Conn, error) {
	dialer := &net.Dialer{Timeout: loadWait, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	cfg := &tls.Config{RootCAs: d.pool, NextProtos: []string{"http/1.1"}, ServerName: d.door.Addr().Addr().String()}
	return tls.DialWithDialer(dialer, "tcp", d.Addr, cfg)
}

// roundTrip writes req on conn and reads the whole answer.
func roundTrip(conn *tls.Conn, br *bufio.Reader, req string) (*http.Response, string, error) {
	conn.SetDeadline(time.Now().Add(loadWait))
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), err
}

func outcome(resp *http.Response, body string, err error) string {
	switch {
	case err != nil:
		return "error"
	case body != "":
		return fmt.Sprintf("%d %q", resp.StatusCode, body)
	default:
		return fmt.Sprint(resp.StatusCode)
	}
}

// skipBlank reads the next line of an event stream that is not empty.
func skipBlank(br *bufio.Reader) (string, error) {
	for {
		line, err := br.ReadString('\n')
		if err != nil || line != "\n" {
			return line, err
		}
	}
}

// loadFailures counts what went wrong in the load's goroutines and keeps the first.
type loadFailures struct {
	mu    sync.Mutex
	n     int
	first string
}

func (f *loadFailures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.first = fmt.Sprintf(format, args...)
	}
	f.n++
}

func (f *loadFailures) get() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.first
}

// waitLoadFor polls cond until it holds, failing the test loudly after loadWait.
func waitLoadFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(loadWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", loadWait, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
