package fastloop

import (
	"bytes"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/phase-console/fleet/contract"
)

// This file is which requests the fast loop (conn.go) serves: fastHead, on the raw bytes of a
// head, before anything of it is consumed.

// headEnd returns the length of the request head at the start of buf, up to and including the
// empty line that ends it, or 0 when buf holds no whole head. Lines may end with a bare LF, as
// net/http reads them (fastHead then leaves the request to net/http).
func headEnd(buf []byte) int {
	start := 0
	for {
		i := bytes.IndexByte(buf[start:], '\n')
		if i < 0 {
			return 0
		}
		if line := buf[start : start+i]; len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			return start + i + 1
		}
		start += i + 1
	}
}

// fastHead reports whether head (a whole request head, headEnd's) is of the plain kind that the
// fast loop serves. It is deliberately narrower than what net/http's server accepts, so that
// whatever it admits net/http parses (http.ReadRequest) to the same request and its server would
// have accepted (FuzzFastHead checks both); everything else goes to net/http as it came:
//
//   - the request line is exactly "GET " or "HEAD ", a target of visible ASCII that starts with
//     "/c/" and whose path has only whole %-escapes, and " HTTP/1.1", ended by CRLF;
//   - every header line ends with CRLF (no bare LF, no bare CR), none is folded (obs-fold), each
//     name is a token and each value a valid field value (net/http's own rules: httpguts);
//   - exactly one Host, valid;
//   - nothing that frames or changes the message: no Content-Length, Transfer-Encoding, Upgrade,
//     Expect, Trailer, TE, Keep-Alive, Proxy-Connection or HTTP2-Settings; at most one
//     Connection, and only "keep-alive" or "close".
func fastHead(head string) bool {
	line, rest, ok := cutLine(head)
	if !ok || !fastRequestLine(line) {
		return false
	}
	hosts := 0
	_, ok = fastFields(rest, func(name, value string) bool {
		switch {
		case contract.EqualFoldASCII(name, "Host"):
			hosts++
			return httpguts.ValidHostHeader(value)
		case framingHeader(name):
			return false
		}
		return true
	})
	return ok && hosts == 1
}

// fastFields reports whether lines — a head's header lines, up to and including the empty line
// that ends it, and nothing after it — are each admitted by fieldLine and then by field, with at
// most one Connection, which says only "keep-alive" or "close" (field is not asked about it);
// closes is whether it said "close". fastHead and fastAnswer add their own conditions through
// field.
func fastFields(lines string, field func(name, value string) bool) (closes, ok bool) {
	connections := 0
	for {
		line, rest, ok := cutLine(lines)
		if !ok {
			return false, false
		}
		if line == "" {
			return closes, rest == ""
		}
		lines = rest
		name, value, ok := fieldLine(line)
		if !ok {
			return false, false
		}
		if contract.EqualFoldASCII(name, "Connection") {
			connections++
			closes = contract.EqualFoldASCII(value, "close")
			if connections > 1 || !closes && !contract.EqualFoldASCII(value, "keep-alive") {
				return false, false
			}
			continue
		}
		if !field(name, value) {
			return false, false
		}
	}
}

// fieldLine splits a header line into its name and its value trimmed of spaces and tabs. ok is
// false for a folded line (obs-fold), a line with no name, and a name or value that net/http's
// rules (httpguts) refuse.
func fieldLine(line string) (name, value string, ok bool) {
	if line == "" || line[0] == ' ' || line[0] == '\t' {
		return "", "", false
	}
	name, value, ok = strings.Cut(line, ":")
	value = strings.Trim(value, " \t")
	if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
		return "", "", false
	}
	return name, value, true
}

// fastRequestLine reports whether line is "GET|HEAD /c/… HTTP/1.1" with a target of visible ASCII.
func fastRequestLine(line string) bool {
	target, ok := strings.CutPrefix(line, "GET ")
	if !ok {
		target, ok = strings.CutPrefix(line, "HEAD ")
	}
	if !ok {
		return false
	}
	target, ok = strings.CutSuffix(target, " HTTP/1.1")
	if !ok || !strings.HasPrefix(target, "/c/") {
		return false
	}
	for i := 0; i < len(target); i++ {
		if b := target[i]; b <= ' ' || b >= 0x7f {
			return false
		}
	}
	// Every escape in the path is whole, so that http.ReadRequest's URL parse (whose only
	// complaint about such a target is a broken escape) cannot fail.
	path, _, _ := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		if path[i] == '%' && (i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2])) {
			return false
		}
	}
	return true
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// cutLine cuts the first CRLF-ended line off s. ok is false when s has no CRLF, or the line holds
// a CR or LF of its own.
func cutLine(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' || strings.IndexByte(s[:i-1], '\r') >= 0 {
		return "", "", false
	}
	return s[:i-1], s[i+1:], true
}

// framingHeader reports whether name frames the message, changes what the connection carries,
// or is hop-by-hop in a way the fast exchange does not carry: such requests go to net/http.
func framingHeader(name string) bool {
	for _, f := range [...]string{"Content-Length", "Transfer-Encoding", "Upgrade", "Expect",
		"Trailer", "TE", "Keep-Alive", "Proxy-Connection", "HTTP2-Settings"} {
		if contract.EqualFoldASCII(name, f) {
			return true
		}
	}
	return false
}
