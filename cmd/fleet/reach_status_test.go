package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/supervisor"
)

// TestReachStatus_R1_R4: fleet reach status prints the door closed with its reason, then open
// with its address, root fingerprint and leaf expiry, one line each; --json is the API's answer.
func TestReachStatus_R1_R4(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	d := supervisortest.Start(t, supervisor.Config{StateHome: home, TailscaledUID: os.Getuid(),
		TailscaleSocket: filepath.Join(t.TempDir(), "none.sock")})
	d.Server.ReloadReach()
	st, out, errs := runFleet("reach", "status", "--state-dir", home)
	if st != 0 || !strings.Contains(out, "mode:         off\n") || !strings.Contains(out, "door:         closed: reach.mode is off\n") {
		t.Fatalf("closed: %d %q %q", st, out, errs)
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	profile := "reach:\n  mode: direct\n  listen: " + listen + "\n"
	if err := os.WriteFile(filepath.Join(home, "machine-profile.yaml"), []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Server.ReloadReach()
	st, out, errs = runFleet("reach", "status", "--state-dir", home)
	for _, want := range []string{"mode:         direct\n", "listen:       https://" + listen + "/\n", "door:         open\n",
		"fingerprint:  SHA-256 ", "leaf expires: ", "devices:      0\n"} {
		if st != 0 || !strings.Contains(out, want) {
			t.Fatalf("open: %d %q %q, want %q", st, out, errs, want)
		}
	}
	st, out, _ = runFleet("reach", "status", "--state-dir", home, "--json")
	var got supervisor.ReachStatus
	if err := json.Unmarshal([]byte(out), &got); st != 0 || err != nil || !got.Open || got.Listen != listen || got.Fingerprint == "" {
		t.Fatalf("--json: %d %v %q", st, err, out)
	}
}
