package fastloop

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTheDoorsImportFastLoop: the fast loop is the two doors' alone (SPEC P2). Package
// supervisor, which serves the loopback door, and package reach, the direct-reach door, are the
// packages of the product that import it; proxy, whose judgement it takes, never does (and could
// not: fastloop imports proxy), so the rules can be read, and changed, without the hand-written
// HTTP beside them. Tests may import it.
func TestOnlyTheDoorsImportFastLoop(t *testing.T) {
	const self = "github.com/phase-console/fleet/proxy/fastloop"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/phase-console/fleet/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if imp == self {
				importers = append(importers, pkg)
			}
		}
	}
	want := "[github.com/phase-console/fleet/reach github.com/phase-console/fleet/supervisor]"
	if got := fmt.Sprint(importers); got != want { // go list's order: sorted
		t.Errorf("packages importing %s: %v, want only %s", self, importers, want)
	}
}
