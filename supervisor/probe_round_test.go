package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
)

// blackHoleDial is a probe dial for a round of many consoles: a dial to an address in hang blocks
// until release is closed (then answers that the console is up), every other dial answers at once
// that the console is up. It counts the dials in flight and the most there ever were.
type blackHoleDial struct {
	hang     map[string]bool
	release  chan struct{}
	hung     chan string // told of each hanging dial once it has started
	inFlight atomic.Int64
	most     atomic.Int64
}

func (d *blackHoleDial) dial(ctx context.Context, addr string) error {
	n := d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	for m := d.most.Load(); n > m && !d.most.CompareAndSwap(m, n); m = d.most.Load() {
	}
	if d.hang[addr] {
		d.hung <- addr
		<-d.release
	}
	return nil
}

// TestProbeRoundNotHeldByDeadConsoles_P1_S8: in one probe round of 1,000 consoles, 100 that hang
// on connect hold up nobody else: every other console is recorded up while all 100 are still
// dialling (a round that dials one console after another cannot get there), no more than
// probeParallel dials are in flight at once, and a hanging console that a failed forward marked
// down meanwhile stays down when its stale dial answers.
func TestProbeRoundNotHeldByDeadConsoles_P1_S8(t *testing.T) {
	const consoles, hanging = 1000, 100
	d := &blackHoleDial{hang: map[string]bool{}, release: make(chan struct{}), hung: make(chan string, hanging)}
	r := loadedRegistry(t, consoles, func(i int) string {
		addr := fmt.Sprintf("127.0.0.1:%d", 10000+i)
		d.hang[addr] = i%(consoles/hanging) == 0
		return addr
	})
	r.dial = d.dial
	r.probeDeadline = neverDue // the hanging dials are released by the test, not by the clock

	round := make(chan struct{})
	go func() { r.Probe(context.Background(), time.Second); close(round) }()
	for range hanging {
		select {
		case <-d.hung:
		case <-time.After(doortest.WaitLimit):
			close(d.release)
			t.Fatal("P1 the hanging consoles were not all dialled at once")
		}
	}
	// Every hanging dial has started; the other 900 are recorded (or about to be) without them.
	pollUntil(t, "P1 S8 every live console recorded up while the dead ones dial", func() bool {
		for _, c := range r.List() {
			if !d.hang[c.Addr] && c.Health != HealthUp {
				return false
			}
		}
		return true
	})
	for _, c := range r.List() {
		if d.hang[c.Addr] && c.Health != HealthUnknown {
			t.Errorf("S8 %s is %q while its first probe still dials; want unknown", c.ID, c.Health)
		}
	}
	r.markDown("c0000") // a forward failed while its probe dialled

	close(d.release)
	doortest.WaitFor(t, round, "P1 the end of the probe round")
	if most := d.most.Load(); most > probeParallel || most < hanging {
		t.Errorf("P1 at most %d dials were in flight at once; want between %d and %d", most, hanging, probeParallel)
	}
	for _, c := range r.List() {
		want := HealthUp
		if c.ID == "c0000" {
			want = HealthDown
		}
		if c.Health != want {
			t.Errorf("S8 after the round %s is %q; want %q", c.ID, c.Health, want)
		}
	}
}

// neverDue is a probe deadline that a clock which never moves leaves open: only the round's own
// context ends it.
func neverDue(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

// fakeDeadlines is a probe deadline on a fake clock: each dial's context ends when the test
// calls expire, as if every timeout were up at once.
type fakeDeadlines struct {
	mu      sync.Mutex
	cancels []context.CancelFunc
	expired bool
}

func (f *fakeDeadlines) deadline(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.expired {
		cancel()
	}
	f.cancels = append(f.cancels, cancel)
	return ctx, cancel
}

func (f *fakeDeadlines) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expired = true
	for _, cancel := range f.cancels {
		cancel()
	}
}

// TestProbeRoundEndsAtTheTimeout_P1_S8: a probe round does not wait for a console whose dial
// hangs, even a dial that never looks at its context: once the per-console timeout is up (a
// fake clock), the round ends with the 100 hanging consoles among 1,000 recorded down and the
// others up, while the hanging dials are still blocked. Their late answers change nothing.
func TestProbeRoundEndsAtTheTimeout_P1_S8(t *testing.T) {
	const consoles, hanging = 1000, 100
	d := &blackHoleDial{hang: map[string]bool{}, release: make(chan struct{}), hung: make(chan string, hanging)}
	r := loadedRegistry(t, consoles, func(i int) string {
		addr := fmt.Sprintf("127.0.0.1:%d", 10000+i)
		d.hang[addr] = i%(consoles/hanging) == 0
		return addr
	})
	r.dial = d.dial
	clock := &fakeDeadlines{}
	r.probeDeadline = clock.deadline

	round := make(chan struct{})
	go func() { r.Probe(context.Background(), probeTimeout); close(round) }()
	for range hanging {
		select {
		case <-d.hung:
		case <-time.After(doortest.WaitLimit):
			close(d.release)
			t.Fatal("P1 the hanging consoles were not all dialled at once")
		}
	}
	pollUntil(t, "P1 every live console recorded up while the dead ones dial", func() bool {
		for _, c := range r.List() {
			if !d.hang[c.Addr] && c.Health != HealthUp {
				return false
			}
		}
		return true
	})
	clock.expire()
	doortest.WaitFor(t, round, "P1 the end of the round while 100 dials still hang")
	if n := d.inFlight.Load(); n != hanging {
		t.Errorf("P1 %d dials in flight when the round ended; want the %d hanging ones", n, hanging)
	}
	check := func(when string) {
		t.Helper()
		for _, c := range r.List() {
			want := map[bool]Health{true: HealthDown, false: HealthUp}[d.hang[c.Addr]]
			if c.Health != want {
				t.Errorf("S8 %s %s is %q; want %q", when, c.ID, c.Health, want)
			}
		}
	}
	check("after the round")
	close(d.release) // the abandoned dials now answer "up": too late to count
	pollUntil(t, "the abandoned dials to return", func() bool { return d.inFlight.Load() == 0 })
	check("after the abandoned dials answered")
}

// TestProbeSeesConsoleBack_S8: a console that went away is recorded down by the next probe
// round, and one that comes back (its dial, refused before, now connects) is recorded up by the
// round after, with its last-seen time moved on; so is one that a failed forward marked down.
// Real dials (dialProbe) to a real console that closes its listener and listens again on the
// same port.
func TestProbeSeesConsoleBack_S8(t *testing.T) {
	ln := acceptingListener(t, "127.0.0.1:0")
	addr := ln.Addr().String()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := loadedRegistry(t, 1, func(int) string { return addr })
	r.now = func() time.Time { return now }
	health := func() ConsoleStatus { return r.List()[0] }

	r.Probe(context.Background(), probeTimeout)
	if c := health(); c.Health != HealthUp || !c.LastSeen.Equal(now) {
		t.Fatalf("S8 listening: %q last seen %v; want up, seen %v", c.Health, c.LastSeen, now)
	}
	ln.Close()
	now = now.Add(probeInterval)
	r.Probe(context.Background(), probeTimeout)
	if c := health(); c.Health != HealthDown {
		t.Fatalf("S8 gone: %q; want down", c.Health)
	}
	acceptingListener(t, addr)
	now = now.Add(probeInterval)
	r.Probe(context.Background(), probeTimeout)
	if c := health(); c.Health != HealthUp || !c.LastSeen.Equal(now) {
		t.Errorf("S8 back: %q last seen %v; want up within the next round, seen %v", c.Health, c.LastSeen, now)
	}
	r.markDown("c0000") // a forward failed
	r.Probe(context.Background(), probeTimeout)
	if c := health(); c.Health != HealthUp {
		t.Errorf("S8 marked down by a forward, then probed: %q; want up", c.Health)
	}
}

// acceptingListener listens on addr and accepts (and closes) every connection, as a console's
// server does; it is closed when t ends.
func acceptingListener(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var accepted sync.WaitGroup
	accepted.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); accepted.Wait() })
	return ln
}

// loadedRegistry is a registry read at start-up from a consoles.json of n consoles, c0000 on, the
// i-th at addr(i); none is probed yet.
func loadedRegistry(t testing.TB, n int, addr func(i int) string) *Registry {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := state.EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	var f registryFile
	for i := range n {
		f.Consoles = append(f.Consoles, Console{ID: fmt.Sprintf("c%04d", i), Addr: addr(i)})
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, state.RegistryFile)
	if err := state.WritePrivateFile(path, data); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRegistry(path, nil)
	if err != nil || len(r.List()) != n {
		t.Fatalf("LoadRegistry: %v", err)
	}
	return r
}

// BenchmarkProbeRound is one probe round over 1,000 consoles of which 100 are black holes (their
// dial waits out the timeout, as a connect to a full accept queue does) at the real probeTimeout;
// the other 900 are real probe dials to a live listener (the socket's owner checked). SPEC P1:
// within 2 s.
//
//	go test -run=NONE -bench=ProbeRound -benchtime=5x ./supervisor
func BenchmarkProbeRound(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var accepted sync.WaitGroup
	accepted.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Go(func() { io.Copy(io.Discard, c); c.Close() }) // held open, as a console's server does
		}
	})
	defer func() { ln.Close(); accepted.Wait() }()

	hole := map[string]bool{}
	r := loadedRegistry(b, 1000, func(i int) string {
		if i%10 != 0 {
			return ln.Addr().String()
		}
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+i)
		hole[addr] = true
		return addr
	})
	r.dial = func(ctx context.Context, addr string) error {
		if hole[addr] {
			<-ctx.Done()
			return ctx.Err()
		}
		return dialProbe(ctx, addr)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Probe(context.Background(), probeTimeout)
	}
	b.StopTimer()
	for _, c := range r.List() {
		if want := map[bool]Health{true: HealthDown, false: HealthUp}[hole[c.Addr]]; c.Health != want {
			b.Fatalf("%s (%s) is %q; want %q", c.ID, c.Addr, c.Health, want)
		}
	}
}
