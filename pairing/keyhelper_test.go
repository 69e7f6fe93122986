package pairing

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/scrypt"
)

// TestScryptHelperProcess is the helper side of the tests below: run as a child process with
// FLEET_SCRYPT_HELPER=1, it serves one request on stdin; otherwise it does nothing.
func TestScryptHelperProcess(t *testing.T) {
	if os.Getenv("FLEET_SCRYPT_HELPER") != "1" {
		return
	}
	if err := ServeKeyHelper(os.Stdin, os.Stdout); err != nil {
		os.Stderr.WriteString(err.Error())
		os.Exit(1)
	}
	os.Exit(0)
}

func helperKeyFunc(t *testing.T) KeyFunc {
	t.Setenv("FLEET_SCRYPT_HELPER", "1")
	return HelperProcessKeyFunc(os.Args[0], "-test.run=^TestScryptHelperProcess$")
}

// TestHelperProcessKey_R8: scrypt computed in a helper process is the same key, the helper refuses
// a cost outside the limits a stored hash may ask for, and a real password check passes through it.
func TestHelperProcessKey_R8(t *testing.T) {
	f := helperKeyFunc(t)
	salt := bytes.Repeat([]byte{7}, saltLen)
	want, err := scrypt.Key([]byte("correct horse"), salt, 1<<14, 8, 1, keyLen)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f([]byte("correct horse"), salt, 1<<14, 8, 1, keyLen)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("helper key %x, %v; want %x", got, err, want)
	}
	for _, bad := range []struct{ n, r, p int }{{1 << 30, 8, 1}, {1 << 14, 0, 1}, {1 << 14, 8, 999}, {1000, 8, 1}} {
		if _, err := f([]byte("x"), salt, bad.n, bad.r, bad.p, keyLen); err == nil || !strings.Contains(err.Error(), "outside the limits") {
			t.Errorf("N=%d r=%d p=%d: %v, want a refusal", bad.n, bad.r, bad.p, err)
		}
	}

	stored, err := HashPassword([]byte("correct horse battery"))
	if err != nil {
		t.Fatal(err)
	}
	UseKeyFunc(f)
	t.Cleanup(func() { UseKeyFunc(nil) })
	if ok, err := CheckPasswordContext(context.Background(), stored, []byte("correct horse battery")); !ok || err != nil {
		t.Fatalf("right password through the helper: %v %v", ok, err)
	}
	if ok, err := CheckPasswordContext(context.Background(), stored, []byte("wrong horse battery")); ok || err != nil {
		t.Fatalf("wrong password through the helper: %v %v", ok, err)
	}
}
