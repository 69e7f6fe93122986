package supervisor

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
)

// listConsoles is GET /fleet/v1/consoles with the bearer, decoded, once the probes that
// registrations started are done.
func listConsoles(t *testing.T, d *door) map[string]ConsoleStatus {
	t.Helper()
	d.srv.registry.probes.Wait() // a new console is "unknown" until its first probe (S8)
	r := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer()))
	if r.Status != http.StatusOK {
		t.Fatalf("GET /fleet/v1/consoles: %d %q", r.Status, r.Reason)
	}
	var body struct {
		Consoles []ConsoleStatus `json:"consoles"`
	}
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("GET /fleet/v1/consoles: %v in %q", err, r.Body)
	}
	out := map[string]ConsoleStatus{}
	for _, c := range body.Consoles {
		out[c.ID] = c
	}
	return out
}

// register is POST /fleet/v1/consoles with the bearer.
func register(d *door, id, addr string) doortest.Response {
	b, _ := json.Marshal(map[string]string{"id": id, "addr": addr, "name": id})
	return d.Raw(d.localReq("POST", "/fleet/v1/consoles", string(b), d.bearer()))
}

// TestAPIWithBearer_S8: GET, POST and DELETE /fleet/v1/consoles work for a local caller with the
// fleet bearer.
func TestAPIWithBearer_S8(t *testing.T) {
	d := startDoor(t)
	t.Run("S8 GET lists with health", func(t *testing.T) {
		r := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer()))
		if r.Status != http.StatusOK || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("got %d %q", r.Status, r.Header.Get("Content-Type"))
		}
		if strings.Contains(r.Body, d.Token) {
			t.Error("the listing shows the fleet token")
		}
		a, ok := listConsoles(t, d)["alpha"]
		if !ok || a.Addr != d.Alpha.Addr() || !a.Up || a.URL != "/c/alpha/" || a.Name != "Alpha" {
			t.Errorf("alpha listed as %+v", a)
		}
	})
	t.Run("S8 POST new is 201", func(t *testing.T) {
		r := register(d, "beta", "[::1]:9001")
		if r.Status != http.StatusCreated {
			t.Fatalf("got %d %q %q", r.Status, r.Reason, r.Body)
		}
		var c Console
		if err := json.Unmarshal([]byte(r.Body), &c); err != nil || c.ID != "beta" || c.Addr != "[::1]:9001" {
			t.Errorf("answer %q", r.Body)
		}
	})
	t.Run("S8 POST again is 200 refreshed", func(t *testing.T) {
		r := register(d, "beta", "127.0.0.1:9002")
		if r.Status != http.StatusOK {
			t.Fatalf("got %d %q %q", r.Status, r.Reason, r.Body)
		}
		if got := listConsoles(t, d)["beta"].Addr; got != "127.0.0.1:9002" {
			t.Errorf("after the refresh beta is at %q", got)
		}
	})
	t.Run("S8 lower-case bearer scheme", func(t *testing.T) {
		r := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: bearer "+d.Token))
		if r.Status != http.StatusOK {
			t.Fatalf("got %d %q", r.Status, r.Reason)
		}
	})
	t.Run("S8 DELETE is 204 then 404", func(t *testing.T) {
		r := d.Raw(d.localReq("DELETE", "/fleet/v1/consoles/beta", "", d.bearer()))
		if r.Status != http.StatusNoContent {
			t.Fatalf("got %d %q", r.Status, r.Reason)
		}
		if _, ok := listConsoles(t, d)["beta"]; ok {
			t.Error("beta is still listed")
		}
		d.WantRejected(t, d.localReq("DELETE", "/fleet/v1/consoles/beta", "", d.bearer()), http.StatusNotFound, "unknown-console")
	})
	t.Run("S8 DELETE a console that routes", func(t *testing.T) {
		r := d.Raw(d.localReq("DELETE", "/fleet/v1/consoles/alpha", "", d.bearer()))
		if r.Status != http.StatusNoContent {
			t.Fatalf("got %d %q", r.Status, r.Reason)
		}
		d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/x"), http.StatusNotFound, "unknown-console")
	})
	t.Run("S8 other method is 405", func(t *testing.T) {
		d.WantRejected(t, d.localReq("PUT", "/fleet/v1/consoles", "{}", d.bearer()), http.StatusMethodNotAllowed, "method")
	})
	t.Run("S8 other API is 404", func(t *testing.T) {
		d.WantRejected(t, d.localReq("GET", "/fleet/v1/secrets", "", d.bearer()), http.StatusNotFound, "not-found")
	})
}

// TestAPIBearerRefused_S8: without the exact fleet bearer the API is 401 bearer, for every
// method, and nothing changes.
func TestAPIBearerRefused_S8(t *testing.T) {
	d := startDoor(t)
	tok := d.Token
	flip := tok[:len(tok)-1] + "A" // the token wrong in its last byte only
	if tok[len(tok)-1] == 'A' {
		flip = tok[:len(tok)-1] + "B"
	}
	body := `{"id":"mallory","addr":"127.0.0.1:9009"}`
	rows := []struct {
		name string
		req  string
	}{
		{"S8 GET no bearer", d.localReq("GET", "/fleet/v1/consoles", "")},
		{"S8 POST no bearer", d.localReq("POST", "/fleet/v1/consoles", body)},
		{"S8 DELETE no bearer", d.localReq("DELETE", "/fleet/v1/consoles/alpha", "")},
		{"S8 wrong scheme Basic", d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Basic "+tok)},
		{"S8 wrong scheme Token", d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Token "+tok)},
		{"S8 no scheme", d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: "+tok)},
		{"S8 bearer wrong by one byte", d.localReq("POST", "/fleet/v1/consoles", body, "Authorization: Bearer "+flip)},
		{"S8 bearer one byte short", d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Bearer "+tok[:len(tok)-1])},
		{"S8 bearer one byte long", d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Bearer "+tok+"A")},
		{"S8 empty bearer", d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Bearer ")},
		{"S8 two Authorization lines", d.localReq("DELETE", "/fleet/v1/consoles/alpha", "", d.bearer(), "Authorization: Bearer x")},
		{"S8 token in the query", d.localReq("GET", "/fleet/v1/consoles?token="+tok, "")},
		{"S8 token in a cookie", d.localReq("GET", "/fleet/v1/consoles", "", "Cookie: token="+tok)},
		{"S8 token in Proxy-Authorization", d.localReq("GET", "/fleet/v1/consoles", "", "Proxy-Authorization: Bearer "+tok)},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := d.WantRejected(t, row.req, http.StatusUnauthorized, "bearer")
			if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
			}
			if strings.Contains(r.Body, tok) {
				t.Error("the error page shows the token")
			}
		})
	}
	if _, ok := d.srv.registry.Get("mallory"); ok {
		t.Error("a refused POST registered a console")
	}
	if _, ok := d.srv.registry.Get("alpha"); !ok {
		t.Error("a refused DELETE removed a console")
	}
}

// TestAPILocalOnly_S8: the API is never served to a request that came through Tailscale Serve,
// even with the right bearer: 403 local-only.
func TestAPILocalOnly_S8(t *testing.T) {
	d := startDoor(t)
	body := `{"id":"mallory","addr":"127.0.0.1:9009"}`
	rows := []struct {
		name string
		req  string
	}{
		{"S8 X-Forwarded-For", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "X-Forwarded-For: "+doortest.AliceIP)},
		{"S8 X-Forwarded-For loopback", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "X-Forwarded-For: 127.0.0.1")},
		{"S8 X-Forwarded-Proto", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "X-Forwarded-Proto: https")},
		{"S8 Tailscale-User-Login", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "Tailscale-User-Login: "+doortest.Alice)},
		{"S8 tailscale_user_login spelled", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "tailscale_user_login: "+doortest.Alice)},
		{"S8 Tailscale-User-Name", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "Tailscale-User-Name: Alice")},
		{"S8 Tailscale-Funnel-Request", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "Tailscale-Funnel-Request: ?1")},
		{"S8 as Serve sends it, GET", doortest.ServeReq("GET", "/fleet/v1/consoles", d.bearer())},
		{"S8 as Serve sends it, POST", doortest.ServeReq("POST", "/fleet/v1/consoles", d.bearer(), "Content-Type: application/json",
			"Content-Length: "+strconv.Itoa(len(body))) + body},
		{"S8 as Serve sends it, DELETE", doortest.ServeReq("DELETE", "/fleet/v1/consoles/alpha", d.bearer())},
		{"S8 as Serve sends it, no bearer", doortest.ServeReq("GET", "/fleet/v1/consoles")},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := d.WantRejected(t, row.req, http.StatusForbidden, "local-only")
			if strings.Contains(r.Body, d.Token) {
				t.Error("the error page shows the token")
			}
		})
	}
	if _, ok := d.srv.registry.Get("mallory"); ok {
		t.Error("a refused POST registered a console")
	}
	if _, ok := d.srv.registry.Get("alpha"); !ok {
		t.Error("a refused DELETE removed a console")
	}
}

// TestAPIRegistrationValidated_S8: addr must be a loopback literal with a port, id must match
// [a-z0-9][a-z0-9-]{0,62}, and the JSON must be exactly the registration: else 400.
func TestAPIRegistrationValidated_S8(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name, body string
	}{
		{"S8 addr 10.0.0.1:80", `{"id":"x1","addr":"10.0.0.1:80"}`},
		{"S8 addr localhost:80", `{"id":"x1","addr":"localhost:80"}`},
		{"S8 addr 127.0.0.1 without a port", `{"id":"x1","addr":"127.0.0.1"}`},
		{"S8 addr 127.0.0.1:0", `{"id":"x1","addr":"127.0.0.1:0"}`},
		{"S8 addr [::1] without a port", `{"id":"x1","addr":"[::1]"}`},
		{"S8 addr 0.0.0.0:80", `{"id":"x1","addr":"0.0.0.0:80"}`},
		{"S8 addr [::]:80", `{"id":"x1","addr":"[::]:80"}`},
		{"S8 addr own Tailscale IP", `{"id":"x1","addr":"100.101.102.1:80"}`},
		{"S8 addr port too big", `{"id":"x1","addr":"127.0.0.1:65536"}`},
		{"S8 addr URL", `{"id":"x1","addr":"http://127.0.0.1:80"}`},
		{"S8 addr empty", `{"id":"x1","addr":""}`},
		{"S8 id UPPER", `{"id":"UPPER","addr":"127.0.0.1:9001"}`},
		{"S8 id -x", `{"id":"-x","addr":"127.0.0.1:9001"}`},
		{"S8 id 64 chars", `{"id":"` + strings.Repeat("a", 64) + `","addr":"127.0.0.1:9001"}`},
		{"S8 id empty", `{"id":"","addr":"127.0.0.1:9001"}`},
		{"S8 id with a slash", `{"id":"a/b","addr":"127.0.0.1:9001"}`},
		{"S8 id hooks-like path", `{"id":"x/hooks","addr":"127.0.0.1:9001"}`},
		{"S8 name with a control character", `{"id":"x1","addr":"127.0.0.1:9001","name":"a\u0007b"}`},
		{"S8 unknown field", `{"id":"x1","addr":"127.0.0.1:9001","token":"x"}`},
		{"S8 unknown field upstream", `{"id":"x1","addr":"127.0.0.1:9001","upstream":"http://10.0.0.1"}`},
		{"S8 not JSON", `id=x1&addr=127.0.0.1:9001`},
		{"S8 JSON array", `[{"id":"x1","addr":"127.0.0.1:9001"}]`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, d.localReq("POST", "/fleet/v1/consoles", row.body, d.bearer()), http.StatusBadRequest, "bad-registration")
		})
	}
	if got := len(d.srv.registry.List()); got != 1 {
		t.Errorf("%d consoles registered after only refusals, want alpha alone", got)
	}
	t.Run("S8 addr [::1]:9001 is fine", func(t *testing.T) {
		if r := register(d, "ipv6", "[::1]:9001"); r.Status != http.StatusCreated {
			t.Fatalf("got %d %q %q", r.Status, r.Reason, r.Body)
		}
	})
	t.Run("S8 id of 63 chars is fine", func(t *testing.T) {
		if r := register(d, "a"+strings.Repeat("-", 62), "127.0.0.1:9001"); r.Status != http.StatusCreated {
			t.Fatalf("got %d %q %q", r.Status, r.Reason, r.Body)
		}
	})
}

// TestRegistrySurvivesRestart_S8: a console registered through the API still routes after the
// supervisor restarts on the same state folder.
func TestRegistrySurvivesRestart_S8(t *testing.T) {
	d1 := startDoor(t)
	beta := echoconsole.New(t)
	if r := register(d1, "beta", beta.Addr()); r.Status != http.StatusCreated {
		t.Fatalf("register: %d %q", r.Status, r.Reason)
	}
	if err := d1.srv.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := startDoorAt(t, d1.home, d1.tailnet)
	if d2.Token != d1.Token {
		t.Error("the restart changed the fleet token")
	}
	if c, ok := listConsoles(t, d2)["beta"]; !ok || c.Addr != beta.Addr() {
		t.Fatalf("after the restart beta is %+v, %v", c, ok)
	}
	before := beta.Count()
	r := d2.Raw(doortest.ServeReq("GET", "/c/beta/after-restart"))
	if r.Status != http.StatusOK || beta.Count() != before+1 {
		t.Fatalf("after the restart /c/beta/: %d %q, console saw %d", r.Status, r.Reason, beta.Count()-before)
	}
	if s, _ := beta.Last(); s.Path != "/after-restart" || s.Header.Get("X-Phase-Console-Fleet-Login") != doortest.Alice {
		t.Errorf("beta saw %q as %q", s.Path, s.Header.Get("X-Phase-Console-Fleet-Login"))
	}
}

// TestConsoleDown_S8: a console that stopped answering is 502 console-down with a short page,
// and another console keeps answering.
func TestConsoleDown_S8(t *testing.T) {
	d := startDoor(t)
	beta := d.addConsole(t, "beta")
	if r := d.Raw(doortest.ServeReq("GET", "/c/beta/x")); r.Status != http.StatusOK {
		t.Fatalf("beta before it stops: %d %q", r.Status, r.Reason)
	}
	beta.Close()

	r := d.Raw(doortest.ServeReq("GET", "/c/beta/x"))
	if r.Status != http.StatusBadGateway || r.Reason != "console-down" {
		t.Errorf("stopped console: %d %q, want 502 console-down", r.Status, r.Reason)
	}
	if len(r.Body) > 1024 || !strings.Contains(r.Body, "beta") {
		t.Errorf("the 502 page should be short and name the console: %q", r.Body)
	}
	if strings.Contains(r.Body, d.Token) || strings.Contains(r.Body, beta.Addr()) {
		t.Errorf("the 502 page shows the token or the loopback address: %q", r.Body)
	}
	before := d.Alpha.Count()
	d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/still-up")), before, doortest.Alice, "/still-up")
	if c := listConsoles(t, d); c["beta"].Up || !c["alpha"].Up {
		t.Errorf("after the failed forward: beta up=%v, alpha up=%v", c["beta"].Up, c["alpha"].Up)
	}
}

// TestProbeShowsDown_S8: the supervisor's probe marks a console that does not answer as down in
// the listing; one that answers stays up.
func TestProbeShowsDown_S8(t *testing.T) {
	d := startDoor(t)
	gamma := d.addConsole(t, "gamma")
	if c := listConsoles(t, d); !c["gamma"].Up || !c["alpha"].Up {
		t.Fatalf("before the probe: gamma up=%v alpha up=%v", c["gamma"].Up, c["alpha"].Up)
	}
	gamma.Close()
	d.srv.registry.Probe(context.Background(), time.Second)
	c := listConsoles(t, d)
	if c["gamma"].Up {
		t.Error(`after the probe gamma still shows "up": true`)
	}
	if !c["alpha"].Up {
		t.Error(`after the probe alpha shows "up": false`)
	}
	if !strings.Contains(d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer())).Body, `"up": false`) {
		t.Error(`the listing does not say "up": false`)
	}
}

// TestAPIRefusalsAreJSONForJSONClients_S8_S11: a JSON client (a JSON body, or Accept:
// application/json) gets a refusal as {"error":<reason>,"detail":…}, unescaped, with the same
// status, X-Fleet-Reason and one fleet.rejected line; so does a browser, as the registry
// endpoints answer only JSON (U5).
func TestAPIRefusalsAreJSONForJSONClients_S8_S11(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name, req, reason string
		status            int
		json              bool
	}{
		{"S8 bad-registration, JSON body", d.localReq("POST", "/fleet/v1/consoles", `{"id":"x1","addr":"10.0.0.5:9001"}`, d.bearer()), "bad-registration", 400, true},
		{"S8 bearer, Accept JSON", d.localReq("GET", "/fleet/v1/consoles", "", "Accept: text/html;q=0.5, application/json"), "bearer", 401, true},
		{"S8 unknown-console, Accept JSON", d.localReq("DELETE", "/fleet/v1/consoles/nope", "", d.bearer(), "Accept: application/json"), "unknown-console", 404, true},
		{"S8 local-only, JSON body", d.localReq("POST", "/fleet/v1/consoles", `{}`, d.bearer(), "X-Forwarded-For: 100.64.0.1"), "local-only", 403, true},
		{"S8 U5 bearer, a browser: the API answers only JSON", d.localReq("GET", "/fleet/v1/consoles", "", "Accept: text/html"), "bearer", 401, true},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := d.WantRejected(t, row.req, row.status, row.reason)
			ct := r.Header.Get("Content-Type")
			if !row.json {
				if !strings.HasPrefix(ct, "text/html") {
					t.Fatalf("Content-Type %q, want the HTML page", ct)
				}
				return
			}
			if ct != "application/json" {
				t.Fatalf("Content-Type %q, want application/json (body %q)", ct, r.Body)
			}
			var e APIError
			if err := json.Unmarshal([]byte(r.Body), &e); err != nil || e.Error != row.reason || e.Detail == "" {
				t.Fatalf("body %q: %+v, %v; want error %q and a detail", r.Body, e, err, row.reason)
			}
			if strings.Contains(r.Body, "&#34;") || strings.Contains(r.Body, "<") {
				t.Errorf("body %q holds HTML", r.Body)
			}
			if strings.Contains(r.Body, d.Token) {
				t.Error("the body shows the fleet token")
			}
		})
	}
	t.Run("S8 the detail names the refused addr verbatim", func(t *testing.T) {
		r := d.Raw(d.localReq("POST", "/fleet/v1/consoles", `{"id":"x1","addr":"10.0.0.5:9001"}`, d.bearer()))
		var e APIError
		json.Unmarshal([]byte(r.Body), &e)
		if !strings.Contains(e.Detail, `"10.0.0.5:9001"`) {
			t.Errorf("detail %q does not quote the addr", e.Detail)
		}
	})
}
