// Package doorrules is, for tests only, the attack table that every fleet door must judge
// alike: the rules of the judgement the doors share (package proxy's Door: SPEC S3, S4, S6, S7,
// S9, S12 and the order between them). Each door's tests run it through the door's own real
// listener (Run), so that a door that lost a rule, or reordered the checks, fails the same rows
// as any other; the rows are written once, here. Product code never imports it.
//
// What is a door's own — its Host admission, who is calling, its own origin — stays out of the
// table: a door builds each request with its own framing (Door.Request), and the rows add only
// what they test.
package doorrules

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/rawhttp"
)

// Console is the id of the console every door under test must have registered, answering 200 to
// whatever reaches it.
const Console = "alpha"

// A Door is one fleet door as the table needs it.
type Door interface {
	// Request is a raw HTTP/1.1 request head (lines ending "\n", a blank line last) that the
	// door would admit and forward: its own Host and caller identity, method and target, and the
	// extra header lines added.
	Request(method, target string, extra ...string) string
	// Send writes raw on a new connection and returns the response's status and X-Fleet-Reason.
	Send(t *testing.T, raw string) (status int, reason string)
	// Received is how many requests console Console has received, and the last one's path and
	// header as it saw them.
	Received() (n int, path string, header http.Header)
}

// A Row is one request and what every door must answer.
type Row struct {
	Name   string // cites the rule: "S3 underscores"
	Class  string // the advisory or bug class the row comes from (set by Rows from the name)
	Method string
	Target string   // the request-target, under /c/alpha/
	Extra  []string // header lines the row adds
	Body   string   // written after the head

	Status int    // the answer; 200: forwarded
	Reason string // X-Fleet-Reason of a refusal

	Path   string   // forwarded: the path the console sees
	Absent []string // forwarded: header names (any S3 spelling) the console must not see
}

const (
	wsKey = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
	c     = "/c/" + Console
)

var ws = []string{"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey}

func refused(name, method, target string, status int, reason string, extra ...string) Row {
	return Row{Name: name, Method: method, Target: target, Extra: extra, Status: status, Reason: reason}
}

func forwarded(name, target, path string, absent []string, extra ...string) Row {
	return Row{Name: name, Method: "GET", Target: target, Extra: extra, Status: http.StatusOK, Path: path, Absent: absent}
}

// Rows is the table, every row independent of the others.
func Rows() []Row {
	rows := []Row{
		// S3: an assertion header under any spelling, anywhere.
		refused("S3 canonical", "GET", c+"/", 400, "assertion-sent", "X-Phase-Console-Fleet: x"),
		refused("S3 login header", "GET", c+"/", 400, "assertion-sent", "X-Phase-Console-Fleet-Login: alice@example.com"),
		refused("S3 empty value", "GET", c+"/", 400, "assertion-sent", "X-Phase-Console-Fleet:"),
		refused("S3 upper case", "GET", c+"/", 400, "assertion-sent", "X-PHASE-CONSOLE-FLEET-LOGIN: x"),
		refused("S3 underscores", "GET", c+"/", 400, "assertion-sent", "x_phase_console_fleet_login: mallory"),
		refused("S3 mixed token chars", "GET", c+"/", 400, "assertion-sent", "X-Phase_Console.Fleet~Login: x"),
		refused("S3 duplicated", "GET", c+"/", 400, "assertion-sent", "X-Phase-Console-Fleet: a", "X-Phase-Console-Fleet: b"),
		refused("S3 named in Connection", "GET", c+"/", 400, "assertion-sent", "Connection: keep-alive, x_phase_console_fleet_login"),
		{Name: "S3 declared in Trailer", Method: "POST", Target: c + "/", Extra: []string{"Trailer: X-Phase-Console-Fleet", "Transfer-Encoding: chunked"},
			Body: "0\r\nX-Phase-Console-Fleet: x\r\n\r\n", Status: 400, Reason: "assertion-sent"},
		refused("S3 on a WebSocket upgrade", "GET", c+"/ws", 400, "assertion-sent", append(ws, "X-Phase-Console-Fleet-Login: x")...),
		refused("S3 before hooks", "GET", c+"/hooks", 400, "assertion-sent", "X_Phase_Console_Fleet: x", "Upgrade: h2c"),
		refused("S3 on a door's own page", "GET", "/", 400, "assertion-sent", "X-Phase-Console-Fleet: x"),

		// S7: hooks, whatever the spelling, the method or what else the request carries.
		refused("S7 hooks", "GET", c+"/hooks", 403, "hooks"),
		refused("S7 hooks/ below", "POST", c+"/hooks/permission-request", 403, "hooks", "Content-Length: 0"),
		refused("S7 HoOkS", "GET", c+"/HoOkS/x", 403, "hooks"),
		refused("S7 %68ooks", "GET", c+"/%68ooks", 403, "hooks"),
		refused("S7 Kelvin sign encoded", "GET", c+"/hoo%E2%84%AAs", 403, "hooks"),
		refused("S7 upper-case id", "GET", "/C/ALPHA/hooks", 403, "hooks"),
		refused("S7 unknown console", "GET", "/c/nobody/hooks", 403, "hooks"),
		refused("S7 TRACE", "TRACE", c+"/hooks/x", 403, "hooks"),
		refused("S7 hooks + h2c", "GET", c+"/hooks", 403, "hooks", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c"),
		refused("S7 hooks + foreign Origin", "POST", c+"/hooks/permission-request", 403, "hooks", "Origin: https://evil.example", "Content-Length: 0"),
		refused("S7 hooks + WebSocket from Origin null", "GET", c+"/hooks/ws", 403, "hooks", append(ws, "Origin: null")...),

		// S7: a path that is not canonical, before anything but S3.
		refused("S7 %2F", "GET", c+"/a%2Fb", 400, "bad-path"),
		refused("S7 ..", "GET", c+"/x/../hooks", 400, "bad-path"),
		refused("S7 %2e%2e", "GET", c+"/%2e%2e/hooks", 400, "bad-path"),
		refused("S7 //", "GET", c+"//hooks", 400, "bad-path"),
		refused("S7 backslash", "GET", c+"/%5Chooks", 400, "bad-path"),
		refused("S7 ;", "GET", c+"/hooks;x", 400, "bad-path"),
		refused("S7 %00", "GET", c+"/x%00", 400, "bad-path"),
		refused("S7 invalid UTF-8", "GET", c+"/%C0%AE", 400, "bad-path"),
		refused("S7 %25 left after decoding", "GET", c+"/%2568ooks", 400, "bad-path"),
		refused("S7 bad id", "GET", "/c/-alpha/", 400, "bad-path"),
		refused("S7 bad-path + h2c", "GET", c+"/hooks/..%2fx", 400, "bad-path", "Upgrade: h2c"),
		refused("S7 bad-path + foreign Origin", "GET", c+"//x", 400, "bad-path", "Origin: https://evil.example"),

		// S9: only a WebSocket upgrade.
		refused("S9 h2c", "GET", c+"/x", 400, "bad-upgrade", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"),
		refused("S9 websocket without Connection: Upgrade", "GET", c+"/x", 400, "bad-upgrade", "Upgrade: websocket", wsKey),
		refused("S9 websocket, h2c", "GET", c+"/x", 400, "bad-upgrade", "Connection: Upgrade", "Upgrade: websocket, h2c"),
		refused("S9 two Upgrade lines", "GET", c+"/x", 400, "bad-upgrade", "Connection: Upgrade", "Upgrade: websocket", "Upgrade: h2c"),
		// ſ (U+017F) is s under Unicode case folding, not under ASCII's, which is HTTP's.
		refused("S9 web\u017focket", "GET", c+"/x", 400, "bad-upgrade", "Connection: Upgrade", "Upgrade: web\u017focket", "Sec-WebSocket-Version: 13", wsKey),
		refused("S9 h2c to a door's own page", "GET", "/", 400, "bad-upgrade", "Connection: Upgrade", "Upgrade: h2c"),
		refused("S9 upgrade before Origin", "GET", c+"/x", 400, "bad-upgrade", "Upgrade: h2c", "Origin: https://evil.example"),

		// S12: an Origin that is no door's own.
		refused("S12 https://evil.example", "GET", c+"/x", 403, "cross-origin", "Origin: https://evil.example"),
		refused("S12 Origin null", "GET", c+"/x", 403, "cross-origin", "Origin: null"),
		refused("S12 empty Origin", "GET", c+"/x", 403, "cross-origin", "Origin:"),
		refused("S12 a loopback origin", "GET", c+"/x", 403, "cross-origin", "Origin: http://localhost:3000"),
		refused("S12 POST", "POST", c+"/x", 403, "cross-origin", "Origin: https://evil.example", "Content-Length: 0"),
		refused("S12 WebSocket upgrade", "GET", c+"/ws", 403, "cross-origin", append(ws, "Origin: https://evil.example")...),
		refused("S12 before the redirect", "GET", c, 403, "cross-origin", "Origin: https://evil.example"),
		refused("S12 on a door's own page", "GET", "/", 403, "cross-origin", "Origin: https://evil.example"),

		// CONNECT and TRACE to a console: one would tunnel past the hop, the other echo the assertion.
		refused("S6 TRACE", "TRACE", c+"/x", 405, "method"),
		refused("S6 trace", "trace", c+"/x", 405, "method"),

		// S4, S6, S7: forwarded without what the caller claimed, to exactly the path judged.
		forwarded("S4 Tailscale_User_Login spelled", c+"/x", "/x", []string{"Tailscale-User-Login"}, "Tailscale_User_Login: mallory@evil.example"),
		forwarded("S4 Forwarded", c+"/x", "/x", []string{"Forwarded"}, "Forwarded: for=1.2.3.4;host=evil"),
		forwarded("S4 X-Forwarded-User", c+"/x", "/x", []string{"X-Forwarded-User"}, "X-Forwarded-User: mallory"),
		forwarded("S4 X_Real_IP spelled", c+"/x", "/x", []string{"X-Real-Ip"}, "X_Real_IP: 1.2.3.4"),
		forwarded("S4 Remote-User", c+"/x", "/x", []string{"Remote-User"}, "Remote-User: mallory"),
		forwarded("S4 X-Webauth-User", c+"/x", "/x", []string{"X-Webauth-User"}, "X-Webauth-User: mallory"),
		forwarded("S4 X-Auth-Request-Email", c+"/x", "/x", []string{"X-Auth-Request-Email"}, "X-Auth-Request-Email: mallory@evil.example"),
		forwarded("S4 X-Pomerium-Claim-Email", c+"/x", "/x", []string{"X-Pomerium-Claim-Email"}, "X-Pomerium-Claim-Email: mallory@evil.example"),
		forwarded("S4 Cf-Access-Jwt-Assertion", c+"/x", "/x", []string{"Cf-Access-Jwt-Assertion"}, "Cf-Access-Jwt-Assertion: eyJ"),
		forwarded("S4 Teleport-Jwt-Assertion", c+"/x", "/x", []string{"Teleport-Jwt-Assertion"}, "Teleport-Jwt-Assertion: eyJ"),
		forwarded("S4 Authorization", c+"/x", "/x", []string{"Authorization"}, "Authorization: Bearer stolen"),
		forwarded("S4 Proxy-Authorization", c+"/x", "/x", []string{"Proxy-Authorization"}, "Proxy-Authorization: Basic bWFsbG9yeQ=="),
		forwarded("S6 Connection names the hop's headers", c+"/x", "/x", nil,
			"Connection: keep-alive, X-Forwarded-For, X-Forwarded-Prefix, X-Forwarded-Host, X-Forwarded-Proto"),
		forwarded("S7 the console's root", c+"/", "/", nil),
		forwarded("S7 encoded, forwarded as judged", c+"/a%20b/%C3%A4", "/a b/\u00e4", nil),
		forwarded("S7 case of the prefix and id folds", "/C/Alpha/x", "/x", nil),
	}
	for i := range rows {
		rows[i].Class = classOf(rows[i].Name)
	}
	return rows
}

// classOf names the advisory or bug class a row comes from, so that the table says why each
// trick is in it. The first matching entry wins; every row must match one (Run checks).
func classOf(name string) string {
	for _, c := range []struct{ has, class string }{
		{"Trailer", "request smuggling of a header as a trailer (CWE-444 family)"},
		{"named in Connection", "hop-by-hop header abuse: Connection naming a header the proxy relies on"},
		{"Connection names", "hop-by-hop header abuse: Connection naming a header the proxy relies on"},
		{"S3 on a WebSocket", "a check skipped on the upgrade path"},
		{"S3", "header spoofing: the caller writes the proxy's own assertion ('_' and '-' fold alike, as nginx and CGI do)"},
		{"Kelvin", "Unicode case-folding bypass (U+212A KELVIN SIGN folds to k)"},
		{"HoOkS", "path confusion: case folding between proxy and backend"},
		{"upper-case id", "path confusion: case folding between proxy and backend"},
		{"case of the prefix", "path confusion: case folding between proxy and backend"},
		{"%68ooks", "percent-encoding bypass of a path rule"},
		{"encoded, forwarded", "percent-encoding: the path forwarded is the path judged"},
		{"bad-path +", "order of checks: a bad path is refused before anything else can answer"},
		{"hooks +", "order of checks: the protected path answers before upgrade and Origin rules"},
		{"S7 TRACE", "order of checks: the protected path answers for every method"},
		{"unknown console", "order of checks: the protected path answers before the console lookup"},
		{"hooks", "broken access control on a protected path (CWE-284)"},
		{"%2F", "encoded separator: proxy and backend split the path differently (CWE-22)"},
		{"backslash", "encoded separator: proxy and backend split the path differently (CWE-22)"},
		{"S7 ..", "path traversal through dot segments (CWE-22)"},
		{"%2e%2e", "path traversal through dot segments (CWE-22)"},
		{"S7 //", "empty segment normalisation (proxy/backend disagreement)"},
		{";", "path parameters (Tomcat-style ';' segments)"},
		{"%00", "NUL byte injection (CWE-158)"},
		{"UTF-8", "overlong UTF-8 encoding (CWE-176)"},
		{"%25", "double encoding (CWE-174)"},
		{"bad id", "input validation: an id outside the grammar"},
		{"console's root", "prefix stripping"},
		{"without Connection", "malformed upgrade"},
		{"two Upgrade", "duplicate headers read differently by proxy and backend"},
		{"upgrade before Origin", "order of checks"},
		{"S9", "h2c smuggling: an upgrade that tunnels past the proxy's rules"},
		{"loopback origin", "DNS rebinding / a local page's origin"},
		{"null", "opaque origin (sandboxed iframe, data: URL)"},
		{"empty Origin", "opaque origin (sandboxed iframe, data: URL)"},
		{"WebSocket upgrade", "cross-site WebSocket hijacking (CSWSH)"},
		{"S12", "cross-site request forgery against an ambient identity"},
		{"TRACE", "cross-site tracing (XST): TRACE would echo the assertion"},
		{"trace", "cross-site tracing (XST): TRACE would echo the assertion"},
		{"Authorization", "credentials forwarded to a backend that did not ask for them"},
		{"S4", "identity header spoofing through a trusted proxy (X-Forwarded-*, Forwarded, auth-proxy families)"},
	} {
		if strings.Contains(name, c.has) {
			return c.class
		}
	}
	return ""
}

// Run sends every row of the table to d and checks its answer: a refusal's status and reason with
// nothing reaching the console; a forward reaching it once, at the path judged, with one of each
// assertion header and the hop's own X-Forwarded-Prefix, and none of the row's Absent headers.
func Run(t *testing.T, d Door) {
	for _, row := range Rows() {
		t.Run(row.Name, func(t *testing.T) {
			t.Helper()
			if row.Class == "" {
				t.Errorf("row %q names no advisory or bug class", row.Name)
			}
			before, _, _ := d.Received()
			status, reason := d.Send(t, d.Request(row.Method, row.Target, row.Extra...)+row.Body)
			after, path, h := d.Received()
			if status != row.Status || reason != row.Reason {
				t.Errorf("got %d %q, want %d %q", status, reason, row.Status, row.Reason)
			}
			if row.Status != http.StatusOK {
				if after != before {
					t.Errorf("the console saw %d request(s); a refused request must never be forwarded", after-before)
				}
				return
			}
			if after != before+1 {
				t.Fatalf("the console saw %d request(s), want 1", after-before)
			}
			if path != row.Path {
				t.Errorf("the console saw path %q, want %q", path, row.Path)
			}
			for _, name := range []string{"X-Phase-Console-Fleet", "X-Phase-Console-Fleet-Login"} {
				if got := values(h, name); len(got) != 1 || got[0] == "" || strings.Contains(got[0], "mallory") {
					t.Errorf("the console saw %s %q, want the hop's one value", name, got)
				}
			}
			if got := values(h, "X-Forwarded-Prefix"); len(got) != 1 || got[0] != c {
				t.Errorf("the console saw X-Forwarded-Prefix %q, want %q", got, c)
			}
			for _, name := range row.Absent {
				if got := values(h, name); len(got) != 0 {
					t.Errorf("the console saw %s %q", name, got)
				}
			}
		})
	}
}

// values returns the values of every header in h whose name folds (SPEC S3) to that of name,
// folded by internal/rawhttp so that the table does not trust the folding it tests.
var values = rawhttp.FoldedValues
