package reach

import (
	"net/http"
	"testing"
)

// BenchmarkDoorNewConnResumed: a paired device's request on a new connection that resumes its
// TLS session (P2's new-connection workload), through the whole door over real TLS; the client
// runs in the same process.
func BenchmarkDoorNewConnResumed(b *testing.B) {
	d := startTestDoor(b)
	_, cookie := d.pair("phone")
	phone := d.sessionClient("127.0.0.1")
	req := d.req("GET", "/c/alpha/x", cookie)
	b.ReportAllocs()
	for b.Loop() {
		conn, err := phone.dial()
		if err != nil {
			b.Fatal(err)
		}
		if st, _ := get(conn, req); st != http.StatusOK {
			b.Fatalf("status %d", st)
		}
		conn.Close()
	}
}

// BenchmarkDoorKeptConn: a paired device's requests one after another on one kept TLS
// connection (P2's kept-connection workload), through the whole door and the fast loop; the
// client runs in the same process.
func BenchmarkDoorKeptConn(b *testing.B) {
	d := startTestDoor(b)
	_, cookie := d.pair("phone")
	phone := d.sessionClient("127.0.0.1")
	req := d.req("GET", "/c/alpha/x", cookie)
	conn, err := phone.dial()
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	b.ReportAllocs()
	for b.Loop() {
		if st, _ := get(conn, req); st != http.StatusOK {
			b.Fatalf("status %d", st)
		}
	}
}
