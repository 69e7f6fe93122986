package fastloop

import (
	"sync"
	"time"
)

// liveStreams is the fast loop's answers of unknown length (server-sent events, long polls)
// being passed on, so that EndStreams can end them when the door is handed to another process
// (SPEC O3).
type liveStreams struct {
	mu    sync.Mutex
	going bool
	live  map[*upConn]struct{}
}

func (l *liveStreams) add(uc *upConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.going {
		endStream(uc)
		return
	}
	if l.live == nil {
		l.live = map[*upConn]struct{}{}
	}
	l.live[uc] = struct{}{}
}

func (l *liveStreams) remove(uc *upConn) {
	l.mu.Lock()
	delete(l.live, uc)
	l.mu.Unlock()
}

// endStream ends the read from the console that the stream waits in: the exchange then ends the
// caller's answer as a finished one (exchange.go).
func endStream(uc *upConn) {
	uc.ending.Store(true)
	uc.c.SetReadDeadline(time.Now())
}

// EndStreams ends every answer of unknown length the loop is passing on, between two of the
// console's reads, as a finished answer (its last chunk), and closes its connection after it;
// an answer that starts later is ended at once. Calling it again ends again any stream whose read
// was in a moment it could not end. It reports how many streams were live.
func (cs *ConnServer) EndStreams() int {
	cs.streams.mu.Lock()
	defer cs.streams.mu.Unlock()
	cs.streams.going = true
	for uc := range cs.streams.live {
		endStream(uc)
	}
	return len(cs.streams.live)
}
