package fastloop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/proxy"
)

// This file is the fast loop's exchange (conn.go): one judged, bodiless GET or HEAD exchanged with
// its console on the caller's own goroutine, over a pool of kept connections (pool.go) — the same
// request the ReverseProxy hop sends (written by writeConsoleHead, with the Door's assertion:
// Judged.WriteAssertion) and the console's answer passed on with the same scrubbing
// (proxy.ScrubConsoleAnswer, proxy.ScrubbedFromAnswer); every failure answered by the Hop
// (Hop.AnswerFailed).

// An exchange is one fast connection's reusable state.
type exchange struct {
	out    http.Request // the console's request: its method and URL (its head is written by writeHead)
	url    url.URL
	lines  string       // the caller's header lines, as fastHead admitted them
	closes bool         // the caller's Connection says "close"
	judged proxy.Judged // the Door's verdict on the request: where out goes, what it asserts
	answer answerReader
	// uc is the console connection the exchange holds (nil, or closed already, once it is put
	// back in the pool): what the fast loop closes when serving the connection panics.
	uc *upConn
	// entry is what the door's audit.Recorder is told of the exchange (SPEC G3, G4), kept here
	// so that recording it allocates nothing: its status and body bytes sent are the
	// exchange's to fill, the rest the verdict's (Judged.FillEntry).
	entry audit.Entry
	field func(name, value string) (string, bool) // ConnServer.ConsoleField
}

func (ex *exchange) release() {
	ex.out, ex.url, ex.lines, ex.closes, ex.judged, ex.uc, ex.entry = http.Request{}, url.URL{}, "", false, proxy.Judged{}, nil, audit.Entry{}
	ex.answer.release()
}

// writeHead writes the head of the console's request (writeConsoleHead).
func (ex *exchange) writeHead(w *bufio.Writer) error {
	return writeConsoleHeadWith(w, ex.out.Method, ex.url.RequestURI(), ex.lines, ex.closes, &ex.judged, ex.field)
}

// fastServedHook, if not nil, is told of every request the fast loop serves (tests only).
var fastServedHook func()

// copyBufferSize is the size of the buffers an answer's body is copied through when it does not
// go straight into the caller's writer (the ReverseProxy hop's is the same).
const copyBufferSize = 32 << 10

var copyBufferPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

// While countPools is set (tests only), copyBuffersOut and callerWritersOut count the copy
// buffers and caller writers taken from their pools and not given back: what the exchanges in
// progress, the streams that wait among them, hold. Unset, nothing is counted: no shared write
// on every exchange.
var (
	countPools                       atomic.Bool
	copyBuffersOut, callerWritersOut atomic.Int64
)

func countOut(n *atomic.Int64, delta int64) {
	if countPools.Load() {
		n.Add(delta)
	}
}

// max1xx bounds the informational answers passed on before the final one (net/http's Transport's).
const max1xx = 5

var callerWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, fastReadBuffer) }}

// takeCallerWriter is a writer from callerWriters writing to to; giveCallerWriter gives it
// back, writing to nothing.
func takeCallerWriter(to io.Writer) *bufio.Writer {
	w := callerWriters.Get().(*bufio.Writer)
	w.Reset(to)
	countOut(&callerWritersOut, 1)
	return w
}

func giveCallerWriter(w *bufio.Writer) {
	w.Reset(nil)
	callerWriters.Put(w)
	countOut(&callerWritersOut, -1)
}

// exchange forwards r, which the Door judged (ex.judged) to go to t (its Target), over a kept
// connection, writes the console's answer to caller, and reports whether caller's connection may
// carry another request. lines are r's header lines as fastHead admitted them (r.Header was read
// from them and is not changed): the console's request is written from them. Every failure is
// answered by the Hop, as the ReverseProxy hop answers it (Hop.AnswerFailed); nothing is retried
// but a kept connection that the console had closed before it read the request.
func (cs *ConnServer) exchange(ex *exchange, caller net.Conn, r *http.Request, lines string, t *proxy.Target) bool {
	if fastServedHook != nil {
		fastServedHook()
	}
	h := cs.Door.Hop
	ex.url = url.URL{Path: t.Path, RawQuery: r.URL.RawQuery}
	ex.out = http.Request{Method: r.Method, URL: &ex.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: t.Addr}
	ex.lines, ex.closes, ex.field = lines, r.Close, cs.ConsoleField
	j := &ex.judged

	var uc *upConn
	var res *http.Response
	for attempt := 0; ; {
		var err error
		var reused bool
		uc, reused, err = cs.pool.take(r.Context(), t.Addr)
		ex.uc = uc
		if err == nil {
			uc.caller = caller
			res, err = uc.roundTrip(ex)
		}
		if err == nil {
			break
		}
		fresh := uc == nil || uc.read == 0
		if uc != nil {
			if uc.endWatch() {
				err = errCallerGone // the watch closed the console's connection: nobody waits
			}
			uc.close()
		}
		if err == errCallerGone || err == proxy.ErrUnwritable { // the console is not at fault
			return writeFast(caller, r, &ex.entry, func(w http.ResponseWriter) { h.AnswerFailed(w, r, j, err) })
		}
		if reused && err == errStale {
			continue // nothing was sent on it: the next kept one, or a new one
		}
		if reused && fresh && attempt == 0 {
			attempt++
			continue // the console closed a kept connection: a GET or HEAD may be sent again
		}
		return writeFast(caller, r, &ex.entry, func(w http.ResponseWriter) { h.AnswerFailed(w, r, j, err) })
	}

	cw := takeCallerWriter(caller) // copyAnswerBody may give it back and take another: see there
	defer func() {
		if cw != nil {
			giveCallerWriter(cw)
		}
	}()
	for n := 0; res.StatusCode >= 100 && res.StatusCode <= 199 && res.StatusCode != http.StatusSwitchingProtocols; n++ {
		// 103 Early Hints and the like, passed on as ReverseProxy passes them on.
		var err error
		if n >= max1xx {
			err = errors.New("too many 1xx informational answers")
		} else {
			writeAnswerHead(cw, res, r, false)
			if err := cw.Flush(); err != nil { // the caller is gone: recorded 499, as nothing was answered
				uc.close()
				return false
			}
		}
		if err == nil {
			res, err = uc.readAnswer(&ex.out, &ex.answer)
		}
		if err != nil {
			if uc.endWatch() {
				err = errCallerGone
			}
			uc.close()
			return writeFast(caller, r, &ex.entry, func(w http.ResponseWriter) { h.AnswerFailed(w, r, j, err) })
		}
	}
	if res.StatusCode == http.StatusSwitchingProtocols || res.StatusCode < 100 || res.StatusCode > 999 {
		// ReverseProxy's answer to a switch nobody asked for.
		uc.close()
		err := fmt.Errorf("console answered %d to a request that asked for no protocol switch", res.StatusCode)
		return writeFast(caller, r, &ex.entry, func(w http.ResponseWriter) { h.AnswerFailed(w, r, j, err) })
	}

	ex.entry.Status = res.StatusCode
	chunked := false
	if res == &ex.answer.res { // read by answerReader: passed on from its own lines
		writeCallerHead(cw, res.StatusCode, ex.answer.lines, r)
	} else {
		chunked = writeAnswerHead(cw, res, r, true)
	}
	stream := chunked && r.Method != http.MethodHead
	if stream {
		// A stream (server-sent events) may be silent for long: end it when the caller goes,
		// from the start; and when the door goes away (EndStreams).
		uc.watch()
		cs.streams.add(uc)
	}
	consoleErr, callerErr := copyAnswerBody(&cw, caller, res, uc.br, chunked, &ex.entry.Bytes)
	if stream {
		cs.streams.remove(uc)
	}
	callerGone := uc.endWatch() // if so, the watch closed the console's connection
	if stream && consoleErr != nil && callerErr == nil && !callerGone && uc.ending.Load() {
		// Ended by EndStreams between two of the console's reads: the caller's answer ends as
		// a finished one (the last chunk), and its connection closes after it.
		cw.WriteString("0\r\n\r\n")
		cw.Flush()
		uc.close()
		return false
	}
	if consoleErr != nil || callerErr != nil || callerGone {
		// The answer is cut short: the caller sees its connection close, as ReverseProxy's.
		if callerErr == nil && !callerGone {
			cs.Door.Log.Warn("fleet.hop-error", "console", t.ConsoleID, "error", "reading the console's answer: "+consoleErr.Error())
		}
		uc.close()
		return false
	}
	res.Body.Close() // read to its end: this only marks it closed
	// The console's connection is done with: it goes back before the answer's last bytes go
	// out, so that the caller's next request (or another's) finds it kept.
	if res.Close || uc.br.Buffered() > 0 {
		uc.close() // the console's connection ends; the caller's goes on
	} else {
		ex.uc = nil // another exchange may take it now
		cs.pool.put(uc)
	}
	return cw.Flush() == nil && !r.Close
}

// writeAnswerHead writes the console's answer head, as ReverseProxy passes it on: without
// hop-by-hop headers, scrubbed (proxy.ScrubConsoleAnswer), with a Date, and — when final — framed for
// the caller: the console's Content-Length, or chunked (reported) when its length is unknown or it
// announces trailers.
func writeAnswerHead(w *bufio.Writer, res *http.Response, r *http.Request, final bool) (chunked bool) {
	h := res.Header
	removeHopByHop(h)
	proxy.ScrubConsoleAnswer(h)
	if final {
		if _, ok := h["Date"]; !ok {
			h["Date"] = httpDate()
		}
		bodyless := r.Method == http.MethodHead || res.StatusCode == http.StatusNoContent ||
			res.StatusCode == http.StatusNotModified
		switch {
		case bodyless:
		case res.ContentLength >= 0 && len(res.Trailer) == 0:
			if cl := h["Content-Length"]; len(cl) != 1 || !isLength(cl[0], res.ContentLength) {
				h["Content-Length"] = []string{strconv.FormatInt(res.ContentLength, 10)}
			}
		default:
			delete(h, "Content-Length")
			chunked = true
		}
		if len(res.Trailer) > 0 {
			names := make([]string, 0, len(res.Trailer))
			for k := range res.Trailer {
				names = append(names, k)
			}
			h["Trailer"] = names
		}
		if r.Close {
			h["Connection"] = []string{"close"}
		}
	}
	writeStatusLine(w, res.StatusCode)
	if chunked {
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	writeHeaderLines(w, h)
	w.WriteString("\r\n")
	return chunked
}

// isLength reports whether v is the decimal n (the console's own Content-Length, kept as written).
func isLength(v string, n int64) bool {
	got, err := strconv.ParseUint(v, 10, 63)
	return err == nil && int64(got) == n
}

// writeHeaderLines writes every line of h but those skip names, as net/http's Header.Write writes
// them (a name that is not a token is left out; CR and LF in a value become spaces; a value is
// trimmed) but in map order: nothing reads meaning into the order of different names, and
// sorting them costs every answer.
func writeHeaderLines(w *bufio.Writer, h http.Header) {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			continue
		}
		for _, v := range values {
			w.WriteString(name)
			w.WriteString(": ")
			writeFieldValue(w, v)
			w.WriteString("\r\n")
		}
	}
}

// writeFieldValue writes v trimmed, with CR and LF as spaces (net/http's headerNewlineToSpace).
func writeFieldValue(w *bufio.Writer, v string) {
	if v == "" || !isASCIISpace(v[0]) && !isASCIISpace(v[len(v)-1]) &&
		strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0 {
		w.WriteString(v) // as nearly every value is: nothing to trim or replace
		return
	}
	v = textproto.TrimString(v)
	for len(v) > 0 {
		i := strings.IndexAny(v, "\r\n")
		if i < 0 {
			w.WriteString(v)
			return
		}
		w.WriteString(v[:i])
		w.WriteByte(' ')
		v = v[i+1:]
	}
}

func isCTL(r rune) bool { return r < ' ' || r == 0x7f }

// isASCIISpace is what textproto.TrimString trims.
func isASCIISpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// copyAnswerBody copies the console's answer body to *wp, a writer from callerWriters writing to
// caller (chunked: re-framed), sending what it has whenever the console has nothing more at hand
// (so a stream is passed on as it comes), then the trailers; what is left in *wp is for the
// caller to flush. consoleErr is a failed read of the console, callerErr a failed write to the
// caller.
//
// An answer of unknown length (chunked: server-sent events, a long poll) waits for the console's
// next bytes holding no copy buffer, and no caller writer once all was sent, when the console has
// had nothing more at hand: such a stream may be silent for hours, and thousands of them open at
// once must cost little each (SPEC P1: at most 32 KiB a stream). The writer given back is never
// used again; *wp is the one taken after the wait (never nil when copyAnswerBody returns). A bulk
// answer, whose reads fill the buffer, keeps both.
// sent counts the body bytes written to the caller.
func copyAnswerBody(wp **bufio.Writer, caller io.Writer, res *http.Response, from *bufio.Reader, chunked bool, sent *int64) (consoleErr, callerErr error) {
	w := *wp
	var buf *[copyBufferSize]byte
	putBuf := func() {
		if buf != nil {
			copyBufferPool.Put(buf)
			countOut(&copyBuffersOut, -1)
			buf = nil
		}
	}
	defer putBuf()
	quiet := true // the console had nothing more at hand after the last read
	for {
		if chunked && quiet && from.Buffered() == 0 {
			putBuf()
			allSent := w.Buffered() == 0
			if allSent {
				giveCallerWriter(w)
				w, *wp = nil, nil
			}
			from.Peek(1) // waits for the next bytes in from's own buffer; an error is the next Read's
			if allSent {
				w = takeCallerWriter(caller)
				*wp = w
			}
		}
		var p []byte
		if n := from.Buffered(); !chunked && n > 0 && n <= w.Available() {
			p = w.AvailableBuffer()[:n] // straight into w's buffer when it fits
		} else {
			if buf == nil {
				buf = copyBufferPool.Get().(*[copyBufferSize]byte)
				countOut(&copyBuffersOut, 1)
			}
			p = buf[:]
		}
		n, err := res.Body.Read(p)
		quiet = n < len(p)
		if n > 0 {
			if chunked {
				w.WriteString(strconv.FormatInt(int64(n), 16))
				w.WriteString("\r\n")
			}
			m, werr := w.Write(p[:n])
			*sent += int64(m)
			if werr != nil {
				return nil, werr
			}
			if chunked {
				w.WriteString("\r\n")
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err, nil
		}
		if from.Buffered() == 0 {
			if werr := w.Flush(); werr != nil {
				return nil, werr
			}
		}
	}
	if chunked {
		w.WriteString("0\r\n")
		if len(res.Trailer) > 0 {
			proxy.ScrubConsoleAnswer(res.Trailer)
			res.Trailer.Write(w)
		}
		w.WriteString("\r\n")
	}
	return nil, nil
}

// hopByHop are the headers that ReverseProxy removes from an answer (RFC 9110 7.6.1), besides
// those its Connection names.
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, line := range h["Connection"] {
		for name := range strings.SplitSeq(line, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name)
	}
}

// httpDate is the Date header's values, made at most once a second. Callers share them: they
// must not change them.
func httpDate() []string {
	now := time.Now().Unix()
	if d := cachedDate.Load(); d != nil && d.unix == now {
		return d.values
	}
	d := &dateValues{unix: now, values: []string{time.Unix(now, 0).UTC().Format(http.TimeFormat)}}
	cachedDate.Store(d)
	return d.values
}

var cachedDate atomic.Pointer[dateValues]

type dateValues struct {
	unix   int64
	values []string
}

// writeFast answers r on caller with what answer writes (Hop.AnswerFailed's refusal or page), and
// reports whether the connection may carry another request (not when the answer says close). e
// is given the answer's status, body bytes and reason word: X-Fleet-Reason, which only fleet
// writes here (the answer is the Hop's own, never a console's).
func writeFast(caller net.Conn, r *http.Request, e *audit.Entry, answer func(w http.ResponseWriter)) bool {
	w := &bufferedAnswer{header: http.Header{}, status: http.StatusOK}
	answer(w)
	e.Status, e.Reason = w.status, ""
	if v := w.header["X-Fleet-Reason"]; len(v) == 1 {
		e.Reason = v[0]
	}
	if w.status == 499 { // the caller went away: nobody to answer
		return false
	}
	if r.Method != http.MethodHead {
		e.Bytes = int64(w.body.Len())
	}
	h2 := w.header
	if _, ok := h2["Date"]; !ok {
		h2["Date"] = httpDate()
	}
	h2["Content-Length"] = []string{strconv.Itoa(w.body.Len())}
	keep := !r.Close && !httpguts.HeaderValuesContainsToken(h2["Connection"], "close")
	if !keep {
		h2["Connection"] = []string{"close"}
	}
	bw := takeCallerWriter(caller)
	defer giveCallerWriter(bw)
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(w.status) + " " + http.StatusText(w.status) + "\r\n")
	h2.Write(bw)
	bw.WriteString("\r\n")
	if r.Method != http.MethodHead {
		bw.Write(w.body.Bytes())
	}
	return bw.Flush() == nil && keep
}

// A bufferedAnswer is the http.ResponseWriter of writeFast: the small pages of refusals and
// failures, kept until they are written whole.
type bufferedAnswer struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (w *bufferedAnswer) Header() http.Header { return w.header }

func (w *bufferedAnswer) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
}

func (w *bufferedAnswer) Write(p []byte) (int, error) {
	w.wrote = true
	return w.body.Write(p)
}

// peekByte looks at the next byte of the socket fd without reading it and without waiting: n is
// 1 (something is there), 0 (the peer closed), or -1 with errno (EAGAIN: nothing yet). It is
// recvfrom without an address: syscall.Recvfrom fails on a stream socket's empty one.
func peekByte(fd uintptr) (n int, errno syscall.Errno) {
	var b [1]byte
	r, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}

// closeWhenGone closes console when the caller's side of caller ends, or caller is closed here
// (it reads nothing: bytes the caller sends stay for the next request), until stop is called;
// stop reports whether it did.
func closeWhenGone(caller, console net.Conn) (stop func() (closed bool)) {
	sc, ok := caller.(syscall.Conn)
	if !ok {
		return func() bool { return false }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	caller.SetReadDeadline(time.Time{}) // a stream may last longer than the wait for a request
	done := make(chan struct{})
	var stopped atomic.Bool // set by stop: a caller gone after it changes nothing
	closed := false         // the watch closed console: read once done is closed
	go func() {
		defer close(done)
		gone := false
		err := rc.Read(func(fd uintptr) bool {
			n, errno := peekByte(fd)
			if errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK || errno == syscall.EINTR {
				return false // wait until the caller sends something or goes
			}
			gone = n <= 0
			return true
		})
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			gone = true // the caller's connection was closed here (Close): nobody can be answered
		}
		if gone && stopped.CompareAndSwap(false, true) {
			console.Close()
			closed = true
		}
	}()
	return func() bool {
		stopped.Store(true)
		caller.SetReadDeadline(time.Unix(1, 0)) // wakes the watch
		<-done
		return closed
	}
}
