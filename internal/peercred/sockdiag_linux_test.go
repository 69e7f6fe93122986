//go:build linux

package peercred

import (
	"testing"

	"golang.org/x/sys/unix"
)

// refuseNetlink makes every lookup find NETLINK_SOCK_DIAG refused (as under a systemd unit
// without AF_NETLINK) until the test ends.
func refuseNetlink(t testing.TB) {
	t.Helper()
	oldOpen, oldSize := diagOpen, diagPoolSize
	diagOpen = func() (int, error) { return -1, unix.EAFNOSUPPORT }
	diagPoolSize = 0
	diagDrain()
	t.Cleanup(func() { diagOpen, diagPoolSize = oldOpen, oldSize })
}

func diagDrain() {
	for {
		select {
		case fd := <-diagPool:
			unix.Close(fd)
		default:
			return
		}
	}
}
