package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testlog"
)

// Three valid fleet tokens: base64url of 32 'a', 32 'b' and 32 'c' bytes.
const (
	tokA = "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE"
	tokB = "YmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmI"
	tokC = "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2M"
)

// flipLast changes the last byte of s to another base64url character.
func flipLast(s string) string {
	c := byte('A')
	if s[len(s)-1] == 'A' {
		c = 'B'
	}
	return s[:len(s)-1] + string(c)
}

func flipFirst(s string) string {
	c := byte('A')
	if s[0] == 'A' {
		c = 'B'
	}
	return string(c) + s[1:]
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	t       testing.TB
	dir     string // <stateHome>
	tokPath string
	clock   *fakeClock
	logs    *syncBuffer
	v       *Verifier
}

// newEnv makes a <stateHome> whose fleet.token holds tok and a Verifier following it on a fake clock.
func newEnv(t testing.TB, tok string, cfg Config) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: newFakeClock(), logs: &syncBuffer{}}
	fleet := state.FleetDir(e.dir)
	if err := state.EnsureDir(fleet); err != nil {
		t.Fatal(err)
	}
	e.tokPath = filepath.Join(fleet, state.TokenFile)
	if tok != "" {
		e.writeToken(tok)
	}
	cfg.StateDir = e.dir
	cfg.Now = e.clock.Now
	cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	e.v = v
	return e
}

func (e *env) writeToken(tok string) {
	e.t.Helper()
	if err := state.WriteFileAtomic(e.tokPath, []byte(tok+"\n")); err != nil {
		e.t.Fatal(err)
	}
}

// refresh makes the Verifier re-read the token file now, as its 1 s poll would.
func (e *env) refresh() {
	e.v.refresh()
}

// noSecretInLogs fails when any of the secrets appears in the log lines.
func (e *env) noSecretInLogs(secrets ...string) {
	e.t.Helper()
	logs := e.logs.String()
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			e.t.Fatalf("a secret appears in the log:\n%s", logs)
		}
	}
}

// hdr is one header line as sent: the name exactly as spelled, and the value.
type hdr struct{ name, value string }

// assert builds the two assertion headers.
func assert(bearer, login string) []hdr {
	return []hdr{{"X-Phase-Console-Fleet", bearer}, {"X-Phase-Console-Fleet-Login", login}}
}

func join(hs ...[]hdr) []hdr {
	var out []hdr
	for _, h := range hs {
		out = append(out, h...)
	}
	return out
}

// newReq builds a request as net/http's server would hand it over: from 127.0.0.1 unless peer is
// set, Host host (default 127.0.0.1:9001), headers under the exact names given.
func newReq(method, target, host, peer string, hs []hdr) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "127.0.0.1:9001"
	if host != "" {
		r.Host = host
	}
	r.RemoteAddr = "127.0.0.1:40000"
	if peer != "" {
		r.RemoteAddr = peer
	}
	for _, h := range hs {
		r.Header[h.name] = append(r.Header[h.name], h.value)
	}
	// A synthetic request has no connection: say its peer is this user, as a real local
	// connection of the test process would be (tests with real listeners judge it for real).
	return r.WithContext(context.WithValue(r.Context(), peerKey, &peerVerdict{}))
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is the tests' log sink.
type syncBuffer = testlog.Buffer
