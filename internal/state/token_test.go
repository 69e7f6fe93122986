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

func (f *flakyRead) read(path string) (string, fileStamp, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fails > 0 {
		f.fails--
		return "", fileStamp{}, &fs.PathError{Op: "read", Path: path, Err: syscall.EIO}
	}
	return readTokenStamped(path)
}

// followWith is NewTokenFollower with the read seam set before the first read.
func followWith(path string, now func() time.Time, read func(string) (string, fileStamp, error)) *Token {
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
		// The rotation is written at the moment the follower last looked (its last
		// confirmation of the old token), so that only the file's age limits the grace here.
		written := clock.Now()
		if err := os.Chtimes(path, written, written); err != nil {
			t.Fatal(err)
		}
		clock.mu.Lock()
		clock.t = written.Add(seenAfterWrite)
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

// TestTokenStampIsTheFileRead_C1_F1: a follower looks at the file's stamp (Lstat) to decide
// whether to read it, and reads it after that. When another file is at the path at the moment of
// the read, swapped in after the Lstat and out again after the read, the follower records the
// stamp of the file it read, not the one it looked at: the next poll sees that the file at the
// path is not the one read, and reads it. Before, the stamp of the look was recorded with the
// swapped-in file's token, and the follower kept believing that token, refusing the real one,
// for as long as the real file stayed as it was.
func TestTokenStampIsTheFileRead_C1_F1(t *testing.T) {
	dir := privateDir(t)
	real, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, TokenFile)
	other, aside := filepath.Join(dir, ".other"), filepath.Join(dir, ".aside")
	otherTok, _ := NewToken()
	if err := os.WriteFile(other, []byte(otherTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tok := NewTokenFollower(path, clock.Now)
	before, _ := os.Lstat(path)

	// Next read: the other file is at the path while it is read, and the real file (the same
	// inode, mtime and size: renames change none of them) is back right after.
	swap := true
	mv := func(from, to string) {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	tok.read = func(p string) (string, fileStamp, error) {
		if !swap {
			return readTokenStamped(p)
		}
		swap = false
		mv(p, aside)
		mv(other, p)
		defer func() { mv(p, other); mv(aside, p) }()
		return readTokenStamped(p)
	}
	tok.stamp = fileStamp{} // the file "changed" at the last look: the next Refresh reads
	if _, err := tok.Refresh(); err != nil {
		t.Fatal(err)
	}
	if cur, _ := tok.Current(); cur != otherTok {
		t.Fatal("the swap did not land in the read")
	}
	if after, _ := os.Lstat(path); !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("the real file is not back as it was")
	}

	clock.Add(time.Second) // the next poll
	if changed, err := tok.Refresh(); !changed || err != nil {
		t.Fatalf("next poll = %v, %v; want the real file read again", changed, err)
	}
	if cur, _ := tok.Current(); cur != real || !tok.Match(real) {
		t.Fatal("the real token is not current after the next poll: the stamp recorded was the real file's")
	}
}

// TestTokenGraceEndsAtLastConfirmation_C1: the follower confirms the current token at every poll;
// when it then finds a newer token, the old one stopped being current after that confirmation,
// whatever the file's mtime says (it is the mtime of the newest write only), so it is believed
// for at most RotationGrace after the confirmation. The follower's own clock counts, even when
// the file's mtime is far ahead of it.
func TestTokenGraceEndsAtLastConfirmation_C1(t *testing.T) {
	dir := privateDir(t)
	old, _ := LoadOrCreateToken(dir)
	path := filepath.Join(dir, TokenFile)
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tok := NewTokenFollower(path, clock.Now)
	clock.Add(3 * time.Second)
	if changed, err := tok.Refresh(); changed || err != nil { // a poll that finds nothing new
		t.Fatalf("poll of an unchanged file = %v, %v", changed, err)
	}
	confirmed := clock.Now()
	if err := RotateToken(dir); err != nil {
		t.Fatal(err)
	}
	if err := RotateToken(dir); err != nil {
		t.Fatal(err)
	}
	mtime := confirmed.Add(5 * time.Second) // the last write: the first came before it
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	clock.Add(6 * time.Second) // seen 1 s after the last write
	if changed, err := tok.Refresh(); !changed || err != nil {
		t.Fatalf("Refresh = %v, %v", changed, err)
	}
	clock.mu.Lock()
	clock.t = confirmed.Add(RotationGrace - time.Millisecond)
	clock.mu.Unlock()
	if !tok.Match(old) {
		t.Fatal("old token refused within RotationGrace of its last confirmation")
	}
	clock.Add(time.Millisecond)
	if tok.Match(old) {
		t.Fatal("old token believed RotationGrace after it was last confirmed (the grace followed the newest write)")
	}
	cur, _ := tok.Current()
	if cur == old || !tok.Match(cur) {
		t.Fatal("the newest token is not current")
	}
}
