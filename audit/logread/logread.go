// Package logread reads the access log (SPEC G3) as `fleet log` shows it: the rotated files and the
// current one, oldest first, and, when following, every line written after, across rotations, each
// once and in order.
//
// It owns finding the log's files and reading them; the line format is package audit's, and the
// writing and rotating are the supervisor's (gopkg.in/natefinch/lumberjack.v2). It must never write,
// rename or remove a file, and never stop at a line that is not an access-log line: it skips it
// and says so.
package logread

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
)

// FileName is the access log's name in <stateHome>/fleet, as its writer names it.
const FileName = accesslog.FileName

// backupTimeLayout is the time in a rotated file's name, as lumberjack v2 writes it (UTC, its
// backupTimeFormat): access.log rotated at 22:01:02.345 is access-2026-12-01T22-01-02.345.log.
const backupTimeLayout = "2006-01-02T15-04-05.000"

// maxLine bounds one line; a longer one is not an access-log line (its path would be larger than
// any request head the doors accept).
const maxLine = 1 << 20

// A file is one of the log's files: a rotated one (rotated set) or the current one.
type file struct {
	path    string
	rotated time.Time // when it was rotated, from its name; zero for the current file
	gz      bool
}

// Files returns the access log at path and its rotated files, oldest first: the rotated ones by
// the time in their names (lumberjack's naming, gzipped ones too), then path itself when it
// exists. No file at all is an error that wraps fs.ErrNotExist.
func Files(path string) ([]string, error) {
	fs, err := files(path)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.path
	}
	return out, nil
}

func files(path string) ([]file, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []file
	current := false
	for _, e := range ents {
		name := e.Name()
		if name == base {
			current = !e.IsDir()
			continue
		}
		if e.IsDir() || !strings.HasPrefix(name, prefix) {
			continue
		}
		rest, gz := strings.CutSuffix(name[len(prefix):], ext+".gz")
		if !gz {
			var ok bool
			if rest, ok = strings.CutSuffix(name[len(prefix):], ext); !ok {
				continue
			}
		}
		t, err := time.Parse(backupTimeLayout, rest)
		if err != nil {
			continue // not a name lumberjack gives
		}
		out = append(out, file{path: filepath.Join(dir, name), rotated: t, gz: gz})
	}
	slices.SortFunc(out, func(a, b file) int {
		if c := a.rotated.Compare(b.rotated); c != 0 {
			return c
		}
		// Being gzipped, the plain one is whole and the .gz may not be yet: keep the plain one.
		if a.gz == b.gz {
			return 0
		} else if a.gz {
			return 1
		}
		return -1
	})
	out = slices.CompactFunc(out, func(a, b file) bool { return a.rotated.Equal(b.rotated) })
	if current {
		out = append(out, file{path: filepath.Join(dir, base)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no access log at %s: %w", path, fs.ErrNotExist)
	}
	return out, nil
}

// Filter picks lines. Every field set must match; the zero Filter matches every line.
type Filter struct {
	Console string    // exactly this console id
	Login   string    // exactly this login
	Since   time.Time // arrived at or after this time
}

// Match reports whether the line l, which arrived at t, is one the filter picks.
func (f Filter) Match(l *audit.Line, t time.Time) bool {
	return (f.Console == "" || l.Console == f.Console) &&
		(f.Login == "" || l.Login == f.Login) &&
		(f.Since.IsZero() || !t.Before(f.Since))
}

// A Reader reads the access log at Path.
type Reader struct {
	Path   string
	Filter Filter
	// Line is called for each line the filter picks, oldest first: its bytes as written (without
	// the newline; valid only during the call), parsed, and when it arrived. An error stops the read
	// and is returned.
	Line func(raw []byte, l *audit.Line, t time.Time) error
	// Skipped is told of each line that is not an access-log line (where, and why). Nil: ignored.
	Skipped func(err error)
	// Idle is called when a follow has read everything there is, before it looks again. Nil:
	// nothing.
	Idle func()
}

// Read reads every line there is now, across the rotated files and the current one, and returns.
// No log at all is an error that wraps fs.ErrNotExist.
func (r *Reader) Read() error { return r.run(context.Background(), nil) }

// Follow reads as Read does, then keeps reading what is written, as `tail -F` does, until ctx is
// done (then it returns nil). wait returns nil when it is time to look again. A
// rotation (the current file renamed away, a new one created) is followed: the old file is read
// to its end, then the new one from its start, so no line is lost or repeated. A log that does
// not exist yet is waited for. An error from wait (ctx's, or the caller's own) ends the follow
// too, and Follow returns nil.
func (r *Reader) Follow(ctx context.Context, wait func(context.Context) error) error {
	if wait == nil {
		return errors.New("logread: Follow without a wait")
	}
	return r.run(ctx, wait)
}

// A cursor is the file being read and where in it.
type cursor struct {
	f       *os.File
	src     io.Reader // f, or a gzip reader on it
	file    file
	info    fs.FileInfo // f's, to know whether Path still names it
	newest  time.Time   // for the current file: the newest rotated file when it was opened
	partial []byte      // a line not yet ended
	skip    bool        // the line being read is over maxLine: dropped up to its end
	lineNo  int
	buf     []byte
}

func (r *Reader) run(ctx context.Context, wait func(context.Context) error) error {
	var cur *cursor
	defer func() {
		if cur != nil {
			cur.f.Close()
		}
	}()
	// after is where the next file to read starts: files rotated after it (zero: the oldest).
	var after time.Time
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		if cur == nil {
			list, err := files(r.Path)
			if errors.Is(err, fs.ErrNotExist) && wait != nil {
				if err := r.idle(ctx, wait); err != nil {
					return nil
				}
				continue
			}
			if err != nil {
				return err
			}
			next, ok := nextFile(list, after)
			if !ok {
				// Only the current file can be missing here: renamed away, its successor not yet
				// created.
				if wait == nil {
					return nil
				}
				if err := r.idle(ctx, wait); err != nil {
					return nil
				}
				continue
			}
			if cur, err = open(next, list); errors.Is(err, fs.ErrNotExist) {
				if !next.rotated.IsZero() {
					after = next.rotated // removed as the oldest: the next is newer
				}
				continue
			} else if err != nil {
				return err
			}
			if cur.file.rotated.IsZero() && openedSuccessor(r.Path, cur) {
				// Rotated between the listing and the open: the file renamed away is read first.
				cur.f.Close()
				cur = nil
				continue
			}
		}
		if err := r.drain(cur); err != nil {
			return err
		}
		if !cur.file.rotated.IsZero() {
			// A rotated file is whole: go on to the next.
			if err := r.finish(cur); err != nil {
				return err
			}
			after = cur.file.rotated
			cur.f.Close()
			cur = nil
			continue
		}
		rotatedAs, moved, err := r.movedAway(cur)
		if err != nil {
			return err
		}
		if moved {
			// The writer closes a file before it renames it: what is left is read now, then
			// the files after it.
			if err := r.drain(cur); err != nil {
				return err
			}
			if err := r.finish(cur); err != nil {
				return err
			}
			after = rotatedAs
			cur.f.Close()
			cur = nil
			continue
		}
		if wait == nil {
			// All there is now; a line still being written is read as it stands.
			return r.finish(cur)
		}
		if err := r.idle(ctx, wait); err != nil {
			return nil
		}
	}
}

func (r *Reader) idle(ctx context.Context, wait func(context.Context) error) error {
	if r.Idle != nil {
		r.Idle()
	}
	return wait(ctx)
}

// nextFile is the oldest of list rotated after after (every file when after is zero), else the
// current file.
func nextFile(list []file, after time.Time) (file, bool) {
	for _, f := range list {
		if f.rotated.IsZero() || f.rotated.After(after) {
			return f, true
		}
	}
	return file{}, false
}

func open(f file, list []file) (*cursor, error) {
	h, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	info, err := h.Stat()
	if err != nil {
		h.Close()
		return nil, err
	}
	c := &cursor{f: h, src: h, file: f, info: info, buf: make([]byte, 64<<10)}
	if f.gz {
		zr, err := gzip.NewReader(h)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		c.src = zr
	}
	for _, o := range list {
		if o.rotated.After(c.newest) {
			c.newest = o.rotated
		}
	}
	return c, nil
}

// openedSuccessor reports whether the current file c was opened just after a rotation that the
// listing c was chosen from did not show: a rotated file newer than any in it is not c's file.
func openedSuccessor(path string, c *cursor) bool {
	list, err := files(path)
	if err != nil {
		return false
	}
	for _, f := range list {
		if f.rotated.After(c.newest) {
			st, err := os.Stat(f.path)
			return err != nil || !os.SameFile(st, c.info)
		}
	}
	return false
}

// movedAway reports whether Path no longer names the current file that c reads: a rotation. Then
// rotatedAs is the time in the name it was given (the first rotated file newer than any there was
// when c was opened).
func (r *Reader) movedAway(c *cursor) (rotatedAs time.Time, moved bool, err error) {
	st, err := os.Stat(r.Path)
	if err == nil && os.SameFile(st, c.info) {
		return time.Time{}, false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, err
	}
	list, err := files(r.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, err
	}
	for _, f := range list {
		if f.rotated.After(c.newest) {
			return f.rotated, true, nil
		}
	}
	if st != nil {
		// Replaced by another file without a rotated one to show for it: the new one is read next.
		return c.newest, true, nil
	}
	return time.Time{}, false, nil // renamed, but not yet seen under its new name
}

// drain reads c to its end, handing each ended line on.
func (r *Reader) drain(c *cursor) error {
	for {
		n, err := c.src.Read(c.buf)
		if n > 0 {
			if err := r.lines(c, c.buf[:n]); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.file.path, err)
		}
	}
}

// lines hands on every line that b ends, keeping what it does not end for later.
func (r *Reader) lines(c *cursor, b []byte) error {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			c.keep(b)
			return nil
		}
		chunk := b[:i]
		b = b[i+1:]
		if c.skip || len(c.partial) > 0 {
			c.keep(chunk)
			chunk = c.partial
		}
		skip := c.skip
		c.partial, c.skip = c.partial[:0], false
		c.lineNo++
		if skip {
			r.skipped(c, errors.New("line too long"))
			continue
		}
		if err := r.line(c, chunk); err != nil {
			return err
		}
	}
	return nil
}

// keep adds b to the line being read, or drops it when the line is already too long.
func (c *cursor) keep(b []byte) {
	if c.skip {
		return
	}
	if len(c.partial)+len(b) > maxLine {
		c.partial, c.skip = c.partial[:0], true
		return
	}
	c.partial = append(c.partial, b...)
}

// finish hands on a last line that no newline ended: the file will get no more.
func (r *Reader) finish(c *cursor) error {
	if len(c.partial) == 0 && !c.skip {
		return nil
	}
	return r.lines(c, []byte{'\n'})
}

func (r *Reader) line(c *cursor, raw []byte) error {
	raw = bytes.TrimSuffix(raw, []byte{'\r'})
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	l, t, err := audit.ParseLine(raw)
	if err != nil {
		r.skipped(c, err)
		return nil
	}
	if !r.Filter.Match(&l, t) {
		return nil
	}
	return r.Line(raw, &l, t)
}

func (r *Reader) skipped(c *cursor, err error) {
	if r.Skipped != nil {
		r.Skipped(fmt.Errorf("%s line %d skipped: %w", c.file.path, c.lineNo, err))
	}
}
