//go:build unix

package fdlimit

import (
	"syscall"
	"testing"
)

// TestRaise_R6c: Raise leaves the soft limit at the hard one (as far as the system allows) and
// never changes the hard limit.
func TestRaise_R6c(t *testing.T) {
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	lowered := before
	lowered.Cur = min(before.Cur, 256)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &before) })
	soft, hard, err := Raise()
	if err != nil {
		t.Fatal(err)
	}
	if hard != before.Max || soft != ceiling(before.Max) {
		t.Errorf("after Raise: soft %d, hard %d; want soft %d, hard %d", soft, hard, ceiling(before.Max), before.Max)
	}
	if s, h, err := Soft(); err != nil || s != soft || h != hard {
		t.Errorf("Soft = %d %d %v, want %d %d", s, h, err, soft, hard)
	}
}
