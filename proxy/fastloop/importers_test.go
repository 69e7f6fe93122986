package fastloop

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTheLoopbackDoorImportsFastLoop: the fast loop is the loopback door's alone. Package
// supervisor, which serves that door, is the one package of the product that imports it; proxy,
// whose judgement it takes, never does (and could not: fastloop imports proxy), so the rules can
// be read, and changed, without the hand-written HTTP beside them. Tests may import it.
func TestOnlyTheLoopbackDoorImportsFastLoop(t *testing.T) {
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
	if len(importers) != 1 || importers[0] != "github.com/phase-console/fleet/supervisor" {
		t.Errorf("packages importing %s: %v, want only github.com/phase-console/fleet/supervisor", self, importers)
	}
}
