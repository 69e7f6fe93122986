package tailnet

import (
	"context"
	"net/netip"
	"testing"
)

// BenchmarkWhoIsCacheHit is what S5c costs per request once tailscaled has answered for the
// caller's address: a cache lookup, no LocalAPI call.
//
//	go test -run=NONE -bench=WhoIsCacheHit -benchmem ./tailnet
func BenchmarkWhoIsCacheHit(b *testing.B) {
	d := startDoor(b)
	v := d.v
	ctx := context.Background()
	ip := netip.MustParseAddr(aliceIP)
	if _, ref := v.whoIs(ctx, ip); ref != nil {
		b.Fatal(ref)
	}
	asked := func() int { d.tailnet.mu.Lock(); defer d.tailnet.mu.Unlock(); return len(d.tailnet.whoisLog) }
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
