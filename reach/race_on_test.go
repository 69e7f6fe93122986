//go:build race

package reach

// raceEnabled: the race detector slows every handshake some tenfold, and a flood's sample with it.
const raceEnabled = true
