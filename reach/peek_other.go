//go:build !unix

package reach

import "net"

// peekPending reports nothing where the kernel cannot be asked: only what the door read of a
// connection tells whether its ClientHello has arrived.
func peekPending(net.Conn, []byte) []byte { return nil }
