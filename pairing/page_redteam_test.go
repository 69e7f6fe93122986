package pairing

// Red-team test of the pairing POST against a caller that stops sending its form.

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStalledPairingFormCutOff_S9: a pairing form whose body stops arriving is cut off, as S9
// cuts every request body that sends nothing for a while (R9: S9 holds on the door too). The
// pairing POST read its form with no deadline at all, so a stranger could hold the request — and
// on the door the place it holds in the failure limiter (R6) — for as long as it liked.
func TestStalledPairingFormCutOff_S9(t *testing.T) {
	old := formIdleTimeout
	formIdleTimeout = 50 * time.Millisecond // what is tested is that it is cut, not when
	t.Cleanup(func() { formIdleTimeout = old })
	dir := reachDir(t)
	reg, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(HandlerConfig{Dir: dir, Register: reg, Origin: "http://127.0.0.1",
		Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a guard against a hang, not an assertion
	io.WriteString(conn, "POST /pair HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
		"Content-Length: 100\r\n\r\ncode=BCDF")
	res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST"})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a pairing form that stopped arriving was never cut off (S9)")
	}
	if err == nil {
		res.Body.Close()
		if res.StatusCode < 400 || !strings.HasPrefix(res.Header.Get("X-Fleet-Reason"), "pairing-form") {
			t.Errorf("cut off with %d %q, want a 4xx pairing-form", res.StatusCode, res.Header.Get("X-Fleet-Reason"))
		}
	}
}
