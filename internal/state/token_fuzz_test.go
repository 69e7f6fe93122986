package state

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"testing"
)

// tokenErr is every error ParseToken may give: fixed words and at most a count, never a piece of
// what the file held.
var tokenErr = regexp.MustCompile(`^(not one line of base64url|not base64url|too short: [0-9]+ bytes, want at least [0-9]+)$`)

// FuzzParseToken: whatever a token file holds, ParseToken never panics; what it accepts is one
// line of base64url without padding that decodes to at least TokenBytes bytes, spelled as in the
// file (only one line end and trailing '=' taken off); and its error is one of its fixed
// sentences, so it can never carry the token (or anything else of the file) into a log. The seed
// corpus is in testdata/fuzz/FuzzParseToken.
func FuzzParseToken(f *testing.F) {
	tok, err := NewToken()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(tok + "\n"))
	f.Add([]byte(tok))
	f.Add([]byte(tok + "\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseToken(data)
		if err != nil {
			if got != "" {
				t.Fatalf("error %v came with a token", err)
			}
			if !tokenErr.MatchString(err.Error()) {
				t.Fatalf("error %q is not one of ParseToken's fixed sentences", err)
			}
			return
		}
		raw, err := base64.RawURLEncoding.DecodeString(got)
		if err != nil || len(raw) < TokenBytes {
			t.Fatalf("accepted %q: decodes to %d bytes, %v", got, len(raw), err)
		}
		if bytes.ContainsAny([]byte(got), "\r\n \t=") {
			t.Fatalf("accepted %q: not one line of unpadded base64url", got)
		}
		// Spelled as in the file: the file is the token, one line end and padding at most after it.
		rest, ok := bytes.CutPrefix(data, []byte(got))
		if !ok {
			t.Fatalf("accepted %q, which is not how the file begins", got)
		}
		rest = bytes.TrimLeft(rest, "=")
		switch string(rest) {
		case "", "\n", "\r", "\r\n":
		default:
			t.Fatalf("accepted %q with %q after it", got, rest)
		}
		// A token accepted once is accepted again as written by LoadOrCreateToken.
		if again, err := ParseToken([]byte(got + "\n")); err != nil || again != got {
			t.Fatalf("%q written back reads as %q, %v", got, again, err)
		}
	})
}
