package supervisor

import (
	"strings"
	"sync"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/contract"
)

// Bounds of RecentActivity. What it holds is at most recentLogins × recentPerLogin slots of a fixed
// size (about 250 bytes: some 160 KiB in all), whatever the traffic.
const (
	recentPerLogin    = 10  // the last requests kept, and shown, for each login
	recentLogins      = 64  // logins kept; one more replaces the login whose last request is the oldest
	recentPathBytes   = 160 // a longer path is kept cut, and shown with "…"
	recentMethodBytes = 16
)

// RecentActivity is the index's "recent activity": the last requests of each tailnet login that the
// loopback door answered, kept in memory, so that the index shows a caller its own (and only its
// own) last requests. It is an audit.Recorder. It keeps nothing of the direct-reach door: a device
// never sees this panel. Record copies an entry's few fields into a fixed ring under a mutex and
// allocates only for a login it does not hold yet; the work of turning slots into requests is
// done when the index reads them.
type RecentActivity struct {
	mu    sync.Mutex
	seq   uint64 // counts records; a ring's last is the seq of its latest
	rings map[string]*recentRing
}

type recentRing struct {
	login string
	last  uint64
	next  int // the slot the next record fills
	n     int // slots filled
	slots [recentPerLogin]recentSlot
}

// recentSlot is one request, by value: nothing in it points into the door's request.
type recentSlot struct {
	at                             time.Time
	status                         int
	consoleLen, methodLen, pathLen uint8
	pathCut                        bool
	console                        [contract.MaxConsoleIDLen]byte
	method                         [recentMethodBytes]byte
	path                           [recentPathBytes]byte
}

// NewRecentActivity is an empty RecentActivity.
func NewRecentActivity() *RecentActivity {
	return &RecentActivity{rings: make(map[string]*recentRing, recentLogins)}
}

// Record implements audit.Recorder: it keeps e when the loopback door answered it for an
// identified login (a forwarded request, or a refusal after S5).
func (a *RecentActivity) Record(e *audit.Entry) {
	if e.Door != audit.DoorLoopback || e.Login == "" || !e.Audited() || strings.HasPrefix(e.Login, "device:") {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.rings[e.Login]
	if r == nil {
		r = a.ringFor(e.Login)
	}
	a.seq++
	r.last = a.seq
	s := &r.slots[r.next]
	s.at, s.status = e.Time, e.Status
	s.consoleLen = uint8(copy(s.console[:], e.Console))
	s.methodLen = uint8(copy(s.method[:], e.Method))
	s.pathLen = uint8(copy(s.path[:], e.Path))
	s.pathCut = len(e.Path) > len(s.path)
	r.next = (r.next + 1) % recentPerLogin
	if r.n < recentPerLogin {
		r.n++
	}
}

// ringFor makes login a ring, past recentLogins by taking over the one whose last request is the
// oldest. a.mu is held.
func (a *RecentActivity) ringFor(login string) *recentRing {
	var r *recentRing
	if len(a.rings) >= recentLogins {
		for _, o := range a.rings {
			if r == nil || o.last < r.last {
				r = o
			}
		}
		delete(a.rings, r.login)
		*r = recentRing{}
	} else {
		r = new(recentRing)
	}
	r.login = strings.Clone(login)
	a.rings[r.login] = r
	return r
}

// A RecentRequest is one request in the recent activity.
type RecentRequest struct {
	Time    time.Time
	Console string
	Method  string
	Path    string // cut after recentPathBytes bytes, "…" then marking the cut
	Status  int
}

// Of returns login's last requests, newest first (at most recentPerLogin). Nil or empty login: none.
func (a *RecentActivity) Of(login string) []RecentRequest {
	if a == nil || login == "" {
		return nil
	}
	a.mu.Lock()
	r := a.rings[login]
	var slots [recentPerLogin]recentSlot
	n := 0
	if r != nil {
		for n < r.n {
			slots[n] = r.slots[(r.next-1-n+2*recentPerLogin)%recentPerLogin]
			n++
		}
	}
	a.mu.Unlock()
	out := make([]RecentRequest, n)
	for i, s := range slots[:n] {
		path := strings.ToValidUTF8(string(s.path[:s.pathLen]), "") // a cut may split a character
		if s.pathCut {
			path += "…"
		}
		out[i] = RecentRequest{Time: s.at, Console: string(s.console[:s.consoleLen]), Method: string(s.method[:s.methodLen]),
			Path: path, Status: s.status}
	}
	return out
}
