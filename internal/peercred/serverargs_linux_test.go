package peercred

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/phase-console/fleet/internal/testdirs"
)

// TestSocketServerArgsNamesTheListener: the command line read for a unix socket is the one of
// the process listening on it (here, this test), and a socket nobody listens on is an error.
func TestSocketServerArgsNamesTheListener(t *testing.T) {
	sock, stop := testdirs.ServedSocket(t)
	args, err := SocketServerArgs(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(args, os.Args) {
		t.Errorf("args %q, want this process's %q", args, os.Args)
	}
	stop()
	if args, err := SocketServerArgs(context.Background(), sock); err == nil {
		t.Errorf("no listener: got %q, want an error", args)
	}
}

func TestSplitCmdline(t *testing.T) {
	for in, want := range map[string][]string{
		"tailscaled\x00--socks5-server=:1\x00": {"tailscaled", "--socks5-server=:1"},
		"tailscaled\x00\x00x\x00":              {"tailscaled", "", "x"},
		"tailscaled":                           {"tailscaled"},
	} {
		if got := splitCmdline([]byte(in)); !slices.Equal(got, want) {
			t.Errorf("splitCmdline(%q) = %q, want %q", in, got, want)
		}
	}
}
