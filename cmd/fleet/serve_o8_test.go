package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartupLineFirst_O8: with the start-up line for a person (a terminal, or --log-format text),
// it is the first line serve writes: the JSON lines of the start (the access mode in force, …)
// come after it, none before; with json, nothing is held back.
func TestStartupLineFirst_O8(t *testing.T) {
	rs := startServe(t, filepath.Join(t.TempDir(), "state"), "text")
	rs.stop()
	lines := strings.Split(strings.TrimSuffix(rs.stderr.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "fleet serve: listening on http://"+rs.addr) {
		t.Fatalf("first line %q, want the start-up line; stderr:\n%s", lines[0], rs.stderr)
	}
	var msgs []string
	for _, l := range lines[1:] {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("after the start-up line, a line that is not JSON: %q", l)
			continue
		}
		msgs = append(msgs, m["msg"].(string))
	}
	if len(msgs) < 2 || msgs[0] != "fleet.access" || msgs[len(msgs)-1] != "fleet.stopped" {
		t.Errorf("JSON lines after the start-up line: %q; want the start's (fleet.access) first, fleet.stopped last", msgs)
	}

	rs = startServe(t, filepath.Join(t.TempDir(), "state"), "json")
	rs.stop()
	lines = strings.Split(strings.TrimSuffix(rs.stderr.String(), "\n"), "\n")
	var first map[string]any
	if json.Unmarshal([]byte(lines[0]), &first) != nil || first["msg"] != "fleet.access" {
		t.Errorf("json: first line %q, want the start's own first line", lines[0])
	}
}
