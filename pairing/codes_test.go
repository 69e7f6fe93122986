package pairing

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// at is a clock that always reads now.
func at(now time.Time) func() time.Time { return func() time.Time { return now } }

var shownCodeRE = regexp.MustCompile(`^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`)

// checker counts its calls and answers right.
type checker struct {
	calls atomic.Int32
	right bool
	err   error
}

func (c *checker) check() (bool, error) {
	c.calls.Add(1)
	return c.right, c.err
}

func issue(t *testing.T, dir, name string, now time.Time) string {
	t.Helper()
	code, err := IssueCode(dir, name, now)
	if err != nil {
		t.Fatal(err)
	}
	if !shownCodeRE.MatchString(code) {
		t.Fatalf("code %q, want XXXX-XXXX from %s", code, CodeAlphabet)
	}
	return code
}

func TestIssueCode_R8_F1(t *testing.T) {
	dir := reachDir(t)
	issue(t, dir, "Ann's phone", t0)
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %o", st.Mode().Perm())
	}
	for _, f := range []string{CodesFile, LockFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %o", f, err, st.Mode().Perm())
		}
	}
	seen := map[byte]bool{}
	for range 2000 {
		c, err := newCode()
		if err != nil || len(c) != CodeLength {
			t.Fatalf("newCode = %q, %v", c, err)
		}
		for i := range len(c) {
			seen[c[i]] = true
		}
	}
	if len(seen) != len(CodeAlphabet) {
		t.Errorf("letters drawn: %d, want all %d of the alphabet", len(seen), len(CodeAlphabet))
	}
}

func TestNormalizeCode_R8(t *testing.T) {
	for in, want := range map[string]string{
		"BCDF-GHJK":                           "BCDFGHJK",
		"bcdf-ghjk":                           "BCDFGHJK",
		" BcDf GhJk ":                         "BCDFGHJK",
		"b-c-d-f-g-h-j-k":                     "BCDFGHJK",
		"BCDFGHJK":                            "BCDFGHJK",
		"\tzxwv-tsrq":                         "ZXWVTSRQ",
		"BCDF-GHJ":                            "",
		"BCDF-GHJKL":                          "",
		"ABCD-FGHJ":                           "", // A is not in the alphabet
		"BCDF_GHJK":                           "",
		"BCDF—GHJK":                           "", // an em dash is not a dash
		"ＢCDF-GHJK":                           "", // full-width B
		"":                                    "",
		"--------":                            "",
		strings.Repeat(" ", 100) + "BCDFGHJK": "",
	} {
		got, ok := NormalizeCode(in)
		if got != want || ok != (want != "") {
			t.Errorf("NormalizeCode(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestCodeUsedOnce_R8(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "Ann's phone", t0)
	c := &checker{right: true}
	name, err := redeem(dir, strings.ToLower(code), at(t0.Add(time.Minute)), c.check)
	if err != nil || name != "Ann's phone" {
		t.Fatalf("Redeem = %q, %v", name, err)
	}
	_, err = redeem(dir, code, at(t0.Add(2*time.Minute)), c.check)
	if !errors.Is(err, ErrCodeUsed) {
		t.Fatalf("second Redeem = %v, want ErrCodeUsed", err)
	}
	if c.calls.Load() != 1 {
		t.Fatalf("password checked %d times, want once (not for a used code)", c.calls.Load())
	}
}

func TestCodeExpires_R8(t *testing.T) {
	dir := reachDir(t)
	a := issue(t, dir, "", t0)
	b := issue(t, dir, "", t0)
	c := &checker{right: true}
	if _, err := redeem(dir, a, at(t0.Add(CodeTTL-time.Nanosecond)), c.check); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	if _, err := redeem(dir, b, at(t0.Add(CodeTTL)), c.check); !errors.Is(err, ErrCodeExpired) {
		t.Fatalf("at expiry: %v, want ErrCodeExpired", err)
	}
	if c.calls.Load() != 1 {
		t.Fatalf("password checked %d times, want once (not for an expired code)", c.calls.Load())
	}
	// Long dead codes are pruned when the file is next written; then they are unknown.
	issue(t, dir, "", t0.Add(2*time.Hour))
	if _, err := redeem(dir, b, at(t0.Add(2*time.Hour)), c.check); !errors.Is(err, ErrNoSuchCode) {
		t.Fatalf("pruned code: %v, want ErrNoSuchCode", err)
	}
	f, _ := readCodes(filepath.Join(dir, CodesFile))
	if len(f.Codes) != 1 {
		t.Fatalf("%d codes kept, want only the live one", len(f.Codes))
	}
}

// TestCodeJudgedWhenUsedUnderTheLock_R8: RedeemCode reads its clock once the folder is
// locked — so a time taken by a caller before it waited for the lock, or for a request's form,
// never judges a code — and that reading alone judges the code's expiry: a code that was live
// when the caller began and is dead when the clock is read is refused without the password
// being checked.
func TestCodeJudgedWhenUsedUnderTheLock_R8(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "", t0)
	var reads, unlocked int
	clock := func() time.Time {
		reads++
		ran, err := tryLock(dir, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if ran {
			unlocked++
		}
		return t0.Add(CodeTTL) // the moment it dies
	}
	c := &checker{right: true}
	if _, err := redeem(dir, code, clock, c.check); !errors.Is(err, ErrCodeExpired) {
		t.Errorf("a code dead by the clock read under the lock: %v, want ErrCodeExpired", err)
	}
	if reads == 0 || unlocked != 0 {
		t.Errorf("the clock was read %d times, %d of them without the folder's lock; want only under it", reads, unlocked)
	}
	if c.calls.Load() != 0 {
		t.Errorf("the password was checked %d times for an expired code", c.calls.Load())
	}
}

// TestCodeBurnsAfterFiveWrongPasswords_R8: five wrong passwords are each counted; the sixth
// attempt is refused without the password being checked, even a right one.
func TestCodeBurnsAfterFiveWrongPasswords_R8(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "", t0)
	wrong := &checker{right: false}
	for i := 1; i <= MaxWrongPasswords; i++ {
		if _, err := redeem(dir, code, at(t0), wrong.check); !errors.Is(err, ErrWrongPassword) {
			t.Fatalf("wrong password %d: %v, want ErrWrongPassword", i, err)
		}
		f, _ := readCodes(filepath.Join(dir, CodesFile))
		if f.Codes[0].WrongPasswords != i {
			t.Fatalf("after %d wrong passwords the file counts %d", i, f.Codes[0].WrongPasswords)
		}
	}
	right := &checker{right: true}
	if _, err := redeem(dir, code, at(t0), right.check); !errors.Is(err, ErrCodeBurned) {
		t.Fatalf("sixth attempt: %v, want ErrCodeBurned", err)
	}
	if wrong.calls.Load() != MaxWrongPasswords || right.calls.Load() != 0 {
		t.Fatalf("password checked %d+%d times, want %d+0", wrong.calls.Load(), right.calls.Load(), MaxWrongPasswords)
	}
}

// TestCodeCheckedBeforePassword_R8: no password work for a code that is not live.
func TestCodeCheckedBeforePassword_R8(t *testing.T) {
	dir := reachDir(t)
	issue(t, dir, "", t0)
	c := &checker{right: true}
	for _, code := range []string{"BBBB-BBBB", "not a code", "", "BCDF-GHJK-L"} {
		if _, err := redeem(dir, code, at(t0), c.check); !errors.Is(err, ErrNoSuchCode) {
			t.Errorf("Redeem(%q) = %v, want ErrNoSuchCode", code, err)
		}
	}
	if c.calls.Load() != 0 {
		t.Fatalf("password checked %d times for unknown codes", c.calls.Load())
	}
}

// TestCodeCheckFailureNotCounted_R8: when the password cannot be checked (no password set, the
// caller gave up), pairing is refused and the attempt is not counted against the code.
func TestCodeCheckFailureNotCounted_R8(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "", t0)
	broken := &checker{right: true, err: ErrNoPassword}
	if _, err := redeem(dir, code, at(t0), broken.check); !errors.Is(err, ErrNoPassword) {
		t.Fatalf("Redeem = %v, want the checker's error", err)
	}
	f, _ := readCodes(filepath.Join(dir, CodesFile))
	if f.Codes[0].WrongPasswords != 0 || f.Codes[0].Used {
		t.Fatalf("record after a failed check: %+v", f.Codes[0])
	}
	if _, err := redeem(dir, code, at(t0), (&checker{right: true}).check); err != nil {
		t.Fatalf("the code is still good: %v", err)
	}
}

func TestCodeStoredHashed_R8(t *testing.T) {
	dir := reachDir(t)
	var codes []string
	for range 5 {
		codes = append(codes, issue(t, dir, "", t0))
	}
	redeem(dir, codes[0], at(t0), (&checker{right: true}).check)
	redeem(dir, codes[1], at(t0), (&checker{right: false}).check)
	raw, _ := os.ReadFile(filepath.Join(dir, CodesFile))
	low := strings.ToLower(string(raw))
	for _, c := range codes {
		norm, _ := NormalizeCode(c)
		for _, form := range []string{c, norm, norm[:4], norm[4:]} {
			if strings.Contains(low, strings.ToLower(form)) {
				t.Fatalf("%s holds %q of code %s in clear:\n%s", CodesFile, form, c, raw)
			}
		}
	}
}

// TestCodeRaceGoroutines_R8: a hundred redemptions of one code at once; exactly one pairs.
func TestCodeRaceGoroutines_R8(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "", t0)
	c := &checker{right: true}
	var wins, used atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			_, err := redeem(dir, code, at(t0), c.check)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, ErrCodeUsed):
				used.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || used.Load() != 99 || c.calls.Load() != 1 {
		t.Fatalf("%d paired, %d told used, %d password checks; want 1, 99, 1", wins.Load(), used.Load(), c.calls.Load())
	}
}

// TestCodeRaceProcesses_R8: the same race between three processes (this one and two copies of the
// test binary), as between `fleet serve` and a second door or CLI sharing the folder.
func TestCodeRaceProcesses_R8(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "", t0)
	start := filepath.Join(t.TempDir(), "go")
	var outs [2]bytes.Buffer
	var cmds []*exec.Cmd
	var readies []string
	for i := range outs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		ready := filepath.Join(filepath.Dir(start), "ready"+strconv.Itoa(i))
		readies = append(readies, ready)
		cmd.Env = append(os.Environ(), "PAIRING_HELPER=redeem", "PAIRING_DIR="+dir, "PAIRING_CODE="+code,
			"PAIRING_START="+start, "PAIRING_READY="+ready)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, ready := range readies {
		waitFile(t, ready)
	}
	os.WriteFile(start, nil, 0o600) // let them all go at once
	wins := redeemMany(dir, code, 30)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
		}
		m := regexp.MustCompile(`wins=(\d+)`).FindStringSubmatch(outs[i].String())
		if m == nil {
			t.Fatalf("helper %d said:\n%s", i, outs[i].String())
		}
		n, _ := strconv.Atoi(m[1])
		wins += n
	}
	if wins != 1 {
		t.Fatalf("%d processes' redemptions succeeded, want exactly 1", wins)
	}
}

// redeemMany redeems code from n goroutines, with a password check that takes a while; it returns how many succeeded, or -1000 on an error
// other than ErrCodeUsed.
func redeemMany(dir, code string, n int) int {
	var wins, bad atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := redeem(dir, code, at(t0), func() (bool, error) {
				time.Sleep(10 * time.Millisecond) // as scrypt takes a while: a wide window for a race
				return true, nil
			})
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ErrCodeUsed):
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		return -1000
	}
	return int(wins.Load())
}

// waitFile waits for path to exist: a start line between processes, not an assertion; never
// forever.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came", path)
		}
	}
}

// TestHelperProcess is not a test: the cross-process tests run the test binary again to be the
// other process (PAIRING_HELPER says what to do).
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv("PAIRING_DIR")
	switch os.Getenv("PAIRING_HELPER") {
	case "":
		t.Skip("helper for the cross-process tests")
	case "redeem":
		os.WriteFile(os.Getenv("PAIRING_READY"), nil, 0o600)
		waitFile(t, os.Getenv("PAIRING_START"))
		fmt.Printf("wins=%d\n", redeemMany(dir, os.Getenv("PAIRING_CODE"), 30))
	case "revoke":
		if err := RevokeDevice(dir, os.Getenv("PAIRING_ID6")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCodesFileRefused_F1_F2(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "", t0)
	path := filepath.Join(dir, CodesFile)
	c := &checker{right: true}

	t.Run("F1 too open", func(t *testing.T) {
		os.Chmod(path, 0o644)
		defer os.Chmod(path, 0o600)
		same := fileUnchanged(t, path)
		_, err := IssueCode(dir, "", t0)
		var me *state.ModeError
		if !errors.As(err, &me) {
			t.Fatalf("IssueCode = %v, want a ModeError", err)
		}
		mustContain(t, err, "chmod 600 "+path)
		_, err = redeem(dir, code, at(t0), c.check)
		mustContain(t, err, "chmod 600 "+path)
		same()
	})
	t.Run("F1 folder too open", func(t *testing.T) {
		os.Chmod(dir, 0o755)
		defer os.Chmod(dir, 0o700)
		_, err := IssueCode(dir, "", t0)
		mustContain(t, err, "chmod 700 "+dir)
	})
	t.Run("F1 lock file too open", func(t *testing.T) {
		lock := filepath.Join(dir, LockFile)
		os.Chmod(lock, 0o666)
		defer os.Chmod(lock, 0o600)
		_, err := redeem(dir, code, at(t0), c.check)
		mustContain(t, err, "chmod 600 "+lock)
	})
	for name, body := range map[string]string{
		"F2 not JSON":      "{garbage",
		"F2 truncated":     `{"version":1,"codes":[{"sha256":`,
		"F2 unknown field": `{"version":1,"codes":[],"extra":1}`,
		"F2 other version": `{"version":2,"codes":[]}`,
		"F2 trailing data": `{"version":1,"codes":[]} {}`,
		"F2 bad hash":      `{"version":1,"codes":[{"sha256":"zz","issued":"2026-11-30T12:00:00Z","expires":"2026-11-30T12:05:00Z","wrong_passwords":0}]}`,
		"F2 empty file":    ``,
	} {
		t.Run(name, func(t *testing.T) {
			os.WriteFile(path, []byte(body), 0o600)
			same := fileUnchanged(t, path)
			_, err := IssueCode(dir, "", t0)
			mustContain(t, err, path)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a ParseError", err)
			}
			_, err = redeem(dir, code, at(t0), c.check)
			mustContain(t, err, path)
			same()
		})
	}
	if c.calls.Load() != 0 {
		t.Fatal("a password was checked against a file that was refused")
	}
}
