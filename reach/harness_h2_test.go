package reach

// The door harness over HTTP/2 written by hand: frames written with x/net's Framer over the
// door's real TLS listener, so that a test can be the client no library is — one that never
// opens its flow-control window, say — and see each stream's end (END_STREAM or RST_STREAM).

import (
	"bytes"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/phase-console/fleet/internal/doortest"
)

// h2conn is one hand-driven HTTP/2 connection to the door: requests written as frames, and what
// came back for each stream collected by a reader goroutine.
type h2conn struct {
	t    *testing.T
	d    *testDoor
	conn *tls.Conn
	fr   *http2.Framer

	wmu sync.Mutex // the Framer's writes, and buf and enc
	buf bytes.Buffer
	enc *hpack.Encoder

	mu       sync.Mutex
	streams  map[uint32]*h2stream
	settings map[http2.SettingID]uint32 // the door's SETTINGS
	ended    error                      // the connection's end, or a GOAWAY
	changed  chan struct{}              // closed at the next frame
}

type h2stream struct {
	status int
	reason string
	data   bytes.Buffer
	done   string // "" while open; "end" (END_STREAM) or "rst <code>"
}

// dialH2 opens an HTTP/2 connection to the door (no SNI) and sends the preface with settings.
func (d *testDoor) dialH2(t *testing.T, settings ...http2.Setting) *h2conn {
	t.Helper()
	cfg := &tls.Config{RootCAs: d.pool, NextProtos: []string{"h2"}, ServerName: d.door.Addr().Addr().String()}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: doortest.WaitLimit}, "tcp", d.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, not h2", p)
	}
	c := &h2conn{t: t, d: d, conn: conn, fr: http2.NewFramer(conn, conn), streams: map[uint32]*h2stream{},
		settings: map[http2.SettingID]uint32{}, changed: make(chan struct{})}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.buf)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	c.wmu.Lock()
	c.fr.WriteSettings(settings...)
	c.wmu.Unlock()
	go c.read()
	return c
}

// get opens stream id: GET path, with no body, with the door's authority and the extra fields
// "Name: value".
func (c *h2conn) get(id uint32, path string, extra ...string) {
	c.open(id, "GET", path, true, extra...)
}

// open opens stream id: method path with the door's authority and the extra fields
// "Name: value"; end ends the stream with the headers (no body), else data must follow.
func (c *h2conn) open(id uint32, method, path string, end bool, extra ...string) {
	c.mu.Lock()
	c.streams[id] = &h2stream{}
	c.mu.Unlock()
	c.wmu.Lock() // never with c.mu held: read takes c.wmu after letting c.mu go
	defer c.wmu.Unlock()
	c.buf.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: c.d.Addr}, {Name: ":path", Value: path}} {
		c.enc.WriteField(f)
	}
	for _, e := range extra {
		name, value, _ := bytes.Cut([]byte(e), []byte(": "))
		c.enc.WriteField(hpack.HeaderField{Name: string(bytes.ToLower(name)), Value: string(value)})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		c.t.Errorf("writing stream %d: %v", id, err)
	}
}

// data sends p on stream id, ending the stream if end.
func (c *h2conn) data(id uint32, p string, end bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteData(id, end, []byte(p)); err != nil {
		c.t.Errorf("writing data on stream %d: %v", id, err)
	}
}

func (c *h2conn) read() {
	for {
		f, err := c.fr.ReadFrame()
		var reply func() error // written after c.mu is let go
		c.mu.Lock()
		if err != nil {
			c.ended = err
			close(c.changed)
			c.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				f.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil })
				reply = c.fr.WriteSettingsAck
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				reply = func() error { return c.fr.WritePing(true, data) }
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				c.ended = http2.ConnectionError(f.ErrCode)
			}
		case *http2.MetaHeadersFrame:
			if s := c.streams[f.StreamID]; s != nil {
				if st, _ := strconv.Atoi(f.PseudoValue("status")); st >= 200 {
					s.status = st
					for _, h := range f.RegularFields() {
						if h.Name == "x-fleet-reason" {
							s.reason = h.Value
						}
					}
				}
				if f.StreamEnded() {
					s.done = "end"
				}
			}
		case *http2.DataFrame:
			if s := c.streams[f.StreamID]; s != nil {
				s.data.Write(f.Data())
				if f.StreamEnded() {
					s.done = "end"
				}
			}
		case *http2.RSTStreamFrame:
			if s := c.streams[f.StreamID]; s != nil {
				s.done = "rst " + f.ErrCode.String()
			}
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		if reply != nil {
			c.wmu.Lock()
			reply()
			c.wmu.Unlock()
		}
	}
}

// wait waits until cond (called with c.mu held) holds, or the deadline; it reports whether it held.
func (c *h2conn) wait(deadline time.Time, cond func() bool) bool {
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			c.mu.Lock()
			defer c.mu.Unlock()
			return cond()
		}
	}
}

// stream is a copy of what came back on stream id so far.
func (c *h2conn) stream(id uint32) (status int, reason, data, done string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[id]
	if s == nil {
		return 0, "", "", ""
	}
	return s.status, s.reason, s.data.String(), s.done
}
