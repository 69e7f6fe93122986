package reach

// Red-team tests of the limiter on the door: concurrency, which the attack tables cannot express.

import (
	"net/http"
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
	const n = 3 * SourceLimit
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
	req := d.req("POST", "/pair", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 0")
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
	if got := judged.Load(); got > SourceLimit {
		t.Errorf("%d guesses from one source were judged at once, want at most %d (R6)", got, SourceLimit)
	}
}
