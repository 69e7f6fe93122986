package access

import (
	"errors"
	"strings"
	"testing"
)

// TestParsePattern_G1: a console id, a prefix of one and "*", any case; nothing else.
func TestParsePattern_G1(t *testing.T) {
	for _, row := range []struct{ in, want string }{
		{"alpha", "alpha"}, {"ALPHA", "alpha"}, {"Build-*", "build-*"}, {"*", "*"}, {"a*", "a*"},
		{"0", "0"}, {strings.Repeat("a", 63), strings.Repeat("a", 63)}, {strings.Repeat("a", 62) + "*", strings.Repeat("a", 62) + "*"},
		{"", ""}, {"**", ""}, {"*a", ""}, {"a*b", ""}, {"-a", ""}, {"-*", ""}, {"a b", ""}, {" a", ""},
		{"a_b", ""}, {"a.b", ""}, {"\u212Aappa", ""}, {"é", ""}, {strings.Repeat("a", 64), ""},
		{strings.Repeat("a", 63) + "*", ""}, {"a**", ""}, {"a*,b", ""},
	} {
		got, err := ParsePattern(row.in)
		if row.want == "" {
			if err == nil || !errors.Is(err, ErrPattern) {
				t.Errorf("ParsePattern(%q) = %q, %v; want an ErrPattern", row.in, got, err)
			}
			continue
		}
		if err != nil || got != row.want {
			t.Errorf("ParsePattern(%q) = %q, %v; want %q", row.in, got, err, row.want)
		}
	}
}

// TestGrantUnion_G1: a Grant is the union of its patterns, and says so in Patterns.
func TestGrantUnion_G1(t *testing.T) {
	var b Builder
	for _, l := range [][]string{{"alpha", "build-*"}, {"BUILD-x*", "beta"}, {"build-1"}} {
		if err := b.AddAll(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddAll([]string{"gamma", "no*pe"}); err == nil {
		t.Fatal("a list with a bad pattern was added")
	}
	g := b.Grant()
	if got := g.String(); got != "alpha,beta,build-*" {
		t.Errorf("patterns %q", got)
	}
	for id, want := range map[string]bool{"alpha": true, "beta": true, "build-": true, "build-7": true, "gamma": false, "alph": false, "alpha2": false, "": false} {
		if g.Allows(id) != want {
			t.Errorf("Allows(%q) = %v", id, !want)
		}
	}
	var nilGrant *Grant
	if nilGrant.Allows("alpha") || Nothing.Allows("alpha") || !Everything.Allows("x") || Everything.Allows("") {
		t.Error("nil, Nothing or Everything")
	}
	var all Builder
	all.AddAll([]string{"alpha", "*"})
	if all.Grant() != Everything || Nothing.String() != "(none)" || !nilGrant.Empty() {
		t.Error("* is every console; no pattern is (none)")
	}
}

// TestParseList_G1 is `fleet reach pair --consoles`.
func TestParseList_G1(t *testing.T) {
	g, err := ParseList(" alpha , Build-* ")
	if err != nil || g.String() != "alpha,build-*" {
		t.Errorf("got %v, %v", g, err)
	}
	for _, bad := range []string{"", " ", "alpha,", "alpha,,beta", "al pha"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) accepted", bad)
		}
	}
}

// TestAllowsAllocatesNothing_G1: the check on every request allocates nothing.
func TestAllowsAllocatesNothing_G1(t *testing.T) {
	g, _ := NewGrant([]string{"alpha", "build-*"})
	if n := testing.AllocsPerRun(100, func() { g.Allows("build-1"); g.Allows("alpha"); g.Allows("zeta") }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
