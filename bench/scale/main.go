// Command scale measures how fleet's costs grow with what a machine holds (SPEC P1): consoles,
// paired devices, open streams and failing sources. It is a measuring tool, run by hand, not
// part of fleet: nothing in the product imports it. It writes the rows of bench/RESULTS.md's
// "Growth (P1)" section on standard output.
//
//	go run ./bench/scale [-only consoles,probe,devices,streams,sources] [-requests 2000]
//
// Each group measures its sizes in one run, interleaved where they can be (every size's target
// asked in turn, round after round), so that a ratio between sizes is fair on a machine that
// other work shares; absolute times are not claims.
//
//   - consoles: three `fleet serve` processes built from this tree (10, 100 and 1,000 registered
//     consoles, all of them this tool's listeners), each behind a fake tailscaled LocalAPI (`benchd
//     localapi`) that verifies the headers Tailscale Serve writes. Per size: a request's p50 and
//     p99 through the loopback door to the first and to the last registered console, the index
//     page, `fleet consoles` (GET /fleet/v1/consoles), a new registration (the registry's rewrite
//     and fsync) and a repeated one, and VmRSS per console. Then, on the 1,000: 100 consoles whose
//     accept queue is full (connects hang) are registered, 100 live ones go away, and the time
//     until `fleet consoles` shows all 100 down is measured.
//   - probe: one probe round (supervisor.Registry.Probe, its real dial and owner check, the 1 s
//     timeout of `fleet serve`) over 10, 100 and 1,000 consoles, one in ten a full accept queue.
//   - devices: a device register (pairing.Register) of 10, 1,000 and 10,000 devices: the device
//     check of every direct-reach request (Authenticate) for the first and the last device, the
//     check that also writes last-seen (once per device per pairing.LastSeenInterval, in the background), a
//     revocation written by another process until the next check refuses it, and heap per device.
//   - streams: 10, 1,000 and 10,000 idle WebSockets, then as many server-sent event streams,
//     through the loopback door of the 10-console `fleet serve`, each carrying one small message;
//     VmRSS per stream (SPEC P1: at most 32 KiB).
//   - sources: the direct-reach door's failure limiter (reach.Limiter) told of 1,000, 10,000 and
//     100,000 distinct failing sources: heap held, and the bound.
//
// It raises its own limit on open files (the hard one too, where it may) so that 10,000 streams
// fit: each holds two descriptors in fleet and two here. Under a hard limit of 20,000, 9,900 do.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func main() {
	only := flag.String("only", "consoles,probe,devices,streams,sources", "the groups to run, comma-separated")
	requests := flag.Int("requests", 2000, "requests per target in the consoles group")
	maxStreams := flag.Int("streams", 10000, "the largest number of streams")
	flag.Parse()
	if err := run(strings.Split(*only, ","), *requests, *maxStreams); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(groups []string, requests, maxStreams int) error {
	limit := raiseFileLimit(1 << 16)
	out := os.Stdout
	fmt.Fprintf(out, "machine: %d cores (%s), %s, %s; open files %d; load %s at start\n",
		runtime.NumCPU(), cpuModel(), uname(), runtime.Version(), limit, loadAvg())
	fmt.Fprintf(out, "date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintln(out, "| cost | expected | measured | ratio |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, g := range groups {
		var err error
		switch strings.TrimSpace(g) {
		case "consoles":
			err = consolesGroup(out, requests)
		case "probe":
			err = probeGroup(out)
		case "devices":
			err = devicesGroup(out)
		case "streams":
			err = streamsGroup(out, streamsFitting(maxStreams, limit))
		case "sources":
			err = sourcesGroup(out)
		default:
			err = fmt.Errorf("unknown group %q", g)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", g, err)
		}
	}
	fmt.Fprintf(out, "\nload %s at the end\n", loadAvg())
	return nil
}

// streamsFitting is want, or fewer when the limit on open files cannot hold that many streams:
// each holds two descriptors in fleet and two here (its client and its console), and each
// process needs a few of its own.
func streamsFitting(want int, limit uint64) int {
	fit := (int(limit) - 100) / 2 / 100 * 100
	return min(want, fit)
}

// raiseFileLimit raises this process's limit on open files to want (the hard limit too, which
// needs root; children inherit it) and returns the soft limit in force.
func raiseFileLimit(want uint64) uint64 {
	var l syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	if l.Max < want {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err == nil {
			l = syscall.Rlimit{Cur: want, Max: want}
		}
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func uname() string {
	b, err := exec.Command("uname", "-srm").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
