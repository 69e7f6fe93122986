package state

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// flakyRead is ReadToken that fails with EIO while fails > 0, counting down: a passing read error
// such as EIO or EMFILE, with the file itself unchanged.
type flakyRead struct {
	mu    sync.Mutex
	fails int
	calls int
}

func (f *flakyRead) read(path string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fails > 0 {
		f.fails--
		return "", &fs.PathError{Op: "read", Path: path, Err: syscall.EIO}
	}
	return ReadToken(path)
}

// followWith is NewTokenFollower with the read seam set before the first read.
func followWith(path string, now func() time.Time, read func(string) (string, error)) *Token {
	t := &Token{path: path, now: now, read: read}
	t.Refresh()
	return t
}

// TestTokenHealsAfterReadError_C1: one failed read fails closed, and the next poll (at most 1 s
// later, so within the 2 s of C1) reads the file again and believes it, although the file did not
// change in between.
func TestTokenHealsAfterReadError_C1(t *testing.T) {
	t.Run("C1 first read fails", func(t *testing.T) {
		dir := privateDir(t)
		good, _ := LoadOrCreateToken(dir)
		clock := &fakeClock{t: time.Unix(1000, 0)}
		flaky := &flakyRead{fails: 1}
		tok := followWith(filepath.Join(dir, TokenFile), clock.Now, flaky.read)
		if tok.Match(good) {
			t.Fatal("token believed although its read failed")
		}
		if _, err := tok.Current(); err == nil {
			t.Fatal("Current gave a token although the read failed")
		}
		clock.Add(time.Second) // the next poll
		changed, err := tok.Refresh()
		if err != nil || !changed {
			t.Fatalf("Refresh after a passing error = %v, %v; want a fresh read", changed, err)
		}
		if !tok.Match(good) {
			t.Fatal("token still refused after the file read right again (the error stuck)")
		}
	})
	t.Run("C1 reading a rotation fails", func(t *testing.T) {
		dir := privateDir(t)
		LoadOrCreateToken(dir)
		clock := &fakeClock{t: time.Unix(1000, 0)}
		flaky := &flakyRead{}
		path := filepath.Join(dir, TokenFile)
		tok := followWith(path, clock.Now, flaky.read)
		if err := RotateToken(dir); err != nil {
			t.Fatal(err)
		}
		rotated, _ := ReadToken(path)
		flaky.mu.Lock()
		flaky.fails = 1
		flaky.mu.Unlock()
		if _, err := tok.Refresh(); err == nil {
			t.Fatal("the failed read was not reported")
		}
		if tok.Match(rotated) {
			t.Fatal("token believed although its read failed")
		}
		clock.Add(time.Second)
		if _, err := tok.Refresh(); err != nil || !tok.Match(rotated) {
			t.Fatalf("token not believed once it reads right again: %v", err)
		}
		if cur, _ := tok.Current(); cur != rotated {
			t.Fatal("Current is not the rotated token")
		}
	})
	t.Run("C1 a lasting error is not reported as new each poll", func(t *testing.T) {
		dir := privateDir(t)
		LoadOrCreateToken(dir)
		path := filepath.Join(dir, TokenFile)
		tok := NewTokenFollower(path, nil)
		os.Chmod(path, 0o644)
		if changed, err := tok.Refresh(); !changed || err == nil {
			t.Fatalf("too-open file: %v, %v", changed, err)
		}
		if changed, err := tok.Refresh(); changed || err == nil {
			t.Fatalf("second poll of the same too-open file: changed=%v err=%v; want the same error, not a new one", changed, err)
		}
	})
}

// TestTokenGraceIgnoresClockSteps_C1: the previous token is believed for at most RotationGrace
// after the rotation, whatever the wall clock does.
func TestTokenGraceIgnoresClockSteps_C1(t *testing.T) {
	// rotate sets up a follower of an old token, rotates, and lets the follower see the rotation
	// at seenAfterWrite after the file's mtime (by the fake clock).
	rotate := func(t *testing.T, seenAfterWrite time.Duration) (tok *Token, clock *fakeClock, old string) {
		t.Helper()
		dir := privateDir(t)
		old, _ = LoadOrCreateToken(dir)
		path := filepath.Join(dir, TokenFile)
		clock = &fakeClock{t: time.Now().Round(0)}
		tok = NewTokenFollower(path, clock.Now)
		if err := RotateToken(dir); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		clock.mu.Lock()
		clock.t = st.ModTime().Add(seenAfterWrite)
		clock.mu.Unlock()
		if changed, err := tok.Refresh(); !changed || err != nil {
			t.Fatalf("Refresh = %v, %v", changed, err)
		}
		if !tok.Match(old) {
			t.Fatal("old token refused right after the rotation")
		}
		return tok, clock, old
	}
	t.Run("C1 clock steps back", func(t *testing.T) {
		tok, clock, old := rotate(t, 0)
		clock.Add(-time.Hour)
		if tok.Match(old) {
			t.Fatal("old token believed after the clock stepped back: the grace stretched")
		}
		clock.Add(time.Hour + time.Second)
		if tok.Match(old) {
			t.Fatal("old token believed again once the clock came back")
		}
	})
	t.Run("C1 seen late ends on time", func(t *testing.T) {
		// A follower that notices the rotation 4 s after the write does not extend the grace
		// to 14 s after it.
		tok, clock, old := rotate(t, 4*time.Second)
		clock.Add(RotationGrace - 4*time.Second - time.Millisecond)
		if !tok.Match(old) {
			t.Fatal("old token refused within the grace")
		}
		clock.Add(time.Millisecond)
		if tok.Match(old) {
			t.Fatal("old token believed 10 s after the write")
		}
	})
	t.Run("C1 file from the future", func(t *testing.T) {
		// The wall clock stepped back between the write and the moment it was seen: the grace
		// counts from that moment, never from the mtime ahead of it.
		tok, clock, old := rotate(t, -time.Hour)
		clock.Add(RotationGrace - time.Millisecond)
		if !tok.Match(old) {
			t.Fatal("old token refused within the grace")
		}
		clock.Add(time.Millisecond)
		if tok.Match(old) {
			t.Fatal("old token believed after the grace")
		}
	})
}

// TestTokenMatchFreshAfterAnotherRefresh_C1: a request that carries the new token just after a
// rotation is believed even when another request's re-read (or the poll) reads the rotation
// between this request's miss and its own re-read — which then finds the file unchanged. Before,
// that request was refused 401 (seen in CI, under load, by TestTokenRotationFailsNoRequest_C1).
func TestTokenMatchFreshAfterAnotherRefresh_C1(t *testing.T) {
	dir := privateDir(t)
	if _, err := LoadOrCreateToken(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, TokenFile)
	tok := NewTokenFollower(path, nil)
	if err := RotateToken(dir); err != nil {
		t.Fatal(err)
	}
	fresh, err := ReadToken(path)
	if err != nil {
		t.Fatal(err)
	}
	tok.afterMiss = func() { tok.Refresh() } // another request, first to read the rotation
	if !tok.MatchFresh(fresh) {
		t.Fatal("the new token was refused: another request had read the rotation first")
	}
}
