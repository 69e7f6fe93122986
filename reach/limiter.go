package reach

import (
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// The failure limits of SPEC R6.
const (
	Window       = 10 * time.Minute // how long a failure counts
	SourceLimit  = 10               // failures from one source within Window that close it
	OverallLimit = 50               // failures from all sources within Window that close the door to strangers
	// MaxSources bounds how many sources the Limiter remembers. Through Allow and Admit, callers
	// record at most OverallLimit failures per Window (a paired device records none), so it is a
	// backstop, not a limit anyone meets in use.
	MaxSources = 10_000
)

// A Limiter counts failures on the direct-reach door (SPEC R6) and says when a caller must wait.
//
// What counts, and the answer:
//
//   - A failure is counted once for its source and once overall. A source is an IPv4 address, or an
//     IPv6 address's /64 (one host usually owns a whole /64); an IPv4-mapped IPv6 address is its
//     IPv4 address. Zones are ignored.
//   - A failure counts for Window (ten minutes) after it happened. When a source has SourceLimit
//     (10) failures that still count, or all sources together have OverallLimit (50), Allow refuses:
//     the door answers 429 with Retry-After. So ten failures from one source are let through and the
//     eleventh request within ten minutes of the first failure is refused; never more than ten
//     failures from one source, nor fifty from strangers, fall within any ten-minute span.
//   - retryAfter is the time until the oldest of the counting failures stops counting — the moment
//     the window lets the next request through — rounded up to whole seconds, at least one second.
//     Ten failures at t0 and a request at t0+3m: Retry-After is 420 seconds.
//   - A request with a valid device credential is never asked about: the door lets it through
//     whatever either count says and records no failure for it (R6), so neither strangers
//     sharing its source nor strangers anywhere can lock a paired phone out.
//   - A request in flight holds the place of one failure until it ends (Admit): parallel
//     requests get no more judged than sequential ones would.
//   - A refused request is not a failure: the caller records nothing for a 429.
//
// The source must be the TCP peer of the connection (PeerAddr of the request), never an address
// taken from a header such as X-Forwarded-For, Forwarded or X-Real-IP: any caller can write those.
// An invalid address (which a TCP peer never is) is refused.
//
// Memory is bounded: a source is remembered only once it has failed, is forgotten once its last
// failure stops counting, and at most MaxSources are remembered (about 230 bytes each, under
// 2.5 MB in all). When the table is full, the source whose last failure is oldest is forgotten
// first. A flood from many distinct sources therefore cannot grow memory past that bound; what it
// can do is fill the overall count, which then refuses every stranger — a pairing attempt
// included — until its failures stop counting, while paired devices are still let in (they are
// never asked about). Forgetting a source early needs MaxSources sources to fail within one
// Window, which strangers cannot do through Allow.
//
// Why not golang.org/x/time/rate (the design's first choice): a token bucket cannot say "ten
// within ten minutes". With burst 10, any refill rate lets more than ten failures through within
// ten minutes (at one token a minute, an eleventh one minute after ten quick ones and nineteen in
// all), and no refill never lets the source back in; its wait is the time to the next token, not
// to the end of the window. The Limiter keeps instead the times of the last SourceLimit failures
// of each source and the last OverallLimit overall (a sliding log), which makes the rule and the
// Retry-After exact for the same small, fixed memory per source.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	clock func() time.Time
	epoch time.Time // times are kept as offsets from it, so the monotonic clock is used when present

	mu      sync.Mutex
	overall ring[[OverallLimit]time.Duration]
	sources map[sourceKey]*source
	// pending counts the requests in flight (Admit), by source and overall: each may yet fail,
	// so each holds the place of one failure until it ends.
	pending        map[sourceKey]int
	overallPending int
	// oldest and newest are the ends of a list of the sources ordered by their last failure, oldest
	// first: the next to stop counting, and the first to forget when the table is full.
	oldest, newest *source
}

// NewLimiter returns a Limiter reading the time from clock (time.Now when nil).
func NewLimiter(clock func() time.Time) *Limiter {
	if clock == nil {
		clock = time.Now
	}
	return &Limiter{clock: clock, epoch: clock(), sources: make(map[sourceKey]*source), pending: make(map[sourceKey]int)}
}

// Allow reports whether a request from src may be judged, before any password work is done for
// it. When it may not, retryAfter is the time to wait, in whole seconds (at least one): the door
// answers 429 with that Retry-After.
func (l *Limiter) Allow(src netip.Addr) (ok bool, retryAfter time.Duration) {
	if !src.IsValid() {
		return false, Window
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.forgetIdle(now)
	var wait time.Duration
	if s := l.sources[keyOf(src)]; s != nil {
		wait = s.times.wait(now)
	}
	wait = max(wait, l.overall.wait(now))
	if wait <= 0 {
		return true, 0
	}
	return false, roundUp(wait)
}

// Admit is Allow for a request that is about to be judged and may fail. A request it lets
// through counts as one failure of its source and overall until end is called (once, when the
// request is done): N requests in flight at once from one source therefore get no more than
// SourceLimit judged between them, where Allow alone would let all N through before the first of
// them had failed. end is nil when ok is false.
func (l *Limiter) Admit(src netip.Addr) (ok bool, retryAfter time.Duration, end func()) {
	if !src.IsValid() {
		return false, Window, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.forgetIdle(now)
	k := keyOf(src)
	times := &ring[[SourceLimit]time.Duration]{}
	if s := l.sources[k]; s != nil {
		times = &s.times
	}
	wait := max(times.waitExtra(now, l.pending[k]), l.overall.waitExtra(now, l.overallPending))
	if wait > 0 {
		return false, roundUp(wait), nil
	}
	l.pending[k]++
	l.overallPending++
	var once sync.Once
	return true, 0, func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.pending[k]--; l.pending[k] <= 0 {
				delete(l.pending, k)
			}
			l.overallPending--
		})
	}
}

// Failure records a failure from src (SPEC R6 lists what fails). Call it once per failed request,
// and never for a request Allow refused.
func (l *Limiter) Failure(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.forgetIdle(now)
	l.overall.add(now)
	if !src.IsValid() {
		return
	}
	k := keyOf(src)
	s := l.sources[k]
	if s == nil {
		if len(l.sources) >= MaxSources {
			l.forget(l.oldest)
		}
		s = &source{key: k}
		l.sources[k] = s
	} else {
		l.unlink(s)
	}
	s.times.add(now)
	s.last = now
	l.pushNewest(s)
}

// PeerAddr is the source of a request for the Limiter: the address of its TCP peer, as net/http
// set it in RemoteAddr from the accepted connection. No header is ever read. It returns the
// invalid Addr when RemoteAddr is not an address and port, which Allow refuses.
func PeerAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

func (l *Limiter) now() time.Duration { return l.clock().Sub(l.epoch) }

// forgetIdle forgets the sources whose last failure no longer counts.
func (l *Limiter) forgetIdle(now time.Duration) {
	for l.oldest != nil && now-l.oldest.last >= Window {
		l.forget(l.oldest)
	}
}

func (l *Limiter) forget(s *source) {
	l.unlink(s)
	delete(l.sources, s.key)
}

func (l *Limiter) unlink(s *source) {
	if s.older != nil {
		s.older.newer = s.newer
	} else {
		l.oldest = s.newer
	}
	if s.newer != nil {
		s.newer.older = s.older
	} else {
		l.newest = s.older
	}
	s.older, s.newer = nil, nil
}

func (l *Limiter) pushNewest(s *source) {
	s.older = l.newest
	if l.newest != nil {
		l.newest.newer = s
	} else {
		l.oldest = s
	}
	l.newest = s
}

// A sourceKey is a source as 16 bytes: an IPv4 address in its IPv4-mapped form, an IPv6 address
// with its last 64 bits cleared. The two never meet: a mapped address has ffff in bits 80–95.
type sourceKey [16]byte

func keyOf(a netip.Addr) sourceKey {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.As16() // As16 of an IPv4 address is its mapped form
	}
	p, _ := a.Prefix(64)
	return p.Addr().As16()
}

// A source is what the Limiter remembers of one source.
type source struct {
	key          sourceKey
	times        ring[[SourceLimit]time.Duration]
	last         time.Duration // the newest failure
	older, newer *source
}

// A ring holds the times of the last len(T) failures, oldest first from next.
type ring[T [SourceLimit]time.Duration | [OverallLimit]time.Duration] struct {
	t    T
	n    int // how many are held, up to len(t)
	next int // where the next one goes: when full, the oldest
}

func (r *ring[T]) add(now time.Duration) {
	r.t[r.next] = now
	r.next = (r.next + 1) % len(r.t)
	r.n = min(r.n+1, len(r.t))
}

// wait is how long until fewer than len(T) of the held failures count: zero or less when that is
// already so. When the ring is full, its oldest entry is the len(T)-th newest failure; once that
// one stops counting, at most len(T)-1 do.
func (r *ring[T]) wait(now time.Duration) time.Duration {
	if r.n < len(r.t) {
		return 0
	}
	return min(r.t[r.next]+Window-now, Window) // min: a clock that went back never means more than a Window
}

// waitExtra is wait with extra requests in flight, each holding the place of a failure: how long
// until fewer than len(T)-extra of the held failures count. When the requests in flight fill the
// count alone, nothing the window does helps: a second, by when some of them will have ended.
func (r *ring[T]) waitExtra(now time.Duration, extra int) time.Duration {
	m := len(r.t) - extra
	switch {
	case m <= 0:
		return time.Second
	case r.n < m:
		return 0
	}
	newest := (r.next - m + len(r.t)) % len(r.t) // the m-th newest failure
	return min(r.t[newest]+Window-now, Window)
}

// roundUp rounds d up to whole seconds.
func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}
