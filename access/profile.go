package access

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/phase-console/fleet/internal/yamlnode"
)

// Mode is the profile's access.mode: what a verified caller may open when nothing names its
// consoles (a tailnet user whose WhoIs carries no CapabilityName).
type Mode string

const (
	// ModeTailnet (the default) opens every console to such a caller: the tailnet policy's
	// reach to this machine is the grant.
	ModeTailnet Mode = "tailnet"
	// ModeGrants opens none: only callers that the policy grants consoles open anything.
	ModeGrants Mode = "grants"
)

// Settings is the machine profile's access: section, validated (SPEC G1).
type Settings struct {
	Mode Mode
	// FleetPeers are the tagged peers whose pages may read this machine's index (SPEC G2),
	// MagicDNS names without the tailnet's suffix, lower case.
	FleetPeers []string
}

// Defaults is the section that an absent access: section stands for.
var Defaults = Settings{Mode: ModeTailnet}

// Refused is what a section that is refused stands for (fail closed): ModeGrants.
var Refused = Settings{Mode: ModeGrants}

// A SectionError says what is wrong with the access: section: the key, the rule it breaks, and
// when known the line.
type SectionError struct {
	Line int    // 1-based; 0 when unknown
	Key  string // "access.mode", "access.colour", "access"; "" for the document as a whole
	Rule string
}

func (e *SectionError) Error() string {
	var b strings.Builder
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Rule)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// maxProfileSize bounds what ParseProfile reads, as package reach bounds the same file.
const maxProfileSize = 64 << 10

// ParseProfile reads the access: section of a machine profile (the whole file's bytes). Empty
// input, a document without the section, or "access:" with nothing under it, is Defaults.
//
// It is strict about the section and leaves every other one alone: the input must be one YAML
// document whose top level is a mapping with at most one access: key; under it only mode and
// fleet_peers, each once. access.mode is tailnet or grants; access.fleet_peers is a list of
// MagicDNS host names without the suffix (one DNS label each, any case). Anything else — an
// unknown key, a file that is not YAML — is a *SectionError naming the key, and the Settings
// returned are Refused: a caller that ignores the error still opens nothing it was not granted.
func ParseProfile(b []byte) (Settings, error) {
	if len(b) > maxProfileSize {
		return Refused, &SectionError{Rule: fmt.Sprintf("the profile is larger than %d bytes", maxProfileSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var raw yaml.Node
	if err := dec.Decode(&raw); err != nil {
		if err == io.EOF {
			return Defaults, nil
		}
		return Refused, &SectionError{Rule: "the profile is not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		return Refused, &SectionError{Line: next.Line, Rule: "the profile holds more than one YAML document"}
	}
	if len(raw.Content) != 1 {
		return Refused, &SectionError{Rule: "the profile is not one YAML document"}
	}
	root := raw.Content[0]
	if yamlnode.IsNull(root) {
		return Defaults, nil
	}
	if root.Kind != yaml.MappingNode {
		return Refused, &SectionError{Line: root.Line, Rule: "the profile is not a mapping of sections"}
	}
	first := 0
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := yamlnode.Resolve(root.Content[i]); k.Kind == yaml.ScalarNode && k.Value == "access" {
			if first != 0 {
				return Refused, &SectionError{Key: "access", Line: root.Content[i].Line, Rule: fmt.Sprintf("defined twice (first at line %d)", first)}
			}
			first = root.Content[i].Line
		}
	}
	// Decoding the top level through yaml/v3, as package reach does for reach:, finds access:
	// the way any YAML reader would, merge keys included. Keys that are collections cannot name
	// it and are left to their owners.
	top := *root
	top.Content = nil
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := yamlnode.Resolve(root.Content[i]); k.Kind == yaml.ScalarNode {
			top.Content = append(top.Content, root.Content[i], root.Content[i+1])
		}
	}
	var doc struct {
		Access yaml.Node `yaml:"access"`
	}
	if err := top.Decode(&doc); err != nil {
		return Refused, &SectionError{Rule: "the profile is not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	section := yamlnode.Resolve(&doc.Access)
	if section == nil || yamlnode.IsNull(section) {
		return Defaults, nil
	}
	return parseSection(section)
}

func parseSection(n *yaml.Node) (Settings, error) {
	if n.Kind != yaml.MappingNode {
		return Refused, &SectionError{Key: "access", Line: n.Line, Rule: "must be a mapping of mode and fleet_peers"}
	}
	s := Defaults
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], yamlnode.Resolve(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			return Refused, &SectionError{Key: "access", Line: kn.Line, Rule: "keys must be plain words, not aliases or collections"}
		}
		key := "access." + kn.Value
		if prev, dup := seen[kn.Value]; dup {
			return Refused, &SectionError{Key: key, Line: kn.Line, Rule: fmt.Sprintf("defined twice (first at line %d)", prev)}
		}
		seen[kn.Value] = kn.Line
		switch {
		case kn.Tag == "!!merge":
			return Refused, &SectionError{Key: key, Line: kn.Line, Rule: "unknown key (merge keys are not allowed under access)"}
		case kn.Value == "mode":
			if vn.Kind != yaml.ScalarNode {
				return Refused, &SectionError{Key: key, Line: kn.Line, Rule: "must be tailnet or grants"}
			}
			switch v := vn.Value; {
			case vn.Tag == "!!null" || v == string(ModeTailnet):
				s.Mode = ModeTailnet
			case v == string(ModeGrants):
				s.Mode = ModeGrants
			default:
				return Refused, &SectionError{Key: key, Line: kn.Line, Rule: fmt.Sprintf("%q is not tailnet or grants", v)}
			}
		case kn.Value == "fleet_peers":
			peers, err := parsePeers(key, kn.Line, vn)
			if err != nil {
				return Refused, err
			}
			s.FleetPeers = peers
		default:
			return Refused, &SectionError{Key: key, Line: kn.Line, Rule: "unknown key"}
		}
	}
	return s, nil
}

func parsePeers(key string, line int, vn *yaml.Node) ([]string, error) {
	if yamlnode.IsNull(vn) {
		return nil, nil
	}
	if vn.Kind != yaml.SequenceNode {
		return nil, &SectionError{Key: key, Line: line, Rule: "must be a list of peer names, such as [build-box]"}
	}
	peers := make([]string, 0, len(vn.Content))
	for _, e := range vn.Content {
		e = yamlnode.Resolve(e)
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" || !hostLabel(e.Value) {
			return nil, &SectionError{Key: key, Line: e.Line,
				Rule: fmt.Sprintf("%q is not a peer's MagicDNS name without the suffix (one label: letters, digits, -)", e.Value)}
		}
		peers = append(peers, strings.ToLower(e.Value))
	}
	return peers, nil
}

// hostLabel reports whether s is one DNS label: 1–63 ASCII letters, digits and '-', neither first
// nor last a '-'.
func hostLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !('a' <= c && c <= 'z' || '0' <= s[i] && s[i] <= '9' || s[i] == '-') {
			return false
		}
	}
	return true
}
