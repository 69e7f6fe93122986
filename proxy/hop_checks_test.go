package proxy

// Hostile inputs to the hop's pure checks and to the hop itself against a real Go console router:
// regression guards.

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/phase-console/fleet/contract"
)

// Every combination of tricky pieces after /c/<id>/: whatever JudgePath lets through, a Go
// console's ServeMux (which cleans and unescapes on its own) never routes to its /hooks/ handler,
// and the path the console sees is the path judged.
func TestConsoleRouterNeverReachesHooks_S7(t *testing.T) {
	var mu sync.Mutex
	var hooked []string
	var seenPaths []string
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hooked = append(hooked, r.URL.Path)
		mu.Unlock()
	})
	mux.HandleFunc("/hooks", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hooked = append(hooked, r.URL.Path)
		mu.Unlock()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenPaths = append(seenPaths, r.URL.Path)
		mu.Unlock()
	})
	console := httptest.NewServer(mux)
	defer console.Close()
	addr := strings.TrimPrefix(console.URL, "http://")
	hop := NewHop(slog.New(slog.DiscardHandler), nil, nil)

	firsts := []string{"hooks", "HOOKS", "%68ooks", "hoo%4Bs", "hoo%E2%84%AAs", "hook%C5%BF", "hooks%20",
		"hooks.", "%2e", "%2e%2e", ".%2E", "..", ".", "", "%2F", "%5C", "x%2F..%2Fhooks", "%00hooks",
		"hooks%3F", "hooks%23", "%EF%BB%BFhooks", "%E2%80%8Bhooks", "ho%C3%B6ks", "a", "%25", "%2568ooks", "hooks;x",
		"%C0%AE%C0%AE", "%C0%AFhooks", "\\hooks", "hooks%09", "%20hooks"}
	seconds := []string{"", "/", "/permission-request", "/..", "/../hooks", "/%2e%2e/hooks", "//hooks", "/./x"}
	var forwarded int
	for _, a := range firsts {
		for _, b := range seconds {
			for _, pre := range []string{"/c/alpha/", "/c/alpha/x/../", "/c/alpha//", "/c/alpha/%2e/"} {
				raw := pre + a + b
				route, ref := JudgePath(raw)
				if ref != nil {
					continue
				}
				if first := strings.SplitN(strings.TrimPrefix(route.Path, "/"), "/", 2)[0]; strings.EqualFold(first, "hooks") {
					t.Errorf("%q judged to %q", raw, route.Path)
				}
				r := httptest.NewRequest("GET", "/", nil)
				r.RequestURI = raw
				w := httptest.NewRecorder()
				hop.Forward(w, r, &Target{ConsoleID: route.ID, Addr: addr, Path: route.Path, Login: "alice@example.com",
					Token: "t", ClientIP: "100.101.102.103", Host: "sup.example", Proto: "https"})
				forwarded++
				if w.Code == http.StatusMovedPermanently {
					// ServeMux cleaned the path and redirects: the browser would follow to the
					// cleaned path, which the door then judges again, from the top.
					loc := w.Header().Get("Location")
					if strings.HasPrefix(strings.ToLower(path.Clean("/"+loc)), "/hooks") {
						t.Errorf("%q: console redirects to %q", raw, loc)
					}
				}
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 0 {
		t.Errorf("console's hooks handler reached with %q", hooked)
	}
	if forwarded == 0 || len(seenPaths) == 0 {
		t.Fatal("nothing was forwarded; the test proves nothing")
	}
}

// The path a console sees is the judged path, byte for byte (after its own single unescape).
func TestForwardedPathIsJudgedPath_S7(t *testing.T) {
	var mu sync.Mutex
	var got string
	console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.URL.Path
		mu.Unlock()
	}))
	defer console.Close()
	hop := NewHop(slog.New(slog.DiscardHandler), nil, nil)
	for _, raw := range []string{"/c/a/x%20y", "/c/a/x%3Fy", "/c/a/%C3%A4", "/c/a/a+b", "/c/a/%40", "/c/a/%2B%26%3D",
		"/c/a/%E2%80%AE", "/c/a/%EF%BB%BF", "/c/a/x%3Aevil", "/c/a/%7E", "/c/a/'%22%3C%3E", "/c/a/%60"} {
		route, ref := JudgePath(raw)
		if ref != nil {
			t.Errorf("%q refused: %v", raw, ref)
			continue
		}
		r := httptest.NewRequest("GET", "/", nil)
		w := httptest.NewRecorder()
		hop.Forward(w, r, &Target{ConsoleID: route.ID, Addr: strings.TrimPrefix(console.URL, "http://"), Path: route.Path,
			Login: "l", Token: "t", ClientIP: "100.101.102.103", Host: "h", Proto: "https"})
		mu.Lock()
		if got != route.Path {
			t.Errorf("%q: judged %q, console saw %q", raw, route.Path, got)
		}
		mu.Unlock()
	}
}

// The hop's own headers win over anything the request carries, and Forward refuses a Target
// that lacks what it asserts.
func TestHopHeadersWin_S6(t *testing.T) {
	var mu sync.Mutex
	var h http.Header
	var host string
	console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h, host = r.Header.Clone(), r.Host
		mu.Unlock()
	}))
	defer console.Close()
	addr := strings.TrimPrefix(console.URL, "http://")
	hop := NewHop(slog.New(slog.DiscardHandler), nil, nil)
	r := httptest.NewRequest("GET", "/c/a/", nil)
	for _, kv := range [][2]string{
		{"X-Forwarded-Prefix", "/evil"}, {"X_Forwarded_Prefix", "/evil"}, {"x-forwarded-for", "100.64.0.1"},
		{"Forwarded", "for=1.2.3.4"}, {"Connection", "X-Forwarded-Prefix, X-Phase-Console-Fleet"},
		{"Te", "trailers"}, {"Tailscale_User_Login", "mallory"}, {"Via", "1.1 evil"},
	} {
		r.Header[kv[0]] = append(r.Header[kv[0]], kv[1])
	}
	r.Trailer = http.Header{"X-Phase-Console-Fleet": {"evil"}}
	w := httptest.NewRecorder()
	hop.Forward(w, r, &Target{ConsoleID: "a", Addr: addr, Path: "/", Login: "alice@example.com", Token: "tok",
		ClientIP: "100.101.102.103", Host: "sup.example", Proto: "https"})
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"X-Forwarded-Prefix": "/c/a", "X-Forwarded-For": "100.101.102.103",
		"X-Phase-Console-Fleet": "tok", "X-Phase-Console-Fleet-Login": "alice@example.com", "X-Forwarded-Proto": "https",
		"X-Forwarded-Host": "sup.example"}
	for k, v := range want {
		var vals []string
		for name, vv := range h {
			if contract.FoldName(name) == contract.FoldName(k) {
				vals = append(vals, vv...)
			}
		}
		if len(vals) != 1 || vals[0] != v {
			t.Errorf("console saw %s %q, want %q", k, vals, v)
		}
	}
	for name := range h {
		if f := contract.FoldName(name); f == "forwarded" || strings.HasPrefix(f, "tailscale-") {
			t.Errorf("console saw %s", name)
		}
	}
	if host != addr {
		t.Errorf("console saw Host %q", host)
	}

	for _, bad := range []*Target{
		{ConsoleID: "a", Addr: addr, Path: "/", Login: "", Token: "tok", ClientIP: "1"},
		{ConsoleID: "a", Addr: addr, Path: "/", Login: "l", Token: "", ClientIP: "1"},
		{ConsoleID: "a", Addr: addr, Path: "x", Login: "l", Token: "tok", ClientIP: "1"},
		{ConsoleID: "a", Addr: "", Path: "/", Login: "l", Token: "tok", ClientIP: "1"},
		{ConsoleID: "a", Addr: addr, Path: "/", Login: "l", Token: "tok", ClientIP: ""},
	} {
		w := httptest.NewRecorder()
		hop.Forward(w, httptest.NewRequest("GET", "/", nil), bad)
		if w.Code != http.StatusInternalServerError {
			t.Errorf("%+v: %d", bad, w.Code)
		}
	}
}

func TestCheckOrigin_S12(t *testing.T) {
	const host = "sup.tail1234.ts.net"
	for _, o := range []string{
		"null", "", "https://evil.example", "https://" + host + ".evil.example", "https://evil." + host,
		"https://" + host + "@evil.example", "https://x@" + host, "http://" + host,
		"https://" + host + ".", "https://" + host + "/", "https:" + host, "//" + host, host, "https://" + host + "#x",
		"https://" + host + "/..", "wss://" + host, "https://" + host + ":", "https://[::1]", "https://" + host + "%00",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		r.Header.Set("Origin", o)
		if CheckOrigin(r, "https") == nil {
			t.Errorf("Origin %q accepted", o)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = host
	r.Header["Origin"] = []string{"https://" + host, "https://" + host}
	if CheckOrigin(r, "https") == nil {
		t.Error("two Origin lines accepted")
	}
	for _, o := range []string{"https://" + strings.ToUpper(host), "https://" + host + ":443"} {
		r.Header["Origin"] = []string{o}
		if CheckOrigin(r, "https") != nil {
			t.Errorf("own origin %q refused", o)
		}
	}
}

func TestCheckUpgrade_S9(t *testing.T) {
	for _, tc := range []struct {
		up, conn []string
		ok       bool
	}{
		{[]string{"websocket"}, []string{"Upgrade"}, true},
		{[]string{"WebSocket"}, []string{"keep-alive,  upgrade"}, true},
		{[]string{"websocket"}, nil, false},
		{[]string{"websocket"}, []string{"upgrades"}, false},
		{[]string{"websocket, h2c"}, []string{"Upgrade"}, false},
		{[]string{"h2c"}, []string{"Upgrade, HTTP2-Settings"}, false},
		{[]string{"websocket", "h2c"}, []string{"Upgrade"}, false},
		{[]string{"websocket", "websocket"}, []string{"Upgrade"}, false},
		{[]string{"websocket/13"}, []string{"Upgrade"}, false},
		{[]string{"TLS/1.2"}, []string{"Upgrade"}, false},
		{[]string{""}, []string{"Upgrade"}, false},
		{[]string{"websocketx"}, []string{"Upgrade"}, false},
		{nil, []string{"Upgrade"}, true}, // no Upgrade: nothing to upgrade to
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.up != nil {
			r.Header["Upgrade"] = tc.up
		}
		if tc.conn != nil {
			r.Header["Connection"] = tc.conn
		}
		if got := CheckUpgrade(r) == nil; got != tc.ok {
			t.Errorf("Upgrade %q Connection %q: let through %v, want %v", tc.up, tc.conn, got, tc.ok)
		}
	}
}

func TestNamedInListsAndTrailers_S3(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"Connection", ",,X-Phase-Console-Fleet"},
		{"Connection", "keep-alive,\tx_phase_console_fleet_login "},
		{"Connection", "Upgrade , X.PHASE.CONSOLE.FLEET"},
		{"Trailer", "X-Checksum, X-Phase-Console-Fleet-Login"},
		{"Trailer", "x~phase~console~fleet"},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set(tc.name, tc.value)
		if ref := CheckNoAssertion(r); ref == nil || ref.Reason != "assertion-sent" {
			t.Errorf("%s: %s let through", tc.name, tc.value)
		}
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Trailer = http.Header{"X_Phase_Console_Fleet": nil}
	if CheckNoAssertion(r) == nil {
		t.Error("an assertion in r.Trailer let through")
	}
	// Near misses are not assertion headers (and are forwarded).
	for _, n := range []string{"X-Phase-Console-Fleets", "X-Phase-Console", "Phase-Console-Fleet", "X-Phase-Console-Fleet-Login-"} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set(n, "v")
		if CheckNoAssertion(r) != nil {
			t.Errorf("%s refused", n)
		}
	}
}

// TestNamelessFleetCookieDropped_R9: a Set-Cookie without a name ("=value", RFC 6265bis 5.6: the
// name is empty and the value is all of it) is stored by a browser that predates 6265bis's
// refusal of a nameless cookie whose value starts with "__Host-", and sent back as the value
// alone: "__Host-fleet-device=<value>", the very line by which the reach door reads a device's
// credential. Were DropFleetCookies to look at the name before the first "=", which is empty,
// and keep it, a console could add a second device cookie to a phone's jar (two are
// believed as none: the phone is logged out) or, on a jar without one, its own. Every Set-Cookie
// whose name-value pair, read either way, starts with the prefix (in any case) goes; a named
// cookie whose value merely starts with it stays (it comes back under its own name).
func TestNamelessFleetCookieDropped_R9(t *testing.T) {
	for _, line := range []string{
		"=" + FleetCookiePrefix + "device=chosen-by-the-console; Path=/; Secure; HttpOnly",
		" = " + FleetCookiePrefix + "device=chosen; Secure",
		"=\t__HOST-FLEET-device=chosen",
		"=" + FleetCookiePrefix + "device",
		FleetCookiePrefix + "device; Secure", // no "=": nameless too, value "__Host-fleet-device"
		FleetCookiePrefix + "device=x; Secure",
	} {
		h := http.Header{"Set-Cookie": {line, "theme=dark"}}
		ScrubConsoleAnswer(h)
		if got := h.Values("Set-Cookie"); len(got) != 1 || got[0] != "theme=dark" {
			t.Errorf("Set-Cookie %q: kept %q, want only the console's own theme=dark", line, got)
		}
	}
	for _, line := range []string{
		"theme=" + FleetCookiePrefix + "device=x", // named "theme": sent back as theme=…
		"=theme-dark",
		"=",
		"x=" + FleetCookiePrefix,
	} {
		h := http.Header{"Set-Cookie": {line}}
		ScrubConsoleAnswer(h)
		if got := h.Values("Set-Cookie"); len(got) != 1 || got[0] != line {
			t.Errorf("Set-Cookie %q: kept %q, want it kept as it is", line, got)
		}
	}
}
