package contract

import (
	"net/http"
	"testing"
)

func TestFoldName_S3(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"X-Phase-Console-Fleet", FoldedFleet},
		{"x_phase.console-FLEET", FoldedFleet},
		{"X-Phase-Console-Fleet-Login", FoldedFleetLogin},
		{"X\x00Phase Console\xffFleet", FoldedFleet},
		{"", ""},
		{"Content-Type", "content-type"},
		{"\u212A", "---"}, // Kelvin sign: three bytes, none ASCII, never "k"
	} {
		if got := FoldName(tc.in); got != tc.want {
			t.Errorf("FoldName(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !FoldedEqual(tc.in, tc.want) {
			t.Errorf("FoldedEqual(%q, %q) = false", tc.in, tc.want)
		}
	}
	if FoldName(HeaderFleet) != FoldedFleet || FoldName(HeaderFleetLogin) != FoldedFleetLogin {
		t.Fatal("FoldedFleet, FoldedFleetLogin are not the folded header names")
	}
	if FoldedEqual("X-Phase-Console-Flee", FoldedFleet) || FoldedHasPrefix("X", FoldedFleet) {
		t.Error("a shorter name matched")
	}
	if !FoldedHasPrefix("X_Forwarded_Anything", "x-forwarded-") {
		t.Error("FoldedHasPrefix missed a folded prefix")
	}
}

func TestIsAssertionName_S3(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"X-Phase-Console-Fleet", true},
		{"x-phase-console-fleet-login", true},
		{"X_PHASE_CONSOLE_FLEET", true},
		{"X.Phase.Console.Fleet.Login", true},
		{"X-Phase-Console-Fleet-Login2", false},
		{"X-Phase-Console-Flee", false},
		{"X-Phase-Console", false},
		{"", false},
		{"Authorization", false},
	} {
		if got := IsAssertionName(tc.name); got != tc.want {
			t.Errorf("IsAssertionName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHasHeaderFold_C3(t *testing.T) {
	h := http.Header{"Tailscale_User_Login": {"alice"}, "Accept": {"*/*"}}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"Tailscale-User-Login", true},
		{"tailscale-user-login", true}, // given folded
		{"TAILSCALE.USER.LOGIN", true},
		{"Tailscale-User-Name", false},
		{"Tailscale-User", false},
		{"accept", true},
	} {
		if got := HasHeaderFold(h, tc.name); got != tc.want {
			t.Errorf("HasHeaderFold(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// foldSink keeps the results of the calls TestFoldingAllocatesNothing measures, so that none of
// them can be left out as unused.
var foldSink [3]bool

func TestFoldingAllocatesNothing(t *testing.T) {
	h := http.Header{"Tailscale_User_Login": {"alice"}, "Accept": {"*/*"}}
	if n := testing.AllocsPerRun(100, func() {
		foldSink = [3]bool{
			IsAssertionName("x_phase_console_fleet_login"),
			FoldedHasPrefix("X-Forwarded-For", "x-forwarded-"),
			HasHeaderFold(h, "Tailscale-User-Login"),
		}
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func BenchmarkIsAssertionName(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		IsAssertionName("X-Phase-Console-Fleet-Login")
	}
}
