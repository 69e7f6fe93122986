package reach

// The limiter on the door under concurrency (R6), which the attack tables cannot express.

import (
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
)

// TestParallelGuessesHeldToTen_R6: ten failures from one source, and not one guess more, however
// many of its requests are in flight at once. A pairing attempt records its failure only once
// judged (after scrypt for a live code), so requests that all passed the limiter before the first
// of them failed were each judged: an attacker racing N requests got N guesses, not ten.
func TestParallelGuessesHeldToTen_R6(t *testing.T) {
	d, race := guessingDoor(t)
	if got := race(d.req("POST", "/pair", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 0")); got > SourceLimit {
		t.Errorf("%d guesses from one source were judged at once, want at most %d (R6)", got, SourceLimit)
	}
}

// guessingDoor is a door whose pairing POSTs are each a wrong guess that takes its time: race
// sends 3 × SourceLimit copies of req at once and returns how many were judged.
func guessingDoor(t *testing.T) (*testDoor, func(req string) int32) {
	var judged, refused atomic.Int32
	release := make(chan struct{})
	var door *Door
	d := startTestDoor(t, func(c *Config) {
		c.Pairing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusOK)
				return
			}
			judged.Add(1)
			<-release // the password work of a guess that is being judged
			door.Failure(r)
			w.WriteHeader(http.StatusForbidden)
		})
	})
	door = d.door
	race := func(req string) int32 {
		const n = 3 * SourceLimit
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if d.RawAs(req).Status == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}()
		}
		// Wait until every request was either taken for judging or refused: a guard, not an assertion.
		for deadline := time.Now().Add(doortest.WaitLimit); judged.Load()+refused.Load() < n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
		wg.Wait()
		return judged.Load()
	}
	return d, race
}

// TestAdmitHoldsPlaces_R6: Limiter.Admit's arithmetic. Requests in flight hold places beside the
// failures that count; Retry-After is then the time until the window frees the place they need
// (a second when they fill the count alone); ending them gives the places back.
func TestAdmitHoldsPlaces_R6(t *testing.T) {
	clock := newFakeClock()
	l := NewLimiter(clock.Now)
	a, b := netip.MustParseAddr("192.168.1.30"), netip.MustParseAddr("192.168.1.31")
	for range SourceLimit - 1 {
		l.Failure(a)
	}
	clock.Advance(3 * time.Minute)
	ok, _, end := l.Admit(a)
	if !ok {
		t.Fatal("9 failures, nothing in flight: refused")
	}
	if ok, wait, _ := l.Admit(a); ok || wait != 7*time.Minute {
		t.Errorf("9 failures and 1 in flight: ok %v, Retry-After %v, want refused, 7m0s", ok, wait)
	}
	end()
	end() // a second end gives back nothing more
	if ok, _, end := l.Admit(a); !ok {
		t.Error("the place was not given back")
	} else {
		end()
	}
	var ends []func()
	for range SourceLimit {
		ok, _, end := l.Admit(b)
		if !ok {
			t.Fatal("a fresh source refused before its places were taken")
		}
		ends = append(ends, end)
	}
	if ok, wait, _ := l.Admit(b); ok || wait != time.Second {
		t.Errorf("10 in flight: ok %v, Retry-After %v, want refused, 1s", ok, wait)
	}
	for _, end := range ends {
		end()
	}
	if ok, _, _ := l.Admit(b); !ok {
		t.Error("all ended: still refused")
	}
}
