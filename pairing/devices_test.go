package pairing

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/state"
)

var id6RE = regexp.MustCompile(`^[a-z2-7]{6}$`)

func TestSlug_R9(t *testing.T) {
	for name, want := range map[string]string{
		"Ann's iPhone":                 "ann-s-iphone",
		"  Pixel 8 Pro  ":              "pixel-8-pro",
		"---x---":                      "x",
		"Zoë's tablet":                 "zo-s-tablet",
		"日本語":                          "device",
		"":                             "device",
		"!!!":                          "device",
		"ABC123":                       "abc123",
		strings.Repeat("ab", 40):       strings.Repeat("ab", 16),
		strings.Repeat("a", 31) + " b": strings.Repeat("a", 31),
		"a\x00b\nc":                    "a-b-c",
	} {
		got := Slug(name)
		if got != want || !validSlug(got) {
			t.Errorf("Slug(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestCleanName_R9(t *testing.T) {
	for in, want := range map[string]string{
		"  Ann's phone ":         "Ann's phone",
		"a\x1b[31mred\nb":        "a [31mred b",
		"bad \xff utf8":          "bad   utf8",
		"evil\u202egnp.exe":      "evil gnp.exe",
		"zero\u200bwidth":        "zero width",
		strings.Repeat("é", 100): strings.Repeat("é", maxNameRunes),
	} {
		if got := cleanName(in); got != want {
			t.Errorf("cleanName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLoadedDeviceLogin_R9: a device the register loaded asserts the same login as the one
// registered (the register makes it once, not every request).
func TestLoadedDeviceLogin_R9(t *testing.T) {
	dir := reachDir(t)
	d, cred, err := RegisterDeviceFor(dir, "Ann's iPhone", access.Everything, t0)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.WaitWrites()
	seen, ok := reg.Authenticate(cred, t0, "192.0.2.1")
	if want := "device:ann-s-iphone#" + d.ID6; !ok || seen.Login() != want || d.Login() != want {
		t.Fatalf("loaded %q (believed %v), registered %q, want %q", seen.Login(), ok, d.Login(), want)
	}
}

func TestRegisterDevice_R8_R9(t *testing.T) {
	dir := reachDir(t)
	d, cred, err := RegisterDeviceFor(dir, "Ann's iPhone", access.Everything, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !id6RE.MatchString(d.ID6) || d.Slug != "ann-s-iphone" || d.Name != "Ann's iPhone" || !d.Created.Equal(t0) {
		t.Fatalf("device %+v", d)
	}
	if got, want := d.Login(), "device:ann-s-iphone#"+d.ID6; got != want {
		t.Fatalf("Login = %q, want %q", got, want)
	}
	raw, err := base64.RawURLEncoding.DecodeString(cred)
	if err != nil || len(raw) != CredentialBytes {
		t.Fatalf("credential %q: %d bytes, %v", cred, len(raw), err)
	}
	path := filepath.Join(dir, DevicesFile)
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("register mode %o", st.Mode().Perm())
	}
	file, _ := os.ReadFile(path)
	sum := sha256.Sum256([]byte(cred))
	if strings.Contains(string(file), cred) || strings.Contains(string(file), hex.EncodeToString(raw)) {
		t.Fatal("the register holds the credential in clear")
	}
	if !strings.Contains(string(file), hex.EncodeToString(sum[:])) {
		t.Fatal("the register does not hold the credential's SHA-256")
	}
	d2, cred2, _ := RegisterDeviceFor(dir, "", access.Everything, t0.Add(time.Second))
	if d2.ID6 == d.ID6 || cred2 == cred || d2.Name != "device" || d2.Slug != "device" {
		t.Fatalf("second device %+v", d2)
	}
	list, err := ListDevices(dir)
	if err != nil || len(list) != 2 || list[0] != d || list[1] != d2 {
		t.Fatalf("ListDevices = %+v, %v", list, err)
	}
}

func TestAuthenticate_R9(t *testing.T) {
	dir := reachDir(t)
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	d, cred, err := r.AddFor("phone", access.Everything, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := r.Authenticate(cred, t0, "192.168.1.30:50000")
	if !ok || got.ID6 != d.ID6 || got.Login() != d.Login() {
		t.Fatalf("Authenticate = %+v, %v", got, ok)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(cred)
	raw[0] ^= 1
	for name, bad := range map[string]string{
		"one bit off":  base64.RawURLEncoding.EncodeToString(raw),
		"padded":       cred + "=",
		"std alphabet": base64.RawStdEncoding.EncodeToString(raw),
		"empty":        "",
		"truncated":    cred[:42],
		"upper-cased":  strings.ToUpper(cred),
		"the hash":     func() string { s := sha256.Sum256([]byte(cred)); return hex.EncodeToString(s[:]) }(),
	} {
		if bad == cred {
			continue
		}
		if _, ok := r.Authenticate(bad, t0, "x"); ok {
			t.Errorf("%s: authenticated", name)
		}
	}
}

// TestRevocationSeenAtOnce_R8: a device revoked by another process is refused at the next
// Authenticate (one stat), and the subscribers are told once.
func TestRevocationSeenAtOnce_R8(t *testing.T) {
	dir := reachDir(t)
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	rec := newRecorder()
	r.OnRevoke(rec.fn)
	// Registered behind the Register's back, as the pairing page of another process would.
	d, cred, _ := RegisterDeviceFor(dir, "phone", access.Everything, t0)
	other, otherCred, _ := RegisterDeviceFor(dir, "tablet", access.Everything, t0)
	if _, ok := r.Authenticate(cred, t0, "a"); !ok {
		t.Fatal("a device registered by another process is not seen")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PAIRING_HELPER=revoke", "PAIRING_DIR="+dir, "PAIRING_ID6="+d.ID6)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("revoking process: %v\n%s", err, out)
	}
	if _, ok := r.Authenticate(cred, t0, "a"); ok {
		t.Fatal("a device revoked by another process is still believed")
	}
	if got := rec.got(); !slices.Equal(got, []string{d.ID6}) {
		t.Fatalf("OnRevoke got %v, want [%s]", got, d.ID6)
	}
	if _, ok := r.Authenticate(otherCred, t0, "a"); !ok {
		t.Fatal("the other device was dropped too")
	}
	r.Refresh()
	if got := rec.got(); len(got) != 1 {
		t.Fatalf("told again: %v", got)
	}
	// Through the Register itself: told before Revoke returns.
	if err := r.Revoke(other.ID6); err != nil {
		t.Fatal(err)
	}
	if got := rec.got(); !slices.Equal(got, []string{d.ID6, other.ID6}) {
		t.Fatalf("OnRevoke got %v", got)
	}
	if err := r.Revoke(other.ID6); !errors.Is(err, ErrNoSuchDevice) {
		t.Fatalf("revoking twice = %v, want ErrNoSuchDevice", err)
	}
	f, _ := readDevices(filepath.Join(dir, DevicesFile))
	if len(f.Devices) != 0 || !slices.Contains(f.Revoked, d.ID6) || !slices.Contains(f.Revoked, other.ID6) {
		t.Fatalf("register after revocations: %+v", f)
	}
}

// TestRequestCheckIsTheOpenFile_R8_P2: each Authenticate asks the file it loaded, kept open, with
// one fstat, never looking its path up (P2: that lookup cost more than any other step of a
// paired device's request); and that fstat tells of every way the file can be written, at once.
func TestRequestCheckIsTheOpenFile_R8_P2(t *testing.T) {
	for name, change := range map[string]func(path string, without []byte) error{
		"renamed over, as every writer of fleet's writes": func(path string, without []byte) error {
			return state.WriteFileAtomic(path, without)
		},
		"written in place": func(path string, without []byte) error { return os.WriteFile(path, without, 0o600) },
		"moved away, another put in its place": func(path string, without []byte) error {
			if err := os.Rename(path, path+".old"); err != nil {
				return err
			}
			return os.WriteFile(path, without, 0o600)
		},
		"removed":          func(path string, _ []byte) error { return os.Remove(path) },
		"made too open":    func(path string, _ []byte) error { return os.Chmod(path, 0o644) },
		"linked elsewhere": func(path string, _ []byte) error { return os.Link(path, path+".link") },
	} {
		t.Run(name, func(t *testing.T) {
			dir := reachDir(t)
			r, _ := OpenRegister(dir)
			t.Cleanup(r.WaitWrites)
			d, cred, _ := r.AddFor("phone", access.Everything, t0)
			path := filepath.Join(dir, DevicesFile)
			good, _ := os.ReadFile(path)
			if err := RevokeDevice(dir, d.ID6); err != nil {
				t.Fatal(err)
			}
			without, _ := os.ReadFile(path)
			if err := state.WriteFileAtomic(path, good); err != nil {
				t.Fatal(err)
			}
			if _, ok := r.Authenticate(cred, t0, "x"); !ok {
				t.Fatal("not believed from the file put back")
			}
			r.WaitWrites()
			if err := change(path, without); err != nil {
				t.Fatal(err)
			}
			_, ok := r.Authenticate(cred, t0, "x")
			if name == "linked elsewhere" { // the same file, one more name: nothing to refuse
				if !ok {
					t.Fatal("a second link to the same register dropped the device")
				}
				return
			}
			if ok {
				t.Fatal("believed after the file was changed")
			}
		})
	}

	t.Run("no lookup of the path", func(t *testing.T) {
		dir := reachDir(t)
		r, _ := OpenRegister(dir)
		t.Cleanup(r.WaitWrites)
		_, cred, _ := r.AddFor("phone", access.Everything, t0)
		if _, ok := r.Authenticate(cred, t0, "x"); !ok {
			t.Fatal("not believed")
		}
		r.WaitWrites() // its last seen, written: the file kept open is the one written
		// The folder moved away: a lookup of the path finds nothing, the open file is unchanged.
		if err := os.Rename(dir, dir+"-moved"); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Authenticate(cred, t0, "x"); !ok {
			t.Fatal("a request's check looked the path up")
		}
		r.Refresh() // Watch's: a lookup, which finds no file, and so no device
		if _, ok := r.Authenticate(cred, t0, "x"); ok {
			t.Fatal("believed after Refresh found no register")
		}
	})
}

// TestWatchSeesRevocation_R8: with nobody calling Authenticate (a device holding only a stream
// open), Watch notices a revocation by another process and tells the subscribers.
func TestWatchSeesRevocation_R8(t *testing.T) {
	dir := reachDir(t)
	d, _, _ := RegisterDeviceFor(dir, "phone", access.Everything, t0)
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	rec := newRecorder()
	r.OnRevoke(rec.fn)
	stop := make(chan struct{})
	defer close(stop)
	go r.Watch(stop, 10*time.Millisecond)
	if err := RevokeDevice(dir, d.ID6); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-rec.ch:
		if id != d.ID6 {
			t.Fatalf("told %s, want %s", id, d.ID6)
		}
	case <-time.After(time.Minute): // a hang detector, not a timing assertion
		t.Fatal("Watch never told of the revocation")
	}
}

// TestLastSeenThrottled_R8: last seen is kept in memory at every request and written at most
// every LastSeenInterval per device.
func TestLastSeenThrottled_R8(t *testing.T) {
	dir := reachDir(t)
	r, _ := OpenRegister(dir)
	t.Cleanup(r.WaitWrites)
	a, credA, _ := r.AddFor("a", access.Everything, t0)
	b, credB, _ := r.AddFor("b", access.Everything, t0)
	onDisk := func(id string) Device {
		t.Helper()
		list, err := ListDevices(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range list {
			if d.ID6 == id {
				return d
			}
		}
		t.Fatalf("%s not on disk", id)
		return Device{}
	}
	inMemory := func(r *Register, id string) Device {
		t.Helper()
		for _, d := range r.Devices() {
			if d.ID6 == id {
				return d
			}
		}
		t.Fatalf("%s not in memory", id)
		return Device{}
	}
	path := filepath.Join(dir, DevicesFile)
	writes := func() stamp { return statFile(path) }

	r.Authenticate(credA, t0, "10.0.0.1:1")
	r.WaitWrites() // last seen is written in the background
	if d := onDisk(a.ID6); !d.LastSeen.Equal(t0) || d.LastAddr != "10.0.0.1:1" {
		t.Fatalf("first sight not written: %+v", d)
	}
	before := writes()
	r.Authenticate(credA, t0.Add(10*time.Second), "10.0.0.1:2")
	r.WaitWrites() // last seen is written in the background
	r.Authenticate(credA, t0.Add(29*time.Second), "10.0.0.1:3")
	r.WaitWrites() // last seen is written in the background
	if writes() != before {
		t.Fatal("written again within LastSeenInterval")
	}
	if d := onDisk(a.ID6); !d.LastSeen.Equal(t0) {
		t.Fatalf("on disk %v, want still %v", d.LastSeen, t0)
	}
	if d := inMemory(r, a.ID6); !d.LastSeen.Equal(t0.Add(29*time.Second)) || d.LastAddr != "10.0.0.1:3" {
		t.Fatalf("in memory %+v", d)
	}
	// Another device has its own interval.
	r.Authenticate(credB, t0.Add(29*time.Second), "10.0.0.2:1")
	r.WaitWrites() // last seen is written in the background
	if d := onDisk(b.ID6); !d.LastSeen.Equal(t0.Add(29 * time.Second)) {
		t.Fatalf("b on disk %+v", d)
	}
	if d := onDisk(a.ID6); !d.LastSeen.Equal(t0.Add(29 * time.Second)) {
		// Writing b's wrote what memory knew of a as well: never older than the file.
		t.Fatalf("a on disk %+v", d)
	}
	before = writes()
	r.Authenticate(credA, t0.Add(30*time.Second), "10.0.0.1:4")
	r.WaitWrites() // last seen is written in the background
	if writes() == before {
		t.Fatal("not written after LastSeenInterval")
	}
	if d := onDisk(a.ID6); !d.LastSeen.Equal(t0.Add(30*time.Second)) || d.LastAddr != "10.0.0.1:4" {
		t.Fatalf("on disk after the interval %+v", d)
	}
	// A restart keeps what was written.
	r2, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.WaitWrites)
	if d := inMemory(r2, a.ID6); !d.LastSeen.Equal(t0.Add(30*time.Second)) || d.LastAddr != "10.0.0.1:4" {
		t.Fatalf("%+v", d)
	}
	if _, ok := r2.Authenticate(credA, t0.Add(31*time.Second), "x"); !ok {
		t.Fatal("not authenticated after a restart")
	}
	r2.WaitWrites()
}

// TestLastSeenSkipsBusyLock_R8: while another holder has the lock (a pairing attempt running
// scrypt), a request is not held up: its last seen stays in memory for the next interval.
func TestLastSeenSkipsBusyLock_R8(t *testing.T) {
	dir := reachDir(t)
	r, _ := OpenRegister(dir)
	t.Cleanup(r.WaitWrites)
	_, cred, _ := r.AddFor("a", access.Everything, t0)
	before := statFile(filepath.Join(dir, DevicesFile))
	held := make(chan struct{})
	done := make(chan struct{})
	go withLock(dir, func() error { close(held); <-done; return nil })
	<-held
	if _, ok := r.Authenticate(cred, t0, "x"); !ok {
		t.Fatal("not authenticated while the lock is held")
	}
	r.WaitWrites() // the background writer found the lock held, and gave up
	close(done)
	if statFile(filepath.Join(dir, DevicesFile)) != before {
		t.Fatal("written while another held the lock")
	}
}

// TestRegisterSurvivesRestart_R9: devices, ids and credentials survive a new Register.
func TestRegisterSurvivesRestart_R9(t *testing.T) {
	dir := reachDir(t)
	r, _ := OpenRegister(dir)
	t.Cleanup(r.WaitWrites)
	d, cred, _ := r.AddFor("phone", access.Everything, t0)
	r2, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.WaitWrites)
	got, ok := r2.Authenticate(cred, t0, "x")
	if !ok || got.ID6 != d.ID6 || got.Login() != d.Login() || !got.Created.Equal(d.Created) {
		t.Fatalf("after a restart: %+v, %v", got, ok)
	}
}

// TestRegisterRefusedWhenCorrupt_F2: a register that does not parse is an error naming it, left as
// it is; a running Register believes nobody meanwhile (and says so to subscribers), and believes
// again once the file is good.
func TestRegisterRefusedWhenCorrupt_F2(t *testing.T) {
	dir := reachDir(t)
	r, _ := OpenRegister(dir)
	t.Cleanup(r.WaitWrites)
	rec := newRecorder()
	r.OnRevoke(rec.fn)
	d, cred, _ := r.AddFor("phone", access.Everything, t0)
	path := filepath.Join(dir, DevicesFile)
	good, _ := os.ReadFile(path)
	sum := sha256.Sum256([]byte(cred))
	rec1 := `{"id6":"` + d.ID6 + `","name":"x","slug":"x","credential_sha256":"` + hex.EncodeToString(sum[:]) + `","created":"2026-11-30T12:00:00Z"}`
	for name, body := range map[string]string{
		"F2 not JSON":      "{garbage",
		"F2 truncated":     string(good[:len(good)/2]),
		"F2 empty":         "",
		"F2 unknown field": `{"version":1,"devices":[],"x":1}`,
		"F2 other version": `{"version":7,"devices":[]}`,
		"F2 bad id6":       strings.Replace(`{"version":1,"devices":[`+rec1+`]}`, d.ID6, "ABCDEF", 1),
		"F2 duplicate id6": `{"version":1,"devices":[` + rec1 + `,` + strings.Replace(rec1, hex.EncodeToString(sum[:]), strings.Repeat("a", 64), 1) + `]}`,
		"F2 shared hash":   `{"version":1,"devices":[` + rec1 + `,` + strings.Replace(rec1, d.ID6, "zzzzzz", 1) + `]}`,
		"F2 bad slug":      strings.Replace(`{"version":1,"devices":[`+rec1+`]}`, `"slug":"x"`, `"slug":"X Y"`, 1),
		"F2 bad hash":      strings.Replace(`{"version":1,"devices":[`+rec1+`]}`, hex.EncodeToString(sum[:]), "abc", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if err := state.WriteFileAtomic(path, []byte(body)); err != nil {
				t.Fatal(err)
			}
			same := fileUnchanged(t, path)
			_, err := OpenRegister(dir)
			mustContain(t, err, path)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a ParseError", err)
			}
			_, _, err = RegisterDeviceFor(dir, "another", access.Everything, t0)
			mustContain(t, err, path)
			err = RevokeDevice(dir, d.ID6)
			mustContain(t, err, path)
			_, err = ListDevices(dir)
			mustContain(t, err, path)
			if _, ok := r.Authenticate(cred, t0, "x"); ok {
				t.Fatal("a device believed from a register that does not parse")
			}
			if r.Err() == nil {
				t.Fatal("Err() = nil")
			}
			same()
			// Good again: believed again.
			if err := state.WriteFileAtomic(path, good); err != nil {
				t.Fatal(err)
			}
			if _, ok := r.Authenticate(cred, t0, "x"); !ok || r.Err() != nil {
				t.Fatalf("not believed once the file is good: %v", r.Err())
			}
			r.WaitWrites() // its last seen, written in the background, before the next row spoils the file
		})
	}
	// Each corruption dropped the device once, and only once.
	if got := rec.got(); len(got) != 10 || got[0] != d.ID6 {
		t.Fatalf("OnRevoke got %v", got)
	}
}

func TestRegisterTooOpen_F1(t *testing.T) {
	dir := reachDir(t)
	r, _ := OpenRegister(dir)
	t.Cleanup(r.WaitWrites)
	_, cred, _ := r.AddFor("phone", access.Everything, t0)
	path := filepath.Join(dir, DevicesFile)
	os.Chmod(path, 0o644)
	same := fileUnchanged(t, path)
	_, err := OpenRegister(dir)
	var me *state.ModeError
	if !errors.As(err, &me) {
		t.Fatalf("OpenRegister = %v, want a ModeError", err)
	}
	mustContain(t, err, "chmod 600 "+path)
	_, _, err = RegisterDeviceFor(dir, "b", access.Everything, t0)
	mustContain(t, err, "chmod 600 "+path)
	if _, ok := r.Authenticate(cred, t0, "x"); ok {
		t.Fatal("believed from a register that is too open")
	}
	same()

	os.Chmod(path, 0o600)
	os.Chmod(dir, 0o750)
	defer os.Chmod(dir, 0o700)
	_, err = OpenRegister(dir)
	mustContain(t, err, "chmod 700 "+dir)
	_, err = ListDevices(dir)
	mustContain(t, err, "chmod 700 "+dir)
}

func TestOpenRegisterEmpty_R9(t *testing.T) {
	dir := reachDir(t)
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("folder mode %o", st.Mode().Perm())
	}
	if len(r.Devices()) != 0 {
		t.Fatal("devices in an empty register")
	}
	if l, err := ListDevices(dir); err != nil || len(l) != 0 {
		t.Fatalf("ListDevices = %v, %v", l, err)
	}
	if l, err := ListDevices(filepath.Join(t.TempDir(), "none")); err != nil || len(l) != 0 {
		t.Fatalf("ListDevices of no folder = %v, %v", l, err)
	}
	if err := RevokeDevice(dir, "abcdef"); !errors.Is(err, ErrNoSuchDevice) {
		t.Fatalf("RevokeDevice = %v", err)
	}
}

func TestCredentialLen_R8(t *testing.T) {
	if want := base64.RawURLEncoding.EncodedLen(CredentialBytes); credentialLen != want {
		t.Fatalf("credentialLen = %d, want %d", credentialLen, want)
	}
}
