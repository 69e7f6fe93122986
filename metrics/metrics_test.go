package metrics

import (
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/phase-console/fleet/audit"
)

// fakeRegistry is the registry as Config reads it: a set of ids with their health.
type fakeRegistry struct {
	mu     sync.Mutex
	health map[string]string
}

func (r *fakeRegistry) isConsole(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.health[id]
	return ok
}

func (r *fakeRegistry) byHealth() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, h := range r.health {
		out[h]++
	}
	return out
}

func (r *fakeRegistry) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.health, id)
}

func newTestMetrics(reg *fakeRegistry, devices int, dropped uint64) *Metrics {
	return New(Config{
		IsConsole:        reg.isConsole,
		ConsolesByHealth: reg.byHealth,
		Devices:          func() int { return devices },
		Dropped:          func() uint64 { return dropped },
	})
}

// scrape is GET on the handler, as a scraper that asks for nothing in particular sends it, parsed
// back by the Prometheus text parser; it also returns the text itself.
func scrape(t *testing.T, m *Metrics) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/fleet/v1/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	text := w.Body.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the text parser refuses the scrape: %v\n%s", err, text)
	}
	return fams, text
}

// series finds the one metric of family name with exactly labels, or nil.
func series(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			if gv, ok := got[k]; !ok || gv != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// labelValues is every value label takes in family name.
func labelValues(fams map[string]*dto.MetricFamily, name, label string) map[string]bool {
	out := map[string]bool{}
	for _, m := range fams[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out[lp.GetValue()] = true
			}
		}
	}
	return out
}

func forwarded(door, console string, status int, d time.Duration) *audit.Entry {
	return &audit.Entry{Door: door, Console: console, Status: status, Duration: d, Method: "GET", Path: "/", Identified: true}
}

func refused(door, console, reason string, status int, identified bool) *audit.Entry {
	return &audit.Entry{Door: door, Console: console, Status: status, Reason: reason, Identified: identified, Duration: time.Millisecond}
}

// TestScriptedRun_G4: after a scripted run of entries, the scrape holds exactly the counts the
// run must produce, with every label inside its bounds.
func TestScriptedRun_G4(t *testing.T) {
	reg := &fakeRegistry{health: map[string]string{"alpha": "up", "beta": "down", "gamma": "unknown", "delta": "sideways"}}
	m := newTestMetrics(reg, 7, 5)
	const lo, re = audit.DoorLoopback, audit.DoorReach
	script := []*audit.Entry{
		forwarded(lo, "alpha", 200, 300*time.Microsecond),
		forwarded(lo, "alpha", 200, 2*time.Millisecond),
		forwarded(lo, "alpha", 200, 40*time.Millisecond),
		forwarded(lo, "alpha", 500, 3*time.Second),
		forwarded(re, "beta", 200, time.Millisecond),
		forwarded(re, "beta", 200, time.Millisecond),
		forwarded(re, "beta", 500, time.Millisecond),
		forwarded(lo, "beta", 101, time.Hour), // a stream: counted, not observed
		forwarded(lo, "ghost-7", 200, time.Millisecond),
		forwarded(lo, "", 204, time.Millisecond),
		forwarded(lo, "alpha", 0, time.Millisecond),
		forwarded(lo, "alpha", 999, time.Millisecond),
		refused(lo, "alpha", "not-granted", 403, true),
		refused(re, "alpha", "not-granted", 403, true),
		refused(lo, "", "unverified", 401, false),
		refused(lo, "", "hooks", 403, false),
		refused(re, "", "rate-limited", 429, false),
		refused(lo, "mallory-1234", "unknown-console", 404, true),
		refused(lo, "alpha", "made-up-word", 400, false),
		refused(lo, "alpha", "<script>", 400, false),
		refused("sideways", "alpha", "hooks", 403, false),
	}
	for _, e := range script {
		m.Record(e)
	}
	fams, text := scrape(t, m)

	counts := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fleet_requests_total", map[string]string{"door": lo, "console": "alpha", "code": "200"}, 3},
		{"fleet_requests_total", map[string]string{"door": lo, "console": "alpha", "code": "500"}, 1},
		{"fleet_requests_total", map[string]string{"door": re, "console": "beta", "code": "200"}, 2},
		{"fleet_requests_total", map[string]string{"door": re, "console": "beta", "code": "500"}, 1},
		{"fleet_requests_total", map[string]string{"door": lo, "console": "beta", "code": "101"}, 1},
		// an id that is not registered mints no label: it counts as console ""
		{"fleet_requests_total", map[string]string{"door": lo, "console": "", "code": "200"}, 1},
		{"fleet_requests_total", map[string]string{"door": lo, "console": "", "code": "204"}, 1},
		{"fleet_requests_total", map[string]string{"door": lo, "console": "alpha", "code": "other"}, 2},
		{"fleet_refusals_total", map[string]string{"door": lo, "reason": "not-granted"}, 1},
		{"fleet_refusals_total", map[string]string{"door": re, "reason": "not-granted"}, 1},
		{"fleet_refusals_total", map[string]string{"door": lo, "reason": "unverified"}, 1},
		{"fleet_refusals_total", map[string]string{"door": lo, "reason": "hooks"}, 1},
		{"fleet_refusals_total", map[string]string{"door": re, "reason": "rate-limited"}, 1},
		{"fleet_refusals_total", map[string]string{"door": lo, "reason": "unknown-console"}, 1},
		{"fleet_refusals_total", map[string]string{"door": lo, "reason": "other"}, 2},
		{"fleet_refusals_total", map[string]string{"door": "other", "reason": "hooks"}, 1},
	}
	for _, c := range counts {
		s := series(fams, c.name, c.labels)
		if s == nil {
			t.Errorf("%s%v: no such series", c.name, c.labels)
			continue
		}
		if got := s.GetCounter().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := len(fams["fleet_requests_total"].GetMetric()); n != 8 {
		t.Errorf("%d fleet_requests_total series, want the 8 above", n)
	}
	if n := len(fams["fleet_refusals_total"].GetMetric()); n != 8 {
		t.Errorf("%d fleet_refusals_total series, want the 8 above", n)
	}

	t.Run("G4 labels stay in their bounds", func(t *testing.T) {
		for _, leak := range []string{"ghost-7", "mallory-1234", "made-up-word", "<script>", "sideways"} {
			if strings.Contains(text, leak) {
				t.Errorf("the scrape holds %q, which no label may take", leak)
			}
		}
		if got := labelValues(fams, "fleet_requests_total", "console"); len(got) != 3 || !got["alpha"] || !got["beta"] || !got[NoConsole] {
			t.Errorf("console labels %v, want alpha, beta and the empty one", got)
		}
		allowed := map[string]bool{ReasonOther: true}
		for _, w := range ReasonWords {
			allowed[w] = true
		}
		for r := range labelValues(fams, "fleet_refusals_total", "reason") {
			if !allowed[r] {
				t.Errorf("reason label %q is no spec reason word", r)
			}
		}
		for c := range labelValues(fams, "fleet_requests_total", "code") {
			if c != CodeOther && !regexp.MustCompile(`^[1-5][0-9][0-9]$`).MatchString(c) {
				t.Errorf("code label %q", c)
			}
		}
	})

	t.Run("G4 duration histogram of forwarded requests, streams left out", func(t *testing.T) {
		h := series(fams, "fleet_request_duration_seconds", map[string]string{"door": lo}).GetHistogram()
		// alpha's 4 + 2 "other" codes + ghost + the empty id; not the 101 stream
		if h.GetSampleCount() != 8 {
			t.Errorf("loopback histogram count %d, want 8", h.GetSampleCount())
		}
		wantSum := (300*time.Microsecond + 2*time.Millisecond + 40*time.Millisecond + 3*time.Second + 4*time.Millisecond).Seconds()
		if math.Abs(h.GetSampleSum()-wantSum) > 1e-9 {
			t.Errorf("loopback histogram sum %v, want %v", h.GetSampleSum(), wantSum)
		}
		cum := map[float64]uint64{}
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		for le, want := range map[float64]uint64{.0005: 1, .001: 5, .0025: 6, .05: 7, 2.5: 7, 5: 8, 30: 8} {
			if cum[le] != want {
				t.Errorf("bucket le=%v: %d, want %d", le, cum[le], want)
			}
		}
		if got := series(fams, "fleet_request_duration_seconds", map[string]string{"door": re}).GetHistogram().GetSampleCount(); got != 3 {
			t.Errorf("reach histogram count %d, want 3", got)
		}
	})

	t.Run("G4 consoles by health, devices, dropped lines", func(t *testing.T) {
		for h, want := range map[string]float64{"up": 1, "down": 1, "unknown": 2} {
			if got := series(fams, "fleet_consoles", map[string]string{"health": h}).GetGauge().GetValue(); got != want {
				t.Errorf("fleet_consoles{health=%q} = %v, want %v", h, got, want)
			}
		}
		if n := len(fams["fleet_consoles"].GetMetric()); n != 3 {
			t.Errorf("%d fleet_consoles series, want up, down and unknown", n)
		}
		if got := series(fams, "fleet_devices", map[string]string{}).GetGauge().GetValue(); got != 7 {
			t.Errorf("fleet_devices = %v, want 7", got)
		}
		dropped := fams["fleet_access_log_dropped_total"]
		if dropped.GetType() != dto.MetricType_COUNTER {
			t.Errorf("fleet_access_log_dropped_total is a %v, want a counter", dropped.GetType())
		}
		if got := series(fams, "fleet_access_log_dropped_total", map[string]string{}).GetCounter().GetValue(); got != 5 {
			t.Errorf("fleet_access_log_dropped_total = %v, want 5", got)
		}
	})

	t.Run("G4 runtime and process collectors", func(t *testing.T) {
		for _, name := range []string{"go_goroutines", "process_open_fds"} {
			if fams[name] == nil {
				t.Errorf("no %s", name)
			}
		}
	})

	t.Run("G4 a deregistered console's series go at the next scrape", func(t *testing.T) {
		reg.remove("beta")
		m.Record(forwarded(re, "beta", 200, time.Millisecond)) // after deregistration: console ""
		fams, text := scrape(t, m)
		if got := labelValues(fams, "fleet_requests_total", "console"); got["beta"] {
			t.Errorf("beta still labels a series after it was deregistered:\n%s", text)
		}
		if got := series(fams, "fleet_requests_total", map[string]string{"door": re, "console": "", "code": "200"}).GetCounter().GetValue(); got != 1 {
			t.Errorf("a request to a deregistered console counted as %v under console \"\", want 1", got)
		}
		if got := series(fams, "fleet_requests_total", map[string]string{"door": lo, "console": "alpha", "code": "200"}).GetCounter().GetValue(); got != 3 {
			t.Errorf("alpha's count changed to %v when beta went", got)
		}
	})
}

// TestNewConsolePrunesDeregistered_G4: without any scrape, the cache of console series never
// outgrows the registry: a console counted for the first time drops those that are gone.
func TestNewConsolePrunesDeregistered_G4(t *testing.T) {
	reg := &fakeRegistry{health: map[string]string{}}
	m := newTestMetrics(reg, 0, 0)
	for i := range 100 {
		id := "run-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		reg.mu.Lock()
		reg.health = map[string]string{id: "up"} // the previous run deregistered, this one registered
		reg.mu.Unlock()
		m.Record(forwarded(audit.DoorLoopback, id, 200, time.Millisecond))
	}
	if n := len(*m.consoles.Load()); n != 1 {
		t.Errorf("%d consoles cached for one registered, want 1", n)
	}
	fams, _ := scrape(t, m)
	if n := len(fams["fleet_requests_total"].GetMetric()); n != 1 {
		t.Errorf("%d fleet_requests_total series for one registered console, want 1", n)
	}
}

// TestRecordAllocatesNothing_G4: once a series exists, counting into it allocates nothing.
func TestRecordAllocatesNothing_G4(t *testing.T) {
	reg := &fakeRegistry{health: map[string]string{"alpha": "up"}}
	m := newTestMetrics(reg, 0, 0)
	rows := []struct {
		name string
		e    *audit.Entry
	}{
		{"forwarded to a registered console", forwarded(audit.DoorLoopback, "alpha", 200, time.Millisecond)},
		{"forwarded, stream", forwarded(audit.DoorReach, "alpha", 101, time.Minute)},
		{"forwarded to an id not registered", forwarded(audit.DoorLoopback, "ghost", 502, time.Millisecond)},
		{"refused, spec word", refused(audit.DoorReach, "alpha", "not-granted", 403, true)},
		{"refused, other word", refused(audit.DoorLoopback, "", "nonsense", 400, false)},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			m.Record(row.e) // makes the series
			if n := testing.AllocsPerRun(100, func() { m.Record(row.e) }); n != 0 {
				t.Errorf("%v allocations per Record", n)
			}
		})
	}
}

// TestRecordConcurrent_G4: Records from many goroutines, with consoles coming and going and
// scrapes between, lose no count of a console that stays registered (run with -race).
func TestRecordConcurrent_G4(t *testing.T) {
	reg := &fakeRegistry{health: map[string]string{"alpha": "up"}}
	m := newTestMetrics(reg, 0, 0)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				m.Record(forwarded(audit.DoorLoopback, "alpha", 200+i%3, time.Millisecond))
				id := "churn-" + string(rune('a'+w))
				reg.mu.Lock()
				reg.health[id] = "up"
				reg.mu.Unlock()
				m.Record(forwarded(audit.DoorReach, id, 200, time.Millisecond))
				reg.remove(id)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			m.prune()
			m.reg.Gather()
		}
	})
	wg.Wait()
	fams, _ := scrape(t, m)
	var sum float64
	for code := range 3 {
		sum += series(fams, "fleet_requests_total", map[string]string{"door": audit.DoorLoopback, "console": "alpha", "code": codeLabels[200+code]}).GetCounter().GetValue()
	}
	if sum != workers*each {
		t.Errorf("alpha counted %v times, want %d", sum, workers*each)
	}
	if got := labelValues(fams, "fleet_requests_total", "console"); len(got) != 1 {
		t.Errorf("console labels %v after the churn, want alpha alone", got)
	}
}

// TestReasonWordsCoverContract_G4: every reason word of docs/contract.md's table is counted
// under its own name, not as other.
func TestReasonWordsCoverContract_G4(t *testing.T) {
	doc, err := os.ReadFile("../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| [1-5][0-9][0-9] \| ([^|]+)\|`)
	word := regexp.MustCompile("`([a-z-]+)`")
	found := 0
	for _, r := range row.FindAllStringSubmatch(string(doc), -1) {
		for _, w := range word.FindAllStringSubmatch(r[1], -1) {
			found++
			if reasonOf(w[1]) == len(ReasonWords) {
				t.Errorf("reason %q of docs/contract.md is not in ReasonWords", w[1])
			}
		}
	}
	if found < 20 {
		t.Fatalf("found %d reason words in docs/contract.md's table; has the table moved?", found)
	}
}
