package fleetwide

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/phase-console/fleet/internal/chromiumtest"
	"github.com/phase-console/fleet/internal/tailnettest"
)

var verbose = flag.Bool("verbose-tailnet", false, "print the logs of control, DERP, the tsnet nodes and the supervisors")

// TestMain skips the package visibly without chromium, as e2e/browser does (under CI=true the
// test runs and fails instead).
func TestMain(m *testing.M) {
	flag.Parse()
	if chromiumtest.Missing() {
		fmt.Printf("e2e/fleetwide: SKIPPED: %s not found (apt-get install chromium); no test ran\n", chromiumtest.Path)
		fmt.Println("testing: warning: no tests to run")
		os.Exit(0)
	}
	tailnettest.Prepare()
	os.Exit(m.Run())
}
