package tailnet

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"tailscale.com/tailcfg"
)

// capOf is a CapMap that grants the capability with these JSON values, each as written.
func capOf(values ...string) tailcfg.PeerCapMap {
	raw := make([]tailcfg.RawMessage, len(values))
	for i, v := range values {
		raw[i] = tailcfg.RawMessage(v)
	}
	return tailcfg.PeerCapMap{tailcfg.PeerCapability(access.CapabilityName): raw}
}

// grantDoor starts a door under mode whose alice holds caps (nil: not the capability at all).
func grantDoor(t *testing.T, caps tailcfg.PeerCapMap, mode access.Mode, opts ...doorOption) *door {
	t.Helper()
	tn := doortest.NewFakeTailscaled()
	p := tn.Peers[doortest.AliceIP]
	p.Caps = caps
	tn.Peers[doortest.AliceIP] = p
	return startDoorWith(t, tn, append([]doorOption{func(c *Config) { c.Access = mode }}, opts...)...)
}

// setAliceCaps changes what tailscaled's WhoIs says of alice's grants.
func (d *door) setAliceCaps(caps tailcfg.PeerCapMap) {
	d.tailnet.Set(func(f *doortest.FakeTailscaled) {
		p := f.Peers[doortest.AliceIP]
		p.Caps = caps
		f.Peers[doortest.AliceIP] = p
	})
}

// grantConsoles are the door's consoles by id.
func (d *door) grantConsoles() map[string]*echoconsole.Console {
	return map[string]*echoconsole.Console{"alpha": d.Alpha, "build-1": d.build1, "beta": d.beta}
}

// wantOpens sends alice's request for /c/<id>/ and checks what every console saw: when granted,
// the console id saw exactly this request, asserted as alice; otherwise the answer is 403
// not-granted with one fleet.rejected line, and no console saw anything.
func (d *door) wantOpens(t *testing.T, id string, granted bool) doortest.Response {
	t.Helper()
	all := d.grantConsoles()
	before := map[string]int{}
	for name, c := range all {
		before[name] = c.Count()
	}
	rejected := len(d.Logs.Events("fleet.rejected"))
	r := d.Raw(doortest.ServeReq("GET", "/c/"+id+"/"))
	for name, c := range all {
		want := before[name]
		if granted && name == id {
			want++
		}
		if got := c.Count(); got != want {
			t.Errorf("/c/%s/: console %s saw %d new request(s), want %d", id, name, got-before[name], want-before[name])
		}
	}
	if !granted {
		lines := d.Logs.Events("fleet.rejected")[rejected:]
		if r.Status != http.StatusForbidden || r.Reason != "not-granted" || len(lines) != 1 || lines[0]["reason"] != "not-granted" {
			t.Errorf("/c/%s/: got %d %q with log %v, want 403 not-granted and one fleet.rejected line", id, r.Status, r.Reason, lines)
		}
		return r
	}
	if r.Status != http.StatusOK {
		t.Errorf("/c/%s/: got %d %q (%q), want 200", id, r.Status, r.Reason, r.Body)
		return r
	}
	if s, _ := all[id].Last(); s.Header.Get("X-Phase-Console-Fleet-Login") != doortest.Alice || s.Path != "/" {
		t.Errorf("/c/%s/: console saw login %q path %q", id, s.Header.Get("X-Phase-Console-Fleet-Login"), s.Path)
	}
	return r
}

// TestGrants_G1 is a tailnet user's grant, as tailscaled's WhoIs carries it, through a real door:
// each row names the consoles alice opens; every other console refuses her 403 not-granted and
// sees nothing. Malformed values grant nothing and are logged once per WhoIs answer.
func TestGrants_G1(t *testing.T) {
	const ok = `{"consoles":["alpha"]}`
	rows := []struct {
		name      string
		caps      tailcfg.PeerCapMap
		mode      access.Mode
		opens     []string
		malformed int // fleet.grant-malformed lines for the answer
	}{
		{"G1 granted id", capOf(ok), access.ModeTailnet, []string{"alpha"}, 0},
		{"G1 granted id under grants", capOf(ok), access.ModeGrants, []string{"alpha"}, 0},
		{"G1 id in another case", capOf(`{"consoles":["ALPHA"]}`), access.ModeGrants, []string{"alpha"}, 0},
		{"G1 id escaped in JSON", capOf(`{"consoles":["\u0061lpha"]}`), access.ModeGrants, []string{"alpha"}, 0},
		{"G1 prefix", capOf(`{"consoles":["build-*"]}`), access.ModeGrants, []string{"build-1"}, 0},
		{"G1 prefix in another case", capOf(`{"consoles":["BUILD-*"]}`), access.ModeGrants, []string{"build-1"}, 0},
		{"G1 star", capOf(`{"consoles":["*"]}`), access.ModeGrants, []string{"alpha", "build-1", "beta"}, 0},
		{"G1 union of values", capOf(ok, `{"consoles":["build-*"]}`), access.ModeGrants, []string{"alpha", "build-1"}, 0},
		{"G1 unknown keys ignored", capOf(`{"consoles":["alpha"],"later":{"x":[1]},"Consoles":["beta"]}`), access.ModeGrants, []string{"alpha"}, 0},
		{"G1 empty list", capOf(`{"consoles":[]}`), access.ModeTailnet, nil, 0},
		{"G1 the capability with no value", capOf(), access.ModeTailnet, nil, 0},
		{"G1 no capability, mode tailnet", nil, access.ModeTailnet, []string{"alpha", "build-1", "beta"}, 0},
		{"G1 no capability, mode grants", nil, access.ModeGrants, nil, 0},
		{"G1 another app's capability only, mode grants", tailcfg.PeerCapMap{"example.com/cap/other": {`{"consoles":["*"]}`}}, access.ModeGrants, nil, 0},
		{"G1 malformed beside a good value", capOf(`{"consoles":["al*pha"]}`, `{"consoles":["beta"]}`), access.ModeTailnet, []string{"beta"}, 1},
		{"G1 malformed: a list", capOf(`["alpha"]`), access.ModeTailnet, nil, 1},
		{"G1 malformed: a string", capOf(`"alpha"`), access.ModeTailnet, nil, 1},
		{"G1 malformed: null", capOf(`null`), access.ModeTailnet, nil, 1},
		{"G1 malformed: consoles a string", capOf(`{"consoles":"alpha"}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: consoles null", capOf(`{"consoles":null}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: consoles holds a number", capOf(`{"consoles":["alpha",1]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: no consoles", capOf(`{"console":["alpha"]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: consoles twice", capOf(`{"consoles":["alpha"],"consoles":["beta"]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: one bad pattern spoils its value", capOf(`{"consoles":["alpha","build-*x"]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: star inside", capOf(`{"consoles":["*lpha"]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: star alone with a prefix", capOf(`{"consoles":["-*"]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: a space", capOf(`{"consoles":["alpha "]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: not ASCII (Kelvin sign)", capOf(`{"consoles":["\u212Aappa"]}`), access.ModeTailnet, nil, 1},
		{"G1 malformed: empty pattern", capOf(`{"consoles":[""]}`), access.ModeTailnet, nil, 1},
		{"G1 every value malformed", capOf(`[]`, `{}`), access.ModeTailnet, nil, 2},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := grantDoor(t, row.caps, row.mode)
			for _, id := range []string{"alpha", "build-1", "beta"} {
				granted := false
				for _, o := range row.opens {
					granted = granted || o == id
				}
				d.wantOpens(t, id, granted)
			}
			// Read once per WhoIs answer: three requests, one answer, one warning per bad value.
			if got := len(d.Logs.Events("fleet.grant-malformed")); got != row.malformed {
				t.Errorf("%d fleet.grant-malformed line(s), want %d", got, row.malformed)
			}
		})
	}
}

// TestParseCapabilityValue_G1 is the value parser alone, for the shapes that tailscaled's JSON
// cannot carry as a value (TestGrants_G1 has the rest on the wire).
func TestParseCapabilityValue_G1(t *testing.T) {
	for _, row := range []struct {
		in   string
		want []string // nil: refused
	}{
		{`{"consoles":["alpha","build-*"]}`, []string{"alpha", "build-*"}},
		{` { "later" : 1 , "consoles" : [ ] } `, []string{}},
		{`consoles: alpha`, nil},
		{`{"consoles":["alpha"]} {"consoles":["beta"]}`, nil},
		{`{"consoles":["alpha"]}]`, nil},
		{`{"consoles":["alpha"]`, nil},
		{`{"consoles":["alpha"],}`, nil},
		{`{"consoles":["alpha"], "x": }`, nil},
		{``, nil},
		{`{"consoles":["a"],"consoles":["b"]}`, nil},
		{`{"consoles":{"0":"alpha"}}`, nil},
	} {
		got, err := ParseCapabilityValue([]byte(row.in))
		if row.want == nil {
			if err == nil {
				t.Errorf("%q: got %q, want an error", row.in, got)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(row.want, ",") || got == nil {
			t.Errorf("%q: got %q, %v; want %q", row.in, got, err, row.want)
		}
	}
}

// TestNotGrantedNoOracle_G1: a console the caller may not open answers exactly as one that does
// not exist, so the door tells nobody which console ids there are; a caller who may open any id
// learns that one does not exist (404), as without grants.
func TestNotGrantedNoOracle_G1(t *testing.T) {
	d := grantDoor(t, capOf(`{"consoles":["alpha"]}`), access.ModeGrants)
	exists := d.wantOpens(t, "beta", false)
	missing := d.wantOpens(t, "nosuch", false)
	if exists.Body != missing.Body {
		t.Errorf("the pages differ:\n%q\n%q", exists.Body, missing.Body)
	}
	for _, h := range []string{"Content-Type", "Content-Length", "Connection", "X-Fleet-Reason", "Content-Security-Policy"} {
		if exists.Header.Get(h) != missing.Header.Get(h) {
			t.Errorf("%s differs: %q, %q", h, exists.Header.Get(h), missing.Header.Get(h))
		}
	}

	all := grantDoor(t, capOf(`{"consoles":["*"]}`), access.ModeGrants)
	before := all.Alpha.Count()
	all.WantRefused(t, all.Raw(doortest.ServeReq("GET", "/c/nosuch/")), before, http.StatusNotFound, "unknown-console")
}

// TestHooksOutsideGrant_G1: hooks answers 403 hooks first, whether or not the caller may open the
// console (S7 comes before the caller is verified, and so before the grant).
func TestHooksOutsideGrant_G1(t *testing.T) {
	for _, row := range []struct {
		name string
		caps tailcfg.PeerCapMap
	}{
		{"G1 S7 hooks of a console not granted", capOf(`{"consoles":["beta"]}`)},
		{"G1 S7 hooks of a console granted", capOf(`{"consoles":["alpha"]}`)},
		{"G1 S7 hooks with no capability under grants", nil},
	} {
		t.Run(row.name, func(t *testing.T) {
			d := grantDoor(t, row.caps, access.ModeGrants)
			d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/hooks"), http.StatusForbidden, "hooks")
			d.WantRejected(t, doortest.ServeReq("POST", "/c/nosuch/hooks/x", "Content-Length: 0"), http.StatusForbidden, "hooks")
		})
	}
}

// TestGrantChanges_G1: a grant withdrawn refuses new requests once the WhoIs answer that carried
// it is older than the cache's 5 s, and a grant added opens the console as soon; within those 5
// s the cached answer holds. Times are a fake clock's.
func TestGrantChanges_G1(t *testing.T) {
	clk := &wallClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := grantDoor(t, capOf(`{"consoles":["alpha"]}`), access.ModeGrants, func(c *Config) { c.Now = clk.now })
	// step moves the clock by less than the forward watch's age and lets it poll, so that only
	// the WhoIs cache's age matters here.
	step := func(by time.Duration) {
		clk.advance(by)
		d.v.Refresh(context.Background())
	}
	d.wantOpens(t, "alpha", true) // WhoIs asked now: the answer is used for 5 s

	d.setAliceCaps(nil) // withdrawn
	step(3 * time.Second)
	d.wantOpens(t, "alpha", true) // the cached answer still holds
	step(2 * time.Second)
	d.wantOpens(t, "alpha", true) // 5 s exactly: still the answer's life
	step(time.Millisecond)
	d.wantOpens(t, "alpha", false) // past it: asked again, withdrawn

	d.setAliceCaps(capOf(`{"consoles":["alpha","beta"]}`)) // added again, and more
	step(3 * time.Second)
	d.wantOpens(t, "beta", false)
	step(2*time.Second + time.Millisecond)
	d.wantOpens(t, "beta", true)
	d.wantOpens(t, "alpha", true)
}

// TestSetAccess_G1: the profile's mode changes what a caller without the capability opens at the
// next request, and never what a caller with it opens.
func TestSetAccess_G1(t *testing.T) {
	d := grantDoor(t, nil, access.ModeTailnet)
	d.wantOpens(t, "alpha", true)
	d.v.SetAccess(access.ModeGrants)
	d.wantOpens(t, "alpha", false)
	d.v.SetAccess("")
	d.wantOpens(t, "alpha", false) // anything but tailnet is grants
	d.v.SetAccess(access.ModeTailnet)
	d.wantOpens(t, "beta", true)

	g := grantDoor(t, capOf(`{"consoles":["beta"]}`), access.ModeTailnet)
	g.wantOpens(t, "alpha", false)
	g.v.SetAccess(access.ModeGrants)
	g.wantOpens(t, "beta", true)
}

// TestMalformedWarning_G1: a malformed value's warning names the capability, the login and why,
// and nothing of the value beyond that.
func TestMalformedWarning_G1(t *testing.T) {
	d := grantDoor(t, capOf(`{"consoles":["al pha"]}`), access.ModeTailnet)
	d.wantOpens(t, "alpha", false)
	lines := d.Logs.Events("fleet.grant-malformed")
	if len(lines) != 1 {
		t.Fatalf("got %v", lines)
	}
	l := lines[0]
	if l["level"] != "WARN" || l["login"] != doortest.Alice || l["capability"] != access.CapabilityName || !strings.Contains(l["why"].(string), "pattern") {
		t.Errorf("warning line %v", l)
	}
}
