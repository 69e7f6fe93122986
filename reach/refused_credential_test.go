package reach

// A credential the door refuses (R10): cleared in the answer that refuses it, counted only on a
// request that needs one, and no obstacle to pairing again.

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/scrypt"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
)

// clearCookie is the one Set-Cookie line R10 names.
const clearCookie = "__Host-fleet-device=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict"

const pairingPassword = "correct horse battery staple"

// startPairingDoor is a door with the real pairing pages, a pairing password set and every
// refused pairing attempt counted by its limiter, as the supervisor opens it.
func startPairingDoor(t *testing.T) *testDoor {
	t.Helper()
	d := startTestDoor(t, func(c *Config) {
		c.PairingFor = func(door *Door) http.Handler {
			return pairing.NewHandler(pairing.HandlerConfig{
				Dir: filepath.Dir(c.TLSDir), Register: c.Devices.(*pairing.Register),
				Fingerprint: door.Fingerprint(), Origin: "https://" + door.Addr().String(),
				OnFailure: door.Failure, Logger: slog.New(slog.DiscardHandler), Now: c.Now,
			})
		}
	})
	// The password is stored at the least cost a stored hash may ask for (ln=14), so that a
	// pairing's scrypt, under the race detector, stays well within the harness's deadlines.
	salt := []byte("sixteen byte salt")[:16]
	key, err := scrypt.Key([]byte(pairingPassword), salt, 1<<14, 8, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawStdEncoding
	stored := "$scrypt$ln=14,r=8,p=1$" + b64.EncodeToString(salt) + "$" + b64.EncodeToString(key) + "\n"
	if err := state.WritePrivateFile(filepath.Join(d.reachDir, pairing.PasswordFile), []byte(stored)); err != nil {
		t.Fatal(err)
	}
	if _, err := pairing.LoadPassword(d.reachDir); err != nil {
		t.Fatal(err)
	}
	return d
}

// failures is how many failures of src's source the limiter counts now.
func (d *testDoor) failures(src string) int {
	l := d.door.limiter
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[keyOf(netip.MustParseAddr(src))]
	if s == nil {
		return 0
	}
	n := 0
	now := l.now()
	for i := 0; i < s.times.n; i++ {
		if now-s.times.t[i] < Window {
			n++
		}
	}
	return n
}

// clears reports whether h clears the device cookie exactly as R10 says, and sets it no other way.
func clears(h http.Header) bool {
	var mine []string
	for _, l := range h.Values("Set-Cookie") {
		if strings.HasPrefix(l, pairing.CookieName+"=") {
			mine = append(mine, l)
		}
	}
	return len(mine) == 1 && mine[0] == clearCookie
}

// refusedCredentials are the credentials the door refuses: a revoked device's, one it never
// issued, and two at once.
func refusedCredentials(t *testing.T, d *testDoor) []struct{ name, cookie string } {
	t.Helper()
	dev, revoked := d.pair("old phone")
	if err := d.register.Revoke(dev.ID6); err != nil {
		t.Fatal(err)
	}
	_, live := d.pair("other phone")
	_, liveCred, _ := strings.Cut(live, "=")
	return []struct{ name, cookie string }{
		{"revoked", revoked},
		{"unknown", "Cookie: " + pairing.CookieName + "=" + strings.Repeat("A", 43)},
		{"two at once", live + "; " + pairing.CookieName + "=" + liveCred},
	}
}

// TestRefusedCredentialClearedNotCounted_R10: a phone whose credential the door refuses opens the
// door's root (redirected to the pairing page) and reloads the pairing page, its assets and
// /ca.crt 24 times: every answer clears the cookie in the same
// answer, none is counted as a failure, and none is 429. Counting each request that carried the
// cookie — the redirect's target and each asset too — would close the phone's source within two
// loads of the pairing page, for ten minutes, and a revoked phone could not pair again.
func TestRefusedCredentialClearedNotCounted_R10(t *testing.T) {
	d := startPairingDoor(t)
	for _, cred := range refusedCredentials(t, d) {
		t.Run("R10 "+cred.name, func(t *testing.T) {
			d.clock.Advance(Window)
			load := []struct {
				method, target string
				status         int
			}{
				{"GET", "/", http.StatusSeeOther},
				{"GET", "/pair", 200},
				{"GET", pairing.AssetsPrefix + "pair.css", 200},
				{"GET", pairing.AssetsPrefix + "pair.js", 200},
				{"GET", "/ca.crt", 200},
				{"HEAD", "/pair", 200},
			}
			for i := range 24 {
				for _, r := range load {
					res := d.RawAs(d.req(r.method, r.target, cred.cookie))
					if res.Status != r.status {
						t.Fatalf("load %d, %s %s: %d %q, want %d", i+1, r.method, r.target, res.Status, res.Reason, r.status)
					}
					if !clears(res.Header) {
						t.Fatalf("load %d, %s %s: Set-Cookie %q, want only %q", i+1, r.method, r.target, res.Header.Values("Set-Cookie"), clearCookie)
					}
				}
			}
			if n := d.failures("127.0.0.1"); n != 0 {
				t.Errorf("%d failures counted for the root, the pairing page, its assets and /ca.crt, want none", n)
			}
			if n := d.Alpha.Count(); n != 0 {
				t.Errorf("the console saw %d requests", n)
			}
		})
	}
}

// TestRefusedCredentialOnConsolePath_R10: on a console path, the one kind of request that needs
// a credential, a refused one is one failure, and is cleared in the same answer (the redirect to
// /pair), so the load it starts is counted once; the 429 that ten of them earn clears it too.
func TestRefusedCredentialOnConsolePath_R10(t *testing.T) {
	d := startPairingDoor(t)
	for _, cred := range refusedCredentials(t, d) {
		t.Run("R10 "+cred.name, func(t *testing.T) {
			d.clock.Advance(Window)
			for i := range SourceLimit {
				res := d.RawAs(d.req("GET", "/c/alpha/", cred.cookie))
				if res.Status != http.StatusSeeOther || res.Header.Get("Location") != "/pair" || !clears(res.Header) {
					t.Fatalf("request %d: %d Location %q Set-Cookie %q, want 303 /pair clearing the cookie",
						i+1, res.Status, res.Header.Get("Location"), res.Header.Values("Set-Cookie"))
				}
				if n := d.failures("127.0.0.1"); n != i+1 {
					t.Fatalf("after request %d: %d failures counted, want %d", i+1, n, i+1)
				}
			}
			res := d.RawAs(d.req("GET", "/c/alpha/", cred.cookie))
			if res.Status != http.StatusTooManyRequests || !clears(res.Header) {
				t.Errorf("after ten: %d Set-Cookie %q, want 429 clearing the cookie", res.Status, res.Header.Values("Set-Cookie"))
			}
			if n := d.Alpha.Count(); n != 0 {
				t.Errorf("the console saw %d requests", n)
			}
		})
	}
}

// TestRevokedPhonePairsAgain_R10: a revoked phone that loaded the pairing page many times pairs
// again at once with a fresh code, its old cookie still sent: the answer sets the new credential
// and nothing else of that name (no clearing line that a browser could apply after it), and the
// new credential opens the console as the new device. A wrong code sent beside the old cookie is
// one failure, for the code, not two.
func TestRevokedPhonePairsAgain_R10(t *testing.T) {
	d := startPairingDoor(t)
	old, revoked := d.pair("phone")
	if err := d.register.Revoke(old.ID6); err != nil {
		t.Fatal(err)
	}
	for range 3 * SourceLimit {
		if res := d.RawAs(d.req("GET", "/pair", revoked)); res.Status != 200 {
			t.Fatalf("the pairing page: %d %q, want 200", res.Status, res.Reason)
		}
	}
	post := func(code string) doortest.Response {
		form := url.Values{"code": {code}, "password": {pairingPassword}, "name": {"phone"}}.Encode()
		return d.RawAs(d.req("POST", "/pair", revoked, "Content-Type: application/x-www-form-urlencoded",
			"Content-Length: "+strconv.Itoa(len(form)), "Origin: https://"+d.Addr, "Sec-Fetch-Site: same-origin",
			"Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: document") + form)
	}
	if res := post("BCDF-GHJK"); res.Status != http.StatusForbidden || !clears(res.Header) {
		t.Fatalf("a wrong code: %d %q Set-Cookie %q, want 403 clearing the cookie", res.Status, res.Reason, res.Header.Values("Set-Cookie"))
	}
	if n := d.failures("127.0.0.1"); n != 1 {
		t.Fatalf("a wrong code beside a revoked cookie: %d failures, want 1", n)
	}
	code, err := pairing.IssueCode(d.reachDir, "", d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	res := post(code)
	if res.Status != http.StatusSeeOther {
		t.Fatalf("pairing again: %d %q, want 303", res.Status, res.Reason)
	}
	var fresh []*http.Cookie
	for _, c := range (&http.Response{Header: res.Header}).Cookies() {
		if c.Name == pairing.CookieName {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) != 1 || fresh[0].Value == "" || fresh[0].MaxAge <= 0 {
		t.Fatalf("pairing again set %q, want the one new credential", res.Header.Values("Set-Cookie"))
	}
	r := d.RawAs(d.req("GET", "/c/alpha/x", "Cookie: "+pairing.CookieName+"="+fresh[0].Value))
	if r.Status != http.StatusOK || r.Header.Values("Set-Cookie") != nil {
		t.Fatalf("the new credential: %d %q Set-Cookie %q, want 200 and no cookie touched", r.Status, r.Reason, r.Header.Values("Set-Cookie"))
	}
	if got, _ := d.Alpha.Last(); got.Header.Get("X-Phase-Console-Fleet-Login") == old.Login() ||
		!strings.HasPrefix(got.Header.Get("X-Phase-Console-Fleet-Login"), "device:phone#") {
		t.Errorf("the console saw login %q, want the new device's", got.Header.Get("X-Phase-Console-Fleet-Login"))
	}
}
