package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/phase-console/fleet/reach"
)

// streamsGroup is the streams rows: idle WebSockets and event streams through the loopback
// door's hop, each kind in a `fleet serve` of its own (memory a process freed is reused, not
// returned: one kind's growth would hide in the other's).
func streamsGroup(out io.Writer, most int) error {
	sizes := []int{10, 1000, most}
	cs, err := startConsoles(1)
	if err != nil {
		return err
	}
	defer cs.close()
	t, err := buildTree()
	if err != nil {
		return err
	}
	defer t.close()
	for _, kind := range []string{"ws", "sse"} {
		f, err := t.startFleet("streams-" + kind)
		if err != nil {
			return err
		}
		err = streamRows(out, f, cs.addr(0), kind, sizes)
		f.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

func streamRows(out io.Writer, f *fleet, console, kind string, sizes []int) error {
	if _, err := f.register("stream", console); err != nil {
		return err
	}
	req := "GET /c/stream/sse HTTP/1.1\r\nHost: " + f.addr + "\r\nX-Forwarded-For: " + callerIP +
		"\r\nTailscale-User-Login: " + callerLogin + "\r\n\r\n"
	if kind == "ws" {
		req = "GET /c/stream/ws HTTP/1.1\r\nHost: " + f.addr + "\r\nX-Forwarded-For: " + callerIP +
			"\r\nTailscale-User-Login: " + callerLogin + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	}
	// Warm: a few streams opened and closed, so that pools and caches are there before the base.
	warm, err := openStreams(f.addr, req, 4)
	if err != nil {
		return err
	}
	closeStreams(warm)
	time.Sleep(time.Second)
	base := f.rss()
	var open []net.Conn
	defer func() { closeStreams(open) }()
	text, per := "", 0.0
	for k, n := range sizes {
		more, err := openStreams(f.addr, req, n-len(open))
		open = append(open, more...)
		if err != nil {
			return fmt.Errorf("%s: %d streams open: %w", kind, len(open), err)
		}
		time.Sleep(2 * time.Second)
		per = float64(f.rss()-base) / float64(n)
		if k > 0 {
			text += " · "
		}
		text += fmt.Sprintf("%d: %s", n, kib(per))
	}
	name := map[string]string{"ws": "an idle WebSocket", "sse": "an idle server-sent event stream"}[kind]
	verdict := "within"
	if per > 32<<10 {
		verdict = "OVER"
	}
	row(out, fmt.Sprintf("VmRSS per %s through the loopback door (one message each)", name), "O(1) each, ≤ 32 KiB (P1)", text,
		fmt.Sprintf("%s 32 KiB at %d", verdict, sizes[len(sizes)-1]))
	return nil
}

// openStreams opens n streams to addr with req, each read up to its first message, 64 at a time.
func openStreams(addr, req string, n int) ([]net.Conn, error) {
	var mu sync.Mutex
	var conns []net.Conn
	var first error
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := openStream(addr, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			conns = append(conns, c)
		})
	}
	wg.Wait()
	return conns, first
}

func openStream(addr, req string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp4", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	if err := readUntil(bufio.NewReaderSize(c, 512), "0123456789abcdef0123456789abcdef"); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func closeStreams(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// sourcesGroup is the limiter rows: reach.Limiter told of 1,000, 10,000 and 100,000 distinct
// failing sources (IPv6 /64s: each its own source), on a clock that stands still so that no
// failure stops counting. Through the door, Admit lets no stranger be judged once fifty
// failures count (OverallLimit), so a flood records far fewer; this is the table's bound met
// head on.
func sourcesGroup(out io.Writer) error {
	sizes := []int{1000, 10000, 100000}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	text, held := "", 0.0
	var timing string
	for k, n := range sizes {
		before := heapInUse()
		l := reach.NewLimiter(func() time.Time { return now })
		start := time.Now()
		for i := range n {
			var a [16]byte
			a[0], a[1] = 0x20, 0x01
			a[4], a[5], a[6], a[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
			l.Failure(netip.AddrFrom16(a))
		}
		took := time.Since(start)
		held = float64(heapInUse() - before)
		runtime.KeepAlive(l)
		if k > 0 {
			text += " · "
			timing += " · "
		}
		text += fmt.Sprintf("%d: %s", n, kib(held))
		timing += fmt.Sprintf("%d: %s", n, ms(took/time.Duration(n)))
	}
	row(out, "limiter heap after n distinct failing sources", fmt.Sprintf("O(min(n, %d)): ≤ %d sources remembered", reach.MaxSources, reach.MaxSources), text,
		fmt.Sprintf("%s per remembered source at %d", kib(held/float64(reach.MaxSources)), sizes[len(sizes)-1]))
	row(out, "limiter: time per failure recorded", "O(1)", timing, "–")
	return nil
}
