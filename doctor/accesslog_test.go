package doctor

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// TestAccessLogDropsWarn_G3: a supervisor whose API says it lost access-log lines is a WARN that
// names the file and the fix; 0 lost is no line at all (TestHealthy).
func TestAccessLogDropsWarn_G3(t *testing.T) {
	home := newHome(t)
	fleetDir := state.FleetDir(home)
	if err := state.EnsureHome(home); err != nil {
		t.Fatal(err)
	}
	if err := state.EnsureDir(fleetDir); err != nil {
		t.Fatal(err)
	}
	if _, err := state.LoadOrCreateToken(fleetDir); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"consoles":[],"access_log_dropped":3}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	if err := state.WritePrivateFile(filepath.Join(fleetDir, state.AddrFile), []byte(addr+"\n")); err != nil {
		t.Fatal(err)
	}
	port := int(netip.MustParseAddrPort(addr).Port())
	checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(port), TailscaledArgs: cleanArgs})
	want(t, checks, "access log", Warn, "3 line(s) of "+filepath.Join(fleetDir, "access.log")+" were lost", "free space")
}
