package pairing

// Fuzz targets for every parser of the pairing folder's files and of what a person types. Each
// states its invariant; the seed corpora are in testdata/fuzz/<target>/.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzParseStored: whatever the password file holds, parseStored never panics and never runs
// scrypt; what it accepts asks for no more than the limits (ln minLogN..maxLogN, r 1..maxR, p
// 1..maxP, memory 128·r·2^ln ≤ maxMemory, work 2^ln·r·p ≤ maxWork), has a 16..64-byte salt and a
// 32-byte hash, and has one spelling: written back in the stored form it is the same string. Its
// error never quotes the salt or the hash.
func FuzzParseStored(f *testing.F) {
	var runs atomic.Int32
	old := scryptKey
	scryptKey = func(pw, salt []byte, N, r, p, keyLen int) ([]byte, error) {
		runs.Add(1)
		return nil, errors.New("no scrypt while parsing")
	}
	f.Cleanup(func() { scryptKey = old })
	salt, key := strings.Repeat("A", 22), strings.Repeat("B", 42)+"w"
	f.Add("$scrypt$ln=17,r=8,p=1$" + salt + "$" + key)
	f.Add("$scrypt$ln=30,r=8,p=1$" + salt + "$" + key)
	f.Add("$scrypt$ln=17,r=8,p=1$" + salt + "$" + key + "=")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseStored(s)
		if n := runs.Load(); n != 0 {
			t.Fatalf("parsing ran scrypt %d times", n)
		}
		if err != nil {
			if p.salt != nil || p.key != nil || p.logN != 0 {
				t.Fatalf("error %v came with parameters %+v", err, p)
			}
			fields := strings.Split(s, "$")
			if len(fields) == 5 {
				for _, secret := range fields[3:] {
					if len(secret) >= 12 && !strings.ContainsAny(secret, " \t\n") && strings.Contains(err.Error(), secret) {
						t.Fatalf("the error quotes the salt or the hash: %v", err)
					}
				}
			}
			return
		}
		switch {
		case p.logN < minLogN || p.logN > maxLogN:
			t.Fatalf("accepted ln=%d", p.logN)
		case p.r < 1 || p.r > maxR, p.p < 1 || p.p > maxP:
			t.Fatalf("accepted r=%d p=%d", p.r, p.p)
		case 128*int64(p.r)<<p.logN > maxMemory:
			t.Fatalf("accepted ln=%d r=%d: more than %d bytes", p.logN, p.r, maxMemory)
		case int64(p.r)*int64(p.p)<<p.logN > maxWork:
			t.Fatalf("accepted ln=%d r=%d p=%d: more work than %d", p.logN, p.r, p.p, maxWork)
		case len(p.salt) < saltLen || len(p.salt) > maxSalt:
			t.Fatalf("accepted a salt of %d bytes", len(p.salt))
		case len(p.key) != keyLen:
			t.Fatalf("accepted a hash of %d bytes", len(p.key))
		}
		again := fmt.Sprintf("$scrypt$ln=%d,r=%d,p=%d$%s$%s", p.logN, p.r, p.p, b64.EncodeToString(p.salt), b64.EncodeToString(p.key))
		if again != s {
			t.Fatalf("accepted %q, which is also spelled %q", s, again)
		}
	})
}

// FuzzNormalizeCode: whatever a person types, NormalizeCode never panics; what it accepts is
// CodeLength letters of CodeAlphabet, is exactly the input's letters upper-cased (only spaces,
// tabs and dashes dropped), and is a fixed point: the code, and the code as shown (XXXX-XXXX),
// normalize to themselves.
func FuzzNormalizeCode(f *testing.F) {
	f.Add("BCDF-GHJK")
	f.Add("bcdf ghjk")
	f.Add("BCDF-GHJKL")
	f.Fuzz(func(t *testing.T, in string) {
		code, ok := NormalizeCode(in)
		if !ok {
			if code != "" {
				t.Fatalf("refused %q but returned %q", in, code)
			}
			return
		}
		if len(code) != CodeLength {
			t.Fatalf("%q gave %q: want %d letters", in, code, CodeLength)
		}
		for i := 0; i < len(code); i++ {
			if !strings.ContainsRune(CodeAlphabet, rune(code[i])) {
				t.Fatalf("%q gave %q: %q is not in the alphabet", in, code, code[i])
			}
		}
		letters := strings.ToUpper(strings.NewReplacer(" ", "", "\t", "", "-", "").Replace(in))
		if letters != code {
			t.Fatalf("%q gave %q, but its letters are %q", in, code, letters)
		}
		for _, again := range []string{code, code[:4] + "-" + code[4:]} {
			if c, ok := NormalizeCode(again); !ok || c != code {
				t.Fatalf("%q normalizes to %q, %v; want %q", again, c, ok, code)
			}
		}
	})
}

// slugRE is SPEC R9's slug: what Login puts between "device:" and "#".
var slugRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// fileSlugRE is what the register accepts as a slug in its file.
var fileSlugRE = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// FuzzSlug: whatever a device is called, its slug matches [a-z0-9-]{1,32} with no dash at either
// end and no two together, is accepted by the register's own check, and is its own slug.
func FuzzSlug(f *testing.F) {
	f.Add("Ann's phone")
	f.Add("")
	f.Add(strings.Repeat("a-", 40))
	f.Fuzz(func(t *testing.T, name string) {
		s := Slug(name)
		if len(s) < 1 || len(s) > 32 || !slugRE.MatchString(s) {
			t.Fatalf("Slug(%q) = %q", name, s)
		}
		if !validSlug(s) {
			t.Fatalf("Slug(%q) = %q, which the register refuses", name, s)
		}
		if again := Slug(s); again != s {
			t.Fatalf("Slug(%q) = %q, but Slug(%q) = %q", name, s, s, again)
		}
		if strings.Contains(Device{ID6: "abcdef", Slug: s}.Login(), "@") {
			t.Fatalf("Slug(%q) = %q makes a login that looks like a person's", name, s)
		}
	})
}

// FuzzReadDevices: whatever devices.json holds, reading it never panics; a file it refuses is a
// *ParseError naming the file; a file it accepts, of any format this fleet reads, is held at the
// format it writes (fileVersion) and has devices with unique valid id6,
// valid slugs and credential hashes that are 64 hex digits naming distinct credentials, and
// written back as fleet writes it, it reads again as the same register.
func FuzzReadDevices(f *testing.F) {
	f.Add([]byte(`{"version":1,"devices":[]}`))
	dir := f.TempDir() // one per process: the fuzz function runs one input at a time in it
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, DevicesFile)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readDevices(path)
		if err != nil {
			wantParseError(t, err, path)
			return
		}
		if got.Version != fileVersion {
			t.Fatalf("accepted version %d", got.Version)
		}
		ids, sums := map[string]bool{}, map[[32]byte]bool{}
		for _, r := range got.Devices {
			var sum [32]byte
			if n, err := hex.Decode(sum[:], []byte(r.SHA256)); err != nil || n != 32 || len(r.SHA256) != 64 {
				t.Fatalf("accepted credential_sha256 %q", r.SHA256)
			}
			switch {
			case !id6RE.MatchString(r.ID6) || ids[r.ID6]:
				t.Fatalf("accepted id6 %q (twice: %v)", r.ID6, ids[r.ID6])
			case !fileSlugRE.MatchString(r.Slug):
				t.Fatalf("accepted slug %q", r.Slug)
			case sums[sum]:
				t.Fatalf("accepted two devices with one credential (%s)", r.ID6)
			}
			ids[r.ID6], sums[sum] = true, true
		}
		wantRoundTrip(t, dir, got, func(p string) (any, error) { return readDevices(p) })
	})
}

// FuzzReadCodes: whatever codes.json holds, reading it never panics; a file it refuses is a
// *ParseError naming the file; a file it accepts, of any format this fleet reads, is held at the
// format it writes (fileVersion) and has codes whose hashes are 64 hex
// digits, can be searched and pruned, and written back as fleet writes it, reads again as the
// same codes.
func FuzzReadCodes(f *testing.F) {
	f.Add([]byte(`{"version":1,"codes":[]}`))
	dir := f.TempDir() // one per process: the fuzz function runs one input at a time in it
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, CodesFile)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readCodes(path)
		if err != nil {
			wantParseError(t, err, path)
			return
		}
		if got.Version != fileVersion {
			t.Fatalf("accepted version %d", got.Version)
		}
		for _, c := range got.Codes {
			if _, err := hex.DecodeString(c.SHA256); err != nil || len(c.SHA256) != 64 {
				t.Fatalf("accepted sha256 %q", c.SHA256)
			}
		}
		wantRoundTrip(t, dir, got, func(p string) (any, error) { return readCodes(p) })
		got.find(codeHash("BCDFGHJK"))
		got.prune(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	})
}

// wantParseError fails unless err is a *ParseError for path whose message names path.
func wantParseError(t *testing.T, err error, path string) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Path != path || !strings.Contains(err.Error(), path) {
		t.Fatalf("refused with %v (%T); want a ParseError naming %s", err, err, path)
	}
}

// wantRoundTrip writes v as fleet writes its files (as writeJSON encodes them) into dir, reads it back with read and checks
// that it is the same: the same JSON, byte for byte.
func wantRoundTrip(t *testing.T, dir string, v any, read func(path string) (any, error)) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("an accepted file cannot be written back: %v", err)
	}
	// writeJSON's encoding, without its fsyncs: they would slow fuzzing a hundredfold.
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("an accepted file cannot be written back: %v", err)
	}
	path := filepath.Join(dir, "again.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := read(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("written back, it does not read: %v\n%s", err, b)
	}
	got, _ := json.Marshal(again)
	if !bytes.Equal(got, want) {
		t.Fatalf("written back, it reads as\n%s\nwant\n%s", got, want)
	}
}
