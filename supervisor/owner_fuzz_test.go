package supervisor

import (
	"bytes"
	"encoding/base64"
	"testing"
	"time"
)

// FuzzOwnerToken_U4: whatever a caller writes in the owner's form field token, and under
// whichever login, ownerTokens.valid never panics and accepts nothing but a token this process
// made for that very login (its bytes; base64 may spell them more than one way).
func FuzzOwnerToken_U4(f *testing.F) {
	o, err := newOwnerTokens()
	if err != nil {
		f.Fatal(err)
	}
	const alice = "alice@example.com"
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	good := o.token(alice, now)
	goodRaw, _ := base64.RawURLEncoding.DecodeString(good)
	f.Add(alice, good)
	f.Add("bob@example.com", good)
	f.Add(alice, good[:len(good)-1])
	f.Add(alice, good+"A")
	f.Add(alice, "")
	f.Add("", good)
	f.Fuzz(func(t *testing.T, login, tok string) {
		if !o.valid(login, tok, now) {
			return
		}
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if login != alice || err != nil || !bytes.Equal(raw, goodRaw) {
			t.Fatalf("valid(%q, %q): a token this process did not make for that login", login, tok)
		}
	})
}
