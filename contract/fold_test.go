package contract

import (
	"strings"
	"testing"
)

// TestEqualFoldASCII: ASCII letters fold, nothing else does — not the Unicode letters that
// strings.EqualFold folds onto ASCII ones.
func TestEqualFoldASCII(t *testing.T) {
	for _, tc := range []struct {
		s, t string
		want bool
	}{
		{"websocket", "WebSocket", true},
		{"HTTPS", "https", true},
		{"", "", true},
		{"close", "close ", false},
		{"web\u017focket", "websocket", false}, // ſ, LATIN SMALL LETTER LONG S
		{"\u017f0", "s0", false},
		{"\u212aeep-alive", "keep-alive", false}, // K, KELVIN SIGN
		{"caf\u00e9", "CAF\u00c9", false},        // é/É: not ASCII, compared exactly
		{"a-b", "A_B", false},
		{"@", "`", false}, // the bytes around 'A'..'Z' and 'a'..'z' do not fold
		{"[", "{", false},
	} {
		if got := EqualFoldASCII(tc.s, tc.t); got != tc.want {
			t.Errorf("EqualFoldASCII(%q, %q) = %v, want %v", tc.s, tc.t, got, tc.want)
		}
	}
}

// FuzzEqualFoldASCII: EqualFoldASCII is byte equality after lowering ASCII letters only.
func FuzzEqualFoldASCII(f *testing.F) {
	f.Add("websocket", "WEBSOCKET")
	f.Add("web\u017focket", "websocket")
	f.Fuzz(func(t *testing.T, s, u string) {
		lower := func(x string) string {
			b := []byte(x)
			for i, c := range b {
				if 'A' <= c && c <= 'Z' {
					b[i] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
		want := lower(s) == lower(u)
		got := EqualFoldASCII(s, u)
		if got != want {
			t.Fatalf("EqualFoldASCII(%q, %q) = %v, want %v", s, u, got, want)
		}
		if got && !strings.EqualFold(s, u) {
			t.Fatalf("EqualFoldASCII(%q, %q), but not strings.EqualFold", s, u)
		}
	})
}
