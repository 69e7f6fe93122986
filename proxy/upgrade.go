package proxy

// The hop's WebSocket path: what an idle WebSocket costs, and how the hop ends it.
//
// httputil.ReverseProxy serves an upgrade by keeping the caller's handler goroutine (a deep stack,
// grown while net/http parsed the request) blocked until the connection ends, with two more
// goroutines copying through io.Copy's 32 KiB buffers (neither end is a bare socket there: the
// console's end is the Transport's wrapper, so no splice), a fourth watching the request's
// context, and the server's and the Transport's 4 KiB bufio buffers: 107 KB of heap and stacks
// per idle WebSocket, 50 KiB of RSS while its buffers are untouched and 88 KiB once a 16 KiB
// message went through (fleet serve, 9,900 WebSockets). A person's tabs hold WebSockets open for
// hours, mostly silent.
//
// So the hop keeps ReverseProxy for everything it is good at and takes over only the bytes after
// the 101. The upgrade goes through a second ReverseProxy with the same Rewrite (every header the
// hop sets or removes, exactly as for any request), whose Transport is upgradeTransport: it dials
// with the hop's dialer (the same owner check of the console's socket), writes the request, and
// reads the answer. An answer other than 101 goes back to ReverseProxy as an ordinary response.
// A 101 is checked as ReverseProxy checks it (the console switched to the protocol asked for,
// with "Connection: upgrade"); then the caller's connection is hijacked, the 101 written to it,
// and two goroutines move the bytes, each with a shallow stack and no buffer while it waits: it
// waits for its socket to be readable (the netpoller, as any blocked Read) and takes a pooled
// buffer only to move what arrived, giving it back once the socket has nothing more. The handler
// returns at once, so net/http's goroutine, its context and its buffers go too. An idle WebSocket
// then costs its two goroutines' stacks (2 KiB each) and the two sockets' small structures: about
// 6 KB of heap and stacks (BenchmarkIdleWebSocketMemory in package supervisor) and 11 KiB of RSS,
// whatever went through it.
//
// Splicing (io.Copy between two *net.TCPConn) would need no user buffer either, but each blocked
// direction holds a pipe: two more file descriptors per direction, tripling the descriptors an
// idle WebSocket uses.
//
// http.Server's Close and Shutdown leave hijacked connections alone, so the hop keeps a registry
// of its live upgraded connections: Hop.CloseUpgraded ends those of one console or one login,
// Hop.Close every one.

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/phase-console/fleet/contract"
)

// errUpgraded is what upgradeTransport answers ReverseProxy once it has taken the connection
// over: there is no response left for ReverseProxy to write.
var errUpgraded = errors.New("proxy: connection upgraded")

// maxUpgradeHead bounds the console's answer to an upgrade, before its body: http.Transport's
// default limit for response headers.
const maxUpgradeHead = 10 << 20

// pipeBufferSize is the size of the buffer a pipe takes, from a pool, to move what arrived: as
// io.Copy's (16 KiB moved a third fewer bytes a second in BenchmarkWebSocketThroughput).
const pipeBufferSize = 32 << 10

type upgradeKey struct{}

// newUpgradeProxy is the ReverseProxy that forwards WebSocket upgrades: the same as rp, with
// upgradeTransport as its Transport.
func (h *Hop) newUpgradeProxy(rp *httputil.ReverseProxy, dial DialFunc) *httputil.ReverseProxy {
	up := *rp
	up.Transport = &upgradeTransport{dial: dial, live: &h.live}
	up.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if err != errUpgraded {
			h.consoleDown(w, r, err)
		}
	}
	return &up
}

// forwardUpgrade forwards an upgrade request (Forward has seen Connection: upgrade and an
// Upgrade header). The door has refused every upgrade but WebSocket (CheckUpgrade); the hop
// refuses them too, before it dials anything, so that no door can forget (S9). A WebSocket
// handshake has no body (RFC 6455 §4.1): one with a body is refused, so that no request body
// ever rides into a tunnel.
func (h *Hop) forwardUpgrade(w http.ResponseWriter, r *http.Request, f *forward) {
	if !contract.EqualFoldASCII(upgradeType(r.Header), "websocket") || len(r.Header["Upgrade"]) != 1 {
		WriteRefusal(w, r, h.log, Refuse(http.StatusBadRequest, "bad-upgrade", "only a WebSocket upgrade is forwarded"))
		return
	}
	if hasBody(r) {
		WriteRefusal(w, r, h.log, Refuse(http.StatusBadRequest, "bad-upgrade", "a WebSocket upgrade carries no body"))
		return
	}
	if _, ok := webSocketKey(r.Header); !ok || len(r.Header.Values("Sec-WebSocket-Version")) != 1 || r.Header.Get("Sec-WebSocket-Version") != "13" {
		WriteRefusal(w, r, h.log, Refuse(http.StatusBadRequest, "bad-upgrade",
			"a WebSocket handshake has one Sec-WebSocket-Key of 16 bytes and Sec-WebSocket-Version 13 (RFC 6455)"))
		return
	}
	ctx := context.WithValue(r.Context(), forwardKey{}, f)
	ctx = context.WithValue(ctx, upgradeKey{}, w)
	h.up.ServeHTTP(w, r.WithContext(ctx))
}

// isUpgrade reports whether h asks for a protocol upgrade, as ReverseProxy decides it: a
// Connection header that lists "upgrade" and an Upgrade header.
func isUpgrade(h http.Header) bool {
	return upgradeType(h) != ""
}

// upgradeType is the protocol h asks to switch to: its Upgrade header when Connection lists
// "upgrade" (ReverseProxy's own rule), else "".
func upgradeType(h http.Header) string {
	up := h.Get("Upgrade")
	if up == "" || !hasToken(h["Connection"], "upgrade") {
		return ""
	}
	return up
}

func hasToken(lines []string, token string) bool {
	for _, v := range lines {
		for t := range strings.SplitSeq(v, ",") {
			if contract.EqualFoldASCII(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// webSocketKey returns h's one Sec-WebSocket-Key, when it is the base64 of 16 bytes (RFC 6455
// §4.1).
func webSocketKey(h http.Header) (string, bool) {
	keys := h.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(keys[0])
	return keys[0], err == nil && len(b) == 16
}

// webSocketAccept is the Sec-WebSocket-Accept that proves a switch for key (RFC 6455 §4.2.2).
func webSocketAccept(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// printable reports whether s is printable ASCII and not empty.
func printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// upgradeTransport is the RoundTripper of the hop's upgrade ReverseProxy: one connection per
// upgrade, never pooled.
type upgradeTransport struct {
	dial DialFunc
	live *liveConns
}

func (u *upgradeTransport) RoundTrip(out *http.Request) (*http.Response, error) {
	ctx := out.Context()
	f, _ := ctx.Value(forwardKey{}).(*forward)
	w, _ := ctx.Value(upgradeKey{}).(http.ResponseWriter)
	want := upgradeType(out.Header)
	if f == nil || w == nil || !contract.EqualFoldASCII(want, "websocket") || out.Body != nil && out.Body != http.NoBody {
		// Forward let only a bodiless WebSocket upgrade come here (S9); anything else is a bug.
		return nil, errors.New("proxy: only a WebSocket upgrade without a body is forwarded")
	}
	console, err := u.dial(ctx, "tcp", out.URL.Host)
	if err != nil {
		return nil, err
	}
	// The caller may go away while the console thinks: that ends the handshake.
	stop := context.AfterFunc(ctx, func() { console.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		console.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := out.Write(console); err != nil {
		return fail(err)
	}
	head := &headLimit{r: console, n: maxUpgradeHead}
	br := bufio.NewReader(head)
	var res *http.Response
	for {
		res, err = http.ReadResponse(br, out)
		if err != nil {
			return fail(err)
		}
		if res.StatusCode < 100 || res.StatusCode > 199 || res.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 103 Early Hints and the like: passed on as ReverseProxy passes them on, scrubbed as
		// the final answer is (R9).
		ScrubConsoleAnswer(res.Header)
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(res.StatusCode, textproto.MIMEHeader(res.Header)); err != nil {
				return fail(err)
			}
		}
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		// The console declined (403, 404, 426…): ReverseProxy passes its answer on, as for any
		// request. The connection is this response's alone; closing the body closes it.
		head.n = math.MaxInt64
		res.Body = &declinedBody{ReadCloser: res.Body, conn: console, stop: stop}
		return res, nil
	}
	// ReverseProxy's checks of a 101: the console switched to the protocol asked for.
	if got := upgradeType(res.Header); !printable(got) || !contract.EqualFoldASCII(got, want) {
		return fail(fmt.Errorf("console switched to protocol %q when %q was asked for", got, want))
	}
	// And the check RFC 6455 (§4.1) asks of a WebSocket client, which fleet is on this hop: the
	// 101 proves the switch with the accept value of the key sent. Without it, a console that
	// answers 101 and goes on reading HTTP (net/http's server lets a handler do that) would read
	// the caller's bytes, spliced onto fleet's own same-user socket, as requests without fleet's
	// assertion — as local, the machine owner's.
	if key, _ := webSocketKey(out.Header); len(res.Header.Values("Sec-WebSocket-Accept")) != 1 || res.Header.Get("Sec-WebSocket-Accept") != webSocketAccept(key) {
		return fail(errors.New("console answered 101 without the Sec-WebSocket-Accept of the key sent (RFC 6455): not a WebSocket switch"))
	}
	if !stop() {
		console.Close()
		return nil, ctx.Err()
	}
	caller, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		console.Close()
		return nil, fmt.Errorf("hijack failed on protocol switch: %w", err)
	}
	// Registered before the caller hears of the switch, so that a CloseUpgraded that comes after
	// the 101 always finds it. From here on no answer can be written through w: every failure
	// closes both ends.
	t := u.live.add(f.t.ConsoleID, f.t.Login, caller, console)
	if t == nil {
		return nil, errUpgraded // the hop is closed
	}
	if ctx.Err() != nil {
		// Cancelled since stop (a device revoked mid-handshake): the CloseUpgraded that came
		// with the cancellation ran before the tunnel was registered and could not find it.
		t.close()
		return nil, errUpgraded
	}
	ScrubConsoleAnswer(res.Header)
	copyHeader(w.Header(), res.Header)
	res.Header = w.Header()
	res.Body = nil // the 101's head only
	err = res.Write(brw)
	if n := br.Buffered(); err == nil && n > 0 {
		// What the console sent right after its 101 came in with it.
		b, _ := br.Peek(n)
		_, err = brw.Write(b)
		t.toCaller.Add(int64(n))
		t.frames.advance(b, false)
	}
	if err == nil {
		err = brw.Flush()
	}
	if n := brw.Reader.Buffered(); err == nil && n > 0 {
		// What the caller sent right after its request (the first frames, in the same packet).
		b, _ := brw.Reader.Peek(n)
		_, err = console.Write(b)
	}
	if a := recordingOf(w); a != nil {
		a.status = http.StatusSwitchingProtocols
		if err == nil {
			// The stream is recorded when it closes, with its duration and the bytes that
			// went to the caller (G3); until then nothing is.
			a.upgraded, t.rec = true, a.detached()
		}
	}
	if err != nil {
		t.close()
		return nil, errUpgraded
	}
	go t.pipe(console, caller, nil)
	go t.pipe(frameWriter{Conn: caller, t: t}, console, &t.toCaller)
	if t.live.goingAway() {
		t.goAway() // the door went away during the handshake (goingaway.go)
	}
	return nil, errUpgraded
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

// headLimit reads from r until n bytes have been read, then fails.
type headLimit struct {
	r io.Reader
	n int64
}

var errHeadTooLarge = errors.New("proxy: the console's answer to an upgrade has too large a head")

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// declinedBody is the body of a console's non-101 answer to an upgrade; closing it closes the
// connection it came on.
type declinedBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *declinedBody) Close() error {
	b.stop()
	b.ReadCloser.Close()
	return b.conn.Close()
}

// liveConns is the hop's registry of live upgraded connections.
type liveConns struct {
	mu     sync.Mutex
	conns  map[*tunnel]struct{}
	closed bool // after Hop.Close: a tunnel that starts is closed at once
	going  bool // after Hop.GoingAway: a tunnel that starts is closed with 1001 (goingaway.go)
}

func (l *liveConns) goingAway() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.going
}

// A tunnel is one upgraded connection: the caller's end and the console's, and two pipes between.
type tunnel struct {
	consoleID, login string
	caller, console  net.Conn
	live             *liveConns
	ended            atomic.Int32 // pipes that ended cleanly
	closeOnce        sync.Once
	// rec, if not nil, is the door's recording of the upgrade, recorded once both pipes have
	// returned (exited), with the bytes that went to the caller (toCaller).
	rec      *recording
	toCaller atomic.Int64
	exited   atomic.Int32
	// Writes to the caller, and where they are in the console's frames: a close frame of
	// GoingAway's goes between two frames (goingaway.go).
	wmu       sync.Mutex
	frames    wsFrames
	going     bool // GoingAway was called: the close frame goes at the next boundary
	closeSent bool
}

// add registers a tunnel between caller and console; on a closed hop it closes both ends instead
// and returns nil. The caller starts its two pipes.
func (l *liveConns) add(consoleID, login string, caller, console net.Conn) *tunnel {
	t := &tunnel{consoleID: consoleID, login: login, caller: caller, console: console, live: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		caller.Close()
		console.Close()
		return nil
	}
	if l.conns == nil {
		l.conns = map[*tunnel]struct{}{}
	}
	l.conns[t] = struct{}{}
	return t
}

// closeMatching closes the tunnels match reports true for (nil: all) and reports how many.
func (l *liveConns) closeMatching(match func(consoleID, login string) bool, thenRefuse bool) int {
	l.mu.Lock()
	var ts []*tunnel
	for t := range l.conns {
		if match == nil || match(t.consoleID, t.login) {
			ts = append(ts, t)
		}
	}
	if thenRefuse {
		l.closed = true
	}
	l.mu.Unlock()
	for _, t := range ts {
		t.close()
	}
	return len(ts)
}

func (t *tunnel) close() {
	t.closeOnce.Do(func() {
		t.caller.Close()
		t.console.Close()
		t.live.mu.Lock()
		delete(t.live.conns, t)
		t.live.mu.Unlock()
	})
}

// pipe moves bytes from src to dst until src ends or either fails. A clean end is passed on as
// a half-close (ReverseProxy does the same) and the tunnel closes once both directions ended;
// a failure closes it at once.
func (t *tunnel) pipe(dst, src net.Conn, moved *atomic.Int64) {
	err := copyConn(dst, src, moved)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			err = cw.CloseWrite()
		} else {
			err = io.EOF
		}
	}
	if err != nil || t.ended.Add(1) == 2 {
		t.close()
	}
	if t.exited.Add(1) == 2 && t.rec != nil {
		// Both directions are over: the stream is closed, and nothing more is moved.
		t.rec.record(t.toCaller.Load())
	}
}

var pipeBuffers = sync.Pool{New: func() any { return new([pipeBufferSize]byte) }}

// copyConn copies from src to dst until src's end (nil) or an error. On a bare socket it holds no
// buffer while src is idle.
func copyConn(dst io.Writer, src net.Conn, moved *atomic.Int64) error {
	var rc syscall.RawConn
	var err error
	// A connection that a connection loop handed to net/http with bytes it had read ahead
	// (package proxy/fastloop) gives its bare socket once none are left.
	if h, ok := src.(interface{ Drained() (net.Conn, bool) }); ok {
		if bare, ok := h.Drained(); ok {
			src = bare
		}
	}
	switch c := src.(type) {
	case *net.TCPConn: // exactly these: a wrapper's own Read must not be bypassed
		rc, err = c.SyscallConn()
	case *net.UnixConn:
		rc, err = c.SyscallConn()
	default:
		return copyBlocking(dst, src, moved)
	}
	if err != nil {
		return err
	}
	var buf *[pipeBufferSize]byte
	defer func() {
		if buf != nil {
			pipeBuffers.Put(buf)
		}
	}()
	var n int
	var rerr error
	read := func(fd uintptr) bool {
		if buf == nil {
			buf = pipeBuffers.Get().(*[pipeBufferSize]byte)
		}
		for {
			n, rerr = syscall.Read(int(fd), buf[:])
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			// Nothing to move: give the buffer back while the socket is idle.
			pipeBuffers.Put(buf)
			buf = nil
			return false
		}
		return true
	}
	for {
		if err := rc.Read(read); err != nil {
			return err
		}
		if rerr != nil {
			return rerr
		}
		if n == 0 {
			return nil // src's end
		}
		w, err := dst.Write(buf[:n])
		if moved != nil {
			moved.Add(int64(w))
		}
		if err != nil {
			return err
		}
	}
}

// copyBlocking is copyConn for a connection that is not a bare socket (none of the doors'
// today): a blocked Read needs its buffer, so it holds one for the connection's life.
func copyBlocking(dst io.Writer, src io.Reader, moved *atomic.Int64) error {
	buf := make([]byte, 4<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			if moved != nil {
				moved.Add(int64(w))
			}
			if werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// CloseUpgraded closes both ends of every live upgraded connection (WebSocket) for which match
// reports true (nil: every one), and reports how many it closed. http.Server's Close and Shutdown
// leave such connections alone (their handlers hijacked them): this is how a console's, or a
// login's, live connections end.
func (h *Hop) CloseUpgraded(match func(consoleID, login string) bool) int {
	return h.live.closeMatching(match, false)
}

// Close closes every live upgraded connection, and each later one as soon as its handshake
// completes, and the hop's idle connections to consoles. A door's Close calls it after its
// http.Server's.
func (h *Hop) Close() error {
	h.live.closeMatching(nil, true)
	if h.rp == nil {
		return nil
	}
	if t, ok := h.rp.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}
