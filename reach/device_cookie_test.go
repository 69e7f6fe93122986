package reach

// The device cookie on the door (R9): what a console's answers cannot do to it.

import (
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"

	"github.com/phase-console/fleet/internal/rawhttp"
)

// cookieConsole answers every request, a WebSocket upgrade too, with Set-Cookie lines naming the
// device's credential cookie: a console that would log the phone out (Max-Age=0) or put another
// device's credential in its place.
func cookieConsole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{
		pairing.CookieName + "=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict",
		pairing.CookieName + "=attackers-own-device-credential-xxxxxxxxxxxx; Path=/; Secure",
		"__HOST-fleet-device=other; Path=/; Secure", // the prefix is matched without case
		"theme=dark; Path=/c/evil/",
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString(strings.TrimSuffix(rawhttp.SwitchingHead(r.Header.Get("Sec-WebSocket-Key")), "\r\n"))
			for _, l := range lines {
				brw.WriteString("Set-Cookie: " + l + "\r\n")
			}
			brw.WriteString("\r\n")
			brw.Flush()
			brw.ReadString('\n')
			return
		}
		for _, l := range lines {
			w.Header().Add("Set-Cookie", l)
		}
		w.Write([]byte("hello"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestConsoleCannotSetDeviceCookie_R9: the credential is the door's, not a console's. A console
// answering with a Set-Cookie of the device cookie's name overwrote it in the phone's browser
// (a response may overwrite an HttpOnly cookie; __Host- stops only other paths and domains):
// a console could log every phone out, or fixate one on a device of its choosing. The door drops
// such lines from every answer of a console, a WebSocket's 101 included, and keeps the others.
func TestConsoleCannotSetDeviceCookie_R9(t *testing.T) {
	evil := cookieConsole(t)
	d := startTestDoor(t, func(c *Config) { c.Consoles = consoleMap{"evil": evil} })
	if !strings.HasPrefix(pairing.CookieName, proxy.FleetCookiePrefix) {
		t.Fatalf("the device cookie %q is not named with %q: consoles could set it", pairing.CookieName, proxy.FleetCookiePrefix)
	}
	_, cookie := d.pair("phone")
	check := func(what string, h http.Header) {
		t.Helper()
		for _, l := range h.Values("Set-Cookie") {
			name, _, _ := strings.Cut(l, "=")
			if strings.HasPrefix(strings.ToLower(strings.TrimSpace(name)), strings.ToLower("__Host-fleet-")) {
				t.Errorf("%s: a console's Set-Cookie reached the phone: %q", what, l)
			}
		}
		if !slices.Contains(h.Values("Set-Cookie"), "theme=dark; Path=/c/evil/") {
			t.Errorf("%s: the console's own cookie was dropped too: %q", what, h.Values("Set-Cookie"))
		}
	}
	res := d.RawAs(d.req("GET", "/c/evil/", cookie))
	if res.Status != http.StatusOK {
		t.Fatalf("GET: status %d %s, want 200", res.Status, res.Reason)
	}
	check("GET", res.Header)

	conn, _, resp := d.Open(d.req("GET", "/c/evil/ws", cookie, "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Origin: https://"+d.Addr))
	defer conn.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: status %d %s, want 101", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	}
	check("101", resp.Header)
}

// TestConsoleCannotActOnWholeOrigin_R9: every console shares the door's one origin with the
// pairing page and the other consoles. A console's answer could reach past its /c/<id>/ with two
// headers: Service-Worker-Allowed: / lets its script register a service worker for the whole
// origin — one that outlives the console and the device's revocation, and serves its own /pair to
// read the pairing password typed there later; Clear-Site-Data: "cookies" wipes the device's
// credential. Neither reaches the phone; the console's other headers do.
func TestConsoleCannotActOnWholeOrigin_R9(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Header().Set("Service-Worker-Allowed", "/")
		w.Header().Add("Clear-Site-Data", `"cookies", "storage"`)
		w.Header().Set("X-Console-Own", "kept")
		w.Write([]byte("self.addEventListener('fetch', e => {});"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	d := startTestDoor(t, func(c *Config) { c.Consoles = consoleMap{"evil": ln.Addr().String()} })
	_, cookie := d.pair("phone")
	res := d.RawAs(d.req("GET", "/c/evil/sw.js", cookie, "Service-Worker: script"))
	if res.Status != http.StatusOK {
		t.Fatalf("status %d %s, want 200", res.Status, res.Reason)
	}
	for _, name := range []string{"Service-Worker-Allowed", "Clear-Site-Data"} {
		if v := res.Header.Values(name); len(v) != 0 {
			t.Errorf("a console's %s reached the phone: %q", name, v)
		}
	}
	if res.Header.Get("X-Console-Own") != "kept" {
		t.Errorf("the console's own header was dropped too")
	}
}
