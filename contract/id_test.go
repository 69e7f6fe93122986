package contract

import (
	"regexp"
	"strings"
	"testing"
)

// The grammar as the spec writes it; ValidConsoleID must agree with it on every input.
var consoleIDGrammar = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func TestValidConsoleID_S8(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"alpha", true},
		{"a", true},
		{"0", true},
		{"a-b-9", true},
		{"a-", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-a", false},
		{"Alpha", false}, // lower case only: callers fold first where case is folded (S7)
		{"a_b", false},
		{"a.b", false},
		{"a b", false},
		{"a/b", false},
		{"\u212Aelvin", false},
		{"a\x00", false},
		{"alpha\n", false},
	} {
		if got := ValidConsoleID(tc.id); got != tc.want {
			t.Errorf("ValidConsoleID(%q) = %v, want %v", tc.id, got, tc.want)
		}
		if got := consoleIDGrammar.MatchString(tc.id); got != tc.want {
			t.Errorf("the grammar disagrees with the table on %q", tc.id)
		}
	}
}

func FuzzValidConsoleID(f *testing.F) {
	for _, s := range []string{"alpha", "-a", "A", strings.Repeat("z", 63), "a-\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidConsoleID(id), consoleIDGrammar.MatchString(id); got != want {
			t.Fatalf("ValidConsoleID(%q) = %v, grammar says %v", id, got, want)
		}
	})
}
