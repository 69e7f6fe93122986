package supervisor

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"tailscale.com/tailcfg"
)

// grantsOf is a CapMap that grants the fleet capability with these JSON values.
func grantsOf(values ...string) tailcfg.PeerCapMap {
	raw := make([]tailcfg.RawMessage, len(values))
	for i, v := range values {
		raw[i] = tailcfg.RawMessage(v)
	}
	return tailcfg.PeerCapMap{tailcfg.PeerCapability(access.CapabilityName): raw}
}

// writeProfile writes the machine profile (the folder made private first, as fleet makes it).
func writeProfile(t *testing.T, home, body string) {
	t.Helper()
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "machine-profile.yaml")
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// grantsDoor starts a supervisor on home (its profile already written, or not) whose alice holds
// caps (nil: no capability), with consoles alpha, build-1 and beta registered.
func grantsDoor(t *testing.T, home string, caps tailcfg.PeerCapMap) (*door, map[string]*echoconsole.Console) {
	t.Helper()
	tn := doortest.NewFakeTailscaled()
	p := tn.Peers[doortest.AliceIP]
	p.Caps = caps
	tn.Peers[doortest.AliceIP] = p
	d := startDoorAt(t, home, tn)
	all := map[string]*echoconsole.Console{"alpha": d.Alpha}
	for _, id := range []string{"build-1", "beta"} {
		all[id] = echoconsole.New(t)
		if _, err := d.srv.registry.Put(Console{ID: id, Addr: all[id].Addr(), Name: strings.ToUpper(id)}); err != nil {
			t.Fatal(err)
		}
	}
	return d, all
}

// opens sends alice's GET /c/<id>/ and checks what the consoles saw: only id, once, when the
// request was forwarded; nothing at all, and 403 not-granted, when it was not.
func opens(t *testing.T, d *door, all map[string]*echoconsole.Console, id string, granted bool) {
	t.Helper()
	before := map[string]int{}
	for name, c := range all {
		before[name] = c.Count()
	}
	r := d.Raw(doortest.ServeReq("GET", "/c/"+id+"/"))
	for name, c := range all {
		want := before[name]
		if granted && name == id {
			want++
		}
		if c.Count() != want {
			t.Errorf("/c/%s/: console %s saw %d new request(s), want %d", id, name, c.Count()-before[name], want-before[name])
		}
	}
	switch {
	case granted && r.Status != http.StatusOK:
		t.Errorf("/c/%s/: got %d %q, want 200", id, r.Status, r.Reason)
	case !granted:
		lines := d.Logs.Events("fleet.rejected")[d.RejectedBefore():]
		if r.Status != http.StatusForbidden || r.Reason != "not-granted" || len(lines) != 1 {
			t.Errorf("/c/%s/: got %d %q (log %v), want 403 not-granted and one fleet.rejected line", id, r.Status, r.Reason, lines)
		}
	}
}

// indexIDs is the index as alice sees it: the console ids of its JSON form, and its HTML page.
func indexIDs(t *testing.T, d *door) ([]string, string) {
	t.Helper()
	r := d.Raw(doortest.ServeReq("GET", "/", "Accept: application/json"))
	if r.Status != http.StatusOK {
		t.Fatalf("index: %d %q", r.Status, r.Body)
	}
	var idx struct {
		Login    string `json:"login"`
		Consoles []struct {
			ID string `json:"id"`
		} `json:"consoles"`
	}
	if err := json.Unmarshal([]byte(r.Body), &idx); err != nil || idx.Login != doortest.Alice {
		t.Fatalf("index JSON %q: %v", r.Body, err)
	}
	ids := []string{}
	for _, c := range idx.Consoles {
		ids = append(ids, c.ID)
	}
	page := d.Raw(doortest.ServeReq("GET", "/"))
	if page.Status != http.StatusOK {
		t.Fatalf("index page: %d", page.Status)
	}
	return ids, page.Body
}

// TestIndexFiltered_G1: the index, in both forms, lists only what the caller may open.
func TestIndexFiltered_G1(t *testing.T) {
	rows := []struct {
		name    string
		profile string
		caps    tailcfg.PeerCapMap
		want    []string
	}{
		{"G1 index granted id and prefix", "", grantsOf(`{"consoles":["alpha"]}`, `{"consoles":["build-*"]}`), []string{"alpha", "build-1"}},
		{"G1 index granted star", "access:\n  mode: grants\n", grantsOf(`{"consoles":["*"]}`), []string{"alpha", "beta", "build-1"}},
		{"G1 index malformed grant", "", grantsOf(`{"consoles":"alpha"}`), []string{}},
		{"G1 index no capability, mode tailnet", "", nil, []string{"alpha", "beta", "build-1"}},
		{"G1 index no capability, mode grants", "access:\n  mode: grants\n", nil, []string{}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "state")
			if row.profile != "" {
				writeProfile(t, home, row.profile)
			}
			d, all := grantsDoor(t, home, row.caps)
			ids, page := indexIDs(t, d)
			if !slices.Equal(ids, row.want) {
				t.Errorf("JSON index lists %q, want %q", ids, row.want)
			}
			for _, id := range []string{"alpha", "build-1", "beta"} {
				if shown := strings.Contains(page, `href="/c/`+id+`/"`); shown != slices.Contains(row.want, id) {
					t.Errorf("HTML index shows %s: %v, want %v", id, shown, !shown)
				}
			}
			for name, c := range all {
				if c.Count() != 0 {
					t.Errorf("console %s saw the index's requests", name)
				}
			}
		})
	}
}

// TestAccessSection_G1: the profile's access: section is in force from the first request, is
// picked up again as R1 picks up reach: (ReloadReach: SIGHUP, or a poll that saw the file
// change), and a refused one is grants, named in one warning line with its key.
func TestAccessSection_G1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	writeProfile(t, home, "access:\n  mode: grants\n")
	d, all := grantsDoor(t, home, nil)
	opens(t, d, all, "alpha", false) // in force before the first request
	ids, _ := indexIDs(t, d)
	if len(ids) != 0 {
		t.Errorf("index lists %q under grants", ids)
	}
	if set, why := d.srv.Access(); set.Mode != access.ModeGrants || why != "" {
		t.Errorf("Access() = %+v, %q", set, why)
	}

	writeProfile(t, home, "access:\n  mode: tailnet\n")
	d.srv.ReloadReach()
	opens(t, d, all, "alpha", true)

	// Refused: an unknown key. The section is grants until the file is good again.
	writeProfile(t, home, "access:\n  mode: tailnet\n  colour: red\n")
	d.srv.ReloadReach()
	opens(t, d, all, "alpha", false)
	d.srv.ReloadReach() // the same refusal again: no second line
	warned := d.Logs.Events("fleet.access-refused")
	if len(warned) != 1 || warned[0]["key"] != "access.colour" || warned[0]["mode"] != "grants" || warned[0]["level"] != "WARN" {
		t.Errorf("fleet.access-refused lines: %v", warned)
	}
	if set, why := d.srv.Access(); set.Mode != access.ModeGrants || !strings.Contains(why, "access.colour") {
		t.Errorf("Access() = %+v, %q", set, why)
	}
	// The reach door is not the access section's business: it stays as its own section says.
	if st := reachStatus(t, d); st.Mode != "off" || st.Why != "reach.mode is off" {
		t.Errorf("reach status %+v", st)
	}

	// A profile that F1 refuses (group-writable) is refused as a whole: grants.
	writeProfile(t, home, "access:\n  mode: tailnet\n")
	if err := os.Chmod(filepath.Join(home, "machine-profile.yaml"), 0o666); err != nil {
		t.Fatal(err)
	}
	d.srv.ReloadReach()
	opens(t, d, all, "alpha", false)
	if err := os.Chmod(filepath.Join(home, "machine-profile.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.srv.pollReach() // the file changed (its mode): picked up without a SIGHUP
	opens(t, d, all, "beta", true)
	if _, why := d.srv.Access(); why != "" {
		t.Errorf("why = %q once the file is good", why)
	}
}

// TestRefusedAtStart_G1: a refused access: section refuses from the very first request.
func TestRefusedAtStart_G1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	writeProfile(t, home, "access:\n  mode: Tailnet\n")
	d, all := grantsDoor(t, home, nil)
	opens(t, d, all, "alpha", false)
	// A caller the policy grants consoles is not shut out by it.
	other := filepath.Join(t.TempDir(), "state")
	writeProfile(t, other, "access:\n  mode: Tailnet\n")
	g, gall := grantsDoor(t, other, grantsOf(`{"consoles":["beta"]}`))
	opens(t, g, gall, "beta", true)
	opens(t, g, gall, "alpha", false)
}
