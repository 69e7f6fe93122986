package doortest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// BrowserAccept is the Accept line of a browser's navigation, which prefers text/html (SPEC U5).
const BrowserAccept = "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// InBothLanguages runs check as two subtests of t, name+" JSON" and name+" HTML": with extra as
// it is (a script's request, no Accept: JSON) and with BrowserAccept before it (a browser's:
// HTML), html saying which (SPEC U5).
func InBothLanguages(t *testing.T, name string, extra []string, check func(t *testing.T, extra []string, html bool)) {
	t.Helper()
	t.Run(name+" JSON", func(t *testing.T) { check(t, extra, false) })
	t.Run(name+" HTML", func(t *testing.T) { check(t, append([]string{BrowserAccept}, extra...), true) })
}

// WantRefusalIn checks a refusal as read off the wire in the language SPEC U5 gives it: status,
// X-Fleet-Reason and, when html, the refusal page (text/html, in fleet's look, naming the reason
// and what to do next); else exactly one JSON object {"error":reason,"detail":<a sentence>} as
// application/json.
func WantRefusalIn(t *testing.T, r Response, status int, reason string, html bool) {
	t.Helper()
	if r.Status != status || r.Reason != reason {
		t.Fatalf("got %d %q, want %d %q (body %q)", r.Status, r.Reason, status, reason, r.Body)
	}
	ct := r.Header.Get("Content-Type")
	if html {
		if ct != "text/html; charset=utf-8" {
			t.Fatalf("U5 Content-Type %q, want the HTML page (body %q)", ct, r.Body)
		}
		for _, want := range []string{`<html lang="en">`, `<link rel="stylesheet" href="/fleet.css">`,
			`<h1 class="status">` + strconv.Itoa(status) + " <code>" + reason + "</code></h1>", `<p class="lead">`, "What you can do"} {
			if !strings.Contains(r.Body, want) {
				t.Errorf("U5 the refusal page lacks %q:\n%s", want, r.Body)
			}
		}
		return
	}
	if ct != "application/json" {
		t.Fatalf("U5 Content-Type %q, want application/json (body %q)", ct, r.Body)
	}
	dec := json.NewDecoder(strings.NewReader(r.Body))
	dec.DisallowUnknownFields()
	var body struct{ Error, Detail string }
	if err := dec.Decode(&body); err != nil || dec.More() {
		t.Fatalf("U5 body %q is not one JSON object {error, detail}: %v", r.Body, err)
	}
	if body.Error != reason || body.Detail == "" || strings.Contains(body.Detail, "\n") {
		t.Errorf("U5 body %+v, want error %q and a one-line detail", body, reason)
	}
}
