package supervisor

import (
	"net/http"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
)

// TestHooksRefused_S7: /c/<id>/hooks and everything below it is 403 hooks through the door,
// whatever the case or encoding of "hooks", for every method and for upgrades. Nothing reaches
// the console, and each refusal is one fleet.rejected line (S11).
func TestHooksRefused_S7(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name string
		req  string
	}{
		{"S7 hooks", doortest.ServeReq("GET", "/c/alpha/hooks")},
		{"S7 hooks/", doortest.ServeReq("GET", "/c/alpha/hooks/")},
		{"S7 hooks below", doortest.ServeReq("GET", "/c/alpha/hooks/permission-request")},
		{"S7 HOOKS/x", doortest.ServeReq("GET", "/c/alpha/HOOKS/x")},
		{"S7 HoOkS", doortest.ServeReq("GET", "/c/alpha/HoOkS")},
		{"S7 %68ooks", doortest.ServeReq("GET", "/c/alpha/%68ooks")},
		{"S7 hoo%4Bs", doortest.ServeReq("GET", "/c/alpha/hoo%4Bs")},
		{"S7 %68%6F%6F%6B%73 all encoded", doortest.ServeReq("GET", "/c/alpha/%68%6F%6F%6B%73/x")},
		{"S7 Kelvin sign encoded hoo%E2%84%AAs", doortest.ServeReq("GET", "/c/alpha/hoo%E2%84%AAs")},
		{"S7 Kelvin sign raw", doortest.ServeReq("GET", "/c/alpha/hoo\u212As/x")},
		{"S7 long s encoded hook%C5%BF", doortest.ServeReq("GET", "/c/alpha/hook%C5%BF")},
		{"S7 upper-case id", doortest.ServeReq("GET", "/c/ALPHA/hooks")},
		{"S7 encoded id", doortest.ServeReq("GET", "/c/%61lpha/hooks")},
		{"S7 upper-case C", doortest.ServeReq("GET", "/C/alpha/hooks")},
		{"S7 with a query", doortest.ServeReq("GET", "/c/alpha/hooks?x=/y")},
		{"S7 unknown console", doortest.ServeReq("GET", "/c/nobody/hooks")},
		{"S7 unverified caller", "GET /c/alpha/hooks HTTP/1.1\nHost: 127.0.0.1\n\n"},
		{"S7 GET", doortest.ServeReq("GET", "/c/alpha/hooks/permission-request")},
		{"S7 HEAD", doortest.ServeReq("HEAD", "/c/alpha/hooks/permission-request")},
		{"S7 POST", doortest.ServeReq("POST", "/c/alpha/hooks/permission-request", "Content-Type: application/json", "Content-Length: 2") + "{}"},
		{"S7 PUT", doortest.ServeReq("PUT", "/c/alpha/hooks/x", "Content-Length: 0")},
		{"S7 DELETE", doortest.ServeReq("DELETE", "/c/alpha/hooks/x")},
		{"S7 OPTIONS", doortest.ServeReq("OPTIONS", "/c/alpha/hooks/x")},
		{"S7 PATCH", doortest.ServeReq("PATCH", "/c/alpha/hooks/x", "Content-Length: 0")},
		{"S7 TRACE", doortest.ServeReq("TRACE", "/c/alpha/hooks/x")},
		{"S7 odd method", doortest.ServeReq("FROB", "/c/alpha/hooks/x")},
		{"S7 CONNECT", doortest.ServeReq("CONNECT", "/c/alpha/hooks/x")},
		{"S7 WebSocket upgrade", doortest.ServeReq("GET", "/c/alpha/hooks/ws",
			"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, http.StatusForbidden, "hooks")
		})
	}
}

// TestNonCanonicalPathRefused_S7: a path that is not canonical is 400 bad-path, before the
// caller is verified and before the registry is asked; a trick aimed at hooks is 400 too.
func TestNonCanonicalPathRefused_S7(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name string
		path string
	}{
		{"S7 %2F", "/c/alpha/a%2Fb"},
		{"S7 %2f lower", "/c/alpha/a%2fb"},
		{"S7 %2F into hooks", "/c/alpha/x%2F..%2Fhooks"},
		{"S7 %5C", "/c/alpha/a%5Cb"},
		{"S7 raw backslash", `/c/alpha/a\b`},
		{"S7 raw backslash into hooks", `/c/alpha/x\..\hooks`},
		{"S7 %00", "/c/alpha/a%00b"},
		{"S7 %00 after hooks", "/c/alpha/hooks%00"},
		{"S7 %0A", "/c/alpha/a%0Ab"},
		{"S7 %7F", "/c/alpha/a%7Fb"},
		{"S7 ;", "/c/alpha/a;b"},
		{"S7 ; on hooks", "/c/alpha/hooks;x"},
		{"S7 %3B", "/c/alpha/a%3Bb"},
		{"S7 raw #", "/c/alpha/a#b"},
		{"S7 raw # on hooks", "/c/alpha/x#/../hooks"},
		{"S7 %23", "/c/alpha/a%23b"},
		{"S7 //", "/c/alpha//x"},
		{"S7 // before hooks", "/c/alpha//hooks"},
		{"S7 // in the prefix", "/c//alpha/x"},
		{"S7 trailing //", "/c/alpha/x//"},
		{"S7 empty segment", "/c/alpha/a//b"},
		{"S7 /./", "/c/alpha/./x"},
		{"S7 /. at the end", "/c/alpha/x/."},
		{"S7 /../", "/c/alpha/../x"},
		{"S7 /../ into hooks", "/c/alpha/x/../hooks"},
		{"S7 /.. at the end", "/c/alpha/hooks/.."},
		{"S7 %2e%2e", "/c/alpha/%2e%2e/x"},
		{"S7 %2E%2E into hooks", "/c/alpha/x/%2E%2E/hooks"},
		{"S7 .%2e", "/c/alpha/.%2e/x"},
		{"S7 %2e", "/c/alpha/%2e/x"},
		{"S7 invalid UTF-8 %ff", "/c/alpha/a%ffb"},
		{"S7 invalid UTF-8 overlong slash %C0%AF", "/c/alpha/a%C0%AFb"},
		{"S7 invalid UTF-8 raw byte", "/c/alpha/a\xffb"},
		{"S7 %25 double encoding", "/c/alpha/%2568ooks"},
		{"S7 %25 double-encoded slash", "/c/alpha/a%252Fb"},
		{"S7 %25 alone", "/c/alpha/a%25"},
		{"S7 bad id upper-case dash", "/c/-alpha/x"},
		{"S7 bad id 64 chars", "/c/" + "a123456789b123456789c123456789d123456789e123456789f123456789abcd" + "/x"},
		{"S7 bad id underscore", "/c/al_pha/x"},
		{"S7 bad id dot", "/c/al.pha/x"},
		{"S7 bad id Kelvin", "/c/\u212Aappa/x"},
		{"S7 no id", "/c//"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, doortest.ServeReq("GET", row.path), http.StatusBadRequest, "bad-path")
		})
	}
}

// TestCanonicalPathForwardedAsJudged_S7: a canonical path is forwarded, and the console sees
// exactly the decoded path that was judged (an escape that is canonical stays one character).
func TestCanonicalPathForwardedAsJudged_S7(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name, path, want string
	}{
		{"S7 root", "/c/alpha/", "/"},
		{"S7 plain", "/c/alpha/x/y", "/x/y"},
		{"S7 trailing slash kept", "/c/alpha/x/y/", "/x/y/"},
		{"S7 encoded space", "/c/alpha/a%20b", "/a b"},
		{"S7 encoded unicode", "/c/alpha/%C3%A9t%C3%A9", "/été"},
		{"S7 raw unicode", "/c/alpha/été", "/été"},
		{"S7 encoded ? stays in the path", "/c/alpha/a%3Fb", "/a?b"},
		{"S7 encoded +", "/c/alpha/a%2Bb", "/a+b"},
		{"S7 encoded letter", "/c/alpha/%78", "/x"},
		{"S7 hooks below the first segment", "/c/alpha/x/hooks", "/x/hooks"},
		{"S7 hooksx is not hooks", "/c/alpha/hooksx", "/hooksx"},
		{"S7 hook is not hooks", "/c/alpha/hook", "/hook"},
		{"S7 dots inside a segment", "/c/alpha/a..b/.x", "/a..b/.x"},
		{"S7 upper-case id", "/c/ALPHA/x", "/x"},
		{"S7 encoded id", "/c/%61lpha/x", "/x"},
		{"S7 upper-case C", "/C/alpha/x", "/x"},
		{"S7 encoded upper-case id", "/c/%41LPHA/x", "/x"},
		{"S7 colon in the first segment", "/c/alpha/a:b", "/a:b"},
		{"S7 sub-delims", "/c/alpha/a!$&'()*+,=@b", "/a!$&'()*+,=@b"},
		{"S7 tilde", "/c/alpha/~x", "/~x"},
		{"S7 encoded fullwidth slash stays one character", "/c/alpha/a%EF%BC%8Fb", "/a\uFF0Fb"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			s := d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", row.path)), before, doortest.Alice, row.want)
			if got := s.Header.Get("X-Forwarded-Prefix"); got != "/c/alpha" {
				t.Errorf("console saw X-Forwarded-Prefix %q, want /c/alpha", got)
			}
		})
	}
}

// TestUnknownConsole_S7: a well-formed id that nobody registered is 404 unknown-console.
func TestUnknownConsole_S7(t *testing.T) {
	d := startDoor(t)
	for _, row := range []struct{ name, path string }{
		{"S7 unknown id", "/c/beta/x"},
		{"S7 unknown id root", "/c/beta/"},
		{"S7 prefix of a known id", "/c/alph/x"},
		{"S7 63-char id", "/c/" + "a123456789b123456789c123456789d123456789e123456789f123456789abc" + "/x"},
	} {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, doortest.ServeReq("GET", row.path), http.StatusNotFound, "unknown-console")
		})
	}
}

// TestMalformedRequestTargetRefused_S7: a percent-escape that is not one, or a raw control byte,
// never reaches the console. net/http itself answers these 400 before the door judges them (so
// without a reason word or a fleet.rejected line; see the report).
func TestMalformedRequestTargetRefused_S7(t *testing.T) {
	d := startDoor(t)
	for _, row := range []struct{ name, path string }{
		{"S7 %zz", "/c/alpha/%zz"},
		{"S7 % at the end", "/c/alpha/%"},
		{"S7 %2 cut short", "/c/alpha/a%2"},
		{"S7 %%68ooks", "/c/alpha/%%68ooks"},
		{"S7 raw control byte", "/c/alpha/a\x01b"},
		{"S7 raw DEL", "/c/alpha/a\x7fb"},
	} {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			r := d.RawAs(doortest.ServeReq("GET", row.path))
			if r.Status != http.StatusBadRequest {
				t.Errorf("got %d %q, want 400", r.Status, r.Reason)
			}
			if d.Alpha.Count() != before {
				t.Error("the console saw the request")
			}
		})
	}
}

// TestHooksFirst_S7: on a hooks path, 403 hooks comes before the S9 upgrade check and the S12
// Origin check, whatever else the request carries; only S10's 421, 431 and 400
// assertion-sent/bad-path come before it.
func TestHooksFirst_S7(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name   string
		req    string
		status int
		reason string
	}{
		{"S7 hooks + h2c", doortest.ServeReq("GET", "/c/alpha/hooks", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), 403, "hooks"},
		{"S7 hooks + Upgrade: h2c alone", doortest.ServeReq("GET", "/c/alpha/hooks/x", "Upgrade: h2c"), 403, "hooks"},
		{"S7 hooks + foreign Origin", doortest.ServeReq("POST", "/c/alpha/hooks/permission-request", "Origin: https://evil.example", "Content-Length: 0"), 403, "hooks"},
		{"S7 hooks + Origin: null", doortest.ServeReq("GET", "/c/alpha/hooks", "Origin: null"), 403, "hooks"},
		{"S7 hooks + WebSocket from a foreign Origin", doortest.ServeReq("GET", "/c/alpha/hooks/ws", "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", wsKey, "Origin: https://evil.example"), 403, "hooks"},
		{"S7 hooks + WebSocket", doortest.ServeReq("GET", "/c/alpha/HOOKS/ws", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey), 403, "hooks"},
		{"S7 bad-path + h2c is still bad-path", doortest.ServeReq("GET", "/c/alpha/hooks/..%2fx", "Upgrade: h2c"), 400, "bad-path"},
		{"S7 bad-path + foreign Origin is still bad-path", doortest.ServeReq("GET", "/c/alpha//hooks", "Origin: https://evil.example"), 400, "bad-path"},
		{"S3 assertion-sent comes before hooks", doortest.ServeReq("GET", "/c/alpha/hooks", "X-Phase-Console-Fleet-Login: bob@example.com", "Upgrade: h2c"), 400, "assertion-sent"},
		{"S10 host comes before hooks", doortest.ServeReqHost("GET", "/c/alpha/hooks", "evil.example", "Upgrade: h2c"), 421, "host"},
		{"S9 not hooks: h2c is bad-upgrade", doortest.ServeReq("GET", "/c/alpha/x", "Upgrade: h2c"), 400, "bad-upgrade"},
		{"S12 not hooks: foreign Origin is cross-origin", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://evil.example"), 403, "cross-origin"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, row.status, row.reason)
		})
	}
}
