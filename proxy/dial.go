package proxy

import (
	"context"
	"net"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
)

// dialTimeout bounds one dial of a console, owner check included.
const dialTimeout = 5 * time.Second

// DialConsole is the hop's dialer (NewHop's default): the fleet token rides on every hop, so only
// a console run by this same user may receive it, never a process of someone else that took a
// dead console's port (peercred.DialOwn checks the socket's owner before anything is sent; a
// console of another user is 502 console-other-user). Each dial, owner check included, is bounded
// by 5 s.
func DialConsole(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return peercred.DialOwn(ctx, network, addr)
}

// A DownMarker is told when a forward found no console answering at its address, so that the
// door can show that console down (SPEC S8). Nil: nobody is told.
type DownMarker interface {
	MarkDown(consoleID string)
}

// MarkDownFunc adapts a function to a DownMarker.
type MarkDownFunc func(consoleID string)

// MarkDown calls f(consoleID), if f is not nil.
func (f MarkDownFunc) MarkDown(consoleID string) {
	if f != nil {
		f(consoleID)
	}
}
