package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/proxy"
)

// BenchmarkVerifiedForward measures one verified request through the loopback door to a console
// and back, on a kept-alive connection (WhoIs answers cached, as in steady use).
//
//	go test -run=NONE -bench=. ./supervisor
func BenchmarkVerifiedForward(b *testing.B) {
	d := startDoor(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	req, _ := http.NewRequest("GET", "http://"+d.Addr+"/c/alpha/bench?x=1", nil)
	req.Host = doortest.TSName
	req.Header.Set("X-Forwarded-For", doortest.AliceIP)
	req.Header.Set("Tailscale-User-Login", doortest.Alice)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkJudge measures the per-request judgement alone (S3, S4 scrub, S7).
func BenchmarkJudge(b *testing.B) {
	r, _ := http.NewRequest("GET", "/c/alpha/some/page?x=1", nil)
	r.RequestURI = "/c/alpha/some/page?x=1"
	r.Header.Set("X-Forwarded-For", doortest.AliceIP)
	r.Header.Set("Tailscale-User-Login", doortest.Alice)
	r.Header.Set("Accept", "text/html")
	r.Header.Set("Cookie", "a=b")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if proxy.CheckNoAssertion(r) != nil {
			b.Fatal("refused")
		}
		if _, ref := proxy.JudgePath(r.RequestURI); ref != nil {
			b.Fatal(ref)
		}
		h := r.Header.Clone()
		proxy.ScrubIdentity(h)
	}
}

// benchConsole answers every request with size bytes and counts the connections made to it, so
// that a benchmark can report how often the hop had to dial (each dial costs the owner check of
// the console's socket).
func benchConsole(b *testing.B, size int) (addr string, conns *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	conns = new(atomic.Int64)
	body := bytes.Repeat([]byte("x"), size)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), conns
}

// BenchmarkVerifiedForwardParallel is BenchmarkVerifiedForward with 32 callers at once (as a page
// loading many things does), for small and 64 KiB answers, after a warm-up. dials/op is how many connections the
// hop opened to the console per request: a pool smaller than the concurrency makes it churn.
//
//	go test -run=NONE -bench=Parallel -benchmem ./supervisor
func BenchmarkVerifiedForwardParallel(b *testing.B) {
	for _, w := range []struct {
		size    int
		newConn bool // a new connection per request, as a burst through Serve makes
	}{{64, false}, {64 << 10, false}, {64, true}} {
		size := w.size
		name := fmt.Sprintf("%dB", size)
		if w.newConn {
			name += "-newconn"
		}
		b.Run(name, func(b *testing.B) {
			d := startDoor(b)
			addr, conns := benchConsole(b, size)
			if _, err := d.srv.registry.Put(Console{ID: "bench", Addr: addr}); err != nil {
				b.Fatal(err)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true, DisableKeepAlives: w.newConn}}
			b.Cleanup(client.CloseIdleConnections)
			get := func() bool {
				req, _ := http.NewRequest("GET", "http://"+d.Addr+"/c/bench/x", nil)
				req.Host = doortest.TSName
				req.Header.Set("X-Forwarded-For", doortest.AliceIP)
				req.Header.Set("Tailscale-User-Login", doortest.Alice)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return false
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n != int64(size) {
					b.Errorf("status %d, %d bytes", resp.StatusCode, n)
					return false
				}
				return true
			}
			const callers = 32
			// Warm up: every caller's connection open, the hop's pool filled once.
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() { get() })
			}
			wg.Wait()
			conns.Store(0)
			b.SetParallelism(callers / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() && get() {
				}
			})
			b.ReportMetric(float64(conns.Load())/float64(b.N), "dials/op")
		})
	}
}
