package supervisor

// The test harness: a real supervisor on a real 127.0.0.1 listener, a fake tailscaled LocalAPI
// served over a unix socket (so the real tailscale.com/client/local code runs), echo consoles that
// record what reached them, and raw requests written as bytes over net.Dial (internal/doortest).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testlog"
)

// door is a running supervisor with its fake tailscaled, its console Alpha and a client for it.
type door struct {
	*doortest.Client
	t       testing.TB
	srv     *Server
	home    string
	tailnet *doortest.FakeTailscaled
}

type doorOption func(*Config)

func startDoor(t testing.TB, opts ...doorOption) *door {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	return startDoorAt(t, home, doortest.NewFakeTailscaled(), opts...)
}

func startDoorAt(t testing.TB, home string, tn *doortest.FakeTailscaled, opts ...doorOption) *door {
	t.Helper()
	logs := &testlog.Buffer{}
	api := doortest.ServeLocalAPI(t, tn)
	cfg := Config{
		StateHome:      home,
		LocalAPI:       api,
		TailscaledUID:  os.Getuid(),
		TailscaledArgs: tn.CommandLine(api.Socket),
		Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tok, err := state.ReadToken(filepath.Join(state.FleetDir(home), state.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	alpha := echoconsole.New(t)
	if _, err := srv.registry.Put(Console{ID: "alpha", Addr: alpha.Addr(), Name: "Alpha"}); err != nil {
		t.Fatal(err)
	}
	return &door{
		Client: &doortest.Client{T: t, Addr: ln.Addr().String(), Logs: logs, Alpha: alpha, Token: tok},
		t:      t, srv: srv, home: home, tailnet: tn,
	}
}

// setTailscaled changes what the fake tailscaled says about prefs and Serve, then has the door
// ask it again (tailnet.Verifier.Refresh), as the next poll would.
func (d *door) setTailscaled(t *testing.T, fn func(f *doortest.FakeTailscaled)) {
	t.Helper()
	d.tailnet.Set(fn)
	// Twice: the first may join a poll that started before the change (the door's first one).
	d.srv.tailnet.Refresh(context.Background())
	d.srv.tailnet.Refresh(context.Background())
}

// localReq is a request as a process on this machine sends it: Host is the door's own address,
// no Serve headers. body, when not empty, is sent with its Content-Length.
func (d *door) localReq(method, path, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\n", method, path, d.Addr)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\nContent-Length: %d\n", len(body))
	}
	b.WriteString("\n")
	// The request's line ends are written as CRLF, and so would the body's: JSON bodies here
	// hold no newline.
	return b.String() + body
}

// bearer is the Authorization line with the real fleet token.
func (d *door) bearer() string { return "Authorization: Bearer " + d.Token }

// addConsole starts another echo console and registers it as id.
func (d *door) addConsole(t *testing.T, id string) *echoconsole.Console {
	t.Helper()
	e := echoconsole.New(t)
	if _, err := d.srv.registry.Put(Console{ID: id, Addr: e.Addr(), Name: id}); err != nil {
		t.Fatal(err)
	}
	return e
}

// wsKey is a WebSocket handshake's key line.
const wsKey = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
