package otheruser

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestOtherUserHelper runs TestOtherUserHelperProcess as UID both ways: to the end with a stdin,
// and line by line.
func TestOtherUserHelper(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a helper as another user")
	}
	const run, env = "^TestOtherUserHelperProcess$", "FLEET_OTHERUSER_TEST"
	if out := Run(t, run, env, "uid", "ignored\n"); out != fmt.Sprintf("UID %d\n", UID) {
		t.Errorf("Run: %q, want UID %d", out, UID)
	}
	h := Start(t, run, env, "echo", nil)
	h.Say(t, "hello")
	if l := h.Expect(t, "ECHO "); l != "ECHO hello\n" {
		t.Errorf("Expect: %q", l)
	}
	if err := h.Wait(t); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

// TestOtherUserHelperProcess is the helper of TestOtherUserHelper; otherwise it does nothing.
func TestOtherUserHelperProcess(t *testing.T) {
	switch os.Getenv("FLEET_OTHERUSER_TEST") {
	case "uid":
		fmt.Printf("UID %d\n", os.Getuid())
	case "echo":
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			fmt.Println("ECHO " + strings.TrimSpace(in.Text()))
		}
	default:
		return
	}
	os.Exit(0)
}

func TestFreePort(t *testing.T) {
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Errorf("FreePort: %d", p)
	}
}
