package supervisor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
)

// peersDoor is a supervisor whose tailnet lists doortest.PeerMachines, with consoles alpha,
// build-1 and beta, and whose alice may open alpha and build-* only (G1); profile, if not "",
// is its machine profile.
func peersDoor(t *testing.T, profile string) *door {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	if profile != "" {
		writeProfile(t, home, profile)
	}
	d, _ := grantsDoor(t, home, grantsOf(`{"consoles": ["alpha", "build-*"]}`))
	d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.StatusPeers = doortest.PeerMachines() })
	return d
}

// peerRead is the fetch of a peer's index page as a browser sends it through Serve: GET / for
// JSON from origin, for the caller at ip with login.
func peerRead(method, path, origin, ip, login string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n",
		method, path, doortest.TSName, ip, doortest.TSName, login)
	if origin != "" {
		b.WriteString("Origin: " + origin + "\n")
	}
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

const acceptJSON = "Accept: application/json"

func alicesRead(origin string, extra ...string) string {
	return peerRead("GET", "/", origin, doortest.AliceIP, doortest.Alice, append([]string{acceptJSON}, extra...)...)
}

// wantPeerIndex checks the reduced body of the G2 answer: only id, name, health and link of the
// consoles alice may open, each linked through this machine's Serve name.
func wantPeerIndex(t *testing.T, r doortest.Response) {
	t.Helper()
	var raw map[string][]map[string]any
	if err := json.Unmarshal([]byte(r.Body), &raw); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	if len(raw) != 1 || raw["consoles"] == nil {
		t.Fatalf("body has more than its consoles: %q", r.Body)
	}
	var ids []string
	for _, c := range raw["consoles"] {
		var keys []string
		for k := range c {
			keys = append(keys, k)
		}
		if len(keys) != 4 || c["id"] == nil || c["name"] == nil || c["health"] == nil || c["link"] == nil {
			t.Errorf("console answered with %v, want id, name, health and link only", keys)
		}
		id, _ := c["id"].(string)
		ids = append(ids, id)
		if want := "https://" + doortest.TSName + "/c/" + id + "/"; c["link"] != want {
			t.Errorf("link %v, want %s", c["link"], want)
		}
	}
	if want := []string{"alpha", "build-1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("consoles %v, want %v (G1: what alice may open)", ids, want)
	}
	for _, leak := range []string{doortest.Alice, "127.0.0.1", "addr", "login", doortest.AliceIP} {
		if strings.Contains(r.Body, leak) {
			t.Errorf("body names %q: %s", leak, r.Body)
		}
	}
}

// TestPeerIndexCORS_G2: the one cross-origin answer. GET / for JSON from exactly the origin of
// another machine of the caller's own (or of a listed tagged peer) is answered, naming exactly
// that origin, with the reduced body; every other cross-origin request stays 403 cross-origin,
// without the header, and reaches no console.
func TestPeerIndexCORS_G2(t *testing.T) {
	d := peersDoor(t, "")
	own := "https://" + doortest.AliceBox
	rows := []struct {
		name   string
		req    string
		status int    // 403 rows are cross-origin
		reason string // for a refusal
	}{
		{"G2 a machine of the caller's own", alicesRead(own), 200, ""},
		{"G2 any ASCII case", alicesRead("https://BOX.Tail1234.TS.NET"), 200, ""},
		{"G2 Accept with others", peerRead("GET", "/", own, doortest.AliceIP, doortest.Alice, "Accept: text/html, application/json;q=0.9"), 200, ""},
		{"G2 an offline machine of the caller's own, still in status", alicesRead("https://" + doortest.AliceOld), 200, ""},
		{"G2 the colleague's page for the colleague", peerRead("GET", "/", "https://"+doortest.BobBox, doortest.BobIP, doortest.Bob, acceptJSON), 200, ""},
		{"G2 a refusal to an allowed origin names it too", alicesRead(own, "Tailscale-User-Login: mallory@example.com"), 401, "identity-mismatch"},

		{"G2 a colleague's machine under the same suffix", alicesRead("https://" + doortest.BobBox), 403, "cross-origin"},
		{"G2 a tagged peer not listed", alicesRead("https://" + doortest.TaggedBox), 403, "cross-origin"},
		{"G2 a machine not in status", alicesRead("https://nobody." + doortest.Suffix), 403, "cross-origin"},
		{"G2 another suffix", alicesRead("https://box.tail9999.ts.net"), 403, "cross-origin"},
		{"G2 look-alike: the name under another domain", alicesRead(own + ".evil.example"), 403, "cross-origin"},
		{"G2 look-alike: x<suffix>", alicesRead("https://x" + doortest.Suffix), 403, "cross-origin"},
		{"G2 look-alike: the suffix alone", alicesRead("https://" + doortest.Suffix), 403, "cross-origin"},
		{"G2 look-alike: a label more", alicesRead("https://evil." + doortest.AliceBox), 403, "cross-origin"},
		{"G2 http://", alicesRead("http://" + doortest.AliceBox), 403, "cross-origin"},
		{"G2 a port", alicesRead(own + ":8443"), 403, "cross-origin"},
		{"G2 port 443 written out", alicesRead(own + ":443"), 403, "cross-origin"},
		{"G2 a trailing dot", alicesRead(own + "."), 403, "cross-origin"},
		{"G2 a path", alicesRead(own + "/"), 403, "cross-origin"},
		{"G2 userinfo", alicesRead("https://alice@" + doortest.AliceBox), 403, "cross-origin"},
		{"G2 null", alicesRead("null"), 403, "cross-origin"},
		{"G2 two Origin lines", alicesRead(own, "Origin: "+own), 403, "cross-origin"},
		{"G2 a non-GET: HEAD", peerRead("HEAD", "/", own, doortest.AliceIP, doortest.Alice, acceptJSON), 403, "cross-origin"},
		{"G2 a non-GET: POST", peerRead("POST", "/", own, doortest.AliceIP, doortest.Alice, acceptJSON, "Content-Length: 0"), 403, "cross-origin"},
		{"G2 a non-GET: a preflight", peerRead("OPTIONS", "/", own, doortest.AliceIP, doortest.Alice, "Access-Control-Request-Method: GET"), 403, "cross-origin"},
		{"G2 the HTML index", peerRead("GET", "/", own, doortest.AliceIP, doortest.Alice, "Accept: text/html"), 403, "cross-origin"},
		{"G2 no Accept", peerRead("GET", "/", own, doortest.AliceIP, doortest.Alice), 403, "cross-origin"},
		{"G2 a query", peerRead("GET", "/?x=1", own, doortest.AliceIP, doortest.Alice, acceptJSON), 403, "cross-origin"},
		{"G2 a console path", peerRead("GET", "/c/alpha/", own, doortest.AliceIP, doortest.Alice, acceptJSON), 403, "cross-origin"},
		{"G2 a console path, redirected", peerRead("GET", "/c/alpha", own, doortest.AliceIP, doortest.Alice, acceptJSON), 403, "cross-origin"},
		{"G2 the API", peerRead("GET", "/fleet/v1/consoles", own, doortest.AliceIP, doortest.Alice, acceptJSON), 403, "cross-origin"},
		{"G2 an upgrade", peerRead("GET", "/", own, doortest.AliceIP, doortest.Alice, acceptJSON, "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey), 403, "cross-origin"},
		{"G2 the caller's address is not a Tailscale one", peerRead("GET", "/", own, "192.168.1.5", doortest.Alice, acceptJSON), 403, "cross-origin"},
		{"G2 two X-Forwarded-For", alicesRead(own, "X-Forwarded-For: "+doortest.BobIP), 403, "cross-origin"},
		{"G2 a tagged caller", peerRead("GET", "/", own, doortest.TaggedIP, "", acceptJSON), 403, "cross-origin"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			logs := len(d.Logs.Events(doortest.EventRejected))
			r := d.Raw(row.req)
			origin := ""
			for _, l := range strings.Split(row.req, "\n") {
				if v, ok := strings.CutPrefix(l, "Origin: "); ok {
					origin = v
					break
				}
			}
			acao := r.Header.Values("Access-Control-Allow-Origin")
			if r.Status != row.status || (row.reason != "" && r.Reason != row.reason) {
				t.Fatalf("got %d %q, want %d %q; body %q", r.Status, r.Reason, row.status, row.reason, r.Body)
			}
			if d.Alpha.Count() != before {
				t.Fatalf("the console saw %d requests", d.Alpha.Count()-before)
			}
			if row.reason == "cross-origin" {
				if len(acao) != 0 {
					t.Fatalf("refused with Access-Control-Allow-Origin %q", acao)
				}
				d.WantRejectedLine(t, logs, row.req, "cross-origin")
				return
			}
			if len(acao) != 1 || acao[0] != origin {
				t.Fatalf("Access-Control-Allow-Origin %q, want exactly %q", acao, origin)
			}
			if !containsToken(r.Header.Values("Vary"), "Origin") {
				t.Fatalf("Vary %q lacks Origin", r.Header.Values("Vary"))
			}
			if r.Header.Get("Access-Control-Allow-Credentials") != "" {
				t.Fatal("the answer allows credentials")
			}
			if row.status == 200 && !strings.Contains(row.name, "colleague's page") {
				wantPeerIndex(t, r)
			}
		})
	}
}

func containsToken(lines []string, tok string) bool {
	for _, l := range lines {
		for _, v := range strings.Split(l, ",") {
			if strings.EqualFold(strings.TrimSpace(v), tok) {
				return true
			}
		}
	}
	return false
}

// TestPeerIndexTaggedListed_G2: a tagged peer's page may read the index only when the profile
// lists it under access.fleet_peers.
func TestPeerIndexTaggedListed_G2(t *testing.T) {
	d := peersDoor(t, "access:\n  mode: tailnet\n  fleet_peers: [CI]\n")
	r := d.Raw(alicesRead("https://" + doortest.TaggedBox))
	if r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != "https://"+doortest.TaggedBox {
		t.Fatalf("listed tagged peer: %d %q, ACAO %q", r.Status, r.Reason, r.Header.Get("Access-Control-Allow-Origin"))
	}
	wantPeerIndex(t, r)
	// Listing one tagged peer lets no other machine in.
	d.WantRejected(t, alicesRead("https://"+doortest.BobBox), http.StatusForbidden, "cross-origin")
}

// TestPeerIndexFailsClosed_G2: without a MagicDNS suffix, or without tailscaled, no origin of a
// peer is allowed.
func TestPeerIndexFailsClosed_G2(t *testing.T) {
	t.Run("G2 no MagicDNS suffix", func(t *testing.T) {
		d := peersDoor(t, "")
		d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Suffix = "" })
		r := d.WantRejected(t, alicesRead("https://"+doortest.AliceBox), http.StatusForbidden, "cross-origin")
		if r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("refused with Access-Control-Allow-Origin")
		}
	})
	t.Run("G2 tailscaled down", func(t *testing.T) {
		d := peersDoor(t, "")
		d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Down = true })
		r := d.Raw(alicesRead("https://" + doortest.AliceBox))
		if r.Status < 400 || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("tailscaled down: %d %q, ACAO %q", r.Status, r.Reason, r.Header.Get("Access-Control-Allow-Origin"))
		}
	})
}

// alicesPage is alice's GET of the HTML index.
func alicesPage() string {
	return peerRead("GET", "/", "", doortest.AliceIP, doortest.Alice, "Accept: text/html")
}

// peerSection is the page contract's opening tag of a peer's section, before its script runs.
func peerSection(name string) string {
	return `<section class="peer" data-origin="https://` + name + `" data-state="loading">`
}

// TestIndexPeerSections_G2: the index lists this machine's consoles at once, and a section for
// each of the caller's own online machines (and each listed tagged one), which its one
// same-origin script fills; the page may run only that script and ask only those origins.
func TestIndexPeerSections_G2(t *testing.T) {
	t.Run("G2 the caller's own online machines", func(t *testing.T) {
		d := peersDoor(t, "")
		r := d.Raw(alicesPage())
		if r.Status != 200 {
			t.Fatalf("index: %d %q", r.Status, r.Reason)
		}
		for _, want := range []string{peerSection(doortest.AliceBox), `<script src="/fleet-peers.js" defer></script>`,
			`<a href="/c/alpha/" data-console-id="alpha">`, `data-console-id="build-1"`} {
			if !strings.Contains(r.Body, want) {
				t.Errorf("page lacks %s:\n%s", want, r.Body)
			}
		}
		for _, not := range []string{doortest.AliceOld, doortest.BobBox, doortest.TaggedBox, `data-console-id="beta"`} {
			if strings.Contains(r.Body, not) {
				t.Errorf("page shows %s", not)
			}
		}
		if n := strings.Count(r.Body, `<section class="peer"`); n != 1 {
			t.Errorf("%d peer sections, want 1", n)
		}
		csp := r.Header.Get("Content-Security-Policy")
		if !strings.HasSuffix(csp, "; script-src 'self'; connect-src https://"+doortest.AliceBox) || strings.Contains(csp, "unsafe") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
	})
	t.Run("G2 a listed tagged peer", func(t *testing.T) {
		d := peersDoor(t, "access:\n  fleet_peers: [ci]\n")
		r := d.Raw(alicesPage())
		if !strings.Contains(r.Body, peerSection(doortest.AliceBox)) || !strings.Contains(r.Body, peerSection(doortest.TaggedBox)) {
			t.Fatalf("page lacks a section:\n%s", r.Body)
		}
		if csp := r.Header.Get("Content-Security-Policy"); !strings.HasSuffix(csp, "connect-src https://"+doortest.AliceBox+" https://"+doortest.TaggedBox) {
			t.Errorf("Content-Security-Policy %q", csp)
		}
	})
	t.Run("G2 no peers: own consoles at once, no script", func(t *testing.T) {
		d := peersDoor(t, "")
		d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.StatusPeers = nil })
		r := d.Raw(alicesPage())
		if r.Status != 200 || !strings.Contains(r.Body, `data-console-id="alpha"`) {
			t.Fatalf("index: %d %q\n%s", r.Status, r.Reason, r.Body)
		}
		if strings.Contains(r.Body, "<script") || strings.Contains(r.Body, `class="peer"`) ||
			strings.Contains(r.Header.Get("Content-Security-Policy"), "script-src") {
			t.Errorf("a page without peers has a script or a peer section:\n%s", r.Body)
		}
	})
	t.Run("G2 no MagicDNS suffix: own consoles, and why", func(t *testing.T) {
		d := peersDoor(t, "")
		d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Suffix = "" })
		r := d.Raw(alicesPage())
		if r.Status != 200 || !strings.Contains(r.Body, `data-console-id="alpha"`) || !strings.Contains(r.Body, "no MagicDNS suffix") {
			t.Fatalf("index: %d %q\n%s", r.Status, r.Reason, r.Body)
		}
		if strings.Contains(r.Body, "<script") || strings.Contains(r.Body, `class="peer"`) {
			t.Errorf("page without a suffix has peers:\n%s", r.Body)
		}
	})
	t.Run("S5 tailscaled down: refused, and the page says why", func(t *testing.T) {
		d := peersDoor(t, "")
		d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Down = true })
		r := d.WantRejected(t, alicesPage(), http.StatusUnauthorized, "unverified")
		if !strings.Contains(r.Body, "cannot reach tailscaled") {
			t.Errorf("refusal page does not say why: %s", r.Body)
		}
	})
}

// TestPeersScript_G2: the index's script is served by this door, as a script, and asks each
// peer without credentials, with a 2 s limit, as the page contract says.
func TestPeersScript_G2(t *testing.T) {
	d := peersDoor(t, "")
	r := d.Raw(peerRead("GET", "/fleet-peers.js", "", doortest.AliceIP, doortest.Alice))
	if r.Status != 200 || r.Header.Get("Content-Type") != "text/javascript; charset=utf-8" ||
		r.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("script: %d %q %v", r.Status, r.Reason, r.Header)
	}
	for _, want := range []string{`credentials: "omit"`, `Accept: "application/json"`, "timeoutMs = 2000", "AbortController",
		`"section.peer[data-origin]"`, `"data-console-id"`, `a.className = "console"`, `"no-answer"`, `"refused"`, `"answered"`} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("script lacks %s", want)
		}
	}
	d.WantRejected(t, peerRead("POST", "/fleet-peers.js", "", doortest.AliceIP, doortest.Alice, "Content-Length: 0"), http.StatusMethodNotAllowed, "method")
}

// TestPeersScriptLogic_G2: the index's script, run by node against a fake page and a scripted
// fetch: it asks every section's origin without credentials, fills an answer with the page
// contract's links (built from the section's own origin, never the answer's), marks a fleet's
// refusal, and collapses everything else as no answer once the 2 s limit is reached.
func TestPeersScriptLogic_G2(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node to run the script with")
	}
	origins := []string{"https://box.t.ts.net", "https://ci.t.ts.net", "https://nas.t.ts.net", "https://slow.t.ts.net", "https://odd.t.ts.net"}
	answers := map[string]any{
		"https://box.t.ts.net": map[string]any{"status": 200, "body": map[string]any{"consoles": []any{
			map[string]any{"id": "alpha", "name": "Alpha", "health": "up", "link": "javascript:alert(1)"},
			map[string]any{"id": "Bad Id", "name": "x"},
			map[string]any{"id": "build-1", "name": "", "health": "sideways"},
		}}},
		"https://ci.t.ts.net":   map[string]any{"status": 403, "reason": "tagged-node"},
		"https://nas.t.ts.net":  "fail",
		"https://slow.t.ts.net": "hang",
		"https://odd.t.ts.net":  map[string]any{"status": 200, "body": map[string]any{"hello": 1}},
	}
	o, _ := json.Marshal(origins)
	a, _ := json.Marshal(answers)
	out, err := exec.Command(node, "testdata/peers_script_harness.js", "assets/peers.js", string(o), string(a)).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	type link struct{ Cls, ID, Href, Name string }
	var got struct {
		Sections []struct {
			Origin, State, Label string
			Collapsed            bool
			Links                []link
		}
		Asked []struct {
			URL, Credentials, Accept, Mode string
		}
		NoAnswerShown bool
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if len(got.Asked) != len(origins) {
		t.Fatalf("asked %d origins, want %d", len(got.Asked), len(origins))
	}
	for _, q := range got.Asked {
		if q.Credentials != "omit" || q.Accept != "application/json" || q.Mode != "cors" || !strings.HasSuffix(q.URL, ".ts.net/") {
			t.Errorf("asked %+v", q)
		}
	}
	want := map[string]struct {
		state     string
		collapsed bool
		links     []link
	}{
		"https://box.t.ts.net": {"answered", false, []link{
			{"console", "alpha", "https://box.t.ts.net/c/alpha/", "Alpha"},
			{"console", "build-1", "https://box.t.ts.net/c/build-1/", "build-1"},
		}},
		"https://ci.t.ts.net":   {"refused", false, nil},
		"https://nas.t.ts.net":  {"no-answer", true, nil},
		"https://slow.t.ts.net": {"no-answer", true, nil},
		"https://odd.t.ts.net":  {"no-answer", true, nil},
	}
	for _, s := range got.Sections {
		w := want[s.Origin]
		if s.State != w.state || s.Collapsed != w.collapsed || !reflect.DeepEqual(s.Links, w.links) && len(w.links)+len(s.Links) > 0 {
			t.Errorf("%s: %s collapsed=%v %+v, want %s collapsed=%v %+v", s.Origin, s.State, s.Collapsed, s.Links, w.state, w.collapsed, w.links)
		}
		if s.State == "refused" && !strings.Contains(s.Label, "tagged-node") {
			t.Errorf("%s: label %q does not name the reason", s.Origin, s.Label)
		}
	}
	if !got.NoAnswerShown {
		t.Error("the no-answer group stayed hidden")
	}
}
