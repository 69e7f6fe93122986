package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/supervisor"
)

var consoleSizes = []int{10, 100, 1000}

func consoleID(i int) string { return fmt.Sprintf("c%04d", i) }

// consolesGroup is the consoles rows (see the command's doc).
func consolesGroup(out io.Writer, requests int) error {
	cs, err := startConsoles(consoleSizes[len(consoleSizes)-1])
	if err != nil {
		return err
	}
	defer cs.close()
	t, err := buildTree()
	if err != nil {
		return err
	}
	defer t.close()
	fleets := make([]*fleet, len(consoleSizes))
	for k, n := range consoleSizes {
		if fleets[k], err = t.startFleet(fmt.Sprintf("consoles-%d", n)); err != nil {
			return err
		}
		defer fleets[k].stop()
	}
	rssEmpty := make([]int64, len(fleets))
	for k, f := range fleets {
		rssEmpty[k] = f.rss()
	}
	for i := range consoleSizes[len(consoleSizes)-1] {
		for k, n := range consoleSizes {
			if i < n {
				if _, err := fleets[k].register(consoleID(i), cs.addr(i)); err != nil {
					return err
				}
			}
		}
	}

	// A request to the first and to the last console, every size in turn.
	first, last := make([]samples, len(fleets)), make([]samples, len(fleets))
	for r := -50; r < requests; r++ { // the first 50 warm the connections and caches
		for k, f := range fleets {
			a, err := f.serveGet("/c/"+consoleID(0)+"/small", "")
			if err != nil {
				return err
			}
			b, err := f.serveGet("/c/"+consoleID(consoleSizes[k]-1)+"/small", "")
			if err != nil {
				return err
			}
			if r >= 0 {
				first[k], last[k] = append(first[k], a), append(last[k], b)
			}
		}
	}
	index, list, created, again, deleted := make([]samples, len(fleets)), make([]samples, len(fleets)),
		make([]samples, len(fleets)), make([]samples, len(fleets)), make([]samples, len(fleets))
	for r := -5; r < 100; r++ {
		for k, f := range fleets {
			a, err := f.serveGet("/", "text/html")
			if err != nil {
				return err
			}
			b, _, err := f.api(http.MethodGet, "/fleet/v1/consoles", nil, http.StatusOK)
			if err != nil {
				return err
			}
			if r >= 0 {
				index[k], list[k] = append(index[k], a), append(list[k], b)
			}
		}
	}
	for r := -2; r < 30; r++ {
		for k, f := range fleets {
			a, err := f.register("extra", cs.addr(0)) // new: the registry is rewritten
			if err != nil {
				return err
			}
			b, err := f.register("extra", cs.addr(0)) // the same again: only seen
			if err != nil {
				return err
			}
			c, _, err := f.api(http.MethodDelete, "/fleet/v1/consoles/extra", nil, http.StatusNoContent)
			if err != nil {
				return err
			}
			if r >= 0 {
				created[k], again[k], deleted[k] = append(created[k], a), append(again[k], b), append(deleted[k], c)
			}
		}
	}
	quiet, busy, err := requestsWhileRegistering(fleets[len(fleets)-1], consoleID(consoleSizes[len(consoleSizes)-1]-1), cs.addr(0), requests/2)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	rss := make([]int64, len(fleets))
	for k, f := range fleets {
		rss[k] = f.rss()
	}

	lo, hi := 0, len(fleets)-1
	sizes := func(s []samples, p float64) (string, float64) {
		text := ""
		for k := range s {
			if k > 0 {
				text += " · "
			}
			text += fmt.Sprintf("%d: %s", consoleSizes[k], ms(s[k].pct(p)))
		}
		return text, float64(s[hi].pct(p)) / float64(s[lo].pct(p))
	}
	line := func(cost, expected string, s []samples, p float64) {
		text, r := sizes(s, p)
		row(out, cost, expected, text, fmt.Sprintf("%.2f× (%d vs %d)", r, consoleSizes[hi], consoleSizes[lo]))
	}
	line("request to the first console, p50", "O(1)", first, 0.5)
	line("request to the first console, p99", "O(1)", first, 0.99)
	line("request to the last console, p50", "O(1)", last, 0.5)
	line("request to the last console, p99", "O(1)", last, 0.99)
	for k, n := range consoleSizes {
		row(out, fmt.Sprintf("last vs first console at %d, p50 / p99", n), "1", fmt.Sprintf("%s / %s vs %s / %s",
			ms(last[k].pct(0.5)), ms(last[k].pct(0.99)), ms(first[k].pct(0.5)), ms(first[k].pct(0.99))),
			ratio(float64(last[k].pct(0.5)), float64(first[k].pct(0.5)))+" / "+ratio(float64(last[k].pct(0.99)), float64(first[k].pct(0.99))))
	}
	line("index page (lists every console), p50", "O(n), no dial", index, 0.5)
	line("`fleet consoles` (GET /fleet/v1/consoles), p50", "O(n), no dial", list, 0.5)
	line("a new registration (registry rewritten, fsync), p50", "O(n) bytes, one fsync", created, 0.5)
	line("a repeated registration (nothing written), p50", "O(1)", again, 0.5)
	line("a deregistration (registry rewritten, fsync), p50", "O(n) bytes, one fsync", deleted, 0.5)
	row(out, fmt.Sprintf("request to the last of %d while registrations run back to back, p50 / p99", consoleSizes[hi]), "O(1): no lock on the request's path",
		fmt.Sprintf("%s / %s vs %s / %s quiet", ms(busy.pct(0.5)), ms(busy.pct(0.99)), ms(quiet.pct(0.5)), ms(quiet.pct(0.99))),
		ratio(float64(busy.pct(0.5)), float64(quiet.pct(0.5)))+" / "+ratio(float64(busy.pct(0.99)), float64(quiet.pct(0.99))))
	per := float64((rss[hi]-rssEmpty[hi])-(rss[lo]-rssEmpty[lo])) / float64(consoleSizes[hi]-consoleSizes[lo])
	row(out, "VmRSS per registered console", "O(1) each", fmt.Sprintf("%s (%d: %s, %d: %s)", kib(per),
		consoleSizes[lo], kib(float64(rss[lo])), consoleSizes[hi], kib(float64(rss[hi]))), "–")

	return staleness(out, fleets[hi], cs)
}

// requestsWhileRegistering measures requests to id on f, alternately with nothing else going on
// and while another client registers and deregisters a console back to back.
func requestsWhileRegistering(f *fleet, id, addr string, n int) (quiet, busy samples, err error) {
	churn := &fleet{addr: f.addr, token: f.token, client: oneConnClient()}
	for phase := range 4 {
		var stop atomic.Bool
		var wg sync.WaitGroup
		var churnErr error
		if phase%2 == 1 {
			wg.Go(func() {
				for !stop.Load() {
					if _, err := churn.register("churn", addr); err != nil {
						churnErr = err
						return
					}
					if _, _, err := churn.api(http.MethodDelete, "/fleet/v1/consoles/churn", nil, http.StatusNoContent); err != nil {
						churnErr = err
						return
					}
				}
			})
		}
		for range n / 2 {
			d, err := f.serveGet("/c/"+id+"/small", "")
			if err != nil {
				stop.Store(true)
				return nil, nil, err
			}
			if phase%2 == 1 {
				busy = append(busy, d)
			} else {
				quiet = append(quiet, d)
			}
		}
		stop.Store(true)
		wg.Wait()
		if churnErr != nil {
			return nil, nil, churnErr
		}
	}
	return quiet, busy, nil
}

// staleness is SPEC P1's probe as a user meets it: on f, with its 1,000 consoles, 100 more whose
// accept queue is full are registered; then 100 live consoles go away, and the time until
// `fleet consoles` shows all of them down is measured (a probe every 5 s, each round bounded by
// the 1 s timeout).
func staleness(out io.Writer, f *fleet, cs *consoleSet) error {
	const holes, gone = 100, 100
	var hs []*blackHole
	defer func() {
		for _, h := range hs {
			h.close()
		}
	}()
	for i := range holes {
		h, err := newBlackHole()
		if err != nil {
			return err
		}
		hs = append(hs, h)
		if _, err := f.register(fmt.Sprintf("hole-%03d", i), h.addr); err != nil {
			return err
		}
	}
	if _, err := waitHealth(f, 30*time.Second, func(h map[string]string) bool {
		for i := range holes {
			if h[fmt.Sprintf("hole-%03d", i)] != "down" {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("the black holes were not shown down: %w", err)
	}
	for i := 100; i < 100+gone; i++ {
		cs.stop(i)
	}
	took, err := waitHealth(f, 60*time.Second, func(h map[string]string) bool {
		for i := 100; i < 100+gone; i++ {
			if h[consoleID(i)] != "down" {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("the consoles that went away were not shown down: %w", err)
	}
	row(out, fmt.Sprintf("%d consoles gone, among 1,100 of which %d hang on connect: until `fleet consoles` shows them all down", gone, holes),
		"≤ probe interval (5 s) + one round (≤ 2 s)", ms(took), "–")
	return nil
}

func waitHealth(f *fleet, limit time.Duration, done func(map[string]string) bool) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit {
		h, err := f.health()
		if err != nil {
			return 0, err
		}
		if done(h) {
			return time.Since(start), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("not within %v", limit)
}

// probeGroup is one probe round (supervisor.Registry.Probe with its real dial) over 10, 100 and
// 1,000 consoles of which one in ten is a black hole, and over as many live ones, interleaved.
func probeGroup(out io.Writer) error {
	n := consoleSizes[len(consoleSizes)-1]
	cs, err := startConsoles(n)
	if err != nil {
		return err
	}
	defer cs.close()
	var holes []*blackHole
	defer func() {
		for _, h := range holes {
			h.close()
		}
	}()
	for range n / 10 {
		h, err := newBlackHole()
		if err != nil {
			return err
		}
		holes = append(holes, h)
	}
	dir, err := os.MkdirTemp("", "fleet-scale-probe.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	load := func(name string, size int, withHoles bool) (*supervisor.Registry, error) {
		var f struct {
			Consoles []supervisor.Console `json:"consoles"`
		}
		for i := range size {
			addr := cs.addr(i)
			if withHoles && i%10 == 9 {
				addr = holes[i/10].addr
			}
			f.Consoles = append(f.Consoles, supervisor.Console{ID: consoleID(i), Addr: addr, Registered: time.Now().UTC()})
		}
		data, _ := json.Marshal(f)
		path := filepath.Join(dir, name)
		if err := state.WritePrivateFile(path, data); err != nil {
			return nil, err
		}
		return supervisor.LoadRegistry(path, nil)
	}
	const timeout = time.Second // fleet serve's probe timeout
	holed, live := make([]*supervisor.Registry, len(consoleSizes)), make([]*supervisor.Registry, len(consoleSizes))
	for k, size := range consoleSizes {
		if holed[k], err = load(fmt.Sprintf("holes-%d.json", size), size, true); err != nil {
			return err
		}
		if live[k], err = load(fmt.Sprintf("live-%d.json", size), size, false); err != nil {
			return err
		}
	}
	holedT, liveT := make([]samples, len(consoleSizes)), make([]samples, len(consoleSizes))
	for range 5 {
		for k := range consoleSizes {
			start := time.Now()
			holed[k].Probe(context.Background(), timeout)
			holedT[k] = append(holedT[k], time.Since(start))
			start = time.Now()
			live[k].Probe(context.Background(), timeout)
			liveT[k] = append(liveT[k], time.Since(start))
		}
	}
	for k := range consoleSizes {
		for _, c := range holed[k].List() {
			if want := map[bool]supervisor.Health{true: supervisor.HealthDown, false: supervisor.HealthUp}[c.ID[len(c.ID)-1] == '9']; c.Health != want {
				return fmt.Errorf("probe: %s is %s, want %s", c.ID, c.Health, want)
			}
		}
	}
	text := func(s []samples) (string, string) {
		t := ""
		for k := range s {
			if k > 0 {
				t += " · "
			}
			t += fmt.Sprintf("%d: %s", consoleSizes[k], ms(s[k].pct(0.5)))
		}
		hi := len(s) - 1
		return t, fmt.Sprintf("%.2f× (%d vs %d); slowest %s", float64(s[hi].pct(0.5))/float64(s[0].pct(0.5)), consoleSizes[hi], consoleSizes[0], ms(s[hi].pct(1)))
	}
	a, b := text(holedT)
	row(out, "a probe round, one console in ten a black hole (1 s timeout), median of 5", "one timeout (+ 0.25 s grace) while black holes ≤ 128; ≤ 2 s (P1)", a, b)
	a, b = text(liveT)
	row(out, "a probe round, every console live, median of 5", "O(n / 128) dials in parallel", a, b)
	return nil
}
