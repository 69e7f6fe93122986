package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/pairing"
)

// TestReachPairConsoles_G1: `fleet reach pair --consoles` gives the device it pairs that list
// (default *), says so, and refuses a list that is not one before issuing anything; `fleet reach
// devices` shows each device's list.
func TestReachPairConsoles_G1(t *testing.T) {
	listen := rawhttp.FreeLoopbackAddr(t).String()
	home := reachHome(t, directProfileAt(listen))
	writeCheapPassword(t, home, "correct horse battery")
	startReachSupervisor(t, home)
	dir := pairingFolder(home)
	right := func() (bool, error) { return true, nil }

	u, out := pairOutput(t, "--consoles", "alpha, Build-*", "--state-dir", home)
	if !strings.Contains(out, "May open:          alpha,build-*\n") {
		t.Errorf("the list is not shown:\n%s", out)
	}
	issued, err := pairing.RedeemCode(dir, u.Fragment, time.Now, right)
	if err != nil || issued.Consoles.String() != "alpha,build-*" {
		t.Fatalf("the code was issued for %v, %v", issued.Consoles, err)
	}
	if _, _, err := pairing.RegisterDeviceFor(dir, "Ann's phone", issued.Consoles, time.Now()); err != nil {
		t.Fatal(err)
	}

	u, out = pairOutput(t, "--state-dir", home)
	if issued, err := pairing.RedeemCode(dir, u.Fragment, time.Now, right); err != nil || issued.Consoles != access.Everything || !strings.Contains(out, "May open:          *\n") {
		t.Errorf("the default: %v, %v\n%s", issued.Consoles, err, out)
	}

	for _, bad := range []string{"", "al*pha", "alpha,,beta", "*x"} {
		st, out, errs := fleetCmd("reach", "pair", "--consoles", bad, "--state-dir", home)
		if st != 2 || !strings.Contains(errs, "--consoles") || strings.Contains(out, "Pairing code") {
			t.Errorf("--consoles %q: exit %d, stdout %q, stderr %q", bad, st, out, errs)
		}
	}

	st, out, errs := fleetCmd("reach", "devices", "--state-dir", home)
	if st != 0 || !strings.Contains(out, "CONSOLES") || !strings.Contains(out, "alpha,build-*") {
		t.Errorf("fleet reach devices: %d\n%s%s", st, out, errs)
	}
	st, out, _ = fleetCmd("reach", "devices", "--json", "--state-dir", home)
	var devs []struct {
		Consoles []string `json:"consoles"`
	}
	if err := json.Unmarshal([]byte(out), &devs); st != 0 || err != nil || len(devs) != 1 || strings.Join(devs[0].Consoles, ",") != "alpha,build-*" {
		t.Errorf("fleet reach devices --json: %d %v\n%s", st, err, out)
	}
}
