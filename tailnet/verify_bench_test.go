package tailnet

import (
	"context"
	"net/netip"
	"testing"

	"tailscale.com/tailcfg"

	"github.com/phase-console/fleet/internal/doortest"
)

// BenchmarkWhoIsCacheHit is what S5c costs per request once tailscaled has answered for the
// caller's address: a cache lookup, no LocalAPI call.
//
//	go test -run=NONE -bench=WhoIsCacheHit -benchmem ./tailnet
func BenchmarkWhoIsCacheHit(b *testing.B) {
	d := startDoor(b)
	v := d.v
	ctx := context.Background()
	ip := netip.MustParseAddr(doortest.AliceIP)
	if _, ref := v.whoIs(ctx, ip); ref != nil {
		b.Fatal(ref)
	}
	asked := func() int { return len(d.tailnet.WhoisAsked()) }
	before := asked()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ref := v.whoIs(ctx, ip); ref != nil {
			b.Fatal(ref)
		}
	}
	b.StopTimer()
	if n := asked() - before; n > b.N/1000+1 {
		b.Fatalf("the LocalAPI was asked %d times in %d lookups: not a cache hit", n, b.N)
	}
}

// BenchmarkGrantCheck is what G1 adds per request to a cached WhoIs answer: for a caller without
// the capability, reading the mode (no allocation); for one with it, one map lookup for an id
// and one comparison per prefix. "whois only" is the same lookup without the grant, for the
// figure before and after in one run.
//
//	go test -run=NONE -bench=GrantCheck -benchmem ./tailnet
func BenchmarkGrantCheck(b *testing.B) {
	rows := []struct {
		name  string
		caps  tailcfg.PeerCapMap
		id    string
		grant bool
	}{
		{"whois only", nil, "alpha", false},
		{"no capability", nil, "alpha", true},
		{"capability id", capOf(`{"consoles":["beta","alpha","gamma"]}`), "alpha", true},
		{"capability prefix", capOf(`{"consoles":["build-*"]}`), "build-1", true},
		{"capability refused", capOf(`{"consoles":["beta"]}`), "alpha", true},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			tn := doortest.NewFakeTailscaled()
			p := tn.Peers[doortest.AliceIP]
			p.Caps = row.caps
			tn.Peers[doortest.AliceIP] = p
			d := startDoorWith(b, tn)
			v := d.v
			ctx := context.Background()
			ip := netip.MustParseAddr(doortest.AliceIP)
			if _, ref := v.whoIs(ctx, ip); ref != nil {
				b.Fatal(ref)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e, ref := v.whoIs(ctx, ip)
				if ref != nil {
					b.Fatal(ref)
				}
				if row.grant {
					v.grantFor(&e).Allows(row.id)
				}
			}
		})
	}
}
