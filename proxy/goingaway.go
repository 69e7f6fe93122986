package proxy

// This file is how a door that is being handed to a new process (SPEC O3) ends what it holds
// open without cutting a byte of it: Hop.GoingAway ends every server-sent event stream at the
// end of what the console sent (the caller's response ends as a finished one: the last chunk on
// HTTP/1, END_STREAM on HTTP/2), and closes every WebSocket with a close frame of code 1001
// ("going away", RFC 6455 §7.4.1) written between two of the console's frames, so that the
// caller's page reconnects (to the new process) instead of seeing a broken stream. It is sticky:
// a stream or a WebSocket that starts afterwards is ended the same way at once.

import (
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// wsGoingAway is a WebSocket close frame from a server (unmasked, FIN, opcode 8) with status
// 1001, "going away".
var wsGoingAway = []byte{0x88, 0x02, 0x03, 0xe9}

// errGoneAway ends the console-to-caller pipe of a tunnel once its close frame is written.
var errGoneAway = errors.New("proxy: the door is going away (1001 sent)")

// eventStreams is the hop's registry of live server-sent event streams.
type eventStreams struct {
	mu    sync.Mutex
	going bool
	live  map[*eventStreamBody]struct{}
}

// isEventStream reports whether h announces server-sent events.
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// track wraps body, the console's event stream, so that GoingAway can end it.
func (e *eventStreams) track(body io.ReadCloser) io.ReadCloser {
	b := &eventStreamBody{ReadCloser: body, streams: e}
	e.mu.Lock()
	going := e.going
	if !going {
		if e.live == nil {
			e.live = map[*eventStreamBody]struct{}{}
		}
		e.live[b] = struct{}{}
	}
	e.mu.Unlock()
	if going {
		b.end()
	}
	return b
}

// endAll ends every live stream, and every later one as it starts; it reports how many it ended.
func (e *eventStreams) endAll() int {
	e.mu.Lock()
	e.going = true
	bs := make([]*eventStreamBody, 0, len(e.live))
	for b := range e.live {
		bs = append(bs, b)
	}
	e.mu.Unlock()
	for _, b := range bs {
		b.end()
	}
	return len(bs)
}

// An eventStreamBody is a console's event stream as ReverseProxy reads it: once ended, it reads
// as finished (io.EOF), so ReverseProxy finishes the caller's response instead of aborting it.
type eventStreamBody struct {
	io.ReadCloser
	streams *eventStreams
	ended   atomic.Bool
	once    sync.Once
}

func (b *eventStreamBody) Read(p []byte) (int, error) {
	if b.ended.Load() {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.ended.Load() {
		return n, io.EOF // the read was ended by end's Close
	}
	return n, err
}

// end makes the stream read as finished; closing the console's body ends a read waiting in it.
func (b *eventStreamBody) end() {
	b.ended.Store(true)
	b.ReadCloser.Close()
}

func (b *eventStreamBody) Close() error {
	b.once.Do(func() {
		b.streams.mu.Lock()
		delete(b.streams.live, b)
		b.streams.mu.Unlock()
	})
	return b.ReadCloser.Close()
}

// GoingAway ends the hop's server-sent event streams and closes its WebSockets with 1001, now and
// for every one that starts later (see the file comment). It reports how many streams and
// WebSockets were live. Requests that are neither go on; a door's Shutdown waits for them.
func (h *Hop) GoingAway() (streams, websockets int) {
	streams = h.events.endAll()
	h.live.mu.Lock()
	h.live.going = true
	ts := make([]*tunnel, 0, len(h.live.conns))
	for t := range h.live.conns {
		ts = append(ts, t)
	}
	h.live.mu.Unlock()
	for _, t := range ts {
		t.goAway()
	}
	return streams, len(ts)
}

// LiveStreams reports how many event streams and WebSockets the hop holds now.
func (h *Hop) LiveStreams() (streams, websockets int) {
	h.events.mu.Lock()
	streams = len(h.events.live)
	h.events.mu.Unlock()
	h.live.mu.Lock()
	websockets = len(h.live.conns)
	h.live.mu.Unlock()
	return streams, websockets
}

// wsFrames follows the frame boundaries of one direction of a WebSocket (RFC 6455 §5.2), so that
// a close frame can be put between two frames, never inside one.
type wsFrames struct {
	head    [14]byte
	headN   int    // bytes of the current frame's head seen
	payload uint64 // payload bytes of the current frame still to come
}

// atBoundary reports whether the next byte starts a frame.
func (f *wsFrames) atBoundary() bool { return f.headN == 0 && f.payload == 0 }

// headLen is the length of a frame head whose first two bytes are b0, b1.
func headLen(b1 byte) int {
	n := 2
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// advance follows p. With stop, it stops at the first frame boundary in p (0 when p starts at
// one) and returns its offset, or -1 when p holds none; without, it follows all of p and returns
// len(p).
func (f *wsFrames) advance(p []byte, stop bool) int {
	i := 0
	for {
		if stop && f.atBoundary() {
			return i
		}
		if i == len(p) {
			if stop {
				return -1
			}
			return i
		}
		if f.payload > 0 {
			n := uint64(len(p) - i)
			if n > f.payload {
				n = f.payload
			}
			f.payload -= n
			i += int(n)
			continue
		}
		f.head[f.headN] = p[i]
		f.headN++
		i++
		if f.headN < 2 || f.headN < headLen(f.head[1]) {
			continue
		}
		var length uint64
		switch f.head[1] & 0x7f {
		case 126:
			length = uint64(f.head[2])<<8 | uint64(f.head[3])
		case 127:
			for _, b := range f.head[2:10] {
				length = length<<8 | uint64(b)
			}
		default:
			length = uint64(f.head[1] & 0x7f)
		}
		f.headN, f.payload = 0, length
	}
}

// frameWriter is the console-to-caller direction of a WebSocket tunnel: every write is followed
// frame by frame, under the tunnel's write lock, so that goAway can put its close frame between
// two frames.
type frameWriter struct {
	net.Conn // the caller's end
	t        *tunnel
}

// CloseWrite passes the console's clean end on as a half-close, as the tunnel does without it.
func (w frameWriter) CloseWrite() error {
	if cw, ok := w.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return io.EOF
}

func (w frameWriter) Write(p []byte) (int, error) {
	t := w.t
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.closeSent {
		return 0, errGoneAway
	}
	if !t.going {
		n, err := t.caller.Write(p)
		t.frames.advance(p[:n], false)
		return n, err
	}
	k := t.frames.advance(p, true)
	if k < 0 {
		return t.caller.Write(p)
	}
	if _, err := t.caller.Write(p[:k]); err != nil {
		return 0, err
	}
	t.caller.Write(wsGoingAway)
	t.closeSent = true
	return len(p), errGoneAway
}

// goAway closes the tunnel with 1001: at once when the console's last frame is whole, else as
// soon as it is (frameWriter), or when the door's drain ends.
func (t *tunnel) goAway() {
	t.wmu.Lock()
	t.going = true
	now := !t.closeSent && t.frames.atBoundary()
	if now {
		t.caller.Write(wsGoingAway)
		t.closeSent = true
	}
	t.wmu.Unlock()
	if now {
		t.close()
	}
}
