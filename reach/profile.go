package reach

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/phase-console/fleet/internal/yamlnode"

	"github.com/phase-console/fleet/internal/state"
)

// ProfileFile is the machine profile's name inside <stateHome>.
const ProfileFile = "machine-profile.yaml"

// MaxProfileSize bounds what LoadProfile and ParseProfile read. A machine profile is a few lines;
// the bound keeps a hostile or broken file (an alias bomb, a runaway generator) from costing more
// than a moment.
const MaxProfileSize = 64 << 10

// The values of reach.mode.
const (
	ModeOff    = "off"    // the default: the door is closed
	ModeDirect = "direct" // the door listens on Profile.Listen
)

// A Profile is the reach: section of the machine profile, validated (SPEC R1–R3).
//
// When Mode is ModeDirect, Listen is one literal unicast IP address and a port in 1–65535: never a
// wildcard, a hostname, an IPv4-mapped IPv6 address or an address with a zone; and when that
// address is public, Acknowledged names it. ParseProfile and LoadProfile never return a Profile
// that breaks this.
type Profile struct {
	Mode         string         // ModeOff or ModeDirect
	Listen       netip.AddrPort // the door's address; the zero AddrPort when reach.listen is absent
	Acknowledged string         // reach.acknowledged as written: "" or an IP address
}

// Open reports whether the profile opens the door.
func (p Profile) Open() bool { return p.Mode == ModeDirect }

// closed is what LoadProfile and ParseProfile return with an error: a profile that opens nothing.
var closed = Profile{Mode: ModeOff}

// A ProfileError says what is wrong with the machine profile: the key, the rule it breaks and,
// when known, the file and line.
type ProfileError struct {
	Path string // the file, when the profile was read from one
	Line int    // 1-based; 0 when unknown
	Key  string // "reach.listen", "reach.colour", "reach"; "" for the document as a whole
	Rule string // the rule broken, in words
}

func (e *ProfileError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Rule)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// LoadProfile reads and validates <stateHome>/machine-profile.yaml (SPEC R1–R3, F1).
//
// A missing file (or a missing <stateHome>) is the closed profile (Mode off) and no error. On any
// error the Profile returned is the closed one, so a caller that ignores the error still opens
// nothing.
//
// The file must be a regular file (a symbolic link is refused), owned by this user and writable
// by its owner only: SPEC's "owner-writable only" means no group or world write bit, so 0644 and
// 0600 are accepted and 0664 or 0666 are refused. Reading by others is allowed because the
// profile holds no secret and other tools share it; writing is not, because whoever can write it
// can open the door. <stateHome> itself must pass state.CheckHome (not writable by group or world),
// since whoever can write the folder can replace the file. Such a refusal is a *state.ModeError
// naming the path and the command that fixes it; nothing is ever re-permissioned. The file is
// checked and read through one descriptor, so it cannot be swapped between the check and the read.
func LoadProfile(stateHome string) (Profile, error) {
	b, err := ReadProfileFile(stateHome)
	if err != nil || b == nil {
		return closed, err
	}
	p, err := ParseProfile(b)
	if err != nil {
		var pe *ProfileError
		if errors.As(err, &pe) {
			pe.Path = filepath.Join(stateHome, ProfileFile)
		}
		return closed, err
	}
	return p, nil
}

// ReadProfileFile reads <stateHome>/machine-profile.yaml under F1 as LoadProfile does, for the
// sections that are not reach's (the access: section, package access): nil and no error when
// there is no file, an error when F1 refuses it or it cannot be read.
func ReadProfileFile(stateHome string) ([]byte, error) {
	path := filepath.Join(stateHome, ProfileFile)
	if err := state.CheckHome(stateHome); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	// O_NOFOLLOW refuses a symbolic link; O_NONBLOCK keeps a FIFO put in its place from hanging
	// the open (fstat then refuses it).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if errors.Is(err, syscall.ELOOP) {
			return nil, &state.ModeError{Path: path, Mode: fs.ModeSymlink, Why: "is a symbolic link",
				Fix: "replace it with the file it points to"}
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := checkProfileFile(path, st); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxProfileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if b == nil {
		b = []byte{} // an empty file is a file
	}
	return b, nil
}

// checkProfileFile is F1 for the profile: a regular file of ours that neither group nor world can
// write.
func checkProfileFile(path string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return &state.ModeError{Path: path, Mode: st.Mode(), Why: "is not a regular file", Fix: "move it out of the way"}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return &state.ModeError{Path: path, Mode: st.Mode(),
			Why: fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", sys.Uid, os.Geteuid()),
			Fix: fmt.Sprintf("chown %d %s", os.Geteuid(), path)}
	}
	if st.Mode().Perm()&0o022 != 0 {
		return &state.ModeError{Path: path, Mode: st.Mode(), Why: "is group- or world-writable", Fix: "chmod go-w " + path}
	}
	return nil
}

// document is the part of the machine profile that is ours; other top-level sections belong to
// other tools and are not decoded at all.
type document struct {
	Reach yaml.Node `yaml:"reach"`
}

// ParseProfile parses and validates a machine profile (SPEC R1–R3). Empty input, or a document
// without a reach: section, is the closed profile.
//
// It is strict about what is ours and leaves the rest alone: the input must be one YAML document
// whose top level is a mapping, with no duplicate key; under reach: only mode, listen and
// acknowledged may appear, each once, each a plain value (an unknown key is an error naming it,
// such as "reach.colour: unknown key"). Every key written is validated whatever the mode: mode
// off only makes reach.listen optional. The rules:
//
//   - reach.mode is off (the default) or direct.
//   - reach.listen is one literal IP address and a port in 1–65535 ("192.168.1.20:7443",
//     "[fd00::20]:7443"); never a wildcard (0.0.0.0, ::, an empty host), a hostname, a multicast
//     or broadcast address, an IPv4-mapped IPv6 address (write the IPv4 address), or an address
//     with a zone. IPv6 link-local addresses (fe80::/10) are refused: they cannot be bound without
//     a zone, and a zone cannot appear in a browser's URL nor in a certificate.
//   - A public address — anything outside loopback, RFC 1918, CGNAT 100.64.0.0/10, link-local
//     169.254.0.0/16 and ULA fc00::/7 — opens only when reach.acknowledged names that exact host:
//     an IP address written without brackets or port, equal to the listen address (so IPv6 may be
//     written in any of its equivalent forms, but "[2001:db8::1]" is refused).
//   - A non-empty reach.acknowledged must be such an address and equal the listen address even when
//     that address is private, so a stale or mistyped acknowledgement is found, not ignored.
//
// On error the Profile returned is the closed one and the error is a *ProfileError.
func ParseProfile(b []byte) (Profile, error) {
	if len(b) > MaxProfileSize {
		return closed, &ProfileError{Rule: fmt.Sprintf("larger than %d bytes", MaxProfileSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var raw yaml.Node
	if err := dec.Decode(&raw); err != nil {
		if err == io.EOF {
			return closed, nil // empty, or only comments
		}
		return closed, &ProfileError{Rule: "not valid YAML: " + yamlMessage(err)}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		return closed, &ProfileError{Line: next.Line, Rule: "more than one YAML document"}
	}
	if len(raw.Content) != 1 {
		return closed, &ProfileError{Rule: "not one YAML document"}
	}
	root := raw.Content[0]
	switch {
	case yamlnode.IsNull(root):
		return closed, nil // "---" alone
	case root.Kind != yaml.MappingNode:
		return closed, &ProfileError{Line: root.Line, Rule: "the document is not a mapping of sections"}
	}
	if err := noDuplicateReach(root); err != nil {
		return closed, err
	}
	// Decoding the top level through yaml/v3 (rather than walking it ourselves) finds reach: the
	// way any YAML reader would, merge keys included, and refuses duplicate top-level keys. Keys
	// that are collections (YAML allows them) cannot name reach: and are left to their owners.
	top := *root
	top.Content = nil
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := yamlnode.Resolve(root.Content[i]); k.Kind == yaml.ScalarNode {
			top.Content = append(top.Content, root.Content[i], root.Content[i+1])
		}
	}
	var doc document
	if err := top.Decode(&doc); err != nil {
		return closed, &ProfileError{Rule: "not valid YAML: " + yamlMessage(err)}
	}
	fields, err := reachFields(&doc.Reach)
	if err != nil {
		return closed, err
	}
	p, err := validate(fields)
	if err != nil {
		return closed, err
	}
	return p, nil
}

// yamlMessage drops the "yaml: " prefix of the decoder's errors.
func yamlMessage(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	return strings.ReplaceAll(s, "\n ", ";")
}

// noDuplicateReach names the lines of a second reach: key, which yaml/v3 would report without
// naming the key as ours.
func noDuplicateReach(root *yaml.Node) error {
	first := 0
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := yamlnode.Resolve(root.Content[i])
		if k.Kind != yaml.ScalarNode || k.Value != "reach" {
			continue
		}
		if first != 0 {
			return &ProfileError{Key: "reach", Line: root.Content[i].Line, Rule: fmt.Sprintf("defined twice (first at line %d)", first)}
		}
		first = root.Content[i].Line
	}
	return nil
}

// A field is one value under reach:, as written.
type field struct {
	value string
	line  int
}

// The keys under reach:, in the order they are validated.
var reachKeys = []string{"mode", "listen", "acknowledged"}

// reachFields checks the shape of the reach: section and returns its values by key.
func reachFields(section *yaml.Node) (map[string]field, error) {
	fields := make(map[string]field, len(reachKeys))
	n := yamlnode.Resolve(section)
	if yamlnode.IsNull(n) {
		return fields, nil // no reach: section, or "reach:" with nothing under it
	}
	if n.Kind != yaml.MappingNode {
		return nil, &ProfileError{Key: "reach", Line: n.Line, Rule: "must be a mapping of mode, listen and acknowledged"}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], yamlnode.Resolve(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			return nil, &ProfileError{Key: "reach", Line: kn.Line, Rule: "keys must be plain words, not aliases or collections"}
		}
		key := "reach." + kn.Value
		known := false
		for _, k := range reachKeys {
			known = known || k == kn.Value
		}
		if !known {
			rule := "unknown key"
			if kn.Tag == "!!merge" {
				rule = "unknown key (merge keys are not allowed under reach)"
			}
			return nil, &ProfileError{Key: key, Line: kn.Line, Rule: rule}
		}
		if prev, dup := fields[kn.Value]; dup {
			return nil, &ProfileError{Key: key, Line: kn.Line, Rule: fmt.Sprintf("defined twice (first at line %d)", prev.line)}
		}
		if vn.Kind != yaml.ScalarNode {
			return nil, &ProfileError{Key: key, Line: kn.Line, Rule: "must be a plain value, not a list or mapping"}
		}
		v := vn.Value
		if vn.Tag == "!!null" {
			v = "" // "listen:" with nothing after it is the same as no listen
		}
		fields[kn.Value] = field{value: v, line: kn.Line}
	}
	return fields, nil
}

// validate applies R2 and R3 to the values of reach:.
func validate(fields map[string]field) (Profile, error) {
	mode, listen, ack := fields["mode"], fields["listen"], fields["acknowledged"]
	p := Profile{Mode: ModeOff}
	switch mode.value {
	case "", ModeOff:
	case ModeDirect:
		p.Mode = ModeDirect
	default:
		return closed, &ProfileError{Key: "reach.mode", Line: mode.line, Rule: fmt.Sprintf("%q is not off or direct", mode.value)}
	}

	if listen.value == "" {
		if p.Mode == ModeDirect {
			return closed, &ProfileError{Key: "reach.listen", Line: listen.line,
				Rule: "required with mode direct: one literal IP address and port, such as 192.168.1.20:7443"}
		}
	} else {
		ap, rule := parseListen(listen.value)
		if rule != "" {
			return closed, &ProfileError{Key: "reach.listen", Line: listen.line, Rule: rule}
		}
		p.Listen = ap
	}

	if ack.value != "" {
		a, rule := parseAcknowledged(ack.value)
		if rule != "" {
			return closed, &ProfileError{Key: "reach.acknowledged", Line: ack.line, Rule: rule}
		}
		if p.Listen.IsValid() && a != p.Listen.Addr() {
			return closed, &ProfileError{Key: "reach.acknowledged", Line: ack.line,
				Rule: fmt.Sprintf("names %s, but reach.listen is %s: it must name the listen host exactly", ack.value, p.Listen.Addr())}
		}
		p.Acknowledged = ack.value
	}

	if p.Listen.IsValid() && IsPublic(p.Listen.Addr()) && p.Acknowledged == "" {
		return closed, &ProfileError{Key: "reach.listen", Line: listen.line,
			Rule: fmt.Sprintf("%s is a public address (not loopback, RFC 1918, CGNAT, link-local or ULA); "+
				"it opens only with reach.acknowledged: %q", p.Listen.Addr(), p.Listen.Addr().String())}
	}
	return p, nil
}

// parseListen returns the address of reach.listen, or the rule it breaks.
func parseListen(s string) (netip.AddrPort, string) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Sprintf("%q is not one IP address and port (write IPv6 as [address]:port)", s)
	}
	if host == "" {
		return netip.AddrPort{}, fmt.Sprintf("%q has no host, which listens on every address: name one IP address", s)
	}
	if strings.Contains(host, "%") {
		return netip.AddrPort{}, fmt.Sprintf("%q has a zone: browsers cannot open a URL with one and a certificate cannot name one; use a ULA or global address", s)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Sprintf("%q is not a literal IP address (hostnames are not allowed)", host)
	}
	if !validPort(port) {
		return netip.AddrPort{}, fmt.Sprintf("port %q is not a number from 1 to 65535", port)
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil { // e.g. "[192.168.1.20]:7443"
		return netip.AddrPort{}, fmt.Sprintf("%q is not written as address:port or [IPv6 address]:port", s)
	}
	switch {
	case addr.IsUnspecified():
		return netip.AddrPort{}, fmt.Sprintf("%s is a wildcard, which listens on every address: name one IP address", addr)
	case addr.Is4In6():
		return netip.AddrPort{}, fmt.Sprintf("%s is an IPv4-mapped IPv6 address: write %s", addr, addr.Unmap())
	case addr.IsMulticast(), addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}), thisNetwork.Contains(addr):
		return netip.AddrPort{}, fmt.Sprintf("%s is not a unicast address", addr)
	case addr.Is6() && addr.IsLinkLocalUnicast():
		return netip.AddrPort{}, fmt.Sprintf("%s is IPv6 link-local, which needs a zone to listen on; use a ULA or global address", addr)
	}
	return ap, ""
}

// validPort accepts the decimal numbers 1–65535, written without sign or leading zero.
func validPort(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && n > 0 && strconv.FormatUint(n, 10) == s
}

// parseAcknowledged returns the address of reach.acknowledged, or the rule it breaks.
func parseAcknowledged(s string) (netip.Addr, string) {
	if strings.HasPrefix(s, "[") {
		return netip.Addr{}, fmt.Sprintf("%q: write the IPv6 address without brackets (and without a port)", s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Sprintf("%q is not an IP address: name the listen host, without port", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Sprintf("%q has a zone", s)
	}
	return a, ""
}

var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// notPublic are the ranges SPEC R3 calls not public: loopback, RFC 1918, CGNAT, link-local, ULA.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fc00::/7"),
}

// IsPublic reports whether a is a public address in the sense of SPEC R3: outside loopback,
// RFC 1918, CGNAT 100.64.0.0/10, link-local and ULA fc00::/7. An IPv4-mapped address is judged as
// its IPv4 address.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
