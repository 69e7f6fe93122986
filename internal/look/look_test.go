package look

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestPrefersHTML_U5: HTML only when Accept prefers text/html to application/json.
func TestPrefersHTML_U5(t *testing.T) {
	for _, row := range []struct {
		name   string
		accept []string
		html   bool
	}{
		{"U5 no Accept: JSON", nil, false},
		{"U5 */*: JSON", []string{"*/*"}, false},
		{"U5 a browser's navigation", []string{"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"}, true},
		{"U5 application/json", []string{"application/json"}, false},
		{"U5 json preferred by q", []string{"text/html;q=0.5, application/json"}, false},
		{"U5 html preferred by q", []string{"application/json;q=0.5, text/html"}, true},
		{"U5 both named, equal", []string{"text/html, application/json"}, false},
		{"U5 text/html named, json by */*", []string{"text/html, */*"}, true},
		{"U5 text/*", []string{"text/*"}, true},
		{"U5 text/html;q=0", []string{"text/html;q=0, */*"}, false},
		{"U5 upper case", []string{"TEXT/HTML"}, true},
		{"U5 two lines", []string{"application/json;q=0.1", "text/html"}, true},
		{"U5 a malformed q counts 0", []string{"text/html;q=x"}, false},
		{"U5 q above 1 counts 0", []string{"text/html;q=2"}, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for _, a := range row.accept {
			r.Header.Add("Accept", a)
		}
		if got := PrefersHTML(r); got != row.html {
			t.Errorf("%s: PrefersHTML(%q) = %v", row.name, row.accept, got)
		}
	}
}

// TestRefusalEveryReason_U5: every reason word has its words, and its refusal is the page (the
// status and reason shown, what happened, what to do next, a way back) to a browser and one JSON
// object {error, detail} to anyone else; the detail is escaped on the page.
func TestRefusalEveryReason_U5(t *testing.T) {
	const detail = `no <such> "page"`
	for reason := range reasonWords {
		w := httptest.NewRecorder()
		WriteRefusal(w, httptest.NewRequest("GET", "/", nil), 403, reason, detail)
		var body RefusalBody
		if w.Code != 403 || w.Header().Get("Content-Type") != "application/json" ||
			json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error != reason || body.Detail != detail {
			t.Errorf("U5 %s as JSON: %d %q %q", reason, w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
		w = httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", "text/html")
		WriteRefusal(w, r, 403, reason, detail)
		b := w.Body.String()
		for _, want := range []string{`<h1 class="status">403 <code>` + reason + "</code></h1>", `<p class="lead">` + escaped(reasonWords[reason].title),
			"no &lt;such&gt; &#34;page&#34;", "What you can do", `href="/"`, `<link rel="stylesheet" href="/fleet.css">`} {
			if !strings.Contains(b, want) {
				t.Errorf("U5 %s as HTML lacks %q:\n%s", reason, want, b)
			}
		}
		if w.Header().Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(w.Header().Get("Vary"), "Accept") {
			t.Errorf("U5 %s as HTML: %q, Vary %q", reason, w.Header().Get("Content-Type"), w.Header().Get("Vary"))
		}
	}
	w := httptest.NewRecorder()
	WriteRefusal(w, httptest.NewRequest("GET", "/", nil), 418, "a-word-of-tomorrow", "d")
	if w.Code != 418 || !strings.Contains(w.Body.String(), `"error":"a-word-of-tomorrow"`) {
		t.Errorf("an unknown word: %d %s", w.Code, w.Body.String())
	}
}

// escaped is s as html/template writes it in text.
func escaped(s string) string {
	return strings.NewReplacer("'", "&#39;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// TestServeStyle_U1: the stylesheet as text/css, nosniff, and a 304 to a browser that holds it.
func TestServeStyle_U1(t *testing.T) {
	w := httptest.NewRecorder()
	ServeStyle(w, httptest.NewRequest("GET", StylePath, nil))
	etag := w.Header().Get("ETag")
	if w.Code != 200 || w.Body.String() != string(Stylesheet) || w.Header().Get("Content-Type") != "text/css; charset=utf-8" ||
		w.Header().Get("X-Content-Type-Options") != "nosniff" || etag == "" {
		t.Fatalf("GET: %d %v", w.Code, w.Header())
	}
	r := httptest.NewRequest("GET", StylePath, nil)
	r.Header.Set("If-None-Match", etag)
	w = httptest.NewRecorder()
	ServeStyle(w, r)
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("revalidated: %d, %d bytes", w.Code, w.Body.Len())
	}
}

// TestConsoleDown_U6: the page names the console and reloads itself; a script gets JSON.
func TestConsoleDown_U6(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/c/alpha/", nil)
	r.Header.Set("Accept", "text/html")
	WriteConsoleDown(w, r, "alpha")
	b := w.Body.String()
	if w.Code != http.StatusBadGateway || !strings.Contains(b, "<code>alpha</code> is not answering") ||
		!strings.Contains(b, `<meta http-equiv="refresh" content="`+strconv.Itoa(DownRefresh)+`">`) {
		t.Errorf("U6 the console-down page: %d\n%s", w.Code, b)
	}
	w = httptest.NewRecorder()
	WriteConsoleDown(w, httptest.NewRequest("GET", "/c/alpha/", nil), "alpha")
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), `"error":"console-down"`) {
		t.Errorf("U6 console-down to a script: %d %s", w.Code, w.Body.String())
	}
}
