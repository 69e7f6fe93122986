package conformance

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// This file is what the checker prints: probes are written with placeholders for secrets, which
// are filled in only when sent, and every token is cut out of an answer before it is shown.

const (
	// Placeholders: what a probe's description shows, replaced by a secret when sent.
	phFleet      = "<fleet token>"
	phFleetLast  = "<fleet token, last byte changed>"
	phFleetFirst = "<fleet token, first byte changed>"
	phFleetShort = "<fleet token, last byte cut>"
	phFleetLong  = "<fleet token, one byte added>"
	phRun        = "<run token>"
	phRunLast    = "<run token, last byte changed>"
)

func flipByte(s string, i int) string {
	if s == "" {
		return "x"
	}
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func (c *checker) expand(s string) string {
	short := ""
	if c.token != "" {
		short = c.token[:len(c.token)-1]
	}
	return strings.NewReplacer(
		phFleetLast, flipByte(c.token, max(len(c.token)-1, 0)),
		phFleetFirst, flipByte(c.token, 0),
		phFleetShort, short,
		phFleetLong, c.token+"A",
		phFleet, c.token,
		phRunLast, flipByte(c.runToken, max(len(c.runToken)-1, 0)),
		phRun, c.runToken,
	).Replace(s)
}

var (
	// base64url runs long enough to hold a token or most of one.
	tokenLike = regexp.MustCompile(`[A-Za-z0-9_-]{16,}`)
	// a "token" member of a JSON answer, such as POST /runs gives.
	tokenMember = regexp.MustCompile(`"token"\s*:\s*"[^"]*"`)
)

// redact cuts every token out of s, and every run of base64url that shares 16 characters with
// one (a console may echo a bearer one byte off, which is the token but for a byte), and the value
// of every JSON "token" member.
func (c *checker) redact(s string) string {
	s = tokenMember.ReplaceAllString(s, `"token":"<redacted>"`)
	return tokenLike.ReplaceAllStringFunc(s, func(m string) string {
		for i := 0; i+16 <= len(m); i++ {
			w := m[i : i+16]
			if (len(c.token) >= 16 && strings.Contains(c.token, w)) || (len(c.runToken) >= 16 && strings.Contains(c.runToken, w)) {
				return "<redacted>"
			}
		}
		return m
	})
}

// describe writes the request with placeholders, never a secret.
func (c *checker) describe(p probe) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s Host=%s", p.method, p.path, c.hostOf(p))
	for _, h := range p.hs {
		fmt.Fprintf(&b, " %s=%s", h.name, h.value)
		if h.value == "" {
			b.WriteString(`""`)
		}
	}
	return b.String()
}

func (c *checker) show(a answer) string {
	s := fmt.Sprintf("%d", a.status)
	if a.reason != "" {
		s += " " + c.redact(a.reason)
	}
	body := strings.TrimSpace(string(bytes.ToValidUTF8(a.body, []byte("?"))))
	body = strings.Join(strings.Fields(c.redact(body)), " ")
	if len(body) > 120 {
		body = body[:120] + "…"
	}
	if body != "" {
		s += " " + body
	}
	return s
}
