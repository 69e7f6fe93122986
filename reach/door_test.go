package reach

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/phase-console/fleet/internal/doorrules"
	"github.com/phase-console/fleet/pairing"
)

// TestHostAdmission_R5: the door answers for its listen address only, with or without the port,
// and an SNI must name the Host's address; everything else is 421 host, before any route.
func TestHostAdmission_R5(t *testing.T) {
	d := startTestDoor(t)
	ip, port := d.door.Addr().Addr().String(), d.door.Addr().Port()
	rows := []struct {
		name, host, sni string
		status          int
	}{
		{"listen IP and port", d.Addr, "", 200},
		{"listen IP without port", ip, "", 200},
		{"listen IP, other port", ip + ":1", "", 421},
		{"other IP", "127.0.0.2:" + itoa(port), "", 421},
		{"a name", "localhost:" + itoa(port), "", 421},
		{"a name without port", "example.com", "", 421},
		{"IPv4 in brackets", "[" + ip + "]", "", 421},
		{"IPv4-mapped IPv6", "[::ffff:" + ip + "]:" + itoa(port), "", 421},
		{"empty Host", "", "", 421},
		{"SNI is a name", d.Addr, "example.com", 421},
		{"the IP as server name (Go sends no SNI for it)", d.Addr, ip, 200},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.clock.Advance(Window) // each row on its own: no failure of another row counts
			resp := d.rawSNI(row.sni, reqHost("GET", "/ca.crt", row.host))
			if resp.Status != row.status {
				t.Fatalf("got %d %q, want %d", resp.Status, resp.Reason, row.status)
			}
			if row.status == 421 && resp.Reason != "host" {
				t.Errorf("reason %q, want host", resp.Reason)
			}
		})
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestLimiterThroughTheDoor_R6: ten refused Hosts from one source, then that source is 429 with
// the exact Retry-After, whatever X-Forwarded-For claims, until the window lets it through.
func TestLimiterThroughTheDoor_R6(t *testing.T) {
	d := startTestDoor(t)
	for i := 0; i < SourceLimit; i++ {
		if r := d.RawAs(reqHost("GET", "/ca.crt", "evil.example")); r.Status != 421 {
			t.Fatalf("bad Host %d: %d, want 421", i+1, r.Status)
		}
	}
	r := d.RawAs(d.req("GET", "/ca.crt"))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "600" || r.Reason != "rate-limited" {
		t.Fatalf("after ten failures: %d %q Retry-After %q, want 429 rate-limited 600", r.Status, r.Reason, r.Header.Get("Retry-After"))
	}
	d.clock.Advance(3 * 60e9)
	r = d.RawAs(d.req("GET", "/ca.crt", "X-Forwarded-For: 192.0.2.7", "X-Real-Ip: 192.0.2.7"))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "420" {
		t.Fatalf("three minutes on, claiming another address: %d Retry-After %q, want 429 420", r.Status, r.Header.Get("Retry-After"))
	}
	d.clock.Advance(7 * 60e9)
	if r := d.RawAs(d.req("GET", "/ca.crt")); r.Status != 200 {
		t.Fatalf("after the window: %d, want 200", r.Status)
	}
}

// TestOverallLimitSparesDevices_R6: fifty failures from five sources close the door to every
// stranger, and a paired device still gets in, from a source of its own or from one of the
// sources that failed: a request with a valid credential is held back by neither count.
func TestOverallLimitSparesDevices_R6(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	for i := 0; i < OverallLimit; i++ {
		src := "127.0.0." + strconv.Itoa(2+i/SourceLimit)
		if r := d.rawFrom(src, reqHost("GET", "/ca.crt", "evil.example")); r.Status != 421 {
			t.Fatalf("bad Host %d from %s: %d, want 421", i+1, src, r.Status)
		}
	}
	if r := d.rawFrom("127.0.0.20", d.req("GET", "/pair")); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a stranger from a fresh source: %d, want 429", r.Status)
	}
	if r := d.rawFrom("127.0.0.21", d.req("GET", "/c/alpha/x", cookie)); r.Status != 200 {
		t.Fatalf("a paired device from a fresh source: %d %q, want 200", r.Status, r.Reason)
	}
	if r := d.rawFrom("127.0.0.2", d.req("GET", "/c/alpha/x", cookie)); r.Status != 200 {
		t.Fatalf("a paired device from a source that failed ten times: %d %q, want 200", r.Status, r.Reason)
	}
}

// TestPairingFailuresCount_R6: the pairing pages report a wrong code or password with Failure;
// the eleventh try from that source is 429 before the pages are asked (no password work).
func TestPairingFailuresCount_R6(t *testing.T) {
	var asked atomic.Int32
	d := startTestDoor(t, func(c *Config) {
		c.PairingFor = func(door *Door) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				door.Failure(r) // a wrong password
				http.Error(w, "wrong code or password", http.StatusForbidden)
			})
		}
	})
	for i := 0; i < SourceLimit; i++ {
		if r := d.RawAs(d.req("POST", "/pair", "Content-Length: 0")); r.Status != http.StatusForbidden {
			t.Fatalf("try %d: %d", i+1, r.Status)
		}
	}
	if r := d.RawAs(d.req("POST", "/pair", "Content-Length: 0")); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "600" {
		t.Fatalf("eleventh try: %d Retry-After %q, want 429 600", r.Status, r.Header.Get("Retry-After"))
	}
	if n := asked.Load(); n != SourceLimit {
		t.Fatalf("the pairing pages were asked %d times, want %d", n, SourceLimit)
	}
}

// TestUnknownDeviceIsAFailure_R6: a device cookie that names no device is a failure on a
// console path (R10), and the request goes on as unpaired.
func TestUnknownDeviceIsAFailure_R6(t *testing.T) {
	d := startTestDoor(t)
	bogus := "Cookie: " + pairing.CookieName + "=" + strings.Repeat("A", 43)
	for i := 0; i < SourceLimit; i++ {
		if r := d.RawAs(d.req("GET", "/c/alpha/", bogus)); r.Status != http.StatusSeeOther {
			t.Fatalf("request %d: %d, want 303", i+1, r.Status)
		}
	}
	if r := d.RawAs(d.req("GET", "/pair")); r.Status != http.StatusTooManyRequests {
		t.Fatalf("after ten unknown credentials: %d, want 429", r.Status)
	}
	if n := d.Alpha.Count(); n != 0 {
		t.Fatalf("the console saw %d requests", n)
	}
}

// TestUnpairedGetsOnlyPairing_R7: an unpaired caller is sent to /pair for everything but the
// pairing pages and /ca.crt; nothing reaches a console.
func TestUnpairedGetsOnlyPairing_R7(t *testing.T) {
	d := startTestDoor(t)
	for _, target := range []string{"/c/x/", "/c/alpha/", "/c/alpha/hooks", "/fleet/", "/fleet/v1/consoles", "/", "/C/ALPHA/"} {
		r := d.RawAs(d.req("GET", target))
		if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/pair" {
			t.Errorf("GET %s: %d Location %q, want 303 /pair", target, r.Status, r.Header.Get("Location"))
		}
	}
	for _, target := range []string{"/pair/../c/alpha/", "/pair/%2e%2e/c/alpha/", "/pair//x"} {
		if r := d.RawAs(d.req("GET", target)); r.Status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404: the pairing pages get canonical paths only", target, r.Status)
		}
	}
	if r := d.RawAs(d.req("POST", "/c/alpha/x", "Content-Length: 0")); r.Status != http.StatusSeeOther {
		t.Errorf("POST /c/alpha/x: %d, want 303", r.Status)
	}
	for _, m := range []string{"GET", "POST"} {
		if r := d.RawAs(d.req(m, "/pair", "Content-Length: 0")); r.Status != 200 || !strings.Contains(r.Body, "not set up") {
			t.Errorf("%s /pair: %d, want the built-in page", m, r.Status)
		}
	}
	r := d.RawAs(d.req("GET", "/ca.crt"))
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/x-x509-ca-cert" || r.Body != string(d.door.RootPEM()) {
		t.Errorf("GET /ca.crt: %d %q, want the root", r.Status, r.Header.Get("Content-Type"))
	}
	if n := d.Alpha.Count(); n != 0 {
		t.Fatalf("the console saw %d requests", n)
	}
}

// TestPairingHandler_R7: the door's pairing pages are Config.Pairing's, for /pair and below.
func TestPairingHandler_R7(t *testing.T) {
	d := startTestDoor(t, func(c *Config) {
		c.Pairing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pairing:"+r.URL.Path) })
	})
	for _, target := range []string{"/pair", "/pair/app.css"} {
		if r := d.RawAs(d.req("GET", target)); r.Status != 200 || r.Body != "pairing:"+target {
			t.Errorf("GET %s: %d %q", target, r.Status, r.Body)
		}
	}
}

// TestPairedDevice_R9: a paired device is asserted as device:<slug>#<id6> from its TCP peer,
// without its cookie; hooks and fleet's settings are refused; a forged assertion is refused.
func TestPairedDevice_R9(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("Ana's Phone")
	r := d.RawAs(d.req("GET", "/c/alpha/x", cookie+"; theme=dark", "Cookie: lang=en", "X-Forwarded-For: 192.0.2.9"))
	if r.Status != 200 {
		t.Fatalf("GET /c/alpha/x: %d %q", r.Status, r.Reason)
	}
	n := d.Alpha.Count()
	got, _ := d.Alpha.Last()
	if n != 1 || got.Path != "/x" {
		t.Fatalf("the console saw %d requests, last %q", n, got.Path)
	}
	if login := got.Header.Get("X-Phase-Console-Fleet-Login"); login != dev.Login() || !strings.HasPrefix(login, "device:ana-s-phone#") {
		t.Errorf("the console saw login %q, want %q", login, dev.Login())
	}
	if xff := got.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.0.1" {
		t.Errorf("the console saw X-Forwarded-For %q, want the TCP peer", xff)
	}
	cookies := strings.Join(got.Header.Values("Cookie"), "; ")
	if strings.Contains(cookies, pairing.CookieName) || !strings.Contains(cookies, "theme=dark") || !strings.Contains(cookies, "lang=en") {
		t.Errorf("the console saw Cookie %q: want the others, never the device's", cookies)
	}

	refusals := []struct {
		name, method, target string
		extra                []string
		status               int
		reason               string
	}{
		{"S7 hooks", "GET", "/c/alpha/hooks", nil, 403, "hooks"},
		{"R1 fleet API", "GET", "/fleet/v1/consoles", nil, 403, "reach-settings"},
		{"R1 fleet", "POST", "/fleet", []string{"Content-Length: 0"}, 403, "reach-settings"},
		{"S3 forged device login", "GET", "/c/alpha/x", []string{"X-Phase-Console-Fleet-Login: device:other#aaaaaa"}, 400, "assertion-sent"},
		{"unknown console", "GET", "/c/nobody/", nil, 404, "unknown-console"},
	}
	for _, row := range refusals {
		before := d.Alpha.Count()
		r := d.RawAs(d.req(row.method, row.target, append([]string{cookie}, row.extra...)...))
		if r.Status != row.status || r.Reason != row.reason {
			t.Errorf("%s: %d %q, want %d %q", row.name, r.Status, r.Reason, row.status, row.reason)
		}
		if after := d.Alpha.Count(); after != before {
			t.Errorf("%s: forwarded", row.name)
		}
	}

	r = d.RawAs(d.req("GET", "/", cookie))
	if r.Status != 200 || !strings.Contains(r.Body, `href="/c/alpha/"`) || strings.Contains(r.Body, d.Alpha.Addr()) {
		t.Errorf("the index: %d %q", r.Status, r.Body)
	}
}

// TestDeviceIndexRefusesFraming_S12: a device's cookie is ambient like a tailnet identity
// (S12), so the device's index, which shows its login, and the door's refusal pages say that no
// site may frame them (X-Frame-Options DENY, CSP frame-ancestors 'none'), load nothing but
// fleet's own stylesheet (style-src 'self', SPEC U1) and run no script (default-src 'none'), are
// not sniffed, and send their Referer to the door only. A
// frame that another site opens is not even served (R6b: 403 cross-origin), and its refusal
// says the same.
func TestDeviceIndexRefusesFraming_S12(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("phone")
	framed := []string{cookie, "Sec-Fetch-Site: cross-site", "Sec-Fetch-Dest: iframe", "Sec-Fetch-Mode: navigate"}
	for _, row := range []struct {
		name, target string
		extra        []string
		status       int
	}{
		{"the device's index", "/", []string{cookie}, 200},
		{"a refusal page", "/nowhere", []string{cookie}, 404},
		{"R6b the index in another site's frame", "/", framed, 403},
	} {
		r := d.RawAs(d.req("GET", row.target, row.extra...))
		if r.Status != row.status {
			t.Errorf("%s: %d %q, want %d", row.name, r.Status, r.Reason, row.status)
		}
		if row.status == 200 && (!strings.Contains(r.Body, dev.Login()) || strings.Contains(r.Body, "<style") || strings.Contains(r.Body, "<script")) {
			t.Errorf("%s: %q; want the device's login, and no style or script for the policy to allow", row.name, r.Body)
		}
		if row.status == 403 && strings.Contains(r.Body, dev.Login()) {
			t.Errorf("%s: the refusal shows the device's login", row.name)
		}
		policy := "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
		if row.status == 200 {
			policy = IndexPolicy // U2, U3: its one form, Forget this device, posts to the door itself
		}
		for k, v := range map[string]string{
			"Content-Security-Policy": policy,
			"X-Frame-Options":         "DENY",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "same-origin",
		} {
			if got := r.Header.Get(k); got != v {
				t.Errorf("%s: %s %q, want %q", row.name, k, got, v)
			}
		}
	}
}

// TestFleetPathsDecodedForDevice_R1: on the door, everything under /fleet/ answers a paired
// device 403 reach-settings, judged on the decoded path as S7 judges a console path: a
// percent-encoded letter, another case or the absolute form of the same path is /fleet too (the
// door judged the raw request-target's text, and answered those 404). Nothing is forwarded.
func TestFleetPathsDecodedForDevice_R1(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	for _, target := range []string{
		"/fleet",
		"/fleet/v1/reach",
		"/%66leet/v1/reach",
		"/fl%65et/v1/consoles",
		"/FLEET/v1/reach",
		"/fleet?x=1",
		"https://" + d.Addr + "/fleet/v1/reach",
	} {
		r := d.RawAs(d.req("GET", target, cookie))
		if r.Status != http.StatusForbidden || r.Reason != "reach-settings" {
			t.Errorf("R1 GET %s as a device: %d %s, want 403 reach-settings", target, r.Status, r.Reason)
		}
	}
	for _, target := range []string{"/fleetx", "/x/fleet/"} {
		if r := d.RawAs(d.req("GET", target, cookie)); r.Status != http.StatusNotFound {
			t.Errorf("GET %s as a device: %d %s, want 404: not under /fleet", target, r.Status, r.Reason)
		}
	}
	if n := d.Alpha.Count(); n != 0 {
		t.Errorf("the console saw %d requests", n)
	}
}

// TestSharedRules_S3_S4_S7_S9_S12: the table every door must judge alike, through this door's
// TLS listener as a paired device.
func TestSharedRules_S3_S4_S7_S9_S12(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("rules")
	doorrules.Run(t, rulesDoor{d, cookie})
}

type rulesDoor struct {
	d      *testDoor
	cookie string
}

func (r rulesDoor) Request(method, target string, extra ...string) string {
	return r.d.req(method, target, append([]string{r.cookie}, extra...)...)
}

func (r rulesDoor) Send(t *testing.T, raw string) (int, string) {
	r.d.clock.Advance(Window) // no row may be held back by another's failures
	resp := r.d.RawAs(raw)
	return resp.Status, resp.Reason
}

func (r rulesDoor) Received() (int, string, http.Header) { return r.d.Alpha.Received() }

// TestRevocationClosesLiveConnections_R8: revoking a device ends its WebSocket and its
// server-sent events at once, and its next request is unpaired.
func TestRevocationClosesLiveConnections_R8(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("phone")
	_, otherCookie := d.pair("tablet")

	ws := func(cookie string) (net.Conn, *bufio.Reader) {
		conn, br, resp := d.Open(d.req("GET", "/c/alpha/ws", cookie, "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %d", resp.StatusCode)
		}
		io.WriteString(conn, "hi\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo:hi\n" {
			t.Fatalf("through the WebSocket: %q %v", line, err)
		}
		return conn, br
	}
	wsConn, wsBr := ws(cookie)
	defer wsConn.Close()
	otherConn, otherBr := ws(otherCookie)
	defer otherConn.Close()

	sseConn, sseBr, resp := d.Open(d.req("GET", "/c/alpha/sse", cookie))
	defer sseConn.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sse: %d", resp.StatusCode)
	}
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "data: hello\n" {
		t.Fatalf("sse: %q %v", line, err)
	}
	_ = sseBr

	if err := d.register.Revoke(dev.ID6); err != nil {
		t.Fatal(err)
	}
	if _, err := wsBr.ReadString('\n'); !ended(err) {
		t.Errorf("the revoked device's WebSocket: %v, want closed", err)
	}
	if _, err := io.ReadAll(body); !ended(err) && err != nil {
		t.Errorf("the revoked device's stream: %v, want ended", err)
	}
	// The other device is untouched.
	io.WriteString(otherConn, "still\n")
	if line, err := otherBr.ReadString('\n'); err != nil || line != "echo:still\n" {
		t.Errorf("the other device's WebSocket: %q %v", line, err)
	}
	if r := d.RawAs(d.req("GET", "/c/alpha/", cookie)); r.Status != http.StatusSeeOther {
		t.Errorf("after revocation: %d, want 303 to /pair", r.Status)
	}
}

// ended reports whether err is the end of a connection, not the test's guard deadline.
func ended(err error) bool {
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestListensOnExactlyItsAddress_R2: the door binds the profile's address and no other.
func TestListensOnExactlyItsAddress_R2(t *testing.T) {
	d := startTestDoor(t)
	other := "127.0.0.2:" + itoa(d.door.Addr().Port())
	if c, err := net.Dial("tcp", other); err == nil {
		c.Close()
		t.Fatalf("%s answers: the door must listen on %s only", other, d.Addr)
	}
}

// TestCloseEndsDevicesConnections_R1: closing the door (the profile closed or moved it) ends its
// devices' WebSockets and streams too, not only its listener.
func TestCloseEndsDevicesConnections_R1(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	conn, br, resp := d.Open(d.req("GET", "/c/alpha/ws", cookie, "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
	defer conn.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	sseConn, _, sse := d.Open(d.req("GET", "/c/alpha/sse", cookie))
	defer sseConn.Close()
	body := bufio.NewReader(sse.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "data: hello\n" {
		t.Fatalf("sse: %q %v", line, err)
	}
	d.door.Close()
	if _, err := br.ReadString('\n'); !ended(err) {
		t.Errorf("the WebSocket after Close: %v, want closed", err)
	}
	if _, err := io.ReadAll(body); err != nil && !ended(err) {
		t.Errorf("the stream after Close: %v, want ended", err)
	}
}

// TestHTTP2_R5_R9: over HTTP/2, as a phone's browser speaks, the Host (:authority) is admitted
// the same way and a paired device reaches its console as itself.
func TestHTTP2_R5_R9(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("phone")
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: d.pool},
		ForceAttemptHTTP2: true,
	}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	get := func(host string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+d.Addr+"/c/alpha/x", nil)
		req.Host = host
		for _, h := range header {
			k, v, _ := strings.Cut(h, ": ")
			req.Header.Add(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get("evil.example", cookie); resp.StatusCode != 421 || resp.ProtoMajor != 2 {
		t.Errorf("another :authority: %d %s, want 421 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	if resp := get(d.Addr); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("unpaired: %d, want 303", resp.StatusCode)
	}
	resp := get(d.Addr, cookie)
	got, _ := d.Alpha.Last()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || got.Header.Get("X-Phase-Console-Fleet-Login") != dev.Login() {
		t.Errorf("paired: %d %s, login %q", resp.StatusCode, resp.Proto, got.Header.Get("X-Phase-Console-Fleet-Login"))
	}
	if strings.Contains(strings.Join(got.Header.Values("Cookie"), ";"), pairing.CookieName) {
		t.Error("the device cookie reached the console over HTTP/2")
	}
}

// TestDeviceRefusalsAreNotFailures_R6: a paired device's own refusals — S3, S7 bad-path, S12,
// 403 hooks, 403 reach-settings — are never failures: a paired device guesses nothing, and a page
// it loads must not lock it out.
func TestDeviceRefusalsAreNotFailures_R6(t *testing.T) {
	rows := []struct {
		name, target string
		extra        []string
		status       int
	}{
		{"S3 assertion-sent", "/c/alpha/x", []string{"X-Phase-Console-Fleet: x"}, 400},
		{"S7 bad-path", "/c/alpha/a%2Fb", nil, 400},
		{"S12 cross-origin", "/c/alpha/x", []string{"Origin: https://evil.example"}, 403},
		{"S7 hooks", "/c/alpha/hooks", nil, 403},
		{"R1 reach-settings", "/fleet/v1/consoles", nil, 403},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := startTestDoor(t)
			_, cookie := d.pair("phone")
			for i := 0; i < SourceLimit; i++ {
				if r := d.RawAs(d.req("GET", row.target, append([]string{cookie}, row.extra...)...)); r.Status != row.status {
					t.Fatalf("request %d: %d %q, want %d", i+1, r.Status, r.Reason, row.status)
				}
			}
			r := d.RawAs(d.req("GET", "/c/alpha/x", cookie))
			if r.Status != http.StatusOK {
				t.Fatalf("after ten: %d %q, want 200", r.Status, r.Reason)
			}
		})
	}
}

// TestDeviceSeesThisMachineOnly_G2: a paired device is not on the tailnet, so the door has no
// exception to S12 for it: its index has no peer section and no script (above), and a page of
// another machine that asks the door for the index's JSON is 403 cross-origin, with no
// Access-Control-Allow-Origin.
func TestDeviceSeesThisMachineOnly_G2(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	r := d.RawAs(d.req("GET", "/", cookie, "Accept: application/json", "Origin: https://box.tail1234.ts.net"))
	if r.Status != 403 || r.Reason != "cross-origin" || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a peer's read on the door: %d %q, ACAO %q", r.Status, r.Reason, r.Header.Get("Access-Control-Allow-Origin"))
	}
	r = d.RawAs(d.req("GET", "/", cookie))
	if r.Status != 200 || strings.Contains(r.Body, `class="peer"`) || strings.Contains(r.Body, "<script") {
		t.Fatalf("the device's index: %d %q", r.Status, r.Body)
	}
}
