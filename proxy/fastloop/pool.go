package fastloop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/phase-console/fleet/proxy"
)

// This file is the fast exchange's connections to consoles: kept per console address, most
// recently used first, each dialled by the Hop's dialer (Hop.Dial: proxy.DialConsole, the owner
// check of the console's socket, comes with every new connection), let go after idleConnTimeout.

// The pool keeps what the Hop's Transport keeps for the ReverseProxy hop: as many idle
// connections to a console as requests run at once (each new one costs a dial and the owner
// check), let go after 30 seconds idle.
const (
	maxIdlePerConsole = 256
	idleConnTimeout   = 30 * time.Second
)

// An upConn is one connection to a console.
type upConn struct {
	c       net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer // while a request is written (roundTrip), from consoleWriters
	addr    string
	rc      syscall.RawConn // c's socket, for send
	sendFn  func(fd uintptr) bool
	sent    bool        // send's state in the current round trip
	stale   bool        // send found the console had closed uc or written to it unasked
	sendErr error       // send's failed write
	read    int64       // bytes read from c in the current round trip
	limit   int64       // while an answer head is read: read may not pass it (0: no limit)
	graced  bool        // c's read deadline is roundTrip's answerGrace, not cleared yet
	caller  net.Conn    // the caller of the exchange in progress, watched once it is slow
	unwatch func() bool // the running watch's stop (closeWhenGone), if any
	idleAt  time.Time
	ending  atomic.Bool // EndStreams ends the stream this connection carries (streams.go)
}

// answerGrace is how long the fast exchange reads from its console before it also watches its
// caller (watch): a caller that leaves while its console is still thinking (a long poll, a slow
// page) or slowly answering then closes the console's connection, as net/http's server ends a
// request whose caller left. An exchange done within it — nearly every one — costs no watch.
const answerGrace = 100 * time.Millisecond

// maxAnswerHead bounds what is read for one answer head, as net/http's Transport bounds it
// (MaxResponseHeaderBytes' default): a console that never ends its head is a failed answer, not
// a head fleet keeps growing.
const maxAnswerHead = 10 << 20

var errAnswerHeadTooLarge = errors.New("the console's answer head is over 10 MiB")

func (uc *upConn) Read(p []byte) (int, error) {
	if uc.limit > 0 {
		left := uc.limit - uc.read
		if left <= 0 {
			return 0, errAnswerHeadTooLarge
		}
		p = p[:min(int64(len(p)), left)]
	}
	n, err := uc.c.Read(p)
	if n == 0 && uc.graced && errors.Is(err, os.ErrDeadlineExceeded) && !uc.ending.Load() {
		// The exchange is slow: the rest may take as long as it takes, while the caller waits.
		uc.clearGrace()
		uc.watch()
		n, err = uc.c.Read(p)
	}
	uc.read += int64(n)
	return n, err
}

func (uc *upConn) clearGrace() {
	if uc.graced {
		uc.graced = false
		uc.c.SetReadDeadline(time.Time{})
	}
}

// watch starts watching the exchange's caller, once: a caller that leaves closes c.
func (uc *upConn) watch() {
	if uc.unwatch == nil && uc.caller != nil {
		uc.unwatch = closeWhenGone(uc.caller, uc.c)
	}
}

// endWatch stops the watch, if one runs, and reports whether the caller had left (c is closed).
func (uc *upConn) endWatch() (callerGone bool) {
	if uc.unwatch == nil {
		return false
	}
	callerGone = uc.unwatch()
	uc.unwatch = nil
	return callerGone
}

// errCallerGone is an exchange whose caller left before its answer: nobody to answer (499, as
// the ReverseProxy hop answers a request whose context ended).
var errCallerGone = fmt.Errorf("the caller went away before the console answered: %w", context.Canceled)

// readAnswer reads the head of the console's next answer to out: itself when fastAnswer admits
// it (into ar), else with http.ReadResponse; either way no more than maxAnswerHead is read for it.
func (uc *upConn) readAnswer(out *http.Request, ar *answerReader) (*http.Response, error) {
	uc.limit = uc.read + maxAnswerHead
	defer func() { uc.limit = 0 }()
	head, err := peekHead(uc.br)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // as ReadResponse says it
		}
		return nil, err
	}
	if head != nil {
		s := ar.keep(head)
		if length, closes, ok := fastAnswer(s); ok {
			uc.br.Discard(len(s))
			return ar.read(s, length, closes, uc.br, out), nil
		}
	}
	return http.ReadResponse(uc.br, out)
}

// roundTrip writes ex's request (writeHead) and reads the head of the console's first answer to it (readAnswer). A
// kept connection that the console closed or wrote to unasked since its last answer is
// errStale, with nothing written to it. An answer that has not begun within answerGrace is
// waited for while the caller is watched (watch).
//
// Its writer is taken for the request and given back once the request is sent: a kept
// connection, or one carrying a long stream, holds none (SPEC P1).
func (uc *upConn) roundTrip(ex *exchange) (*http.Response, error) {
	uc.read = 0
	uc.bw = consoleWriters.Get().(*bufio.Writer)
	uc.bw.Reset(uc.c)
	defer func() { uc.bw.Reset(nil); consoleWriters.Put(uc.bw); uc.bw = nil }()
	if err := ex.writeHead(uc.bw); err != nil {
		return nil, err
	}
	if uc.br.Buffered() > 0 {
		return nil, errStale // bytes after the last answer, read with it
	}
	if uc.sendFn == nil { // not a socket (tests): nothing to look at
		if err := uc.bw.Flush(); err != nil {
			return nil, err
		}
	} else {
		uc.sent, uc.stale, uc.sendErr = false, false, nil
		uc.graced = true
		var err error
		for {
			uc.c.SetReadDeadline(time.Now().Add(answerGrace))
			err = uc.rc.Read(uc.sendFn)
			if uc.sent || !errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			// rc.Read found the grace over before it called send: this goroutine was held up
			// (descheduled, throttled, the machine suspended) between the two. Nothing was
			// looked at or written; arm the grace again and send now. Only a pause of over
			// answerGrace at this very point comes here again.
		}
		if err != nil && uc.sent && !uc.stale && uc.sendErr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
			// Sent, and no answer yet: readAnswer waits for it (its first read finds anything
			// that came since), watching the caller.
			uc.clearGrace()
			uc.watch()
			err = nil
		}
		if err != nil {
			return nil, err
		}
		if uc.stale {
			return nil, errStale
		}
		if uc.sendErr != nil {
			return nil, uc.sendErr
		}
	}
	return uc.readAnswer(&ex.out, &ex.answer)
}

// consoleWriters are the writers a request to a console is written through (roundTrip).
var consoleWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

// errStale is a kept connection found closed by its console, or written to unasked.
var errStale = errors.New("the console closed its connection or wrote to it unasked")

// send is roundTrip's look, write and wait, run by uc.rc.Read (made a func value once per
// connection: none per request). Its first call looks at the socket without reading or waiting:
// a console that closed a kept connection (many close idle ones after a few seconds) would
// otherwise meet the request, which would then go out twice; one that wrote to it unasked would
// have the request — perhaps another caller's — given an answer that is not its own, and its own
// answer left for the request after. net/http's Transport watches every idle connection with a
// goroutine for this; here it costs one non-blocking system call. When the socket is quiet, it
// writes the request and asks to wait until the answer can be read. The wait is armed before the
// look (rc.Read clears what the poller knew), and the console can write nothing but its answer
// after it, so the wait misses nothing. A plain Read after the write would first try a read that
// cannot find the answer yet: this saves that system call on every exchange.
func (uc *upConn) send(fd uintptr) bool {
	if uc.sent {
		return true // readable: the answer, or the console's end, is there
	}
	uc.sent = true
	if n, errno := peekByte(fd); n >= 0 || errno != syscall.EAGAIN && errno != syscall.EWOULDBLOCK {
		uc.stale = true
		return true
	}
	if err := uc.bw.Flush(); err != nil {
		uc.sendErr = err
		return true
	}
	return false
}

// close ends the connection (and the watch on its caller, if one runs).
func (uc *upConn) close() {
	uc.endWatch()
	uc.c.Close()
}

// A consolePool keeps idle connections to consoles.
type consolePool struct {
	dial proxy.DialFunc // Hop.Dial; nil: nothing is dialled

	mu       sync.Mutex
	idle     map[string][]*upConn
	count    int
	closed   bool
	sweeping bool
}

// take returns a kept connection to addr (reused) or a new one.
func (p *consolePool) take(ctx context.Context, addr string) (uc *upConn, reused bool, err error) {
	now := time.Now()
	p.mu.Lock()
	for list := p.idle[addr]; len(list) > 0; list = p.idle[addr] {
		uc = list[len(list)-1]
		list[len(list)-1] = nil
		p.idle[addr] = list[:len(list)-1]
		p.count--
		idle := now.Sub(uc.idleAt)
		if idle >= idleConnTimeout {
			uc.close()
			continue
		}
		p.mu.Unlock()
		return uc, true, nil
	}
	p.mu.Unlock()
	if p.dial == nil {
		return nil, false, errNoDialer
	}
	c, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	uc = &upConn{c: c, addr: addr}
	if sc, ok := c.(syscall.Conn); ok {
		if uc.rc, err = sc.SyscallConn(); err != nil {
			c.Close()
			return nil, false, err
		}
		uc.sendFn = uc.send
	}
	uc.br = bufio.NewReaderSize(uc, fastReadBuffer)
	return uc, false, nil
}

var errNoDialer = errors.New("the door has no hop to dial consoles with")

// put keeps uc for the next exchange with its console, unless the pool is full or closed.
func (p *consolePool) put(uc *upConn) {
	uc.caller = nil
	uc.idleAt = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle[uc.addr]) >= maxIdlePerConsole || p.count >= 4*maxIdlePerConsole {
		p.mu.Unlock()
		uc.close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*upConn{}
	}
	p.idle[uc.addr] = append(p.idle[uc.addr], uc)
	p.count++
	if !p.sweeping {
		p.sweeping = true
		time.AfterFunc(idleConnTimeout/2, p.sweep)
	}
	p.mu.Unlock()
}

// sweep closes the connections idle for idleConnTimeout, and comes again while any is kept.
func (p *consolePool) sweep() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, list := range p.idle {
		kept := list[:0]
		for _, uc := range list {
			if now.Sub(uc.idleAt) >= idleConnTimeout {
				uc.close()
				p.count--
				continue
			}
			kept = append(kept, uc)
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(p.idle, addr)
		} else {
			p.idle[addr] = kept
		}
	}
	if p.count > 0 && !p.closed {
		time.AfterFunc(idleConnTimeout/2, p.sweep)
	} else {
		p.sweeping = false
	}
}

// closeAll closes every kept connection; connections put back afterwards are closed.
func (p *consolePool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, list := range p.idle {
		for _, uc := range list {
			uc.close()
		}
	}
	p.idle, p.count = nil, 0
}
