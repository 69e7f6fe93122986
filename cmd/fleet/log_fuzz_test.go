package main

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzParseSince_O8: --since never panics; a value it takes is exactly one of a positive duration
// and a time, and any other is refused with the one message that names the forms.
func FuzzParseSince_O8(f *testing.F) {
	for _, s := range []string{"90m", "7d", "1d12h", "0d", "-1d", "2026-12-01T22:00:00Z", "2026-12-01T23:00:00+01:00", "d", "1d-1h", "99999999999d", "1.5d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, at, err := parseSince(s)
		if err != nil {
			if err != errSince || d != 0 || !at.IsZero() {
				t.Fatalf("%q: %v, %v, %v", s, d, at, err)
			}
			return
		}
		if (d > 0) == !at.IsZero() || d < 0 {
			t.Fatalf("%q: d %v, at %v: want exactly one, d positive", s, d, at)
		}
	})
}

// FuzzAppendSafeJSON_O8: for any line that is JSON, --json's line is JSON with the same values,
// UTF-8, and holds none of the characters it escapes as they are.
func FuzzAppendSafeJSON_O8(f *testing.F) {
	for _, s := range []string{`{"path":"/a"}`, "{\"path\":\"/\u202e\u2028\u0085\x7f\"}", "{\"login\":\"\xff\"}", "{\"a\":1,\t\"b\":[true,null]}", `"\u0000"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		out := appendSafeJSON(nil, raw)
		if !utf8.Valid(out) {
			t.Fatalf("%q: not UTF-8: %q", raw, out)
		}
		for _, r := range string(out) {
			if unsafeInJSONOutput(r) {
				t.Fatalf("%q: %U left as it is in %q", raw, r, out)
			}
		}
		var a, b any
		if err := json.Unmarshal(raw, &a); err != nil {
			return
		}
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatalf("%q: the escaped line %q is not JSON: %v", raw, out, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%q: %v, escaped %v", raw, a, b)
		}
	})
}
