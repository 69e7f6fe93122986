package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestConsoleFlags(t *testing.T) {
	home, _ := newTokenHome(t)
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no id", []string{"console", "--state-dir", home}, "--id"},
		{"bad id", []string{"console", "--id", "Alpha_1", "--state-dir", home}, "[a-z0-9]"},
		{"bad port", []string{"console", "--id", "alpha", "--port", "70000", "--state-dir", home}, "--port"},
		{"S8 non-loopback supervisor", []string{"console", "--id", "alpha", "--supervisor", "192.168.1.20:7420", "--state-dir", home}, "loopback"},
		{"S8 supervisor by name", []string{"console", "--id", "alpha", "--supervisor", "localhost:7420", "--state-dir", home}, "loopback"},
		{"positional argument", []string{"console", "--id", "alpha", "extra"}, "unexpected argument"},
	} {
		st, _, errOut := fleetCmd(tc.args...)
		if st != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.name, st, errOut, tc.want)
		}
	}
	if st, out, _ := fleetCmd("console", "--help"); st != 0 || !strings.Contains(out, "-supervisor") {
		t.Errorf("--help: %d %q", st, out)
	}
}

// miniSupervisor records the S8 registration calls it gets.
type miniSupervisor struct {
	mu    sync.Mutex
	calls []string // "POST alpha 127.0.0.1:PORT", "DELETE alpha"
	auth  []string
	got   chan string
}

func (s *miniSupervisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	call := r.Method
	switch r.Method {
	case "POST":
		var c struct{ ID, Addr, Name string }
		json.NewDecoder(r.Body).Decode(&c)
		call += " " + c.ID + " " + c.Addr
		w.WriteHeader(http.StatusCreated)
	case "DELETE":
		call += " " + strings.TrimPrefix(r.URL.Path, "/fleet/v1/consoles/")
		w.WriteHeader(http.StatusNoContent)
	}
	s.calls = append(s.calls, call)
	select {
	case s.got <- call:
	default:
	}
}

// TestConsoleServe: `fleet console` listens on 127.0.0.1, answers /whoami, registers with the
// supervisor and deregisters when it is told to stop.
func TestConsoleServe(t *testing.T) {
	home, tok := newTokenHome(t)
	sup := &miniSupervisor{got: make(chan string, 100)}
	supSrv := httptest.NewServer(sup)
	defer supSrv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	var errOut syncWriter
	done := make(chan int, 1)
	go func() {
		done <- serveConsole(ctx, consoleOptions{id: "alpha", name: "Alpha", home: home,
			supervisor: strings.TrimPrefix(supSrv.URL, "http://")}, outW, &errOut)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, outR)
	const prefix = "fleet console alpha listening on http://"
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("first line %q", line)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(line, prefix), "/\n")
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("listens on %q", addr)
	}

	resp, err := http.Get("http://" + addr + "/whoami")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != `{"scope":"local","login":""}` {
		t.Fatalf("whoami %s", body)
	}

	if call := <-sup.got; call != "POST alpha "+addr {
		t.Fatalf("first call %q", call)
	}
	cancel()
	if st := <-done; st != 0 {
		t.Fatalf("exit %d: %s", st, errOut.String())
	}
	sup.mu.Lock()
	defer sup.mu.Unlock()
	if last := sup.calls[len(sup.calls)-1]; last != "DELETE alpha" {
		t.Fatalf("last call %q, want the deregistration", last)
	}
	for _, a := range sup.auth {
		if a != "Bearer "+tok {
			t.Fatalf("Authorization %q", a)
		}
	}
	if strings.Contains(errOut.String(), tok) {
		t.Fatal("the token appears in the log")
	}
	if _, err := http.Get("http://" + addr + "/whoami"); err == nil {
		t.Fatal("still listening after exit")
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestConsoleWithoutTokenFailsAtStart: a state folder with no fleet token stops `fleet console`
// at once: exit 1, one line naming the token's path and --state-dir; nothing keeps running.
func TestConsoleWithoutTokenFailsAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nonexistent")
	st, out, errOut := fleetCmd("console", "--id", "alpha", "--state-dir", dir)
	if st != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, filepath.Join(dir, "fleet", "fleet.token")) || !strings.Contains(errOut, "--state-dir") {
		t.Fatalf("exit %d, stdout %q, stderr %q", st, out, errOut)
	}
}
