package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSystemdSocketUnits_O3_S1: the socket units hold the loopback door's two sockets across
// restarts — the TCP one on 127.0.0.1 only (S1), the unix one at the path the service passes as
// --socket, 0600 in a 0700 folder (S5e, F1) — each with the name fleet serve takes it by, and
// both activate fleet.service. The service says when it is ready, lets a new process become the
// main one after a handoff, and hands over on reload.
func TestSystemdSocketUnits_O3_S1(t *testing.T) {
	tcp := unitLines(t, filepath.Join("systemd", "fleet.socket"))
	unix := unitLines(t, filepath.Join("systemd", "fleet-unix.socket"))
	svc := unitLines(t, filepath.Join("systemd", "fleet.service"))
	rows := []struct {
		name string
		kv   map[string][]string
		key  string
		want string
	}{
		{"S1 TCP door on 127.0.0.1 only", tcp, "ListenStream", "127.0.0.1:7420"},
		{"O3 TCP socket named tcp", tcp, "FileDescriptorName", "tcp"},
		{"O3 TCP socket activates fleet.service", tcp, "Service", "fleet.service"},
		{"O3 unix socket at the service's --socket", unix, "ListenStream", "%t/fleet/serve.sock"},
		{"O3 unix socket named unix", unix, "FileDescriptorName", "unix"},
		{"F1 unix socket 0600", unix, "SocketMode", "0600"},
		{"F1 unix socket folder 0700", unix, "DirectoryMode", "0700"},
		{"O3 unix socket activates fleet.service", unix, "Service", "fleet.service"},
		{"O3 service says when it is ready", svc, "Type", "notify"},
		{"O3 new process may become the main one", svc, "NotifyAccess", "all"},
		{"O3 reload hands over", svc, "ExecReload", "/bin/kill -USR2 $MAINPID"},
		{"O3 socket folder kept while stopped", svc, "RuntimeDirectoryPreserve", "yes"},
	}
	for _, r := range rows {
		if got := r.kv[r.key]; len(got) != 1 || got[0] != r.want {
			t.Errorf("%s: %s = %q, want %q", r.name, r.key, got, r.want)
		}
	}
	if !strings.Contains(svc["ExecStart"][0], "--port 7420") {
		t.Errorf("the service's --port is not fleet.socket's port: %q", svc["ExecStart"])
	}
	for name, kv := range map[string]map[string][]string{"fleet.socket": tcp, "fleet-unix.socket": unix} {
		if got := kv["WantedBy"]; len(got) != 1 || got[0] != "sockets.target" {
			t.Errorf("%s: WantedBy = %q, want sockets.target", name, got)
		}
	}
}

// TestSystemdAnalyzeVerifySockets runs `systemd-analyze verify --user` on the service and both
// socket units together, and fails on anything it says.
func TestSystemdAnalyzeVerifySockets(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	home := t.TempDir()
	bin := filepath.Join(home, "go", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "fleet"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	unitDir := t.TempDir()
	var units []string
	for _, name := range []string{"fleet.service", "fleet.socket", "fleet-unix.socket"} {
		src, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(unitDir, name)
		if err := os.WriteFile(p, src, 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sa, append([]string{"verify", "--user"}, units...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+runtime, "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	if ctx.Err() != nil || strings.Contains(text, "Failed to initialize manager") {
		t.Skipf("systemd-analyze verify --user cannot run here: %s", text)
	}
	if err != nil || text != "" {
		t.Fatalf("systemd-analyze verify --user: %v\n%s", err, text)
	}
}
