package reach

// Every pairing attempt on the door is on the record (SPEC O7): one access-log line each — door
// reach, path /pair, its status and reason word, the new device's login when paired, the TCP
// peer — and one count of fleet_pairing_attempts_total{result}, from raw requests over TLS.
// Never the code, the password or the name typed.

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/crypto/scrypt"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/metrics"
	"github.com/phase-console/fleet/pairing"
)

func TestPairingAttempts_O7(t *testing.T) {
	fleetDir := filepath.Join(t.TempDir(), "fleet")
	if err := os.Mkdir(fleetDir, 0o700); err != nil {
		t.Fatal(err)
	}
	alog, err := accesslog.Open(fleetDir)
	if err != nil {
		t.Fatal(err)
	}
	defer alog.Close()
	m := metrics.New(metrics.Config{})
	d := startTestDoor(t, func(c *Config) {
		c.Audit = audit.Recorders{alog, m}
		c.PairingFor = func(door *Door) http.Handler { // the real pairing pages, as the supervisor wires them
			return pairing.NewHandler(pairing.HandlerConfig{
				Dir: filepath.Dir(c.TLSDir), Register: c.Devices.(*pairing.Register),
				Fingerprint: door.Fingerprint(), Origin: "https://" + door.Addr().String(),
				OnFailure: door.Failure, OnAttempt: door.PairingAttempt,
				Logger: slog.New(slog.DiscardHandler), Now: c.Now,
			})
		}
	})
	// The password at the least cost a stored hash may ask for (ln=14), as startPairingDoor.
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
	// The secrets and names the attempts type, each distinct, so that any of them in the log is
	// found: the code of a wrong password, the code that pairs, a code nobody issued, a wrong
	// password, and the names typed in the form.
	wrongPWCode, err := pairing.IssueCode(d.reachDir, "", d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	goodCode, err := pairing.IssueCode(d.reachDir, "kitchen tablet", d.clock.Now()) // named on the machine: the typed name is not used
	if err != nil {
		t.Fatal(err)
	}
	const unknownCode, wrongPassword = "ZZZZ-XXXX", "hunter2-not-it"
	typedNames := []string{"Typedname Alpha", "Typedname Bravo", "Typedname Charlie", "Typedname Delta", "Typedname Echo", "Typedname Foxtrot"}
	secrets := []string{wrongPWCode, strings.ReplaceAll(wrongPWCode, "-", ""), goodCode, strings.ReplaceAll(goodCode, "-", ""),
		unknownCode, "ZZZZXXXX", wrongPassword, pairingPassword, "Typedname"}

	form := func(code, pw, name string) string {
		return url.Values{"code": {code}, "password": {pw}, "name": {name}}.Encode()
	}
	post := func(body string, extra ...string) string {
		h := append([]string{"Content-Type: application/x-www-form-urlencoded", "Content-Length: " + strconv.Itoa(len(body)),
			"Origin: https://" + d.Addr, "Sec-Fetch-Site: same-origin"}, extra...)
		return d.req("POST", "/pair", h...) + body
	}
	held := "127.0.0.2" // a source the limiter holds back
	for range SourceLimit {
		d.door.limiter.Failure(netip.MustParseAddr(held))
	}
	big := form(unknownCode, wrongPassword, strings.Repeat("Typedname Golf ", 300))

	rows := []struct {
		name   string
		src    string
		req    string
		status int
		result string
		reason string
	}{
		{"O7 a code nobody issued", "", post(form(unknownCode, pairingPassword, typedNames[0])), 403, "pairing-code", "pairing-code"},
		{"O7 a wrong password for a live code", "", post(form(wrongPWCode, wrongPassword, typedNames[1])), 403, "pairing-password", "pairing-password"},
		{"O7 a form that is not one", "", d.req("POST", "/pair", "Content-Type: text/plain", "Content-Length: 4") + "code", 415, "pairing-form", "pairing-form"},
		{"O7 a form from another origin", "", post(form(unknownCode, wrongPassword, typedNames[2]), "Origin: https://evil.example"), 403, "pairing-form", "cross-origin"},
		{"O7 R6b a form another site sent", "", strings.Replace(post(form(unknownCode, wrongPassword, typedNames[3])), "Sec-Fetch-Site: same-origin", "Sec-Fetch-Site: cross-site", 1), 403, "pairing-form", "cross-origin"},
		{"O7 a form over its size", "", d.req("POST", "/pair", "Content-Type: application/x-www-form-urlencoded", "Content-Length: "+strconv.Itoa(len(big))) + big, 413, "pairing-form", "body-too-large"},
		{"O7 a source held back", held, post(form(unknownCode, wrongPassword, typedNames[4])), 429, "limited", "rate-limited"},
		{"O7 paired", "", post(form(goodCode, pairingPassword, typedNames[5])), 303, "paired", ""},
	}
	logPath := filepath.Join(fleetDir, accesslog.FileName)
	for i, row := range rows {
		var res doortest.Response
		if row.src != "" {
			res = d.rawFrom(row.src, row.req)
		} else {
			res = d.RawAs(row.req)
		}
		if res.Status != row.status {
			t.Fatalf("%s: %d %q, want %d", row.name, res.Status, res.Reason, row.status)
		}
		lines := doortest.AccessLog(t, logPath, i+1)
		l := lines[i]
		peer := "127.0.0.1"
		if row.src != "" {
			peer = row.src
		}
		want := audit.Line{Time: l.Time, Door: "reach", Login: "", Console: "", Method: "POST", Path: "/pair", Status: row.status,
			Bytes: l.Bytes, DurationMS: l.DurationMS, Peer: peer, Reason: row.reason}
		if row.result == "paired" {
			if !strings.HasPrefix(l.Login, "device:kitchen-tablet#") || len(l.Login) != len("device:kitchen-tablet#")+6 {
				t.Errorf("%s: login %q, want the new device's", row.name, l.Login)
			}
			want.Login = l.Login
		}
		if l != want {
			t.Errorf("%s: line\n got %+v\nwant %+v", row.name, l, want)
		}
	}
	devs := d.register.Devices()
	if len(devs) != 1 || rows[len(rows)-1].result != "paired" {
		t.Fatalf("devices %+v", devs)
	}
	if lines := doortest.AccessLog(t, logPath, len(rows)); lines[len(rows)-1].Login != devs[0].Login() {
		t.Errorf("the paired line names %q, the register %q", lines[len(rows)-1].Login, devs[0].Login())
	}

	// The machine cannot judge an attempt (no pairing password set any more): pairing-unavailable.
	lateCode, err := pairing.IssueCode(d.reachDir, "", d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, lateCode, strings.ReplaceAll(lateCode, "-", ""))
	if err := os.Remove(filepath.Join(d.reachDir, pairing.PasswordFile)); err != nil {
		t.Fatal(err)
	}
	if res := d.RawAs(post(form(lateCode, pairingPassword, "Typedname Hotel"))); res.Status != http.StatusServiceUnavailable {
		t.Fatalf("no password set: %d %q, want 503", res.Status, res.Reason)
	}
	if l := doortest.AccessLog(t, logPath, len(rows)+1)[len(rows)]; l.Path != "/pair" || l.Status != 503 || l.Reason != "pairing-unavailable" || l.Login != "" {
		t.Errorf("no password set: line %+v", l)
	}

	// Nothing typed is in the file: no code (as typed or normalised), no password, no typed name.
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(string(b), s) {
			t.Errorf("the access log holds %q:\n%s", s, b)
		}
	}

	// The metrics family: every result present, each counted once here; nothing else in it.
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/fleet/v1/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(w.Body.String()))
	if err != nil {
		t.Fatalf("the text parser refuses the scrape: %v", err)
	}
	fam := fams["fleet_pairing_attempts_total"]
	if fam == nil || fam.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("fleet_pairing_attempts_total: %v", fam)
	}
	wantCounts := map[string]float64{"paired": 1, "pairing-code": 1, "pairing-password": 1, "pairing-form": 4, "limited": 1, "pairing-unavailable": 1}
	got := map[string]float64{}
	for _, mt := range fam.GetMetric() {
		if len(mt.GetLabel()) != 1 || mt.GetLabel()[0].GetName() != "result" {
			t.Errorf("labels %v, want result alone", mt.GetLabel())
			continue
		}
		got[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
	}
	if len(got) != len(wantCounts) {
		t.Errorf("results %v, want %v", got, wantCounts)
	}
	for r, n := range wantCounts {
		if got[r] != n {
			t.Errorf("fleet_pairing_attempts_total{result=%q} = %v, want %v", r, got[r], n)
		}
	}
	if strings.Contains(w.Body.String(), "Typedname") || strings.Contains(w.Body.String(), wrongPassword) {
		t.Errorf("the scrape holds something typed")
	}
}
