package proxy

import (
	"net/netip"
	"strings"
	"testing"
)

// plainValueByBytes is plainValue's rule, one byte at a time.
func plainValueByBytes(v string) bool {
	if v != "" && (v[0] == ' ' || v[len(v)-1] == ' ') {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] == 0x7f {
			return false
		}
	}
	return true
}

// TestPlainValue_S6: the values the hop may assert, and those it refuses, at every position of
// an eight-byte word.
func TestPlainValue_S6(t *testing.T) {
	ok := []string{"", "a", "alice@example.com", "Bob O'Neil <bob@exämple.com>", "100.64.0.7",
		"sup.tail-scale.ts.net:443", strings.Repeat("x", 43), "a b", "\x80\xff~!"}
	for _, v := range ok {
		if !plainValue(v) {
			t.Errorf("plainValue(%q) = false, want true", v)
		}
	}
	for _, bad := range []byte{0, '\t', '\n', '\r', 0x1b, 0x1f, 0x7f} {
		for n := 1; n <= 17; n++ {
			for at := 0; at < n; at++ {
				b := []byte(strings.Repeat("a", n))
				b[at] = bad
				if plainValue(string(b)) {
					t.Errorf("plainValue(%q) = true, want false", b)
				}
			}
		}
	}
	for _, v := range []string{" a", "a ", " ", strings.Repeat("a", 16) + " "} {
		if plainValue(v) {
			t.Errorf("plainValue(%q) = true, want false", v)
		}
	}
}

// FuzzPlainValue holds plainValue's eight-bytes-at-a-time test to the byte-by-byte rule.
func FuzzPlainValue(f *testing.F) {
	for _, s := range []string{"", "alice@example.com", "abcdefgh\x7f", "abcdefg\x1f", "\x80\x9f\xa0\xff\x7e\x20\x21\x00",
		"ZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWU", "a\tb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := plainValue(v), plainValueByBytes(v); got != want {
			t.Fatalf("plainValue(%q) = %v, the rule says %v", v, got, want)
		}
	})
}

// visibleTargetByBytes is visibleTarget's rule, one byte at a time.
func visibleTargetByBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// TestVisibleTarget_S7: the request-targets the Door lets on to its path judgement, and those it
// refuses 400 bad-path whatever the path (a space, a control byte or DEL, in the path or the
// query), at every position of an eight-byte word.
func TestVisibleTarget_S7(t *testing.T) {
	for _, s := range []string{"", "/", "*", "/c/a/", "/c/alpha/x?a=1&b=%20", "/c/a/\x80\xff~!?\xc3\xa4", strings.Repeat("x", 43)} {
		if !visibleTarget(s) {
			t.Errorf("visibleTarget(%q) = false, want true", s)
		}
	}
	for _, bad := range []byte{0, '\t', '\n', '\r', 0x1b, 0x1f, ' ', 0x7f} {
		for n := 1; n <= 17; n++ {
			for at := 0; at < n; at++ {
				b := []byte(strings.Repeat("a", n))
				b[at] = bad
				if visibleTarget(string(b)) {
					t.Errorf("visibleTarget(%q) = true, want false", b)
				}
			}
		}
	}
}

// FuzzVisibleTarget holds visibleTarget's eight-bytes-at-a-time test to the byte-by-byte rule.
func FuzzVisibleTarget(f *testing.F) {
	for _, s := range []string{"", "/c/alpha/x?a /hooks", "abcdefgh\x7f", "abcdefg\x20", "\x80\x9f\xa0\xff\x7e\x21\x20\x00",
		"/c/alpha/x?q=%20", "a\tb", "\x21\x21\x21\x21\x21\x21\x21\x21\x20"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := visibleTarget(s), visibleTargetByBytes(s); got != want {
			t.Fatalf("visibleTarget(%q) = %v, the rule says %v", s, got, want)
		}
	})
}

// TestAddrTextIsString_S6: X-Forwarded-For carries the verified address as netip writes it,
// whichever address had its slot before (addrText keeps one a slot).
func TestAddrTextIsString_S6(t *testing.T) {
	addrs := []string{"100.64.0.7", "100.64.0.23", "192.168.1.7", "::ffff:192.168.1.7",
		"fd7a:115c:a1e0::7", "fe80::7%eth0", "fe80::7%eth1", "100.64.0.7"}
	for round := 0; round < 2; round++ {
		for _, s := range addrs {
			ip := netip.MustParseAddr(s)
			if got := addrText(ip); got != ip.String() {
				t.Fatalf("addrText(%s) = %q, want %q", s, got, ip.String())
			}
		}
	}
}
