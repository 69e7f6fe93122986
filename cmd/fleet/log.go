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
	"text/tabwriter"
	"time"
	"unicode"

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

// logTableFlushRows is how many rows the table aligns at a time: the columns of a long log are
// not held in memory to the end.
const logTableFlushRows = 256

// sinceValue is --since: a positive Go duration, refused at parse time otherwise.
type sinceValue struct{ d *time.Duration }

func (v sinceValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v sinceValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("want a positive Go duration such as 90m, 24h or 168h")
	}
	*v.d = d
	return nil
}

// runLog is `fleet log [--console ID] [--login L] [--since DURATION] [--follow] [--json]` (SPEC
// G3): the access log as a table (or its raw JSON lines), oldest first across the rotated files.
// A line that is not an access-log line is skipped with one line on stderr; no log yet is said so,
// exit 0.
func runLog(args []string, stdout, stderr io.Writer) int {
	const summary = logSummary + "\nFilters combine: every one given must match. --follow keeps printing lines as they are written, across rotations, until Ctrl-C."
	fs := newFlags("log", summary, stdout, stderr)
	console := fs.String("console", "", "only requests to the console `ID`")
	login := fs.String("login", "", "only requests of the login `L` (exactly as logged: alice@example.com, device:pixel#a1b2c3)")
	var since time.Duration
	fs.Var(sinceValue{&since}, "since", "only requests that arrived in the last `DURATION` (a Go duration: 90m, 24h)")
	follow := fs.Bool("follow", false, "keep printing requests as they are logged, as tail -f does")
	asJSON := fs.Bool("json", false, "print the log's JSON lines as they are, instead of a table")
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
	if since > 0 {
		filter.Since = logNow().Add(-since)
	}

	if _, err := logread.Files(path); errors.Is(err, os.ErrNotExist) {
		if !*follow {
			fmt.Fprintf(stderr, "fleet log: no access log yet at %s: fleet serve writes one line there for each request to a console (is --state-dir the one fleet serve uses?)\n", path)
			return 0
		}
		fmt.Fprintf(stderr, "fleet log: no access log yet at %s; waiting for fleet serve to write one\n", path)
	}

	out := newLogOutput(stdout, *asJSON)
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

// logOutput prints lines as a table or as they are. A write that fails (a closed pipe) ends the
// read with its error.
type logOutput struct {
	w    *bufio.Writer
	tw   *tabwriter.Writer // nil for --json
	rows int
	err  error
}

func newLogOutput(stdout io.Writer, asJSON bool) *logOutput {
	o := &logOutput{w: bufio.NewWriter(stdout)}
	if !asJSON {
		o.tw = tabwriter.NewWriter(o.w, 0, 4, 2, ' ', 0)
	}
	return o
}

func (o *logOutput) line(raw []byte, l *audit.Line, t time.Time) error {
	if o.err != nil {
		return o.err
	}
	o.rows++
	if o.tw == nil {
		o.w.Write(raw)
		o.w.WriteByte('\n')
		return nil
	}
	if o.rows == 1 {
		fmt.Fprintln(o.tw, "TIME\tLOGIN\tCONSOLE\tMETHOD\tPATH\tSTATUS\tDURATION")
	}
	status := strconv.Itoa(l.Status)
	if l.Reason != "" {
		status += " " + l.Reason
	}
	fmt.Fprintf(o.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Local().Format(time.DateTime), cell(l.Login), cell(l.Console),
		cell(l.Method), cell(l.Path), cell(status), time.Duration(l.DurationMS)*time.Millisecond)
	if o.rows%logTableFlushRows == 0 {
		o.flush()
	}
	return o.err
}

// flush writes out what is held: the table's rows so far, aligned among themselves.
func (o *logOutput) flush() {
	if o.tw != nil {
		if err := o.tw.Flush(); err != nil && o.err == nil {
			o.err = err
		}
	}
	if err := o.w.Flush(); err != nil && o.err == nil {
		o.err = err
	}
}

// cell is a field as a table shows it: "-" when empty, quoted when it holds a tab or anything a
// terminal would act on rather than print.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
