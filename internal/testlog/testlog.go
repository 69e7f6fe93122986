// Package testlog is a log sink for tests: a buffer that a server's slog JSON handler writes to
// while the test reads it. It is for tests only; no product code imports it.
package testlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// A Buffer collects log output; it is safe for concurrent writers and readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Events returns the JSON log lines whose "msg" is event, in order.
func (s *Buffer) Events(event string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == event {
			out = append(out, m)
		}
	}
	return out
}
