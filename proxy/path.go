package proxy

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/phase-console/fleet/contract"
)

// This file is the path judgement of the reverse proxy (SPEC S7): one pure function that turns the
// raw request-target of a request for /c/<id>/... into the console id and the path forwarded to the
// console, or refuses it. It fails closed: anything it cannot judge with certainty is refused.

// A Route is a judged request path under /c/<id>/.
type Route struct {
	ID   string // the console id, lower-cased, matches [a-z0-9][a-z0-9-]{0,62}
	Path string // the decoded, canonical path forwarded to the console; always starts with "/"
}

// Refusal reasons and statuses produced by JudgePath.
const (
	ReasonBadPath  = "bad-path" // 400: the path is not canonical or not a console path
	ReasonHooks    = "hooks"    // 403: the path is /c/<id>/hooks or below it
	ReasonRedirect = "redirect" // 308: "/c/<id>" without the trailing slash; Detail is "/c/<id>/"
)

// JudgePath judges the raw request-target (http.Request.RequestURI: path plus optional "?query")
// of a request for /c/<id>/... . It returns the Route to forward, or a Refusal:
//
//   - 400 "bad-path" for any path that is not canonical or is not /c/<id>/...;
//   - 403 "hooks" for /c/<id>/hooks and everything below it, whatever the case or encoding of
//     "hooks" (Unicode simple folding: "hoo\u212As" with the Kelvin sign is hooks too);
//   - 308 "redirect" for "/c/<id>" without a trailing slash. This is not an error: Detail is the
//     path to redirect to, "/c/<id>/" with the id lower-cased; the caller puts it in Location (and
//     appends the request's "?query" itself, if it wants to keep it). WriteRefusal does not set
//     Location, so the caller must answer this one itself.
//
// Order of checks (the first failing one answers):
//
//  1. the query (from the first '?') is cut off; it is never judged, returned or put in a detail;
//  2. the raw path must start with '/' (absolute-form, "*" and "" are 400 bad-path);
//  3. raw bytes: '\', ';', '#', space, and control bytes (NUL, < 0x20, 0x7f) are 400 bad-path;
//  4. every segment, left to right: not empty (one trailing '/' excepted), well-formed
//     percent-escapes, and after decoding: no '/', '\', ';', '#', '%' or control byte, valid UTF-8,
//     not "." or ".." — else 400 bad-path;
//  5. the first segment (decoded, like all: "/%63/a/" is "/c/a/") must case-fold to "c" (400
//     bad-path "not a console path");
//  6. the second segment, ASCII lower-cased, is the id and must match [a-z0-9][a-z0-9-]{0,62}
//     (400 bad-path);
//  7. "/c/<id>" with nothing after it is 308 redirect to "/c/<id>/";
//  8. the third segment, if it case-folds (strings.EqualFold) to "hooks", is 403 hooks.
//
// The whole path is proven canonical (1-4) before the hooks rule (8) is applied, so a trick aimed at
// hooks such as "/c/a/hooks/..%2f" or "/c/a/hooks//x" is 400 bad-path (a failure that counts under
// SPEC R6), and only a canonical path under hooks is 403 hooks. Either way it is never forwarded.
//
// When the Refusal is nil, the Route guarantees:
//
//   - ID matches [a-z0-9][a-z0-9-]{0,62};
//   - Path starts with "/", has no empty, "." or ".." segment (it may end in a single "/"), and no
//     segment contains '/', '\', ';', '#', '%', a control byte or invalid UTF-8;
//   - the first segment of Path is never strings.EqualFold "hooks";
//   - Path is exactly what was judged: with out.URL.Path = Path and out.URL.RawPath = "", the
//     path that net/http sends, (&url.URL{Path: Path}).EscapedPath(), decodes back to Path and
//     JudgePath("/c/" + ID + that) returns the same Route.
//
// The detail of a Refusal is short and never contains the query.
func JudgePath(requestURI string) (Route, *Refusal) {
	p := rawPath(requestURI)
	if p == "" || p[0] != '/' {
		return Route{}, badPath("path is not absolute")
	}
	for i := 0; i < len(p); i++ {
		if refusedRawByte(p[i]) {
			return Route{}, badPath("refused character in path")
		}
	}

	// Segments of p after the leading '/'; one trailing '/' is allowed.
	body := p[1:]
	trailing := strings.HasSuffix(body, "/")
	if trailing {
		body = body[:len(body)-1]
	}
	if body == "" {
		return Route{}, badPath("not a console path")
	}
	var (
		n          int    // number of segments
		first, id  string // decoded segments 0 and 1
		third      string // decoded segment 2, the first segment of the forwarded path
		restStart  int    // index in p of the '/' that starts the forwarded path
		restEscape bool   // the forwarded part holds a percent-escape
		off        = 1    // index in p of the current segment
	)
	for seg := range strings.SplitSeq(body, "/") {
		var d, why string
		if n < 3 {
			d, why = decodeSegment(seg)
		} else {
			// Only judged, never kept: no need to build the decoded string.
			d, why = seg, judgeSegment(seg)
		}
		if why != "" {
			return Route{}, badPath(why)
		}
		switch n {
		case 0:
			first = d
		case 1:
			id = d
			restStart = off + len(seg)
		case 2:
			third = d
		}
		if n >= 2 && strings.IndexByte(seg, '%') >= 0 {
			restEscape = true
		}
		n++
		off += len(seg) + 1
	}

	if !strings.EqualFold(first, "c") {
		return Route{}, badPath("not a console path")
	}
	if n < 2 {
		return Route{}, badPath("missing console id")
	}
	id, ok := canonicalID(id)
	if !ok {
		return Route{}, badPath("bad console id")
	}
	if n == 2 && !trailing {
		return Route{}, Refuse(http.StatusPermanentRedirect, ReasonRedirect, "/c/"+id+"/")
	}
	if n >= 3 && strings.EqualFold(third, "hooks") {
		return Route{}, Refuse(http.StatusForbidden, ReasonHooks, "hooks are not served through fleet")
	}

	rest := p[restStart:] // "/" or "/seg/.../seg" with the optional trailing "/"
	if restEscape {
		rest = decodeValid(rest)
	}
	return Route{ID: id, Path: rest}, nil
}

// IsConsolePath reports whether the raw path of requestURI (before any '?') is meant for a console:
// its first segment, percent-decoded, case-folds to "c" ("/c", "/c/...", "/C/..."). "/",
// "/fleet/v1/..." and the like are not. It says nothing about whether the path is acceptable;
// JudgePath decides that, and it never accepts a path for which IsConsolePath is false.
func IsConsolePath(requestURI string) bool {
	p := rawPath(requestURI)
	if p == "" || p[0] != '/' {
		return false
	}
	seg := p[1:]
	if i := strings.IndexByte(seg, '/'); i >= 0 {
		seg = seg[:i]
	}
	d, why := decodeSegment(seg)
	return why == "" && strings.EqualFold(d, "c")
}

// rawPath is the part of a request-target before the first '?'.
func rawPath(requestURI string) string {
	if i := strings.IndexByte(requestURI, '?'); i >= 0 {
		return requestURI[:i]
	}
	return requestURI
}

func badPath(detail string) *Refusal {
	return Refuse(http.StatusBadRequest, ReasonBadPath, detail)
}

// refusedRawByte reports whether c may not appear literally in a path.
func refusedRawByte(c byte) bool {
	return c < 0x20 || c == 0x7f || c == ' ' || c == '\\' || c == ';' || c == '#'
}

// refusedDecodedByte reports whether c may not appear in a decoded segment. A '%' left after decoding
// means double encoding (%2568).
func refusedDecodedByte(c byte) bool {
	return c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ';' || c == '#' || c == '%'
}

// decodeSegment percent-decodes one raw segment and judges it. It returns the decoded segment (seg
// itself when seg has no escape, so nothing is allocated) or the reason it is refused.
func decodeSegment(seg string) (string, string) {
	if seg == "" {
		return "", "empty path segment"
	}
	d := seg
	if strings.IndexByte(seg, '%') >= 0 {
		var b strings.Builder
		b.Grow(len(seg))
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if c == '%' {
				if i+2 >= len(seg) || !ishex(seg[i+1]) || !ishex(seg[i+2]) {
					return "", "malformed percent-escape"
				}
				c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
				i += 2
			}
			b.WriteByte(c)
		}
		d = b.String()
	}
	for i := 0; i < len(d); i++ {
		if refusedDecodedByte(d[i]) {
			return "", "refused character in path segment"
		}
	}
	if !utf8.ValidString(d) {
		return "", "invalid UTF-8 in path"
	}
	if d == "." || d == ".." {
		return "", "dot segment in path"
	}
	return d, ""
}

// judgeSegment judges one raw segment exactly as decodeSegment does, without building the decoded
// segment: so a path's later segments cost no allocation.
func judgeSegment(seg string) string {
	if seg == "" {
		return "empty path segment"
	}
	if strings.IndexByte(seg, '%') < 0 {
		_, why := decodeSegment(seg) // nothing to decode: decodeSegment allocates nothing
		return why
	}
	// The same checks in the same order as decodeSegment, each a pass over the raw segment.
	for i := 0; i < len(seg); i++ {
		if seg[i] == '%' {
			if i+2 >= len(seg) || !ishex(seg[i+1]) || !ishex(seg[i+2]) {
				return "malformed percent-escape"
			}
			i += 2
		}
	}
	for i := 0; i < len(seg); i++ {
		if refusedDecodedByte(decodedAt(seg, &i)) {
			return "refused character in path segment"
		}
	}
	var (
		dots    = true // every decoded byte is '.'
		n       int    // decoded length
		pending [utf8.UTFMax]byte
		np      int // bytes of an unfinished rune in pending
	)
	for i := 0; i < len(seg); i++ {
		c := decodedAt(seg, &i)
		n++
		dots = dots && c == '.'
		if np == 0 && c < utf8.RuneSelf {
			continue
		}
		pending[np] = c
		np++
		if utf8.FullRune(pending[:np]) {
			if r, size := utf8.DecodeRune(pending[:np]); r == utf8.RuneError && size <= 1 || size != np {
				return "invalid UTF-8 in path"
			}
			np = 0
		}
	}
	if np != 0 {
		return "invalid UTF-8 in path"
	}
	if dots && n <= 2 {
		return "dot segment in path"
	}
	return ""
}

// decodedAt is the decoded byte at seg[*i], whose escapes are well-formed; it moves *i past an
// escape.
func decodedAt(seg string, i *int) byte {
	c := seg[*i]
	if c == '%' {
		c = unhex(seg[*i+1])<<4 | unhex(seg[*i+2])
		*i += 2
	}
	return c
}

// decodeValid percent-decodes s, whose escapes decodeSegment has already found well-formed.
func decodeValid(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		b.WriteByte(c)
	}
	return b.String()
}

// canonicalID lower-cases (ASCII only: "\u212A" must not become "k") and checks a console id
// (contract.ValidConsoleID). It allocates only for an id written with upper case.
func canonicalID(s string) (string, bool) {
	if len(s) > contract.MaxConsoleIDLen {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			s = asciiLower(s)
			break
		}
	}
	return s, contract.ValidConsoleID(s)
}

// asciiLower lower-cases the ASCII letters of s and nothing else.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}
