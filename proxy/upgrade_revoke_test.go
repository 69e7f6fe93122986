package proxy

// The hop's WebSocket upgrade against a revocation that lands mid-handshake.

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// hijackHook is a caller's ResponseWriter whose Hijack first runs hook: the moment between the
// console's 101 and the tunnel's registration.
type hijackHook struct {
	h    http.Header
	conn net.Conn
	hook func()
}

func (w *hijackHook) Header() http.Header         { return w.h }
func (w *hijackHook) Write(b []byte) (int, error) { return len(b), nil }
func (w *hijackHook) WriteHeader(int)             {}
func (w *hijackHook) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hook()
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// TestUpgradeRevokedMidHandshakeIsClosed_R8: a device revoked while its WebSocket handshake is
// under way — after the console's 101 was read, before the tunnel was registered — cancels the
// request and calls CloseUpgraded, which finds nothing yet. The tunnel was then registered and
// lived on after the revocation (R8: revoked at once, its WebSockets included). A tunnel whose
// request is already cancelled when it is registered is closed at once.
func TestUpgradeRevokedMidHandshakeIsClosed_R8(t *testing.T) {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		near, far := net.Pipe()
		go func() {
			defer far.Close()
			if _, err := http.ReadRequest(bufio.NewReader(far)); err != nil {
				return
			}
			io.WriteString(far, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			io.Copy(io.Discard, far)
		}()
		return near, nil
	}
	hop := NewHop(slog.New(slog.DiscardHandler), nil, dial)
	defer hop.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	caller, callerFar := net.Pipe()
	defer callerFar.Close()
	go io.Copy(io.Discard, callerFar)
	w := &hijackHook{h: http.Header{}, conn: caller, hook: func() {
		cancel() // the revocation: its request is cancelled, then its WebSockets closed
		hop.CloseUpgraded(func(_, login string) bool { return login == "device:phone#abcdef" })
	}}
	r := httptest.NewRequest("GET", "https://192.168.1.20:7443/c/alpha/ws", nil).WithContext(ctx)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	hop.Forward(w, r, &Target{ConsoleID: "alpha", Addr: "127.0.0.1:9", Path: "/c/alpha/ws",
		Login: "device:phone#abcdef", Token: "t", ClientIP: "192.168.1.30", Host: "192.168.1.20:7443", Proto: "https"})

	if n := hop.CloseUpgraded(nil); n != 0 {
		t.Errorf("%d WebSocket of a revoked device still open after its revocation, want 0", n)
	}
}
