package reach

// Red-team tests of the limiter on the door: concurrency, which the attack tables cannot express.

import (
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// TestDeviceParallelGuessesHeldToTen_R6: a paired device's cookie buys no more pairing guesses
// than a stranger gets. A device's request holds no failure's place in the limiter (its
// long-lived streams must not fill its own count), and the pairing POST is open to a device like
// to anyone: the holder of a device's cookie got as many pairing guesses judged as it sent at
// once, and more than ten failures of one source fell within ten minutes. A pairing POST now
// holds its place whoever sends it (Limiter.AdmitGuess).
func TestDeviceParallelGuessesHeldToTen_R6(t *testing.T) {
	d, race := guessingDoor(t)
	_, cookie := d.pair("phone")
	if got := race(d.req("POST", "/pair", cookie, "Content-Type: application/x-www-form-urlencoded", "Content-Length: 0")); got > SourceLimit {
		t.Errorf("%d pairing guesses sent at once with a device's cookie were judged, want at most %d (R6)", got, SourceLimit)
	}
	// The guesses judged were failures of the device's own source, which now holds back its
	// other requests too (R6: a device is held back by its own source's count).
	if r := d.raw(d.req("GET", "/c/alpha/x", cookie)); r.status != http.StatusTooManyRequests {
		t.Errorf("after ten failed guesses the device's own request: %d, want 429", r.status)
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
				if d.raw(req).status == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}()
		}
		// Wait until every request was either taken for judging or refused: a guard, not an assertion.
		for deadline := time.Now().Add(waitLimit); judged.Load()+refused.Load() < n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
		wg.Wait()
		return judged.Load()
	}
	return d, race
}

// TestAdmitGuessHoldsADevicesPlace_R6: Limiter.AdmitGuess's arithmetic. A guess holds the place
// of one failure whoever sends it, a device too, so SourceLimit guesses in flight close the
// source to more (Retry-After a second); a device's guess is held back by its own source only,
// never by the overall count; ending it gives the place back.
func TestAdmitGuessHoldsADevicesPlace_R6(t *testing.T) {
	clock := newFakeClock()
	l := NewLimiter(clock.Now)
	dev := netip.MustParseAddr("192.168.1.30")
	var ends []func()
	for range SourceLimit {
		ok, _, end := l.AdmitGuess(dev, true)
		if !ok {
			t.Fatal("a device's guess refused before its source's places were taken")
		}
		ends = append(ends, end)
	}
	if ok, wait, _ := l.AdmitGuess(dev, true); ok || wait != time.Second {
		t.Errorf("10 of a device's guesses in flight: ok %v, Retry-After %v, want refused, 1s", ok, wait)
	}
	if ok, _, _ := l.Admit(dev, true); !ok {
		t.Error("a device's request that guesses nothing was held back by its guesses in flight")
	}
	for _, end := range ends {
		end()
	}
	for i := range OverallLimit { // strangers fill the overall count
		l.Failure(netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(i%250 + 1)}))
	}
	if ok, _, _ := l.AdmitGuess(netip.MustParseAddr("192.168.1.31"), false); ok {
		t.Error("a stranger's guess admitted past the overall count")
	}
	ok, _, end := l.AdmitGuess(dev, true)
	if !ok {
		t.Fatal("a device's guess held back by the overall count (R6: only by its own source's)")
	}
	end()
}

// TestAdmitHoldsPlaces_R6: Limiter.Admit's arithmetic. Requests in flight hold places beside the
// failures that count; Retry-After is then the time until the window frees the place they need
// (a second when they fill the count alone); ending them gives the places back; a device is held
// by its own source's failures only, never by requests in flight.
func TestAdmitHoldsPlaces_R6(t *testing.T) {
	clock := newFakeClock()
	l := NewLimiter(clock.Now)
	a, b := netip.MustParseAddr("192.168.1.30"), netip.MustParseAddr("192.168.1.31")
	for range SourceLimit - 1 {
		l.Failure(a)
	}
	clock.Advance(3 * time.Minute)
	ok, _, end := l.Admit(a, false)
	if !ok {
		t.Fatal("9 failures, nothing in flight: refused")
	}
	if ok, wait, _ := l.Admit(a, false); ok || wait != 7*time.Minute {
		t.Errorf("9 failures and 1 in flight: ok %v, Retry-After %v, want refused, 7m0s", ok, wait)
	}
	if ok, _, _ := l.Admit(a, true); !ok {
		t.Error("a device was held back by a stranger's request in flight")
	}
	end()
	end() // a second end gives back nothing more
	if ok, _, end := l.Admit(a, false); !ok {
		t.Error("the place was not given back")
	} else {
		end()
	}
	var ends []func()
	for range SourceLimit {
		ok, _, end := l.Admit(b, false)
		if !ok {
			t.Fatal("a fresh source refused before its places were taken")
		}
		ends = append(ends, end)
	}
	if ok, wait, _ := l.Admit(b, false); ok || wait != time.Second {
		t.Errorf("10 in flight: ok %v, Retry-After %v, want refused, 1s", ok, wait)
	}
	for _, end := range ends {
		end()
	}
	if ok, _, _ := l.Admit(b, false); !ok {
		t.Error("all ended: still refused")
	}
}
