//go:build !linux

package peercred

import (
	"context"
	"errors"
)

// SocketServerArgs returns the command line of the process that listens on the unix socket at
// path. On this platform it always fails, so the caller fails closed (fleet's TCP door is not
// served here anyway: PeerUID is Linux's).
func SocketServerArgs(ctx context.Context, path string) ([]string, error) {
	return nil, errNoServerArgs
}

var errNoServerArgs = errors.New("peercred: reading the command line of a socket's server is not supported on this platform")
