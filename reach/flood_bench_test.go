package reach

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/pairing"
)

// BenchmarkDeviceUnderPasswordFlood: a paired device's latency through the door, idle
// and while strangers from 64 loopback sources flood the pairing POST with live codes and wrong
// passwords (the real scrypt cost, ln=17). What keeps the device's p99 near its idle p99: scrypt
// runs in a helper process, off the door's heap; the limiter refuses a limited source before any
// password work; the overall limit never holds a device back; at most two scrypt computations run
// at a time. It reports, and asserts
// nothing:
//
//	go test -run=NONE -bench=DeviceUnderPasswordFlood -benchtime=1x ./reach
func BenchmarkDeviceUnderPasswordFlood(b *testing.B) {
	// As fleet serve does: scrypt in a helper process (this test binary, see TestMain), off the
	// door's heap.
	b.Setenv("FLEET_SCRYPT_HELPER", "1")
	pairing.UseKeyFunc(pairing.HelperProcessKeyFunc(os.Args[0]))
	b.Cleanup(func() { pairing.UseKeyFunc(nil) })
	for range b.N {
		d := startTestDoor(b, func(c *Config) {
			c.Now = time.Now // the real clock: the limiter's windows are real here
			c.PairingFor = func(door *Door) http.Handler {
				return pairing.NewHandler(pairing.HandlerConfig{
					Dir: filepath.Join(filepath.Dir(c.TLSDir)), Register: c.Devices.(*pairing.Register),
					Fingerprint: door.Fingerprint(), Origin: "https://" + door.Addr().String(),
					OnFailure: door.Failure, Logger: slog.New(slog.DiscardHandler),
				})
			}
		})
		if err := pairing.SetPassword(d.reachDir, []byte("the right password")); err != nil {
			b.Fatal(err)
		}
		_, cookie := d.pair("phone")
		device := d.client("127.0.0.1")
		get := func() time.Duration {
			req, _ := http.NewRequest("GET", "https://"+d.Addr+"/c/alpha/", nil)
			req.Header.Set("Cookie", strings.TrimPrefix(cookie, "Cookie: "))
			start := time.Now()
			resp, err := device.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("the device got %s", resp.Status)
			}
			return time.Since(start)
		}
		const samples = 300
		measure := func() (p50, p99 time.Duration) {
			lat := make([]time.Duration, samples)
			for i := range lat {
				lat[i] = get()
			}
			slices.Sort(lat)
			return lat[samples/2], lat[samples*99/100]
		}
		get() // warm the connection and the hop's pool
		idle50, idle99 := measure()

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var posts, limited atomic.Int64
		for src := 2; src < 66; src++ {
			c := d.client(fmt.Sprintf("127.0.0.%d", src))
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					code, err := pairing.IssueCode(d.reachDir, "", time.Now())
					if err != nil {
						b.Error(err)
						return
					}
					form := url.Values{"code": {code}, "password": {"wrong password"}, "name": {"x"}}
					req, _ := http.NewRequest("POST", "https://"+d.Addr+"/pair", strings.NewReader(form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					req.Header.Set("Origin", "https://"+d.Addr)
					resp, err := c.Do(req)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					posts.Add(1)
					if resp.StatusCode == http.StatusTooManyRequests {
						limited.Add(1)
					}
				}
			})
		}
		time.Sleep(500 * time.Millisecond) // let the flood reach the limiter and scrypt first
		flood50, flood99 := measure()
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(idle50.Microseconds())/1000, "idle-p50-ms")
		b.ReportMetric(float64(idle99.Microseconds())/1000, "idle-p99-ms")
		b.ReportMetric(float64(flood50.Microseconds())/1000, "flood-p50-ms")
		b.ReportMetric(float64(flood99.Microseconds())/1000, "flood-p99-ms")
		b.ReportMetric(float64(flood99)/float64(idle99), "p99-ratio")
		b.ReportMetric(float64(posts.Load()), "flood-posts")
		b.ReportMetric(float64(limited.Load()), "flood-429s")
	}
}

// TestMain lets the test binary stand in for fleet's scrypt helper process.
func TestMain(m *testing.M) {
	if os.Getenv("FLEET_SCRYPT_HELPER") == "1" {
		if err := pairing.ServeKeyHelper(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// client is an HTTP client that trusts only the door's root and connects from the loopback
// address src (another source for the limiter).
func (d *testDoor) client(src string) *http.Client {
	dialer := &net.Dialer{Timeout: doortest.WaitLimit, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:     dialer.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: d.pool, ServerName: d.door.Addr().Addr().String()},
	}}
}
