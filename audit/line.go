package audit

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"
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

// AppendLine appends e's line, JSON and a newline, to b.
func AppendLine(b []byte, e *Entry) ([]byte, error) {
	j, err := json.Marshal(LineOf(e))
	if err != nil {
		return b, err
	}
	return append(append(b, j...), '\n'), nil
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
