package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	qrcode "github.com/skip2/go-qrcode"
	"golang.org/x/crypto/scrypt"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
)

const directProfile = "reach:\n  mode: direct\n  listen: 192.168.1.20:7443\n"

// reachHome makes a <stateHome> whose machine profile is profile ("" for none).
func reachHome(t *testing.T, profile string) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if profile != "" {
		if err := os.WriteFile(filepath.Join(home, reach.ProfileFile), []byte(profile), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// writeCheapPassword stores pw's hash at the lowest cost LoadPassword accepts (ln=14), so that
// the tests that only need a password set do not pay for ln=17 under the race detector.
func writeCheapPassword(t *testing.T, home, pw string) {
	t.Helper()
	salt := make([]byte, 16)
	rand.Read(salt)
	key, err := scrypt.Key([]byte(pw), salt, 1<<14, 8, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawStdEncoding
	dir := pairingFolder(home)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stored := fmt.Sprintf("$scrypt$ln=14,r=8,p=1$%s$%s\n", b64.EncodeToString(salt), b64.EncodeToString(key))
	if err := os.WriteFile(filepath.Join(dir, pairing.PasswordFile), []byte(stored), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pairing.LoadPassword(dir); err != nil {
		t.Fatal(err)
	}
}

// playStdin makes `fleet reach password` read in from a pipe (not a terminal).
func playStdin(t *testing.T, in string) {
	t.Helper()
	old, oldTerm := passwordStdin, stdinIsTerminal
	passwordStdin, stdinIsTerminal = strings.NewReader(in), func() bool { return false }
	t.Cleanup(func() { passwordStdin, stdinIsTerminal = old, oldTerm })
}

// playTerminal makes `fleet reach password` read lines from a terminal without echo: each
// readHidden returns the next of lines.
func playTerminal(t *testing.T, lines ...string) {
	t.Helper()
	old, oldTerm := readHidden, stdinIsTerminal
	stdinIsTerminal = func() bool { return true }
	readHidden = func() ([]byte, error) {
		if len(lines) == 0 {
			return nil, io.EOF
		}
		l := lines[0]
		lines = lines[1:]
		return []byte(l), nil
	}
	t.Cleanup(func() { readHidden, stdinIsTerminal = old, oldTerm })
}

func storedPassword(t *testing.T, home string) (string, bool) {
	t.Helper()
	s, err := pairing.LoadPassword(pairingFolder(home))
	if errors.Is(err, pairing.ErrNoPassword) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

// TestReachPasswordStdin_R8: --stdin reads one line and stores only its scrypt hash (ln=17, r=8,
// p=1), 0600; the password is never printed. A short, empty or overlong line, or a pipe without
// --stdin, stores nothing and exits 1 with a line that says why.
func TestReachPasswordStdin_R8(t *testing.T) {
	const pw = "correct horse battery"
	for _, tc := range []struct {
		name, in string
		args     []string
		want     string // in stderr
	}{
		{"too short", "short\n", []string{"--stdin"}, "too short"},
		{"empty", "", []string{"--stdin"}, "empty"},
		{"empty line", "\n", []string{"--stdin"}, "empty"},
		{"overlong", strings.Repeat("x", pairing.MaxPasswordLen+1) + "\n", []string{"--stdin"}, "longer than"},
		{"no newline, overlong", strings.Repeat("x", 5000), []string{"--stdin"}, "longer than"},
		{"a pipe without --stdin", pw + "\n", nil, "--stdin"},
	} {
		home := reachHome(t, "")
		playStdin(t, tc.in)
		st, out, errs := fleetCmd(append([]string{"reach", "password", "--state-dir", home}, tc.args...)...)
		if st != 1 || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and one line with %q", tc.name, st, out, errs, tc.want)
		}
		if _, ok := storedPassword(t, home); ok {
			t.Errorf("%s: a password was stored", tc.name)
		}
	}

	home := reachHome(t, "")
	playStdin(t, pw+"\r\n")
	st, out, errs := fleetCmd("reach", "password", "--stdin", "--state-dir", home)
	if st != 0 {
		t.Fatalf("exit %d: %s", st, errs)
	}
	if strings.Contains(out+errs, pw) {
		t.Error("R8 the password was printed")
	}
	path := filepath.Join(pairingFolder(home), pairing.PasswordFile)
	if !strings.Contains(out, path) {
		t.Errorf("stdout does not name the file: %q", out)
	}
	stored, _ := storedPassword(t, home)
	if !strings.HasPrefix(stored, "$scrypt$ln=17,r=8,p=1$") || strings.Contains(stored, pw) {
		t.Fatalf("R8 stored %q", stored)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("F1 mode %o", st.Mode().Perm())
	}
	if ok, err := pairing.CheckPasswordContext(context.Background(), stored, []byte(pw)); !ok || err != nil {
		t.Errorf("the stored hash does not match the line read (its \\r\\n dropped): %v %v", ok, err)
	}
}

// TestReachPasswordTerminal_R8: on a terminal the password is asked twice without echo (the
// prompts on stderr, the password nowhere in the output); two different answers store nothing.
func TestReachPasswordTerminal_R8(t *testing.T) {
	const pw = "tr0ub4dor&3 horse"
	home := reachHome(t, "")
	playTerminal(t, pw, pw+"x")
	st, out, errs := fleetCmd("reach", "password", "--state-dir", home)
	if st != 1 || !strings.Contains(errs, "differ") || !strings.Contains(errs, "nothing was stored") {
		t.Errorf("mismatch: exit %d, stderr %q", st, errs)
	}
	if _, ok := storedPassword(t, home); ok {
		t.Error("a password was stored after a mismatch")
	}
	if strings.Contains(out+errs, pw) {
		t.Error("R8 the password was echoed")
	}

	playTerminal(t, pw, pw)
	st, out, errs = fleetCmd("reach", "password", "--state-dir", home)
	if st != 0 || !strings.Contains(errs, "Pairing password: ") || !strings.Contains(errs, "Again: ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", st, out, errs)
	}
	if strings.Contains(out+errs, pw) {
		t.Error("R8 the password was echoed")
	}
	stored, _ := storedPassword(t, home)
	if ok, _ := pairing.CheckPasswordContext(context.Background(), stored, []byte(pw)); !ok {
		t.Error("the stored hash does not match")
	}
}

var pairLinkRE = regexp.MustCompile(`https://\S+`)

// pairOutput runs `fleet reach pair` and returns the link it printed, parsed, with the output.
func pairOutput(t *testing.T, args ...string) (*url.URL, string) {
	t.Helper()
	st, out, errs := fleetCmd(append([]string{"reach", "pair"}, args...)...)
	if st != 0 {
		t.Fatalf("fleet reach pair: exit %d\n%s", st, errs)
	}
	var links, others []string
	for _, l := range pairLinkRE.FindAllString(out, -1) {
		if strings.Contains(l, pairing.PairPath+"#") {
			links = append(links, l)
		} else {
			others = append(others, l)
		}
	}
	if len(links) != 1 {
		t.Fatalf("want one pairing link, got %q in\n%s", links, out)
	}
	// Beside it, only the door's root (step 1 of the steps printed): no other address.
	for _, l := range others {
		if !strings.HasSuffix(l, "/ca.crt") || strings.TrimSuffix(l, "/ca.crt") != strings.SplitN(links[0], pairing.PairPath, 2)[0] {
			t.Errorf("a link that is neither the pairing link nor its door's /ca.crt: %q in\n%s", l, out)
		}
	}
	u, err := url.Parse(links[0])
	if err != nil {
		t.Fatal(err)
	}
	return u, out
}

// startReachSupervisor runs a supervisor on home, as fleet serve does, and has it read the
// machine profile now: its door is then open, or closed saying why.
func startReachSupervisor(t *testing.T, home string) *supervisortest.Door {
	t.Helper()
	d := supervisortest.Start(t, supervisor.Config{StateHome: home, TailscaledUID: os.Getuid(),
		TailscaleSocket: filepath.Join(t.TempDir(), "none.sock")})
	d.Server.ReloadReach()
	return d
}

// directProfileAt is a machine profile that opens the door on listen.
func directProfileAt(listen string) string {
	return "reach:\n  mode: direct\n  listen: " + listen + "\n"
}

// TestReachPair_R8: the link is the open door's pairing page with the code in its #fragment and
// never in a query; the code is shown XXXX-XXXX and pairs once, under the --name given; the QR
// code encodes the link; the root's fingerprint is the one the running door serves.
func TestReachPair_R8(t *testing.T) {
	listen := rawhttp.FreeLoopbackAddr(t).String()
	home := reachHome(t, directProfileAt(listen))
	writeCheapPassword(t, home, "correct horse battery")
	d := startReachSupervisor(t, home)
	st := d.Server.ReachStatus()
	if !st.Open || st.Fingerprint == "" {
		t.Fatalf("control: the door did not open: %+v", st)
	}

	u, out := pairOutput(t, "--name", "Ann's phone", "--state-dir", home)
	if u.Scheme != "https" || u.Host != listen || u.Path != "/pair" {
		t.Errorf("R8 link %s", u)
	}
	if u.RawQuery != "" || strings.Contains(u.String(), "?") {
		t.Errorf("S11 the link has a query: %s", u)
	}
	code := u.Fragment
	if !regexp.MustCompile(`^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`).MatchString(code) {
		t.Fatalf("R8 fragment %q is not a code XXXX-XXXX", code)
	}
	if !strings.Contains(out, "Pairing code:      "+code) {
		t.Errorf("the code is not shown:\n%s", out)
	}
	q, err := qrcode.New(u.String(), qrcode.Medium)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, q.ToSmallString(false)) {
		t.Errorf("R8 no QR code of the link in:\n%s", out)
	}
	if fp := servedRootFingerprint(t, listen); fp != st.Fingerprint {
		t.Fatalf("control: the root the door serves at /ca.crt has fingerprint %q, the door says %q", fp, st.Fingerprint)
	}
	if !strings.Contains(out, "Root fingerprint:  "+st.Fingerprint+"\n") {
		t.Errorf("R4 the root fingerprint %s is not printed:\n%s", st.Fingerprint, out)
	}
	wantTrustFirst(t, out, listen, u.String(), st.Fingerprint)
	issued, err := pairing.RedeemCode(pairingFolder(home), code, time.Now, func() (bool, error) { return true, nil })
	if err != nil || issued.Name != "Ann's phone" {
		t.Fatalf("R8 redeeming the printed code: %q, %v", issued.Name, err)
	}
	if _, err := pairing.RedeemCode(pairingFolder(home), code, time.Now, func() (bool, error) { return true, nil }); !errors.Is(err, pairing.ErrCodeUsed) {
		t.Errorf("R8 the code paired twice: %v", err)
	}
}

// servedRootFingerprint is the fingerprint of the root the door at listen serves at /ca.crt, as a
// phone fetches it before it trusts the door.
func servedRootFingerprint(t *testing.T, listen string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get("https://" + listen + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(body)
	if resp.StatusCode != http.StatusOK || blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("GET /ca.crt: %d, not a PEM certificate: %q", resp.StatusCode, body)
	}
	return ca.FormatFingerprint(sha256.Sum256(blk.Bytes))
}

// wantTrustFirst checks that out, a run of fleet reach pair for the door at listen, leads the user
// through the safe order (SPEC R4, R8): first the door's root — its URL https://<listen>/ca.crt,
// a QR code of it, and the root's fingerprint to check in the device's certificate settings —,
// then the pairing link and its QR code, with the word to stop, typing no password, if the
// browser warns on it.
func wantTrustFirst(t *testing.T, out, listen, link, fingerprint string) {
	t.Helper()
	rootURL := "https://" + listen + "/ca.crt"
	rootQR, err := qrcode.New(rootURL, qrcode.Medium)
	if err != nil {
		t.Fatal(err)
	}
	linkQR, err := qrcode.New(link, qrcode.Medium)
	if err != nil {
		t.Fatal(err)
	}
	// Compared with runs of white space made one space, so that the text may be wrapped anew; a
	// QR code so compared is still itself.
	flat := func(s string) string { return " " + strings.Join(strings.Fields(s), " ") + " " }
	text := flat(out)
	steps := []struct{ what, s string }{
		{"the root's URL", rootURL},
		{"the root URL's QR code", rootQR.ToSmallString(false)},
		{"where to check the fingerprint", "SHA-256 fingerprint in the device's certificate settings"},
		{"the root fingerprint", "Root fingerprint: " + fingerprint},
		{"the pairing link", link},
		{"the link's QR code", linkQR.ToSmallString(false)},
		{"the code", "Pairing code: "},
		{"the word to stop on a warning", "If the browser warns, stop: do not type the pairing password"},
	}
	last := -1
	for _, st := range steps {
		i := strings.Index(text, flat(st.s))
		switch {
		case i < 0:
			t.Errorf("R8 %s is not printed (%q):\n%s", st.what, st.s, out)
		case i < last:
			t.Errorf("R8 %s is printed before what comes before it: want, in order, %q", st.what, steps)
		default:
			last = i
		}
	}
	if strings.Count(text, flat(rootQR.ToSmallString(false))) != 1 || strings.Count(text, flat(link)) != 1 {
		t.Error("the root's QR code or the pairing link is printed more than once")
	}
}

// wantNoCode checks that `fleet reach pair --state-dir home` exits 1 with one line on stderr that
// holds every one of want, prints nothing, and issues no code.
func wantNoCode(t *testing.T, what, home string, want ...string) {
	t.Helper()
	st, out, errs := fleetCmd("reach", "pair", "--state-dir", home)
	if st != 1 || out != "" {
		t.Errorf("%s: exit %d, stdout %q; want exit 1 and nothing printed", what, st, out)
	}
	for _, w := range want {
		if !strings.Contains(errs, w) {
			t.Errorf("%s: stderr %q lacks %q", what, errs, w)
		}
	}
	if _, err := os.Lstat(filepath.Join(pairingFolder(home), pairing.CodesFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: a code was issued", what)
	}
}

// TestReachPairRefused_R1_R8: with the door off, a refused profile or no pairing password,
// fleet reach pair exits 1 saying what to do, and issues no code.
func TestReachPairRefused_R1_R8(t *testing.T) {
	for _, tc := range []struct {
		name, profile string
		password      bool
		want          []string
	}{
		{"no profile", "", true, []string{"door is off", "mode: direct", "listen:", "machine-profile.yaml"}},
		{"mode off", "reach:\n  mode: off\n", true, []string{"door is off"}},
		{"a wildcard listen", "reach:\n  mode: direct\n  listen: 0.0.0.0:7443\n", true, []string{"reach.listen"}},
		{"no password", directProfile, false, []string{"fleet reach password"}},
	} {
		home := reachHome(t, tc.profile)
		if tc.password {
			writeCheapPassword(t, home, "correct horse battery")
		}
		wantNoCode(t, tc.name, home, tc.want...)
	}
}

// TestReachPairRefusedUnlessTheDoorIsOpen_R8: fleet reach pair issues a code only when the
// running supervisor says that its door is open at the profile's address, so that it never hands
// out a code that cannot pair (nor a link to someone else's server): with no fleet serve running,
// with the door's address held by another process, and with an address that is not this
// machine's, it exits 1 with one line that says what to do, and issues no code. Checking only the
// profile and the password would issue a code in every one of these cases.
func TestReachPairRefusedUnlessTheDoorIsOpen_R8(t *testing.T) {
	t.Run("no fleet serve", func(t *testing.T) {
		home := reachHome(t, directProfileAt(rawhttp.FreeLoopbackAddr(t).String()))
		writeCheapPassword(t, home, "correct horse battery")
		wantNoCode(t, "no fleet serve", home, "no code issued", "no fleet serve is running", "start 'fleet serve'")
	})
	t.Run("held by another process", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		home := reachHome(t, directProfileAt(ln.Addr().String()))
		writeCheapPassword(t, home, "correct horse battery")
		if st := startReachSupervisor(t, home).Server.ReachStatus(); st.Open {
			t.Fatalf("control: the door opened on a held address: %+v", st)
		}
		wantNoCode(t, "held", home, "no code issued", "not open at "+ln.Addr().String(), "another process holds that address")
	})
	t.Run("not this machine's address", func(t *testing.T) {
		home := reachHome(t, directProfileAt("10.255.255.1:7443"))
		writeCheapPassword(t, home, "correct horse battery")
		if st := startReachSupervisor(t, home).Server.ReachStatus(); st.Open {
			t.Skipf("this machine has 10.255.255.1: %+v", st)
		}
		wantNoCode(t, "not this machine's", home, "no code issued", "not open at 10.255.255.1:7443", "not this machine's")
	})
}

// TestReachPairJudgesTheSupervisorsAnswer_R8: what the running supervisor says of its door
// decides: a code only for a door open at the profile's address, with its fingerprint; a door
// still open at the old address (the profile changed, not picked up yet), one not opened yet, and
// one that failed, each a reason that says what to do.
func TestReachPairJudgesTheSupervisorsAnswer_R8(t *testing.T) {
	listen := netip.MustParseAddrPort("192.168.1.20:7443")
	for _, tc := range []struct {
		name string
		st   supervisor.ReachStatus
		want []string // in the error; none: the fingerprint is returned
	}{
		{"open here", supervisor.ReachStatus{Mode: "direct", Listen: listen.String(), Open: true, Fingerprint: "AB CD"}, nil},
		{"open elsewhere", supervisor.ReachStatus{Mode: "direct", Listen: "192.168.1.20:8443", Open: true, Fingerprint: "AB CD"},
			[]string{"open at 192.168.1.20:8443", "not yet at the profile's 192.168.1.20:7443", "SIGHUP"}},
		{"not read yet", supervisor.ReachStatus{Mode: "off"}, []string{"not opened its door at 192.168.1.20:7443 yet", "try again"}},
		{"off", supervisor.ReachStatus{Mode: "off", Why: "reach.mode is off"}, []string{"not open at 192.168.1.20:7443 (reach.mode is off)", "fleet reach status"}},
		{"held", supervisor.ReachStatus{Mode: "direct", Listen: listen.String(), Why: "reach: listen on 192.168.1.20:7443: listen tcp4 192.168.1.20:7443: bind: " + syscall.EADDRINUSE.Error()},
			[]string{"not open at 192.168.1.20:7443", "another process holds that address"}},
		{"not this machine's", supervisor.ReachStatus{Mode: "direct", Listen: listen.String(), Why: "reach: listen on 192.168.1.20:7443: listen tcp4 192.168.1.20:7443: bind: " + syscall.EADDRNOTAVAIL.Error()},
			[]string{"not open at 192.168.1.20:7443", "not this machine's"}},
	} {
		fp, err := openDoorFingerprint(tc.st, listen)
		if tc.want == nil {
			if err != nil || fp != "AB CD" {
				t.Errorf("%s: %q, %v; want the fingerprint", tc.name, fp, err)
			}
			continue
		}
		if err == nil || fp != "" {
			t.Errorf("%s: %q, %v; want an error", tc.name, fp, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %q lacks %q (or is not one line)", tc.name, err, w)
			}
		}
	}
}

// TestReachPairRefusedWhileAnotherUserHoldsTheDoor_R8: when the running supervisor's door cannot
// open because another local user holds its address (bound first: after a reboot, while fleet
// restarted, or before DHCP gave the address), fleet reach pair issues no code and prints no
// link: the phone that followed https://<listen>/pair#<code> would meet a certificate warning the
// pairing flow tells it to expect, and the other user's server would read the live code from the
// fragment and the long-lived pairing password from the form.
func TestReachPairRefusedWhileAnotherUserHoldsTheDoor_R8(t *testing.T) {
	listen := rawhttp.FreeLoopbackAddr(t)
	holdAsOtherUser(t, listen)
	home := reachHome(t, directProfileAt(listen.String()))
	writeCheapPassword(t, home, "correct horse battery")
	d := startReachSupervisor(t, home)
	if st := d.Server.ReachStatus(); st.Open || st.Why == "" {
		t.Fatalf("control: the door on an address uid %d holds: %+v", otheruser.UID, st)
	}
	wantNoCode(t, "held by uid 4242", home, "no code issued", "not open at "+listen.String(), "another process holds that address")
}

// TestReachDevices_R8: the table and --json list every device (name, id6, created, last seen),
// never a credential; an empty register says so.
func TestReachDevices_R8(t *testing.T) {
	home := reachHome(t, "")
	if st, out, _ := fleetCmd("reach", "devices", "--state-dir", home); st != 0 || !strings.Contains(out, "no paired devices") {
		t.Errorf("empty: %d %q", st, out)
	}
	if st, out, _ := fleetCmd("reach", "devices", "--json", "--state-dir", home); st != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("empty --json: %d %q", st, out)
	}
	dir := pairingFolder(home)
	t1 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	ann, cred1, err := pairing.RegisterDeviceFor(dir, "Ann's phone", access.Everything, t1)
	if err != nil {
		t.Fatal(err)
	}
	bob, cred2, err := pairing.RegisterDeviceFor(dir, "Bob tablet", access.Everything, t1.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := pairing.OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg.Authenticate(cred1, t1.Add(2*time.Hour), "192.168.1.33:50000") // writes last seen
	reg.WaitWrites()                                                   // in the background

	st, out, _ := fleetCmd("reach", "devices", "--state-dir", home)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if st != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "LAST SEEN") {
		t.Fatalf("table: %d\n%s", st, out)
	}
	for i, want := range [][]string{
		{"Ann's phone", ann.ID6, t1.Local().Format(time.DateTime), t1.Add(2 * time.Hour).Local().Format(time.DateTime), "192.168.1.33:50000"},
		{"Bob tablet", bob.ID6, "never"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}

	st, out, _ = fleetCmd("reach", "devices", "--json", "--state-dir", home)
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); st != 0 || err != nil || len(got) != 2 {
		t.Fatalf("--json: %d %v\n%s", st, err, out)
	}
	if got[0]["id6"] != ann.ID6 || got[0]["login"] != ann.Login() || got[0]["last_seen"] == nil || got[1]["last_seen"] != nil || got[1]["name"] != "Bob tablet" {
		t.Errorf("--json: %v", got)
	}
	for _, c := range []string{cred1, cred2} {
		if bytes.Contains([]byte(out), []byte(c)) {
			t.Error("a credential is printed")
		}
	}
}

// TestReachRevoke_R8: revoke removes the device (the id6 before or after the flags); an unknown
// id6 is exit 1, a missing one or two of them bad usage.
func TestReachRevoke_R8(t *testing.T) {
	home := reachHome(t, "")
	dir := pairingFolder(home)
	now := time.Now()
	ann, _, _ := pairing.RegisterDeviceFor(dir, "Ann's phone", access.Everything, now)
	bob, _, _ := pairing.RegisterDeviceFor(dir, "Bob tablet", access.Everything, now.Add(time.Second))
	reg, err := pairing.OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	revoked := make(chan string, 2)
	reg.OnRevoke(func(id string) { revoked <- id })

	st, out, errs := fleetCmd("reach", "revoke", ann.ID6, "--state-dir", home)
	if st != 0 || !strings.Contains(out, "revoked Ann's phone ("+ann.ID6+")") {
		t.Fatalf("revoke: %d %q %q", st, out, errs)
	}
	reg.Refresh()
	if got := <-revoked; got != ann.ID6 {
		t.Errorf("R8 a running register saw %q revoked", got)
	}
	if st, _, _ := fleetCmd("reach", "revoke", "--state-dir", home, bob.ID6); st != 0 {
		t.Errorf("id6 after the flags: exit %d", st)
	}
	if devs, _ := pairing.ListDevices(dir); len(devs) != 0 {
		t.Errorf("left: %+v", devs)
	}

	for _, tc := range []struct {
		args []string
		want int
		msg  string
	}{
		{[]string{ann.ID6}, 1, "no paired device"}, // revoked already
		{[]string{"zzzzzz"}, 1, "no paired device"},
		{[]string{"not-an-id"}, 1, "no paired device"},
		{nil, 2, "which device"},
		{[]string{"aaaaaa", "bbbbbb"}, 2, "unexpected argument"},
	} {
		st, _, errs := fleetCmd(append([]string{"reach", "revoke", "--state-dir", home}, tc.args...)...)
		if st != tc.want || !strings.Contains(errs, tc.msg) {
			t.Errorf("revoke %v: exit %d, stderr %q; want %d with %q", tc.args, st, errs, tc.want, tc.msg)
		}
	}
}
