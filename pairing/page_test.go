package pairing

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	testPassword = "correct horse battery"
	testOrigin   = "https://192.168.1.20:7443"
	testFP       = "AB12 CD34 EF56 7890 AB12 CD34 EF56 7890 AB12 CD34 EF56 7890 AB12 CD34 EF56 7890"
)

// pageEnv is a pairing Handler on a real listener (httptest.Server), with a fake clock, a log
// and a failure counter, and a record of every answer. At the end of the test it checks that no
// secret given to it (codes, passwords) appears in an answer or a log line (SPEC S11).
type pageEnv struct {
	t        *testing.T
	dir      string
	reg      *Register
	srv      *httptest.Server
	client   *http.Client
	failures atomic.Int32

	mu      sync.Mutex
	now     time.Time
	logs    bytes.Buffer
	seen    bytes.Buffer // every answer, head and body
	secrets []string
}

func newPageEnv(t *testing.T) *pageEnv {
	t.Helper()
	cheapScrypt(t)
	e := &pageEnv{t: t, dir: reachDir(t), now: t0}
	if err := SetPassword(e.dir, []byte(testPassword)); err != nil {
		t.Fatal(err)
	}
	reg, err := OpenRegister(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.WaitWrites)
	e.reg = reg
	e.secret(testPassword)
	h := NewHandler(HandlerConfig{
		Dir:         e.dir,
		Register:    reg,
		Fingerprint: testFP,
		Origin:      testOrigin,
		Logger:      slog.New(slog.NewJSONHandler(lockedWriter{&e.mu, &e.logs}, nil)),
		Now:         e.clock,
		OnFailure:   func(*http.Request) { e.failures.Add(1) },
	})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	e.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(e.checkSecrets)
	return e
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (e *pageEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *pageEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

// secret records s as something no answer or log line may contain.
func (e *pageEnv) secret(s string) {
	e.mu.Lock()
	e.secrets = append(e.secrets, s)
	e.mu.Unlock()
}

// issue issues a code and records it, in every spelling, as a secret.
func (e *pageEnv) issue(name string) string {
	e.t.Helper()
	code, err := IssueCode(e.dir, name, e.clock())
	if err != nil {
		e.t.Fatal(err)
	}
	norm, _ := NormalizeCode(code)
	for _, s := range []string{code, norm, strings.ToLower(code), strings.ToLower(norm)} {
		e.secret(s)
	}
	return code
}

func (e *pageEnv) checkSecrets() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.secrets {
		if bytes.Contains(e.seen.Bytes(), []byte(s)) {
			e.t.Errorf("S11 a secret (%d bytes) appears in an answer", len(s))
		}
		if bytes.Contains(e.logs.Bytes(), []byte(s)) {
			e.t.Errorf("S11 a secret (%d bytes) appears in a log line", len(s))
		}
	}
}

func (e *pageEnv) logText() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs.String()
}

// reply is an answer, read whole.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends req and records the answer.
func (e *pageEnv) do(req *http.Request) reply {
	e.t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	dump, err := httputil.DumpResponse(resp, true)
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.seen.Write(dump)
	e.mu.Unlock()
	body, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(body)}
}

func (e *pageEnv) get(path string) reply {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	return e.do(req)
}

// post posts the pairing form from the door's own page (Origin: testOrigin) unless hdr says
// otherwise (an empty value deletes the header).
func (e *pageEnv) post(code, password, name string, hdr map[string]string) reply {
	e.t.Helper()
	form := url.Values{"code": {code}, "password": {password}, "name": {name}}
	req, _ := http.NewRequest("POST", e.srv.URL+PairPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", testOrigin)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return e.do(req)
}

// wrongCount is the count of wrong passwords codes.json holds for code.
func (e *pageEnv) wrongCount(code string) int {
	e.t.Helper()
	f, err := readCodes(filepath.Join(e.dir, CodesFile))
	if err != nil {
		e.t.Fatal(err)
	}
	norm, _ := NormalizeCode(code)
	i := f.find(codeHash(norm))
	if i < 0 {
		e.t.Fatalf("code not in codes.json")
	}
	return f.Codes[i].WrongPasswords
}

// logLines returns the log lines that contain every one of parts.
func (e *pageEnv) logLines(parts ...string) []string {
	var out []string
	for _, l := range strings.Split(e.logText(), "\n") {
		ok := l != ""
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

var (
	scriptTagRE  = regexp.MustCompile(`(?i)<script\b[^>]*>`)
	inlineAttrRE = regexp.MustCompile(`(?i)\s(on[a-z]+|style)\s*=`)
)

// TestPairingPage_R7: the page is plain HTML a phone can read and use without JavaScript — a
// form posting code, password and name to /pair, the root's fingerprint, a link to /ca.crt and
// the iOS and Android steps — with no inline script or style, under a strict CSP; its assets are
// its own two files and nothing else.
func TestPairingPage_R7(t *testing.T) {
	e := newPageEnv(t)
	r := e.get(PairPath)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /pair: %d %q", r.status, r.header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<meta name="viewport" content="width=device-width, initial-scale=1">`,
		`<form method="post" action="/pair"`,
		`name="code"`, `name="password" type="password"`, `name="name"`,
		`href="/ca.crt"`,
		testFP,
		"VPN &amp; Device Management", "Certificate Trust Settings", // iOS
		"Encryption &amp; credentials", "Install a certificate", "CA certificate", // Android
		`<script src="/pair/assets/pair.js" defer></script>`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("R7 the page lacks %q", want)
		}
	}
	for _, tag := range scriptTagRE.FindAllString(r.body, -1) {
		if !strings.Contains(tag, "src=") {
			t.Errorf("R7 inline script: %s", tag)
		}
	}
	if m := inlineAttrRE.FindString(r.body); m != "" || strings.Contains(strings.ToLower(r.body), "<style") {
		t.Errorf("R7 inline handler or style: %q", m)
	}
	csp := r.header.Get("Content-Security-Policy")
	if !strings.HasPrefix(csp, "default-src 'self';") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	// Referrer-Policy no-referrer would make a browser post the form with "Origin: null",
	// which S12 refuses: pairing would fail in every browser (seen in chromium).
	for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "Cache-Control": "no-store", "X-Frame-Options": "DENY"} {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}

	for _, tc := range []struct {
		path, ctype string
		status      int
	}{
		{"/pair/assets/pair.js", "text/javascript; charset=utf-8", 200},
		{"/pair/assets/pair.css", "text/css; charset=utf-8", 200},
		{"/pair/assets/nope.js", "", 404},
		{"/pair/assets/", "", 404},
		{"/pair/assets/%2e%2e/page.html", "", 404},
		{"/pair/assets/..%2fpage.html", "", 404},
		{"/pair/assets/pair.js/", "", 404},
		{"/pair/page.html", "", 404},
		{"/ca.crt", "", 404}, // the door's, not this handler's
		{"/", "", 404},
	} {
		r := e.get(tc.path)
		if r.status != tc.status || (tc.ctype != "" && r.header.Get("Content-Type") != tc.ctype) {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, r.status, r.header.Get("Content-Type"), tc.status, tc.ctype)
		}
		if r.header.Get("Content-Security-Policy") != ContentSecurityPolicy {
			t.Errorf("GET %s: no CSP", tc.path)
		}
	}
	js := e.get("/pair/assets/pair.js").body
	if !strings.Contains(js, "location.hash") || !strings.Contains(js, "replaceState") {
		t.Error("pair.js does not move the fragment's code into the form")
	}

	req, _ := http.NewRequest("PUT", e.srv.URL+PairPath, nil)
	if r := e.do(req); r.status != 405 || r.header.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("PUT /pair: %d Allow %q", r.status, r.header.Get("Allow"))
	}
	req, _ = http.NewRequest("HEAD", e.srv.URL+PairPath, nil)
	if r := e.do(req); r.status != 200 {
		t.Errorf("HEAD /pair: %d", r.status)
	}
	if n := e.failures.Load(); n != 0 {
		t.Errorf("R6 %d failures counted for GETs, 404s and 405s", n)
	}
}

// TestPairingPageTrustFirst_R4_R7: the page leads a device through the safe order. Before the form
// — on the page as first served and as served again after a refused password — it says to stop,
// and type no password, if the browser warned about its certificate, and to install and check
// the root first; "Trust this door" (the fingerprint, /ca.crt, where a phone shows the
// fingerprint) comes before the form, and says to compare with the machine, not with the page.
// The script fills the code but focuses no password field (which would scroll past the notice),
// and takes none of the page's own #anchors for a code.
func TestPairingPageTrustFirst_R4_R7(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	for _, r := range []reply{e.get(PairPath), e.post(code, "not the password", "", nil)} {
		b := strings.Join(strings.Fields(r.body), " ") // as a browser reads it: lines may be wrapped anywhere
		at := func(s string) int {
			t.Helper()
			i := strings.Index(b, s)
			if i < 0 {
				t.Fatalf("the page (%d) lacks %q:\n%s", r.status, s, b)
			}
			return i
		}
		notice := at(`If your browser warned about this page's certificate, stop: do not type the password.`)
		trust := at(`<h2 id="trust">`)
		form := at(`<form method="post" action="/pair"`)
		if !(notice < trust && trust < form) {
			t.Errorf("(%d) the notice at %d, Trust this door at %d, the form at %d: want them in that order", r.status, notice, trust, form)
		}
		warning := b[notice:trust]
		for _, want := range []string{`href="/ca.crt"`, `href="#trust"`, `href="#pair"`, "open the pairing link again"} {
			if !strings.Contains(warning, want) {
				t.Errorf("(%d) the notice lacks %q: %s", r.status, want, warning)
			}
		}
		section := b[trust:form]
		for _, want := range []string{testFP, `href="/ca.crt"`, "More Details", "Trusted credentials", "not with this page"} {
			if !strings.Contains(section, want) {
				t.Errorf("(%d) Trust this door lacks %q", r.status, want)
			}
		}
		if !strings.Contains(b[max(0, form-200):form], `<h2 id="pair">`) {
			t.Errorf("(%d) no #pair heading just before the form", r.status)
		}
	}
	if strings.Contains(e.get(PairPath).body, "loopback") {
		t.Error("the page of a door on a LAN address calls a warning harmless")
	}
	// A door on a loopback address (fleet demo's) says why a warning is harmless there — and
	// only there — so that the demo does not teach that the notice may be ignored.
	for _, origin := range []string{"https://127.0.0.1:7443", "https://[::1]:7443"} {
		h := NewHandler(HandlerConfig{Dir: e.dir, Register: e.reg, Fingerprint: testFP, Origin: origin,
			Logger: slog.New(slog.DiscardHandler)})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", origin+PairPath, nil))
		b := strings.Join(strings.Fields(rec.Body.String()), " ")
		notice, form := strings.Index(b, "stop: do not type the password"), strings.Index(b, "<form ")
		note := strings.Index(b, "this machine's loopback address, which no other device can reach")
		if rec.Code != 200 || notice < 0 || note < notice || note > form {
			t.Errorf("%s: %d, the notice at %d, the loopback note at %d, the form at %d", origin, rec.Code, notice, note, form)
		}
	}

	js := e.get("/pair/assets/pair.js").body
	if strings.Contains(js, ".focus(") {
		t.Error("pair.js moves the focus (to the password?): the page is to be read from its notice down")
	}
	if !strings.Contains(js, "document.getElementById(h.slice(1))") {
		t.Error("pair.js would take the page's own #trust or #pair for a code")
	}
}

// cookieRE is the Set-Cookie of a paired device (SPEC R8): the __Host- name, a 32-byte
// credential, and every attribute, with no Domain.
var cookieRE = regexp.MustCompile(`^__Host-fleet-device=([A-Za-z0-9_-]{43}); Path=/; Max-Age=34560000; HttpOnly; Secure; SameSite=Strict$`)

// TestPairingPOST_R8: the right code and password pair: 303 to "/", the credential cookie with
// every attribute, the device in the register under the code's name (else the form's), a
// fleet.paired line naming its id6 and slug, and nothing counted as a failure.
func TestPairingPOST_R8(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	r := e.post(code, testPassword, "Ann's phone", nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/" {
		t.Fatalf("pairing: %d Location %q\n%s", r.status, r.header.Get("Location"), r.body)
	}
	cookies := r.header.Values("Set-Cookie")
	if len(cookies) != 1 || !cookieRE.MatchString(cookies[0]) {
		t.Fatalf("R8 Set-Cookie %q", cookies)
	}
	cred := cookieRE.FindStringSubmatch(cookies[0])[1]
	d, ok := e.reg.Authenticate(cred, e.clock(), "192.0.2.1:5555")
	if !ok || d.Name != "Ann's phone" || d.Slug != "ann-s-phone" {
		t.Fatalf("R8 device %+v, %v", d, ok)
	}
	if got := e.logLines(`"msg":"fleet.paired"`, `"id6":"`+d.ID6+`"`, `"slug":"ann-s-phone"`); len(got) != 1 {
		t.Errorf("want one fleet.paired line with id6 and slug, log:\n%s", e.logText())
	}
	if strings.Contains(e.logText(), cred) {
		t.Error("S11 the credential is in the log")
	}
	if n := e.failures.Load(); n != 0 {
		t.Errorf("R6 %d failures counted for a pairing", n)
	}

	// The name given to fleet reach pair --name wins over the form's; lower case and spaces
	// in the code are fine.
	e.advance(time.Second) // Devices lists oldest first
	code = e.issue("Kitchen tablet")
	if r := e.post(" "+strings.ToLower(code)+" ", testPassword, "whatever", nil); r.status != http.StatusSeeOther {
		t.Fatalf("second pairing: %d", r.status)
	}
	devs := e.reg.Devices()
	if len(devs) != 2 || devs[1].Name != "Kitchen tablet" {
		t.Fatalf("devices %+v", devs)
	}
}

// TestPairingWrongPassword_R8_R6: a wrong password for a live code is 403 with the page again,
// counts one failure for the limiter and one wrong password against the code, and is logged
// pairing-password; an unknown code reads exactly the same (status, reason header, page) and
// runs no scrypt.
func TestPairingWrongPassword_R8_R6(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	e.secret("wrong password!")
	scrypts := countScrypt(t)
	wrong := e.post(code, "wrong password!", "p", nil)
	if wrong.status != 403 || !strings.Contains(wrong.body, msgWrong) || !strings.Contains(wrong.body, `<form method="post"`) {
		t.Fatalf("wrong password: %d\n%s", wrong.status, wrong.body)
	}
	if n := e.wrongCount(code); n != 1 {
		t.Errorf("R8 the code's wrong count is %d, want 1", n)
	}
	if n := e.failures.Load(); n != 1 {
		t.Errorf("R6 failures %d, want 1", n)
	}
	if len(e.logLines(`"msg":"fleet.rejected"`, `"reason":"pairing-password"`, `"peer":"127.0.0.1:`, `"path":"/pair"`)) != 1 {
		t.Errorf("no pairing-password line:\n%s", e.logText())
	}
	if scrypts.Load() != 1 {
		t.Errorf("scrypt ran %d times for one live code", scrypts.Load())
	}

	unknown := e.post("BBBB-BBBB", "wrong password!", "p", nil)
	if scrypts.Load() != 1 {
		t.Error("R8 scrypt ran for an unknown code")
	}
	if unknown.status != wrong.status || unknown.body != wrong.body || unknown.header.Get("X-Fleet-Reason") != wrong.header.Get("X-Fleet-Reason") {
		t.Errorf("an unknown code and a wrong password read differently:\n%d %s\n%d %s", unknown.status, unknown.body, wrong.status, wrong.body)
	}
	if len(e.logLines(`"reason":"pairing-code"`, `"detail":"no such code"`)) != 1 {
		t.Errorf("no pairing-code line:\n%s", e.logText())
	}
	if n := e.failures.Load(); n != 2 {
		t.Errorf("R6 failures %d, want 2", n)
	}
	// The form's name comes back; nothing else the person typed does.
	if !strings.Contains(wrong.body, `value="p"`) {
		t.Error("the device name is not kept in the form")
	}
}

// TestPairingBurnsCode_R8: five wrong passwords kill the code: the right password after them is
// refused as a dead code, without scrypt.
func TestPairingBurnsCode_R8(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	e.secret("not the password")
	for i := range MaxWrongPasswords {
		if r := e.post(code, "not the password", "", nil); r.status != 403 || !strings.Contains(r.body, msgWrong) {
			t.Fatalf("wrong password %d: %d", i+1, r.status)
		}
	}
	scrypts := countScrypt(t)
	r := e.post(code, testPassword, "", nil)
	if r.status != 403 || !strings.Contains(r.body, msgDead) {
		t.Fatalf("R8 the right password after five wrong ones: %d\n%s", r.status, r.body)
	}
	if scrypts.Load() != 0 {
		t.Error("R8 scrypt ran for a burned code")
	}
	if n := e.failures.Load(); n != MaxWrongPasswords+1 {
		t.Errorf("R6 failures %d, want %d", n, MaxWrongPasswords+1)
	}
	if len(e.reg.Devices()) != 0 {
		t.Error("a device was registered")
	}
	if len(e.logLines(`"reason":"pairing-code"`, `"detail":"code dead after too many wrong passwords"`)) != 1 {
		t.Errorf("log:\n%s", e.logText())
	}
}

// TestPairingDeadCodes_R8: a used code and an expired one are refused "can no longer be used",
// counted, without scrypt; so is any code when no password is set on the machine (503, and the
// code's count of wrong passwords untouched).
func TestPairingDeadCodes_R8(t *testing.T) {
	e := newPageEnv(t)
	used := e.issue("")
	if r := e.post(used, testPassword, "", nil); r.status != 303 {
		t.Fatalf("first use: %d", r.status)
	}
	expired := e.issue("")
	e.advance(CodeTTL)
	scrypts := countScrypt(t)
	for _, tc := range []struct{ code, detail string }{{used, "code already used"}, {expired, "code expired"}} {
		r := e.post(tc.code, testPassword, "", nil)
		if r.status != 403 || !strings.Contains(r.body, msgDead) || r.header.Get("X-Fleet-Reason") != "pairing" {
			t.Errorf("R8 %s: %d %q", tc.detail, r.status, r.body)
		}
		if len(e.logLines(`"reason":"pairing-code"`, `"detail":"`+tc.detail+`"`)) != 1 {
			t.Errorf("no log line for %s:\n%s", tc.detail, e.logText())
		}
	}
	if scrypts.Load() != 0 {
		t.Error("R8 scrypt ran for a dead code")
	}
	if n := e.failures.Load(); n != 2 {
		t.Errorf("R6 failures %d, want 2", n)
	}

	live := e.issue("")
	if err := os.Remove(filepath.Join(e.dir, PasswordFile)); err != nil {
		t.Fatal(err)
	}
	r := e.post(live, testPassword, "", nil)
	if r.status != 503 || !strings.Contains(r.body, msgNoPW) {
		t.Errorf("no password set: %d %q", r.status, r.body)
	}
	if n := e.wrongCount(live); n != 0 {
		t.Errorf("no password set counted %d wrong passwords", n)
	}
	if n := e.failures.Load(); n != 3 {
		t.Errorf("R6 failures %d, want 3", n)
	}
}

// TestPairingCrossOrigin_S12: a POST from another origin — a different host or port, "null",
// two Origin headers, or Sec-Fetch-Site saying another site — is 403 cross-origin, logged but
// not counted (R6b: it guesses nothing), before the code is even looked at; the door's own origin, or no Origin at all, is judged.
func TestPairingCrossOrigin_S12(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	scrypts := countScrypt(t)
	for _, hdr := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "https://192.168.1.20:7444"},
		{"Origin": "http://192.168.1.20:7443"},
		{"Origin": "https://192.168.1.20"},
		{"Origin": "null"},
		{"Origin": testOrigin + "/"},
		{"Origin": "", "Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
	} {
		r := e.post(code, testPassword, "", hdr)
		if r.status != 403 || r.header.Get("X-Fleet-Reason") != "cross-origin" {
			t.Errorf("S12 %v: %d %q", hdr, r.status, r.header.Get("X-Fleet-Reason"))
		}
	}
	// Two Origin headers.
	form := url.Values{"code": {code}, "password": {testPassword}}
	req, _ := http.NewRequest("POST", e.srv.URL+PairPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header["Origin"] = []string{testOrigin, "https://evil.example"}
	if r := e.do(req); r.status != 403 {
		t.Errorf("S12 two Origin headers: %d", r.status)
	}
	if n := e.failures.Load(); n != 0 {
		t.Errorf("R6b %d cross-origin POSTs counted as failures, want none", n)
	}
	if scrypts.Load() != 0 || e.wrongCount(code) != 0 {
		t.Error("a cross-origin POST reached the code or the password")
	}
	if got := len(e.logLines(`"reason":"cross-origin"`, `"status":403`)); got != 9 {
		t.Errorf("%d cross-origin lines, want 9", got)
	}
	// Same origin, spelled in another case, with Sec-Fetch-Site same-origin: judged, and pairs.
	if r := e.post(code, testPassword, "", map[string]string{"Origin": "HTTPS://192.168.1.20:7443", "Sec-Fetch-Site": "same-origin"}); r.status != 303 {
		t.Errorf("the door's own origin: %d", r.status)
	}
	// No Origin (not a browser page): judged as usual.
	code = e.issue("")
	if r := e.post(code, testPassword, "", map[string]string{"Origin": ""}); r.status != 303 {
		t.Errorf("no Origin: %d", r.status)
	}
}

// TestPairingFormLimits_R8: a form over MaxFormBytes is 413 (sent raw over the listener, so the
// body is really on the wire), a form that is not urlencoded 415, and a code in the URL's query
// is never read; each counts as a failure and none touches the code.
func TestPairingFormLimits_R8(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	norm, _ := NormalizeCode(code)

	body := "code=" + norm + "&password=" + url.QueryEscape(testPassword) + "&name=" + strings.Repeat("x", MaxFormBytes)
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /pair HTTP/1.1\r\nHost: 192.168.1.20:7443\r\nOrigin: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s", testOrigin, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	dump, _ := httputil.DumpResponse(resp, true)
	e.mu.Lock()
	e.seen.Write(dump)
	e.mu.Unlock()
	if resp.StatusCode != 413 || resp.Header.Get("X-Fleet-Reason") != "body-too-large" {
		t.Errorf("oversized form: %d %q", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	}

	req, _ := http.NewRequest("POST", e.srv.URL+PairPath, strings.NewReader("--x\r\n"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	req.Header.Set("Origin", testOrigin)
	if r := e.do(req); r.status != 415 {
		t.Errorf("multipart form: %d", r.status)
	}

	form := url.Values{"password": {testPassword}}
	req, _ = http.NewRequest("POST", e.srv.URL+PairPath+"?code="+norm, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if r := e.do(req); r.status != 403 {
		t.Errorf("a code in the query was read: %d", r.status)
	}
	if n := e.failures.Load(); n != 3 {
		t.Errorf("R6 failures %d, want 3", n)
	}
	if e.wrongCount(code) != 0 || len(e.reg.Devices()) != 0 {
		t.Error("a refused form reached the code")
	}
	if r := e.post(code, testPassword, "", nil); r.status != 303 {
		t.Errorf("the code no longer pairs: %d", r.status)
	}
}

// TestPairingRace_R8: 100 POSTs at once with one code and the right password pair exactly once;
// the 99 others are told the code can no longer be used.
func TestPairingRace_R8(t *testing.T) {
	e := newPageEnv(t)
	code := e.issue("")
	const n = 100
	var wg sync.WaitGroup
	var paired, dead atomic.Int32
	for range n {
		wg.Go(func() {
			r := e.post(code, testPassword, "racer", nil)
			switch {
			case r.status == 303:
				paired.Add(1)
			case r.status == 403 && strings.Contains(r.body, msgDead):
				dead.Add(1)
			default:
				t.Errorf("unexpected answer %d", r.status)
			}
		})
	}
	wg.Wait()
	if paired.Load() != 1 || dead.Load() != n-1 {
		t.Fatalf("R8 %d paired and %d refused, want 1 and %d", paired.Load(), dead.Load(), n-1)
	}
	if d := e.reg.Devices(); len(d) != 1 {
		t.Fatalf("R8 %d devices registered", len(d))
	}
	if f := e.failures.Load(); f != n-1 {
		t.Errorf("R6 failures %d, want %d", f, n-1)
	}
}

// TestNewHandlerRefusesBadConfig: a handler with no folder, no register or an origin that is not
// scheme://host[:port] is a programming error, refused at once.
func TestNewHandlerRefusesBadConfig(t *testing.T) {
	dir := reachDir(t)
	reg, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.WaitWrites)
	for _, cfg := range []HandlerConfig{
		{Register: reg, Origin: testOrigin},
		{Dir: dir, Origin: testOrigin},
		{Dir: dir, Register: reg},
		{Dir: dir, Register: reg, Origin: "192.168.1.20:7443"},
		{Dir: dir, Register: reg, Origin: testOrigin + "/pair"},
		{Dir: dir, Register: reg, Origin: "ftp://192.168.1.20"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewHandler(%+v) did not panic", cfg)
				}
			}()
			NewHandler(cfg)
		}()
	}
}
