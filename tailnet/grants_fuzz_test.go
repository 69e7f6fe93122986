package tailnet

import (
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
)

// FuzzParseCapabilityValue holds the capability value parser (SPEC G1) to its promise on any
// bytes: it never panics; what it accepts is a list, whose Grant — when every pattern is one —
// allows exactly what a plain reading of the patterns allows; and anything it refuses, or any
// list with a pattern that is not one, grants nothing.
func FuzzParseCapabilityValue(f *testing.F) {
	for _, s := range []string{
		`{"consoles":["alpha","build-*","*"]}`,
		`{"consoles":[]}`,
		`{"consoles":["ALPHA"],"later":{"x":[1,2]}}`,
		`{"consoles":"alpha"}`,
		`{"consoles":null}`,
		`["alpha"]`,
		`{"consoles":["a"],"consoles":["b"]}`,
		`{"consoles":["al*pha","-*","\u212Aappa"]}`,
	} {
		f.Add([]byte(s))
	}
	ids := []string{"alpha", "build-1", "build-", "beta", "a", "k", "kappa", "z9-x"}
	f.Fuzz(func(t *testing.T, b []byte) {
		list, err := ParseCapabilityValue(b)
		if err != nil {
			if list != nil {
				t.Fatalf("refused %q but returned %q", b, list)
			}
			return
		}
		if list == nil {
			t.Fatalf("accepted %q as no list", b)
		}
		var bld access.Builder
		if err := bld.AddAll(list); err != nil {
			if !bld.Grant().Empty() {
				t.Fatalf("a list with a bad pattern (%v) granted %v", err, bld.Grant())
			}
			return
		}
		g := bld.Grant()
		for _, id := range ids {
			want := false
			for _, p := range list {
				p = strings.ToLower(p)
				want = want || p == "*" || p == id || strings.HasSuffix(p, "*") && strings.HasPrefix(id, strings.TrimSuffix(p, "*"))
			}
			if got := g.Allows(id); got != want {
				t.Fatalf("%q: Allows(%q) = %v, want %v (grant %v)", list, id, got, want, g)
			}
		}
	})
}
