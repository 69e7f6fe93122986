package supervisor

// Fault test: `fleet token rotate`, again and again, while requests flow through the
// loopback door to a console that believes the assertion as package console does.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
)

// loadWait bounds every wait of the load tests: a guard against a hang, never an assertion. It is
// generous because -race on a busy two-core machine is slow.
const loadWait = 90 * time.Second

// TestTokenRotationUnderLoad_C1_F2: the token is rotated rotations times, as `fleet token rotate`
// does (state.RotateToken), while six callers (alice and bob, each on two kept-alive connections
// and one new connection per request) ask the reference console's /whoami through the door
// without pause, and a seventh sends stale tokens straight to the console.
//
// The console's grace runs on a fake clock that stands still while the load runs, so every
// rotation is inside its 10 s grace (C1) however slow the machine is; only the end of the test
// moves the clock past it. The clock stands an hour before the rotations' mtimes, so the file's
// age is taken as zero and each grace runs its full 10 s from the moment the console saw the
// rotation (that a late-seen rotation's grace is shortened by the file's age is
// TestGraceCountsFromRotation_C1's, in package console). Both followers of the token file are driven in both orders: on even
// rotations the console sees the new token first (a request that carries it makes the console
// re-read the file) while the supervisor still sends the old one; on odd rotations the
// supervisor is made to move first (unless the console's own poll got there). Their own 1 s
// polls run too, at whatever moment they fall.
// Before the next rotation the test waits until the supervisor sends the new token and every
// caller has finished a request it began after that, so no request carrying a token two
// rotations old is still in flight (C1 promises a grace for the previous token only).
//
// Guarantees checked, by counting:
//   - none fails that should not: every request of a verified caller through the door is 200,
//     scope remote, with that caller's own login, across every rotation;
//   - none passes that should not: a token two or more rotations old, or one never issued, sent
//     straight to the console (not through the hop) is 401 fleet-bad-token at every moment of
//     the load; after the grace the previous token is 401 too, and only the current one is
//     believed.
func TestTokenRotationUnderLoad_C1_F2(t *testing.T) {
	const rotations = 6
	const roundsPerStep = 3 // requests each caller finishes, begun after each step of a rotation

	d := startDoor(t)
	fleetDir := state.FleetDir(d.home)
	clock := &standingClock{t: time.Now().Add(-time.Hour).Round(0)} // before any rotation's mtime: each gets the full grace
	ref := startRecordedRefConsole(t, d.home, clock.Now)
	if _, err := d.srv.registry.Put(Console{ID: "ref", Addr: ref.addr}); err != nil {
		t.Fatal(err)
	}

	tokens := []string{d.Token}       // tokens[i]: the token after i rotations
	var dead atomic.Pointer[[]string] // tokens the console must never believe again
	dead.Store(&[]string{})
	forged := flipFirstChar(d.Token)

	// The callers through the door.
	type caller struct {
		login, ip string
		keepAlive bool
	}
	var callers []caller
	for _, who := range []struct{ login, ip string }{{doortest.Alice, doortest.AliceIP}, {doortest.Bob, doortest.BobIP}} {
		callers = append(callers, caller{who.login, who.ip, true}, caller{who.login, who.ip, true}, caller{who.login, who.ip, false})
	}
	var (
		gen     atomic.Int64                         // bumped to ask every caller for one more request begun after it
		reached = make([]atomic.Int64, len(callers)) // the gen at which each caller's last finished request began
		total   atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		fails   failures
	)
	var stopOnce sync.Once
	stopLoad := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopLoad) // a failed wait ends the load too, before the servers close
	for i, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn net.Conn
			var br *bufio.Reader
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			req := fmt.Sprintf("GET /c/ref/whoami HTTP/1.1\r\nHost: %s\r\nX-Forwarded-For: %s\r\nX-Forwarded-Host: %s\r\n"+
				"X-Forwarded-Proto: https\r\nTailscale-User-Login: %s\r\n\r\n", doortest.TSName, c.ip, doortest.TSName, c.login)
			for {
				select {
				case <-stop:
					return
				default:
				}
				began := gen.Load()
				if conn == nil {
					var err error
					if conn, err = net.Dial("tcp", d.Addr); err != nil {
						fails.add("caller %d: dial: %v", i, err)
						continue
					}
					br = bufio.NewReader(conn)
				}
				status, who, closed, err := askWhoami(conn, br, req)
				total.Add(1)
				switch {
				case err != nil:
					fails.add("caller %d (%s, keep-alive %v): %v", i, c.login, c.keepAlive, err)
				case status != 200 || who.Scope != "remote" || who.Login != c.login:
					fails.add("caller %d (%s): %d %+v, want 200 remote %s", i, c.login, status, who, c.login)
				}
				if err != nil || closed || !c.keepAlive {
					conn.Close()
					conn = nil
				}
				reached[i].Store(began)
			}
		}()
	}

	// The prober of stale tokens, straight to the console.
	var probes atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			tok := forged
			if old := *dead.Load(); len(old) > 0 && n%2 == 0 {
				tok = old[n/2%len(old)]
			}
			status, reason, err := ref.direct(tok, doortest.Alice)
			probes.Add(1)
			if err != nil || status != http.StatusUnauthorized || reason != console.ReasonBadToken {
				fails.add("a stale or forged token straight to the console: %d %q %v, want 401 %s", status, reason, err, console.ReasonBadToken)
			}
		}
	}()

	// round waits until every caller has finished a request begun after this call.
	round := func(what string) {
		t.Helper()
		g := gen.Add(1)
		waitLoad(t, what, func() bool {
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
	supervisorSends := func(tok string) bool { cur, err := d.srv.token.Current(); return err == nil && cur == tok }

	rounds("load before the first rotation")
	for i := 1; i <= rotations; i++ {
		if err := state.RotateToken(fleetDir); err != nil {
			t.Fatal(err)
		}
		next, err := state.ReadToken(filepath.Join(fleetDir, state.TokenFile))
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, next)
		rounds(fmt.Sprintf("load right after rotation %d", i))
		if i%2 == 0 {
			// The console first: a peer that carries the new token makes it re-read the file.
			if status, _, err := ref.direct(next, doortest.Alice); err != nil || status != 200 {
				t.Fatalf("rotation %d: the new token straight to the console: %d %v", i, status, err)
			}
			rounds(fmt.Sprintf("rotation %d: the console moved, the supervisor not yet", i))
		}
		d.srv.token.Refresh() // the supervisor's poll, now
		if !supervisorSends(next) {
			t.Fatalf("rotation %d: the supervisor does not send the new token after re-reading the file", i)
		}
		rounds(fmt.Sprintf("rotation %d: the supervisor moved", i))
		// Every request begun with tokens[i-1] or older has finished; the console believes
		// tokens[i] and tokens[i-1] only, and nothing older ever again.
		if n := ref.seen(next); n == 0 {
			t.Fatalf("rotation %d: no request reached the console with the new token", i)
		}
		old := append([]string(nil), tokens[:i-1]...)
		dead.Store(&old)
	}
	stopLoad()

	if n, first := fails.get(); n > 0 {
		t.Fatalf("%d request(s) went wrong under rotation; the first: %v", n, first)
	}
	for i, tok := range tokens {
		t.Logf("token %d: %d request(s) reached the console with it", i, ref.seen(tok))
	}
	t.Logf("%d requests through the door over %d rotations, %d stale or forged tokens refused", total.Load(), rotations, probes.Load())

	// The grace, at its edge: still believed just within it, refused from its end (C1).
	last, prev := tokens[rotations], tokens[rotations-1]
	clock.Add(state.RotationGrace - time.Nanosecond)
	if status, _, err := ref.direct(prev, doortest.Alice); err != nil || status != 200 {
		t.Errorf("the previous token just within the grace: %d %v, want 200", status, err)
	}
	clock.Add(time.Nanosecond)
	for i, tok := range append(tokens[:rotations:rotations], forged) {
		if status, reason, err := ref.direct(tok, doortest.Alice); err != nil || status != http.StatusUnauthorized || reason != console.ReasonBadToken {
			t.Errorf("token %d after the grace: %d %q %v, want 401 %s", i, status, reason, err, console.ReasonBadToken)
		}
	}
	if status, _, err := ref.direct(last, doortest.Alice); err != nil || status != 200 {
		t.Errorf("the current token after the grace: %d %v, want 200", status, err)
	}
	// And through the door, the current token is still the one sent.
	if r := d.Raw(doortest.ServeReq("GET", "/c/ref/whoami")); r.Status != 200 {
		t.Errorf("through the door after the grace: %d %q", r.Status, r.Reason)
	}
}

// standingClock is a clock that moves only when told.
type standingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *standingClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *standingClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// recordedRefConsole is the reference console believing the fleet token under stateHome on the
// given clock, behind a recorder of the bearer each request carried (counted by token).
type recordedRefConsole struct {
	addr string
	mu   sync.Mutex
	by   map[string]int
}

func startRecordedRefConsole(t testing.TB, stateHome string, now func() time.Time) *recordedRefConsole {
	t.Helper()
	v, err := console.New(console.Config{StateDir: stateHome, Now: now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordedRefConsole{addr: ln.Addr().String(), by: map[string]int{}}
	inner := refconsole.New(refconsole.Config{ID: "ref", Verifier: v, Logger: slog.New(slog.DiscardHandler)})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc.mu.Lock()
			rc.by[r.Header.Get("X-Phase-Console-Fleet")]++
			rc.mu.Unlock()
			inner.ServeHTTP(w, r)
		}),
		ConnContext: v.ConnContext,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return rc
}

// seen is how many requests reached the console carrying tok.
func (rc *recordedRefConsole) seen(tok string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.by[tok]
}

// direct asks the console's /whoami itself, not through the hop, asserting login with tok, on a
// new connection.
func (rc *recordedRefConsole) direct(tok, login string) (status int, reason string, err error) {
	conn, err := net.Dial("tcp", rc.addr)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(loadWait))
	req := fmt.Sprintf("GET /whoami HTTP/1.1\r\nHost: %s\r\nX-Phase-Console-Fleet: %s\r\nX-Phase-Console-Fleet-Login: %s\r\nConnection: close\r\n\r\n",
		rc.addr, tok, login)
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), nil
}

// askWhoami writes req on conn and reads the answer: its status, the console's caller, and
// whether the connection is done.
func askWhoami(conn net.Conn, br *bufio.Reader, req string) (status int, who struct{ Scope, Login string }, closed bool, err error) {
	conn.SetDeadline(time.Now().Add(loadWait))
	if _, err = io.WriteString(conn, req); err != nil {
		return 0, who, true, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, who, true, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, who, true, err
	}
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &who); err != nil {
			return resp.StatusCode, who, resp.Close, fmt.Errorf("whoami: %v in %q", err, body)
		}
	}
	return resp.StatusCode, who, resp.Close, nil
}

// failures counts what went wrong in the load's goroutines and keeps the first.
type failures struct {
	mu    sync.Mutex
	n     int
	first string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.first = fmt.Sprintf(format, args...)
	}
	f.n++
}

func (f *failures) get() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.first
}

// waitLoad polls cond until it holds, failing the test loudly after loadWait.
func waitLoad(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(loadWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", loadWait, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// flipFirstChar is s with its first character changed to another base64url one: a well-formed
// token that was never issued.
func flipFirstChar(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}
