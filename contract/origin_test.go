package contract

import (
	"strings"
	"testing"
)

// TestSameOrigin_S12 has the rows on which the console's and the proxy's former checks
// disagreed ("was console", "was proxy"): the RFC 6454 decision settles each.
func TestSameOrigin_S12(t *testing.T) {
	const ts = "sup.tail1234.ts.net"
	for _, tc := range []struct {
		name, origin, scheme, host string
		want                       bool
	}{
		{"own https origin", "https://" + ts, "https", ts, true},
		{"own origin, upper case", "HTTPS://SUP.TAIL1234.TS.NET", "https", ts, true},
		{"own http origin with port", "http://127.0.0.1:9001", "http", "127.0.0.1:9001", true},
		{"IPv6 literal", "http://[::1]:9001", "http", "[::1]:9001", true},
		{"scheme given upper case", "https://" + ts, "HTTPS", ts, true},
		// Default ports are the same as none, on either side (was console; the proxy refused).
		{"was proxy: :443 in Origin", "https://" + ts + ":443", "https", ts, true},
		{"was proxy: :443 in Host", "https://" + ts, "https", ts + ":443", true},
		{"was proxy: :80 in Origin", "http://localhost:80", "http", "localhost", true},
		{"http's default port is not https's", "https://" + ts + ":80", "https", ts, false},
		{"https's default port is not http's", "http://localhost:443", "http", "localhost", false},
		{"another port", "http://127.0.0.1:9002", "http", "127.0.0.1:9001", false},
		{"no port for a request with one", "http://127.0.0.1", "http", "127.0.0.1:9001", false},
		// No path, not even "/" (was console: "/" was accepted).
		{"was console: path /", "http://127.0.0.1:9001/", "http", "127.0.0.1:9001", false},
		{"path", "https://" + ts + "/c/alpha/", "https", ts, false},
		{"dot-dot path", "https://" + ts + "/..", "https", ts, false},
		{"query", "http://127.0.0.1:9001?x", "http", "127.0.0.1:9001", false},
		{"fragment", "https://" + ts + "#x", "https", ts, false},
		{"userinfo", "https://user@" + ts, "https", ts, false},
		{"userinfo hiding a host", "https://" + ts + "@evil.example", "https", ts, false},
		{"null", "null", "https", ts, false},
		{"NULL", "NULL", "https", ts, false},
		{"empty", "", "https", ts, false},
		{"other scheme", "http://" + ts, "https", ts, false},
		{"wss", "wss://" + ts, "https", ts, false},
		{"other host", "https://evil.example", "https", ts, false},
		{"suffix host", "https://" + ts + ".evil.example", "https", ts, false},
		{"prefix host", "https://evil." + ts, "https", ts, false},
		{"trailing dot", "https://" + ts + ".", "https", ts, false},
		{"empty port", "https://" + ts + ":", "https", ts, false},
		{"bad port", "https://" + ts + ":x", "https", ts, false},
		{"no host", "https://", "https", ts, false},
		{"no slashes", "https:" + ts, "https", ts, false},
		{"one slash", "https:/" + ts, "https", ts, false},
		{"scheme-relative", "//" + ts, "https", ts, false},
		{"bare host", ts, "https", ts, false},
		{"two origins in one", "https://" + ts + ", https://evil.example", "https", ts, false},
		{"NUL", "https://" + ts + "\x00", "https", ts, false},
		{"backslash", "https://" + ts + "\\x", "https", ts, false},
		{"mapped IPv4 is another host", "http://[::ffff:127.0.0.1]:9001", "http", "127.0.0.1:9001", false},
		{"two ports", "https://x:443:443", "https", "x:443:443", false},
		{"unbracketed IPv6", "http://::1", "http", "::1", false},
		{"empty brackets", "http://[]:80", "http", "[]", false},
		{"bracket junk", "http://[::1]x]:80", "http", "[::1]x]", false},
		{"localhost is not 127.0.0.1", "http://localhost:9001", "http", "127.0.0.1:9001", false},
	} {
		if got := SameOrigin(tc.origin, tc.scheme, tc.host); got != tc.want {
			t.Errorf("%s: SameOrigin(%q, %q, %q) = %v, want %v", tc.name, tc.origin, tc.scheme, tc.host, got, tc.want)
		}
	}
}

// FuzzSameOrigin_S12: whatever the Origin, SameOrigin says yes only to scheme "://" host, with
// nothing else in it but a different spelling of case or of the default port.
func FuzzSameOrigin_S12(f *testing.F) {
	for _, o := range []string{"https://sup.tail1234.ts.net", "https://sup.tail1234.ts.net:443", "https://sup.tail1234.ts.net/", "null", "https://a@sup.tail1234.ts.net"} {
		f.Add(o, "sup.tail1234.ts.net")
	}
	f.Fuzz(func(t *testing.T, origin, host string) {
		if !SameOrigin(origin, "https", host) {
			return
		}
		rest := origin[len("https://"):]
		if strings.ContainsAny(rest, "/?#@\\ ") {
			t.Fatalf("SameOrigin(%q, https, %q): an origin with more than scheme://host[:port]", origin, host)
		}
		norm := func(s string) string { return strings.ToLower(strings.TrimSuffix(s, ":443")) }
		if !strings.EqualFold(origin[:len("https://")], "https://") || norm(rest) != norm(host) {
			t.Fatalf("SameOrigin(%q, https, %q) is true", origin, host)
		}
	})
}
