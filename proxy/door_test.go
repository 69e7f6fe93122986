package proxy

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
)

// TestDoorOrder_S3_S7_S9_S12: when a request fails several checks, the first in SPEC order
// answers, and the door's caller verification is asked only once every earlier check passed.
func TestDoorOrder_S3_S7_S9_S12(t *testing.T) {
	d := startTestDoor(t)
	big := "X-Big: " + strings.Repeat("a", 65<<10)
	ws := []string{"Connection: Upgrade", "Upgrade: websocket", wsKey}
	rows := []struct {
		name   string
		req    string
		status int
		reason string
	}{
		{"S9 size before Host", strings.Replace(doortest.ServeReq("GET", "/c/alpha/x", big), "Host: "+doortest.TSName, "Host: evil.example", 1), 431, "header-too-large"},
		{"Host before S3", strings.Replace(doortest.ServeReq("GET", "/c/alpha/x", "X-Phase-Console-Fleet: x"), "Host: "+doortest.TSName, "Host: evil.example", 1), 421, "host"},
		{"S3 before bad-path", doortest.ServeReq("GET", "/c/alpha/%2e%2e/x", "X-Phase-Console-Fleet-Login: x"), 400, "assertion-sent"},
		{"S3 before hooks", doortest.ServeReq("GET", "/c/alpha/hooks/x", "X_Phase_Console_Fleet: x"), 400, "assertion-sent"},
		{"S7 bad-path before upgrade", doortest.ServeReq("GET", "/c/alpha//x", "Connection: Upgrade", "Upgrade: h2c"), 400, "bad-path"},
		{"S7 hooks before upgrade", doortest.ServeReq("GET", "/c/alpha/hooks", "Connection: Upgrade", "Upgrade: h2c"), 403, "hooks"},
		{"S7 hooks before Origin", doortest.ServeReq("POST", "/c/alpha/Hooks/permission-request", "Origin: https://evil.example"), 403, "hooks"},
		{"S7 hooks before CONNECT/TRACE", doortest.ServeReq("TRACE", "/c/alpha/hooks/"), 403, "hooks"},
		{"S9 upgrade before Origin", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade", "Upgrade: h2c", "Origin: https://evil.example"), 400, "bad-upgrade"},
		{"S12 Origin before redirect", doortest.ServeReq("GET", "/c/alpha", "Origin: https://evil.example"), 403, "cross-origin"},
		{"S12 Origin on an upgrade", doortest.ServeReq("GET", "/c/alpha/ws", append(ws, "Origin: null")...), 403, "cross-origin"},
		{"S12 Origin before CONNECT/TRACE", doortest.ServeReq("TRACE", "/c/alpha/x", "Origin: https://evil.example"), 403, "cross-origin"},
		{"S12 Origin on a door's own page", doortest.ServeReq("GET", "/", "Origin: https://evil.example"), 403, "cross-origin"},
		{"TRACE before the caller", doortest.ServeReq("TRACE", "/c/alpha/x"), 405, "method"},
		{"trace lower case", doortest.ServeReq("trace", "/c/alpha/x"), 405, "method"},
		{"CONNECT to a console path", doortest.ServeReq("CONNECT", "/c/alpha/x"), 405, "method"},
		{"unknown console after the caller", doortest.ServeReq("GET", "/c/nosuch/x"), 404, "unknown-console"},
		{"no page", doortest.ServeReq("GET", "/elsewhere"), 404, "not-found"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			asked := d.own.asked.Load()
			d.WantRejected(t, row.req, row.status, row.reason)
			got := d.own.asked.Load() - asked
			wantAsked := int64(0)
			if row.reason == "unknown-console" {
				wantAsked = 1
			}
			if got != wantAsked {
				t.Errorf("the caller verification was asked %d time(s), want %d", got, wantAsked)
			}
		})
	}
	t.Run("308 to the console's root, after every check, before the caller", func(t *testing.T) {
		asked := d.own.asked.Load()
		r := d.Raw(doortest.ServeReq("GET", "/C/Alpha"))
		if r.Status != http.StatusPermanentRedirect || r.Header.Get("Location") != "/c/alpha/" {
			t.Errorf("got %d Location %q, want 308 /c/alpha/", r.Status, r.Header.Get("Location"))
		}
		if d.own.asked.Load() != asked {
			t.Error("the redirect asked the caller verification")
		}
	})
}

// TestDoorCallerRefusal_S5: the door's own refusal of a caller is written as it is, and nothing
// is forwarded; the token is then not even read.
func TestDoorCallerRefusal_S5(t *testing.T) {
	d := startTestDoor(t)
	d.own.refuse.Store(Refuse(http.StatusUnauthorized, "unverified", "not a tailnet user"))
	d.own.tokErr.Store(true)
	d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/x"), http.StatusUnauthorized, "unverified")
}

// TestDoorTokenUnusable_S6: a token that cannot be read refuses (503 no-token); nothing is
// forwarded without it.
func TestDoorTokenUnusable_S6(t *testing.T) {
	d := startTestDoor(t)
	d.own.tokErr.Store(true)
	d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/x"), http.StatusServiceUnavailable, "no-token")
}

// nobody is a CallerVerifier that "verifies" without naming anyone: a bug in a door.
type nobody struct{ c Caller }

func (n nobody) VerifyCaller(*http.Request, string) (Caller, *Refusal) { return n.c, nil }

// TestDoorFailsClosed: a Door that lacks any of what a door must supply refuses everything
// (500 internal), and a verifier that names no login or no address is never forwarded.
func TestDoorFailsClosed(t *testing.T) {
	unset := map[string]func(*Door){
		"no Hop":      func(d *Door) { d.Hop = nil },
		"no Host":     func(d *Door) { d.Host = nil },
		"no Callers":  func(d *Door) { d.Callers = nil },
		"no Consoles": func(d *Door) { d.Consoles = nil },
		"no Token":    func(d *Door) { d.Token = nil },
		"no login":    func(d *Door) { d.Callers = nobody{Caller{IP: netip.MustParseAddr(doortest.AliceIP)}} },
		"no address":  func(d *Door) { d.Callers = nobody{Caller{Login: doortest.Alice}} },
	}
	for name, f := range unset {
		t.Run(name, func(t *testing.T) {
			d := startTestDoor(t, f)
			d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/x"), http.StatusInternalServerError, "internal")
		})
	}
	t.Run("no Log", func(t *testing.T) {
		d := startTestDoor(t, func(d *Door) { d.Log = nil })
		before := d.Alpha.Count()
		r := d.Raw(doortest.ServeReq("GET", "/c/alpha/x"))
		if r.Status != http.StatusInternalServerError || r.Reason != "internal" || d.Alpha.Count() != before {
			t.Errorf("got %d %q, console saw %d", r.Status, r.Reason, d.Alpha.Count()-before)
		}
	})
}

// TestDoorSiteHook_R6b: a door's own Site judgement is asked in S12's place: after S3, S7
// (bad-path, hooks), the S9 upgrade check and S12 itself, before the door's pages, the redirect
// of "/c/<id>" and the console; its refusal is written as it is and nothing is forwarded.
func TestDoorSiteHook_R6b(t *testing.T) {
	d := startTestDoor(t, func(d *Door) {
		d.Pages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		d.Site = func(r *http.Request) *Refusal {
			if r.Header.Get("X-Test-Site") != "" {
				return Refuse(http.StatusForbidden, "site-test", "the test's Site refused it")
			}
			return nil
		}
	})
	other := "X-Test-Site: other"
	for _, row := range []struct {
		name   string
		req    string
		status int
		reason string
	}{
		{"R6b Site", doortest.ServeReq("GET", "/c/alpha/x", other), 403, "site-test"},
		{"R6b Site before the pages", doortest.ServeReq("GET", "/", other), 403, "site-test"},
		{"R6b Site before the redirect", doortest.ServeReq("GET", "/c/alpha", other), 403, "site-test"},
		{"S3 before Site", doortest.ServeReq("GET", "/c/alpha/x", other, "X-Phase-Console-Fleet: x"), 400, "assertion-sent"},
		{"S7 bad-path before Site", doortest.ServeReq("GET", "/c/alpha/%2F", other), 400, "bad-path"},
		{"S7 hooks before Site", doortest.ServeReq("GET", "/c/alpha/hooks", other), 403, "hooks"},
		{"S9 upgrade before Site", doortest.ServeReq("GET", "/c/alpha/x", other, "Connection: Upgrade", "Upgrade: h2c"), 400, "bad-upgrade"},
		{"S12 before Site", doortest.ServeReq("GET", "/c/alpha/x", other, "Origin: https://evil.example"), 403, "cross-origin"},
	} {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, row.status, row.reason)
		})
	}
	before := d.Alpha.Count()
	if r := d.Raw(doortest.ServeReq("GET", "/c/alpha/x")); r.Status != http.StatusOK || d.Alpha.Count() != before+1 {
		t.Errorf("what Site lets through: %d %q, want forwarded", r.Status, r.Reason)
	}
}

// TestDoorPages: a request that is not for a console goes to the door's own pages, after the
// checks every request passes, and never to the hop.
func TestDoorPages(t *testing.T) {
	d := startTestDoor(t, func(d *Door) {
		d.Pages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Page", r.URL.Path)
		})
	})
	for _, p := range []string{"/", "/fleet/v1/consoles", "/cc/alpha/", "/ca.crt"} {
		before := d.Alpha.Count()
		r := d.Raw(doortest.ServeReq("GET", p))
		if r.Status != http.StatusOK || r.Header.Get("X-Page") != p || d.Alpha.Count() != before {
			t.Errorf("%s: got %d page %q, console saw %d", p, r.Status, r.Header.Get("X-Page"), d.Alpha.Count()-before)
		}
	}
	d.WantRejected(t, doortest.ServeReq("GET", "/", "X-Phase-Console-Fleet: x"), http.StatusBadRequest, "assertion-sent")
}

// TestConsoleDownMarked_S8: a forward that finds no console answering is 502 console-down, and
// the door is told which console is down.
func TestConsoleDownMarked_S8(t *testing.T) {
	d := startTestDoor(t)
	gone := echoconsole.New(t)
	addr := gone.Addr()
	gone.Close()
	d.setConsole("gone", addr)
	r := d.Raw(doortest.ServeReq("GET", "/c/gone/x"))
	if r.Status != http.StatusBadGateway || r.Reason != "console-down" {
		t.Errorf("got %d %q, want 502 console-down", r.Status, r.Reason)
	}
	d.own.mu.Lock()
	defer d.own.mu.Unlock()
	if len(d.own.down) != 1 || d.own.down[0] != "gone" {
		t.Errorf("marked down: %q", d.own.down)
	}
}

// loginVerifier verifies every caller as login, at aliceIP, byte for byte as it was given (what
// tailscaled's WhoIs named, say), whatever it holds.
type loginVerifier struct{ login string }

func (v loginVerifier) VerifyCaller(*http.Request, string) (Caller, *Refusal) {
	return Caller{Login: v.login, IP: netip.MustParseAddr(doortest.AliceIP)}, nil
}

// TestDoorUnassertableLoginRefused_S5_S6: a verified login that a header cannot carry exactly as
// it was verified — a control byte (CR, LF, NUL, ESC, DEL), a tab, a space or tab at either end
// (every parser trims those) — is refused 401 unverified by the Door's judgement, alike on both
// paths: a GET that the fast loop judges and one that net/http serves (Content-Length: 0 is not
// the fast loop's). It reaches the console under no login at all: not cleaned up (the fast
// loop's writer must not assert "mallory@example.com\r\n" as "mallory@example.com"), and not taken
// for a console that is down (net/http's Transport refuses such a value, and ReverseProxy's
// answer was 502 console-down, the console marked down). Each refusal is logged once, and the
// login is not in the log.
func TestDoorUnassertableLoginRefused_S5_S6(t *testing.T) {
	for _, login := range []string{
		"mallory@example.com\r\n",
		"\nmallory@example.com",
		"mallory@example.com\r\nX-Phase-Console-Fleet-Login: alice@example.com",
		"mallory@example.com\r",
		" mallory@example.com",
		"mallory@example.com ",
		"\tmallory@example.com",
		"mal\tlory@example.com",
		"mallory\x00@example.com",
		"mallory\x1b[31m@example.com",
		"mallory\x7f@example.com",
	} {
		t.Run(strconv.Quote(login), func(t *testing.T) {
			d := startTestDoor(t, func(door *Door) { door.Callers = loginVerifier{login} })
			before := d.Alpha.Count()
			for _, req := range []string{
				doortest.ServeReq("GET", "/c/alpha/slow", "Content-Length: 0"), // net/http's
				doortest.ServeReq("GET", "/c/alpha/fast"),                      // the fast loop's
			} {
				d.WantRejected(t, req, http.StatusUnauthorized, "unverified")
			}
			if n := d.Alpha.Count(); n != before {
				t.Errorf("the console saw %d requests, want none", n-before)
			}
			d.own.mu.Lock()
			if len(d.own.down) != 0 {
				t.Errorf("console(s) %q marked down; no console failed", d.own.down)
			}
			d.own.mu.Unlock()
			if logs := d.Logs.String(); strings.Contains(logs, "mallory") || strings.Contains(logs, "lory@") {
				t.Errorf("the login is in the log:\n%s", logs)
			}
		})
	}
}

// TestDoorLoginAssertedAsVerified_S5_S6: a login that is a header value as it stands — inner
// spaces, UTF-8, punctuation — is asserted byte for byte, by both paths.
func TestDoorLoginAssertedAsVerified_S5_S6(t *testing.T) {
	for _, login := range []string{"alice@example.com", "Ålice Ünder@exämple.com", "bob (work) <bob@example.com>"} {
		t.Run(login, func(t *testing.T) {
			d := startTestDoor(t, func(door *Door) { door.Callers = loginVerifier{login} })
			for _, req := range []string{doortest.ServeReq("GET", "/c/alpha/x", "Content-Length: 0"), doortest.ServeReq("GET", "/c/alpha/x")} {
				before := d.Alpha.Count()
				d.WantForwarded(t, d.Raw(req), before, login, "/x")
			}
		})
	}
}

// fixedToken is a TokenSource that gives tok.
type fixedToken string

func (f fixedToken) Current() (string, error) { return string(f), nil }

// TestHopUnwritableValueRefused_S6: a value of the hop's own that a header cannot carry as it is
// (here a token with a line break: fleet's own fault, never the caller's or the console's) is
// sent by neither path, cleaned up or not: both refuse 500 internal, and no console is shown down
// (net/http's Transport would have refused the value and ReverseProxy answered 502 console-down).
func TestHopUnwritableValueRefused_S6(t *testing.T) {
	d := startTestDoor(t, func(door *Door) { door.Token = fixedToken("fleet-token\r\nX-Injected: 1") })
	before := d.Alpha.Count()
	for _, req := range []string{doortest.ServeReq("GET", "/c/alpha/x", "Content-Length: 0"), doortest.ServeReq("GET", "/c/alpha/x")} {
		d.WantRejected(t, req, http.StatusInternalServerError, "internal")
	}
	if n := d.Alpha.Count(); n != before {
		t.Errorf("the console saw %d requests, want none", n-before)
	}
	d.own.mu.Lock()
	defer d.own.mu.Unlock()
	if len(d.own.down) != 0 {
		t.Errorf("console(s) %q marked down; no console failed", d.own.down)
	}
	if strings.Contains(d.Logs.String(), "fleet-token") {
		t.Error("the token is in the log")
	}
}
