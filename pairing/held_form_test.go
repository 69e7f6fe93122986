package pairing

// The pairing POST against a caller that stops sending its form, or keeps it
// open for as long as it likes.

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
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
	t.Cleanup(reg.WaitWrites)
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

// TestExpiredCodeNotRedeemedByAHeldForm_R8: a code is valid 5 minutes (R8), judged at the moment
// it is used. A form that keeps moving is never cut off (S9), so the pairing POST must not judge
// the code by a time read when the request began: a stranger who opens a POST and sends its form
// a byte at a time would carry that time with it, and redeem a code that expired long ago — one
// that leaked from a screen, a photo of the QR code or a terminal recording after its 5 minutes
// were up — as long as codes.json keeps it (an hour after its expiry). The device a held form
// pairs is stamped with the time it was paired, not when its request began.
func TestExpiredCodeNotRedeemedByAHeldForm_R8(t *testing.T) {
	cheapScrypt(t)
	for _, tc := range []struct {
		name   string
		held   time.Duration // from the first byte of the form to its last
		paired bool
	}{
		{"expired while the form was held", CodeTTL + 30*time.Minute, false}, // still in codes.json
		{"live when the form is in", 3 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := reachDir(t)
			if err := SetPassword(dir, []byte(testPassword)); err != nil {
				t.Fatal(err)
			}
			reg, err := OpenRegister(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(reg.WaitWrites)
			var mu sync.Mutex
			now := t0
			clock := func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				return now
			}
			h := NewHandler(HandlerConfig{Dir: dir, Register: reg, Origin: testOrigin,
				Logger: slog.New(slog.DiscardHandler), Now: clock})
			waiting := make(chan struct{}, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Body = &heldForm{ReadCloser: r.Body, waiting: waiting}
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			code, err := IssueCode(dir, "", t0) // expires at t0+5m
			if err != nil {
				t.Fatal(err)
			}

			// At t0 the stranger opens the POST and sends the first byte of its form.
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second)) // a guard against a hang, not an assertion
			form := url.Values{"code": {code}, "password": {testPassword}, "name": {"stranger"}}.Encode()
			io.WriteString(conn, "POST /pair HTTP/1.1\r\nHost: 192.168.1.20:7443\r\nOrigin: "+testOrigin+
				"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: "+
				strconv.Itoa(len(form))+"\r\n\r\n"+form[:1])
			select {
			case <-waiting: // the handler has its first byte and waits for the rest
			case <-time.After(10 * time.Second):
				t.Fatal("the handler never waited for the rest of its form")
			}

			// The rest of the form arrives tc.held later.
			mu.Lock()
			now = now.Add(tc.held)
			mu.Unlock()
			io.WriteString(conn, form[1:])
			res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST"})
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			devices := reg.Devices()
			if !tc.paired {
				if res.StatusCode != http.StatusForbidden || res.Header.Get("X-Fleet-Reason") != reasonPageWord || len(devices) != 0 {
					t.Errorf("R8 a code used %v after it expired: %d %q, %d device(s) paired; want 403 %s, none",
						tc.held-CodeTTL, res.StatusCode, res.Header.Get("X-Fleet-Reason"), len(devices), reasonPageWord)
				}
				return
			}
			if res.StatusCode != http.StatusSeeOther || len(devices) != 1 {
				t.Fatalf("a live code: %d, %d device(s) paired; want 303, one", res.StatusCode, len(devices))
			}
			if want := t0.Add(tc.held); !devices[0].Created.Equal(want) {
				t.Errorf("the device was stamped created at %v, want %v: when it was paired, not when its request began",
					devices[0].Created, want)
			}
		})
	}
}

// heldForm tells waiting when a read of the form begins after some of it has arrived: the
// handler then waits for the rest.
type heldForm struct {
	io.ReadCloser
	waiting chan<- struct{}
	got     int
}

func (f *heldForm) Read(p []byte) (int, error) {
	if f.got > 0 {
		select {
		case f.waiting <- struct{}{}:
		default:
		}
	}
	n, err := f.ReadCloser.Read(p)
	f.got += n
	return n, err
}
