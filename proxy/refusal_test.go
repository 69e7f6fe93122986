package proxy

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRefusalLogDetailOnlyInLog_S11: a Refusal's LogDetail — this machine's set-up, for the
// operator — is in its one fleet.rejected line (as "why", next to the page's "detail"), and never
// on the page, in X-Fleet-Reason or in Error: the page answers whoever sent the request.
func TestRefusalLogDetailOnlyInLog_S11(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	const why = "tailscaled runs an outbound proxy (--socks5-server=100.101.102.1:1055)"
	ref := &Refusal{Status: http.StatusUnauthorized, Reason: "tcp-forwardable",
		Detail: "publish fleet on its unix-socket door", LogDetail: why}
	w := httptest.NewRecorder()
	WriteRefusal(w, httptest.NewRequest("GET", "/c/alpha/", nil), log, ref, "door", "tailnet")

	if body := w.Body.String(); strings.Contains(body, "1055") || !strings.Contains(body, ref.Detail) {
		t.Errorf("the page: %q; want its detail, never the log's why", body)
	}
	for name, v := range w.Header() {
		if strings.Contains(strings.Join(v, " "), "1055") {
			t.Errorf("the answer's %s shows the log's why: %q", name, v)
		}
	}
	if strings.Contains(ref.Error(), "1055") {
		t.Errorf("Error() %q shows the log's why", ref.Error())
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Fatalf("want one log line, got %d: %s", n, logs.String())
	}
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["msg"] != EventRejected || line["reason"] != "tcp-forwardable" || line["detail"] != ref.Detail || line["why"] != why || line["door"] != "tailnet" {
		t.Errorf("the log line: %v", line)
	}

	// Without a LogDetail, no "why".
	logs.Reset()
	WriteRefusal(httptest.NewRecorder(), httptest.NewRequest("GET", "/c/alpha/", nil), log, Refuse(404, "unknown-console", "no such console"))
	if strings.Contains(logs.String(), `"why"`) {
		t.Errorf("a refusal without LogDetail logs a why: %s", logs.String())
	}
}

// TestPageHeaders_S12: SetPageHeaders, sent with every page and JSON answer fleet writes itself:
// no site may frame it, nothing is sniffed, nothing is loaded nor run but fleet's own stylesheet
// (style-src 'self', SPEC U1), Referer only to itself; never an inline style nor a script.
// WriteRefusal sends it.
func TestPageHeaders_S12(t *testing.T) {
	h := http.Header{}
	SetPageHeaders(h)
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}

	w := httptest.NewRecorder()
	WriteRefusal(w, httptest.NewRequest("GET", "/c/alpha/hooks", nil), nil, Refuse(403, "hooks", "no"))
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("a refusal page's %s: %q, want %q", k, got, v)
		}
	}
}
