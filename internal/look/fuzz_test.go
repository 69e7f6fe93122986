package look

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzPrefersHTML_U5: any Accept line is judged without a panic, and HTML is chosen only for a
// line that names text/html, text/* or */* at all (a caller that asked for neither gets JSON).
func FuzzPrefersHTML_U5(f *testing.F) {
	for _, s := range []string{
		"", "*/*", "text/html", "application/json", "text/html;q=0.5, application/json",
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/*;q=0.1",
		"text/html;q=x", "text/html;q=1.5", ";;;,,,", "TEXT/HTML; Q=0.9", "text/html;level=1;q=0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Accept"] = []string{accept}
		got := PrefersHTML(r)
		low := strings.ToLower(accept)
		if got && !strings.Contains(low, "text/html") && !strings.Contains(low, "text/*") && !strings.Contains(low, "*/*") {
			t.Errorf("PrefersHTML(%q) = true, though it names no text/html, text/* nor */*", accept)
		}
		// Naming application/json at q=1 before anything else never turns into HTML.
		r.Header["Accept"] = []string{"application/json, " + accept}
		if PrefersHTML(r) && !strings.Contains(low, "text/html") && !strings.Contains(low, "text/*") {
			t.Errorf("PrefersHTML(%q) = true with application/json first", r.Header["Accept"])
		}
	})
}
