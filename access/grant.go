package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/phase-console/fleet/contract"
)

// CapabilityName is the app capability that carries a tailnet user's consoles in the tailnet
// policy file (SPEC G1). Each of its values is a JSON object {"consoles": [pattern, …]}.
const CapabilityName = "phase-console.dev/cap/fleet"

// All is every console: the pattern "*" alone.
const All = "*"

// A Grant is the consoles one caller may open. It is immutable once made; a nil *Grant allows
// nothing. Allows costs one map lookup for an id, plus one comparison per prefix pattern.
type Grant struct {
	all      bool
	ids      map[string]struct{}
	prefixes []string // without the "*"
	patterns []string // as Patterns returns them
}

// Everything is the Grant of every console ("*").
var Everything = &Grant{all: true, patterns: []string{All}}

// Nothing is the Grant of no console.
var Nothing = &Grant{}

// Allows reports whether g lets its caller open the console id. id is compared as it is (console
// ids are lower case, SPEC S8); the patterns were lower-cased when g was made. It allocates
// nothing.
func (g *Grant) Allows(id string) bool {
	if g == nil || id == "" {
		return false
	}
	if g.all {
		return true
	}
	if _, ok := g.ids[id]; ok {
		return true
	}
	for _, p := range g.prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// Empty reports whether g opens no console at all.
func (g *Grant) Empty() bool { return g == nil || len(g.patterns) == 0 }

// Patterns returns g's patterns, lower case, sorted, each once ("*" alone when g is every
// console). A nil Grant has none.
func (g *Grant) Patterns() []string {
	if g == nil {
		return nil
	}
	return slices.Clone(g.patterns)
}

// String is g's patterns joined by commas, as `fleet reach devices` shows them; "(none)" when
// it opens nothing.
func (g *Grant) String() string {
	if g.Empty() {
		return "(none)"
	}
	return strings.Join(g.patterns, ",")
}

// ErrPattern is wrapped by every error of ParsePattern and NewGrant.
var ErrPattern = errors.New("not a console pattern")

// ParsePattern checks one pattern and returns it lower case: a console id ("alpha"), a prefix of
// one followed by "*" ("build-*"), or "*" alone. Case is ignored ("Alpha" is "alpha"); anything
// else — an empty string, a "*" anywhere but at the end, a character no console id holds, a
// pattern longer than an id can be — is an error wrapping ErrPattern.
func ParsePattern(p string) (string, error) {
	if p == All {
		return All, nil
	}
	if !isASCII(p) { // only ASCII folds: "\u212A" (Kelvin) must not become "k"
		return "", fmt.Errorf("%w: %q holds a character no console id holds", ErrPattern, p)
	}
	lower := strings.ToLower(p)
	if prefix, ok := strings.CutSuffix(lower, "*"); ok {
		// Any non-empty start of a console id: "build-" is one (ids may hold "-" after the first).
		if prefix == "" || len(prefix) >= contract.MaxConsoleIDLen || !contract.ValidConsoleID(prefix) {
			return "", fmt.Errorf("%w: %q: a prefix pattern is the start of a console id followed by one *", ErrPattern, p)
		}
		return lower, nil
	}
	if !contract.ValidConsoleID(lower) {
		return "", fmt.Errorf("%w: %q: want a console id ([a-z0-9][a-z0-9-]{0,62}), a prefix followed by *, or * alone", ErrPattern, p)
	}
	return lower, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// NewGrant returns the Grant of patterns (ParsePattern each). Any pattern that is not one makes
// the whole list an error: a list is taken as it was written, or not at all. No pattern at all
// is Nothing.
func NewGrant(patterns []string) (*Grant, error) {
	var b Builder
	for _, p := range patterns {
		if err := b.Add(p); err != nil {
			return nil, err
		}
	}
	return b.Grant(), nil
}

// A Builder makes a Grant from the union of patterns added to it. The zero Builder is ready and
// holds nothing.
type Builder struct {
	all      bool
	ids      map[string]struct{}
	prefixes []string
}

// Add adds the pattern p (ParsePattern). A pattern that is not one is an error, and adds nothing.
func (b *Builder) Add(p string) error {
	q, err := ParsePattern(p)
	if err != nil {
		return err
	}
	b.add(q)
	return nil
}

// AddAll adds every pattern of a list, or, when one of them is not a pattern, none of them: the
// error names it.
func (b *Builder) AddAll(patterns []string) error {
	checked := make([]string, 0, len(patterns))
	for _, p := range patterns {
		q, err := ParsePattern(p)
		if err != nil {
			return err
		}
		checked = append(checked, q)
	}
	for _, q := range checked {
		b.add(q)
	}
	return nil
}

func (b *Builder) add(q string) {
	switch {
	case q == All:
		b.all = true
	case strings.HasSuffix(q, "*"):
		b.prefixes = append(b.prefixes, strings.TrimSuffix(q, "*"))
	default:
		if b.ids == nil {
			b.ids = map[string]struct{}{}
		}
		b.ids[q] = struct{}{}
	}
}

// Grant returns the union of what was added. "*" makes every other pattern moot; a prefix makes
// moot the ids and longer prefixes it covers.
func (b *Builder) Grant() *Grant {
	if b.all {
		return Everything
	}
	slices.Sort(b.prefixes)
	var prefixes []string
	for _, p := range b.prefixes {
		covered := false
		for _, q := range prefixes {
			covered = covered || strings.HasPrefix(p, q)
		}
		if !covered {
			prefixes = append(prefixes, p)
		}
	}
	g := &Grant{prefixes: prefixes}
	for id := range b.ids {
		covered := false
		for _, q := range prefixes {
			covered = covered || strings.HasPrefix(id, q)
		}
		if !covered {
			if g.ids == nil {
				g.ids = map[string]struct{}{}
			}
			g.ids[id] = struct{}{}
			g.patterns = append(g.patterns, id)
		}
	}
	for _, p := range prefixes {
		g.patterns = append(g.patterns, p+"*")
	}
	slices.Sort(g.patterns)
	if len(g.patterns) == 0 {
		return Nothing
	}
	return g
}

// ParseList reads a comma-separated list of patterns as `fleet reach pair --consoles` takes it:
// "alpha,build-*"; spaces around each are ignored. An empty list, or an empty item, is an error.
func ParseList(s string) (*Grant, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: the list is empty (give * for every console)", ErrPattern)
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return NewGrant(parts)
}
