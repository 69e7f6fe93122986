package pairing

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/scrypt"
)

// reachDir is a fresh pairing folder path (not yet created) in a private temporary folder.
func reachDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "fleet", "reach")
}

// cheapScrypt makes HashPassword use ln=4 and lets a stored hash ask for it, for the duration of
// the test, so that tests that are not about the cost run fast.
func cheapScrypt(t *testing.T) {
	t.Helper()
	oldHash, oldMin := hashLogN, minLogN
	hashLogN, minLogN = 4, 4
	t.Cleanup(func() { hashLogN, minLogN = oldHash, oldMin })
}

// countScrypt counts the scrypt computations started from now on in the test.
func countScrypt(t *testing.T) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	old := scryptKey
	scryptKey = func(pw, salt []byte, N, r, p, keyLen int) ([]byte, error) {
		n.Add(1)
		return scrypt.Key(pw, salt, N, r, p, keyLen)
	}
	t.Cleanup(func() { scryptKey = old })
	return &n
}

// fileUnchanged fails the test if path's contents or mode differ from what they were at the call.
func fileUnchanged(t *testing.T, path string) func() {
	t.Helper()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	return func() {
		t.Helper()
		after, _ := os.ReadFile(path)
		st2, _ := os.Stat(path)
		if string(after) != string(before) || st2.Mode() != st.Mode() {
			t.Errorf("%s changed: mode %v -> %v, %q -> %q", path, st.Mode(), st2.Mode(), before, after)
		}
	}
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an error containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("err = %v, want it to contain %q", err, p)
		}
	}
}

// recorder collects calls of a func(string) subscriber.
type recorder struct {
	mu  sync.Mutex
	ids []string
	ch  chan string
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 100)} }

func (r *recorder) fn(id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	r.ch <- id
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// redeem is RedeemCode for the tests that look only at the name a code was issued with.
func redeem(dir, code string, clock func() time.Time, checkPassword func() (bool, error)) (string, error) {
	issued, err := RedeemCode(dir, code, clock, checkPassword)
	return issued.Name, err
}
