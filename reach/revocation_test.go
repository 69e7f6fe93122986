package reach

// Revocation on the door (R8): the register's file going bad, then good again; a
// revoked device's HTTP/2 streams, one of them stalled.

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/pairing"
)

// TestRegisterBadThenGoodBelievesDeviceAgain_R8: while devices.json does not parse, no device is
// believed and their live connections end (fail closed); once the file is good again, its
// devices are believed again (pairing.Register's promise). The door remembered every id6 it was
// told of as revoked for as long as it stayed open, so a moment's bad file — an operator's edit,
// a restore — locked every phone out until the door was closed and opened again: each of its
// requests was sent to /pair although the register believed it.
func TestRegisterBadThenGoodBelievesDeviceAgain_R8(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	if res := d.RawAs(d.req("GET", "/c/alpha/", cookie)); res.Status != http.StatusOK {
		t.Fatalf("before: status %d %s, want 200", res.Status, res.Reason)
	}
	// That request's last seen is written in the background from the file it read: let it land
	// before the file is broken, as an operator's edit would come after it.
	d.register.WaitWrites()
	path := filepath.Join(d.reachDir, pairing.DevicesFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := d.RawAs(d.req("GET", "/c/alpha/", cookie)); res.Status != http.StatusSeeOther {
		t.Fatalf("file bad: status %d %s, want 303 to /pair (no device believed)", res.Status, res.Reason)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.register.Refresh(); err != nil {
		t.Fatal(err)
	}
	if res := d.RawAs(d.req("GET", "/c/alpha/", cookie)); res.Status != http.StatusOK {
		t.Errorf("file good again: status %d %s, want 200: the register believes the device, the door does not", res.Status, res.Reason)
	}
}

// TestRevokedAfterAuthenticationNotForwarded_R8: a request whose device was authenticated a
// moment before its revocation was told is not forwarded after it; one authenticated after it
// (the register believes the device again) is.
func TestRevokedAfterAuthenticationNotForwarded_R8(t *testing.T) {
	var s streams
	s.init()
	before := s.mark() // the request authenticated its device
	s.cancel("abcdef") // then the device was revoked
	if _, _, ok := s.track(context.Background(), nil, "abcdef", before); ok {
		t.Error("a request authenticated before its device's revocation was let through after it")
	}
	if _, done, ok := s.track(context.Background(), nil, "zzzzzz", before); !ok {
		t.Error("another device's request was refused")
	} else {
		done()
	}
	after := s.mark()
	ctx, done, ok := s.track(context.Background(), nil, "abcdef", after)
	if !ok {
		t.Fatal("a request authenticated after the revocation (the device believed again) was refused")
	}
	s.cancel("abcdef")
	if ctx.Err() == nil {
		t.Error("a revocation did not cancel the device's request in flight")
	}
	done()
}

// TestRevocationEndsItsHTTP2Streams_R8: one HTTP/2 connection carries two event streams of a
// device and a stream without its cookie; revoking the device ends both of its streams at once
// (each reset), and the next stream on the same connection, with the same cookie, is unpaired.
func TestRevocationEndsItsHTTP2Streams_R8(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("phone")
	c := d.dialH2(t)
	c.get(1, "/c/alpha/sse", cookie)
	c.get(3, "/c/alpha/sse/2", cookie)
	c.get(5, "/c/alpha/sse")
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool {
		return c.streams[1].data.Len() > 0 && c.streams[3].data.Len() > 0 && c.streams[5].done != ""
	}) {
		t.Fatal("the streams did not start")
	}
	if status, _, _, _ := c.stream(5); status != http.StatusSeeOther {
		t.Errorf("the stream without the cookie: %d, want 303", status)
	}
	if err := d.register.Revoke(dev.ID6); err != nil {
		t.Fatal(err)
	}
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return c.streams[1].done != "" && c.streams[3].done != "" }) {
		t.Fatal("the revoked device's HTTP/2 streams are still open")
	}
	c.get(7, "/c/alpha/x", cookie)
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return c.streams[7].status != 0 }) {
		t.Fatal("no answer after the revocation")
	}
	if status, reason, _, _ := c.stream(7); status != http.StatusSeeOther {
		t.Errorf("the revoked cookie on the same connection: %d %q, want 303", status, reason)
	}
}

// TestRevocationResetsStalledHTTP2Stream_R8: a device's event stream whose HTTP/2 flow-control
// window is closed — the device's browser stopped reading it, or never opened it — ends at once
// when the device is revoked (R8: "at once, its live connections included"). The hop's write of
// the console's event waits in net/http's HTTP/2 writer for a window that never opens, and
// cancelling the request's context does not end that wait: the stream stayed open, with the
// device's goroutine, for as long as the device kept its connection. Another device's stalled
// stream on the same connection is left as it is, and neither was cut before the revocation by
// the deadline of the door's own answers (S9).
func TestRevocationResetsStalledHTTP2Stream_R8(t *testing.T) {
	const timeout = 100 * time.Millisecond
	d := startTestDoor(t, func(c *Config) { c.answerTimeout = timeout })
	dev, cookie := d.pair("phone")
	_, other := d.pair("tablet")
	c := d.dialH2(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.get(1, "/c/alpha/sse", cookie)
	c.get(3, "/c/alpha/sse/other", other)
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return c.streams[1].status != 0 && c.streams[3].status != 0 }) {
		t.Fatal("the streams did not start")
	}
	time.Sleep(3 * timeout)
	for _, id := range []uint32{1, 3} {
		if status, _, data, done := c.stream(id); status != http.StatusOK || data != "" || done != "" {
			t.Fatalf("stream %d before the revocation: %d, %q, ended %q; want 200, no data yet, open", id, status, data, done)
		}
	}

	if err := d.register.Revoke(dev.ID6); err != nil {
		t.Fatal(err)
	}
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return c.streams[1].done != "" || c.ended != nil }) {
		t.Fatal("the revoked device's stalled HTTP/2 stream is still open")
	}
	if _, _, _, done := c.stream(1); !strings.HasPrefix(done, "rst") {
		t.Errorf("the revoked device's stream ended %q, want reset", done)
	}
	if _, _, _, done := c.stream(3); done != "" {
		t.Errorf("the other device's stream ended %q with the revocation", done)
	}
}
