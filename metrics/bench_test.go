package metrics

import (
	"strconv"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
)

// BenchmarkRecord is the cost a door pays per answered request: a forwarded request to one of
// 1,000 registered consoles, and a refusal. Both should report 0 allocs/op.
func BenchmarkRecord(b *testing.B) {
	reg := &fakeRegistry{health: map[string]string{}}
	for i := range 1000 {
		reg.health["console-"+strconv.Itoa(i)] = "up"
	}
	// The registry's own lookup takes no lock; the fake's mutex would be what this measures.
	ids := reg.health
	m := New(Config{IsConsole: func(id string) bool { _, ok := ids[id]; return ok }})
	for id := range ids {
		m.Record(forwarded(audit.DoorLoopback, id, 200, time.Millisecond))
	}
	b.Run("forwarded", func(b *testing.B) {
		e := forwarded(audit.DoorLoopback, "console-999", 200, 3*time.Millisecond)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Record(e)
			}
		})
	})
	b.Run("refused", func(b *testing.B) {
		e := refused(audit.DoorReach, "", "unverified", 401, false)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Record(e)
			}
		})
	})
}
