package supervisor

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/proxy"
)

// maxRegistrationBody bounds a registration's JSON.
const maxRegistrationBody = 16 << 10

// serveAPI is /fleet/v1/… (SPEC S8): local callers only, with the fleet bearer — but
// /fleet/v1/metrics, whose bearer is metrics.token's (G4, metrics.go).
//
// A refusal is logged like every other (S11); its body is JSON {"error":"<reason>","detail":"…"}
// for a JSON client (wantsJSON), the HTML page otherwise.
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

// apiRefuser returns how the API refuses r: proxy.WriteRefusal, which logs the refusal (S11) and
// sets X-Fleet-Reason, with the body in JSON for a JSON client.
func (s *Server) apiRefuser(w http.ResponseWriter, r *http.Request) func(*proxy.Refusal) {
	if !wantsJSON(r) {
		return func(ref *proxy.Refusal) { proxy.WriteRefusal(w, r, s.log, ref) }
	}
	return func(ref *proxy.Refusal) {
		proxy.WriteRefusal(&jsonRefusalWriter{ResponseWriter: w, ref: ref}, r, s.log, ref)
	}
}

// wantsJSON reports whether r comes from a JSON client: it accepts application/json, or it sent a
// JSON body.
func wantsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "application/json") {
				return true
			}
		}
	}
	mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// An APIError is the body of a refusal of the fleet API to a JSON client.
type APIError struct {
	Error  string `json:"error"`  // the reason word, as in X-Fleet-Reason
	Detail string `json:"detail"` // one sentence for a person
}

// jsonRefusalWriter turns proxy.WriteRefusal's answer into JSON: same status and headers (the
// reason in X-Fleet-Reason among them), an APIError body instead of the HTML page.
type jsonRefusalWriter struct {
	http.ResponseWriter
	ref *proxy.Refusal
}

func (w *jsonRefusalWriter) WriteHeader(status int) {
	w.Header().Set("Content-Type", "application/json")
	w.ResponseWriter.WriteHeader(status)
	json.NewEncoder(w.ResponseWriter).Encode(APIError{Error: w.ref.Reason, Detail: w.ref.Detail})
}

// Unwrap lets the door's record of the answer, and http.ResponseController, reach the server's
// writer.
func (w *jsonRefusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Write drops the HTML page.
func (w *jsonRefusalWriter) Write(b []byte) (int, error) { return len(b), nil }

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
