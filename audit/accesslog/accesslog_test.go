package accesslog

import (
	"bufio"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
)

func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func entry(path string) *audit.Entry {
	return &audit.Entry{
		Time: time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC), Door: audit.DoorLoopback,
		Login: "alice@example.com", Console: "alpha", Method: "GET", Path: path, Status: 200,
		Bytes: 5, Duration: time.Millisecond, Peer: netip.MustParseAddr("100.101.102.103"),
		Identified: true,
	}
}

func readLines(t *testing.T, path string) []audit.Line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []audit.Line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l, _, err := audit.ParseLine(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		lines = append(lines, l)
	}
	return lines
}

func TestWritesAuditedEntriesOnly_G3(t *testing.T) {
	dir := privateDir(t)
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.Record(entry("/forwarded"))
	l.Record(&audit.Entry{Time: time.Now(), Door: audit.DoorLoopback, Reason: "hooks", Status: 403})
	refused := entry("/refused")
	refused.Reason, refused.Status = "not-granted", 403
	l.Record(refused)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, filepath.Join(dir, FileName))
	if len(lines) != 2 || lines[0].Path != "/forwarded" || lines[1].Reason != "not-granted" {
		t.Fatalf("lines %+v", lines)
	}
	st, _ := os.Stat(filepath.Join(dir, FileName))
	if st.Mode().Perm() != 0o600 || l.Dropped() != 0 || l.Written() != 2 {
		t.Fatalf("mode %v dropped %d written %d", st.Mode(), l.Dropped(), l.Written())
	}
	l.Record(entry("/after-close"))
	if l.Dropped() != 1 {
		t.Fatalf("a line after Close: dropped %d", l.Dropped())
	}
}

// TestRotationKeepsFiveAll0600_G3 writes a little over eight rotations' worth (MaxSize 1 MiB, the
// smallest lumberjack takes) and finds the log and five old files, each 0600, in a 0700 folder.
func TestRotationKeepsFiveAll0600_G3(t *testing.T) {
	dir := privateDir(t)
	l, err := open(dir, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := "/" + strings.Repeat("p", 4000)
	for i := 0; i < 8*270; i++ { // ~4.1 KB a line: 255 lines a MiB
		l.Record(entry(long))
		if i%200 == 0 {
			l.Flush() // never a full queue: this test is about rotation, not drops
		}
	}
	l.Flush()
	if l.Dropped() != 0 {
		t.Fatalf("dropped %d", l.Dropped())
	}
	// lumberjack removes the files past MaxBackups in a goroutine of its own after a rotation:
	// wait (bounded) for it to have done so.
	var names []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		names = logFiles(t, dir)
		if len(names) <= 1+MaxBackups || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Close()
	if len(names) != 1+MaxBackups {
		t.Fatalf("files %v, want the log and %d old ones", names, MaxBackups)
	}
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %04o, want 0600", n, st.Mode().Perm())
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over MaxSize", n, st.Size())
		}
		if n != FileName && (!strings.HasPrefix(n, "access-") || !strings.HasSuffix(n, ".log")) {
			t.Errorf("old file named %s", n)
		}
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %04o", st.Mode().Perm())
	}
}

func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// failingDisk is a full disk: every write fails.
type failingDisk struct{ writes int }

func (d *failingDisk) Write(p []byte) (int, error) {
	d.writes++
	return 0, errors.New("no space left on device")
}
func (d *failingDisk) Close() error { return nil }

func TestFailedWritesAreDroppedAndCounted_G3(t *testing.T) {
	disk := &failingDisk{}
	l, err := open(privateDir(t), 1, disk)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		l.Record(entry("/x"))
	}
	l.Flush()
	l.Close()
	if l.Dropped() != 10 || l.Written() != 0 || disk.writes == 0 {
		t.Fatalf("dropped %d written %d writes %d", l.Dropped(), l.Written(), disk.writes)
	}
}

// stuckDisk is a write that never returns until released: the queue fills, and Record still
// returns at once.
type stuckDisk struct{ release chan struct{} }

func (d *stuckDisk) Write(p []byte) (int, error) { <-d.release; return len(p), nil }
func (d *stuckDisk) Close() error                { return nil }

func TestFullQueueDropsWithoutBlocking_G3(t *testing.T) {
	disk := &stuckDisk{release: make(chan struct{})}
	l, err := open(privateDir(t), 1, disk)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 * QueueSize
	for i := 0; i < n; i++ {
		l.Record(entry("/x")) // returns although nothing is written
	}
	close(disk.release)
	l.Close()
	if l.Dropped() == 0 || l.Dropped()+l.Written() != n {
		t.Fatalf("dropped %d written %d of %d", l.Dropped(), l.Written(), n)
	}
}

func TestOpenRefusesTooOpenFiles_F1(t *testing.T) {
	for _, name := range []string{FileName, "access-2026-12-01T22-00-00.000.log"} {
		dir := privateDir(t)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o644)
		_, err := Open(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("%s 0644: err %v", name, err)
		}
	}
	open := filepath.Join(t.TempDir(), "fleet")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	if _, err := Open(open); err == nil {
		t.Error("a 0755 folder: no error")
	}
}
