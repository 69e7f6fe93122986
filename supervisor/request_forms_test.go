package supervisor

// Hostile requests against the loopback door: tricks an attacker would try, each a regression
// guard, raw bytes over a real listener.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// ---- S3, S7: smuggling past the judge (the rules of every door: proxy/door_framing_test.go) ---

// After a 401 the door closes the connection: nothing pipelined behind it is served.
func TestNothingRidesAfter401_S5(t *testing.T) {
	d := startDoor(t)
	before := d.Alpha.Count()
	unverified := strings.Replace(doortest.ServeReq("GET", "/c/alpha/a"), doortest.AliceIP, "100.64.0.99", 1)
	rs, _ := d.RawUpTo(unverified+doortest.ServeReq("GET", "/c/alpha/b"), 2, 3*time.Second)
	if len(rs) != 1 || rs[0].Status != 401 {
		t.Fatalf("got %d responses %v, want exactly one 401 and a closed connection", len(rs), rs)
	}
	if d.Alpha.Count() != before {
		t.Errorf("the console saw a request after a 401")
	}
}

// Transfer-Encoding + Content-Length, and chunk extensions: whatever framing the caller writes,
// the door judges each request it parses, and a request hidden in a body never reaches a console
// as a request.
func TestBodyFramingSmuggling_S7(t *testing.T) {
	d := startDoor(t)
	hidden := doortest.ServeReq("POST", "/c/alpha/hooks/permission-request", "X-Phase-Console-Fleet: evil", "Content-Length: 0")
	rows := []struct{ name, req string }{
		{"TE chunked + CL", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: chunked", "Content-Length: 3") + "0\r\n\r\n" + hidden},
		{"CL + TE chunked", doortest.ServeReq("POST", "/c/alpha/x", "Content-Length: 5", "Transfer-Encoding: chunked") + "0\r\n\r\n" + hidden},
		{"TE chunked twice", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked") + "0\r\n\r\n" + hidden},
		{"TE xchunked", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: xchunked") + "0\r\n\r\n" + hidden},
		{"TE chunked, identity", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: chunked, identity") + "0\r\n\r\n" + hidden},
		{"TE with space", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding : chunked") + "0\r\n\r\n" + hidden},
		{"two different CL", doortest.ServeReq("POST", "/c/alpha/x", "Content-Length: 0", "Content-Length: 60") + hidden},
		{"chunk extension", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: chunked") +
			"3;ext=\"x\r\nX-Phase-Console-Fleet: evil\"\r\nabc\r\n0\r\n\r\n" + hidden},
		{"chunk size overflow", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: chunked") +
			"10000000000000003\r\nabc\r\n0\r\n\r\n" + hidden},
		{"bare LF chunk", doortest.ServeReq("POST", "/c/alpha/x", "Transfer-Encoding: chunked") + "3\nabc\n0\n\n" + hidden},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			d.RawUpTo(row.req, 3, 2*time.Second)
			for _, s := range d.Alpha.Since(before) {
				if s.Path != "/x" || strings.EqualFold(s.Path, "/hooks/permission-request") {
					t.Errorf("console saw %s %s", s.Method, s.Path)
				}
				if got := rawhttp.FoldedValues(s.Header, "X-Phase-Console-Fleet"); len(got) != 1 || got[0] != d.Token {
					t.Errorf("console saw bearer values %q", got)
				}
			}
		})
	}
}

// Request-target forms other than origin-form never reach a console: absolute-form (even naming
// this machine), authority-form CONNECT, asterisk-form, and an HTTP/2 preface.
func TestRequestTargetForms_S7(t *testing.T) {
	d := startDoor(t)
	lines := func(first string) string {
		return first + "\nHost: " + doortest.TSName + "\nX-Forwarded-For: " + doortest.AliceIP + "\nTailscale-User-Login: " + doortest.Alice + "\n\n"
	}
	for _, req := range []string{
		lines("GET http://" + doortest.TSName + "/c/alpha/ HTTP/1.1"),
		lines("GET http://evil.example/c/alpha/ HTTP/1.1"),
		lines("GET https://127.0.0.1/c/alpha/hooks HTTP/1.1"),
		lines("CONNECT " + doortest.TSName + ":443 HTTP/1.1"),
		lines("CONNECT 127.0.0.1:" + strings.Split(d.Alpha.Addr(), ":")[1] + " HTTP/1.1"),
		lines("CONNECT /c/alpha/ HTTP/1.1"),
		lines("OPTIONS * HTTP/1.1"),
		lines("GET * HTTP/1.1"),
		lines("GET c/alpha/ HTTP/1.1"),
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		lines("GET /c/alpha/ HTTP/2.0"),
		lines("GET /c/alpha/ XTTP/1.1"),
	} {
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(req, 1, 2*time.Second)
		if d.Alpha.Count() != before {
			t.Errorf("%q: forwarded to the console", strings.SplitN(req, "\n", 2)[0])
		}
		if len(rs) == 1 && rs[0].Status < 300 && !strings.HasPrefix(req, "OPTIONS *") {
			t.Errorf("%q: got %d", strings.SplitN(req, "\n", 2)[0], rs[0].Status)
		}
	}
}

// Expect: 100-continue never lets a body through before the request is judged.
func TestExpectContinueJudgedFirst_S3(t *testing.T) {
	d := startDoor(t)
	for _, req := range []string{
		doortest.ServeReq("POST", "/c/alpha/x", "Expect: 100-continue", "Content-Length: 5", "X_Phase_Console_Fleet: evil"),
		strings.Replace(doortest.ServeReq("POST", "/c/alpha/x", "Expect: 100-continue", "Content-Length: 5"), doortest.AliceIP, "100.64.0.99", 1),
		doortest.ServeReq("POST", "/c/alpha/hooks", "Expect: 100-continue", "Content-Length: 5"),
	} {
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(req, 1, 2*time.Second)
		if len(rs) != 1 || rs[0].Status < 400 {
			t.Errorf("got %v, want a refusal (and no 100 Continue)", rs)
		}
		if d.Alpha.Count() != before {
			t.Errorf("forwarded")
		}
	}
}

// ---- S5: identity ------------------------------------------------------------------------

// X-Forwarded-For written in forms Serve never uses: the login asserted is always WhoIs's for the
// one Tailscale address it names, or the request is refused.
func TestXForwardedForForms_S5(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		xff, login string // login "" means refused 401 unverified
	}{
		{"::ffff:" + doortest.AliceIP, doortest.Alice},
		{"  " + doortest.AliceIP + "\t", doortest.Alice},
		{"FD7A:115C:A1E0::B0B", doortest.Bob},
		{"fd7a:115c:a1e0:0:0:0:0:b0b", doortest.Bob},
		{"fd7a:115c:a1e0::b0b%eth0", ""},
		{"[fd7a:115c:a1e0::b0b]", ""},
		{"[fd7a:115c:a1e0::b0b]:443", ""},
		{doortest.AliceIP + ",", ""},
		{"," + doortest.AliceIP, ""},
		{doortest.AliceIP + " " + doortest.BobIP, ""},
		{"0x64.101.102.103", ""},
		{"100.101.102.0103", ""},
		{"1684367975", ""},
		{"unknown", ""},
		{"", ""},
		{"127.0.0.1", ""},
		{"::ffff:127.0.0.1", ""},
	}
	for _, row := range rows {
		t.Run(row.xff, func(t *testing.T) {
			req := strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), "X-Forwarded-For: "+doortest.AliceIP, "X-Forwarded-For: "+row.xff, 1)
			req = strings.Replace(req, "Tailscale-User-Login: "+doortest.Alice+"\n", "", 1)
			before := d.Alpha.Count()
			r := d.Raw(req)
			if row.login == "" {
				d.WantRefused(t, r, before, 401, "unverified")
				return
			}
			d.WantForwarded(t, r, before, row.login, "/")
		})
	}
}

// The WhoIs cache is per address: one user's answer never vouches for another's request, on one
// connection or several, and a Serve login header that disagrees is refused even when cached.
func TestWhoIsCacheAcrossUsers_S5(t *testing.T) {
	d := startDoor(t)
	bobAsAlice := strings.Replace(doortest.ServeReq("GET", "/c/alpha/b"), doortest.AliceIP, doortest.BobIP, 1) // bob's IP, alice's login
	bobReq := strings.Replace(bobAsAlice, doortest.Alice, doortest.Bob, 1)
	before := d.Alpha.Count()
	rs, _ := d.RawUpTo(doortest.ServeReq("GET", "/c/alpha/a")+bobAsAlice, 2, 3*time.Second)
	if len(rs) != 2 || rs[0].Status != 200 || rs[1].Status != 401 || rs[1].Reason != "identity-mismatch" {
		t.Fatalf("got %v", rs)
	}
	r := d.Raw(bobReq)
	if r.Status != 200 {
		t.Fatalf("bob: %d %q", r.Status, r.Reason)
	}
	var logins []string
	for _, s := range d.Alpha.Since(before) {
		logins = append(logins, s.Header.Get("X-Phase-Console-Fleet-Login"))
	}
	if strings.Join(logins, ",") != doortest.Alice+","+doortest.Bob {
		t.Errorf("console saw logins %q, want alice then bob", logins)
	}
}

// S5a is a fact of each connection: a connection from another uid is refused even while a
// connection from tailscaled's uid is open and verified, and its refusal does not stick to others.
func TestVerdictNotSharedAcrossConnections_S5a(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	d := startDoor(t)
	good := d.Dial()
	defer good.Close()
	br := bufio.NewReader(good)
	ask := func(what string) {
		io.WriteString(good, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/"+what)))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s on tailscaled's connection: %d", what, resp.StatusCode)
		}
	}
	ask("1")
	before := d.Alpha.Count()
	mode := "raw " + d.Addr
	b, err := otheruser.Command(t, "^TestHostileRequestsHelperProcess$", "FLEET_OTHER_UID_CLIENT", mode, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/stranger"))).Output()
	if err != nil {
		t.Fatalf("helper %s: %v (%s)", mode, err, b)
	}
	out := string(b)
	if !strings.HasPrefix(out, "STATUS 401 unverified") {
		t.Errorf("a connection from uid %d: %q, want 401 unverified", otheruser.UID, out)
	}
	if d.Alpha.Count() != before {
		t.Error("a connection from another uid was forwarded")
	}
	ask("2")
}

// ---- S8: the registry API ------------------------------------------------------------------

func TestAddrValidation_S8(t *testing.T) {
	d := startDoor(t)
	for _, addr := range []string{
		"0x7f.1:80", "0177.0.0.1:80", "127.1:80", "2130706433:80", "localhost:80", "LOCALHOST:80",
		"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:+80",
		"127.0.0.1:0x50", "[::1%lo]:80", "[fe80::1%lo]:80", "[::]:80", "0.0.0.0:80", "100.101.102.1:80",
		"192.168.1.1:80", "127.0.0.1:80/x", "http://127.0.0.1:80", "127.0.0.1:80 ", " 127.0.0.1:80",
		"127.0.0.1:80\n", "::1:80", "[::1]", "127.0.0.1:80#", "127.0.0.1:80@evil.example:80",
	} {
		r := register(d, "probe", addr)
		if r.Status != 400 || r.Reason != "bad-registration" {
			t.Errorf("addr %q: got %d %q, want 400 bad-registration", addr, r.Status, r.Reason)
		}
	}
	if _, ok := d.srv.registry.Get("probe"); ok {
		t.Error("a refused registration was kept")
	}
}

func TestJSONTricks_S8(t *testing.T) {
	d := startDoor(t)
	post := func(body string) doortest.Response {
		return d.Raw(d.localReq("POST", "/fleet/v1/consoles", body, d.bearer()))
	}
	// Duplicate and case-folded keys: whatever Go picks, it is validated after the pick.
	for _, body := range []string{
		`{"id":"alpha2","addr":"127.0.0.1:9001","addr":"1.2.3.4:80"}`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","ADDR":"1.2.3.4:80"}`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","Addr":"1.2.3.4:80"}`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","id":"../x"}`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","name":"a\u0000b"}`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","name":"a\u001bb"}`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","extra":1}`,
		`{"id":"ALPHA2","addr":"127.0.0.1:9001"}`,
		`{"id":"alpha\u0032\n","addr":"127.0.0.1:9001"}`,
		`[{"id":"alpha2","addr":"127.0.0.1:9001"}]`,
		`null`,
		`{"id":"alpha2","addr":"127.0.0.1:9001","name":"` + strings.Repeat("x", 20<<10) + `"}`,
	} {
		r := post(body)
		if r.Status != 400 {
			t.Errorf("%.80s: got %d", body, r.Status)
		}
	}
	if _, ok := d.srv.registry.Get("alpha2"); ok {
		t.Error("a refused registration was kept")
	}
	// A name is shown escaped on the index page.
	if r := post(`{"id":"xss","addr":"127.0.0.1:9001","name":"<script>alert(1)</script>"}`); r.Status != 201 {
		t.Fatalf("register xss: %d %q", r.Status, r.Body)
	}
	r := d.Raw(doortest.ServeReq("GET", "/"))
	if r.Status != 200 || strings.Contains(r.Body, "<script>alert") {
		t.Errorf("index: %d, name not escaped: %v", r.Status, strings.Contains(r.Body, "<script>alert"))
	}
}

func TestBearerForms_S8(t *testing.T) {
	d := startDoor(t)
	for _, auth := range []string{
		"Authorization: Bearer",
		"Authorization: Bearer ",
		"Authorization: Bearer  ",
		"Authorization:  " + d.Token,
		"Authorization: Basic " + d.Token,
		"Authorization: Bearer " + d.Token + "=",
		"Authorization: Bearer " + d.Token[:len(d.Token)-1],
		"Authorization: Bearer " + d.Token + d.Token,
		"Authorization: Bearer " + d.Token + " x",
		"Authorization: Bearer\t" + d.Token,
		"Authorization: Bearer " + d.Token + "\nAuthorization: Bearer " + d.Token,
		"Authorization: Bearer x\nAuthorization: Bearer " + d.Token,
		"Authorization_: Bearer " + d.Token,
		"X-Authorization: Bearer " + d.Token,
		"Proxy-Authorization: Bearer " + d.Token,
	} {
		r := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", auth))
		if r.Status != 401 {
			t.Errorf("%q: got %d, want 401", auth, r.Status)
		}
	}
	// Through Serve the API is never served, even with the right bearer.
	r := d.Raw(doortest.ServeReq("GET", "/fleet/v1/consoles", d.bearer()))
	if r.Status != 403 || r.Reason != "local-only" {
		t.Errorf("through Serve: %d %q", r.Status, r.Reason)
	}
	if strings.Contains(d.Logs.String(), d.Token) {
		t.Error("the fleet token appears in the log")
	}
}

// ---- S10 / S12 -----------------------------------------------------------------------------

func TestHostForms_S10(t *testing.T) {
	d := startDoor(t)
	for _, host := range []string{
		"[::1%25lo]", "[::1%lo]:7420", doortest.SelfIP + "%eth0", "[::ffff:" + doortest.AliceIP + "]", "sup.tail1234.ts.net..",
		".sup.tail1234.ts.net", "xn--sup-tail1234", "sup\\.tail1234.ts.net", "127.0.0.1:7420:7420", "[::1]x",
	} {
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(doortest.ServeReqHost("GET", "/c/alpha/", host), 1, 2*time.Second)
		if d.Alpha.Count() != before {
			t.Errorf("Host %q was admitted and forwarded", host)
		}
		if len(rs) == 1 && rs[0].Status != 421 && rs[0].Status != 400 {
			t.Errorf("Host %q: got %d %q", host, rs[0].Status, rs[0].Reason)
		}
	}
}

// TestHostWithJunkPort_S10: the Host parser (contract.ParseHost) checks the port: a parser that
// dropped everything after the ':' as "the port" (or took anything in brackets) would admit a Host
// such as "sup.tail1234.ts.net:1,evil.example" and forward it raw as X-Forwarded-Host, where
// frameworks that split a forwarded list read "evil.example" as the public host (links,
// redirects, cache keys).
func TestHostWithJunkPort_S10(t *testing.T) {
	d := startDoor(t)
	for _, host := range []string{doortest.TSName + ":1,evil.example", "localhost:443,evil.example:443", doortest.TSName + ":x;evil",
		"127.0.0.1:99999", doortest.TSName + ".:443.", "[127.0.0.1]", "[localhost]", "[::1]:80:80", "[::1]:,evil.example"} {
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(doortest.ServeReqHost("GET", "/c/alpha/", host), 1, 2*time.Second)
		if d.Alpha.Count() != before {
			s, _ := d.Alpha.Last()
			t.Errorf("Host %q admitted; console saw X-Forwarded-Host %q", host, s.Header.Get("X-Forwarded-Host"))
		} else if len(rs) == 1 && rs[0].Status != 421 && rs[0].Status != 400 {
			t.Errorf("Host %q: got %d", host, rs[0].Status)
		}
	}
}

func TestOriginForms_S12(t *testing.T) {
	d := startDoor(t)
	refused := []string{
		"null", "NULL", "", " ", "https://evil.example", "https://" + doortest.TSName + ".evil.example",
		"https://evil.example#https://" + doortest.TSName, "https://" + doortest.TSName + "@evil.example",
		"https://user@" + doortest.TSName, "http://" + doortest.TSName, "wss://" + doortest.TSName, "https://" + doortest.TSName + ".",
		"https://sup", "https://" + doortest.TSName + "/", "https://" + doortest.TSName + "/c/alpha/",
		"https:" + doortest.TSName, "https:/" + doortest.TSName, "//" + doortest.TSName, doortest.TSName, "https://" + doortest.TSName + ", https://evil.example",
		"https://" + doortest.TSName + " https://evil.example", "file://", "https://" + doortest.SelfIP,
		"https://" + strings.Replace(doortest.TSName, ".", "%2E", -1) + "x",
	}
	for _, o := range refused {
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(doortest.ServeReq("POST", "/c/alpha/x", "Origin: "+o, "Content-Length: 0"), 1, 2*time.Second)
		if d.Alpha.Count() != before {
			t.Errorf("Origin %q: forwarded", o)
		} else if len(rs) == 1 && (rs[0].Status != 403 || rs[0].Reason != "cross-origin") {
			t.Errorf("Origin %q: got %d %q", o, rs[0].Status, rs[0].Reason)
		}
	}
	// Two Origin lines, even if one is right; and on a WebSocket upgrade.
	for _, extra := range [][]string{
		{"Origin: https://" + doortest.TSName, "Origin: https://evil.example"},
		{"Origin: https://evil.example", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey},
		{"origin: https://evil.example"},
	} {
		before := d.Alpha.Count()
		r := d.Raw(doortest.ServeReq("GET", "/c/alpha/ws", extra...))
		d.WantRefused(t, r, before, 403, "cross-origin")
	}
	// The real origin, in any case and with or without the default port (RFC 6454), is forwarded.
	for _, o := range []string{"https://" + doortest.TSName, "HTTPS://" + strings.ToUpper(doortest.TSName), "https://" + doortest.TSName + ":443"} {
		before := d.Alpha.Count()
		d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/", "Origin: "+o)), before, doortest.Alice, "/")
	}
}

// ---- S7 at the door --------------------------------------------------------------------------

func TestPathTricksAtDoor_S7(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		path   string
		status int
		reason string
	}{
		{"/c/alpha/%C0%AFhooks", 400, "bad-path"},        // overlong '/'
		{"/c/alpha/%E0%80%AFhooks", 400, "bad-path"},     // overlong '/', 3 bytes
		{"/c/alpha/hooks%C0%AF", 400, "bad-path"},        // overlong after hooks
		{"/c/alpha/%ED%A0%80", 400, "bad-path"},          // UTF-16 surrogate
		{"/c/alpha/hoo%E2%84%AAs", 403, "hooks"},         // Kelvin sign K
		{"/c/alpha/hoo%E2%84%AAs/x", 403, "hooks"},       //
		{"/c/%61lpha/h%6F%6Fks", 403, "hooks"},           // encoded id and hooks
		{"/%43/ALPHA/HOOKS/", 403, "hooks"},              // encoded C, upper case
		{"/c/alpha/%2e%2e/alpha/hooks", 400, "bad-path"}, // encoded dot-dot
		{"/c/alpha/.%2e/hooks", 400, "bad-path"},         //
		{"/c/alpha/hooks%2fx", 400, "bad-path"},          //
		{"/c/alpha/%252e%252e/hooks", 400, "bad-path"},   // double-encoded
		{"/c/alpha/hooks%23", 400, "bad-path"},           // encoded '#'
		{"/c/alpha/hooks%09", 400, "bad-path"},           // encoded TAB
		{"/c/al%00pha/", 400, "bad-path"},                //
		{"/c/alpha%2F..%2Fbeta/", 400, "bad-path"},       //
		{"/c/%E2%84%AAlpha/", 400, "bad-path"},           // Kelvin in the id
		{"/c/-alpha/", 400, "bad-path"},                  //
		{"/c/" + strings.Repeat("a", 64) + "/", 400, "bad-path"},
	}
	for _, row := range rows {
		t.Run(row.path, func(t *testing.T) {
			before := d.Alpha.Count()
			d.WantRefused(t, d.Raw(doortest.ServeReq("POST", row.path)), before, row.status, row.reason)
		})
	}
	// An IIS-style %u escape: net/http itself refuses the request-target.
	before := d.Alpha.Count()
	if rs, _ := d.RawUpTo(doortest.ServeReq("POST", "/c/alpha/%u0068ooks"), 1, 2*time.Second); len(rs) != 1 || rs[0].Status != 400 || d.Alpha.Count() != before {
		t.Errorf("%%u escape: %v", rs)
	}
	// What is let through is exactly what a console's router will see: never "hooks".
	for _, p := range []string{"/c/alpha/hooks%20", "/c/alpha/hooks.", "/c/alpha/%E2%80%8Bhooks", "/c/alpha/hooks%3F", "/c/alpha/ho%C3%B6ks"} {
		before := d.Alpha.Count()
		r := d.Raw(doortest.ServeReq("GET", p))
		if r.Status == 200 {
			s, _ := d.Alpha.Last()
			first := strings.SplitN(strings.TrimPrefix(s.Path, "/"), "/", 2)[0]
			if strings.EqualFold(first, "hooks") || d.Alpha.Count() != before+1 {
				t.Errorf("%s: console saw %q", p, s.Path)
			}
		}
	}
}

// ---- S11: secrets --------------------------------------------------------------------------

func TestTokenNeverInLogsOrPages_S11(t *testing.T) {
	d := startDoor(t)
	tok := d.Token
	var bodies []string
	for _, req := range []string{
		doortest.ServeReq("GET", "/c/alpha/hooks?token="+tok, "Authorization: Bearer "+tok),
		doortest.ServeReq("GET", "/c/alpha/", "X-Phase-Console-Fleet: "+tok),
		doortest.ServeReq("GET", "/c/nope/?t="+tok),
		doortest.ServeReq("GET", "/c/alpha/", "Origin: https://evil.example", "Cookie: s="+tok),
		d.localReq("GET", "/fleet/v1/consoles?t="+tok, "", "Authorization: Bearer "+tok+"x"),
		d.localReq("DELETE", "/fleet/v1/consoles/nope", "", d.bearer()),
		strings.Replace(doortest.ServeReq("GET", "/c/alpha/?"+tok), doortest.AliceIP, "100.64.0.99", 1),
	} {
		r := d.Raw(req)
		bodies = append(bodies, r.Body)
		for k, vv := range r.Header {
			for _, v := range vv {
				if strings.Contains(v, tok) {
					t.Errorf("response header %s carries the token", k)
				}
			}
		}
	}
	// A console that is down: the 502 page.
	d.srv.registry.Put(Console{ID: "gone", Addr: "127.0.0.1:1", Name: "gone"})
	bodies = append(bodies, d.Raw(doortest.ServeReq("GET", "/c/gone/?"+tok)).Body)
	for _, b := range bodies {
		if strings.Contains(b, tok) {
			t.Errorf("a page carries the token: %q", b)
		}
	}
	if strings.Contains(d.Logs.String(), tok) {
		t.Error("the fleet token appears in the log")
	}
}

// TestTraceLowerCase_S6: the door refuses CONNECT and TRACE (TRACE would echo the assertion back
// to the caller) in any case: compared case-sensitively, "trace" and "connect" would be
// forwarded with the assertion to a console whose framework folds the method's case.
func TestTraceLowerCase_S6(t *testing.T) {
	d := startDoor(t)
	for _, m := range []string{"trace", "Trace", "connect"} {
		before := d.Alpha.Count()
		r := d.Raw(doortest.ServeReq(m, "/c/alpha/"))
		if d.Alpha.Count() != before {
			t.Errorf("%s: forwarded with the assertion (%d)", m, r.Status)
		}
	}
}

// TestRegistrarSendsTokenToSquatter_S8: the reference console's Registrar sends the fleet bearer
// only to a listener of its own user (peercred.DialOwn). While `fleet serve` is down (restart,
// crash), any other local user can bind 127.0.0.1:7420; a Registrar that sent the token to
// whatever listens there would hand it over, and with it they would be believed as any login by
// every console and could re-route every console (S8).
func TestRegistrarSendsTokenToSquatter_S8(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the squatter as another user")
	}
	const tok = "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE"
	cmd, stdout := startOtherUIDClient(t, "squat")
	line, err := stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PORT ") {
		t.Fatalf("squatter: %q %v", line, err)
	}
	addr := "127.0.0.1:" + strings.TrimSpace(strings.TrimPrefix(line, "PORT "))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&refconsole.Registrar{ID: "victim", Addr: "127.0.0.1:9001", Supervisor: addr,
			Token: func() (string, error) { return tok, nil }, Logger: slog.New(slog.DiscardHandler)}).Run(ctx)
	}()
	got := make(chan string, 1)
	go func() { l, _ := stdout.ReadString('\n'); got <- l }()
	select {
	case l := <-got:
		if strings.Contains(l, tok) {
			t.Errorf("a listener of uid %d received the fleet token", otheruser.UID)
		}
	case <-time.After(3 * time.Second):
	}
	cancel()
	<-done
	cmd.Process.Kill()
	cmd.Wait()
}

// ---- helper process (another uid) --------------------------------------------------------------

// startOtherUIDClient starts TestHostileRequestsHelperProcess as otheruser.UID and returns it and its stdout.
func startOtherUIDClient(t *testing.T, mode string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	h := otheruser.Start(t, "^TestHostileRequestsHelperProcess$", "FLEET_OTHER_UID_CLIENT", mode, nil)
	return h.Cmd, h.Out
}

// TestHostileRequestsHelperProcess is the other-uid client of the tests above; otherwise it does nothing.
//
//	raw ADDR: write stdin to ADDR, print "STATUS <code> <X-Fleet-Reason>"
//	squat:    listen on 127.0.0.1:0, print "PORT <port>", then "AUTH <Authorization>" of the
//	          first request, answer 201
func TestHostileRequestsHelperProcess(t *testing.T) {
	mode := os.Getenv("FLEET_OTHER_UID_CLIENT")
	if mode == "" {
		return
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(1) }
	switch {
	case strings.HasPrefix(mode, "raw "):
		c, err := net.Dial("tcp", strings.TrimPrefix(mode, "raw "))
		if err != nil {
			fail(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.Copy(c, os.Stdin)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			fail(err)
		}
		fmt.Printf("STATUS %d %s\n", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	case mode == "squat":
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			fail(err)
		}
		fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
		os.Stdout.Sync()
		var c net.Conn
		var req *http.Request
		for req == nil { // the supervisor's probes connect and say nothing: wait for a request
			if c, err = ln.Accept(); err != nil {
				fail(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if req, err = http.ReadRequest(bufio.NewReader(c)); err != nil {
				c.Close()
			}
		}
		fmt.Printf("AUTH %s\n", req.Header.Get("Authorization"))
		body, _ := json.Marshal(map[string]string{"id": "victim"})
		fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		c.Close()
	}
	os.Exit(0)
}

// squatConsole registers the console id at a port that a process of another user holds (the
// helper's "squat": a dead console's port taken over), until t ends.
func squatConsole(t *testing.T, d *door, id string) {
	t.Helper()
	cmd, stdout := startOtherUIDClient(t, "squat")
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PORT ") {
		t.Fatalf("squatter: %q %v", line, err)
	}
	addr := "127.0.0.1:" + strings.TrimSpace(strings.TrimPrefix(line, "PORT "))
	if _, err := d.srv.registry.Put(Console{ID: id, Addr: addr, Name: "Squat"}); err != nil {
		t.Fatal(err)
	}
}

// TestHopRefusesConsoleOfOtherUser_S6: a console port held by a process of another user (a dead
// console's port taken over) gets nothing — not the fleet token, not the login: the hop checks
// the owner of the console's socket before it sends a byte.
func TestHopRefusesConsoleOfOtherUser_S6(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the squatter as another user")
	}
	d := startDoor(t)
	squatConsole(t, d, "squat")
	r := d.Raw(doortest.ServeReq("GET", "/c/squat/"))
	if r.Status != http.StatusBadGateway || r.Reason != "console-other-user" {
		t.Fatalf("got %d %q, want 502 console-other-user", r.Status, r.Reason)
	}
}

// TestProbeShowsAnotherUsersPortDown_S8: a console whose port another local user has taken (the
// console died without deregistering; the port was free for anyone) does not answer — every
// forward to it is 502 console-other-user and nothing is sent — so the listing shows it down, at
// its first probe and at every probe after, as for any console that does not answer. Before the
// fix the probe counted any TCP accept as an answer, and GET /fleet/v1/consoles, the index page,
// `fleet consoles` and `fleet doctor` ("N console(s), N up") showed it up.
func TestProbeShowsAnotherUsersPortDown_S8(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the squatter as another user")
	}
	d := startDoor(t)
	squatConsole(t, d, "squat")
	// The probe at registration.
	if c := listConsoles(t, d)["squat"]; c.Up || c.Health != HealthDown {
		t.Errorf("at registration a console whose port uid %d holds is listed health=%q up=%v; want down (it never answers)", otheruser.UID, c.Health, c.Up)
	}
	// Control: the hop refuses to talk to it.
	if r := d.Raw(doortest.ServeReq("GET", "/c/squat/")); r.Status != http.StatusBadGateway || r.Reason != "console-other-user" {
		t.Fatalf("forward: %d %q, want 502 console-other-user", r.Status, r.Reason)
	}
	// The periodic probe, which alone would bring it back up.
	d.srv.registry.Probe(context.Background(), probeTimeout)
	c := listConsoles(t, d)
	if c["squat"].Up || c["squat"].Health != HealthDown {
		t.Errorf("after a probe: health=%q up=%v; want down", c["squat"].Health, c["squat"].Up)
	}
	if !c["alpha"].Up {
		t.Errorf("alpha (this user's) is listed health=%q; want up", c["alpha"].Health)
	}
}
