package logread

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
)

var t0 = time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)

// line is the access-log line of request n: by login, to console, n minutes after t0.
func line(n int, login, console string) string {
	b, err := audit.AppendLine(nil, &audit.Entry{
		Time: t0.Add(time.Duration(n) * time.Minute), Door: audit.DoorLoopback, Login: login, Console: console,
		Method: "GET", Path: fmt.Sprintf("/r%d", n), Status: 200, Bytes: 5, Duration: 12 * time.Millisecond,
		Peer: netip.MustParseAddr("100.101.102.103"), Identified: true,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// lines is requests from..to (inclusive) by alice to alpha.
func lines(from, to int) string {
	var b strings.Builder
	for n := from; n <= to; n++ {
		b.WriteString(line(n, "alice@example.com", "alpha"))
	}
	return b.String()
}

// rotatedName is the name lumberjack v2 gives access.log when it rotates it at t (UTC).
func rotatedName(dir string, t time.Time) string {
	return filepath.Join(dir, "access-"+t.UTC().Format("2006-01-02T15-04-05.000")+".log")
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// rotate does what lumberjack does when it rotates: the current file renamed to its rotated name,
// a new empty one created in its place.
func rotate(t *testing.T, path string, at time.Time) {
	t.Helper()
	if err := os.Rename(path, rotatedName(filepath.Dir(path), at)); err != nil {
		t.Fatal(err)
	}
	write(t, path, "")
}

// collect is a Reader on path that keeps the paths of the lines it is handed and what it skipped.
type collect struct {
	Reader
	got     []string
	skipped []string
}

func newCollect(path string) *collect {
	c := &collect{}
	c.Path = path
	c.Line = func(raw []byte, l *audit.Line, _ time.Time) error {
		if !bytes.Contains(raw, []byte(`"path":"`+l.Path+`"`)) {
			return fmt.Errorf("raw %q is not the line of %q", raw, l.Path)
		}
		c.got = append(c.got, l.Path)
		return nil
	}
	c.Skipped = func(err error) { c.skipped = append(c.skipped, err.Error()) }
	return c
}

// paths is /rN for N in from..to.
func paths(from, to int) []string {
	var p []string
	for n := from; n <= to; n++ {
		p = append(p, fmt.Sprintf("/r%d", n))
	}
	return p
}

// TestFilesOldestFirst_G3: the rotated files by the time in their names (not by name order, not
// by modification time), then the current file; names lumberjack does not give are not the log's;
// a rotated file being gzipped counts once.
func TestFilesOldestFirst_G3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	times := []time.Time{t0.Add(3 * time.Hour), t0, t0.Add(26 * time.Hour), t0.Add(time.Hour)}
	for _, at := range times {
		write(t, rotatedName(dir, at), "")
	}
	write(t, rotatedName(dir, t0.Add(time.Hour))+".gz", "") // the one just above, being gzipped
	write(t, rotatedName(dir, t0.Add(2*time.Hour))+".gz", "")
	for _, other := range []string{"access-2026-12-01.log", "access-old.log", "access.log.1", "other-2026-12-01T22-00-00.000.log", "access-2026-12-01T22-00-00.000.txt"} {
		write(t, filepath.Join(dir, other), "")
	}
	write(t, path, "")
	got, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		rotatedName(dir, t0), rotatedName(dir, t0.Add(time.Hour)), rotatedName(dir, t0.Add(2*time.Hour)) + ".gz",
		rotatedName(dir, t0.Add(3*time.Hour)), rotatedName(dir, t0.Add(26*time.Hour)), path,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Files:\n got %q\nwant %q", got, want)
	}

	if _, err := Files(filepath.Join(t.TempDir(), FileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no log: %v, want fs.ErrNotExist", err)
	}
	if _, err := Files(filepath.Join(t.TempDir(), "missing", FileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no folder: %v, want fs.ErrNotExist", err)
	}
}

// TestReadOldestFirstAcrossRotatedFiles_G3: every line once, oldest first, the rotated files
// (gzipped ones too) before the current one; a last line without its newline is read.
func TestReadOldestFirstAcrossRotatedFiles_G3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write(t, rotatedName(dir, t0.Add(2*time.Hour)), lines(4, 6))
	write(t, rotatedName(dir, t0.Add(time.Hour)), lines(1, 3))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(lines(7, 8)))
	zw.Close()
	write(t, rotatedName(dir, t0.Add(3*time.Hour))+".gz", gz.String())
	write(t, path, lines(9, 10)+strings.TrimSuffix(line(11, "alice@example.com", "alpha"), "\n"))

	c := newCollect(path)
	if err := c.Read(); err != nil {
		t.Fatal(err)
	}
	if want := paths(1, 11); !slices.Equal(c.got, want) || c.skipped != nil {
		t.Fatalf("read %q (skipped %q), want %q", c.got, c.skipped, want)
	}

	// Only rotated files (the current one renamed away, its successor not yet created).
	os.Remove(path)
	c = newCollect(path)
	if err := c.Read(); err != nil || !slices.Equal(c.got, paths(1, 8)) {
		t.Fatalf("without the current file: %q, %v", c.got, err)
	}

	if err := newCollect(filepath.Join(t.TempDir(), FileName)).Read(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no log: %v, want fs.ErrNotExist", err)
	}
}

// TestReadSkipsWhatIsNotALine_G3: a line that is not an access-log line is skipped and told of
// (file and line number), never a stop; blank lines are nothing.
func TestReadSkipsWhatIsNotALine_G3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write(t, rotatedName(dir, t0), lines(1, 1)+"garbage\n"+lines(2, 2))
	write(t, path, `{"time":"yesterday","door":"loopback"}`+"\n\n"+lines(3, 3)+
		strings.Repeat("x", maxLine+10)+"\n"+`{"time":"2026-12-01T22:00:00.000Z","door":"sideways"}`+"\n"+lines(4, 4))
	c := newCollect(path)
	if err := c.Read(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.got, paths(1, 4)) {
		t.Fatalf("read %q", c.got)
	}
	want := []string{
		rotatedName(dir, t0) + " line 2 skipped: not an access-log line",
		path + " line 1 skipped: access-log line with a bad time",
		path + " line 4 skipped: line too long",
		path + " line 5 skipped: access-log line with an unknown door",
	}
	if len(c.skipped) != len(want) {
		t.Fatalf("skipped %q", c.skipped)
	}
	for i := range want {
		if !strings.HasPrefix(c.skipped[i], want[i]) {
			t.Errorf("skipped[%d] = %q, want %q…", i, c.skipped[i], want[i])
		}
	}
}

// TestFilter_G3: each field picks on its own, and together they all must hold.
func TestFilter_G3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write(t, rotatedName(dir, t0), line(1, "alice@example.com", "alpha")+line(2, "bob@example.com", "alpha"))
	write(t, path, line(3, "alice@example.com", "beta")+line(4, "bob@example.com", "beta")+line(5, "alice@example.com", "alpha"))
	for _, row := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"everything", Filter{}, paths(1, 5)},
		{"console", Filter{Console: "beta"}, []string{"/r3", "/r4"}},
		{"login", Filter{Login: "alice@example.com"}, []string{"/r1", "/r3", "/r5"}},
		{"login exactly", Filter{Login: "alice"}, nil},
		{"since, inclusive", Filter{Since: t0.Add(4 * time.Minute)}, []string{"/r4", "/r5"}},
		{"login and console", Filter{Login: "alice@example.com", Console: "alpha"}, []string{"/r1", "/r5"}},
		{"all three", Filter{Login: "alice@example.com", Console: "alpha", Since: t0.Add(2 * time.Minute)}, []string{"/r5"}},
		{"none match", Filter{Console: "gamma"}, nil},
	} {
		c := newCollect(path)
		c.Filter = row.f
		if err := c.Read(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.got, row.want) {
			t.Errorf("%s: %q, want %q", row.name, c.got, row.want)
		}
	}
}

// script is a Follow's wait that runs one step each time the follower has read everything
// there is, then ends the follow: each step sees the follower caught up, so the test needs no
// clock.
func script(cancel context.CancelFunc, steps ...func()) func(context.Context) error {
	return func(ctx context.Context) error {
		if len(steps) == 0 {
			cancel()
			return ctx.Err()
		}
		steps[0]()
		steps = steps[1:]
		return nil
	}
}

// TestFollowAcrossRotation_G3: `tail -F` across a rotation as lumberjack does it: the lines
// written to the old file before it was renamed away, then the new file from its start, each once
// and in order; also two rotations between two looks, a line written in two parts, and a look
// between the rename and the new file's creation.
func TestFollowAcrossRotation_G3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write(t, rotatedName(dir, t0), lines(1, 2))
	write(t, path, lines(3, 4))
	half := line(13, "alice@example.com", "alpha")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCollect(path)
	idles := 0
	c.Idle = func() { idles++ }
	var seen [][]string
	snap := func() { seen = append(seen, slices.Clone(c.got)) }
	err := c.Follow(ctx, script(cancel,
		func() { snap(); appendTo(t, path, lines(5, 6)) },
		func() {
			snap()
			appendTo(t, path, lines(7, 7)) // written, then rotated before the next look
			rotate(t, path, t0.Add(time.Hour))
			appendTo(t, path, lines(8, 8))
		},
		func() {
			snap()
			rotate(t, path, t0.Add(2*time.Hour))
			appendTo(t, path, lines(9, 9))
			rotate(t, path, t0.Add(3*time.Hour)) // a second rotation before the next look
			appendTo(t, path, lines(10, 10))
		},
		func() {
			snap()
			appendTo(t, path, lines(11, 11))
			// Renamed away, its successor not created yet.
			if err := os.Rename(path, rotatedName(dir, t0.Add(4*time.Hour))); err != nil {
				t.Fatal(err)
			}
		},
		func() { snap(); appendTo(t, path, lines(12, 12)+half[:20]) },
		func() { snap(); appendTo(t, path, half[20:]) },
		func() { snap() },
	))
	if err != nil {
		t.Fatal(err)
	}
	if want := paths(1, 13); !slices.Equal(c.got, want) {
		t.Fatalf("followed %q, want %q", c.got, want)
	}
	wantSeen := [][]string{paths(1, 4), paths(1, 6), paths(1, 8), paths(1, 10), paths(1, 11), paths(1, 12), paths(1, 13)}
	for i := range wantSeen {
		if i >= len(seen) || !slices.Equal(seen[i], wantSeen[i]) {
			t.Fatalf("look %d saw %q, want %q", i, seen, wantSeen[i])
		}
	}
	if idles != len(wantSeen)+1 || c.skipped != nil {
		t.Errorf("idle %d times, skipped %q", idles, c.skipped)
	}
}

// TestFollowWaitsForTheLog_G3: following a log that does not exist yet waits for it, and reads it
// from its start once it does.
func TestFollowWaitsForTheLog_G3(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet") // not even the folder yet
	path := filepath.Join(dir, FileName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCollect(path)
	err := c.Follow(ctx, script(cancel,
		func() {},
		func() {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		},
		func() { write(t, path, lines(1, 2)) },
		func() { appendTo(t, path, lines(3, 3)) },
	))
	if err != nil || !slices.Equal(c.got, paths(1, 3)) {
		t.Fatalf("followed %q, %v", c.got, err)
	}
}

// TestLineErrorStops: an error from Line ends the read with it.
func TestLineErrorStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	write(t, path, lines(1, 3))
	stop := errors.New("stop")
	n := 0
	r := Reader{Path: path, Line: func([]byte, *audit.Line, time.Time) error { n++; return stop }}
	if err := r.Read(); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Read: %v after %d lines", err, n)
	}
}

// TestOpenedSuccessor_G3: a rotation between the listing and the opening of the current file is
// seen: opened before it, the file is the rotated one (read on, then the rest); opened after, it
// is the successor (the rotated one is read first).
func TestOpenedSuccessor_G3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	write(t, path, lines(1, 1))
	list, err := files(path)
	if err != nil {
		t.Fatal(err)
	}
	before, err := open(list[len(list)-1], list)
	if err != nil {
		t.Fatal(err)
	}
	defer before.f.Close()
	rotate(t, path, t0)
	after, err := open(list[len(list)-1], list) // list is the listing from before the rotation
	if err != nil {
		t.Fatal(err)
	}
	defer after.f.Close()
	if openedSuccessor(path, before) || !openedSuccessor(path, after) {
		t.Fatalf("opened before the rotation: %v, after: %v", openedSuccessor(path, before), openedSuccessor(path, after))
	}
}
