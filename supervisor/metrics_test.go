package supervisor

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
)

// metricsToken is the door's metrics.token.
func metricsToken(t *testing.T, d *door) string {
	t.Helper()
	tok, err := state.ReadToken(filepath.Join(state.FleetDir(d.home), state.MetricsTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// parseMetrics reads a scrape's body with the Prometheus text parser.
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the text parser refuses the scrape: %v", err)
	}
	return fams
}

// metricValue is the value of family name's series whose labels include labels (0 if none).
func metricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range labels {
			if got[k] != v {
				match = false
			}
		}
		if match {
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestMetricsToken_G4: metrics.token is made at first start, 0600 in the 0700 folder, is not the
// fleet token, and survives a restart.
func TestMetricsToken_G4(t *testing.T) {
	d := startDoor(t)
	path := filepath.Join(state.FleetDir(d.home), state.MetricsTokenFile)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("metrics.token: %v, mode %v", err, st.Mode().Perm())
	}
	tok := metricsToken(t, d)
	if tok == d.Token {
		t.Fatal("metrics.token holds the fleet token")
	}
	d.srv.Close()
	d2 := startDoorAt(t, d.home, d.tailnet)
	if metricsToken(t, d2) != tok {
		t.Error("a restart changed metrics.token")
	}
}

// TestMetricsEndpoint_G4: with metrics.token's bearer a local caller reads the Prometheus text
// format, with what the doors recorded and the registry's consoles in it.
func TestMetricsEndpoint_G4(t *testing.T) {
	d := startDoor(t)
	d.addConsole(t, "beta")
	d.srv.registry.probes.Wait()
	rec := d.srv.auditRecorder()
	for range 3 {
		rec.Record(&audit.Entry{Door: audit.DoorLoopback, Console: "alpha", Status: 200, Duration: time.Millisecond, Identified: true})
	}
	rec.Record(&audit.Entry{Door: audit.DoorReach, Console: "beta", Status: 500, Duration: time.Millisecond, Identified: true})
	rec.Record(&audit.Entry{Door: audit.DoorLoopback, Console: "ghost", Status: 200, Identified: true})
	rec.Record(&audit.Entry{Door: audit.DoorLoopback, Console: "ghost", Status: 404, Reason: "unknown-console", Identified: true})

	before := d.Alpha.Count()
	r := d.Raw(d.localReq("GET", "/fleet/v1/metrics", "", "Authorization: Bearer "+metricsToken(t, d)))
	if r.Status != http.StatusOK {
		t.Fatalf("GET /fleet/v1/metrics: %d %q %q", r.Status, r.Reason, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the Prometheus text format", ct)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	if d.Alpha.Count() != before {
		t.Error("a console saw the scrape")
	}
	fams := parseMetrics(t, r.Body)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fleet_requests_total", map[string]string{"door": "loopback", "console": "alpha", "code": "200"}, 3},
		{"fleet_requests_total", map[string]string{"door": "reach", "console": "beta", "code": "500"}, 1},
		{"fleet_requests_total", map[string]string{"door": "loopback", "console": "", "code": "200"}, 1},
		{"fleet_refusals_total", map[string]string{"door": "loopback", "reason": "unknown-console"}, 1},
		{"fleet_consoles", map[string]string{"health": "up"}, 2},
		{"fleet_consoles", map[string]string{"health": "down"}, 0},
		{"fleet_devices", nil, 0},
		{"fleet_access_log_dropped_total", nil, 0},
	} {
		if fams[c.name] == nil {
			t.Errorf("no %s in the scrape", c.name)
			continue
		}
		if got := metricValue(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if strings.Contains(r.Body, "ghost") {
		t.Error("an id no console holds labels a series")
	}
	if strings.Contains(r.Body, d.Token) || strings.Contains(r.Body, metricsToken(t, d)) {
		t.Error("the scrape shows a token")
	}
}

// TestMetricsBearerRefused_G4: the endpoint takes metrics.token's bearer alone — the fleet token,
// no bearer, or a wrong one is 401 bearer, with one log line that holds no token.
func TestMetricsBearerRefused_G4(t *testing.T) {
	d := startDoor(t)
	mt := metricsToken(t, d)
	flip := mt[:len(mt)-1] + "A"
	if mt[len(mt)-1] == 'A' {
		flip = mt[:len(mt)-1] + "B"
	}
	rows := []struct {
		name string
		req  string
	}{
		{"G4 the fleet token", d.localReq("GET", metricsPath, "", d.bearer())},
		{"G4 no bearer", d.localReq("GET", metricsPath, "")},
		{"G4 bearer wrong by one byte", d.localReq("GET", metricsPath, "", "Authorization: Bearer "+flip)},
		{"G4 bearer one byte short", d.localReq("GET", metricsPath, "", "Authorization: Bearer "+mt[:len(mt)-1])},
		{"G4 empty bearer", d.localReq("GET", metricsPath, "", "Authorization: Bearer ")},
		{"G4 wrong scheme Basic", d.localReq("GET", metricsPath, "", "Authorization: Basic "+mt)},
		{"G4 two Authorization lines", d.localReq("GET", metricsPath, "", "Authorization: Bearer "+mt, "Authorization: Bearer "+mt)},
		{"G4 token in the query", d.localReq("GET", metricsPath+"?token="+mt, "")},
		{"G4 token in a cookie", d.localReq("GET", metricsPath, "", "Cookie: token="+mt)},
		{"G4 fleet token, JSON client", d.localReq("GET", metricsPath, "", d.bearer(), "Accept: application/json")},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			logsBefore := len(d.Logs.String())
			r := d.WantRejected(t, row.req, http.StatusUnauthorized, "bearer")
			if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", r.Header.Get("WWW-Authenticate"))
			}
			if strings.Contains(r.Body, "fleet_") {
				t.Error("a refused scrape got metrics")
			}
			for _, secret := range []string{mt, d.Token} {
				if strings.Contains(r.Body, secret) || strings.Contains(d.Logs.String()[logsBefore:], secret) {
					t.Error("the answer or the log shows a token")
				}
			}
		})
	}
	t.Run("G4 the fleet token, even when metrics.token holds it", func(t *testing.T) {
		path := filepath.Join(state.FleetDir(d.home), state.MetricsTokenFile)
		if err := state.WritePrivateFile(path, []byte(d.Token+"\n")); err != nil {
			t.Fatal(err)
		}
		d.WantRejected(t, d.localReq("GET", metricsPath, "", d.bearer()), http.StatusUnauthorized, "bearer")
	})
}

// TestMetricsTokenReplaced_G4: a metrics.token written anew is in force for the next scrape.
func TestMetricsTokenReplaced_G4(t *testing.T) {
	d := startDoor(t)
	fresh, err := state.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state.FleetDir(d.home), state.MetricsTokenFile)
	if err := state.WritePrivateFile(path, []byte(fresh+"\n")); err != nil {
		t.Fatal(err)
	}
	if r := d.Raw(d.localReq("GET", metricsPath, "", "Authorization: Bearer "+fresh)); r.Status != http.StatusOK {
		t.Fatalf("the new metrics.token: %d %q", r.Status, r.Reason)
	}
}

// TestMetricsLocalOnly_G4: the endpoint is local only exactly as the registry API is: a request
// that came through Tailscale Serve is 403 local-only, even with metrics.token's bearer.
func TestMetricsLocalOnly_G4(t *testing.T) {
	d := startDoor(t)
	bearer := "Authorization: Bearer " + metricsToken(t, d)
	rows := []struct {
		name string
		req  string
	}{
		{"G4 X-Forwarded-For", d.localReq("GET", metricsPath, "", bearer, "X-Forwarded-For: "+doortest.AliceIP)},
		{"G4 X-Forwarded-For loopback", d.localReq("GET", metricsPath, "", bearer, "X-Forwarded-For: 127.0.0.1")},
		{"G4 Tailscale-User-Login", d.localReq("GET", metricsPath, "", bearer, "Tailscale-User-Login: "+doortest.Alice)},
		{"G4 Forwarded", d.localReq("GET", metricsPath, "", bearer, "Forwarded: for=100.101.102.103")},
		{"G4 as Serve sends it", doortest.ServeReq("GET", metricsPath, bearer)},
		{"G4 as Serve sends it, no bearer", doortest.ServeReq("GET", metricsPath)},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := d.WantRejected(t, row.req, http.StatusForbidden, "local-only")
			if strings.Contains(r.Body, "fleet_") {
				t.Error("a refused scrape got metrics")
			}
		})
	}
}

// TestMetricsMethod_G4: the endpoint answers GET (and HEAD); any other method is 405 method.
func TestMetricsMethod_G4(t *testing.T) {
	d := startDoor(t)
	bearer := "Authorization: Bearer " + metricsToken(t, d)
	d.WantRejected(t, d.localReq("POST", metricsPath, "{}", bearer), http.StatusMethodNotAllowed, "method")
	d.WantRejected(t, d.localReq("DELETE", metricsPath, "", bearer), http.StatusMethodNotAllowed, "method")
	if r := d.Raw(d.localReq("GET", metricsPath+"/", "", bearer)); r.Status != http.StatusNotFound && r.Status != http.StatusUnauthorized {
		t.Errorf("GET %s/: %d, want it refused as another API", metricsPath, r.Status)
	}
}

// TestMetricsCountWhatTheDoorAnswered_G4: a scripted run of raw requests through the loopback
// door — forwarded, refused after identification, refused before it — is what a scrape counts,
// family by family; an id that no console holds mints no series.
func TestMetricsCountWhatTheDoorAnswered_G4(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	writeProfile(t, home, "access:\n  mode: grants\n")
	tn := doortest.NewFakeTailscaled()
	p := tn.Peers[doortest.AliceIP]
	p.Caps = grantsOf(`{"consoles":["alpha"]}`)
	tn.Peers[doortest.AliceIP] = p
	d := startDoorAt(t, home, tn)
	d.addConsole(t, "beta") // registered, and not granted to alice
	d.srv.registry.probes.Wait()
	// Told of each entry after the metrics are: once it holds n entries, the metrics counted n.
	seen := &keptEntries{}
	d.srv.door.Audit = audit.Recorders{d.srv.door.Audit, seen}

	script := []struct {
		req    string
		status int
	}{
		{doortest.ServeReq("GET", "/c/alpha/a"), 200},                             // fast loop
		{doortest.ServeReq("GET", "/c/alpha/b"), 200},                             // fast loop
		{doortest.ServeReq("POST", "/c/alpha/c", "Content-Length: 1") + "x", 200}, // net/http's path
		{doortest.ServeReq("GET", "/c/beta/x"), 403},                              // not-granted
		{doortest.ServeReq("GET", "/c/ghost/x"), 403},                             // not-granted: no such console
		{doortest.ServeReq("GET", "/c/alpha/hooks/x"), 0},                         // hooks, before identity
		{"GET /c/alpha/x HTTP/1.1\r\nHost: " + doortest.TSName + "\r\n\r\n", 0},   // unverified
	}
	for _, s := range script {
		r := d.Raw(rawhttp.CRLF(s.req))
		if s.status != 0 && r.Status != s.status || s.status == 0 && r.Status < 400 {
			t.Fatalf("%q: %d %s", s.req, r.Status, r.Reason)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(seen.entries()) < len(script); {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries recorded of %d requests", len(seen.entries()), len(script))
		}
		time.Sleep(5 * time.Millisecond)
	}

	r := d.Raw(d.localReq("GET", metricsPath, "", "Authorization: Bearer "+metricsToken(t, d)))
	if r.Status != http.StatusOK {
		t.Fatalf("scrape: %d %s", r.Status, r.Reason)
	}
	fams := parseMetrics(t, r.Body)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fleet_requests_total", map[string]string{"door": "loopback", "console": "alpha", "code": "200"}, 3},
		{"fleet_refusals_total", map[string]string{"door": "loopback", "reason": "not-granted"}, 2},
		{"fleet_refusals_total", map[string]string{"door": "loopback", "reason": "hooks"}, 1},
		{"fleet_refusals_total", map[string]string{"door": "loopback", "reason": "unverified"}, 1},
		{"fleet_consoles", map[string]string{"health": "up"}, 2},
	} {
		if got := metricValue(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	var timed uint64
	for _, m := range fams["fleet_request_duration_seconds"].GetMetric() {
		timed += m.GetHistogram().GetSampleCount()
	}
	if timed != 3 {
		t.Errorf("fleet_request_duration_seconds counts %d requests, want the 3 forwarded", timed)
	}
	if strings.Contains(r.Body, "ghost") || strings.Contains(r.Body, `console="beta"`) {
		t.Error("a refused or unknown id labels a series")
	}
}
