package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/logread"
	"github.com/phase-console/fleet/internal/state"
)

const logSummary = "Show the access log: who reached which console, and what they were answered; oldest first, the rotated files included."

func init() {
	addCommand(&command{name: "log", summary: logSummary, run: runLog})
}

// logNow is the clock --since counts back from; tests pass a fake one.
var logNow = time.Now

// logFollowWait is how --follow waits before it looks at the log again; nil: logPollInterval.
// Tests pass one that writes and rotates the log between looks, and ends the follow.
var logFollowWait func(ctx context.Context) error

// logPollInterval is how long --follow waits between looks at the log.
const logPollInterval = 250 * time.Millisecond

// logTableFlushRows is how many rows the table holds before it writes them out; --follow writes
// out what it has each time it has read all there is.
const logTableFlushRows = 256

// logLocation is the zone the table shows times in unless --utc; tests pass a fixed one.
var logLocation = func() *time.Location { return time.Local }

// sinceValue is --since: a positive Go duration, a number of days (7d, 1d12h), or an RFC 3339
// time; anything else is refused at parse time (exit 2).
type sinceValue struct {
	d  *time.Duration
	at *time.Time
}

func (v sinceValue) String() string {
	switch {
	case v.at != nil && !v.at.IsZero():
		return v.at.Format(time.RFC3339)
	case v.d != nil && *v.d != 0:
		return v.d.String()
	}
	return ""
}

func (v sinceValue) Set(s string) error {
	d, at, err := parseSince(s)
	if err != nil {
		return err
	}
	*v.d, *v.at = d, at
	return nil
}

// errSince is what a bad --since is told.
var errSince = errors.New("want a positive duration (90m, 24h, 7d, 1d12h) or an RFC 3339 time (2026-12-01T22:00:00Z, 2026-12-01T23:00:00+01:00)")

// parseSince reads --since: a positive duration — Go's (90m, 24h), or whole days first (7d,
// 1d12h) — or an RFC 3339 time. Exactly one of d and at is set.
func parseSince(s string) (d time.Duration, at time.Time, err error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return 0, t, nil
	}
	if days, rest, ok := strings.Cut(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.Atoi(days)
		if err != nil || n > 100*365 {
			return 0, time.Time{}, errSince
		}
		d = time.Duration(n) * 24 * time.Hour
		if rest != "" {
			r, err := time.ParseDuration(rest)
			if err != nil || r < 0 || strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
				return 0, time.Time{}, errSince
			}
			d += r
		}
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, time.Time{}, errSince
	}
	if d <= 0 {
		return 0, time.Time{}, errSince
	}
	return d, time.Time{}, nil
}

// runLog is `fleet log [--console ID] [--login L] [--since DURATION|TIME] [--follow] [--json]
// [--utc]` (SPEC G3, O8): the access log as a table (or its JSON lines), oldest first across the
// rotated files.
// A line that is not an access-log line is skipped with one line on stderr; no log yet is said so,
// exit 0.
func runLog(args []string, stdout, stderr io.Writer) int {
	const summary = logSummary + "\nFilters combine: every one given must match. --follow keeps printing lines as they are written, across rotations, until Ctrl-C."
	fs := newFlags("log", summary, stdout, stderr)
	console := fs.String("console", "", "only requests to the console `ID`")
	login := fs.String("login", "", "only requests of the login `L` (exactly as logged: alice@example.com, device:pixel#a1b2c3)")
	var since time.Duration
	var sinceAt time.Time
	fs.Var(sinceValue{&since, &sinceAt}, "since", "only requests that arrived in the last `DURATION` (90m, 24h, 7d, 1d12h), or at or after an RFC 3339 time (2026-12-01T22:00:00Z)")
	follow := fs.Bool("follow", false, "keep printing requests as they are logged, as tail -f does")
	asJSON := fs.Bool("json", false, "print the log's JSON lines instead of a table; line and paragraph separators, control and bidi characters written as \\u escapes")
	utc := fs.Bool("utc", false, "show times in UTC (default: this machine's zone)")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet log: %v\n", err)
		return 1
	}
	path := filepath.Join(state.FleetDir(home), logread.FileName)
	filter := logread.Filter{Console: *console, Login: *login}
	switch {
	case !sinceAt.IsZero():
		filter.Since = sinceAt
	case since > 0:
		filter.Since = logNow().Add(-since)
	}

	if _, err := logread.Files(path); errors.Is(err, os.ErrNotExist) {
		if !*follow {
			fmt.Fprintf(stderr, "fleet log: no access log yet at %s: fleet serve writes one line there for each request to a console (is --state-dir the one fleet serve uses?)\n", path)
			return 0
		}
		fmt.Fprintf(stderr, "fleet log: no access log yet at %s; waiting for fleet serve to write one\n", path)
	}

	loc := logLocation()
	if *utc {
		loc = time.UTC
	}
	out := newLogOutput(stdout, *asJSON, loc)
	r := &logread.Reader{
		Path:    path,
		Filter:  filter,
		Line:    out.line,
		Skipped: func(err error) { fmt.Fprintf(stderr, "fleet log: %v\n", err) },
		Idle:    out.flush,
	}
	if *follow {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		wait := logFollowWait
		if wait == nil {
			wait = pollWait
		}
		err = r.Follow(ctx, wait)
	} else {
		err = r.Read()
	}
	out.flush()
	if err == nil {
		err = out.err
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleet log: %v\n", err)
		return 1
	}
	if out.rows == 0 && !*follow {
		fmt.Fprintln(stderr, "fleet log: no request in the access log matches")
	}
	return 0
}

func pollWait(ctx context.Context) error {
	t := time.NewTimer(logPollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// logOutput prints lines as a table or as JSON. A write that fails (a closed pipe) ends the read
// with its error.
type logOutput struct {
	w      *bufio.Writer
	table  bool
	loc    *time.Location
	rows   int
	err    error
	row    []byte // the row being built, reused
	inJSON []byte // the JSON line being escaped, reused
}

func newLogOutput(stdout io.Writer, asJSON bool, loc *time.Location) *logOutput {
	return &logOutput{w: bufio.NewWriter(stdout), table: !asJSON, loc: loc}
}

// A logColumn is one column of the table: its heading and width, fixed for the whole output so
// that the rows of a --follow stay aligned however long it runs (O8). A value wider than its
// column is cut and ends with "…"; the last column, PATH, is never cut (--json has every field
// whole).
type logColumn struct {
	name  string
	width int
	right bool // aligned right (numbers)
}

// logColumns are the table's columns, in order; PATH is last and unbounded.
var logColumns = []logColumn{
	{name: "TIME", width: len("2006-01-02 15:04:05 -07:00")},
	{name: "LOGIN", width: 30},
	{name: "CONSOLE", width: 16},
	{name: "METHOD", width: 7},
	{name: "STATUS", width: 6},
	{name: "REASON", width: len("pairing-unavailable")},
	{name: "DURATION", width: 9, right: true},
	{name: "PATH"},
}

// logColumnGap is the space between two columns.
const logColumnGap = "  "

func (o *logOutput) line(raw []byte, l *audit.Line, t time.Time) error {
	if o.err != nil {
		return o.err
	}
	o.rows++
	if !o.table {
		o.inJSON = appendSafeJSON(o.inJSON[:0], raw)
		o.w.Write(o.inJSON)
		o.w.WriteByte('\n')
	} else {
		if o.rows == 1 {
			names := make([]string, len(logColumns))
			for i, c := range logColumns {
				names[i] = c.name
			}
			o.writeRow(names)
		}
		o.writeRow([]string{logTime(t, o.loc), cell(l.Login), cell(l.Console), cell(l.Method), strconv.Itoa(l.Status),
			cell(l.Reason), logDuration(time.Duration(l.DurationMS) * time.Millisecond), cell(l.Path)})
	}
	if o.rows%logTableFlushRows == 0 {
		o.flush()
	}
	return o.err
}

// writeRow writes one row, each value in its column's fixed width.
func (o *logOutput) writeRow(values []string) {
	b := o.row[:0]
	for i, v := range values {
		c := logColumns[i]
		if i > 0 {
			b = append(b, logColumnGap...)
		}
		if c.width == 0 { // the last column
			b = append(b, v...)
			break
		}
		v, w := fitCell(v, c.width)
		pad := c.width - w
		if c.right {
			b = appendSpaces(b, pad)
		}
		b = append(b, v...)
		if !c.right && i < len(values)-1 {
			b = appendSpaces(b, pad)
		}
	}
	b = append(b, '\n')
	o.row = b
	o.w.Write(b)
}

func appendSpaces(b []byte, n int) []byte {
	for ; n > 0; n-- {
		b = append(b, ' ')
	}
	return b
}

// logTime is t in loc, to the second, with its zone: a numeric offset, or "UTC" in UTC.
func logTime(t time.Time, loc *time.Location) string {
	t = t.In(loc)
	if loc == time.UTC {
		return t.Format(time.DateTime) + " UTC"
	}
	return t.Format(time.DateTime + " -07:00")
}

// logDuration is d as the table shows it: milliseconds under a second, tenths of a second under a
// minute, whole seconds after.
func logDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// flush writes out what is held.
func (o *logOutput) flush() {
	if err := o.w.Flush(); err != nil && o.err == nil {
		o.err = err
	}
}

// cell is a field as a table shows it: "-" when empty, quoted (strconv.Quote: \x1b, \u202e, …)
// when it holds anything a terminal would act on or reorder rather than print — control
// characters, C1, bidi controls, line and paragraph separators, invalid UTF-8 — so that no raw
// one reaches the terminal.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// fitCell is s cut to at most width terminal columns (a cut one ends with "…"), and how many
// columns it takes. s holds only printable characters (cell): East Asian wide ones take two
// columns, combining marks none.
func fitCell(s string, width int) (string, int) {
	w := displayWidth(s)
	if w <= width {
		return s, w
	}
	used := 0
	for i, r := range s {
		rw := runeWidth(r)
		if used+rw > width-1 {
			return s[:i] + "…", used + 1
		}
		used += rw
	}
	return s, w
}

func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		n += runeWidth(r)
	}
	return n
}

func runeWidth(r rune) int {
	if r < 0x300 {
		return 1
	}
	if unicode.In(r, unicode.Mn, unicode.Me) {
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// appendSafeJSON appends the JSON line raw with every character that a terminal or a JavaScript
// reader could act on written as a \u escape (O8): C0 and DEL, C1, U+2028 and U+2029, the bidi
// controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), and a byte that is not UTF-8
// as \ufffd. raw is a line that parsed as JSON, so each of them stands inside a string (JSON
// allows none of them outside one), where its escape means the same character: the line parses
// to the same values. Tab, CR and LF are left: JSON allows them between values, and a line that
// parsed holds none inside a string.
func appendSafeJSON(b, raw []byte) []byte {
	const hex = "0123456789abcdef"
	for len(raw) > 0 {
		r, size := utf8.DecodeRune(raw)
		switch {
		case r == utf8.RuneError && size <= 1:
			b = append(b, `\ufffd`...)
		case unsafeInJSONOutput(r):
			b = append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		default:
			b = append(b, raw[:size]...)
		}
		raw = raw[size:]
	}
	return b
}

// unsafeInJSONOutput reports whether --json writes r as a \u escape.
func unsafeInJSONOutput(r rune) bool {
	switch {
	case r < 0x20:
		return r != '\t' && r != '\n' && r != '\r'
	case r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
