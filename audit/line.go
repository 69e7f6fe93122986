package audit

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// TimeLayout is the access log's time format (G3): RFC 3339, UTC, milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Line is one access-log line as JSON (G3). Reason is present only on refusals.
type Line struct {
	Time       string `json:"time"`
	Door       string `json:"door"`
	Login      string `json:"login"`
	Console    string `json:"console"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	Status     int    `json:"status"`
	Bytes      int64  `json:"bytes"`
	DurationMS int64  `json:"duration_ms"`
	Peer       string `json:"peer"`
	Reason     string `json:"reason,omitempty"`
}

// LineOf is e as an access-log line.
func LineOf(e *Entry) Line {
	peer := ""
	if e.Peer.IsValid() {
		peer = e.Peer.String()
	}
	return Line{
		Time:       e.Time.UTC().Format(TimeLayout),
		Door:       e.Door,
		Login:      e.Login,
		Console:    e.Console,
		Method:     e.Method,
		Path:       e.Path,
		Status:     e.Status,
		Bytes:      e.Bytes,
		DurationMS: e.Duration.Milliseconds(),
		Peer:       peer,
		Reason:     e.Reason,
	}
}

// AppendLine appends e's line, JSON and a newline, to b: byte for byte what encoding/json makes of
// LineOf(e), written without allocating (the access log's writer formats every request's line).
// The error is always nil; it is kept for the callers that check it.
func AppendLine(b []byte, e *Entry) ([]byte, error) {
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, TimeLayout)
	b = append(b, `","door":`...)
	b = appendJSONString(b, e.Door)
	b = append(b, `,"login":`...)
	b = appendJSONString(b, e.Login)
	b = append(b, `,"console":`...)
	b = appendJSONString(b, e.Console)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, e.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, e.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, e.Duration.Milliseconds(), 10)
	b = append(b, `,"peer":"`...)
	if e.Peer.IsValid() {
		b = e.Peer.AppendTo(b)
	}
	b = append(b, '"')
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, e.Reason)
	}
	return append(b, "}\n"...), nil
}

// appendJSONString appends s quoted as encoding/json quotes a string (its HTML escaping
// included): TestAppendLineIsJSONMarshal holds the two to the same bytes.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// ParseLine reads one access-log line. A line that is not one (bad JSON, no time, an unknown door)
// is an error; readers skip it and say so rather than stop.
func ParseLine(b []byte) (Line, time.Time, error) {
	var l Line
	if err := json.Unmarshal(b, &l); err != nil {
		return Line{}, time.Time{}, fmt.Errorf("not an access-log line: %w", err)
	}
	t, err := time.Parse(time.RFC3339Nano, l.Time)
	if err != nil {
		return Line{}, time.Time{}, fmt.Errorf("access-log line with a bad time %q", l.Time)
	}
	if l.Door != DoorLoopback && l.Door != DoorReach {
		return Line{}, time.Time{}, fmt.Errorf("access-log line with an unknown door %q", l.Door)
	}
	if l.Peer != "" {
		if _, err := netip.ParseAddr(l.Peer); err != nil {
			return Line{}, time.Time{}, fmt.Errorf("access-log line with a bad peer %q", l.Peer)
		}
	}
	return l, t, nil
}
