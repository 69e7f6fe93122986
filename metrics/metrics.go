package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/phase-console/fleet/audit"
)

// DurationBuckets are fleet_request_duration_seconds's upper bounds. A hop on loopback to a
// console that answers from memory takes well under a millisecond; a console that builds a page
// or runs a command takes seconds; past 30 s a caller has given up.
var DurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Console health words, as fleet_consoles's health label takes them.
const (
	HealthUp      = "up"
	HealthDown    = "down"
	HealthUnknown = "unknown"
)

// Config is where the metrics read what they do not count themselves. Every function may be nil
// (it then reads as nothing registered, zero devices, nothing dropped).
type Config struct {
	// IsConsole reports whether id is a registered console now. It is called on every forwarded
	// request, so it must be cheap and never block (the registry's lock-free lookup).
	IsConsole func(id string) bool
	// ConsolesByHealth counts the registered consoles by health (HealthUp, HealthDown,
	// HealthUnknown; any other word counts as unknown), at scrape time.
	ConsolesByHealth func() map[string]int
	// Devices counts the paired devices, at scrape time.
	Devices func() int
	// Dropped is how many access-log lines were lost since the process started, at scrape time.
	Dropped func() uint64
	// Log receives one line per error met while gathering (never a label value from a caller).
	Log *slog.Logger
}

// Metrics is the supervisor's metrics: an audit.Recorder, and the handler that serves them.
type Metrics struct {
	cfg      Config
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	refusals *prometheus.CounterVec
	duration *prometheus.HistogramVec
	pairings map[string]prometheus.Counter // fleet_pairing_attempts_total by result, every result made at once

	observers [nDoors - 1]prometheus.Observer          // fleet_request_duration_seconds of loopback and reach
	refused   [nDoors][]atomic.Pointer[refusalCounter] // by door, then reasonOf; made on first use

	mu           sync.Mutex                                // serialises the making and pruning of request series
	consoles     atomic.Pointer[map[string]*consoleSeries] // registered ids seen so far; replaced, never mutated
	unregistered consoleSeries                             // console NoConsole
}

type refusalCounter struct{ c prometheus.Counter }

// consoleSeries is one console's fleet_requests_total children, by door and then status key
// (codeOf). Each door's map is replaced under Metrics.mu, never mutated.
type consoleSeries struct {
	id    string
	codes [nDoors]atomic.Pointer[map[uint16]prometheus.Counter]
}

// New makes the metrics and their registry.
func New(cfg Config) *Metrics {
	if cfg.IsConsole == nil {
		cfg.IsConsole = func(string) bool { return false }
	}
	m := &Metrics{
		cfg: cfg,
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_requests_total",
			Help: "Requests a door forwarded to a console, by the console's status (an upgraded stream counts once, as 101).",
		}, []string{"door", "console", "code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_refusals_total",
			Help: "Requests a door refused, whether or not it had identified the caller, by reason word.",
		}, []string{"door", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_request_duration_seconds",
			Help:    "From a forwarded request's arrival to the end of its answer; upgraded streams are not observed.",
			Buckets: DurationBuckets,
		}, []string{"door"}),
	}
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_pairing_attempts_total",
		Help: "Pairing attempts on the direct-reach door (POST /pair), by result: paired, pairing-code, pairing-password, pairing-form, limited, pairing-unavailable.",
	}, []string{"result"})
	m.pairings = make(map[string]prometheus.Counter, len(audit.PairingResults))
	for _, r := range audit.PairingResults {
		m.pairings[r] = attempts.WithLabelValues(r) // scraped as 0 until the first attempt
	}
	empty := map[string]*consoleSeries{}
	m.consoles.Store(&empty)
	for d := range nDoors {
		if d < len(m.observers) {
			m.observers[d] = m.duration.WithLabelValues(doors[d])
		}
		m.refused[d] = make([]atomic.Pointer[refusalCounter], len(ReasonWords)+1)
	}
	m.reg.MustRegister(
		requestsCollector{m},
		m.refusals,
		attempts,
		m.duration,
		consolesCollector{m.cfg.ConsolesByHealth},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fleet_devices",
			Help: "Paired devices of the direct-reach door.",
		}, func() float64 {
			if cfg.Devices == nil {
				return 0
			}
			return float64(cfg.Devices())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fleet_access_log_dropped_total",
			Help: "Access-log lines lost because the log could not keep up or could not be written.",
		}, func() float64 {
			if cfg.Dropped == nil {
				return 0
			}
			return float64(cfg.Dropped())
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Record counts one answered request: a pairing attempt under its result (and, refused, as a
// refusal too); a refusal under its door and reason; a forwarded request
// under its door, console and status, and its duration (unless it was upgraded: a stream's
// duration is its life, not the hop's speed). It never blocks on another Record, and allocates
// nothing once its series exist.
func (m *Metrics) Record(e *audit.Entry) {
	d := doorIndex(e.Door)
	if e.Pairing != "" {
		// SPEC O7: a result outside the bounded set is not counted here (none is made).
		if c, ok := m.pairings[e.Pairing]; ok {
			c.Inc()
		}
		if e.Reason == "" {
			return // paired: no refusal, and nothing forwarded
		}
	}
	if !e.Forwarded() {
		m.refusal(d, reasonOf(e.Reason)).Inc()
		return
	}
	if e.Status != http.StatusSwitchingProtocols {
		m.observer(d).Observe(e.Duration.Seconds())
	}
	m.request(d, e.Console, codeOf(e.Status)).Inc()
}

var _ audit.Recorder = (*Metrics)(nil)

// observer is door d's histogram; only a door that no door of fleet names (DoorOther) makes its
// series on first use, so that it is not scraped as zeros.
func (m *Metrics) observer(d int) prometheus.Observer {
	if d < len(m.observers) {
		return m.observers[d]
	}
	return m.duration.WithLabelValues(doors[d])
}

func (m *Metrics) refusal(d, reason int) prometheus.Counter {
	p := &m.refused[d][reason]
	if rc := p.Load(); rc != nil {
		return rc.c
	}
	// WithLabelValues returns the same child to every caller, so a lost race changes nothing.
	rc := &refusalCounter{m.refusals.WithLabelValues(doors[d], reasonLabel(reason))}
	p.CompareAndSwap(nil, rc)
	return p.Load().c
}

// request is the fleet_requests_total child for (door d, console id, status key code): from the
// caches without a lock when it exists, else made (makeRequest).
func (m *Metrics) request(d int, id string, code uint16) prometheus.Counter {
	cs := &m.unregistered
	if id != NoConsole && m.cfg.IsConsole(id) {
		cs = (*m.consoles.Load())[id]
	}
	if cs != nil {
		if codes := cs.codes[d].Load(); codes != nil {
			if c, ok := (*codes)[code]; ok {
				return c
			}
		}
	}
	return m.makeRequest(d, id, code)
}

// makeRequest makes the series for (d, id, code). id is asked again under the lock: a console
// deregistered meanwhile is counted as NoConsole, so no series is made for an id that is not
// registered when it is made. A new console's map is the old one without the consoles that are
// no longer registered (their series go too), so the cache never outgrows the registry by more
// than the consoles deregistered since the last new one.
func (m *Metrics) makeRequest(d int, id string, code uint16) prometheus.Counter {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := &m.unregistered
	if id != NoConsole && m.cfg.IsConsole(id) {
		cur := *m.consoles.Load()
		if cs = cur[id]; cs == nil {
			cs = &consoleSeries{id: id}
			next := m.pruned(cur, len(cur)+1)
			next[id] = cs
			m.consoles.Store(&next)
		}
	}
	var old map[uint16]prometheus.Counter
	if p := cs.codes[d].Load(); p != nil {
		old = *p
	}
	if c, ok := old[code]; ok {
		return c
	}
	c := m.requests.WithLabelValues(doors[d], cs.id, codeLabels[code])
	next := make(map[uint16]prometheus.Counter, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[code] = c
	cs.codes[d].Store(&next)
	return c
}

// pruned is a copy of cur without the consoles that are no longer registered, whose series it
// deletes. Called with mu held.
func (m *Metrics) pruned(cur map[string]*consoleSeries, size int) map[string]*consoleSeries {
	next := make(map[string]*consoleSeries, size)
	for id, cs := range cur {
		if m.cfg.IsConsole(id) {
			next[id] = cs
			continue
		}
		for d := range nDoors {
			if p := cs.codes[d].Load(); p != nil {
				for code := range *p {
					m.requests.DeleteLabelValues(doors[d], id, codeLabels[code])
				}
			}
		}
	}
	return next
}

// prune drops the series of every console that is no longer registered.
func (m *Metrics) prune() {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.consoles.Load()
	for id := range cur {
		if !m.cfg.IsConsole(id) {
			next := m.pruned(cur, len(cur))
			m.consoles.Store(&next)
			return
		}
	}
}

// Handler serves the metrics in the format the scraper asks for (the text format when it asks
// for none). It judges nothing: the caller must have been admitted (SPEC G4).
func (m *Metrics) Handler() http.Handler {
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	if m.cfg.Log != nil {
		opts.ErrorLog = slogPrintln{m.cfg.Log}
	}
	return promhttp.HandlerFor(m.reg, opts)
}

// requestsCollector is fleet_requests_total, pruned of deregistered consoles before each scrape.
type requestsCollector struct{ m *Metrics }

func (c requestsCollector) Describe(ch chan<- *prometheus.Desc) { c.m.requests.Describe(ch) }

func (c requestsCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.prune()
	c.m.requests.Collect(ch)
}

var consolesDesc = prometheus.NewDesc("fleet_consoles",
	"Registered consoles by health: up (the last probe or forward reached it), down, unknown (not probed yet).",
	[]string{"health"}, nil)

// consolesCollector is fleet_consoles{health}, every health word always present.
type consolesCollector struct{ byHealth func() map[string]int }

func (c consolesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- consolesDesc }

func (c consolesCollector) Collect(ch chan<- prometheus.Metric) {
	var up, down, unknown int
	if c.byHealth != nil {
		for h, n := range c.byHealth() {
			switch h {
			case HealthUp:
				up += n
			case HealthDown:
				down += n
			default:
				unknown += n
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(consolesDesc, prometheus.GaugeValue, float64(up), HealthUp)
	ch <- prometheus.MustNewConstMetric(consolesDesc, prometheus.GaugeValue, float64(down), HealthDown)
	ch <- prometheus.MustNewConstMetric(consolesDesc, prometheus.GaugeValue, float64(unknown), HealthUnknown)
}

// slogPrintln is promhttp's error log as one slog line.
type slogPrintln struct{ log *slog.Logger }

func (l slogPrintln) Println(v ...any) {
	l.log.Error("fleet.metrics-gather", "error", fmt.Sprint(v...))
}
