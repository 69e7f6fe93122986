package fastloop

import (
	"bufio"
	"iter"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/proxy"
)

// This file writes the two heads of a fast exchange straight from the header lines that fastHead
// (the caller's request) and fastAnswer (the console's answer) admitted, instead of from header
// maps: the same lines, and only those, that the map path writes (ReverseProxy's steps and the
// Hop's assertion, then Request.Write, for the console; removeHopByHop, ScrubConsoleAnswer and
// writeAnswerHead for the caller), names made canonical as textproto makes them, in the order
// they came. What is a rule is package proxy's, asked line by line: which caller lines are
// identity headers (proxy.IsIdentityName, S4), what the hop asserts (Judged.WriteAssertion, S6),
// which answer lines are scrubbed (proxy.ScrubbedFromAnswer, R9); what is left here is framing
// (hop-by-hop lines, Host, line syntax). Measured, reading a head into a
// map, changing the map and writing it out again was ~2 µs of a small answer's ~10 µs of user
// time (bench/RESULTS.md). FuzzFastHead (checkConsoleHead) and FuzzFastAnswer hold both writers
// to the map path's heads on the same bytes.
//
// Both rely on what the admission made sure of: each line is "name:value" ended by CRLF, the name
// a token, the value a valid field value (no CR, LF or other control byte but tab), none folded;
// nothing that frames the message but the answer's one Content-Length; at most one Connection,
// saying only "keep-alive" or "close".

// writeConsoleHead writes the head that the hop sends the console for a fast request: method and
// uri (the judged path and the caller's query), Host the console's own address (S6: j's
// Target's), the caller's first User-Agent if not empty, every other line of lines but Host, the
// hop-by-hop ones (and Close, when the caller's Connection names it: closes), and every identity
// header (proxy.IsIdentityName, S4), Cache-Control: no-cache for a Pragma: no-cache without one
// (as net/http reads a request), then the hop's X-Forwarded-* and both assertion headers
// (j.WriteAssertion, S6) — what ReverseProxy sends for the same request. lines are the request's
// header lines as fastHead admitted them, up to and including the empty line.
//
// The hop's own values are written exactly as they are, never cleaned up: when the console's
// address or uri cannot stand in a head as they are, or j is not a verdict to forward (Judged.Target), nothing at
// all is written and the error is proxy.ErrUnwritable (a cleaned-up login would be a login other
// than the one verified).
func writeConsoleHead(w *bufio.Writer, method, uri, lines string, closes bool, j *proxy.Judged) error {
	return writeConsoleHeadWith(w, method, uri, lines, closes, j, nil)
}

// writeConsoleHeadWith is writeConsoleHead with field, when not nil, the door's own rule on each
// caller line that would be written (ConnServer.ConsoleField): the value to write instead, or
// false to write none.
func writeConsoleHeadWith(w *bufio.Writer, method, uri, lines string, closes bool, j *proxy.Judged, field func(name, value string) (string, bool)) error {
	t, ok := j.Target()
	if !ok || !httpguts.ValidHostHeader(t.Addr) || strings.ContainsFunc(uri, isCTL) {
		return proxy.ErrUnwritable
	}
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(t.Addr)
	w.WriteString("\r\n")
	var p pragmaFix
	agent := false
	for name, value := range fields(lines) {
		switch {
		case contract.EqualFoldASCII(name, "User-Agent"):
			if !agent && value != "" {
				w.WriteString("User-Agent: ")
				w.WriteString(value)
				w.WriteString("\r\n")
			}
			agent = true
			continue
		case contract.EqualFoldASCII(name, "Host"), isHopByHop(name), framingHeader(name), proxy.IsIdentityName(name),
			closes && contract.EqualFoldASCII(name, "Close"):
			continue
		}
		if field != nil {
			var keep bool
			if value, keep = field(name, value); !keep {
				continue
			}
		}
		p.see(name, value)
		writeField(w, name, value)
	}
	p.write(w)
	if err := j.WriteAssertion(w); err != nil {
		return err // j forwards (checked above): not reached
	}
	_, err := w.WriteString("\r\n")
	return err
}

// writeCallerHead writes the head of a fast answer (code, and lines as fastAnswer admitted them)
// to the caller of r: every line but the hop-by-hop ones (RFC 9110 7.6.1, as ReverseProxy removes
// them) and what ScrubConsoleAnswer removes (proxy.ScrubbedFromAnswer, R9), the
// console's own Content-Length, a Date when the console sent none, Cache-Control: no-cache for a
// Pragma: no-cache without one (as net/http reads an answer), and "Connection: close" when r asked
// for it.
func writeCallerHead(w *bufio.Writer, code int, lines string, r *http.Request) {
	writeStatusLine(w, code)
	var p pragmaFix
	date := false
	for name, value := range fields(lines) {
		switch {
		case isHopByHop(name), proxy.ScrubbedFromAnswer(name, value):
			continue
		case contract.EqualFoldASCII(name, "Date"):
			date = true
		}
		p.see(name, value)
		writeField(w, name, value)
	}
	if !date {
		w.WriteString("Date: ")
		w.WriteString(httpDate()[0])
		w.WriteString("\r\n")
	}
	p.write(w)
	if r.Close {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
}

// writeStatusLine writes "HTTP/1.1 <code> <text>", as net/http's server writes a status line.
func writeStatusLine(w *bufio.Writer, code int) {
	w.WriteString("HTTP/1.1 ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(code), 10))
	w.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		w.WriteString(text)
	} else {
		w.WriteString("status code " + strconv.Itoa(code))
	}
	w.WriteString("\r\n")
}

// fields yields the name and trimmed value (splitField) of each of an admitted head's header
// lines, up to the empty line that ends them.
func fields(lines string) iter.Seq2[string, string] {
	return func(yield func(name, value string) bool) {
		for {
			line, rest, _ := strings.Cut(lines, "\r\n")
			if line == "" || !yield(splitField(line)) {
				return
			}
			lines = rest
		}
	}
}

// splitField splits an admitted header line into its name and its value trimmed of spaces and
// tabs (all the trimming an admitted value can need).
func splitField(line string) (name, value string) {
	name, value, _ = strings.Cut(line, ":")
	return name, strings.Trim(value, " \t")
}

// writeField writes an admitted line: its name canonical, as textproto makes a valid one (the
// first letter and each after a hyphen upper case, the others lower), and its trimmed value.
func writeField(w *bufio.Writer, name, value string) {
	if isCanonical(name) {
		w.WriteString(name)
	} else {
		upper := true
		for i := 0; i < len(name); i++ {
			c := name[i]
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			w.WriteByte(c)
			upper = c == '-'
		}
	}
	w.WriteString(": ")
	w.WriteString(value)
	w.WriteString("\r\n")
}

// isCanonical reports whether a token name is in textproto's canonical form already (as nearly
// every name is).
func isCanonical(name string) bool {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// A pragmaFix is net/http's reading of "Pragma: no-cache" (fixPragmaCacheControl) over a head's
// lines: the first Pragma saying exactly "no-cache", and no Cache-Control, means one is added.
type pragmaFix struct {
	pragma, noCache, cacheControl bool
}

func (p *pragmaFix) see(name, value string) {
	switch {
	case contract.EqualFoldASCII(name, "Cache-Control"):
		p.cacheControl = true
	case !p.pragma && contract.EqualFoldASCII(name, "Pragma"):
		p.pragma, p.noCache = true, value == "no-cache"
	}
}

func (p *pragmaFix) write(w *bufio.Writer) {
	if p.noCache && !p.cacheControl {
		w.WriteString("Cache-Control: no-cache\r\n")
	}
}

// isHopByHop reports whether name is one of hopByHop, in any case.
func isHopByHop(name string) bool {
	for _, h := range hopByHop {
		if contract.EqualFoldASCII(name, h) {
			return true
		}
	}
	return false
}
