package proxy

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJudgePath checks SPEC S7's invariant: a forwarded path is never under hooks and equals the
// judged path. For every input that JudgePath accepts, the Route is canonical, its first segment is
// not hooks, the path that net/http's ReverseProxy sends for it is judged to the same Route, and it
// agrees with an independent decoding of the input by net/url.
func FuzzJudgePath(f *testing.F) {
	for _, s := range []string{
		"/c/alpha/", "/c/alpha", "/c/alpha/a/b/", "/c/ALPHA/x?q=1", "/%63/%61/",
		"/c/a/hooks", "/c/a/hooks/", "/c/a/HOOKS/x", "/c/a/%68ooks", "/c/a/hoo%4Bs",
		"/c/a/hoo%E2%84%AAs", "/c/a/hook%C5%BF", "/c/a/hooks/../x", "/c/a/%2e%2e/hooks",
		"/c/a/%252e", "/c/a/x%2Fy", "/c/a/x%5C", "/c/a/%00", "/c/a/;x", "/c/a//x", "//c/a/",
		"/c/a/./x", "/c/a/%ff", "/c/a/%", "/c/a/%G1", "/c/%E2%84%AA/", "/c/a/x%20y", "/c/a/x%3Fy",
		"/c/a/ä", "*", "", "http://h/c/a/", "/", "/c/", "/fleet/v1/consoles",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, ref := JudgePath(in)
		if ref != nil {
			if r != (Route{}) {
				t.Fatalf("refused %q (%v) with a route %+v", in, ref, r)
			}
			checkRefusal(t, in, ref)
			return
		}
		checkRoute(t, r)
		if !IsConsolePath(in) {
			t.Fatalf("accepted %q but IsConsolePath is false", in)
		}

		// The path net/http sends is judged to the same Route.
		esc := (&url.URL{Path: r.Path}).EscapedPath()
		if back, err := url.PathUnescape(esc); err != nil || back != r.Path {
			t.Fatalf("escaped path %q of %q unescapes to %q, %v", esc, r.Path, back, err)
		}
		r2, ref2 := JudgePath("/c/" + r.ID + esc)
		if ref2 != nil || r2 != r {
			t.Fatalf("%q → %+v, but re-judging %q gives %+v %v", in, r, "/c/"+r.ID+esc, r2, ref2)
		}

		// The forwarded path is the judged one: net/url decodes the raw path to /<c>/<id><Path>.
		raw, _, _ := strings.Cut(in, "?")
		full, err := url.PathUnescape(raw)
		if err != nil {
			t.Fatalf("accepted %q but net/url cannot decode it: %v", in, err)
		}
		prefix, ok := strings.CutSuffix(full, r.Path)
		if !ok {
			t.Fatalf("accepted %q: decoded %q does not end in Path %q", in, full, r.Path)
		}
		parts := strings.Split(prefix, "/")
		if len(parts) != 3 || parts[0] != "" || !strings.EqualFold(parts[1], "c") || strings.ToLower(parts[2]) != r.ID {
			t.Fatalf("accepted %q: decoded prefix %q does not name /c/%s", in, prefix, r.ID)
		}
	})
}

// checkRoute checks the shape JudgePath promises for an accepted Route.
func checkRoute(t *testing.T, r Route) {
	t.Helper()
	if n := len(r.ID); n < 1 || n > 63 || r.ID[0] == '-' {
		t.Fatalf("bad id %q", r.ID)
	}
	for _, c := range []byte(r.ID) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			t.Fatalf("bad id %q", r.ID)
		}
	}
	p := r.Path
	if !strings.HasPrefix(p, "/") {
		t.Fatalf("path %q does not start with /", p)
	}
	if !utf8.ValidString(p) || strings.ContainsAny(p, "\\;#%\x00\x7f") {
		t.Fatalf("path %q holds a refused character", p)
	}
	for _, c := range []byte(p) {
		if c < 0x20 {
			t.Fatalf("path %q holds a control byte", p)
		}
	}
	if p != "/" {
		// No empty, "." or ".." segment, apart from one trailing slash.
		if trimmed := strings.TrimSuffix(p, "/"); path.Clean(trimmed) != trimmed {
			t.Fatalf("path %q is not canonical", p)
		}
	}
	first, _, _ := strings.Cut(p[1:], "/")
	if strings.EqualFold(first, "hooks") {
		t.Fatalf("path %q is under hooks", p)
	}
}

// checkRefusal checks that a refusal is one of JudgePath's three answers and leaks no query.
func checkRefusal(t *testing.T, in string, ref *Refusal) {
	t.Helper()
	switch {
	case ref.Status == http.StatusBadRequest && ref.Reason == ReasonBadPath:
	case ref.Status == http.StatusForbidden && ref.Reason == ReasonHooks:
	case ref.Status == http.StatusPermanentRedirect && ref.Reason == ReasonRedirect:
		// Detail is the console root "/c/<id>/", which is accepted as such.
		r, rr := JudgePath(ref.Detail)
		if rr != nil || r.Path != "/" || ref.Detail != "/c/"+r.ID+"/" || !IsConsolePath(in) {
			t.Fatalf("redirect of %q to %q, which is not a console root (%v)", in, ref.Detail, rr)
		}
	default:
		t.Fatalf("unexpected refusal of %q: %v", in, ref)
	}
	if len(ref.Detail) > 80 {
		t.Fatalf("detail of %q too long: %q", in, ref.Detail)
	}
}
