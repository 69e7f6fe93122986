//go:build unix && !linux

package peercred

import "testing"

// refuseNetlink: only Linux has netlink sock_diag.
func refuseNetlink(t *testing.T) {}
