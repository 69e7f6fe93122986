//go:build !linux

package reach

import (
	"net"
	"net/netip"
)

// dialSending is Linux's only (sendhello_linux_test.go); elsewhere the phone dials, then writes.
func dialSending(src, dst netip.AddrPort, first []byte) (net.Conn, bool, error) {
	return nil, false, nil
}
