package main

import (
	"strings"
	"testing"
	"time"
)

var required = []string{"-fleet", "/bin/fleet", "-benchd", "/bin/benchd", "-state", "/s",
	"-password-file", "/s/pw", "-loopback", "127.0.0.1:1", "-door", "127.0.0.1:2",
	"-backend", "127.0.0.1:3", "-pid", "42"}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseConfig(required)
	if err != nil {
		t.Fatal(err)
	}
	if c.minutes != 10 || c.rate != 200 || c.restartEvery != time.Minute || c.revokeEvery != 90*time.Second ||
		c.reportEv != 10*time.Second || c.pid != 42 || c.door != "127.0.0.1:2" {
		t.Errorf("defaults: %+v", c)
	}
}

func TestParseConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing", nil, "required"},
		{"no pid", required[:len(required)-2], "required"},
		{"rate 1", append(required, "-rate", "1"), "-rate"},
		{"no minutes", append(required, "-minutes", "0"), "-minutes"},
		{"restart 0", append(required, "-restart", "0s"), "positive"},
		{"report negative", append(required, "-report", "-1s"), "positive"},
		{"unknown flag", append(required, "-bogus"), "bogus"},
		{"stray argument", append(required, "extra"), "extra"},
	} {
		if _, err := parseConfig(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}

// TestDuringRestart: a request counts as the restart's when it overlaps the console's down time
// or the grace after the new console listens, and only then.
func TestDuringRestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	s := &soak{restarts: []window{{from: at(10), to: at(11)}, {from: at(70)}}} // the second still down
	for _, tc := range []struct {
		from, to float64
		want     bool
	}{
		{1, 2, false},       // long before
		{9, 10.5, true},     // began before the kill, ended while down
		{10.2, 10.4, true},  // wholly while down
		{11.5, 11.6, true},  // within the grace after it listens
		{12.5, 12.6, false}, // after the grace
		{60, 69, false},     // before the second kill
		{69.5, 75, true},    // overlaps the second, still down
		{100, 101, true},    // the second console is not back yet
	} {
		if got := s.duringRestart(at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("[%v, %v]: %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestWindowStats: a window's mean, floor and peak come from its own samples only, and samples
// whose RSS could not be read are left out.
func TestWindowStats(t *testing.T) {
	s := &soak{samples: []sample{
		{at: 5 * time.Second, rss: 100, fds: 10},
		{at: 15 * time.Second, rss: 300, fds: 20},
		{at: 25 * time.Second, rss: -1, fds: -1},
		{at: 70 * time.Second, rss: 50, fds: 30},
	}}
	if st := s.window(0, time.Minute); st != (stats{n: 2, rss: 200, fds: 15, min: 100, max: 300}) {
		t.Errorf("first minute: %+v", st)
	}
	if st := s.window(time.Minute, 2*time.Minute); st != (stats{n: 1, rss: 50, fds: 30, min: 50, max: 50}) {
		t.Errorf("second minute: %+v", st)
	}
	if st := s.window(2*time.Minute, 3*time.Minute); st.n != 0 {
		t.Errorf("empty window: %+v", st)
	}
}

// TestSummaryFailsOnUnexpected: the exit status is 1 exactly when an error was unexpected.
func TestSummaryFailsOnUnexpected(t *testing.T) {
	s := &soak{cfg: config{pid: -1}, start: time.Now(), expected: map[string]int64{"console restart: 502 console-down": 3},
		unexpected: map[string]int64{}, skipped: map[string]int64{}}
	if got := s.summary(); got != 0 {
		t.Errorf("expected failures only: exit %d, want 0", got)
	}
	s.fail("loopback: 401 unverified", "example")
	if got := s.summary(); got != 1 {
		t.Errorf("one unexpected error: exit %d, want 1", got)
	}
}
