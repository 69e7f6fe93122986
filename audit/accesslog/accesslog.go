// Package accesslog is the access log's writer (SPEC G3): an audit.Recorder that keeps each
// audited entry (audit.Entry.Audited) as one JSON line (audit.AppendLine) in
// <stateHome>/fleet/access.log, rotated at 10 MiB with five old files kept beside it, every one
// 0600.
//
// It owns the file, its rotation and the one goroutine that writes it. Record never blocks, never
// fails and never refuses: an entry goes into a bounded queue (QueueSize entries), and when the
// queue is full or a write fails the line is dropped and counted (Dropped), so that a full disk or
// a stuck file never slows a request (G3). It must not decide anything about a request, nor write
// anything an audit.Entry does not hold (which is never a secret).
//
// It lives apart from package audit, the seam every door imports, because it is the one consumer
// with a file, a goroutine and a dependency of its own.
//
// # Rotation: gopkg.in/natefinch/lumberjack.v2
//
// Rotation is gopkg.in/natefinch/lumberjack.v2 (v2.2.1), the rotating writer Caddy's logs use,
// rather than a rotation of fleet's own: small (one file, no dependencies), long in use, and it
// does exactly what G3 asks — rotate before a write would pass MaxSize, keep MaxBackups old files
// named access-<UTC time>.log beside the log, and remove older ones. What it does with modes, read
// in its source: a new log is created 0600 when none exists, and otherwise with the mode of the log
// it replaces; an old file is the log renamed, so it keeps its mode. Open refuses (F1) a log or an
// old file that is group- or world-accessible or someone else's, so every file stays 0600. The
// folder is <stateHome>/fleet, which fleet serve makes 0700 before; lumberjack would create a
// missing folder 0755, so Open refuses to start without it. Compression is off (lumberjack would
// gzip old files in a goroutine of its own; `fleet log` reads the files as they are).
package accesslog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/internal/state"
)

// FileName is the access log's name inside <stateHome>/fleet. Old files are named as lumberjack
// names them: access-2006-01-02T15-04-05.000.log (UTC), beside it.
const FileName = "access.log"

// The rotation and the queue (G3).
const (
	MaxSizeMiB = 10   // the log is rotated before a write would make it larger
	MaxBackups = 5    // old files kept beside it
	QueueSize  = 1024 // entries waiting for the writer; past it, lines are dropped
	maxBatch   = 64 << 10

	// writeDelay is how long the writer lets lines gather after the first one of a batch, so
	// that a busy door wakes it a few times a second rather than once a request (a goroutine's
	// wake-up costs more than the line). A queue half full ends the wait at once.
	writeDelay = 50 * time.Millisecond
)

// A Log is the access log's writer. Record is safe for concurrent use; Close ends it.
type Log struct {
	queue   chan audit.Entry
	out     io.WriteCloser
	dropped atomic.Uint64
	written atomic.Uint64

	pending atomic.Bool   // a line was queued since the writer last drained, and it was told
	kick    chan struct{} // the first line of a batch is queued (cap 1)
	full    chan struct{} // the queue is half full: write now (cap 1)
	flush   chan chan struct{}
	stop    chan struct{} // closed by Close, after the queue
	done    chan struct{}
	closeMu sync.RWMutex // held for reading by Record, for writing by Close
	closed  bool
}

// Open opens (or creates, 0600) <fleetDir>/access.log and starts its writer. fleetDir must exist
// and be private (state.CheckDir); an existing log or old file that is too open or someone else's
// is refused (F1) with the chmod that fixes it.
func Open(fleetDir string) (*Log, error) {
	return open(fleetDir, MaxSizeMiB, nil)
}

// open is Open with the rotation size in MiB and, if not nil, another writer (tests: a full disk).
func open(fleetDir string, maxSizeMiB int, out io.WriteCloser) (*Log, error) {
	if err := state.CheckDir(fleetDir); err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	if err := checkFiles(fleetDir); err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	if out == nil {
		out = &lumberjack.Logger{
			Filename:   filepath.Join(fleetDir, FileName),
			MaxSize:    maxSizeMiB,
			MaxBackups: MaxBackups,
			Compress:   false,
		}
	}
	l := &Log{
		queue: make(chan audit.Entry, QueueSize),
		out:   out,
		kick:  make(chan struct{}, 1),
		full:  make(chan struct{}, 1),
		flush: make(chan chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go l.run()
	return l, nil
}

// checkFiles holds the log and its old files to F1: regular files of this user's, 0600.
func checkFiles(dir string) error {
	names, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		name := n.Name()
		if name != FileName && !(strings.HasPrefix(name, "access-") && strings.HasSuffix(name, ".log")) {
			continue
		}
		if err := state.CheckFile(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Record queues e's line when e belongs in the access log (audit.Entry.Audited). It never blocks:
// a full queue, or a closed Log, drops the line and counts it.
func (l *Log) Record(e *audit.Entry) {
	if !e.Audited() {
		return
	}
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
	select {
	case l.queue <- *e:
	default:
		l.dropped.Add(1)
		return
	}
	// The writer waits for these two only: a line queued wakes it once a batch, not once a line.
	if !l.pending.Load() && l.pending.CompareAndSwap(false, true) {
		nudge(l.kick)
	}
	if len(l.queue) >= QueueSize/2 {
		nudge(l.full)
	}
}

// nudge sends on ch (cap 1) if it holds nothing yet.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Dropped is how many lines were lost since Open: the queue was full, a write failed, or the Log
// was closed (G3, G4: fleet doctor WARNs when it is not 0).
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Written is how many lines were written since Open.
func (l *Log) Written() uint64 { return l.written.Load() }

// Flush waits until every line queued before it was written (or dropped).
func (l *Log) Flush() {
	ch := make(chan struct{})
	select {
	case l.flush <- ch:
		<-ch
	case <-l.done:
	}
}

// Close writes what is queued, closes the file and ends the writer. Lines recorded after it are
// dropped and counted.
func (l *Log) Close() error {
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	close(l.queue)
	close(l.stop)
	l.closeMu.Unlock()
	<-l.done
	return l.out.Close()
}

// run is the one writer. Told of a batch's first line (kick), it waits writeDelay for more (less
// when the queue is half full, a Flush or Close asks), then writes all that is queued, up to
// maxBatch bytes of lines a Write. It ends once Close has closed the queue and it is written.
func (l *Log) run() {
	defer close(l.done)
	buf := make([]byte, 0, maxBatch+4096)
	delay := time.NewTimer(writeDelay)
	delay.Stop()
	for {
		var flushed chan struct{}
		select {
		case <-l.kick:
			delay.Reset(writeDelay)
			select {
			case <-delay.C:
			case <-l.full:
			case flushed = <-l.flush:
			case <-l.stop:
			}
			delay.Stop()
		case flushed = <-l.flush:
		case <-l.stop:
		}
		l.pending.Store(false) // before the drain: a line queued after it kicks the next batch
		open := l.drain(&buf)
		if flushed != nil {
			close(flushed)
		}
		if !open {
			return
		}
	}
}

// drain writes every line queued now, and reports false once the queue is closed and empty.
func (l *Log) drain(buf *[]byte) bool {
	for {
		n, took, open := 0, 0, true
	batch:
		for len(*buf) < maxBatch {
			select {
			case e, ok := <-l.queue:
				if !ok {
					open = false
					break batch
				}
				took++
				n += l.appendLine(buf, &e)
			default:
				break batch
			}
		}
		l.write(buf, n)
		if !open || took == 0 {
			return open
		}
	}
}

func (l *Log) appendLine(buf *[]byte, e *audit.Entry) int {
	b, err := audit.AppendLine(*buf, e)
	if err != nil {
		l.dropped.Add(1)
		return 0
	}
	*buf = b
	return 1
}

// write writes the n lines in buf at once; when that fails, all n are dropped and counted (a line
// half written is counted too: a reader skips a line that does not parse).
func (l *Log) write(buf *[]byte, n int) {
	if n > 0 {
		if _, err := l.out.Write(*buf); err != nil {
			l.dropped.Add(uint64(n))
		} else {
			l.written.Add(uint64(n))
		}
	}
	*buf = (*buf)[:0]
}
