package contract

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHost_S10(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"localhost", "localhost", true},
		{"LOCALHOST:7420", "localhost", true},
		{"127.0.0.1:7420", "127.0.0.1", true},
		{"[::1]:7420", "::1", true},
		{"[::1]", "::1", true},
		{"[0:0:0:0:0:0:0:1]", "0:0:0:0:0:0:0:1", true},
		{"[::FFFF:127.0.0.1]:1", "::ffff:127.0.0.1", true},
		{"SUP.TAIL1234.TS.NET.", "sup.tail1234.ts.net", true},
		{"sup.tail1234.ts.net.:443", "sup.tail1234.ts.net", true},
		{"100.101.102.1", "100.101.102.1", true},
		{"host:65535", "host", true},
		{"host:07420", "host", true},
		// Refused: nothing but a name or literal and a port.
		{"", "", false},
		{":80", "", false},
		{"host:", "", false},
		{"host:0", "", false},
		{"host:65536", "", false},
		{"127.0.0.1:99999", "", false},
		{"host:+80", "", false},
		{"host:-1", "", false},
		{"host:1,evil.example", "", false},
		{"sup.tail1234.ts.net:x;evil", "", false},
		{"[::1]:80:80", "", false},
		{"[::1]:,evil.example", "", false},
		{"[::1]x", "", false},
		{"[::1", "", false},
		{"[localhost]", "", false},
		{"[127.0.0.1]", "", false},
		{"[fe80::1%25eth0]:80", "", false},
		{"[fe80::1%eth0]", "", false},
		{"::1", "", false},
		{"a b", "", false},
		{"a_b", "", false},
		{"a..b", "", false},
		{".a", "", false},
		{"a..", "", false},
		{".", "", false},
		{"evil.example/x", "", false},
		{"user@host", "", false},
	} {
		got, ok := ParseHost(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseHost(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestIsLoopbackHost_C2(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:9001", true},
		{"[::1]", true},
		{"[::1]:9001", true},
		{"[0:0:0:0:0:0:0:1]:1", true},
		{"localhost", true},
		{"LocalHost:65535", true},
		// Nothing else.
		{"127.0.0.2", false},
		{"127.1", false},
		{"127.000.0.1", false},
		{"localhost.", false},
		{"localhost.:9001", false},
		{"127.0.0.1.", false},
		{"127.0.0.1.evil.example", false},
		{"localhost.evil.example", false},
		{"[::ffff:127.0.0.1]", false},
		{"[127.0.0.1]", false},
		{"[::1%25lo]", false},
		{"::1", false},
		{"127.0.0.1:", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:9001,evil.example", false},
		{"localhost:x", false},
		{"", false},
		{"0.0.0.0", false},
		{"[::]", false},
		{"10.0.0.1", false},
	} {
		if got := IsLoopbackHost(tc.host); got != tc.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

// FuzzParseHost_S10: whatever Host a caller sends, ParseHost returns "" or one clean host — a name
// of [a-z0-9.-] or an IP literal — so that nothing riding after it ("host:1,evil.example") can ever
// be admitted and then forwarded as X-Forwarded-Host; and IsLoopbackHost says yes only to one of
// C2's three names.
func FuzzParseHost_S10(f *testing.F) {
	for _, s := range []string{
		"localhost", "127.0.0.1:7420", "[::1]:7420", "sup.tail1234.ts.net", "SUP.TAIL1234.TS.NET.",
		"sup.tail1234.ts.net:1,evil.example", "[::1]:80:80", "[localhost]", "127.0.0.1:99999", "a b",
		"[fe80::1%25eth0]:80", "100.101.102.1", ":80", "host:", "[::ffff:127.0.0.1]:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got, ok := ParseHost(host)
		if ok != (got != "") {
			t.Fatalf("ParseHost(%q) = %q, %v", host, got, ok)
		}
		if IsLoopbackHost(host) && got != "localhost" && got != "127.0.0.1" {
			if ip, err := netip.ParseAddr(got); err != nil || ip != netip.IPv6Loopback() {
				t.Fatalf("IsLoopbackHost(%q) is true for %q", host, got)
			}
		}
		if got == "" {
			return
		}
		if ip, err := netip.ParseAddr(got); err == nil {
			if ip.Zone() != "" {
				t.Fatalf("ParseHost(%q) = %q keeps a zone", host, got)
			}
			return
		}
		for i := 0; i < len(got); i++ {
			c := got[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
				t.Fatalf("ParseHost(%q) = %q has %q", host, got, c)
			}
		}
		if strings.HasSuffix(got, ".") {
			t.Fatalf("ParseHost(%q) = %q keeps a trailing dot", host, got)
		}
		if !strings.Contains(strings.ToLower(host), got) {
			t.Fatalf("ParseHost(%q) = %q is not part of the Host", host, got)
		}
	})
}
