package supervisor

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/phase-console/fleet/proxy/fastloop"
)

// This file is the supervisor's side of a handoff (SPEC O3): once another process serves on the
// same listening sockets, Drain stops this one accepting, ends what it holds open without cutting
// a byte of it, and lets what is in flight finish. The sockets themselves stay open in the other
// process: no connection is refused, none waiting in a socket's queue is lost.

// DrainTimeout is the longest Drain lets requests in flight run (SPEC O3: at most 30 s).
const DrainTimeout = 30 * time.Second

// ReachSocket is the direct-reach door's listening socket while the door is open, else nil: what
// a process that takes over is handed beside the loopback door's.
func (s *Server) ReachSocket() net.Listener {
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	if s.reach.door == nil {
		return nil
	}
	return s.reach.door.Socket()
}

// OpenReachNow reads the machine profile and opens the direct-reach door now (as ReloadReach),
// so that a process taking over serves on the socket it was handed before it says it is ready.
func (s *Server) OpenReachNow() { s.ReloadReach() }

// Drain stops every door accepting new connections (the listeners close; their sockets stay open
// wherever else they are held), ends every server-sent event stream as a finished answer and
// closes every WebSocket with 1001 (proxy.Hop.GoingAway, fastloop.ConnServer.EndStreams), lets
// every other request in flight finish until ctx ends (at most DrainTimeout), then closes the
// server as Close does. Requests that arrive on a kept connection meanwhile are still served,
// and their connection closed after them.
func (s *Server) Drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DrainTimeout)
	defer cancel()
	s.unixMu.Lock()
	servers := append([]*fastloop.ConnServer{s.conns}, s.unixConns...)
	s.unixMu.Unlock()

	endStreams := func() {
		s.hop.GoingAway()
		for _, cs := range servers {
			cs.EndStreams()
		}
	}
	endStreams()
	s.reach.mu.Lock()
	door := s.reach.door
	s.reach.door = nil // Close (below) must not close it again, nor a reload reopen it
	s.reach.mu.Unlock()

	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	keep := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	for _, cs := range servers {
		wg.Go(func() {
			if err := cs.Shutdown(ctx); err != nil {
				keep(err)
			}
		})
	}
	if door != nil {
		wg.Go(func() {
			if err := door.Drain(ctx); err != nil {
				keep(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// A stream that was between two reads when it was ended is ended again: GoingAway and
	// EndStreams are sticky for streams that start, and cheap to repeat.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			endStreams()
		}
	}
	s.Close()
	return firstErr
}

// WatchDoors starts judging the doors listening at addrs (the forward watch, SPEC S5e) and asks
// tailscaled once, before it returns, as Serve and ServeUnixListener do before they accept: a
// process taking over says it is ready only once its doors accept at once.
func (s *Server) WatchDoors(addrs ...net.Addr) {
	for _, a := range addrs {
		s.tailnet.Watch(a, s.stop)
	}
}
