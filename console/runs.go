package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/phase-console/fleet/internal/state"
)

// MaxRuns bounds how many runs may be live at once.
const MaxRuns = 1024

// ErrTooManyRuns is returned by Start when MaxRuns runs are live.
var ErrTooManyRuns = errors.New("too many live runs")

// Runs holds the bearer of every live run, for the permission hook (C6). A run's token is dead the
// moment End returns: Match and End take the same lock, so no request is judged with a token of a
// run that has ended. The zero value is ready to use; it is safe for concurrent use.
type Runs struct {
	mu   sync.Mutex
	live map[string]string // id → token
}

// Start begins a run and returns its id (16 hex digits) and its token (32 random bytes,
// base64url). The token is shown to the run once; it is never logged.
func (rs *Runs) Start() (id, token string, err error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	id = hex.EncodeToString(b[:])
	token, err = state.NewToken()
	if err != nil {
		return "", "", err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.live == nil {
		rs.live = make(map[string]string)
	}
	if len(rs.live) >= MaxRuns {
		return "", "", ErrTooManyRuns
	}
	if _, dup := rs.live[id]; dup {
		return "", "", errors.New("run id collision")
	}
	rs.live[id] = token
	return id, token, nil
}

// End ends the run id; its token is refused from now on. It reports whether the run was live.
func (rs *Runs) End(id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	_, ok := rs.live[id]
	delete(rs.live, id)
	return ok
}

// Match returns the live run whose token is token. Every live token is compared, each in constant
// time, whatever matches; an empty token matches nothing.
func (rs *Runs) Match(token string) (id string, ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	found := 0
	for rid, t := range rs.live {
		if subtle.ConstantTimeCompare([]byte(token), []byte(t)) == 1 {
			id, found = rid, 1
		}
	}
	return id, found == 1 && token != ""
}
