package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPackagedUnit_O4: the packaged service runs /usr/bin/fleet where deploy/systemd's runs
// ~/go/bin/fleet; comments are left alone; a service that would not run /usr/bin/fleet is refused.
func TestPackagedUnit_O4(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "fleet.service"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := packagedUnit(string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "ExecStart=") && !strings.HasPrefix(l, "ExecStart=/usr/bin/fleet serve ") {
			t.Errorf("packaged %s", l)
		}
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, "%h/go/bin/fleet") {
			t.Errorf("still names the go install binary: %s", l)
		}
	}
	if strings.Count(got, "\n") != strings.Count(string(src), "\n") {
		t.Error("lines were added or lost")
	}
	if _, err := packagedUnit("[Service]\nExecStart=/opt/fleet serve\n"); err == nil {
		t.Error("a service that does not run /usr/bin/fleet was packaged")
	}
	if out, err := packagedUnit("[Socket]\nListenStream=127.0.0.1:7420\n"); err != nil || out != "[Socket]\nListenStream=127.0.0.1:7420\n" {
		t.Errorf("a socket unit: %q %v", out, err)
	}
}

// TestTarballReproducible_O4: two tarballs of the same files written at different times, with
// the files' own times changed in between, are byte-identical.
func TestTarballReproducible_O4(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "README.md"), []byte("fleet\n"), 0o644)
	bin := filepath.Join(root, "fleet")
	os.WriteFile(bin, []byte("\x7fELF"), 0o755)
	mtime := time.Unix(1_800_000_000, 0)
	var tars [2][]byte
	for i := range tars {
		os.Chtimes(bin, time.Now().Add(time.Duration(i)*time.Hour), time.Now())
		dest := filepath.Join(t.TempDir(), "f.tar.gz")
		if err := writeTarball(dest, "fleet_1.0.0_linux_amd64", bin, root, []string{"README.md"}, mtime); err != nil {
			t.Fatal(err)
		}
		tars[i], _ = os.ReadFile(dest)
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Fatal("two tarballs of the same files differ")
	}
}
