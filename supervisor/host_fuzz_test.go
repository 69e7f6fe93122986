package supervisor

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzHostOnly_S10: whatever Host a caller sends, hostOnly returns "" or one clean host — a name of
// [a-z0-9.-] or an IP literal — so that nothing riding after it ("host:1,evil.example") can ever be
// admitted and then forwarded as X-Forwarded-Host.
func FuzzHostOnly_S10(f *testing.F) {
	for _, s := range []string{
		"localhost", "127.0.0.1:7420", "[::1]:7420", "sup.tail1234.ts.net", "SUP.TAIL1234.TS.NET.",
		"sup.tail1234.ts.net:1,evil.example", "[::1]:80:80", "[localhost]", "127.0.0.1:99999", "a b",
		"[fe80::1%25eth0]:80", "100.101.102.1", ":80", "host:", "[::ffff:127.0.0.1]:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got := hostOnly(host)
		if got == "" {
			return
		}
		if ip, err := netip.ParseAddr(got); err == nil {
			if ip.Zone() != "" {
				t.Fatalf("hostOnly(%q) = %q keeps a zone", host, got)
			}
			return
		}
		for i := 0; i < len(got); i++ {
			c := got[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
				t.Fatalf("hostOnly(%q) = %q has %q", host, got, c)
			}
		}
		if strings.HasSuffix(got, ".") {
			t.Fatalf("hostOnly(%q) = %q keeps a trailing dot", host, got)
		}
		if !strings.Contains(strings.ToLower(host), got) {
			t.Fatalf("hostOnly(%q) = %q is not part of the Host", host, got)
		}
	})
}
