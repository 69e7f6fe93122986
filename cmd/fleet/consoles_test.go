package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/supervisor"
)

// startSupervisor runs a supervisor for home on a free loopback port (it writes supervisor.addr).
func startSupervisor(t *testing.T, home string) {
	t.Helper()
	supervisortest.Start(t, supervisor.Config{StateHome: home, TailscaledUID: os.Getuid(),
		TailscaleSocket: filepath.Join(t.TempDir(), "none.sock")})
}

func runFleet(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	st := run(args, &out, &errb)
	return st, out.String(), errb.String()
}

// TestRegisterAndList_S8: fleet register and fleet consoles drive the registry API with the bearer.
func TestRegisterAndList_S8(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	startSupervisor(t, home)
	if st, out, errs := runFleet("register", "--state-dir", home, "--id", "alpha", "--addr", "127.0.0.1:9001", "--name", "Alpha"); st != 0 || !strings.Contains(out, "registered alpha") {
		t.Fatalf("register: %d %q %q", st, out, errs)
	}
	if st, out, _ := runFleet("register", "--state-dir", home, "--id", "alpha", "--addr", "127.0.0.1:9001"); st != 0 || !strings.Contains(out, "refreshed alpha") {
		t.Fatalf("re-register: %d %q", st, out)
	}
	if st, _, errs := runFleet("register", "--state-dir", home, "--id", "beta", "--addr", "10.0.0.1:80"); st != 1 || !strings.Contains(errs, "bad-registration") {
		t.Fatalf("non-loopback addr: %d %q", st, errs)
	}
	st, out, errs := runFleet("consoles", "--state-dir", home)
	if st != 0 || !strings.Contains(out, "alpha") || !strings.Contains(out, "127.0.0.1:9001") || !strings.Contains(out, "/c/alpha/") {
		t.Fatalf("consoles: %d %q %q", st, out, errs)
	}
	if st, out, _ := runFleet("register", "--state-dir", home, "--id", "alpha", "--delete"); st != 0 || !strings.Contains(out, "deregistered") {
		t.Fatalf("delete: %d %q", st, out)
	}
	if _, out, _ := runFleet("consoles", "--state-dir", home, "--json"); strings.Contains(out, "alpha") {
		t.Fatalf("alpha still listed: %q", out)
	}
}

// TestClientRefusesNonLoopbackSupervisor_S8: the bearer is never sent off this machine.
func TestClientRefusesNonLoopbackSupervisor_S8(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"192.0.2.1:7420", "example.com:7420", "localhost:7420"} {
		st, _, errs := runFleet("consoles", "--state-dir", home, "--supervisor", addr)
		if st != 1 || !strings.Contains(errs, "not a loopback literal") {
			t.Errorf("%s: %d %q", addr, st, errs)
		}
	}
	st, _, errs := runFleet("consoles", "--state-dir", home)
	if st != 1 || !strings.Contains(errs, "no fleet serve is running") {
		t.Errorf("no supervisor.addr: %d %q", st, errs)
	}
}

// TestHelp: fleet --help and every subcommand's --help say what it does, exit 0.
func TestHelp(t *testing.T) {
	st, out, _ := runFleet("--help")
	if st != 0 || !strings.Contains(out, "serve") {
		t.Fatalf("fleet --help: %d %q", st, out)
	}
	for name, c := range commands {
		st, out, errs := runFleet(name, "--help")
		if st != 0 || !strings.Contains(out+errs, c.summary) {
			t.Errorf("fleet %s --help: %d %q %q", name, st, out, errs)
		}
	}
	if st, _, _ := runFleet("nope"); st != 2 {
		t.Errorf("unknown command: exit %d, want 2", st)
	}
}

// TestRegisterErrorIsOneCleanLine_S8: a refused registration is one stderr line with the status,
// the reason word and the supervisor's detail, once, without HTML or its escapes.
func TestRegisterErrorIsOneCleanLine_S8(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	startSupervisor(t, home)
	st, out, errs := runFleet("register", "--state-dir", home, "--id", "beta", "--addr", "10.0.0.5:9001")
	want := `fleet register: the supervisor refused (400 bad-registration): addr "10.0.0.5:9001": `
	if st != 1 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, want) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1 and one line starting %q", st, out, errs, want)
	}
	if strings.Count(errs, "bad-registration") != 1 || strings.ContainsAny(errs, "<>&") {
		t.Errorf("stderr %q repeats the reason or holds HTML", errs)
	}
	st, _, errs = runFleet("register", "--state-dir", home, "--id", "nope", "--delete")
	if st != 1 || errs != "fleet register: the supervisor refused (404 unknown-console): no console is registered with that id\n" {
		t.Errorf("delete unknown: exit %d, stderr %q", st, errs)
	}
}

// TestHintsNameStateDir: without a running supervisor or a token, the CLI names the folder it
// looked in and --state-dir, never a bare lstat error.
func TestHintsNameStateDir(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	t.Setenv("PHASE_CONSOLE_STATE_HOME", home)
	st, _, errs := runFleet("consoles")
	if st != 1 || !strings.Contains(errs, home) || !strings.Contains(errs, "no --state-dir was given") || !strings.Contains(errs, "--state-dir DIR") {
		t.Errorf("consoles, default folder: exit %d, stderr %q", st, errs)
	}
	other := filepath.Join(t.TempDir(), "other")
	st, _, errs = runFleet("register", "--state-dir", other, "--id", "alpha", "--addr", "127.0.0.1:9001")
	if st != 1 || !strings.Contains(errs, other) || !strings.Contains(errs, "--state-dir") {
		t.Errorf("register, --state-dir: exit %d, stderr %q", st, errs)
	}
	// supervisor.addr there, but no token: the hint names the token's path, not an lstat error.
	if err := state.EnsureDir(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	if err := state.WriteFileAtomic(filepath.Join(state.FleetDir(home), state.AddrFile), []byte("127.0.0.1:7420\n")); err != nil {
		t.Fatal(err)
	}
	st, _, errs = runFleet("consoles")
	tokPath := filepath.Join(state.FleetDir(home), state.TokenFile)
	if st != 1 || !strings.Contains(errs, "no fleet token at "+tokPath) || !strings.Contains(errs, "--state-dir") || strings.Contains(errs, "lstat") {
		t.Errorf("consoles, no token: exit %d, stderr %q", st, errs)
	}
}

// TestDeadSupervisorAddr: supervisor.addr naming a port where nothing listens is said plainly.
func TestDeadSupervisorAddr(t *testing.T) {
	home, _ := newTokenHome(t)
	ln, _ := net.Listen("tcp4", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	st, _, errs := runFleet("consoles", "--state-dir", home, "--supervisor", dead)
	if st != 1 || !strings.Contains(errs, "nothing answers at "+dead) || !strings.Contains(errs, "fleet serve") {
		t.Errorf("exit %d, stderr %q", st, errs)
	}
}

// TestConsolesPrintsHealth_S8: `fleet consoles` prints the supervisor's health word — unknown
// until the first probe — and up/down from a supervisor that predates it.
func TestConsolesPrintsHealth_S8(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	sup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"consoles":[
			{"id":"new","addr":"127.0.0.1:9001","health":"unknown","up":false,"url":"/c/new/"},
			{"id":"live","addr":"127.0.0.1:9002","health":"up","up":true,"url":"/c/live/"},
			{"id":"gone","addr":"127.0.0.1:9003","health":"down","up":false,"url":"/c/gone/"},
			{"id":"old","addr":"127.0.0.1:9004","up":true,"url":"/c/old/"}]}`)
	}))
	defer sup.Close()
	st, out, errs := runFleet("consoles", "--state-dir", home, "--supervisor", strings.TrimPrefix(sup.URL, "http://"))
	if st != 0 {
		t.Fatalf("consoles: %d %q", st, errs)
	}
	health := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 4 {
			health[f[0]] = f[2] // no names: ID ADDR HEALTH PATH
		}
	}
	want := map[string]string{"new": "unknown", "live": "up", "gone": "down", "old": "up"}
	for id, h := range want {
		if health[id] != h {
			t.Errorf("S8 %s shows %q, want %q in\n%s", id, health[id], h, out)
		}
	}
}
