package reach

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/state"
)

// section writes a reach: section with the keys that are not empty.
func section(mode, listen, ack string) string {
	s := "reach:\n"
	if mode != "" {
		s += "  mode: " + mode + "\n"
	}
	if listen != "" {
		s += "  listen: " + listen + "\n"
	}
	if ack != "" {
		s += "  acknowledged: " + ack + "\n"
	}
	return s
}

// TestParseProfileAccepted_R2R3: the addresses that open the door without an acknowledgement
// (loopback, RFC 1918, CGNAT, IPv4 link-local, ULA), and public ones with the right one.
func TestParseProfileAccepted_R2R3(t *testing.T) {
	for _, row := range []struct {
		name, listen, ack string
	}{
		{"R3 private 192.168", "192.168.1.20:7443", ""},
		{"R3 private 10/8", "10.1.2.3:1", ""},
		{"R3 private 172.16/12", "172.31.255.254:65535", ""},
		{"R3 CGNAT", "100.64.0.1:7443", ""},
		{"R3 CGNAT top", "100.127.255.254:7443", ""},
		{"R3 link-local v4", "169.254.10.20:7443", ""},
		{"R3 ULA", "[fd12:3456:789a::20]:7443", ""},
		{"R3 ULA fc00", "[fc00::1]:7443", ""},
		{"R3 loopback v4", "127.0.0.1:7443", ""},
		{"R3 loopback v6", "[::1]:7443", ""},
		{"R3 public v4 acknowledged", "203.0.113.5:7443", "203.0.113.5"},
		{"R3 public v4 quoted acknowledged", "203.0.113.5:7443", `"203.0.113.5"`},
		{"R3 public v6 acknowledged", "[2001:db8::5]:7443", "2001:db8::5"},
		{"R3 public v6 acknowledged in another form", "[2001:db8::5]:7443", "2001:0db8:0::5"},
		{"R3 just outside CGNAT acknowledged", "100.128.0.1:7443", "100.128.0.1"},
		{"R3 private with its own acknowledgement", "192.168.1.20:7443", "192.168.1.20"},
	} {
		t.Run(row.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(section("direct", `"`+row.listen+`"`, row.ack)))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			want := netip.MustParseAddrPort(row.listen)
			if !p.Open() || p.Mode != ModeDirect || p.Listen != want {
				t.Fatalf("profile %+v, want direct on %s", p, want)
			}
			if p.Acknowledged != strings.Trim(row.ack, `"`) {
				t.Errorf("Acknowledged = %q", p.Acknowledged)
			}
		})
	}
}

// TestParseProfileRefused_R2R3: every refusal names its key and its rule, and the Profile that
// comes with the error opens nothing.
func TestParseProfileRefused_R2R3(t *testing.T) {
	for _, row := range []struct {
		name, doc, key, rule string
	}{
		{"R2 wildcard v4", section("direct", "0.0.0.0:7443", ""), "reach.listen", "wildcard"},
		{"R2 wildcard v6", section("direct", `"[::]:7443"`, ""), "reach.listen", "wildcard"},
		{"R2 wildcard v6 long form", section("direct", `"[0:0:0:0:0:0:0:0]:7443"`, ""), "reach.listen", "wildcard"},
		{"R2 empty host", section("direct", `":7443"`, ""), "reach.listen", "no host"},
		{"R2 hostname", section("direct", "myhost:7443", ""), "reach.listen", "not a literal IP address"},
		{"R2 localhost", section("direct", "localhost:7443", ""), "reach.listen", "not a literal IP address"},
		{"R2 no port", section("direct", "192.168.1.20", ""), "reach.listen", "not one IP address and port"},
		{"R2 v6 without brackets", section("direct", `"fd00::1:7443"`, ""), "reach.listen", "not one IP address and port"},
		{"R2 port 0", section("direct", "192.168.1.20:0", ""), "reach.listen", "1 to 65535"},
		{"R2 port 65536", section("direct", "192.168.1.20:65536", ""), "reach.listen", "1 to 65535"},
		{"R2 port leading zero", section("direct", "192.168.1.20:07443", ""), "reach.listen", "1 to 65535"},
		{"R2 port name", section("direct", "192.168.1.20:https", ""), "reach.listen", "1 to 65535"},
		{"R2 port signed", section("direct", "192.168.1.20:+7443", ""), "reach.listen", "1 to 65535"},
		{"R2 bracketed v4", section("direct", `"[192.168.1.20]:7443"`, ""), "reach.listen", "not written as"},
		{"R2 v4-mapped v6", section("direct", `"[::ffff:192.168.1.20]:7443"`, ""), "reach.listen", "write 192.168.1.20"},
		{"R2 zone", section("direct", `"[fe80::1%eth0]:7443"`, ""), "reach.listen", "zone"},
		{"R2 ULA with zone", section("direct", `"[fd00::1%eth0]:7443"`, ""), "reach.listen", "zone"},
		{"R2 link-local v6", section("direct", `"[fe80::1]:7443"`, ""), "reach.listen", "link-local"},
		{"R2 multicast", section("direct", "224.0.0.251:7443", ""), "reach.listen", "not a unicast"},
		{"R2 multicast v6", section("direct", `"[ff02::1]:7443"`, ""), "reach.listen", "not a unicast"},
		{"R2 broadcast", section("direct", "255.255.255.255:7443", ""), "reach.listen", "not a unicast"},
		{"R2 this network", section("direct", "0.1.2.3:7443", ""), "reach.listen", "not a unicast"},
		{"R2 list", "reach:\n  mode: direct\n  listen: [192.168.1.20:7443, 10.0.0.1:7443]\n", "reach.listen", "plain value"},
		{"R2 direct without listen", section("direct", "", ""), "reach.listen", "required with mode direct"},
		{"R2 direct with empty listen", "reach:\n  mode: direct\n  listen:\n", "reach.listen", "required with mode direct"},
		{"R3 public without acknowledged", section("direct", "203.0.113.5:7443", ""), "reach.listen", "public address"},
		{"R3 public just outside 172.16/12", section("direct", "172.32.0.1:7443", ""), "reach.listen", "public address"},
		{"R3 public just outside CGNAT", section("direct", "100.128.0.1:7443", ""), "reach.listen", "public address"},
		{"R3 public v6 without acknowledged", section("direct", `"[2001:db8::5]:7443"`, ""), "reach.listen", "public address"},
		{"R3 public with a wrong acknowledged", section("direct", "203.0.113.5:7443", "203.0.113.6"), "reach.acknowledged", "must name the listen host"},
		{"R3 public v6 acknowledged with brackets", section("direct", `"[2001:db8::5]:7443"`, `"[2001:db8::5]"`), "reach.acknowledged", "without brackets"},
		{"R3 acknowledged with port", section("direct", "203.0.113.5:7443", `"203.0.113.5:7443"`), "reach.acknowledged", "not an IP address"},
		{"R3 acknowledged a hostname", section("direct", "203.0.113.5:7443", "example.com"), "reach.acknowledged", "not an IP address"},
		{"R3 acknowledged yes", section("direct", "203.0.113.5:7443", "yes"), "reach.acknowledged", "not an IP address"},
		{"R3 acknowledged mapped form", section("direct", "203.0.113.5:7443", `"::ffff:203.0.113.5"`), "reach.acknowledged", "must name the listen host"},
		{"R3 acknowledged with a zone", section("direct", "203.0.113.5:7443", `"fd00::1%eth0"`), "reach.acknowledged", "zone"},
		{"R3 private with a stale acknowledged", section("direct", "192.168.1.20:7443", "203.0.113.5"), "reach.acknowledged", "must name the listen host"},
		{"R1 mode on", section("on", "192.168.1.20:7443", ""), "reach.mode", "not off or direct"},
		{"R1 mode Direct", section("Direct", "192.168.1.20:7443", ""), "reach.mode", "not off or direct"},
		{"R1 mode true", section("true", "192.168.1.20:7443", ""), "reach.mode", "not off or direct"},
		{"R1 mode list", "reach:\n  mode: [direct]\n", "reach.mode", "plain value"},
		{"R2 unknown key", section("direct", "192.168.1.20:7443", "") + "  colour: blue\n", "reach.colour", "unknown key"},
		{"R2 unknown key with mode off", "reach:\n  colour: blue\n", "reach.colour", "unknown key"},
		{"R2 keys are case-sensitive", "reach:\n  Mode: direct\n", "reach.Mode", "unknown key"},
		{"R2 merge key under reach", "base: &b {mode: direct}\nreach:\n  <<: *b\n  listen: 192.168.1.20:7443\n", "reach.<<", "unknown key"},
		{"R2 alias as key", "k: &k mode\nreach:\n  *k : direct\n", "reach", "plain words"},
		{"R2 duplicate key", "reach:\n  mode: direct\n  listen: 192.168.1.20:7443\n  listen: 10.0.0.1:7443\n", "reach.listen", "defined twice"},
		{"R2 duplicate mode", "reach:\n  mode: off\n  listen: 192.168.1.20:7443\n  mode: direct\n", "reach.mode", "defined twice"},
		{"R2 duplicate reach", section("off", "", "") + section("direct", "192.168.1.20:7443", ""), "reach", "defined twice"},
		{"R2 reach a word", "reach: direct\n", "reach", "must be a mapping"},
		{"R2 reach a list", "reach:\n  - mode: direct\n", "reach", "must be a mapping"},
		{"R2 off with a junk listen", section("off", "myhost:7443", ""), "reach.listen", "not a literal IP address"},
		{"R2 off with a wildcard", section("off", "0.0.0.0:7443", ""), "reach.listen", "wildcard"},
		{"R3 off with a public listen", section("", "203.0.113.5:7443", ""), "reach.listen", "public address"},
		{"R2 document a list", "- reach\n", "", "not a mapping"},
		{"R2 document a word", "reach\n", "", "not a mapping"},
		{"R2 two documents", section("off", "", "") + "---\n" + section("direct", "192.168.1.20:7443", ""), "", "more than one YAML document"},
		{"R2 not YAML", "reach: [\n", "", "not valid YAML"},
		{"R2 tab indentation", "reach:\n\tmode: direct\n", "", "not valid YAML"},
		{"R2 duplicate top-level key", "editor: a\neditor: b\n" + section("direct", "192.168.1.20:7443", ""), "", "already defined"},
		{"R2 too large", section("direct", "192.168.1.20:7443", "") + "# " + strings.Repeat("x", MaxProfileSize) + "\n", "", "larger than"},
		{"R2 alias bomb in listen", bomb + section("direct", "*i", ""), "reach.listen", "plain value"},
		{"R2 merge bomb", mergeBomb(), "", "excessive aliasing"},
	} {
		t.Run(row.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(row.doc))
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T); want a *ProfileError", err, err)
			}
			if pe.Key != row.key || !strings.Contains(pe.Rule, row.rule) {
				t.Errorf("err = %q; want key %q and a rule saying %q", err, row.key, row.rule)
			}
			if row.key != "" && !strings.HasPrefix(err.Error(), row.key+": ") {
				t.Errorf("err = %q does not start with its key", err)
			}
			if p != closed || p.Open() {
				t.Errorf("profile with an error = %+v; want the closed one", p)
			}
		})
	}
}

// bomb is a billion-laughs document: decoded into values it would expand to 10^9 strings.
const bomb = `a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

// mergeBomb nests merge keys ten deep, ten aliases each: merged naively, 10^9 mappings.
func mergeBomb() string {
	var b strings.Builder
	b.WriteString("l0: &l0 {x: 1}\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "l%d: &l%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", i-1), 10), ","))
	}
	return b.String() + "<<: *l9\n"
}

// TestParseProfileClosed_R1: without reach.mode: direct the door stays closed; other tools'
// sections are not ours and are neither judged nor expanded.
func TestParseProfileClosed_R1(t *testing.T) {
	for _, row := range []struct {
		name, doc string
		listen    string
	}{
		{"R1 empty file", "", ""},
		{"R1 only comments", "# nothing yet\n", ""},
		{"R1 empty document", "---\n", ""},
		{"R1 no reach section", "editor:\n  theme: dark\n", ""},
		{"R1 reach with nothing under it", "reach:\n", ""},
		{"R1 reach null", "reach: ~\n", ""},
		{"R1 empty mapping", "reach: {}\n", ""},
		{"R1 mode off", section("off", "", ""), ""},
		{"R1 mode empty", "reach:\n  mode:\n", ""},
		{"R1 mode quoted off", section(`"off"`, "", ""), ""},
		{"R1 listen without mode", section("", "192.168.1.20:7443", ""), "192.168.1.20:7443"},
		{"R1 off keeps a valid listen", section("off", "192.168.1.20:7443", ""), "192.168.1.20:7443"},
		{"R1 others' sections ignored", "editor:\n  colour: red\n  1: [x, {y: z}]\nshell: [a, b]\n? [complex]\n: key\n" + section("off", "", ""), ""},
		{"R1 Reach is not reach", "Reach:\n  mode: direct\n  listen: 0.0.0.0:7443\n", ""},
		{"R1 reach nested elsewhere", "other:\n  reach:\n    mode: direct\n    listen: 0.0.0.0:7443\n", ""},
		{"R1 alias bomb elsewhere", bomb, ""},
	} {
		t.Run(row.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(row.doc))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if p.Open() || p.Mode != ModeOff {
				t.Fatalf("profile %+v; want mode off", p)
			}
			if row.listen != "" && p.Listen != netip.MustParseAddrPort(row.listen) {
				t.Errorf("Listen = %v, want %s", p.Listen, row.listen)
			}
		})
	}
}

// TestParseProfileYAMLReaders_R1: reach: is found the way any YAML reader finds it, through an
// alias or a merge at the top level, and still validated in full.
func TestParseProfileYAMLReaders_R1(t *testing.T) {
	p, err := ParseProfile([]byte("addr: &l 192.168.1.20:7443\nreach:\n  mode: direct\n  listen: *l\n"))
	if err != nil || p.Listen != netip.MustParseAddrPort("192.168.1.20:7443") {
		t.Fatalf("aliased listen: %+v, %v", p, err)
	}
	p, err = ParseProfile([]byte("base: &b\n  reach: {mode: direct, listen: 192.168.1.20:7443}\n<<: *b\n"))
	if err != nil || !p.Open() {
		t.Fatalf("merged reach: %+v, %v", p, err)
	}
	_, err = ParseProfile([]byte("base: &b\n  reach: {mode: direct, listen: 0.0.0.0:7443}\n<<: *b\n"))
	if err == nil || !strings.Contains(err.Error(), "reach.listen: ") {
		t.Fatalf("merged wildcard: %v", err)
	}
}

// writeProfile writes a profile into a fresh private <stateHome> with the given mode.
func writeProfile(t *testing.T, body string, mode os.FileMode) (home, path string) {
	t.Helper()
	home = t.TempDir()
	path = filepath.Join(home, ProfileFile)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return home, path
}

// TestLoadProfileModes_F1: "owner-writable only" means no group or world write bit: 0644 (others
// may read a file with no secret in it) opens the door, 0664 or 0666 is refused with the path and
// the chmod that fixes it, and the file is left as it was.
func TestLoadProfileModes_F1(t *testing.T) {
	body := section("direct", "192.168.1.20:7443", "")
	for _, row := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true}, {0o644, true}, {0o640, true}, {0o444, true}, {0o400, true},
		{0o664, false}, {0o666, false}, {0o646, false}, {0o620, false}, {0o602, false}, {0o777, false},
	} {
		t.Run(fmt.Sprintf("F1 profile %04o", row.mode), func(t *testing.T) {
			home, path := writeProfile(t, body, row.mode)
			p, err := LoadProfile(home)
			if row.ok {
				if err != nil || !p.Open() {
					t.Fatalf("refused: %+v, %v", p, err)
				}
				return
			}
			var me *state.ModeError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod go-w "+path) {
				t.Fatalf("err = %v; want a ModeError naming %s and chmod go-w", err, path)
			}
			if p.Open() {
				t.Errorf("a refused profile opened the door: %+v", p)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != row.mode {
				t.Errorf("mode changed to %04o", st.Mode().Perm())
			}
		})
	}
}

// TestLoadProfileFile_F1: a missing profile (or state folder) is mode off; a profile that is not
// a regular file of ours, or sits in a folder others can write, is refused; a profile error names
// the file, the key and the rule.
func TestLoadProfileFile_F1(t *testing.T) {
	t.Run("F1 missing file", func(t *testing.T) {
		p, err := LoadProfile(t.TempDir())
		if err != nil || p.Open() || p.Mode != ModeOff {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("F1 missing state folder", func(t *testing.T) {
		p, err := LoadProfile(filepath.Join(t.TempDir(), "nope"))
		if err != nil || p.Open() {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("R2 error names file, key and rule", func(t *testing.T) {
		home, path := writeProfile(t, section("direct", "192.168.1.20:7443", "")+"  colour: blue\n", 0o644)
		_, err := LoadProfile(home)
		var pe *ProfileError
		if !errors.As(err, &pe) || pe.Path != path || err.Error() != path+": reach.colour: unknown key (line 4)" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("F1 symlink", func(t *testing.T) {
		home, path := writeProfile(t, section("direct", "192.168.1.20:7443", ""), 0o600)
		real := filepath.Join(home, "real.yaml")
		os.Rename(path, real)
		os.Symlink(real, path)
		if p, err := LoadProfile(home); err == nil || p.Open() || !strings.Contains(err.Error(), path+" is a symbolic link") {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("F1 a folder in its place", func(t *testing.T) {
		home := t.TempDir()
		os.Mkdir(filepath.Join(home, ProfileFile), 0o700)
		if p, err := LoadProfile(home); err == nil || p.Open() || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("F1 a FIFO in its place", func(t *testing.T) {
		home := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(home, ProfileFile), 0o600); err != nil {
			t.Skip(err)
		}
		if p, err := LoadProfile(home); err == nil || p.Open() || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("F1 state folder writable by group", func(t *testing.T) {
		home, _ := writeProfile(t, section("direct", "192.168.1.20:7443", ""), 0o600)
		os.Chmod(home, 0o770)
		if p, err := LoadProfile(home); err == nil || p.Open() || !strings.Contains(err.Error(), "chmod go-w "+home) {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("F1 owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give the file away")
		}
		home, path := writeProfile(t, section("direct", "192.168.1.20:7443", ""), 0o644)
		if err := os.Chown(path, otheruser.UID, otheruser.UID); err != nil {
			t.Fatal(err)
		}
		var me *state.ModeError
		if p, err := LoadProfile(home); !errors.As(err, &me) || p.Open() || !strings.Contains(err.Error(), fmt.Sprintf("chown %d %s", os.Geteuid(), path)) {
			t.Fatalf("%+v, %v", p, err)
		}
	})
	t.Run("R2 too large a file", func(t *testing.T) {
		home, _ := writeProfile(t, section("direct", "192.168.1.20:7443", "")+strings.Repeat("#\n", MaxProfileSize), 0o600)
		if p, err := LoadProfile(home); err == nil || p.Open() || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("%+v, %v", p, err)
		}
	})
}
