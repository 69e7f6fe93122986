package supervisor

// The machine's owner in the browser (SPEC U4): the index's Devices and Pair a phone, and the
// owner's POSTs as raw requests over a real listener, as Tailscale Serve sends them for the owner,
// another login, a tagged node, a device's login, a local process, and through the TCP door while
// Tailscale SSH is on — with the register on disk, the access log and the echo console checked.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/pairing"
)

// ownerDoor is a door whose machine Alice owns, its direct-reach door open with a pairing
// password set, and two paired devices.
type ownerDoor struct {
	*door
	reachAddr     string
	phone, tablet pairing.Device
}

func startOwnerDoor(t *testing.T, setup ...func(f *doortest.FakeTailscaled)) *ownerDoor {
	t.Helper()
	tn := doortest.NewFakeTailscaled()
	tn.Owner = doortest.Alice
	for _, f := range setup {
		f(tn)
	}
	d := startDoorAt(t, t.TempDir()+"/state", tn)
	od := &ownerDoor{door: d, reachAddr: rawhttp.FreeLoopbackAddr(t).String()}
	writeReachProfile(t, d, od.reachAddr)
	d.srv.ReloadReach()
	if st := reachStatus(t, d); !st.Open {
		t.Fatalf("the reach door did not open: %+v", st)
	}
	if err := pairing.SetPassword(d.srv.reachDir(), []byte("correct horse")); err != nil {
		t.Fatal(err)
	}
	var err error
	if od.phone, _, err = pairing.RegisterDeviceFor(d.srv.reachDir(), "Ann's phone", access.Everything, time.Now()); err != nil {
		t.Fatal(err)
	}
	if od.tablet, _, err = pairing.RegisterDeviceFor(d.srv.reachDir(), "tablet", access.Everything, time.Now()); err != nil {
		t.Fatal(err)
	}
	return od
}

// serveReqAs is a request as Tailscale Serve sends it for the caller at ip, whose login Serve
// names (none for a tagged node: login ""), with extra lines and a form body.
func serveReqAs(method, path, ip, login, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\n",
		method, path, doortest.TSName, ip, doortest.TSName)
	if login != "" {
		fmt.Fprintf(&b, "Tailscale-User-Login: %s\n", login)
	}
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	if method == "POST" {
		fmt.Fprintf(&b, "Content-Length: %d\n", len(body))
	}
	b.WriteString("\n")
	return b.String() + body
}

const (
	ownOrigin = "Origin: https://" + doortest.TSName
	sameSite  = "Sec-Fetch-Site: same-origin"
	formType  = "Content-Type: application/x-www-form-urlencoded"
)

var tokenField = regexp.MustCompile(`name="token" value="([A-Za-z0-9_-]+)"`)

// pageToken is the token of the index as login (at ip) gets it, or "" when the page has none.
func (d *ownerDoor) pageToken(t *testing.T, ip, login string) string {
	t.Helper()
	r := d.Raw(serveReqAs("GET", "/", ip, login, ""))
	if r.Status != http.StatusOK {
		t.Fatalf("the index as %s: %d %q", login, r.Status, r.Reason)
	}
	if m := tokenField.FindStringSubmatch(r.Body); m != nil {
		return m[1]
	}
	return ""
}

// paired is which of the door's two devices the register on disk still holds.
func (d *ownerDoor) paired(t *testing.T) []string {
	t.Helper()
	devs, err := pairing.ListDevices(d.srv.reachDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, dev := range devs {
		out = append(out, dev.ID6)
	}
	return out
}

func form(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

func TestOwnerRevoke_U4(t *testing.T) {
	type row struct {
		name   string
		setup  func(f *doortest.FakeTailscaled)
		tcpFwd bool // Tailscale SSH on (S5e)
		// req builds the request from the door, Alice's page token and Bob's (made for him).
		req    func(d *ownerDoor, tok, bobTok string) string
		status int
		reason string
		login  string // the access-log line's login; "" when not verified
	}
	revoke := func(d *ownerDoor, tok string) string { return form("token", tok, "id6", d.phone.ID6) }
	rows := []row{
		{name: "U4 the owner revokes from the index", status: http.StatusSeeOther, login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 the owner, Origin alone", status: http.StatusSeeOther, login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), ownOrigin, formType)
			}},
		{name: "U4 the owner, Sec-Fetch-Site alone", status: http.StatusSeeOther, login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), sameSite, formType)
			}},
		{name: "U4 a non-owner with a token of his own", status: http.StatusForbidden, reason: "not-owner", login: doortest.Bob,
			req: func(d *ownerDoor, _, bobTok string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.BobIP, doortest.Bob, revoke(d, bobTok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 a non-owner with the owner's token", status: http.StatusForbidden, reason: "not-owner", login: doortest.Bob,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.BobIP, doortest.Bob, revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 the owner with another login's token", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, _, bobTok string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, bobTok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 without the token", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, _, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, form("id6", d.phone.ID6), ownOrigin, sameSite, formType)
			}},
		{name: "U4 the token in the query, not the form", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath+"?token="+tok, doortest.AliceIP, doortest.Alice, form("id6", d.phone.ID6), ownOrigin, sameSite, formType)
			}},
		{name: "U4 a token that is not one", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok[:len(tok)-2]+"AA"), ownOrigin, sameSite, formType)
			}},
		{name: "U4 a token older than its life", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, _, _ string) string {
				old := d.srv.ownerTokens.token(doortest.Alice, time.Now().Add(-ownerTokenTTL-time.Minute))
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, old), ownOrigin, sameSite, formType)
			}},
		{name: "U4 neither Sec-Fetch-Site nor Origin", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), formType)
			}},
		{name: "U4 Sec-Fetch-Site cross-site, no Origin", status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), "Sec-Fetch-Site: cross-site", formType)
			}},
		{name: "U4 S12 another origin", status: http.StatusForbidden, reason: "cross-origin",
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), "Origin: https://evil.example", formType)
			}},
		{name: "U4 S5c a tagged node", status: http.StatusForbidden, reason: "tagged-node",
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.TaggedIP, "", revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 S5d a device's login in Serve's header", status: http.StatusUnauthorized, reason: "identity-mismatch",
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, d.phone.Login(), revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 S5 a device's address, unknown to tailscaled", status: http.StatusUnauthorized, reason: "unverified",
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, "100.101.102.200", d.phone.Login(), revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 S5 not through Serve", status: http.StatusUnauthorized, reason: "unverified",
			req: func(d *ownerDoor, tok, _ string) string {
				body := revoke(d, tok)
				return fmt.Sprintf("POST %s HTTP/1.1\nHost: %s\n%s\n%s\nContent-Length: %d\n\n%s", OwnerRevokePath, d.Addr, sameSite, formType, len(body), body)
			}},
		{name: "U4 S5e through the TCP door with Tailscale SSH on", tcpFwd: true, status: http.StatusUnauthorized, reason: "tcp-forwardable",
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 a machine owned by its tags", setup: func(f *doortest.FakeTailscaled) { f.OwnerTagged = true },
			status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, _, _ string) string {
				tok := d.srv.ownerTokens.token(doortest.Alice, time.Now())
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 a status that names no owner", setup: func(f *doortest.FakeTailscaled) { f.Owner = "" },
			status: http.StatusForbidden, reason: "not-owner", login: doortest.Alice,
			req: func(d *ownerDoor, _, _ string) string {
				tok := d.srv.ownerTokens.token(doortest.Alice, time.Now())
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, revoke(d, tok), ownOrigin, sameSite, formType)
			}},
		{name: "U4 GET acts on nothing", status: http.StatusMethodNotAllowed, reason: "method",
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("GET", OwnerRevokePath, doortest.AliceIP, doortest.Alice, "", ownOrigin, sameSite)
			}},
		{name: "U4 a JSON body", status: http.StatusUnsupportedMediaType, reason: "owner-form", login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, `{"token":"`+tok+`"}`, ownOrigin, sameSite, "Content-Type: application/json")
			}},
		{name: "U4 an id6 that names no device", status: http.StatusNotFound, reason: "unknown-device", login: doortest.Alice,
			req: func(d *ownerDoor, tok, _ string) string {
				return serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, form("token", tok, "id6", "zzzzzz"), ownOrigin, sameSite, formType)
			}},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			var setup []func(*doortest.FakeTailscaled)
			if tc.setup != nil {
				setup = append(setup, tc.setup)
			}
			d := startOwnerDoor(t, setup...)
			tok := d.srv.ownerTokens.token(doortest.Alice, time.Now())
			if tc.setup == nil {
				tok = d.pageToken(t, doortest.AliceIP, doortest.Alice)
			}
			bobTok := d.srv.ownerTokens.token(doortest.Bob, time.Now())
			if tc.tcpFwd {
				d.setTailscaled(t, func(f *doortest.FakeTailscaled) { f.RunSSH = true })
			}
			before, logsBefore := d.Alpha.Count(), len(d.Logs.Events(doortest.EventRejected))
			req := tc.req(d, tok, bobTok)
			r := d.Raw(req)
			if r.Status != tc.status || r.Reason != tc.reason {
				t.Fatalf("got %d %q, want %d %q (body %q)", r.Status, r.Reason, tc.status, tc.reason, r.Body)
			}
			want := []string{d.phone.ID6, d.tablet.ID6}
			if tc.status == http.StatusSeeOther {
				want = []string{d.tablet.ID6}
				if loc := r.Header.Get("Location"); loc != "/#devices" {
					t.Errorf("Location %q, want the index's devices", loc)
				}
			}
			if got := d.paired(t); !slices.Equal(got, want) {
				t.Errorf("the register holds %v, want %v", got, want)
			}
			if n := d.Alpha.Count(); n != before {
				t.Errorf("the console saw %d request(s)", n-before)
			}
			rejected := d.Logs.Events(doortest.EventRejected)[logsBefore:]
			if tc.reason != "" && (len(rejected) != 1 || rejected[0]["reason"] != tc.reason) {
				t.Errorf("want one fleet.rejected line with reason %q, got %v", tc.reason, rejected)
			}
			// No secret in the log: neither the token nor the form.
			if all := d.Logs.String(); strings.Contains(all, tok) || strings.Contains(all, bobTok) || strings.Contains(all, "token=") {
				t.Errorf("a token reached the log:\n%s", all)
			}
			if tc.reason == "cross-origin" {
				return // refused by the door before the owner's page, naming nobody (G3)
			}
			lines := doortest.AccessLog(t, d.accessLogPath(), 1)
			var mine []string
			for _, l := range lines {
				if l.Path == OwnerRevokePath {
					mine = append(mine, fmt.Sprintf("%s %s %d %s", l.Login, l.Method, l.Status, l.Reason))
				}
			}
			wantLine := fmt.Sprintf("%s %s %d %s", tc.login, strings.Fields(req)[0], tc.status, tc.reason)
			if len(mine) != 1 || mine[0] != wantLine {
				t.Errorf("access log %v, want the one line %q", mine, wantLine)
			}
		})
	}
}

// TestOwnerFreshWhoIs_U4: each owner POST asks tailscaled's WhoIs afresh, though the index's
// answer for the same address is cached (S5: no cache for these).
func TestOwnerFreshWhoIs_U4(t *testing.T) {
	d := startOwnerDoor(t)
	tok := d.pageToken(t, doortest.AliceIP, doortest.Alice)
	count := func() int {
		n := 0
		for _, a := range d.tailnet.WhoisAsked() {
			if a == doortest.AliceIP {
				n++
			}
		}
		return n
	}
	before := count()
	d.Raw(serveReqAs("GET", "/", doortest.AliceIP, doortest.Alice, "")) // cached
	if count() != before {
		t.Fatalf("the index asked WhoIs again within the cache's life")
	}
	r := d.Raw(serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Alice, form("token", tok, "id6", d.phone.ID6), ownOrigin, sameSite, formType))
	if r.Status != http.StatusSeeOther || count() != before+1 {
		t.Fatalf("the owner's POST: %d, WhoIs asked %d time(s) for it; want 303 and one fresh WhoIs", r.Status, count()-before)
	}
	// A login that tailscaled stops naming at once cannot act, whatever is cached.
	d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Peers[doortest.AliceIP] = doortest.FakePeer{Login: doortest.Bob} })
	r = d.Raw(serveReqAs("POST", OwnerRevokePath, doortest.AliceIP, doortest.Bob, form("token", tok, "id6", d.tablet.ID6), ownOrigin, sameSite, formType))
	if r.Status != http.StatusForbidden || r.Reason != "not-owner" || !slices.Contains(d.paired(t), d.tablet.ID6) {
		t.Errorf("after the address changed hands: %d %q, want 403 not-owner and nothing revoked", r.Status, r.Reason)
	}
}

// TestOwnerPathsOnly_U4_S8: only the owner's two POSTs answer through Serve under /fleet/; the
// rest of /fleet/ stays local only (S8).
func TestOwnerPathsOnly_U4_S8(t *testing.T) {
	d := startOwnerDoor(t)
	tok := d.pageToken(t, doortest.AliceIP, doortest.Alice)
	for _, target := range []string{"/fleet/v1/consoles", "/fleet/v1/reach", "/fleet/owner/", "/fleet/owner/devices", "/fleet/owner/revoke/", "/fleet/owner/Revoke", "/fleet/owner/%72evoke"} {
		r := d.Raw(serveReqAs("POST", target, doortest.AliceIP, doortest.Alice, form("token", tok, "id6", d.phone.ID6), ownOrigin, sameSite, formType))
		if r.Status != http.StatusForbidden || r.Reason != "local-only" {
			t.Errorf("POST %s through Serve: %d %q, want 403 local-only", target, r.Status, r.Reason)
		}
	}
	if got := d.paired(t); len(got) != 2 {
		t.Errorf("the register holds %v, want both devices", got)
	}
}

// TestOwnerThroughReachDoor_U4_R1: a paired device reaches no owner's POST: on the direct-reach
// door everything under /fleet/ is 403 reach-settings (R1), its cookie or not.
func TestOwnerThroughReachDoor_U4_R1(t *testing.T) {
	d := startOwnerDoor(t)
	_, cred, err := pairing.RegisterDeviceFor(d.srv.reachDir(), "third", access.Everything, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok := d.srv.ownerTokens.token(doortest.Alice, time.Now())
	body := form("token", tok, "id6", d.phone.ID6)
	st, reason := reachPostBody(t, d.reachAddr, OwnerRevokePath, body, "Cookie: "+pairing.CookieName+"="+cred,
		"Origin: https://"+d.reachAddr, sameSite, formType)
	if st != http.StatusForbidden || reason != "reach-settings" {
		t.Errorf("a device's POST %s on the reach door: %d, want 403 reach-settings", OwnerRevokePath, st)
	}
	if got := d.paired(t); len(got) != 3 {
		t.Errorf("the register holds %v, want all three devices", got)
	}
}

func TestOwnerIndex_U4(t *testing.T) {
	d := startOwnerDoor(t)
	r := d.Raw(serveReqAs("GET", "/", doortest.AliceIP, doortest.Alice, ""))
	for _, want := range []string{`id="devices"`, "Ann&#39;s phone", d.phone.ID6, d.tablet.ID6, `action="/fleet/owner/revoke"`,
		`name="id6" value="` + d.phone.ID6 + `"`, "last seen", `id="pair"`, `action="/fleet/owner/pair"`, `name="consoles" value="*"`, `name="name"`} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("the owner's index lacks %q", want)
		}
	}
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self'") || strings.Contains(csp, "script-src 'unsafe") {
		t.Errorf("the owner's index policy %q: want its forms posting to this door", csp)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q: the page holds a token", r.Header.Get("Cache-Control"))
	}
	// Anyone else sees none of it, nor a token.
	b := d.Raw(serveReqAs("GET", "/", doortest.BobIP, doortest.Bob, ""))
	for _, not := range []string{`id="devices"`, d.phone.ID6, "/fleet/owner/", `name="token"`} {
		if strings.Contains(b.Body, not) {
			t.Errorf("another login's index shows %q", not)
		}
	}
	if csp := b.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'none'") {
		t.Errorf("another login's index policy %q: want no form", csp)
	}
	// The door closed: the devices stay, Pair a phone says why it cannot.
	writeReachProfile(t, d.door, "")
	d.srv.ReloadReach()
	r = d.Raw(serveReqAs("GET", "/", doortest.AliceIP, doortest.Alice, ""))
	if !strings.Contains(r.Body, d.phone.ID6) || strings.Contains(r.Body, `action="/fleet/owner/pair"`) || !strings.Contains(r.Body, "door is closed") {
		t.Errorf("the door closed: want the devices, no pairing form, and why:\n%s", r.Body)
	}
}

var codeShape = regexp.MustCompile(`<span class="code">([A-Z]{4}-[A-Z]{4})</span>`)

func TestOwnerPair_U4(t *testing.T) {
	d := startOwnerDoor(t)
	tok := d.pageToken(t, doortest.AliceIP, doortest.Alice)
	r := d.Raw(serveReqAs("POST", OwnerPairPath, doortest.AliceIP, doortest.Alice,
		form("token", tok, "name", "Ann's tablet", "consoles", "alpha, build-*"), ownOrigin, sameSite, formType))
	if r.Status != http.StatusOK {
		t.Fatalf("pair: %d %q %s", r.Status, r.Reason, r.Body)
	}
	m := codeShape.FindStringSubmatch(r.Body)
	if m == nil {
		t.Fatalf("no code on the page:\n%s", r.Body)
	}
	code := m[1]
	st := reachStatus(t, d.door)
	for _, want := range []string{"https://" + d.reachAddr + "/ca.crt", "https://" + d.reachAddr + "/pair#" + code, st.Fingerprint,
		"Ann&#39;s tablet", "alpha,build-*", "1. Trust the door", "2. Only then open the pairing link"} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("the steps lack %q", want)
		}
	}
	if n := strings.Count(r.Body, `<svg `); n != 2 {
		t.Errorf("%d QR codes, want two (the root's link, then the pairing link)", n)
	}
	if strings.Index(r.Body, "/ca.crt") > strings.Index(r.Body, "/pair#") {
		t.Error("the pairing link comes before the root: trust first, then pair")
	}
	if r.Header.Get("Cache-Control") != "no-store" || !strings.Contains(r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("the steps' headers %v: want no-store and no framing", r.Header)
	}
	// The code pairs as fleet reach pair's would: once, for the name and consoles given.
	issued, err := pairing.RedeemCode(d.srv.reachDir(), code, time.Now, func() (bool, error) { return true, nil })
	if err != nil || issued.Name != "Ann's tablet" || issued.Consoles.String() != "alpha,build-*" {
		t.Errorf("redeeming the code: %+v %v", issued, err)
	}
	if all := d.Logs.String(); strings.Contains(all, code) || strings.Contains(all, strings.ReplaceAll(code, "-", "")) || strings.Contains(all, tok) {
		t.Errorf("the code or the token reached the log:\n%s", all)
	}
	lines := doortest.AccessLog(t, d.accessLogPath(), 1)
	if l := lines[len(lines)-1]; l.Path != OwnerPairPath || l.Login != doortest.Alice || l.Status != 200 {
		t.Errorf("access log %+v, want the owner's pairing", l)
	}

	for _, tc := range []struct {
		name   string
		prep   func()
		body   string
		status int
		reason string
	}{
		{"U4 consoles that are no pattern", nil, form("token", tok, "consoles", "Alpha!"), http.StatusBadRequest, "owner-form"},
		{"U4 door closed", func() { writeReachProfile(t, d.door, ""); d.srv.ReloadReach() }, form("token", tok), http.StatusServiceUnavailable, "pairing-unavailable"},
	} {
		if tc.prep != nil {
			tc.prep()
		}
		r := d.Raw(serveReqAs("POST", OwnerPairPath, doortest.AliceIP, doortest.Alice, tc.body, ownOrigin, sameSite, formType))
		if r.Status != tc.status || r.Reason != tc.reason || codeShape.MatchString(r.Body) {
			t.Errorf("%s: %d %q, want %d %q and no code", tc.name, r.Status, r.Reason, tc.status, tc.reason)
		}
	}
}

// TestOwnerPairNoPassword_U4: no code is issued before a pairing password is set.
func TestOwnerPairNoPassword_U4(t *testing.T) {
	tn := doortest.NewFakeTailscaled()
	tn.Owner = doortest.Alice
	d := startDoorAt(t, t.TempDir()+"/state", tn)
	writeReachProfile(t, d, rawhttp.FreeLoopbackAddr(t).String())
	d.srv.ReloadReach()
	tok := (&ownerDoor{door: d}).pageToken(t, doortest.AliceIP, doortest.Alice)
	r := d.Raw(serveReqAs("POST", OwnerPairPath, doortest.AliceIP, doortest.Alice, form("token", tok), ownOrigin, sameSite, formType))
	if r.Status != http.StatusServiceUnavailable || r.Reason != "pairing-unavailable" || !strings.Contains(r.Body, "fleet reach password") {
		t.Errorf("no password: %d %q %s", r.Status, r.Reason, r.Body)
	}
}

// reachPostBody sends one POST with body over TLS to the reach door at addr and returns its
// status and X-Fleet-Reason.
func reachPostBody(t *testing.T, addr, target, body string, extra ...string) (int, string) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n%s",
		target, addr, strings.Join(append(extra, ""), "\r\n"), len(body), body))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Fleet-Reason")
}
