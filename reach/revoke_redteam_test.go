package reach

// Red-team tests of revocation on the door: the register's file going bad, then good again.

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

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
	if res := d.raw(d.req("GET", "/c/alpha/", cookie)); res.status != http.StatusOK {
		t.Fatalf("before: status %d %s, want 200", res.status, res.reason)
	}
	path := filepath.Join(d.reachDir, pairing.DevicesFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := d.raw(d.req("GET", "/c/alpha/", cookie)); res.status != http.StatusSeeOther {
		t.Fatalf("file bad: status %d %s, want 303 to /pair (no device believed)", res.status, res.reason)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.register.Refresh(); err != nil {
		t.Fatal(err)
	}
	if res := d.raw(d.req("GET", "/c/alpha/", cookie)); res.status != http.StatusOK {
		t.Errorf("file good again: status %d %s, want 200: the register believes the device, the door does not", res.status, res.reason)
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
	if _, _, ok := s.track(context.Background(), "abcdef", before); ok {
		t.Error("a request authenticated before its device's revocation was let through after it")
	}
	if _, done, ok := s.track(context.Background(), "zzzzzz", before); !ok {
		t.Error("another device's request was refused")
	} else {
		done()
	}
	after := s.mark()
	ctx, done, ok := s.track(context.Background(), "abcdef", after)
	if !ok {
		t.Fatal("a request authenticated after the revocation (the device believed again) was refused")
	}
	s.cancel("abcdef")
	if ctx.Err() == nil {
		t.Error("a revocation did not cancel the device's request in flight")
	}
	done()
}
