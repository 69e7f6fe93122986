// Package supervisortest runs a real supervisor for the tests of other packages (the CLI, the
// doctor, the end-to-end tests): one helper instead of a copy in each. It is for tests only;
// nothing in the product imports it.
package supervisortest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/supervisor"
)

// A Door is a running supervisor.
type Door struct {
	Server *supervisor.Server
	Addr   string // its TCP door, 127.0.0.1:PORT, as written to supervisor.addr
	Home   string // its state folder
}

// Start runs a supervisor with cfg (cfg.StateHome is required) on a free loopback port, as
// `fleet serve` does: Listen, PublishAddr (supervisor.addr), Serve. It is closed when t ends.
func Start(t testing.TB, cfg supervisor.Config) *Door {
	t.Helper()
	ln, err := supervisor.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	return StartOn(t, cfg, ln)
}

// StartOn is Start on a listener of the caller's (a wrapped one, to count connections).
func StartOn(t testing.TB, cfg supervisor.Config, ln net.Listener) *Door {
	t.Helper()
	srv, err := supervisor.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	d := &Door{Server: srv, Addr: ln.Addr().String(), Home: cfg.StateHome}
	if err := srv.PublishAddr(d.Addr); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("supervisor: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("supervisor did not stop")
		}
	})
	return d
}

// Register registers c through the supervisor's own API, with the fleet token, as a console does.
func (d *Door) Register(t testing.TB, c supervisor.Console) {
	t.Helper()
	tok, err := state.ReadToken(filepath.Join(state.FleetDir(d.Home), state.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(c)
	req, _ := http.NewRequest("POST", "http://"+d.Addr+"/fleet/v1/consoles", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	client := peercred.OwnClient(10*time.Second, true)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("registering %s: %s (%s)", c.ID, resp.Status, resp.Header.Get("X-Fleet-Reason"))
	}
}
