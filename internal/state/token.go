package state

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// TokenBytes is how many random bytes a fleet token carries (SPEC: at least 32).
const TokenBytes = 32

// RotationGrace is how long the previous token is still believed after a rotation (SPEC C1).
const RotationGrace = 10 * time.Second

// NewToken returns a fresh token: TokenBytes from crypto/rand, base64url without padding.
func NewToken() (string, error) {
	b := make([]byte, TokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseToken validates the contents of a token file: one line of base64url that decodes to at least
// TokenBytes bytes. The error never contains the token.
func ParseToken(data []byte) (string, error) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	data = bytes.TrimSuffix(data, []byte("\r"))
	if bytes.ContainsAny(data, "\r\n \t") {
		return "", errors.New("not one line of base64url")
	}
	s := string(bytes.TrimRight(data, "="))
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", errors.New("not base64url")
	}
	if len(raw) < TokenBytes {
		return "", fmt.Errorf("too short: %d bytes, want at least %d", len(raw), TokenBytes)
	}
	return s, nil
}

// ReadToken reads and validates the token file at path, which must be a private file (F1; see
// ReadPrivateFile).
func ReadToken(path string) (string, error) {
	tok, _, err := readTokenStamped(path)
	return tok, err
}

// readTokenStamped is ReadToken, and the stamp of the file it read (from the fstat of the open
// file, taken before its bytes were read).
func readTokenStamped(path string) (string, fileStamp, error) {
	data, st, err := readPrivate(path)
	if err != nil {
		return "", fileStamp{}, err
	}
	tok, err := ParseToken(data)
	if err != nil {
		return "", fileStamp{}, fmt.Errorf("%s: %w", path, err)
	}
	return tok, stampOf(st, nil), nil
}

// LoadOrCreateToken returns the fleet token in fleetDir, creating the folder and a fresh token
// file on first use. An existing file that is too open or does not parse is an error; it is never
// replaced.
func LoadOrCreateToken(fleetDir string) (string, error) {
	return LoadOrCreateTokenFile(fleetDir, TokenFile)
}

// LoadOrCreateTokenFile is LoadOrCreateToken for any token file of fleetDir (TokenFile,
// MetricsTokenFile): the same folder rule, randomness, format, mode and atomic write.
func LoadOrCreateTokenFile(fleetDir, name string) (string, error) {
	if err := EnsureDir(fleetDir); err != nil {
		return "", err
	}
	path := filepath.Join(fleetDir, name)
	tok, err := ReadToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	tok, err = NewToken()
	if err != nil {
		return "", err
	}
	if err := WriteFileAtomic(path, []byte(tok+"\n")); err != nil {
		return "", err
	}
	return tok, nil
}

// RotateToken writes a fresh token to fleetDir atomically. Readers that watch the file (Token)
// believe the old one for RotationGrace more.
func RotateToken(fleetDir string) error {
	if err := EnsureDir(fleetDir); err != nil {
		return err
	}
	tok, err := NewToken()
	if err != nil {
		return err
	}
	return WritePrivateFile(filepath.Join(fleetDir, TokenFile), []byte(tok+"\n"))
}

// A Token follows the fleet token file: it re-reads the file when it changes (Refresh, or Watch
// polling), and remembers the previous token for RotationGrace so that no request fails during a
// rotation. When the file is unreadable, too open or malformed, no token is believed at all (fail
// closed) until it is good again; a failed read is tried again at the next Refresh, whether or not
// the file changed, so that a passing error (EIO, EMFILE) heals at the next poll (SPEC C1).
//
// The file is read as ReadPrivateFile reads it (no symlink followed, the rule judged on the file
// actually opened), and the stamp kept to decide whether to read again is that file's own (its
// fstat, taken before its bytes are read): a file swapped in at the path between the cheap Lstat
// and the read is never recorded under the stamp of the file that was swapped out, so whatever is
// at the path afterwards is read again.
//
// The grace is a deadline on the monotonic clock, set when this follower sees the rotation: a step
// of the wall clock (NTP, a suspended laptop, a hand-set date) never stretches it. It ends at the
// earlier of two limits, so that the old token is never believed longer than RotationGrace after
// it stopped being current:
//
//   - the file's age: a follower that sees the rotation late (it polls, so up to an interval after
//     the write) takes the file's age at that moment (wall now minus mtime, read once) off the
//     grace. That age is clamped to [0, RotationGrace]: an mtime ahead of the clock (the clock
//     stepped back between the write and the moment it was seen) counts as a rotation that just
//     happened.
//   - the last confirmation: the mtime is that of the newest write only. When two rotations
//     (A→B→C) land between two looks at the file, A stopped being current at the first, which
//     the mtime does not tell; what the follower does know is the last moment it confirmed A
//     was still in the file (a Refresh that found the stamp unchanged, or read A), on its own
//     clock (monotonic). A was replaced after that moment, so its grace ends at that moment plus
//     RotationGrace at the latest. (After a single rotation this ends the grace up to one poll
//     interval early: still long enough for a peer that polls every second, and never longer.)
//
// A clock that is seen to run backwards past the moment of the rotation (possible only with a
// clock that has no monotonic reading) ends the grace.
type Token struct {
	path string
	now  func() time.Time
	// read is readTokenStamped: the token and the stamp of the file it was read from; a seam for
	// tests.
	read func(path string) (string, fileStamp, error)
	// afterMiss, if not nil, runs in MatchFresh between the miss and the re-read: a seam for
	// tests, where another request's Refresh happens.
	afterMiss func()

	mu        sync.Mutex
	stamp     fileStamp // of the file of the last good read; zero while in error, so the next Refresh reads again
	current   string
	confirmed time.Time // when current was last known to be in the file (now() before that look)
	previous  string
	prevSeen  time.Time // when the rotation away from previous was seen (with a monotonic reading)
	prevUntil time.Time // previous is believed before this, on the same clock
	err       error
}

type fileStamp struct {
	ok    bool
	mod   time.Time
	size  int64
	ino   uint64
	mode  fs.FileMode
	owner uint32
}

// NewTokenFollower follows the token file at path. now is the clock (nil: time.Now, whose monotonic
// reading keeps the grace safe from clock steps). It reads the file once.
func NewTokenFollower(path string, now func() time.Time) *Token {
	if now == nil {
		now = time.Now
	}
	t := &Token{path: path, now: now, read: readTokenStamped}
	t.Refresh()
	return t
}

// Path is the followed file.
func (t *Token) Path() string { return t.path }

// Refresh re-reads the file if its stamp (mtime, size, inode, mode, owner) changed, or if the last
// read failed. It reports whether what the follower believes changed (a new token, a new error, or
// the end of one) and the current error, if any. A lasting error is reported as changed once.
func (t *Token) Refresh() (changed bool, err error) {
	// The moment of this look, taken before it: what it finds was in the file at this moment or
	// later, so a confirmation dated now is never late.
	looked := t.now()
	st, statErr := os.Lstat(t.path)
	t.mu.Lock()
	defer t.mu.Unlock()
	if stamp := stampOf(st, statErr); stamp.ok && stamp == t.stamp && t.err == nil {
		t.confirmed = looked // the file that held current is still there, unchanged
		return false, nil
	}
	tok, stamp, err := t.read(t.path)
	if err != nil {
		changed = t.err == nil || t.err.Error() != err.Error()
		t.stamp = fileStamp{}
		t.current, t.confirmed, t.err = "", time.Time{}, err
		t.previous, t.prevSeen, t.prevUntil = "", time.Time{}, time.Time{}
		return changed, err
	}
	// The stamp of the file actually read, taken before its bytes were: a write in place after
	// that changes it again, and a file swapped in or out at the path (after the Lstat above,
	// or after the read) differs from it, so the next Refresh reads once more.
	t.stamp = stamp
	changed = t.err != nil || tok != t.current
	if tok != t.current {
		if t.current != "" {
			seen := looked
			age := seen.Sub(stamp.mod) // wall clock, read once; see the type's comment
			age = max(0, min(age, RotationGrace))
			until := seen.Add(RotationGrace - age)
			// current was replaced after it was last confirmed: see the type's comment.
			if last := t.confirmed.Add(RotationGrace); !t.confirmed.IsZero() && last.Before(until) {
				until = last
			}
			t.previous, t.prevSeen, t.prevUntil = t.current, seen, until
		}
		t.current = tok
	}
	t.confirmed = looked
	t.err = nil
	return changed, nil
}

// Current returns the token to send, or the reason there is none.
func (t *Token) Current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return "", t.err
	}
	if t.current == "" {
		return "", errors.New("no fleet token")
	}
	return t.current, nil
}

// Match reports, in constant time with respect to the token contents, whether got is the current
// token or the previous one within its grace.
func (t *Token) Match(got string) bool {
	t.mu.Lock()
	// The clock is read under the lock: a Refresh that set prevSeen before this Match took the
	// lock set it no later than now, so a concurrent rotation never looks like a clock that ran
	// backwards.
	now := t.now()
	if t.previous != "" && (!now.Before(t.prevUntil) || now.Before(t.prevSeen)) {
		// Over, for good: a clock that comes back does not revive it.
		t.previous, t.prevSeen, t.prevUntil = "", time.Time{}, time.Time{}
	}
	cur, prev, err := t.current, t.previous, t.err
	t.mu.Unlock()
	if err != nil || cur == "" {
		return false
	}
	ok := subtle.ConstantTimeCompare([]byte(got), []byte(cur)) == 1
	if prev != "" {
		ok = subtle.ConstantTimeCompare([]byte(got), []byte(prev)) == 1 || ok
	}
	return ok
}

// MatchFresh is Match, but when got does not match it re-reads the file (one stat) and tries
// again: a peer that noticed a rotation first (the supervisor sending the new token) is not
// refused in the moment before this follower's own poll. It tries again whether or not its own
// re-read found a change: another request's re-read (or the poll) may have read the rotation
// between this one's miss and its re-read, which then finds nothing new.
func (t *Token) MatchFresh(got string) bool {
	if t.Match(got) {
		return true
	}
	if t.afterMiss != nil {
		t.afterMiss()
	}
	t.Refresh()
	return t.Match(got)
}

// Watch calls Refresh every interval until stop is closed. onErr, if not nil, is told of each new
// error (never the token).
func (t *Token) Watch(stop <-chan struct{}, interval time.Duration, onErr func(error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if changed, err := t.Refresh(); changed && err != nil && onErr != nil {
				onErr(err)
			}
		}
	}
}

func stampOf(st fs.FileInfo, err error) fileStamp {
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{ok: true, mod: st.ModTime(), size: st.Size(), mode: st.Mode()}
	fillSys(&s, st)
	return s
}
