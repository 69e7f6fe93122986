package pairing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/scrypt"

	"github.com/phase-console/fleet/internal/state"
)

var storedRE = regexp.MustCompile(`^\$scrypt\$ln=(\d+),r=8,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)

func TestPasswordRoundTrip_R8(t *testing.T) {
	cheapScrypt(t)
	stored, err := HashPassword([]byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	if m := storedRE.FindStringSubmatch(stored); m == nil || m[1] != "4" {
		t.Fatalf("stored %q, want $scrypt$ln=4,r=8,p=1$<22>$<43>", stored)
	}
	for pw, want := range map[string]bool{
		"correct horse":  true,
		"correct horsE":  false,
		"correct horse ": false,
		"":               false,
		"short":          false,
	} {
		ok, err := CheckPasswordContext(context.Background(), stored, []byte(pw))
		if err != nil || ok != want {
			t.Errorf("CheckPasswordContext(context.Background(), %q) = %v, %v; want %v", pw, ok, err, want)
		}
	}
	again, _ := HashPassword([]byte("correct horse"))
	if again == stored {
		t.Error("two hashes of one password are equal: the salt is not fresh")
	}
}

// TestPasswordRealCost_R8 runs the real parameters once: ln=17, r=8, p=1.
func TestPasswordRealCost_R8(t *testing.T) {
	if testing.Short() {
		t.Skip("scrypt at ln=17 takes a while")
	}
	stored, err := HashPassword([]byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	if m := storedRE.FindStringSubmatch(stored); m == nil || m[1] != "17" {
		t.Fatalf("stored %q, want $scrypt$ln=17,r=8,p=1$...", stored)
	}
	if ok, err := CheckPasswordContext(context.Background(), stored, []byte("correct horse")); !ok || err != nil {
		t.Fatalf("CheckPassword = %v, %v", ok, err)
	}
}

func TestPasswordRules_R8(t *testing.T) {
	cheapScrypt(t)
	n := countScrypt(t)
	dir := reachDir(t)
	for _, pw := range []string{"", "1234567", strings.Repeat("x", MaxPasswordLen+1)} {
		if err := SetPassword(dir, []byte(pw)); err == nil {
			t.Errorf("SetPassword(%d bytes) = nil, want refused", len(pw))
		}
	}
	if n.Load() != 0 {
		t.Errorf("%d scrypt runs for refused passwords", n.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, PasswordFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused password left a file: %v", err)
	}
	if err := SetPassword(dir, []byte("12345678")); err != nil {
		t.Fatalf("a password of MinPasswordLen bytes: %v", err)
	}
}

func TestPasswordFile_R8_F1(t *testing.T) {
	cheapScrypt(t)
	dir := reachDir(t)
	if _, err := LoadPassword(dir); !errors.Is(err, ErrNoPassword) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadPassword of nothing = %v, want ErrNoPassword", err)
	}
	if err := SetPassword(dir, []byte("pass word 1")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, PasswordFile)
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %o", st.Mode().Perm())
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("file mode %o", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "pass word") || !strings.HasSuffix(string(raw), "\n") {
		t.Fatalf("file %q", raw)
	}
	stored, err := LoadPassword(dir)
	if err != nil || stored+"\n" != string(raw) {
		t.Fatalf("LoadPassword = %q, %v", stored, err)
	}
	if ok, _ := CheckPasswordContext(context.Background(), stored, []byte("pass word 1")); !ok {
		t.Fatal("the stored password does not match")
	}
	if err := SetPassword(dir, []byte("pass word 2")); err != nil {
		t.Fatal(err)
	}
	stored, _ = LoadPassword(dir)
	if ok, _ := CheckPasswordContext(context.Background(), stored, []byte("pass word 2")); !ok {
		t.Fatal("a new password does not replace the old")
	}

	t.Run("F1 too open is refused, not replaced", func(t *testing.T) {
		os.Chmod(path, 0o640)
		defer os.Chmod(path, 0o600)
		same := fileUnchanged(t, path)
		_, err := LoadPassword(dir)
		mustContain(t, err, path, "chmod 600 "+path)
		err = SetPassword(dir, []byte("pass word 3"))
		var me *state.ModeError
		if !errors.As(err, &me) {
			t.Fatalf("SetPassword over a 0640 file = %v, want a ModeError", err)
		}
		same()
	})
	t.Run("F2 a file that does not parse is an error naming it", func(t *testing.T) {
		os.WriteFile(path, []byte("$scrypt$ln=30,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"), 0o600)
		same := fileUnchanged(t, path)
		_, err := LoadPassword(dir)
		mustContain(t, err, path, "ln=30")
		same()
	})
}

// TestAbsurdStoredHashRefused_R8: a stored string that is malformed or asks for too much work is
// an error before any scrypt runs.
func TestAbsurdStoredHashRefused_R8(t *testing.T) {
	n := countScrypt(t)
	salt := "AAAAAAAAAAAAAAAAAAAAAA"                     // 16 bytes
	key := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // 32 bytes
	good := "$scrypt$ln=17,r=8,p=1$" + salt + "$" + key
	if _, err := parseStored(good); err != nil {
		t.Fatalf("the well-formed base case is refused: %v", err)
	}
	for name, s := range map[string]string{
		"R8 ln=30":                 "$scrypt$ln=30,r=8,p=1$" + salt + "$" + key,
		"R8 ln=21":                 "$scrypt$ln=21,r=8,p=1$" + salt + "$" + key,
		"R8 ln=13":                 "$scrypt$ln=13,r=8,p=1$" + salt + "$" + key,
		"R8 ln=0":                  "$scrypt$ln=0,r=8,p=1$" + salt + "$" + key,
		"R8 ln huge":               "$scrypt$ln=99999999999999999999,r=8,p=1$" + salt + "$" + key,
		"R8 ln leading zero":       "$scrypt$ln=017,r=8,p=1$" + salt + "$" + key,
		"R8 ln signed":             "$scrypt$ln=+17,r=8,p=1$" + salt + "$" + key,
		"R8 ln negative":           "$scrypt$ln=-1,r=8,p=1$" + salt + "$" + key,
		"R8 ln hex":                "$scrypt$ln=0x11,r=8,p=1$" + salt + "$" + key,
		"R8 r=0":                   "$scrypt$ln=17,r=0,p=1$" + salt + "$" + key,
		"R8 r=17":                  "$scrypt$ln=17,r=17,p=1$" + salt + "$" + key,
		"R8 p=0":                   "$scrypt$ln=17,r=8,p=0$" + salt + "$" + key,
		"R8 p=999":                 "$scrypt$ln=17,r=8,p=999$" + salt + "$" + key,
		"R8 memory 2 GiB":          "$scrypt$ln=20,r=16,p=1$" + salt + "$" + key,
		"R8 work 16x":              "$scrypt$ln=18,r=16,p=1$" + salt + "$" + key,
		"R8 work p=4":              "$scrypt$ln=18,r=8,p=4$" + salt + "$" + key,
		"R8 params out of order":   "$scrypt$r=8,ln=17,p=1$" + salt + "$" + key,
		"R8 param missing":         "$scrypt$ln=17,r=8$" + salt + "$" + key,
		"R8 param extra":           "$scrypt$ln=17,r=8,p=1,x=1$" + salt + "$" + key,
		"R8 param empty":           "$scrypt$ln=,r=8,p=1$" + salt + "$" + key,
		"R8 field missing":         "$scrypt$ln=17,r=8,p=1$" + key,
		"R8 field extra":           "$scrypt$ln=17,r=8,p=1$" + salt + "$" + key + "$",
		"R8 field extra inside":    "$scrypt$ln=17,r=8,p=1$$" + salt + "$" + key,
		"R8 no leading dollar":     "scrypt$ln=17,r=8,p=1$" + salt + "$" + key,
		"R8 another kdf":           "$bcrypt$ln=17,r=8,p=1$" + salt + "$" + key,
		"R8 salt not base64":       "$scrypt$ln=17,r=8,p=1$!!!!!!!!!!!!!!!!!!!!!!$" + key,
		"R8 salt padded":           "$scrypt$ln=17,r=8,p=1$" + salt + "==$" + key,
		"R8 salt url alphabet":     "$scrypt$ln=17,r=8,p=1$AAAAAAAAAAAAAAAAAAAA_A$" + key,
		"R8 salt non-zero tail":    "$scrypt$ln=17,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAB$" + key,
		"R8 salt short":            "$scrypt$ln=17,r=8,p=1$AAAAAAAAAAA$" + key,
		"R8 salt empty":            "$scrypt$ln=17,r=8,p=1$$" + key,
		"R8 key 31 bytes":          "$scrypt$ln=17,r=8,p=1$" + salt + "$" + key[:42],
		"R8 key 33 bytes":          "$scrypt$ln=17,r=8,p=1$" + salt + "$" + key + "AA",
		"R8 newline inside base64": "$scrypt$ln=17,r=8,p=1$" + salt[:10] + "\n" + salt[10:] + "$" + key,
		"R8 space":                 "$scrypt$ln=17, r=8,p=1$" + salt + "$" + key,
		"R8 empty":                 "",
		"R8 huge":                  good + strings.Repeat("A", 1<<20),
	} {
		t.Run(name, func(t *testing.T) {
			ok, err := CheckPasswordContext(context.Background(), s, []byte("correct horse"))
			if err == nil || ok {
				t.Fatalf("CheckPassword = %v, %v; want an error", ok, err)
			}
			if strings.Contains(err.Error(), salt) || strings.Contains(err.Error(), key) {
				t.Errorf("the error quotes the stored hash: %v", err)
			}
		})
	}
	if n.Load() != 0 {
		t.Fatalf("%d scrypt runs for refused hashes, want none", n.Load())
	}
}

// TestScryptGate_R8: six concurrent checks; two run scrypt at once, four wait at the gate, and
// only as one finishes does another start.
func TestScryptGate_R8(t *testing.T) {
	cheapScrypt(t)
	stored, err := HashPassword([]byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	const callers = 6
	var (
		mu           sync.Mutex
		running, max int
		entered      = make(chan struct{}, callers)
		waiting      = make(chan struct{}, callers)
		release      = make(chan struct{})
	)
	oldKey, oldWait := scryptKey, testWaiting
	t.Cleanup(func() { scryptKey, testWaiting = oldKey, oldWait })
	scryptKey = func(pw, salt []byte, N, r, p, keyLen int) ([]byte, error) {
		mu.Lock()
		running++
		if running > max {
			max = running
		}
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		return scrypt.Key(pw, salt, N, r, p, keyLen)
	}
	testWaiting = func() { waiting <- struct{}{} }

	var wg sync.WaitGroup
	results := make(chan bool, callers)
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }); wg.Wait() }
	defer releaseAll() // a failing test lets its callers finish too
	for range callers {
		wg.Go(func() {
			ok, err := CheckPasswordContext(context.Background(), stored, []byte("correct horse"))
			results <- ok && err == nil
		})
	}
	// Until one is released: exactly two inside, four waiting. A third inside fails at once.
	in, waits := 0, 0
	for in < MaxConcurrentScrypt || waits < callers-MaxConcurrentScrypt {
		select {
		case <-entered:
			if in++; in > MaxConcurrentScrypt {
				t.Fatalf("%d scrypt computations at once, want at most %d", in, MaxConcurrentScrypt)
			}
		case <-waiting:
			if waits++; waits > callers-MaxConcurrentScrypt {
				t.Fatalf("%d callers waiting with %d running, want %d", waits, in, callers-MaxConcurrentScrypt)
			}
		}
	}
	releaseAll()
	close(results)
	for ok := range results {
		if !ok {
			t.Error("a gated check did not match")
		}
	}
	if max != MaxConcurrentScrypt {
		t.Fatalf("max concurrency %d, want %d", max, MaxConcurrentScrypt)
	}
}

// TestScryptGateGiveUp_R8: a caller waiting at a full gate can give up through its context,
// without running scrypt.
func TestScryptGateGiveUp_R8(t *testing.T) {
	cheapScrypt(t)
	stored, _ := HashPassword([]byte("correct horse"))
	n := countScrypt(t)
	for range MaxConcurrentScrypt {
		select {
		case scryptGate <- struct{}{}:
			defer func() { <-scryptGate }()
		default:
			t.Fatal("the scrypt gate is taken by someone else")
		}
	}
	select {
	case scryptGate <- struct{}{}:
		<-scryptGate
		t.Fatalf("the gate lets more than %d in", MaxConcurrentScrypt)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	ok, err := CheckPasswordContext(ctx, stored, []byte("correct horse"))
	if ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CheckPasswordContext at a full gate = %v, %v; want the context's error", ok, err)
	}
	if n.Load() != 0 {
		t.Fatal("scrypt ran without a turn at the gate")
	}
}
