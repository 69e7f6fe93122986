package supervisor

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/testdirs"
)

// TestCheckLoopbackListener_S1: a TCP socket handed to fleet serve (systemd, a handoff) is the
// loopback door only when it listens on 127.0.0.1; every wider or other address, and anything that
// is not TCP, is refused naming the rule.
func TestCheckLoopbackListener_S1(t *testing.T) {
	rows := []struct {
		name, network, addr string
		ok                  bool
	}{
		{"S1 127.0.0.1", "tcp4", "127.0.0.1:0", true},
		{"S1 every IPv4 address", "tcp4", "0.0.0.0:0", false},
		{"S1 every address", "tcp", ":0", false},
		{"S1 another loopback address", "tcp4", "127.0.0.2:0", false},
		{"S1 IPv6 loopback", "tcp6", "[::1]:0", false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ln, err := net.Listen(r.network, r.addr)
			if err != nil {
				t.Skipf("cannot listen on %s here: %v", r.addr, err)
			}
			defer ln.Close()
			err = CheckLoopbackListener(ln)
			if r.ok != (err == nil) {
				t.Fatalf("CheckLoopbackListener(%s) = %v", ln.Addr(), err)
			}
			if err != nil && !strings.Contains(err.Error(), "rule S1") {
				t.Errorf("the refusal does not name the rule: %v", err)
			}
		})
	}
	ul, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	if CheckLoopbackListener(ul) == nil {
		t.Error("a unix socket was taken as the TCP door")
	}
}

// TestCheckUnixListener_S5e_F1: a unix socket handed to fleet serve is the unix door only where
// ListenUnix would put one — a private folder, not below /tmp — 0600 and this user's, and at the
// path --socket names when it names one.
func TestCheckUnixListener_S5e_F1(t *testing.T) {
	listen := func(t *testing.T, dir string, dirMode, mode os.FileMode) (net.Listener, string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, dirMode)
		p := filepath.Join(dir, "serve.sock")
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		os.Chmod(p, mode)
		return ln, p
	}
	t.Run("F1 private folder, 0600", func(t *testing.T) {
		ln, p := listen(t, filepath.Join(testdirs.Private(t), "run"), 0o700, 0o600)
		if _, err := CheckUnixListener(ln, p); err != nil {
			t.Fatal(err)
		}
		if _, err := CheckUnixListener(ln, ""); err != nil {
			t.Fatalf("without --socket: %v", err)
		}
	})
	t.Run("F1 socket 0644", func(t *testing.T) {
		ln, p := listen(t, filepath.Join(testdirs.Private(t), "run"), 0o700, 0o644)
		if _, err := CheckUnixListener(ln, p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("a 0644 socket: %v", err)
		}
	})
	t.Run("F1 folder 0755", func(t *testing.T) {
		ln, p := listen(t, filepath.Join(testdirs.Private(t), "run"), 0o755, 0o600)
		if _, err := CheckUnixListener(ln, p); err == nil {
			t.Fatal("a socket in a 0755 folder was taken")
		}
	})
	t.Run("S5e below /tmp", func(t *testing.T) {
		ln, p := listen(t, filepath.Join(t.TempDir(), "run"), 0o700, 0o600)
		if _, err := CheckUnixListener(ln, p); err == nil {
			t.Fatal("a socket below /tmp was taken")
		}
	})
	t.Run("O3 not the socket --socket names", func(t *testing.T) {
		ln, _ := listen(t, filepath.Join(testdirs.Private(t), "run"), 0o700, 0o600)
		if _, err := CheckUnixListener(ln, "/run/user/1000/fleet/other.sock"); err == nil || !strings.Contains(err.Error(), "--socket") {
			t.Fatalf("another path than --socket: %v", err)
		}
	})
	t.Run("O3 a TCP socket", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if _, err := CheckUnixListener(ln, ""); err == nil {
			t.Fatal("a TCP socket was taken as the unix door")
		}
	})
}
