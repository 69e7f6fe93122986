// Command unixload is bench/run's load generator for the doors wrk cannot reach: it speaks
// HTTP/1.1 over a unix socket (fleet's unix-socket door, the one Tailscale Serve proxies to) and,
// for a like-for-like ratio, over TCP.
//
//	unixload -unix /tmp/x/serve.sock -path /c/bench/small -host localhost -H 'X-Forwarded-Host: bench.example.ts.net' -c 32 -d 3s
//	unixload -addr 127.0.0.1:17420   -path /c/bench/small -c 32 -d 3s [-close]
//
// Each of -c connections sends one GET at a time on a kept connection (or, with -close, a new
// connection per request with "Connection: close") for -d, and times each request from its first
// byte written to its answer's last byte read. It prints its figures in wrk's words (requests,
// latency percentiles, Requests/sec, non-2xx answers, socket errors), so that bench/run reads both
// generators with the same lines. Like wrk, it counts only answers that end before the time is up;
// unlike wrk, it waits (up to endGrace) for the answers still on their way then, instead of
// closing their connections under them: a door cannot look up who opened a connection whose
// opener is gone (SPEC S5a), and refuses it, which would put refusals in the door's log that no
// caller would cause.
//
// It is a measuring tool, not part of fleet: nothing here is imported by the product.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// endGrace is how long a connection waits, once the time is up, for the answer it asked for.
const endGrace = 2 * time.Second

// config is one run.
type config struct {
	network, addr string // "unix" and a socket path, or "tcp" and host:port
	path, host    string
	headers       []string // "Name: value", written as given
	conns         int
	duration      time.Duration
	requests      int // when > 0, stop after this many answers instead of at the duration
	close         bool
}

// result is what a run measured.
type result struct {
	requests                      int
	non2xx                        int
	bytesRead                     int64
	elapsed                       time.Duration
	latencies                     []time.Duration // sorted
	errConnect, errRead, errWrite int
}

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	var cfg config
	var hdrs headerFlags
	sock := flag.String("unix", "", "the unix socket `PATH` to load")
	tcp := flag.String("addr", "", "the TCP `HOST:PORT` to load (instead of -unix)")
	flag.StringVar(&cfg.path, "path", "/", "the request target")
	flag.StringVar(&cfg.host, "host", "", "the Host header (default: localhost on a unix socket, the address on TCP)")
	flag.Var(&hdrs, "H", "a header `'Name: value'` to send (repeatable)")
	flag.IntVar(&cfg.conns, "c", 32, "connections")
	flag.DurationVar(&cfg.duration, "d", 3*time.Second, "how long to send")
	flag.IntVar(&cfg.requests, "n", 0, "stop after this many answers (0: at -d)")
	flag.BoolVar(&cfg.close, "close", false, "a new connection per request, with Connection: close")
	flag.Parse()
	switch {
	case (*sock == "") == (*tcp == ""):
		fmt.Fprintln(os.Stderr, "unixload: give exactly one of -unix and -addr")
		os.Exit(2)
	case *sock != "":
		cfg.network, cfg.addr = "unix", *sock
	default:
		cfg.network, cfg.addr = "tcp", *tcp
	}
	cfg.headers = hdrs
	if cfg.conns < 1 {
		fmt.Fprintln(os.Stderr, "unixload: -c must be at least 1")
		os.Exit(2)
	}
	res := run(cfg)
	report(os.Stdout, cfg, res)
}

// request is the bytes of one request of cfg.
func request(cfg config) []byte {
	host := cfg.host
	if host == "" {
		host = cfg.addr
		if cfg.network == "unix" {
			host = "localhost"
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", cfg.path, host)
	for _, h := range cfg.headers {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	if cfg.close {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// run loads cfg's address and returns what it measured.
func run(cfg config) result {
	req := request(cfg)
	start := time.Now()
	end := start.Add(cfg.duration)
	if cfg.requests > 0 {
		end = start.Add(24 * time.Hour)
	}
	var left chan struct{} // one token per answer still wanted, with -n
	if cfg.requests > 0 {
		left = make(chan struct{}, cfg.requests)
		for range cfg.requests {
			left <- struct{}{}
		}
	}
	workers := make([]*worker, cfg.conns)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{cfg: cfg, req: req, end: end, left: left}
		workers[i] = w
		wg.Add(1)
		go func() { defer wg.Done(); w.loop() }()
	}
	wg.Wait()
	res := result{elapsed: time.Since(start)}
	if cfg.requests == 0 {
		res.elapsed = cfg.duration
	}
	for _, w := range workers {
		res.requests += len(w.lat)
		res.non2xx += w.non2xx
		res.bytesRead += w.bytesRead
		res.latencies = append(res.latencies, w.lat...)
		res.errConnect += w.errConnect
		res.errRead += w.errRead
		res.errWrite += w.errWrite
	}
	slices.Sort(res.latencies)
	return res
}

// A worker is one connection's loop.
type worker struct {
	cfg  config
	req  []byte
	end  time.Time
	left chan struct{}

	conn      net.Conn
	br        *bufio.Reader
	lat       []time.Duration
	non2xx    int
	bytesRead int64

	errConnect, errRead, errWrite int
}

func (w *worker) loop() {
	w.lat = make([]time.Duration, 0, 1<<14)
	defer func() {
		if w.conn != nil {
			w.conn.Close()
		}
	}()
	for {
		if w.left != nil {
			select {
			case <-w.left:
			default:
				return
			}
		}
		if !time.Now().Before(w.end) {
			return
		}
		if w.conn == nil {
			c, err := net.DialTimeout(w.cfg.network, w.cfg.addr, time.Until(w.end))
			if err != nil {
				if time.Now().Before(w.end) {
					w.errConnect++
				}
				w.giveBack()
				time.Sleep(time.Millisecond) // a refused dial would spin otherwise
				continue
			}
			c.SetDeadline(w.end.Add(endGrace))
			w.conn = c
			if w.br == nil {
				w.br = bufio.NewReaderSize(c, 64<<10)
			} else {
				w.br.Reset(c)
			}
		}
		t0 := time.Now()
		if _, err := w.conn.Write(w.req); err != nil {
			if time.Now().Before(w.end) {
				w.errWrite++
			}
			w.drop()
			w.giveBack()
			continue
		}
		status, n, keep, err := readResponse(w.br)
		if err != nil {
			if time.Now().Before(w.end) {
				w.errRead++
			}
			w.drop()
			w.giveBack()
			continue
		}
		if !time.Now().Before(w.end) {
			return // answered after the time was up: not counted
		}
		w.lat = append(w.lat, time.Since(t0))
		w.bytesRead += n
		if status < 200 || status > 399 {
			w.non2xx++
		}
		if !keep || w.cfg.close {
			w.drop()
		}
	}
}

// giveBack returns an unused -n token after a failed attempt.
func (w *worker) giveBack() {
	if w.left != nil {
		w.left <- struct{}{}
	}
}

func (w *worker) drop() {
	w.conn.Close()
	w.conn = nil
}

var errBadResponse = errors.New("malformed response")

// readResponse reads one answer from br: its status, the bytes read, and whether the connection
// may carry another request. It reads a body framed by Content-Length, by chunks, or (without
// either) by the connection's end.
func readResponse(br *bufio.Reader) (status int, n int64, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	n += int64(len(line))
	if err != nil {
		return 0, n, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, n, false, errBadResponse
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, n, false, errBadResponse
	}
	keep = line[7] == '1'
	length := int64(-1)
	chunked := false
	for {
		line, err = br.ReadSlice('\n')
		n += int64(len(line))
		if err != nil {
			return status, n, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return status, n, false, errBadResponse
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || length < 0 {
				return status, n, false, errBadResponse
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case status < 200 || status == 204 || status == 304:
		return status, n, keep, nil
	case chunked:
		m, err := readChunked(br)
		return status, n + m, keep, err
	case length >= 0:
		m, err := br.Discard(int(length))
		return status, n + int64(m), keep, err
	default:
		m, err := io.Copy(io.Discard, br)
		return status, n + m, false, err
	}
}

// readChunked reads a chunked body and its trailer.
func readChunked(br *bufio.Reader) (int64, error) {
	var n int64
	for {
		line, err := br.ReadSlice('\n')
		n += int64(len(line))
		if err != nil {
			return n, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		k, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || k < 0 {
			return n, errBadResponse
		}
		if k == 0 {
			for { // the trailer, up to its empty line
				line, err := br.ReadSlice('\n')
				n += int64(len(line))
				if err != nil {
					return n, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return n, nil
				}
			}
		}
		m, err := br.Discard(int(k))
		n += int64(m)
		if err != nil {
			return n, err
		}
		line, err = br.ReadSlice('\n')
		n += int64(len(line))
		if err != nil {
			return n, err
		}
		if len(bytes.TrimRight(line, "\r\n")) != 0 {
			return n, errBadResponse
		}
	}
}

// percentile is the p-th percentile (0 < p ≤ 100) of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// report prints res in the lines of wrk's --latency output that bench/run reads.
func report(out io.Writer, cfg config, res result) {
	target := cfg.network + ":" + cfg.addr + cfg.path
	fmt.Fprintf(out, "Running %v test @ %s\n  %d connections\n", cfg.duration, target, cfg.conns)
	fmt.Fprintln(out, "  Latency Distribution")
	for _, p := range []float64{50, 75, 90, 99} {
		fmt.Fprintf(out, "     %g%%  %.3fms\n", p, float64(percentile(res.latencies, p))/1e6)
	}
	fmt.Fprintf(out, "  %d requests in %.2fs, %.2fMB read\n", res.requests, res.elapsed.Seconds(), float64(res.bytesRead)/(1<<20))
	if res.errConnect+res.errRead+res.errWrite > 0 {
		fmt.Fprintf(out, "  Socket errors: connect %d, read %d, write %d, timeout 0\n", res.errConnect, res.errRead, res.errWrite)
	}
	if res.non2xx > 0 {
		fmt.Fprintf(out, "  Non-2xx or 3xx responses: %d\n", res.non2xx)
	}
	rps := 0.0
	if res.elapsed > 0 {
		rps = float64(res.requests) / res.elapsed.Seconds()
	}
	fmt.Fprintf(out, "Requests/sec: %10.2f\n", rps)
}
