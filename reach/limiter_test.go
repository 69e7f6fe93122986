package reach

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	stranger = netip.MustParseAddr("192.168.1.50")
	other    = netip.MustParseAddr("192.168.1.51")
)

// fail records n failures from src, each allowed first as the door would.
func fail(t *testing.T, l *Limiter, src netip.Addr, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if ok, ra := l.Allow(src); !ok {
			t.Fatalf("failure %d from %v refused (Retry-After %v)", i+1, src, ra)
		}
		l.Failure(src)
	}
}

func wantRefused(t *testing.T, l *Limiter, src netip.Addr, retry time.Duration) {
	t.Helper()
	ok, ra := l.Allow(src)
	if ok || ra != retry {
		t.Fatalf("Allow(%v) = %v, %v; want refused with Retry-After %v", src, ok, ra, retry)
	}
}

func wantAllowed(t *testing.T, l *Limiter, src netip.Addr) {
	t.Helper()
	if ok, ra := l.Allow(src); !ok {
		t.Fatalf("Allow(%v) refused with Retry-After %v", src, ra)
	}
}

// TestLimiterTenthEleventh_R6: ten failures from one source are let through; the eleventh request
// within ten minutes of the first is refused, with Retry-After the whole seconds until the first
// stops counting; other sources are not affected.
func TestLimiterTenthEleventh_R6(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	fail(t, l, stranger, 9)
	wantAllowed(t, l, stranger) // the 10th
	l.Failure(stranger)
	wantRefused(t, l, stranger, 10*time.Minute) // the 11th, at once
	wantAllowed(t, l, other)
	c.Advance(3 * time.Minute)
	wantRefused(t, l, stranger, 420*time.Second)
	c.Advance(500 * time.Millisecond)
	wantRefused(t, l, stranger, 420*time.Second) // 419.5 s rounds up
	c.Advance(419*time.Second + 499*time.Millisecond)
	wantRefused(t, l, stranger, time.Second) // 1 ms left: never Retry-After 0
	c.Advance(time.Millisecond)
	wantAllowed(t, l, stranger) // exactly ten minutes after the first: it no longer counts
}

// TestLimiterSlidingWindow_R6: the window slides: failures spread over time let the next one
// through only when the oldest that still counts has aged ten minutes, so no ten-minute span ever
// holds more than ten.
func TestLimiterSlidingWindow_R6(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	for i := 0; i < SourceLimit; i++ { // one a minute, 0m..9m
		fail(t, l, stranger, 1)
		c.Advance(time.Minute)
	}
	// now t0+10m: the t0 failure stopped counting, nine still do.
	wantAllowed(t, l, stranger)
	l.Failure(stranger)
	// ten again (1m..10m): the next waits until the 1m one stops counting, at 11m.
	wantRefused(t, l, stranger, time.Minute)
	c.Advance(time.Minute)
	wantAllowed(t, l, stranger)
}

// TestLimiterExpiry_R6: once ten minutes pass the source is let through again, and is forgotten.
func TestLimiterExpiry_R6(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	fail(t, l, stranger, SourceLimit)
	wantRefused(t, l, stranger, Window)
	c.Advance(Window)
	wantAllowed(t, l, stranger)
	if n := len(l.sources); n != 0 {
		t.Fatalf("%d sources remembered after their window", n)
	}
	fail(t, l, stranger, SourceLimit) // a fresh ten
	wantRefused(t, l, stranger, Window)
}

// TestLimiterOverall_R6: fifty failures across sources close the door to strangers — a 51st,
// fresh source is refused — until the first of them stops counting. (A paired device is never
// asked: the door lets it through, R6.)
func TestLimiterOverall_R6(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	for i := 0; i < OverallLimit; i++ {
		fail(t, l, netip.AddrFrom4([4]byte{10, 0, byte(i / 5), byte(i)}), 1)
		c.Advance(time.Second)
	}
	fresh := netip.MustParseAddr("172.16.9.9")
	wantRefused(t, l, fresh, Window-50*time.Second) // now is t0+50s: until the first of the fifty stops counting
	c.Advance(Window)
	wantAllowed(t, l, fresh)
}

// TestLimiterSourceKey_R6: IPv6 sources are counted by /64, IPv4-mapped IPv6 as its IPv4 address,
// zones ignored.
func TestLimiterSourceKey_R6(t *testing.T) {
	for _, row := range []struct {
		name        string
		fail, ask   string
		shareACount bool
	}{
		{"R6 same /64", "2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", true},
		{"R6 other /64", "2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"R6 v4-mapped is v4", "::ffff:192.168.1.50", "192.168.1.50", true},
		{"R6 v4 is v4-mapped", "192.168.1.50", "::ffff:192.168.1.50", true},
		{"R6 v4 neighbours", "192.168.1.50", "192.168.1.51", false},
		{"R6 zone ignored", "fe80::1%eth0", "fe80::2%eth1", true},
		{"R6 v4 is not ::/64", "0.0.0.1", "::1", false},
		{"R6 v4 is not ::ffff:0:0/64's other end", "192.168.1.50", "::ffff:0:0:1", false},
	} {
		t.Run(row.name, func(t *testing.T) {
			c := newFakeClock()
			l := NewLimiter(c.Now)
			fail(t, l, netip.MustParseAddr(row.fail), SourceLimit)
			ok, _ := l.Allow(netip.MustParseAddr(row.ask))
			if ok == row.shareACount {
				t.Fatalf("%s after ten failures from %s: allowed %v", row.ask, row.fail, ok)
			}
		})
	}
}

// TestLimiterInvalidAddr_R6: an address that is not one (which no TCP peer is) is refused.
func TestLimiterInvalidAddr_R6(t *testing.T) {
	l := NewLimiter(nil)
	wantRefused(t, l, netip.Addr{}, Window)
	l.Failure(netip.Addr{}) // counts overall only; must not panic
	if len(l.sources) != 0 {
		t.Fatal("an invalid address was remembered")
	}
}

// TestLimiterPeerNotHeader_R6: over a real connection, the count follows the TCP peer: a different
// X-Forwarded-For, Forwarded or X-Real-IP on every request changes nothing, and the eleventh is
// 429 with Retry-After 600.
func TestLimiterPeerNotHeader_R6(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src := PeerAddr(r)
		if ok, ra := l.Allow(src); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(ra/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		l.Failure(src) // every request here is a wrong password
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := 1; i <= SourceLimit+1; i++ {
		fmt.Fprintf(conn, "POST /pair HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.%d\r\nForwarded: for=198.51.100.%d\r\nX-Real-IP: 192.0.2.%d\r\nContent-Length: 0\r\n\r\n", i, i, i)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want, retry := http.StatusUnauthorized, ""
		if i == SourceLimit+1 {
			want, retry = http.StatusTooManyRequests, "600"
		}
		if resp.StatusCode != want || resp.Header.Get("Retry-After") != retry {
			t.Fatalf("request %d: %d Retry-After %q; want %d %q", i, resp.StatusCode, resp.Header.Get("Retry-After"), want, retry)
		}
	}
	if n := len(l.sources); n != 1 {
		t.Fatalf("%d sources counted; want 1, the TCP peer", n)
	}
	if _, ok := l.sources[keyOf(netip.MustParseAddr("127.0.0.1"))]; !ok {
		t.Fatal("the TCP peer 127.0.0.1 is not the source counted")
	}
}

// checkList checks that the age list and the map hold the same sources, oldest first.
func checkList(t *testing.T, l *Limiter) {
	t.Helper()
	n := 0
	var prev *source
	for s := l.oldest; s != nil; s = s.newer {
		if s.older != prev || l.sources[s.key] != s || (prev != nil && prev.last > s.last) {
			t.Fatalf("age list broken at source %d", n)
		}
		prev, n = s, n+1
	}
	if prev != l.newest || n != len(l.sources) {
		t.Fatalf("age list holds %d, map %d", n, len(l.sources))
	}
}

// TestLimiterMemory_R6: a flood of 100,000 distinct sources keeps at most MaxSources in memory —
// under 4 MiB of heap — when every one fails; through Allow, strangers get no further than
// OverallLimit.
func TestLimiterMemory_R6(t *testing.T) {
	const flood = 100_000
	src := func(i int) netip.Addr {
		if i%2 == 0 {
			return netip.AddrFrom4([4]byte{byte(1 + i>>16), byte(i >> 8), byte(i), 1})
		}
		a := netip.MustParseAddr("2001:db8::").As16()
		a[4], a[5], a[6], a[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i) // a /64 each
		return netip.AddrFrom16(a)
	}

	t.Run("R6 every source fails", func(t *testing.T) {
		c := newFakeClock()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := NewLimiter(c.Now)
		for i := 0; i < flood; i++ {
			l.Failure(src(i))
			if i%1000 == 0 {
				c.Advance(time.Millisecond)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(l.sources); n != MaxSources {
			t.Fatalf("%d sources remembered; want the cap %d", n, MaxSources)
		}
		checkList(t, l)
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
			t.Errorf("heap grew by %d bytes for %d sources; want under 4 MiB", grew, MaxSources)
		} else {
			t.Logf("heap grew by %d bytes for %d sources", grew, MaxSources)
		}
		// The newest are the ones kept.
		if _, ok := l.sources[keyOf(src(flood-1))]; !ok {
			t.Error("the newest source was forgotten")
		}
		if _, ok := l.sources[keyOf(src(0))]; ok {
			t.Error("the oldest source was kept")
		}
		c.Advance(Window)
		wantAllowed(t, l, src(1))
		if n := len(l.sources); n != 0 {
			t.Errorf("%d sources remembered after the window", n)
		}
		runtime.KeepAlive(l)
	})

	t.Run("R6 a flood through Allow", func(t *testing.T) {
		c := newFakeClock()
		l := NewLimiter(c.Now)
		refused := 0
		for i := 0; i < flood; i++ {
			if ok, _ := l.Allow(src(i)); !ok {
				refused++
				continue
			}
			l.Failure(src(i))
		}
		if refused != flood-OverallLimit || len(l.sources) != OverallLimit {
			t.Fatalf("%d refused, %d remembered; want %d and %d", refused, len(l.sources), flood-OverallLimit, OverallLimit)
		}
		wantRefused(t, l, netip.MustParseAddr("192.168.1.77"), Window)
	})
}

// TestLimiterConcurrent_R6: parallel callers (run with -race) leave a consistent Limiter: every
// source that failed ten times is refused and the books balance.
func TestLimiterConcurrent_R6(t *testing.T) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				src := netip.AddrFrom4([4]byte{10, byte(g), byte(i % 20), 1})
				l.Allow(src)
				l.Failure(src)
				if i%100 == 0 {
					c.Advance(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	checkList(t, l)
	if len(l.sources) != 8*20 {
		t.Fatalf("%d sources; want 160", len(l.sources))
	}
	for g := 0; g < 8; g++ {
		src := netip.AddrFrom4([4]byte{10, byte(g), 0, 1})
		if ok, _ := l.Allow(src); ok {
			t.Fatalf("%v failed 25 times and is allowed", src)
		}
	}
}

// BenchmarkAllowFailure is the cost of one failed request: Allow, then Failure, over 1,000
// sources.
func BenchmarkAllowFailure(b *testing.B) {
	c := newFakeClock()
	l := NewLimiter(c.Now)
	srcs := make([]netip.Addr, 1000)
	for i := range srcs {
		srcs[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		src := srcs[i%len(srcs)]
		l.Allow(src)
		l.Failure(src)
		i++
	}
}
