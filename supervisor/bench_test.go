package supervisor

import (
	"io"
	"net/http"
	"testing"

	"github.com/phase-console/fleet/proxy"
)

// BenchmarkVerifiedForward measures one verified request through the loopback door to a console
// and back, on a kept-alive connection (WhoIs answers cached, as in steady use).
//
//	go test -run=NONE -bench=. ./supervisor
func BenchmarkVerifiedForward(b *testing.B) {
	d := startDoor(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	req, _ := http.NewRequest("GET", "http://"+d.addr+"/c/alpha/bench?x=1", nil)
	req.Host = tsName
	req.Header.Set("X-Forwarded-For", aliceIP)
	req.Header.Set("Tailscale-User-Login", alice)
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
	r.Header.Set("X-Forwarded-For", aliceIP)
	r.Header.Set("Tailscale-User-Login", alice)
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
