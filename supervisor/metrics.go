package supervisor

import (
	"net/http"
	"path/filepath"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/metrics"
	"github.com/phase-console/fleet/proxy"
)

// This file is the metrics the supervisor keeps of the requests its doors answered (package audit) and
// GET /fleet/v1/metrics (SPEC G4): local only, as the rest of the API (serveAPI's check), with
// the bearer in metrics.token — a credential that reads metrics and nothing else, so a scraper
// never holds the fleet token, which asserts any login. The fleet token is never taken here, even
// when a metrics.token was made equal to it.

// metricsPath is the metrics endpoint's path.
const metricsPath = "/fleet/v1/metrics"

// metricsState is what the supervisor keeps for G4.
type metricsState struct {
	counts  *metrics.Metrics
	token   *state.Token // follows metrics.token
	handler http.Handler // counts' exposition
}

// newMetrics makes metrics.token at first start, as the fleet token is made (F1, F2), and the
// metrics, which read the registry, the device register and the access log at scrape time.
func (s *Server) newMetrics() (metricsState, error) {
	if _, err := state.LoadOrCreateTokenFile(s.fleetDir, state.MetricsTokenFile); err != nil {
		return metricsState{}, err
	}
	tok := state.NewTokenFollower(filepath.Join(s.fleetDir, state.MetricsTokenFile), s.cfg.Now)
	if _, err := tok.Current(); err != nil {
		return metricsState{}, err
	}
	counts := metrics.New(metrics.Config{
		IsConsole: func(id string) bool {
			_, ok := s.registry.Get(id) // lock-free: it is asked on every forwarded request
			return ok
		},
		ConsolesByHealth: func() map[string]int {
			out := map[string]int{}
			for _, c := range s.registry.List() {
				out[string(c.Health)]++
			}
			return out
		},
		Devices: func() int { return s.ReachStatus().Devices },
		Dropped: s.AccessLogDropped,
		Log:     s.log,
	})
	return metricsState{counts: counts, token: tok, handler: counts.Handler()}, nil
}

// serveMetrics answers GET /fleet/v1/metrics for a local caller (serveAPI has refused any other).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, refuse func(*proxy.Refusal)) {
	if !s.metricsBearerOK(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet-metrics"`)
		refuse(proxy.Refuse(http.StatusUnauthorized, "bearer", "the metrics endpoint needs the bearer from metrics.token; it never takes the fleet token"))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		refuse(proxy.Refuse(http.StatusMethodNotAllowed, "method", "method not allowed here"))
		return
	}
	h := w.Header()
	proxy.SetPageHeaders(h)
	h.Set("Cache-Control", "no-store")
	s.metrics.handler.ServeHTTP(w, r)
}

// metricsBearerOK compares the request's bearer with metrics.token in constant time, after one
// look at the file (a replaced metrics.token is in force for the next scrape), and refuses the
// fleet token whatever metrics.token holds.
func (s *Server) metricsBearerOK(r *http.Request) bool {
	tok, ok := contract.ParseBearer(r.Header)
	if !ok {
		return false
	}
	if changed, err := s.metrics.token.Refresh(); changed && err != nil {
		s.log.Error("fleet.metrics-token-unusable", "error", err.Error()) // never the token
	}
	fleet := s.token.Match(tok)
	return s.metrics.token.Match(tok) && !fleet
}
