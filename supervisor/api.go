package supervisor

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/proxy"
)

// maxRegistrationBody bounds a registration's JSON.
const maxRegistrationBody = 16 << 10

// serveAPI is /fleet/v1/… (SPEC S8): local callers only, with the fleet bearer — but
// /fleet/v1/metrics, whose bearer is metrics.token's (G4, metrics.go).
//
// A refusal is logged like every other (S11); its body is JSON {"error":"<reason>","detail":"…"}
// (apiRefuser).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rawPath string) {
	refuse := s.apiRefuser(w, r)
	if throughServe(r) {
		refuse(proxy.Refuse(http.StatusForbidden, "local-only", "the fleet API answers only on this machine, never through Tailscale Serve"))
		return
	}
	if rawPath == metricsPath {
		s.serveMetrics(w, r, refuse) // its own bearer, never the fleet token (G4)
		return
	}
	if !s.bearerOK(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet"`)
		refuse(proxy.Refuse(http.StatusUnauthorized, "bearer", "the fleet API needs the bearer from fleet.token"))
		return
	}
	const collection = "/fleet/v1/consoles"
	switch {
	case rawPath == collection && r.Method == http.MethodGet:
		// access_log_dropped: the access-log lines lost since start (G3), for fleet doctor.
		writeJSON(w, http.StatusOK, map[string]any{"consoles": s.registry.List(), "access_log_dropped": s.AccessLogDropped()})
	case rawPath == collection && r.Method == http.MethodPost:
		s.register(w, r)
	case strings.HasPrefix(rawPath, collection+"/") && r.Method == http.MethodDelete:
		id := strings.TrimPrefix(rawPath, collection+"/")
		if !contract.ValidConsoleID(id) {
			refuse(proxy.Refuse(http.StatusNotFound, "unknown-console", "no console is registered with that id"))
			return
		}
		ok, err := s.registry.Delete(id)
		if err != nil {
			s.log.Error("fleet.registry-write", "error", err.Error())
			refuse(proxy.Refuse(http.StatusInternalServerError, "registry", "the registry could not be written; nothing changed"))
			return
		}
		if !ok {
			refuse(proxy.Refuse(http.StatusNotFound, "unknown-console", "no console is registered with that id"))
			return
		}
		s.log.Info("fleet.deregistered", "console", id)
		w.WriteHeader(http.StatusNoContent)
	case rawPath == "/fleet/v1/reach" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.ReachStatus())
	case rawPath == collection || strings.HasPrefix(rawPath, collection+"/"):
		refuse(proxy.Refuse(http.StatusMethodNotAllowed, "method", "method not allowed here"))
	default:
		refuse(proxy.Refuse(http.StatusNotFound, "not-found", "no such API"))
	}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	refuse := s.apiRefuser(w, r)
	var c Console
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRegistrationBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		refuse(proxy.Refuse(http.StatusBadRequest, "bad-registration", "want JSON {\"id\",\"addr\",\"name\"}"))
		return
	}
	if err := ValidateConsole(c); err != nil {
		refuse(proxy.Refuse(http.StatusBadRequest, "bad-registration", err.Error()))
		return
	}
	created, err := s.registry.Put(c)
	if err != nil {
		s.log.Error("fleet.registry-write", "error", err.Error())
		refuse(proxy.Refuse(http.StatusInternalServerError, "registry", "the registry could not be written; nothing changed"))
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.Info("fleet.registered", "console", c.ID, "addr", c.Addr)
	}
	saved, _ := s.registry.Get(c.ID)
	writeJSON(w, status, saved)
}

// apiRefuser returns how the API refuses r: proxy.WriteJSONRefusal, which logs the refusal (S11),
// sets X-Fleet-Reason and answers JSON {"error":"<reason>","detail":"…"} whatever the caller
// asked for (SPEC U5: the registry and metrics endpoints always answer JSON).
func (s *Server) apiRefuser(w http.ResponseWriter, r *http.Request) func(*proxy.Refusal) {
	return func(ref *proxy.Refusal) { proxy.WriteJSONRefusal(w, r, s.log, ref) }
}

// An APIError is the body of a refusal of the fleet API.
type APIError = look.RefusalBody

// bearerOK compares the request's bearer with the fleet token in constant time.
func (s *Server) bearerOK(r *http.Request) bool {
	tok, ok := contract.ParseBearer(r.Header)
	return ok && s.token.MatchFresh(tok) // compares in constant time
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	proxy.SetPageHeaders(w.Header())
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
