package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// versionRE is SPEC O1's line: fleet <version> (<commit>, <go version>, <os>/<arch>).
var versionRE = regexp.MustCompile(`^fleet \S+ \((unknown|[0-9a-f]{12}(-dirty)?), go\S+, [a-z0-9]+/[a-z0-9]+\)\n$`)

// TestVersion_O1: `fleet version` and `fleet --version` print the same one line, on stdout, exit 0.
func TestVersion_O1(t *testing.T) {
	st, out, errs := runFleet("version")
	if st != 0 || errs != "" || !versionRE.MatchString(out) {
		t.Fatalf("fleet version: %d %q %q; want one line matching %s", st, out, errs, versionRE)
	}
	if !strings.Contains(out, runtime.Version()+", "+runtime.GOOS+"/"+runtime.GOARCH+")") {
		t.Errorf("fleet version: %q does not name %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	st2, out2, errs2 := runFleet("--version")
	if st2 != 0 || out2 != out || errs2 != "" {
		t.Fatalf("fleet --version: %d %q %q; want %q", st2, out2, errs2, out)
	}
	if st, _, errs := runFleet("version", "extra"); st != 2 || !strings.Contains(errs, "unexpected argument") {
		t.Errorf("fleet version extra: %d %q", st, errs)
	}
}

// TestVersionStamped_O1: a binary built as scripts/release builds it (-trimpath, -buildvcs=false,
// the version and commit linked in with -ldflags -X) says that version and commit.
func TestVersionStamped_O1(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fleet")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build fleet with")
	}
	bin := filepath.Join(t.TempDir(), "fleet")
	const commit = "89abcdef0123456789abcdef0123456789abcdef"
	ldflags := "-s -w -X github.com/phase-console/fleet/internal/version.stamped=v9.8.7" +
		" -X github.com/phase-console/fleet/internal/version.stampedCommit=" + commit
	build := exec.Command(gobin, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		want := "fleet v9.8.7 (89abcdef0123, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
		if err != nil || string(out) != want {
			t.Errorf("fleet %s: %q %v; want %q", arg, out, err, want)
		}
	}
}
