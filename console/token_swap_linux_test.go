//go:build linux

package console

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/state"
)

// tokEvil is a token that another user chose: base64url of 32 'e' bytes.
const tokEvil = "ZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWU"

// TestTokenNeverReadThroughASwappedSymlink_C1_F1: the console opens the token file with O_NOFOLLOW
// and judges it by the fstat of what it opened, and the stamp it records is that file's. A
// check-then-open read (Lstat the path, a regular 0600 file of ours, then read the path again,
// following a symlink) loses to another user who can write the folder (here it is 0777, which F1
// refuses at the supervisor's start-up, but the console does not look at the folder): they swap
// the real file with a symlink to a file of theirs (renameat2 RENAME_EXCHANGE) in a loop, and send
// the console requests with their own bearer — each miss makes MatchFresh re-read the file. A read
// landing in the window would believe their token (any login, scope remote), and with the real
// file's stamp recorded with it the console would never read the file again: their token believed,
// and the supervisor's refused, until the next rotation.
//
// While the other user swaps, every read finds the real file or refuses the symlink (fail closed,
// "the token file is unusable"); their token is never believed, and once the real file is back the
// supervisor's token is believed and theirs is not.
func TestTokenNeverReadThroughASwappedSymlink_C1_F1(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the swapper as another user")
	}
	e := newEnv(t, tokA, Config{})
	fleet := filepath.Dir(e.tokPath)
	for _, d := range []string{filepath.Dir(e.dir), e.dir} {
		chmod(t, d, 0o755) // searchable by the other user, as a home folder often is
	}
	chmod(t, fleet, 0o777) // too open (F1): writable by the other user
	h := otheruser.Start(t, "^TestConsoleSwapperHelperProcess$", "FLEET_CONSOLE_SWAPPER", fleet, nil)
	h.Expect(t, "READY")

	// Swap while sending the other user's bearer, until the console has looked at the file
	// often enough while the symlink was in place (a refusal that says no token is believed).
	h.Say(t, "go")
	sawSymlink, tries := 0, 0
	deadline := time.Now().Add(10 * time.Second)
	for sawSymlink < 50 && time.Now().Before(deadline) {
		tries++
		c, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokEvil, alice)))
		if ref == nil {
			h.Say(t, "stop")
			h.Expect(t, "STOPPED")
			t.Fatalf("another user's token was believed as %+v (try %d): the token file was read through the symlink they swapped in", c, tries)
		}
		if strings.Contains(ref.Detail, "unusable") {
			sawSymlink++
		}
	}
	h.Say(t, "stop")
	var swaps int
	if _, err := fmt.Sscanf(h.Expect(t, "STOPPED"), "STOPPED %d", &swaps); err != nil || swaps == 0 {
		t.Fatalf("the other user did not swap (%v)", err)
	}
	if sawSymlink == 0 {
		t.Fatalf("in %d tries over %d swaps the console never read while the symlink was in place: nothing was shown", tries, swaps)
	}
	if st, err := os.Lstat(e.tokPath); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("the real token file is not back in place: %v %v", st, err)
	}

	// The real file back in place: the console's poll, then past any grace.
	e.refresh()
	e.clock.Advance(RotationGraceForTest() + time.Second)
	if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice))); ref != nil {
		t.Errorf("the supervisor's token is refused with the real file back in place: %v", ref)
	}
	if c, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokEvil, alice))); ref == nil {
		t.Errorf("another user's token is believed with the real file back in place: %+v", c)
	}
}

// TestConsoleSwapperHelperProcess is the other user of
// TestTokenNeverReadThroughASwappedSymlink_C1_F1: in the folder it is given, it makes a token file
// (0644) and a symlink to it of its own, and on "go" swaps the symlink with fleet.token until told
// to "stop"; it then leaves the real file in place and says "STOPPED <swaps>".
func TestConsoleSwapperHelperProcess(t *testing.T) {
	fleet := os.Getenv("FLEET_CONSOLE_SWAPPER")
	if fleet == "" {
		return
	}
	evil, sym, real := filepath.Join(fleet, ".evil"), filepath.Join(fleet, ".sym"), filepath.Join(fleet, state.TokenFile)
	if err := os.WriteFile(evil, []byte(tokEvil+"\n"), 0o644); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(0)
	}
	if err := os.Symlink(evil, sym); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(0)
	}
	lines := make(chan string)
	go func() {
		in := bufio.NewReader(os.Stdin)
		for {
			l, err := in.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- strings.TrimSpace(l)
		}
	}()
	var stop atomic.Bool
	done := make(chan int, 1)
	fmt.Println("READY")
	for l := range lines {
		switch l {
		case "go":
			stop.Store(false)
			go func() {
				n := 0
				for !stop.Load() {
					if err := unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, sym, unix.RENAME_EXCHANGE); err != nil {
						fmt.Println("ERROR", err)
						break
					}
					n++
				}
				if st, err := os.Lstat(real); err == nil && st.Mode()&os.ModeSymlink != 0 {
					unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, sym, unix.RENAME_EXCHANGE)
				}
				done <- n
			}()
		case "stop":
			stop.Store(true)
			fmt.Println("STOPPED", <-done)
		}
	}
	os.Remove(sym)
	os.Remove(evil)
	os.Exit(0)
}
