package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/phase-console/fleet/audit"
)

// withLogZone makes loc the zone the table shows times in unless --utc.
func withLogZone(t *testing.T, loc *time.Location) {
	logLocation = func() *time.Location { return loc }
	t.Cleanup(func() { logLocation = func() *time.Location { return time.Local } })
}

// kolkata is a fixed zone with a half-hour offset, so that a time shown in UTC or in the machine's
// own zone by mistake cannot pass for it.
var kolkata = time.FixedZone("IST", 5*3600+1800)

// hostileEntry is a line of the log as a door writes it, with any login, path and reason.
func hostileEntry(n int, door, login, console, method, path string, status int, reason string, d time.Duration) string {
	b, err := audit.AppendLine(nil, &audit.Entry{
		Time: logT0.Add(time.Duration(n) * time.Minute), Door: door, Login: login, Console: console,
		Method: method, Path: path, Status: status, Duration: d,
		Peer: netip.MustParseAddr("100.101.102.103"), Reason: reason, Identified: true,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// columnStarts is where each heading of the table's header begins, in terminal columns.
func columnStarts(t *testing.T, header string) []int {
	t.Helper()
	var starts []int
	col := 0
	prevSpace := true
	for _, r := range header {
		if r != ' ' && prevSpace {
			starts = append(starts, col)
		}
		prevSpace = r == ' '
		col++
	}
	if len(starts) != 8 {
		t.Fatalf("header %q has %d columns, want 8", header, len(starts))
	}
	return starts
}

// cellsAt cuts row at the header's column starts, counting terminal columns (a wide character
// takes two), and checks that each cell is followed by the gap: every column begins exactly
// where its heading does.
func cellsAt(t *testing.T, row string, starts []int) []string {
	t.Helper()
	cells := make([]string, len(starts))
	col, i := 0, 0
	var cur strings.Builder
	for _, r := range row {
		for i+1 < len(starts) && col >= starts[i+1] {
			cells[i] = cur.String()
			cur.Reset()
			i++
		}
		if i+1 < len(starts) && col+runeWidth(r) > starts[i+1] {
			t.Fatalf("row %q: a character straddles column %d", row, i+1)
		}
		cur.WriteRune(r)
		col += runeWidth(r)
	}
	cells[i] = cur.String()
	if i != len(starts)-1 {
		t.Fatalf("row %q ends before its last column", row)
	}
	for j := 0; j < len(cells)-1; j++ {
		c := cells[j]
		if !strings.HasSuffix(c, "  ") && !(j == 6) { // DURATION is right-aligned, then the gap
			t.Errorf("row %q: column %d %q does not end in the gap: misaligned", row, j, c)
		}
		cells[j] = strings.TrimSpace(c)
	}
	return cells
}

// TestLogTableAlignedAcrossFollow_O8: every column of every row starts where its heading does —
// in the first look, after lines are appended, and across a rotation — whatever the values:
// short and long logins (a long one cut with "…"), a wide console id, a refusal's reason in
// REASON, not beside the status, and durations from milliseconds to hours. Times are in the
// zone given, with their offset.
func TestLogTableAlignedAcrossFollow_O8(t *testing.T) {
	withLogZone(t, kolkata)
	home, path := logHome(t)
	dir := filepath.Dir(path)
	var stdout syncBuffer
	var looks []string
	followScript(t, &stdout,
		func(p string) {
			looks = append(looks, p)
			writeLog(t, path, hostileEntry(6, audit.DoorReach, "device:a-very-long-device-name-that-goes-on#abcdef", "a-console-id-longer-than-its-column", "DELETE", "/six", 502, "console-down", 3*time.Hour+2*time.Second))
		},
		func(p string) {
			looks = append(looks, p)
			writeLog(t, path, hostileEntry(7, audit.DoorReach, "", "", "POST", "/pair", 429, "rate-limited", 2*time.Millisecond))
			if err := os.Rename(path, filepath.Join(dir, "access-"+logT0.Add(8*time.Minute).Format("2006-01-02T15-04-05.000")+".log")); err != nil {
				t.Fatal(err)
			}
			writeLog(t, path, hostileEntry(9, audit.DoorLoopback, "名前@example.com", "コンソール", "GET", "/nine/wide/名前", 200, "", 12500*time.Millisecond))
		},
		func(p string) {
			looks = append(looks, p)
			writeLog(t, path, hostileEntry(10, audit.DoorLoopback, "x@y.z", "a", "GET", "/ten", 101, "", 0))
		},
	)
	var stderr syncBuffer
	if st := run([]string{"log", "--state-dir", home, "--follow"}, &stdout, &stderr); st != 0 || stderr.String() != "" {
		t.Fatalf("exit %d, stderr %q", st, stderr.String())
	}
	out := stdout.String()
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	starts := columnStarts(t, rows[0])
	if strings.Count(out, "TIME") != 1 {
		t.Errorf("the header is written more than once:\n%s", out)
	}
	want := [][]string{
		{"2026-12-02 03:31:00 +05:30", "alice@example.com", "alpha", "GET", "200", "-", "100ms", "/one"},
		{"2026-12-02 03:32:00 +05:30", "bob@example.com", "alpha", "GET", "200", "-", "200ms", "/two"},
		{"2026-12-02 03:33:00 +05:30", "alice@example.com", "beta", "GET", "101", "-", "300ms", "/three"},
		{"2026-12-02 03:34:00 +05:30", "bob@example.com", "beta", "GET", "403", "not-granted", "400ms", "/four"},
		{"2026-12-02 03:35:00 +05:30", "alice@example.com", "alpha", "GET", "200", "-", "500ms", "/five"},
		{"2026-12-02 03:36:00 +05:30", "device:a-very-long-device-nam…", "a-console-id-lo…", "DELETE", "502", "console-down", "3h0m2s", "/six"},
		{"2026-12-02 03:37:00 +05:30", "-", "-", "POST", "429", "rate-limited", "2ms", "/pair"},
		{"2026-12-02 03:39:00 +05:30", "名前@example.com", "コンソール", "GET", "200", "-", "12.5s", "/nine/wide/名前"},
		{"2026-12-02 03:40:00 +05:30", "x@y.z", "a", "GET", "101", "-", "0ms", "/ten"},
	}
	if len(rows)-1 != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows)-1, len(want), out)
	}
	for i, w := range want {
		got := cellsAt(t, rows[i+1], starts)
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("row %d\n got %q\nwant %q", i+1, got, w)
		}
	}
	// Each look printed whole rows only, and the later looks went on below the first, aligned.
	if len(looks) != 3 || !strings.HasPrefix(out, looks[0]) || !strings.HasPrefix(looks[2], looks[1]) || strings.Count(looks[0], "\n") != 6 {
		t.Errorf("looks %q", looks)
	}
}

// TestLogZones_O8: the table shows times in the machine's zone with its offset, or in UTC with
// --utc.
func TestLogZones_O8(t *testing.T) {
	withLogZone(t, kolkata)
	home, _ := logHome(t)
	for _, row := range []struct {
		flags []string
		first string
	}{
		{nil, "2026-12-02 03:31:00 +05:30"},
		{[]string{"--utc"}, "2026-12-01 22:01:00 UTC"},
	} {
		st, out, errs := runFleet(append([]string{"log", "--state-dir", home}, row.flags...)...)
		if st != 0 || errs != "" {
			t.Fatalf("%q: exit %d, stderr %q", row.flags, st, errs)
		}
		rows := strings.Split(out, "\n")
		if got := cellsAt(t, rows[1], columnStarts(t, rows[0]))[0]; got != row.first {
			t.Errorf("%q: first time %q, want %q", row.flags, got, row.first)
		}
	}
}

// TestLogSince_O8: --since takes a Go duration, whole days (with a Go duration after them) and an
// RFC 3339 time in any zone; anything else is bad usage, exit 2, with one line that names --since
// and the forms it takes.
func TestLogSince_O8(t *testing.T) {
	home, path := logHome(t)
	writeLog(t, path, hostileEntry(-3*24*60, audit.DoorLoopback, "old@example.com", "alpha", "GET", "/three-days-before", 200, "", 0))
	withLogClock(t, logT0.Add(10*time.Minute))
	for _, row := range []struct {
		since string
		want  string
	}{
		{"8m", "/two /three /four /five"},
		{"1d", "/one /two /three /four /five"},
		{"7d", "/one /two /three /four /five /three-days-before"},
		{"2d23h", "/one /two /three /four /five"},
		{"3d10m", "/one /two /three /four /five /three-days-before"},
		{"2026-12-01T22:03:00Z", "/three /four /five"},
		{"2026-12-01T23:03:00+01:00", "/three /four /five"},
		{"2026-12-01T22:03:30.5Z", "/four /five"},
		{"2026-11-01T00:00:00Z", "/one /two /three /four /five /three-days-before"},
	} {
		st, out, errs := runFleet("log", "--state-dir", home, "--since", row.since)
		if st != 0 {
			t.Errorf("--since %s: exit %d, stderr %q", row.since, st, errs)
			continue
		}
		if got := strings.Join(tablePaths(t, out), " "); got != row.want {
			t.Errorf("--since %s: %q, want %q", row.since, got, row.want)
		}
	}
	for _, bad := range []string{"7x", "0d", "0", "-1d", "d", "1d-1h", "1d+1h", "1.5d", "7 d", "2026-12-01", "2026-12-01T25:00:00Z",
		"2026-12-01 22:00:00", "yesterday", "99999999999999999999d", ""} {
		st, out, errs := runFleet("log", "--state-dir", home, "--since", bad)
		if st != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "fleet log: ") ||
			!strings.Contains(errs, "--since") || !strings.Contains(errs, "7d") || !strings.Contains(errs, "RFC 3339") {
			t.Errorf("--since %q: exit %d, stdout %q, stderr %q", bad, st, out, errs)
		}
	}
}

// hostile are characters a terminal acts on or reorders, or that end a line for a JavaScript or
// JSON-lines reader: C0, DEL, C1, the bidi controls, the line and paragraph separators.
var hostile = []rune{0x1b, 0x07, 0x7f, 0x85, 0x9b, 0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e,
	0x2066, 0x2067, 0x2068, 0x2069, 0x2028, 0x2029}

func hostileString(prefix string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, r := range hostile {
		b.WriteRune(r)
		b.WriteByte('x')
	}
	return b.String()
}

// noRawHostile fails when s holds any hostile character as it is, or any other character a
// terminal would not print (tab and newline aside).
func noRawHostile(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%s is not UTF-8: %q", what, s)
		return
	}
	for i, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if !unicode.IsPrint(r) {
			t.Errorf("%s holds %U raw at byte %d: %q", what, r, i, s)
			return
		}
	}
}

// TestLogHostileCharacters_O8: paths and logins that hold C0, DEL, C1, bidi controls and U+2028
// reach the terminal escaped — in the table quoted with Go's escapes, in --json as \u escapes —
// and never raw; the JSON still means the same values.
func TestLogHostileCharacters_O8(t *testing.T) {
	home, path := logHome(t)
	login, p := hostileString("eve@example.com"), hostileString("/evil")
	line := hostileEntry(6, audit.DoorLoopback, login, "alpha", "GET", p, 200, "", 0)
	writeLog(t, path, line+"{\"time\":\"2026-12-01T22:07:00.000Z\",\"door\":\"loopback\",\"login\":\"\xff\xfe\",\"path\":\"/bad-utf8\"}\n")
	withLogClock(t, logT0.Add(6*time.Minute))

	st, out, errs := runFleet("log", "--state-dir", home, "--since", "30s")
	if st != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", st, errs)
	}
	noRawHostile(t, "the table", out)
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(rows) != 3 || !strings.Contains(rows[1], `\u202e`) || !strings.Contains(rows[1], `\x1b`) || !strings.Contains(rows[1], `\u2028`) ||
		!strings.Contains(rows[1], `\u0085`) || !strings.Contains(rows[2], "\ufffd") {
		t.Errorf("table:\n%s", out)
	}
	starts := columnStarts(t, rows[0])
	cellsAt(t, rows[1], starts) // aligned, however long the quoted login
	if got := tablePaths(t, out)[0]; got != cell(p) || !strings.HasPrefix(got, `"/evil\x1bx`) {
		t.Errorf("path cell %q", got)
	}

	st, out, errs = runFleet("log", "--state-dir", home, "--since", "30s", "--json")
	if st != 0 || errs != "" {
		t.Fatalf("--json: exit %d, stderr %q", st, errs)
	}
	noRawHostile(t, "--json", out)
	for _, esc := range []string{`\u001b`, `\u007f`, `\u0085`, `\u009b`, `\u061c`, `\u200e`, `\u202e`, `\u2066`, `\u2069`, `\u2028`, `\u2029`, `\ufffd`} {
		if !strings.Contains(out, esc) {
			t.Errorf("--json does not write %s:\n%s", esc, out)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("--json printed %d lines:\n%s", len(lines), out)
	}
	var got, want map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("--json line does not parse: %v", err)
	}
	json.Unmarshal([]byte(strings.TrimSuffix(line, "\n")), &want)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) || got["login"] != login || got["path"] != p {
		t.Errorf("--json means other values:\n got %s\nwant %s", gb, wb)
	}
}

// TestAppendSafeJSON_O8: every character --json escapes, and nothing else changes.
func TestAppendSafeJSON_O8(t *testing.T) {
	for _, row := range []struct{ in, want string }{
		{`{"a":"plain é ü 名"}`, `{"a":"plain é ü 名"}`},
		{"{\"a\":\"\u202e\u2028\u0085\x7f\"}", `{"a":"\u202e\u2028\u0085\u007f"}`},
		{"{\"a\":\"\xff\"}", `{"a":"\ufffd"}`},
		{"{\"a\":1,\t\"b\":2}", "{\"a\":1,\t\"b\":2}"},
	} {
		if got := string(appendSafeJSON(nil, []byte(row.in))); got != row.want {
			t.Errorf("%q: %q, want %q", row.in, got, row.want)
		}
	}
}
