package serveshare

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"

	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/internal/tailnettest"
	"github.com/phase-console/fleet/supervisor"
	"github.com/phase-console/fleet/tailnet"
)

var verbose = flag.Bool("verbose-tailnet", false, "print the logs of control, DERP and the tsnet nodes")

const (
	magicDNSDomain = "tail-scale.ts.net"
	setupBudget    = 3 * time.Minute
)

func TestMain(m *testing.M) {
	flag.Parse()
	tailnettest.Prepare()
	os.Exit(m.Run())
}

// The console's answers, as bench/benchd backend gives them.
var (
	smallBody = []byte("hello, fleet\n")
	bigBody   = bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), (64<<10)/26+1)[:64<<10]
)

// A testTailnet is control, DERP, the nodes "sup" (Serve, fleet, the console) and "client".
type testTailnet struct {
	ctx      context.Context
	supIP    netip.Addr
	supFQDN  string
	http     *http.Client // the client node's
	refusals atomic.Int64 // fleet.rejected lines in fleet's log
}

// refusalCounter counts fleet's fleet.rejected log lines (slog writes each line in one Write).
type refusalCounter struct{ n *atomic.Int64 }

func (r refusalCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"msg":"fleet.rejected"`)) {
		r.n.Add(1)
	}
	return len(p), nil
}

func startTailnet(b *testing.B) *testTailnet {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupBudget)
	b.Cleanup(cancel)
	began := time.Now()

	control := tailnettest.StartControl(b, *verbose, magicDNSDomain, nil)
	sup := tailnettest.StartNode(b, ctx, *verbose, control, "sup")
	client := tailnettest.StartNode(b, ctx, *verbose, control, "client")
	supLC := sup.LC
	st, err := supLC.StatusWithoutPeers(ctx)
	if err != nil {
		b.Fatal(err)
	}
	tn := &testTailnet{ctx: ctx, supIP: sup.IP, supFQDN: strings.TrimSuffix(st.Self.DNSName, ".")}
	tailnettest.WaitWhoIs(b, ctx, supLC, client.IP) // sup must know the client before fleet can verify it

	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(smallBody)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(bigBody)
	})
	console := httptest.NewServer(mux)
	b.Cleanup(console.Close)

	// Two supervisors: one that sees tailscaled as on a kernel TUN (cmd/tailscaled's default on
	// Linux), and one that sees tsnet as it is, userspace networking, where S5b asks WhoIs of
	// every new connection's ip:port (~360 ms for Serve's own, which netstack does not know).
	fleetAddr := startFleet(b, kernelTUN{supLC}, console, &tn.refusals)
	userspaceAddr := startFleet(b, supLC, console, &tn.refusals)

	// tailscale serve --http=PORT http://TARGET, for each route
	cfg := &ipn.ServeConfig{TCP: map[uint16]*ipn.TCPPortHandler{}, Web: map[ipn.HostPort]*ipn.WebServerConfig{}}
	for r, target := range map[route]string{viaFleet: fleetAddr, viaFleetUserspace: userspaceAddr, straight: console.Listener.Addr().String()} {
		cfg.TCP[r.port()] = &ipn.TCPPortHandler{HTTP: true}
		cfg.Web[ipn.HostPort(tn.supFQDN+":"+strconv.Itoa(int(r.port())))] = &ipn.WebServerConfig{
			Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: "http://" + target}}}
	}
	if err := supLC.SetServeConfig(ctx, cfg); err != nil {
		b.Fatal(err)
	}

	tn.http = &http.Client{Transport: &http.Transport{
		DialContext:         client.Srv.Dial,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 128,
		DisableCompression:  true,
	}}
	b.Cleanup(tn.http.CloseIdleConnections)
	for _, p := range []route{viaFleet, viaFleetUserspace, straight} { // both paths answer before anything is timed
		req := tn.request(p, "/small")
		for {
			if tn.do(req) == nil {
				break
			}
			if !pause(ctx) {
				b.Fatalf("%s never answered 200 through Serve: %v", p, tn.do(req))
			}
		}
	}
	b.Logf("tailnet with 2 nodes, Serve and fleet up in %v", time.Since(began).Round(time.Millisecond))
	return tn
}

// startFleet runs a supervisor that asks api as its LocalAPI, with bench the console, and returns
// its TCP door's address.
func startFleet(b *testing.B, api tailnet.LocalAPI, console *httptest.Server, refusals *atomic.Int64) string {
	b.Helper()
	raw, err := supervisor.Listen(0)
	if err != nil {
		b.Fatal(err)
	}
	door := supervisortest.StartOn(b, supervisor.Config{
		StateHome:     filepath.Join(b.TempDir(), "state"),
		LocalAPI:      api,
		TailscaledUID: os.Getuid(), // tsnet runs in this process: Serve's backend connections are ours
		// and so is its command line (no outbound proxy).
		TailscaledArgs: func(context.Context) ([]string, error) { return os.Args, nil },
		Logger:         slog.New(slog.NewJSONHandler(refusalCounter{refusals}, nil)),
	}, raw)
	door.Register(b, supervisor.Console{ID: "bench", Addr: console.Listener.Addr().String(), Name: "Bench"})
	return door.Addr
}

// kernelTUN is a LocalAPI that reports a kernel TUN, as cmd/tailscaled does on Linux: there
// netstack never forwards a peer straight to 127.0.0.1, so fleet asks no WhoIs of Serve's own
// connections (SPEC S5b).
type kernelTUN struct{ *local.Client }

func (k kernelTUN) StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error) {
	st, err := k.Client.StatusWithoutPeers(ctx)
	if st != nil {
		st.TUN = true
	}
	return st, err
}

// pause waits a little, or reports false when ctx is done.
func pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(20 * time.Millisecond):
		return true
	}
}

// A route is one way from the client to the console.
type route int

const (
	viaFleet          route = iota // Serve → fleet (seeing a kernel TUN) → console
	viaFleetUserspace              // Serve → fleet (seeing tsnet's userspace networking) → console
	straight                       // Serve → console
)

// port is the Serve port of route r.
func (r route) port() uint16 { return [...]uint16{80, 81, 8080}[r] }

func (r route) String() string {
	return [...]string{"serve+fleet", "serve+fleet-userspace", "serve"}[r]
}

// request is a GET of the console's resource (/small or /big) over route r, by sup's address
// with sup's name as Host, as a browser on the tailnet sends it.
func (tn *testTailnet) request(r route, resource string) *http.Request {
	path := "/c/bench" + resource
	if r == straight {
		path = resource
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
		"http://"+netip.AddrPortFrom(tn.supIP, r.port()).String()+path, nil)
	if err != nil {
		panic(err)
	}
	req.Host = tn.supFQDN
	if r.port() != 80 {
		req.Host += ":" + strconv.Itoa(int(r.port()))
	}
	return req
}

// do sends req and reads its answer to the end; an answer other than the console's 200 is an
// error.
func (tn *testTailnet) do(req *http.Request) error {
	resp, err := tn.http.Do(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: %s %s", req.URL, resp.Status, resp.Header.Get("X-Fleet-Reason"))
	case n != int64(len(smallBody)) && n != int64(len(bigBody)):
		return fmt.Errorf("%s: %d bytes, not the console's answer", req.URL, n)
	}
	return nil
}

// BenchmarkServeShare: the time of a request from a tailnet node through Serve and fleet to a
// console, against the same request through Serve straight to the console, alternating request by
// request. Its metrics: each route's mean, p50 and p99 in µs, and "ratio" (fleet + Serve ÷ Serve,
// of the means; "ratio-p50" of the medians). An op is one request over each of the two routes.
//
// The "kernel-tun" cases are fleet as cmd/tailscaled on Linux runs it; the "userspace" ones are
// fleet behind tsnet's (or `tailscaled --tun=userspace-networking`'s) netstack, where the S5b check
// of each new connection from Serve waits for a WhoIs that netstack answers "not found" only after
// its retries. Serve keeps two idle connections per backend (net/http's default), so with more
// than two requests at a time it opens new ones all along.
func BenchmarkServeShare(b *testing.B) {
	tn := startTailnet(b)
	for _, c := range []struct {
		name     string
		fleet    route
		resource string
		conns    int
	}{
		{"kernel-tun/small/conns=1", viaFleet, "/small", 1},
		{"kernel-tun/small/conns=8", viaFleet, "/small", 8},
		{"kernel-tun/64KiB/conns=1", viaFleet, "/big", 1},
		{"userspace/small/conns=1", viaFleetUserspace, "/small", 1},
		{"userspace/small/conns=4", viaFleetUserspace, "/small", 4},
	} {
		b.Run(c.name, func(b *testing.B) { tn.interleave(b, c.fleet, c.resource, c.conns) })
	}
	if n := tn.refusals.Load(); n != 0 {
		b.Errorf("fleet refused %d requests during the run, want 0", n)
	}
}

// interleave sends b.N requests of resource over route fleet and b.N straight from conns
// goroutines, each alternating the two routes' order from one pair to the next, and reports the
// metrics under the names "serve+fleet" and "serve".
func (tn *testTailnet) interleave(b *testing.B, fleet route, resource string, conns int) {
	routes := [2]route{fleet, straight}
	lat := make([][2][]time.Duration, conns)
	per := max(1, b.N/conns)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := [2]*http.Request{tn.request(routes[0], resource), tn.request(routes[1], resource)}
			for k := range lat[g] {
				lat[g][k] = make([]time.Duration, 0, per)
			}
			for i := range per {
				for k := range 2 {
					r := (i + g + k) % 2
					t0 := time.Now()
					if err := tn.do(reqs[r]); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
					lat[g][r] = append(lat[g][r], time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var all [2][]time.Duration
	for _, l := range lat {
		for k := range all {
			all[k] = append(all[k], l[k]...)
		}
	}
	var mean, p50 [2]float64
	for k, name := range [2]string{"serve+fleet", "serve"} {
		slices.Sort(all[k])
		var sum time.Duration
		for _, d := range all[k] {
			sum += d
		}
		mean[k] = us(sum) / float64(len(all[k]))
		p50[k] = us(percentile(all[k], 50))
		b.ReportMetric(mean[k], name+"-us/req")
		b.ReportMetric(p50[k], name+"-p50-us")
		b.ReportMetric(us(percentile(all[k], 99)), name+"-p99-us")
	}
	b.ReportMetric(mean[0]/mean[1], "ratio")
	b.ReportMetric(p50[0]/p50[1], "ratio-p50")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// percentile is the p-th percentile (0 < p ≤ 100) of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
