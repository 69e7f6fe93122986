package pairing

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzPairingForm_R8 posts arbitrary bodies, content types and origins to the pairing handler.
// Invariant: it never panics; it pairs (303 with the device cookie) only for the live code with
// the right password; every other POST sets no cookie and calls OnFailure exactly once, but a
// cross-origin one never (R6b); and no answer or log line ever repeats the code or the password
// that was sent.
func FuzzPairingForm_R8(f *testing.F) {
	for _, seed := range []struct{ ct, origin, body string }{
		{"application/x-www-form-urlencoded", testOrigin, "code=BCDF-GHJK&password=wrong-password&name=phone"},
		{"application/x-www-form-urlencoded", testOrigin, "code=LIVE&password=" + testPassword + "&name=phone"},
		{"application/x-www-form-urlencoded", "null", "code=LIVE&password=" + testPassword},
		{"application/x-www-form-urlencoded; charset=utf-8", "", "code=%00%ff&password=%&name=%zz"},
		{"multipart/form-data; boundary=x", testOrigin, "--x\r\nContent-Disposition: form-data; name=code\r\n\r\nLIVE\r\n--x--"},
		{"text/plain", testOrigin, "code=LIVE"},
		{"application/x-www-form-urlencoded", testOrigin, strings.Repeat("a=b&", 2000)},
		{"application/x-www-form-urlencoded", "https://evil.example", "code=live&password=x"},
	} {
		f.Add(seed.ct, seed.origin, seed.body)
	}
	f.Fuzz(func(t *testing.T, ct, origin, body string) {
		oldHash, oldMin := hashLogN, minLogN
		hashLogN, minLogN = 4, 4
		defer func() { hashLogN, minLogN = oldHash, oldMin }()
		dir := reachDir(t)
		if err := SetPassword(dir, []byte(testPassword)); err != nil {
			t.Fatal(err)
		}
		reg, err := OpenRegister(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(reg.WaitWrites)
		now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		code, err := IssueCode(dir, "", now)
		if err != nil {
			t.Fatal(err)
		}
		body = strings.ReplaceAll(body, "LIVE", code)
		var logs bytes.Buffer
		var failures atomic.Int32
		h := NewHandler(HandlerConfig{Dir: dir, Register: reg, Fingerprint: testFP, Origin: testOrigin,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Now: func() time.Time { return now },
			OnFailure: func(*http.Request) { failures.Add(1) }})
		req := httptest.NewRequest("POST", "https://"+strings.TrimPrefix(testOrigin, "https://")+"/pair", strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		paired := w.Code == http.StatusSeeOther
		cookie := strings.Contains(w.Header().Get("Set-Cookie"), CookieName)
		if paired != cookie {
			t.Fatalf("status %d with cookie %v", w.Code, cookie)
		}
		want := int32(1) // R6: every refused POST is one failure ...
		if paired || w.Header().Get("X-Fleet-Reason") == ReasonOrigin {
			want = 0 // ... but a cross-origin one (R6b)
		}
		if failures.Load() != want {
			t.Fatalf("status %d counted %d failures", w.Code, failures.Load())
		}
		if paired && (len(reg.Devices()) != 1) {
			t.Fatalf("paired, but %d devices registered", len(reg.Devices()))
		}
		out := w.Body.String() + logs.String()
		for _, secret := range []string{code, strings.ReplaceAll(code, "-", ""), testPassword} {
			if strings.Contains(out, secret) {
				t.Fatalf("the answer or the log repeats a secret")
			}
		}
	})
}
