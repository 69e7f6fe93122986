package proxy

import (
	"net/url"
	"strings"
	"testing"
)

func TestJudgePath_S7(t *testing.T) {
	const (
		ok       = 0
		bad      = 400
		hooks    = 403
		redirect = 308
	)
	id63 := strings.Repeat("a", 63)
	tests := []struct {
		name   string
		in     string
		status int    // 0: accepted
		id     string // accepted rows
		path   string // accepted rows
		detail string // checked when not empty
	}{
		// Accepted.
		{name: "S7 trailing slash ok", in: "/c/alpha/", status: ok, id: "alpha", path: "/"},
		{name: "S7 nested trailing slash ok", in: "/c/alpha/a/b/", status: ok, id: "alpha", path: "/a/b/"},
		{name: "S7 nested no trailing slash", in: "/c/alpha/a/b", status: ok, id: "alpha", path: "/a/b"},
		{name: "S7 query not judged", in: "/c/alpha/x?a=%2F..%00;#&b=/hooks", status: ok, id: "alpha", path: "/x"},
		{name: "S7 query on root", in: "/c/alpha/?q=1", status: ok, id: "alpha", path: "/"},
		{name: "S7 uppercase id", in: "/c/ALPHA/", status: ok, id: "alpha", path: "/"},
		{name: "S7 uppercase C", in: "/C/alpha/x", status: ok, id: "alpha", path: "/x"},
		{name: "S7 encoded c and id", in: "/%63/%61lpha/", status: ok, id: "alpha", path: "/"},
		{name: "S7 id digits and dash", in: "/c/0-a-9/", status: ok, id: "0-a-9", path: "/"},
		{name: "S7 id 63 long", in: "/c/" + id63 + "/", status: ok, id: id63, path: "/"},
		{name: "S7 encoded space ok", in: "/c/a/x%20y", status: ok, id: "a", path: "/x y"},
		{name: "S7 encoded question mark", in: "/c/a/x%3Fy", status: ok, id: "a", path: "/x?y"},
		{name: "S7 utf8 ok", in: "/c/a/%C3%A4/%e2%82%ac", status: ok, id: "a", path: "/ä/€"},
		{name: "S7 raw utf8 ok", in: "/c/a/ä", status: ok, id: "a", path: "/ä"},
		{name: "S7 three dots ok", in: "/c/a/.../x", status: ok, id: "a", path: "/.../x"},
		{name: "S7 dot in name ok", in: "/c/a/.well-known/x.js", status: ok, id: "a", path: "/.well-known/x.js"},
		{name: "S7 hooks not first segment", in: "/c/a/x/hooks", status: ok, id: "a", path: "/x/hooks"},
		{name: "S7 hooksy prefix", in: "/c/a/hooksx/", status: ok, id: "a", path: "/hooksx/"},
		{name: "S7 hook singular", in: "/c/a/hook", status: ok, id: "a", path: "/hook"},
		{name: "S7 plus kept", in: "/c/a/a+b", status: ok, id: "a", path: "/a+b"},

		// Hooks.
		{name: "S7 hooks", in: "/c/a/hooks", status: hooks},
		{name: "S7 hooks trailing slash", in: "/c/a/hooks/", status: hooks},
		{name: "S7 hooks below", in: "/c/a/hooks/permission-request", status: hooks},
		{name: "S7 HOOKS uppercase", in: "/c/a/HOOKS/x", status: hooks},
		{name: "S7 %68ooks", in: "/c/a/%68ooks", status: hooks},
		{name: "S7 encoded h", in: "/c/a/%68ooks/permission-request", status: hooks},
		{name: "S7 hoo%4Bs", in: "/c/a/hoo%4Bs", status: hooks},
		{name: "S7 fully encoded hooks", in: "/c/a/%68%6f%6F%6b%73/", status: hooks},
		{name: "S7 Kelvin hooks", in: "/c/a/hoo%E2%84%AAs", status: hooks},
		{name: "S7 raw Kelvin hooks", in: "/c/a/hoo\u212as/x", status: hooks},
		{name: "S7 long s hooks", in: "/c/a/hook%C5%BF", status: hooks},
		{name: "S7 hooks with query", in: "/c/a/hooks?x=1", status: hooks},
		{name: "S7 hooks uppercase id", in: "/C/A/Hooks", status: hooks},

		// Redirect.
		{name: "S7 redirect no slash", in: "/c/alpha", status: redirect, detail: "/c/alpha/"},
		{name: "S7 redirect lower-cases id", in: "/C/Alpha?x=1", status: redirect, detail: "/c/alpha/"},

		// Not canonical.
		{name: "S7 empty", in: "", status: bad},
		{name: "S7 absolute-form", in: "http://host/c/a/", status: bad},
		{name: "S7 asterisk", in: "*", status: bad},
		{name: "S7 root", in: "/", status: bad, detail: "not a console path"},
		{name: "S7 not console", in: "/fleet/v1/consoles", status: bad, detail: "not a console path"},
		{name: "S7 /c alone", in: "/c", status: bad},
		{name: "S7 /c/ alone", in: "/c/", status: bad},
		{name: "S7 //", in: "/c/a//x", status: bad},
		{name: "S7 leading //", in: "//c/a/x", status: bad},
		{name: "S7 double trailing slash", in: "/c/a/x//", status: bad},
		{name: "S7 // after id", in: "/c/a//", status: bad},
		{name: "S7 /./", in: "/c/a/./x", status: bad},
		{name: "S7 /../", in: "/c/a/../b/", status: bad},
		{name: "S7 trailing ..", in: "/c/a/x/..", status: bad},
		{name: "S7 .. as id", in: "/c/../a/", status: bad},
		{name: "S7 %2e", in: "/c/a/%2e/x", status: bad},
		{name: "S7 %2e%2e", in: "/c/a/%2e%2e/hooks", status: bad},
		{name: "S7 %2E%2e mixed", in: "/c/a/.%2E/", status: bad},
		{name: "S7 encoded slash %2F", in: "/c/a/x%2Fy", status: bad},
		{name: "S7 encoded slash lower %2f", in: "/c/a/hooks%2f", status: bad},
		{name: "S7 encoded backslash %5C", in: "/c/a/x%5Cy", status: bad},
		{name: "S7 backslash", in: "/c/a/x\\y", status: bad},
		{name: "S7 encoded NUL %00", in: "/c/a/x%00", status: bad},
		{name: "S7 raw NUL", in: "/c/a/x\x00", status: bad},
		{name: "S7 semicolon", in: "/c/a/hooks;x", status: bad},
		{name: "S7 encoded semicolon %3B", in: "/c/a/x%3By", status: bad},
		{name: "S7 hash", in: "/c/a/x#y", status: bad},
		{name: "S7 encoded hash %23", in: "/c/a/x%23y", status: bad},
		{name: "S7 double-encoded %252e", in: "/c/a/%252e%252e/", status: bad},
		{name: "S7 double-encoded %2568", in: "/c/a/%2568ooks", status: bad},
		{name: "S7 malformed %", in: "/c/a/x%", status: bad},
		{name: "S7 malformed %G1", in: "/c/a/%G1", status: bad},
		{name: "S7 malformed %4", in: "/c/a/%4", status: bad},
		{name: "S7 invalid utf8 %ff", in: "/c/a/%ff", status: bad},
		{name: "S7 invalid utf8 raw", in: "/c/a/\xff", status: bad},
		{name: "S7 overlong utf8 slash", in: "/c/a/%C0%AF", status: bad},
		{name: "S7 raw space", in: "/c/a/x y", status: bad},
		{name: "S7 raw tab", in: "/c/a/x\ty", status: bad},
		{name: "S7 raw DEL", in: "/c/a/x\x7f", status: bad},
		{name: "S7 encoded control %0A", in: "/c/a/x%0Ay", status: bad},
		{name: "S7 encoded DEL %7F", in: "/c/a/x%7F", status: bad},
		{name: "S7 id too long", in: "/c/" + id63 + "a/", status: bad},
		{name: "S7 id leading dash", in: "/c/-a/", status: bad},
		{name: "S7 id underscore", in: "/c/a_b/", status: bad},
		{name: "S7 id dot", in: "/c/a.b/", status: bad},
		{name: "S7 id Kelvin not k", in: "/c/%E2%84%AA/", status: bad},
		{name: "S7 id encoded slash", in: "/c/a%2Fb/", status: bad},
		{name: "S7 first segment cc", in: "/cc/a/", status: bad, detail: "not a console path"},
		{name: "S7 hooks after dot-dot is bad-path", in: "/c/a/hooks/../x", status: bad},
		{name: "S7 hooks then // is bad-path", in: "/c/a/hooks//x", status: bad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ref := JudgePath(tt.in)
			if tt.status == ok {
				if ref != nil {
					t.Fatalf("JudgePath(%q) refused %v, want accepted", tt.in, ref)
				}
				if got.ID != tt.id || got.Path != tt.path {
					t.Fatalf("JudgePath(%q) = %+v, want {ID:%q Path:%q}", tt.in, got, tt.id, tt.path)
				}
				if !IsConsolePath(tt.in) {
					t.Errorf("IsConsolePath(%q) = false for an accepted path", tt.in)
				}
				return
			}
			if ref == nil {
				t.Fatalf("JudgePath(%q) = %+v, want %d", tt.in, got, tt.status)
			}
			if got != (Route{}) {
				t.Errorf("JudgePath(%q) refused but returned route %+v", tt.in, got)
			}
			want := map[int]string{bad: ReasonBadPath, hooks: ReasonHooks, redirect: ReasonRedirect}[tt.status]
			if ref.Status != tt.status || ref.Reason != want {
				t.Fatalf("JudgePath(%q) = %d %s (%s), want %d %s", tt.in, ref.Status, ref.Reason, ref.Detail, tt.status, want)
			}
			if tt.detail != "" && ref.Detail != tt.detail {
				t.Errorf("JudgePath(%q) detail = %q, want %q", tt.in, ref.Detail, tt.detail)
			}
			if i := strings.IndexByte(tt.in, '?'); i >= 0 && strings.Contains(ref.Detail, tt.in[i:]) {
				t.Errorf("JudgePath(%q) detail %q carries the query", tt.in, ref.Detail)
			}
		})
	}
}

func TestIsConsolePath_S7(t *testing.T) {
	for in, want := range map[string]bool{
		"/c":               true,
		"/c/":              true,
		"/C/alpha/x":       true,
		"/c/alpha?x=/":     true,
		"/%63/alpha/":      true,
		"/c?x":             true,
		"/":                false,
		"":                 false,
		"*":                false,
		"/fleet/v1/x":      false,
		"/cc/a/":           false,
		"//c/a/":           false,
		"/ca.crt":          false,
		"/?c":              false,
		"http://h/c/a/":    false,
		"/c%2Fa/hooks":     false,
		"/%":               false,
		"/fleet?/c/a/hook": false,
	} {
		if got := IsConsolePath(in); got != want {
			t.Errorf("IsConsolePath(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestJudgePath_S7_RoundTrip checks, on the accepted table rows, that what net/http's ReverseProxy
// sends for Route.Path is judged to the same Route.
func TestJudgePath_S7_RoundTrip(t *testing.T) {
	for _, in := range []string{"/c/a/", "/c/a/x%20y/", "/c/a/%C3%A4?q", "/c/a/x%3Fy", "/c/a/a+b!$&'()*,:=@~"} {
		r, ref := JudgePath(in)
		if ref != nil {
			t.Fatalf("JudgePath(%q) refused: %v", in, ref)
		}
		esc := (&url.URL{Path: r.Path}).EscapedPath()
		if r2, ref2 := JudgePath("/c/" + r.ID + esc); ref2 != nil || r2 != r {
			t.Errorf("re-judging %q: %+v %v, want %+v", esc, r2, ref2, r)
		}
	}
}

func BenchmarkJudgePath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		JudgePath("/c/alpha/static/app.js?v=3")
	}
}
