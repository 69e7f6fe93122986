package deploy

import (
	"path/filepath"
	"strings"
	"testing"
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
	systemdVerify(t, "fleet.service", "fleet.socket", "fleet-unix.socket")
}
