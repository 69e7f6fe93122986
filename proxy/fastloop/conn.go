package fastloop

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phase-console/fleet/proxy"
)

// This file is the connection loop itself (doc.go): accepting, the workers that serve one
// connection after another, Shutdown and Close, and the hand-over of a connection to net/http's
// server.

// fastReadBuffer is the per-connection buffer a request head must fit in to be served by the
// fast loop (heads are a few hundred bytes; a larger one goes to net/http, limit 64 KiB).
const fastReadBuffer = 8 << 10

// A ConnServer serves a door's connections: it accepts them itself, serves
// requests that fastHead admits and Door.Judge would forward with its own exchange, and hands
// each connection to Server (net/http) at the first request it does not serve, bytes read
// included (and the verdict made, Judged.Context).
//
// Server's Handler must be Door (or serve with it, after Prepare), so that a request is judged
// alike whichever serves it, and judged once. Door and Server are required. ConnServer replaces
// Server.ConnContext with its own, which calls the one it replaced only for a connection it did
// not accept itself.
//
// A connection that is a *tls.Conn (a listener from tls.NewListener: the direct-reach door) has
// its handshake first, bounded by Server's ReadHeaderTimeout as net/http bounds it. One that
// negotiated a protocol other than HTTP/1.1 (h2) is handed to Server as it is, so that net/http
// serves it as it would have; the others' requests carry the connection's TLS state (r.TLS), and
// a request handed to Server has it in its context (HandedTLS), since net/http sets r.TLS only on
// a connection it handshook itself.
type ConnServer struct {
	Door   *proxy.Door
	Server *http.Server
	// Prepare, if not nil, is applied to each request before the Door judges it, as the door's
	// Handler does (the unix door restores the Host that Serve names). It may change r.Host,
	// never r.Header: the fast exchange writes the console's request from the caller's header
	// lines as they came (writeConsoleHead).
	Prepare func(r *http.Request)
	// ConnContext, if not nil, returns the context of a new connection's requests (the door's
	// per-connection facts). It is called once per connection, on the connection's own goroutine;
	// a connection handed to Server keeps its values.
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// Admit, if not nil, is the door's own judgement of a request that fastHead admitted, made
	// before Door.Judge: what the door checks of its caller before the shared Door does (the
	// direct-reach door's device credential, Host and SNI). It returns the request to judge and
	// forward (with the door's facts in its context) and done, called once the exchange is over;
	// or ok false, and the request goes to Server unjudged, which judges it whole as it judges
	// every request it reads itself. Admit must have no effect that judging the request again
	// would repeat (no failure counted, nothing logged) when it returns false.
	Admit func(r *http.Request) (admitted *http.Request, done func(), ok bool)
	// ConsoleField, if not nil, is asked of each header line of the caller that the console's
	// request would carry: the value to send instead, or false to send none. It is the door's
	// own rule for what a console never sees (the direct-reach door's device cookie, R9), and
	// must be the one the door applies to a request forwarded by Server.
	ConsoleField func(name, value string) (string, bool)

	mu        sync.Mutex
	started   bool
	conns     map[*fastConn]struct{}
	listeners map[net.Listener]struct{}
	handoff   *handoffListener
	closing   atomic.Bool
	idle      []*worker      // workers waiting for a connection, the one idle last at the end
	sweeping  bool           // sweepWorkers is to come
	idleFor   time.Duration  // how long workers wait (workerIdle), if not 0: tests
	accepting sync.WaitGroup // Serve's accept loops
	served    sync.WaitGroup // Server.Serve on the handoff listener
	pool      consolePool    // the exchanges' kept connections to consoles (pool.go)
	streams   liveStreams    // the answers of unknown length being passed on (streams.go)
}

// Serve accepts connections on ln until Shutdown or Close, when it returns
// http.ErrServerClosed. Several listeners may be served at once.
func (cs *ConnServer) Serve(ln net.Listener) error {
	cs.mu.Lock()
	if cs.closing.Load() {
		cs.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	if !cs.started {
		cs.start(ln.Addr())
	}
	cs.listeners[ln] = struct{}{}
	cs.accepting.Add(1)
	cs.mu.Unlock()
	defer cs.accepting.Done()

	var delay time.Duration // as net/http backs off on temporary accept errors
	for {
		c, err := ln.Accept()
		if err != nil {
			if cs.closing.Load() {
				return http.ErrServerClosed
			}
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				cs.logf("accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		fc := &fastConn{cs: cs, c: c}
		cs.mu.Lock()
		if cs.closing.Load() {
			cs.mu.Unlock()
			c.Close()
			return http.ErrServerClosed
		}
		cs.conns[fc] = struct{}{}
		if w := cs.idleWorker(); w != nil {
			w.next <- fc // a worker that served a connection already takes it
		} else {
			go cs.work(&worker{next: make(chan *fastConn, 1)}, fc)
		}
		cs.mu.Unlock()
	}
}

// workerIdle is how long a worker waits for its next connection before the next sweep ends it.
const workerIdle = 10 * time.Second

// A worker is a goroutine of the fast loop that serves one connection after another: a
// goroutine per connection would start each on a small stack that grows (copied each time) to
// what an exchange needs. Measured, that and the goroutine's start and end were ~2.7 µs of a new
// connection's ~27 µs of user time (bench/RESULTS.md); a worker keeps its stack. A worker waits
// on a channel of its own, not in a select with a timer (which cost half of what it saved):
// the accept loops hand a connection to the worker idle last, and a sweep every workerIdle ends
// those idle that long (sweepWorkers): an idle worker ends within twice workerIdle.
type worker struct {
	next   chan *fastConn // the next connection to serve (one at most); nil: end
	idleAt time.Time
}

// work serves fc, then each connection handed to w, until it is told to end.
func (cs *ConnServer) work(w *worker, fc *fastConn) {
	for fc != nil {
		fc.serve()
		fc = nil // nothing of a served connection is kept while waiting
		if !cs.rest(w) {
			return
		}
		fc = <-w.next
	}
}

// idleWorker takes the worker idle last off the idle ones, or returns nil. cs.mu is held.
func (cs *ConnServer) idleWorker() *worker {
	n := len(cs.idle)
	if n == 0 {
		return nil
	}
	w := cs.idle[n-1]
	cs.idle[n-1] = nil
	cs.idle = cs.idle[:n-1]
	return w
}

// rest makes w idle, waiting for a connection; false when the server is closing (w ends).
func (cs *ConnServer) rest(w *worker) bool {
	w.idleAt = time.Now()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closing.Load() {
		return false
	}
	cs.idle = append(cs.idle, w)
	if !cs.sweeping {
		cs.sweeping = true
		time.AfterFunc(cs.workerIdle(), cs.sweepWorkers)
	}
	return true
}

// sweepWorkers ends the workers idle for workerIdle (the first ones: cs.idle is in the order
// they became idle), and comes again while any is idle.
func (cs *ConnServer) sweepWorkers() {
	now := time.Now()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for n < len(cs.idle) && now.Sub(cs.idle[n].idleAt) >= cs.workerIdle() {
		cs.idle[n].next <- nil
		n++
	}
	kept := copy(cs.idle, cs.idle[n:])
	clear(cs.idle[kept:])
	cs.idle = cs.idle[:kept]
	if kept > 0 && !cs.closing.Load() {
		time.AfterFunc(cs.workerIdle(), cs.sweepWorkers)
	} else {
		cs.sweeping = false
	}
}

// workerIdle is how long a worker of cs waits for a connection. cs.mu is held.
func (cs *ConnServer) workerIdle() time.Duration {
	if cs.idleFor > 0 {
		return cs.idleFor
	}
	return workerIdle
}

// endWorkers ends every idle worker. cs.mu is held, and cs.closing set: none becomes idle after.
func (cs *ConnServer) endWorkers() {
	for _, w := range cs.idle {
		w.next <- nil
	}
	clear(cs.idle)
	cs.idle = nil
}

// start starts net/http's server on the handoff listener. cs.mu is held.
func (cs *ConnServer) start(addr net.Addr) {
	cs.started = true
	if cs.Door.Hop != nil { // else the Door refuses every request: nothing is dialled
		cs.pool.dial = cs.Door.Hop.Dial
	}
	cs.conns = map[*fastConn]struct{}{}
	cs.listeners = map[net.Listener]struct{}{}
	cs.handoff = newHandoffListener(addr)
	user := cs.Server.ConnContext
	cs.Server.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if h, ok := c.(*handedConn); ok {
			return mergedContext{Context: ctx, values: h.ctx}
		}
		if user != nil {
			return user(ctx, c)
		}
		return ctx
	}
	cs.served.Add(1)
	go func() {
		defer cs.served.Done()
		cs.Server.Serve(cs.handoff)
	}()
}

// stopAccepting closes every listener and waits until no accept loop can add a connection.
func (cs *ConnServer) stopAccepting() bool {
	cs.closing.Store(true)
	cs.mu.Lock()
	started := cs.started
	for ln := range cs.listeners {
		ln.Close()
	}
	cs.endWorkers()
	cs.mu.Unlock()
	cs.accepting.Wait()
	return started
}

// Shutdown stops accepting, closes the connections that wait for a request, lets those in an
// exchange finish it, and shuts Server down; when ctx ends first, every connection is closed.
func (cs *ConnServer) Shutdown(ctx context.Context) error {
	if !cs.stopAccepting() {
		return cs.Server.Shutdown(ctx)
	}
	err := cs.Server.Shutdown(ctx)
	cs.handoff.Close()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for cs.closeIdle() > 0 {
		select {
		case <-ctx.Done():
			cs.closeAll()
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-tick.C:
		}
	}
	cs.served.Wait()
	cs.pool.closeAll()
	return err
}

// Close closes the listeners and every connection at once.
func (cs *ConnServer) Close() error {
	started := cs.stopAccepting()
	err := cs.Server.Close()
	if started {
		cs.handoff.Close()
		cs.closeAll()
	}
	cs.pool.closeAll()
	return err
}

// closeIdle closes every fast connection that waits for a request and reports how many are
// still in an exchange.
func (cs *ConnServer) closeIdle() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	busy := 0
	for fc := range cs.conns {
		if fc.state.CompareAndSwap(connIdle, connClosed) {
			fc.c.Close()
		} else if fc.state.Load() == connActive {
			busy++
		}
	}
	return busy
}

func (cs *ConnServer) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for fc := range cs.conns {
		fc.state.Store(connClosed)
		fc.c.Close()
	}
}

func (cs *ConnServer) forget(fc *fastConn) {
	cs.mu.Lock()
	delete(cs.conns, fc)
	cs.mu.Unlock()
}

// The states of a fast connection, for Shutdown.
const (
	connIdle   int32 = iota // waiting for a request: Shutdown may close it
	connActive              // in an exchange: Shutdown lets it finish
	connClosed              // closed, or handed to net/http
)

// A fastConn is one connection in the fast loop.
type fastConn struct {
	cs     *ConnServer
	c      net.Conn
	state  atomic.Int32
	ctx    context.Context
	br     *bufio.Reader
	rr     requestReader // its requests (fastread.go)
	ex     exchange      // the exchange's reusable state for this connection (exchange.go)
	handed bool          // handed to net/http's server (handOver): no longer this loop's to close
}

func (fc *fastConn) serve() {
	defer fc.recoverPanic() // once per connection, not per request
	cs := fc.cs
	var state *tls.ConnectionState
	if tc, ok := fc.c.(*tls.Conn); ok {
		if !fc.handshake(tc) {
			return
		}
		st := tc.ConnectionState()
		if st.NegotiatedProtocol != "" && st.NegotiatedProtocol != "http/1.1" {
			fc.handOverTLS(tc) // h2: net/http's, on the connection as it is
			return
		}
		state = &st
	}
	fc.ctx = context.WithValue(context.Background(), http.LocalAddrContextKey, fc.c.LocalAddr())
	if state != nil {
		fc.ctx = context.WithValue(fc.ctx, handedTLSKey{}, state)
	}
	if cs.ConnContext != nil {
		fc.ctx = cs.ConnContext(fc.ctx, fc.c)
	}
	fc.rr.setContext(fc.ctx)
	fc.rr.base.TLS = state
	fc.br = fastReaders.Get().(*bufio.Reader)
	fc.br.Reset(fc.c)
	remote := fc.c.RemoteAddr().String()
	first := true // net/http's server gives a new connection's first head ReadHeaderTimeout in all
	for {
		if cs.closing.Load() || fc.state.Load() != connIdle {
			break
		}
		head, ok := fc.readHead(first)
		if !ok {
			break
		}
		if !fc.state.CompareAndSwap(connIdle, connActive) {
			break // closed by Shutdown
		}
		if head == nil {
			fc.handOver("", nil)
			return
		}
		first = false
		s := string(head) // the request's one allocation of its own
		if !fastHead(s) {
			fc.handOver("", nil)
			return
		}
		fc.br.Discard(len(s))
		r, err := fc.rr.read(s, remote)
		if err != nil {
			fc.handOver(s, nil) // net/http answers it from the bytes as they came
			return
		}
		if cs.Prepare != nil {
			cs.Prepare(r)
		}
		var done func()
		if cs.Admit != nil {
			admitted, d, ok := cs.Admit(r)
			if !ok {
				fc.handOver(s, nil) // net/http judges it whole
				return
			}
			r, done = admitted, d
		}
		j := &fc.ex.judged // the verdict is made where the exchange uses it
		cs.Door.Judge(r, j)
		t, forward := j.Target()
		if !forward {
			if done != nil {
				done()
			}
			// net/http answers it, with this verdict (Door.ServeHTTP): judged once.
			fc.handOver(s, j)
			return
		}
		keep := cs.exchangeRecorded(&fc.ex, fc.c, r, fc.rr.lines, &t)
		if done != nil {
			done()
		}
		if !keep || !fc.state.CompareAndSwap(connActive, connIdle) {
			break
		}
	}
	fc.ex.release()
	fc.rr.release()
	fc.state.Store(connClosed)
	cs.forget(fc)
	fc.c.Close()
	fc.br.Reset(nil)
	fastReaders.Put(fc.br)
}

// readHeaderTimeout and idleTimeout are Server's, as net/http applies them (proxy.NewServer's
// when not set).
func (cs *ConnServer) readHeaderTimeout() time.Duration {
	if t := cs.Server.ReadHeaderTimeout; t > 0 {
		return t
	}
	return proxy.ReadHeaderTimeout
}

func (cs *ConnServer) idleTimeout() time.Duration {
	if t := cs.Server.IdleTimeout; t > 0 {
		return t
	}
	return proxy.IdleTimeout
}

// handshake runs c's TLS handshake within Server's ReadHeaderTimeout (net/http's bound on it);
// false when it failed, and the connection is closed.
func (fc *fastConn) handshake(c *tls.Conn) bool {
	c.SetDeadline(time.Now().Add(fc.cs.readHeaderTimeout()))
	err := c.HandshakeContext(context.Background())
	if err == nil {
		c.SetWriteDeadline(time.Time{})
		return true
	}
	fc.state.Store(connClosed)
	fc.cs.forget(fc)
	c.Close()
	return false
}

// handOverTLS gives net/http's server c, whose handshake chose a protocol that this loop does
// not speak, as it is: nothing of it has been read.
func (fc *fastConn) handOverTLS(c *tls.Conn) {
	fc.state.Store(connClosed)
	fc.cs.forget(fc)
	c.SetDeadline(time.Time{})
	fc.handed = true
	if !fc.cs.handoff.give(c) {
		c.Close()
	}
}

// handedTLSKey holds a TLS connection's state in its requests' context (HandedTLS).
type handedTLSKey struct{}

// HandedTLS is the TLS state of the connection a request came on, when the fast loop made the
// handshake and then handed the connection to net/http (whose r.TLS is then nil); else nil.
func HandedTLS(ctx context.Context) *tls.ConnectionState {
	st, _ := ctx.Value(handedTLSKey{}).(*tls.ConnectionState)
	return st
}

// exchangeRecorded is exchange, told to the Door's audit.Recorder once the answer is complete
// (SPEC G3, G4): from the exchange's own entry, so that it allocates nothing.
func (cs *ConnServer) exchangeRecorded(ex *exchange, caller net.Conn, r *http.Request, lines string, t *proxy.Target) bool {
	rec := cs.Door.Audit
	if rec == nil {
		return cs.exchange(ex, caller, r, lines, t)
	}
	now := cs.Door.Now
	if now == nil {
		now = time.Now
	}
	e := &ex.entry
	ex.judged.FillEntry(e)
	e.Time, e.Status, e.Bytes, e.Reason = now(), 0, 0, ""
	keep := cs.exchange(ex, caller, r, lines, t)
	if e.Status == 0 {
		e.Status = 499 // the caller went before an answer reached it
	}
	e.Duration = now().Sub(e.Time)
	rec.Record(e)
	return keep
}

// recoverPanic, deferred by serve, ends a connection whose serving panicked (in Prepare, the
// Door's judgement, the exchange…) as net/http's server ends one whose handler panicked: the
// panic and its stack are logged (ErrorLog: a warning, SPEC S9), the caller's connection is
// closed with nothing more written to it, and so is the console connection the exchange held
// (never put back in the pool: in what state it was left is unknown). The worker goes on to its
// next connection. A connection already handed to net/http is net/http's; nothing of this one's
// is reused (its buffers are left to the garbage collector).
func (fc *fastConn) recoverPanic() {
	p := recover()
	if p == nil {
		return
	}
	const size = 64 << 10
	buf := make([]byte, size)
	buf = buf[:runtime.Stack(buf, false)]
	fc.cs.logf("http: panic serving %v: %v\n%s", fc.c.RemoteAddr(), p, buf)
	if uc := fc.ex.uc; uc != nil {
		fc.ex.uc = nil
		uc.close()
	}
	if !fc.handed {
		fc.state.Store(connClosed)
		fc.cs.forget(fc)
		fc.c.Close()
	}
}

// logf logs an operational error of the loop (an accept error, a panic) as net/http's server
// logs its own: to Server.ErrorLog (NewServer makes each line a warning), else as a warning to
// the Door's log, else to the log package's standard logger.
func (cs *ConnServer) logf(format string, args ...any) {
	switch {
	case cs.Server != nil && cs.Server.ErrorLog != nil:
		cs.Server.ErrorLog.Printf(format, args...)
	case cs.Door != nil && cs.Door.Log != nil:
		cs.Door.Log.Warn("fleet.http-error", "error", fmt.Sprintf(format, args...))
	default:
		log.Printf(format, args...)
	}
}

// fastReaders are the fast loop's read buffers, kept for the next connection when one closes (a
// connection handed to net/http keeps its own: it may still hold bytes for it).
var fastReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, fastReadBuffer) }}

// readHead waits for the next request's head and returns it, still unread in fc.br. ok is false
// when the connection ended (closed, or silent past its deadline: closed without an answer, as
// net/http's server does); a nil head with ok means the head does not fit fc.br.
func (fc *fastConn) readHead(first bool) (head []byte, ok bool) {
	if first {
		fc.c.SetReadDeadline(time.Now().Add(fc.cs.readHeaderTimeout()))
	} else {
		if fc.br.Buffered() == 0 {
			fc.c.SetReadDeadline(time.Now().Add(fc.cs.idleTimeout()))
			if _, err := fc.br.Peek(1); err != nil {
				return nil, false
			}
		}
		buf, _ := fc.br.Peek(fc.br.Buffered())
		if n := headEnd(buf); n > 0 {
			return buf[:n], true // as nearly every head comes: whole, in one read
		}
		// The rest of a head that came in pieces must come within ReadHeaderTimeout.
		fc.c.SetReadDeadline(time.Now().Add(fc.cs.readHeaderTimeout()))
	}
	head, err := peekHead(fc.br)
	return head, err == nil
}

// handOver gives the connection to net/http's server: first the bytes of head, which were read
// from fc.br already ("": none were), then what fc.br holds, then the connection. j, if not nil,
// is the Door's verdict on head's request, for Door.ServeHTTP to take (Judged.Context).
func (fc *fastConn) handOver(head string, j *proxy.Judged) {
	h := &handedConn{Conn: fc.c, ctx: fc.ctx, br: fc.br}
	if j != nil {
		h.ctx = j.Context(fc.ctx) // before release: j may be the exchange's
	}
	fc.ex.release()
	fc.rr.release()
	fc.state.Store(connClosed)
	fc.cs.forget(fc)
	fc.c.SetReadDeadline(time.Time{})
	if head != "" {
		h.prefix = []byte(head)
	}
	fc.handed = true
	if !fc.cs.handoff.give(h) {
		fc.c.Close()
	}
}

// A handedConn is a connection handed to net/http's server, with the bytes the fast loop had read.
type handedConn struct {
	net.Conn
	ctx    context.Context
	prefix []byte
	br     *bufio.Reader // nil once drained
}

func (h *handedConn) Read(p []byte) (int, error) {
	if len(h.prefix) > 0 {
		n := copy(p, h.prefix)
		h.prefix = h.prefix[n:]
		return n, nil
	}
	if h.br != nil {
		if h.br.Buffered() > 0 {
			return h.br.Read(p)
		}
		h.br = nil // let its buffer go
	}
	return h.Conn.Read(p)
}

// NetConn is the connection handed over, under what the fast loop had read of it.
func (h *handedConn) NetConn() net.Conn { return h.Conn }

// CloseWrite half-closes the connection, as net/http's server does before closing one.
func (h *handedConn) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Drained returns the bare connection once nothing read ahead is left: a hijacked WebSocket's
// copy (package proxy's) then waits on the socket without holding a buffer.
func (h *handedConn) Drained() (net.Conn, bool) {
	if len(h.prefix) > 0 || h.br != nil && h.br.Buffered() > 0 {
		return nil, false
	}
	h.prefix, h.br = nil, nil // let the buffer go
	return h.Conn, true
}

// A handoffListener is how connections reach net/http's server: Accept returns each given one.
type handoffListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// mergedContext is net/http's connection context with the values of the fast loop's (the door's
// per-connection facts, judged once).
type mergedContext struct {
	context.Context
	values context.Context
}

func (m mergedContext) Value(key any) any {
	if v := m.values.Value(key); v != nil {
		return v
	}
	return m.Context.Value(key)
}
