package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/logread"
	"github.com/phase-console/fleet/internal/state"
)

var logT0 = time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)

// logEntry is request n: by login to console, n minutes after logT0, answered status (a refusal
// when reason is set).
func logEntry(n int, login, console, path string, status int, reason string) string {
	b, err := audit.AppendLine(nil, &audit.Entry{
		Time: logT0.Add(time.Duration(n) * time.Minute), Door: audit.DoorLoopback, Login: login, Console: console,
		Method: "GET", Path: path, Status: status, Bytes: 7, Duration: time.Duration(n) * 100 * time.Millisecond,
		Peer: netip.MustParseAddr("100.101.102.103"), Reason: reason, Identified: true,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// logHome is a state folder whose access log holds, oldest first, a rotated file with requests
// 1-2 and the current file with 3-5:
//
//	1 alice alpha /one      3 alice beta  /three     5 alice alpha /five
//	2 bob   alpha /two      4 bob   beta  /four (403 not-granted)
func logHome(t *testing.T) (home, path string) {
	t.Helper()
	home = filepath.Join(t.TempDir(), "state")
	dir := state.FleetDir(home)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, logread.FileName)
	rotated := filepath.Join(dir, "access-"+logT0.Add(3*time.Minute).Format("2006-01-02T15-04-05.000")+".log")
	writeLog(t, rotated, logEntry(1, "alice@example.com", "alpha", "/one", 200, "")+logEntry(2, "bob@example.com", "alpha", "/two", 200, ""))
	writeLog(t, path, logEntry(3, "alice@example.com", "beta", "/three", 101, "")+
		logEntry(4, "bob@example.com", "beta", "/four", 403, "not-granted")+logEntry(5, "alice@example.com", "alpha", "/five", 200, ""))
	return home, path
}

func writeLog(t *testing.T, path, s string) {
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

// withLogClock makes now the clock of --since.
func withLogClock(t *testing.T, now time.Time) {
	logNow = func() time.Time { return now }
	t.Cleanup(func() { logNow = time.Now })
}

// tablePaths is the PATH column of a table, in order: the rest of each row from the column's
// fixed place (the table's columns keep their widths, O8).
func tablePaths(t *testing.T, out string) []string {
	t.Helper()
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if out == "" {
		return nil
	}
	if got := strings.Fields(rows[0]); strings.Join(got, " ") != "TIME LOGIN CONSOLE METHOD STATUS REASON DURATION PATH" {
		t.Fatalf("header %q", rows[0])
	}
	at := strings.Index(rows[0], "PATH")
	var paths []string
	for _, r := range rows[1:] {
		paths = append(paths, string([]rune(r)[at:]))
	}
	return paths
}

// TestLogTable_G3: the table, oldest first across the rotated file and the current one, each
// row's time (local, with its zone), login, console, method, status, a refusal's reason, duration
// and path.
func TestLogTable_G3(t *testing.T) {
	home, _ := logHome(t)
	st, out, errs := runFleet("log", "--state-dir", home)
	if st != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", st, errs)
	}
	if got := strings.Join(tablePaths(t, out), " "); got != "/one /two /three /four /five" {
		t.Fatalf("paths %q, want oldest first:\n%s", got, out)
	}
	row := strings.Fields(strings.Split(out, "\n")[4])
	at := logT0.Add(4 * time.Minute).Local()
	want := []string{at.Format(time.DateOnly), at.Format(time.TimeOnly), at.Format("-07:00"),
		"bob@example.com", "beta", "GET", "403", "not-granted", "400ms", "/four"}
	if strings.Join(row, " ") != strings.Join(want, " ") {
		t.Errorf("row %q, want %q", row, want)
	}
}

// TestLogFilters_G3: --console, --login and --since (counted back from the clock) each pick, and
// together every one must hold.
func TestLogFilters_G3(t *testing.T) {
	home, _ := logHome(t)
	withLogClock(t, logT0.Add(10*time.Minute))
	for _, row := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"--console", []string{"--console", "beta"}, "/three /four"},
		{"--login", []string{"--login", "alice@example.com"}, "/one /three /five"},
		{"--login exactly", []string{"--login", "alice"}, ""},
		{"--since", []string{"--since", "8m"}, "/two /three /four /five"},
		{"--since a Go duration", []string{"--since", "6m30s"}, "/four /five"},
		{"--console and --login", []string{"--console", "alpha", "--login", "alice@example.com"}, "/one /five"},
		{"all three", []string{"--console=alpha", "--login=alice@example.com", "--since=7m"}, "/five"},
	} {
		st, out, errs := runFleet(append([]string{"log", "--state-dir", home}, row.flags...)...)
		if st != 0 {
			t.Errorf("%s: exit %d, stderr %q", row.name, st, errs)
			continue
		}
		if got := strings.Join(tablePaths(t, out), " "); got != row.want {
			t.Errorf("%s: %q, want %q", row.name, got, row.want)
		}
		if none := row.want == ""; none != strings.Contains(errs, "no request in the access log matches") {
			t.Errorf("%s: stderr %q", row.name, errs)
		}
	}
}

// TestLogJSON_G3: --json prints the picked lines exactly as the log holds them.
func TestLogJSON_G3(t *testing.T) {
	home, _ := logHome(t)
	st, out, errs := runFleet("log", "--state-dir", home, "--json", "--login", "bob@example.com")
	want := logEntry(2, "bob@example.com", "alpha", "/two", 200, "") + logEntry(4, "bob@example.com", "beta", "/four", 403, "not-granted")
	if st != 0 || errs != "" || out != want {
		t.Fatalf("exit %d, stderr %q, stdout\n%s\nwant\n%s", st, errs, out, want)
	}
}

// TestLogBadFlags_G3: a bad --since (neither a positive duration nor an RFC 3339 time), an
// unknown flag or an argument is bad usage: exit 2, one line on stderr, nothing on stdout.
func TestLogBadFlags_G3(t *testing.T) {
	home, _ := logHome(t)
	for _, args := range [][]string{
		{"--since", "yesterday"}, {"--since", "7x"}, {"--since", "-1h"}, {"--since", "0"}, {"--since"},
		{"--bogus"}, {"--follow=maybe"}, {"alpha"},
	} {
		st, out, errs := runFleet(append([]string{"log", "--state-dir", home}, args...)...)
		if st != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "fleet log: ") {
			t.Errorf("fleet log %q: exit %d, stdout %q, stderr %q", args, st, out, errs)
		}
		if args[0] == "--since" && len(args) == 2 && !strings.Contains(errs, "--since") {
			t.Errorf("fleet log %q: stderr %q does not name --since", args, errs)
		}
	}
}

// TestLogNoLogYet_G3: no access log yet is said plainly on stderr, exit 0.
func TestLogNoLogYet_G3(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	st, out, errs := runFleet("log", "--state-dir", home)
	if st != 0 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no access log yet at "+filepath.Join(home, "fleet", "access.log")) {
		t.Fatalf("exit %d, stdout %q, stderr %q", st, out, errs)
	}
}

// TestLogSkipsCorruptLines_G3: a line that is not an access-log line is one warning on stderr
// naming the file and line; the lines around it are still shown, exit 0.
func TestLogSkipsCorruptLines_G3(t *testing.T) {
	home, path := logHome(t)
	writeLog(t, path, "{not json\n"+logEntry(6, "alice@example.com", "alpha", "/six", 200, "")+`{"time":"2026-12-01T22:07:00.000Z","door":"elsewhere"}`+"\n")
	st, out, errs := runFleet("log", "--state-dir", home)
	if st != 0 {
		t.Fatalf("exit %d, stderr %q", st, errs)
	}
	if got := strings.Join(tablePaths(t, out), " "); got != "/one /two /three /four /five /six" {
		t.Errorf("paths %q", got)
	}
	warns := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	if len(warns) != 2 || !strings.HasPrefix(warns[0], "fleet log: "+path+" line 4 skipped: not an access-log line") ||
		!strings.HasPrefix(warns[1], "fleet log: "+path+" line 6 skipped: access-log line with an unknown door") {
		t.Errorf("stderr %q", errs)
	}
}

// TestLogTableQuotesControlCharacters: a field that a terminal would act on is shown quoted.
func TestLogTableQuotesControlCharacters(t *testing.T) {
	home, path := logHome(t)
	writeLog(t, path, logEntry(6, "alice@example.com", "alpha", "/a\x1b[2Jb", 200, ""))
	withLogClock(t, logT0.Add(6*time.Minute))
	_, out, _ := runFleet("log", "--state-dir", home, "--since", "1m")
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `"/a\x1b[2Jb"`) {
		t.Errorf("table %q", out)
	}
}

// followScript makes --follow wait by running the next step, once everything written so far has
// been printed, and end after the last one; stdout is what was printed when each step ran.
func followScript(t *testing.T, stdout *syncBuffer, steps ...func(printed string)) {
	errDone := errors.New("script done")
	logFollowWait = func(context.Context) error {
		if len(steps) == 0 {
			return errDone
		}
		steps[0](stdout.String())
		steps = steps[1:]
		return nil
	}
	t.Cleanup(func() { logFollowWait = nil })
}

// TestLogFollowAcrossRotation_G3: --follow prints what is there, then each line as it is written;
// when the log is rotated as lumberjack rotates it (the current file renamed to its rotated name,
// a new one created) it reads the old file to its end and the new one from its start: every line
// once, in order. The filters apply to what follows too.
func TestLogFollowAcrossRotation_G3(t *testing.T) {
	home, path := logHome(t)
	dir := filepath.Dir(path)
	rotate := func(at time.Time) {
		if err := os.Rename(path, filepath.Join(dir, "access-"+at.Format("2006-01-02T15-04-05.000")+".log")); err != nil {
			t.Fatal(err)
		}
		writeLog(t, path, "")
	}
	var stdout, stderr syncBuffer
	var printed []string
	followScript(t, &stdout,
		func(p string) {
			printed = append(printed, p)
			writeLog(t, path, logEntry(6, "alice@example.com", "alpha", "/six", 200, ""))
		},
		func(p string) {
			printed = append(printed, p)
			writeLog(t, path, logEntry(7, "alice@example.com", "alpha", "/seven", 200, "")+logEntry(8, "bob@example.com", "alpha", "/bob", 200, ""))
			rotate(logT0.Add(8 * time.Minute))
			writeLog(t, path, logEntry(9, "alice@example.com", "alpha", "/nine", 200, ""))
		},
		func(p string) {
			printed = append(printed, p)
			writeLog(t, path, logEntry(10, "alice@example.com", "alpha", "/ten", 200, ""))
		},
	)
	st := run([]string{"log", "--state-dir", home, "--follow", "--json", "--login", "alice@example.com"}, &stdout, &stderr)
	if st != 0 || stderr.String() != "" {
		t.Fatalf("exit %d, stderr %q", st, stderr.String())
	}
	wantPaths := func(s string) string {
		var p []string
		for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			parsed, _, err := audit.ParseLine([]byte(l))
			if err != nil {
				t.Fatalf("printed %q: %v", l, err)
			}
			p = append(p, parsed.Path)
		}
		return strings.Join(p, " ")
	}
	if got := wantPaths(stdout.String()); got != "/one /three /five /six /seven /nine /ten" {
		t.Fatalf("followed %q", got)
	}
	looks := []string{"/one /three /five", "/one /three /five /six", "/one /three /five /six /seven /nine"}
	for i, want := range looks {
		if got := wantPaths(printed[i]); got != want {
			t.Errorf("look %d printed %q, want %q", i, got, want)
		}
	}
}

// TestLogFollowWaitsForTheLog_G3: --follow with no log yet says so, then prints the log once it
// is written.
func TestLogFollowWaitsForTheLog_G3(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(state.FleetDir(home), logread.FileName)
	var stdout, stderr syncBuffer
	followScript(t, &stdout,
		func(string) {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			writeLog(t, path, logEntry(1, "alice@example.com", "alpha", "/one", 200, ""))
		},
		func(string) {},
	)
	st := run([]string{"log", "--state-dir", home, "--follow"}, &stdout, &stderr)
	if st != 0 || !strings.Contains(stderr.String(), "no access log yet") || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("exit %d, stderr %q", st, stderr.String())
	}
	if got := strings.Join(tablePaths(t, stdout.String()), " "); got != "/one" {
		t.Fatalf("followed %q", got)
	}
}
