package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// A model of fleet's own work: a calibrated busy loop of so many µs of user time, spent by the
// floor and the event loop on each request (-work) or each connection (-connwork) to ask how
// fast they would be if they did what fleet does on top of passing bytes on. It stands in for
// fleet's reading, judging and writing of heads. It touches no memory the real work would, so
// it flatters: bench/RESULTS.md sets W where the floor with it runs level with fleet, and then
// holds it against fleet's own code on a prototype loop.

var (
	calibrateOnce sync.Once
	spinPerMicro  float64
	spinSink      atomic.Uint64 // where each spin's result goes, so that no compiler drops the loop
)

// spin spends about us µs of CPU in user space.
func spin(us float64) {
	if us <= 0 {
		return
	}
	calibrateOnce.Do(calibrate)
	spinN(int(us * spinPerMicro))
}

func spinN(n int) {
	x := uint64(n)
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	spinSink.Store(x)
}

func calibrate() {
	const n = 50_000_000
	start := time.Now()
	spinN(n)
	spinPerMicro = n / float64(time.Since(start).Microseconds())
}
