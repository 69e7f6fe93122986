package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/state"
)

// TestCheckConsole_ReferenceConsole: every probe passes against the reference console; exit 0.
func TestCheckConsole_ReferenceConsole(t *testing.T) {
	home, tok := newTokenHome(t)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	srv := httptest.NewServer(refconsole.New(refconsole.Config{ID: "alpha", Verifier: v, Logger: log}))
	defer srv.Close()

	st, out, errOut := fleetCmd("check-console", "--url", srv.URL, "--state-dir", home)
	if st != 0 {
		t.Fatalf("exit %d\n%s%s", st, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "PASS C") {
			t.Errorf("line %q", l)
		}
	}
	if len(lines) < 50 {
		t.Errorf("only %d probes", len(lines))
	}
	if strings.Contains(out+errOut, tok) {
		t.Fatal("the token was printed")
	}
}

// TestCheckConsole_Broken: a console that believes every header fails, naming the rules; exit 1.
func TestCheckConsole_Broken(t *testing.T) {
	home, tok := newTokenHome(t)
	naive := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Believes any assertion, on any Host, beside anything.
		login := r.Header.Get("X-Phase-Console-Fleet-Login")
		scope := "local"
		if login != "" {
			scope = "remote"
		}
		if r.URL.Path == "/runs" {
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(map[string]string{"id": "1", "token": "cnVuLXRva2VuLXJ1bi10b2tlbi1ydW4tdG9rZW4tcnVu"})
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"scope": scope, "login": login})
	})
	srv := httptest.NewServer(naive)
	defer srv.Close()
	st, out, _ := fleetCmd("check-console", "--url", srv.URL, "--state-dir", home)
	if st != 1 {
		t.Fatalf("exit %d\n%s", st, out)
	}
	for _, want := range []string{
		"FAIL C1 bearer wrong by one byte (last) → 401 fleet-bad-token: sent GET /whoami Host=127.0.0.1:",
		"X-Phase-Console-Fleet=<fleet token, last byte changed>",
		"FAIL C2 ", "FAIL C3 ", "FAIL C5 ", "FAIL C6 ", "FAIL C7 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, tok) {
		t.Fatal("the token was printed")
	}
}

func TestCheckConsole_Usage(t *testing.T) {
	home, _ := newTokenHome(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no url", []string{"check-console", "--state-dir", home}, "--url"},
		{"LAN url", []string{"check-console", "--url", "http://192.168.1.20:9001", "--state-dir", home}, "loopback"},
		{"localhost is a name", []string{"check-console", "--url", "http://localhost:9001", "--state-dir", home}, "loopback"},
		{"https", []string{"check-console", "--url", "https://127.0.0.1:9001", "--state-dir", home}, "http://127.0.0.1:PORT"},
		{"a path", []string{"check-console", "--url", "http://127.0.0.1:7420/c/alpha/", "--state-dir", home}, "root"},
	} {
		st, out, errOut := fleetCmd(tc.args...)
		if st != 2 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", tc.name, st, out, errOut, tc.want)
		}
	}
}

// TestCheckConsole_WrongTarget: a dead port, or the supervisor's own door, is one stderr line and
// exit 1, before any probe; a missing token is exit 1 (2 is for bad usage only).
func TestCheckConsole_WrongTarget(t *testing.T) {
	home, _ := newTokenHome(t)
	ln, _ := net.Listen("tcp4", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	st, out, errOut := fleetCmd("check-console", "--url", "http://"+dead, "--state-dir", home)
	if st != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "nothing answers") || !strings.Contains(errOut, dead) {
		t.Errorf("dead port: exit %d, stdout %q, stderr %q", st, out, errOut)
	}

	sup := filepath.Join(t.TempDir(), "state")
	startSupervisor(t, sup)
	b, _ := os.ReadFile(filepath.Join(state.FleetDir(sup), state.AddrFile))
	addr := strings.TrimSpace(string(b))
	st, out, errOut = fleetCmd("check-console", "--url", addr, "--state-dir", sup)
	if st != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "not a console") {
		t.Errorf("the supervisor: exit %d, stdout %q, stderr %q", st, out, errOut)
	}

	st, out, errOut = fleetCmd("check-console", "--url", "http://127.0.0.1:9001", "--state-dir", t.TempDir())
	if st != 1 || out != "" || !strings.Contains(errOut, "no fleet token") || !strings.Contains(errOut, "--state-dir") {
		t.Errorf("no token: exit %d, stdout %q, stderr %q", st, out, errOut)
	}
}

// TestCheckConsole_URLWithoutScheme: --url 127.0.0.1:PORT is http://127.0.0.1:PORT.
func TestCheckConsole_URLWithoutScheme(t *testing.T) {
	home, _ := newTokenHome(t)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	srv := httptest.NewServer(refconsole.New(refconsole.Config{ID: "alpha", Verifier: v, Logger: log}))
	defer srv.Close()
	st, out, errOut := fleetCmd("check-console", "--url", strings.TrimPrefix(srv.URL, "http://"), "--state-dir", home)
	if st != 0 || strings.Contains(out, "FAIL") {
		t.Fatalf("exit %d\n%s%s", st, out, errOut)
	}
}

// minimalConsole is a console as most are written: the verifier's middleware in front of its own
// page at "/" and nothing else — none of the reference console's probe routes.
func minimalConsole(t *testing.T, home string) *httptest.Server {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<h1>my console</h1>") })
	srv := httptest.NewServer(v.Middleware(mux))
	t.Cleanup(srv.Close)
	return srv
}

// TestCheckConsole_MinimalConsoleSkips_N5: a console without /whoami, /presence, /runs and
// /settings/reach breaks no rule: every probe that needs one of them is SKIP naming it, every
// refusal probe still runs (on "/") and passes, exit 0. With --require-all the SKIPs are FAILs.
func TestCheckConsole_MinimalConsoleSkips_N5(t *testing.T) {
	home, tok := newTokenHome(t)
	srv := minimalConsole(t, home)
	st, out, errOut := fleetCmd("check-console", "--url", srv.URL, "--state-dir", home)
	if st != 0 || strings.Contains(out, "FAIL") {
		t.Fatalf("exit %d\n%s%s", st, out, errOut)
	}
	counts := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		word, _, _ := strings.Cut(l, " ")
		counts[word]++
		if word == "SKIP" && !strings.Contains(l, ": needs /") {
			t.Errorf("a SKIP that names no route: %q", l)
		}
	}
	for _, want := range []string{
		"SKIP C4 no assertion: scope local (baseline): needs /whoami",
		"SKIP C1 right bearer believed: scope remote, login as asserted: needs /whoami",
		"SKIP C5 presence open to a local caller: needs /presence",
		"SKIP C7 a local caller can change reach settings: needs /settings/reach",
		"SKIP C6 start a run (POST /runs, local) for the hook probes: needs /runs",
		"SKIP C6 run token accepted: needs /runs",
		"PASS C1 bearer wrong by one byte (last) → 401 fleet-bad-token",
		"PASS C1 malformed: login without bearer → 401 fleet-bad-token",
		"PASS C2 Host evil.example with the right bearer → 421 fleet-not-loopback",
		"PASS C2 no assertion, Host localhost.evil.example, same-origin POST /presence → 421 (DNS rebinding)",
		"PASS C3 order: proxy header + foreign Host + bad bearer → 403 fleet-and-proxy (C3 before C2, C1)",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q", want)
		}
	}
	if counts["PASS"] < 25 || counts["SKIP"] < 20 {
		t.Errorf("PASS %d, SKIP %d:\n%s", counts["PASS"], counts["SKIP"], out)
	}

	st, out, _ = fleetCmd("check-console", "--require-all", "--url", srv.URL, "--state-dir", home)
	if st != 1 || strings.Contains(out, "SKIP") || !strings.Contains(out, "FAIL C4 no assertion: scope local (baseline): sent nothing, got the console lacks /whoami (--require-all)\n") {
		t.Fatalf("--require-all: exit %d\n%s", st, out)
	}
	if strings.Contains(out, tok) {
		t.Fatal("the token was printed")
	}
}

// TestCheckConsole_BelievesWithoutBearer_N5: a console without the probe routes that believes an
// assertion without the bearer (it reads the login header alone) FAILs C1 — a SKIP never hides a
// violation a refusal probe can see — and exits 1.
func TestCheckConsole_BelievesWithoutBearer_N5(t *testing.T) {
	home, tok := newTokenHome(t)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	page := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "<h1>my console</h1>")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if login := r.Header.Get("X-Phase-Console-Fleet-Login"); login != "" && r.Header.Get("X-Phase-Console-Fleet") == "" {
			io.WriteString(w, "hello "+login) // believed, no bearer looked at
			return
		}
		page.ServeHTTP(w, r)
	}))
	defer srv.Close()
	st, out, errOut := fleetCmd("check-console", "--url", srv.URL, "--state-dir", home)
	if st != 1 {
		t.Fatalf("exit %d\n%s%s", st, out, errOut)
	}
	if !strings.Contains(out, "FAIL C1 malformed: login without bearer → 401 fleet-bad-token: sent GET / Host=127.0.0.1:") ||
		!strings.Contains(out, "SKIP C4 no assertion: scope local (baseline): needs /whoami") {
		t.Errorf("output:\n%s", out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "FAIL") && !strings.HasPrefix(l, "FAIL C1 ") {
			t.Errorf("a FAIL beyond C1: %q", l)
		}
	}
	if strings.Contains(out, tok) {
		t.Fatal("the token was printed")
	}
}
