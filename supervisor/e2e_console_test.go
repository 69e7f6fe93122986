package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
)

// TestSupervisorAndReferenceConsole_S6_C4: the reference console registers itself, a verified
// request through the hop is believed as scope remote with the verified login, and WebSocket and
// SSE stream through; presence stays shut to remote callers, hooks never pass the door, and the
// console deregisters on exit.
func TestSupervisorAndReferenceConsole_S6_C4(t *testing.T) {
	d := startDoor(t)
	v, addr := startRefConsole(t, d)

	ctx, cancel := context.WithCancel(context.Background())
	regDone := make(chan struct{})
	reg := &refconsole.Registrar{ID: "ref", Name: "Reference", Addr: addr,
		FleetDir: state.FleetDir(d.home), Supervisor: d.Addr, Token: v.Bearer, Logger: slog.New(slog.DiscardHandler)}
	go func() { reg.Run(ctx); close(regDone) }()
	pollUntil(t, "the console to register", func() bool { _, ok := d.srv.registry.Get("ref"); return ok })

	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+d.Addr+path, nil)
		req.Host = doortest.TSName
		req.Header.Set("X-Forwarded-For", doortest.AliceIP)
		req.Header.Set("Tailscale-User-Login", doortest.Alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	// C4: believed, scope remote, the verified login.
	resp := get("/c/ref/whoami")
	var who struct{ Scope, Login string }
	json.NewDecoder(resp.Body).Decode(&who)
	resp.Body.Close()
	if resp.StatusCode != 200 || who.Scope != "remote" || who.Login != doortest.Alice {
		t.Fatalf("whoami through the hop: %d %+v", resp.StatusCode, who)
	}

	// S9: SSE ticks arrive while the stream is still open.
	resp = get("/c/ref/events")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("events Content-Type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	ticks := 0
	for ticks < 2 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("SSE: %v after %d ticks", err, ticks)
		}
		if strings.HasPrefix(line, "event: tick") {
			ticks++
		}
	}
	resp.Body.Close()

	// S9: a WebSocket echo through the hop.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	h := http.Header{}
	h.Set("X-Forwarded-For", doortest.AliceIP)
	h.Set("Tailscale-User-Login", doortest.Alice)
	conn, _, err := websocket.Dial(wctx, "ws://"+d.Addr+"/c/ref/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatalf("WebSocket through the hop: %v", err)
	}
	if err := conn.Write(wctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conn.Read(wctx); err != nil || string(msg) != "hello" {
		t.Fatalf("echo %q, %v", msg, err)
	}
	conn.Close(websocket.StatusNormalClosure, "")

	// C5: presence is shut to a remote caller; S7: hooks never pass the door.
	for path, want := range map[string]int{"/c/ref/presence": 403, "/c/ref/hooks/permission-request": 403} {
		req, _ := http.NewRequest("POST", "http://"+d.Addr+path, nil)
		req.Host = doortest.TSName
		req.Header.Set("X-Forwarded-For", doortest.AliceIP)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST %s: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// The console deregisters on exit.
	cancel()
	<-regDone
	if _, ok := d.srv.registry.Get("ref"); ok {
		t.Error("the console is still registered after it exited")
	}
}

// pollUntil polls cond until it holds, failing the test after a generous deadline.
func pollUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTokenRotationFailsNoRequest_C1: requests flow through the supervisor to the reference
// console while `fleet token rotate` runs; whichever side notices the new token first, no request
// fails (the console compares a miss again after re-reading the file, and believes the previous
// token for its grace).
func TestTokenRotationFailsNoRequest_C1(t *testing.T) {
	d := startDoor(t)
	_, addr := startRefConsole(t, d)
	if _, err := d.srv.registry.Put(Console{ID: "ref", Addr: addr}); err != nil {
		t.Fatal(err)
	}
	whoami := func() int {
		req, _ := http.NewRequest("GET", "http://"+d.Addr+"/c/ref/whoami", nil)
		req.Host = doortest.TSName
		req.Header.Set("X-Forwarded-For", doortest.AliceIP)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := whoami(); code != 200 {
		t.Fatalf("before the rotation: %d", code)
	}
	old, _ := state.ReadToken(filepath.Join(state.FleetDir(d.home), state.TokenFile))
	if err := state.RotateToken(state.FleetDir(d.home)); err != nil {
		t.Fatal(err)
	}
	// Keep asking until both followers (supervisor and console poll every second) have moved on.
	deadline := time.Now().Add(3 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		if code := whoami(); code != 200 {
			t.Fatalf("request %d after the rotation: %d", n, code)
		}
		n++
	}
	if cur, _ := d.srv.token.Current(); cur == old {
		t.Fatal("the supervisor never picked up the new token")
	}
	if code := whoami(); code != 200 {
		t.Fatalf("after both moved on: %d", code)
	}
}

// startRefConsole runs the reference console (id "ref", SSE every 10 ms) on a loopback port,
// believing d's fleet token, and returns its verifier and address. It is not registered.
func startRefConsole(t *testing.T, d *door) (*console.Verifier, string) {
	t.Helper()
	v, err := console.New(console.Config{StateDir: d.home, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ref := &http.Server{
		Handler:     refconsole.New(refconsole.Config{ID: "ref", Verifier: v, Tick: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}),
		ConnContext: v.ConnContext,
	}
	go ref.Serve(ln)
	t.Cleanup(func() { ref.Close() })
	return v, ln.Addr().String()
}
