// Package otheruser runs a copy of the running test binary as another local user (UID), so that a
// test can show what a different user on the same machine can or cannot do. It is for tests only:
// product code never imports it.
//
// The helper is the test binary itself, run with -test.run selecting one test of the calling
// package (its TestXxxHelperProcess) and an environment variable telling that test what to do;
// without the variable that test returns at once. Running as UID needs root: Start and Run skip
// the test when the process cannot be started as UID.
package otheruser

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// UID is the uid (and gid) the helper runs as: not root, not the overflow uid 65534.
const UID = 4242

// Timeout bounds every wait for the helper; nothing is asserted about how long anything takes.
const Timeout = 10 * time.Second

// Command returns a command that runs a copy of the test binary as UID with -test.run=runPattern
// and envVar=mode added to this process's environment. The copy lives in a 0755 folder that UID
// may enter, removed when the test ends. If stdin is not empty it is the helper's stdin.
func Command(t testing.TB, runPattern, envVar, mode, stdin string) *exec.Cmd {
	t.Helper()
	dir, err := os.MkdirTemp("", "otheruser")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run="+runPattern)
	cmd.Env = append(os.Environ(), envVar+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: UID, Gid: UID}}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.Stderr = os.Stderr
	return cmd
}

// Run runs the helper (see Command) to the end and returns its stdout; it skips the test if the
// helper cannot be run as UID or fails.
func Run(t testing.TB, runPattern, envVar, mode, stdin string) string {
	t.Helper()
	out, err := Command(t, runPattern, envVar, mode, stdin).Output()
	if err != nil {
		t.Skipf("cannot run a helper as uid %d: %v", UID, err)
	}
	return string(out)
}

// Helper is a running helper process, talked to line by line over its stdin and stdout.
type Helper struct {
	Cmd   *exec.Cmd
	Out   *bufio.Reader // the helper's stdout
	stdin io.WriteCloser
}

// Start starts the helper (see Command) with its stdin and stdout as pipes; more, if not nil, may
// change the command first (more environment, ExtraFiles, SysProcAttr). It skips the test if the
// process cannot be started. The helper is killed when the test ends.
func Start(t testing.TB, runPattern, envVar, mode string, more func(*exec.Cmd)) *Helper {
	t.Helper()
	cmd := Command(t, runPattern, envVar, mode, "")
	if more != nil {
		more(cmd)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run a helper as uid %d: %v", UID, err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	return &Helper{Cmd: cmd, Out: bufio.NewReader(out), stdin: stdin}
}

// Expect reads lines until one starts with prefix and returns it; the test fails on another end
// of output or after Timeout.
func (h *Helper) Expect(t testing.TB, prefix string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		for {
			l, err := h.Out.ReadString('\n')
			if strings.HasPrefix(l, prefix) || err != nil {
				got <- l
				return
			}
		}
	}()
	select {
	case l := <-got:
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("helper: want %q, got %q", prefix, l)
		}
		return l
	case <-time.After(Timeout):
		t.Fatalf("helper: no %q", prefix)
	}
	return ""
}

// Say writes line and a newline to the helper's stdin.
func (h *Helper) Say(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// Wait closes the helper's stdin and waits for it to exit, at most Timeout, and returns how it
// exited.
func (h *Helper) Wait(t testing.TB) error {
	t.Helper()
	h.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- h.Cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(Timeout):
		t.Fatal("helper did not exit")
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
