package look

import (
	"net/http"
	"strconv"
	"strings"
)

// PrefersHTML reports whether r's Accept prefers text/html to application/json (SPEC U5): the
// quality each gets from the most specific range that matches it (RFC 9110 §12.5.1: text/html,
// then text/*, then */*) is higher for text/html, or equal and above zero with text/html named
// and application/json not. A browser's navigation (text/html first, */* at q=0.8) prefers
// HTML; no Accept, */*, fetch()'s default and every JSON client get JSON. A malformed q counts
// as 0.
func PrefersHTML(r *http.Request) bool {
	html, json := match{}, match{}
	for _, line := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(line, ",") {
			mt, params, _ := strings.Cut(part, ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			q := quality(params)
			switch mt {
			case "text/html":
				html.see(3, q)
			case "text/*":
				html.see(2, q)
			case "application/json":
				json.see(3, q)
			case "application/*":
				json.see(2, q)
			case "*/*":
				html.see(1, q)
				json.see(1, q)
			}
		}
	}
	switch {
	case html.q > json.q:
		return true
	case html.q == json.q && html.q > 0:
		return html.specific == 3 && json.specific < 3
	}
	return false
}

// match is the most specific Accept range seen for one type, and its quality.
type match struct {
	specific int // 0 none, 1 */*, 2 type/*, 3 the type itself
	q        float64
}

func (m *match) see(specific int, q float64) {
	if specific > m.specific || (specific == m.specific && q > m.q) {
		m.specific, m.q = specific, q
	}
}

// quality is the q parameter of an Accept range's parameters (";q=0.8;level=1"), 1 without one.
func quality(params string) float64 {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || q < 0 || q > 1 {
			return 0
		}
		return q
	}
	return 1
}
