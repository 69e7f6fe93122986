package tailnet

import (
	"strings"
	"testing"
)

// FuzzPeerOriginHost_G2: an Origin that PeerOriginHost takes is exactly "https://" and a
// lower-case DNS name in any ASCII case — nothing else in it (no port, path, userinfo, trailing
// dot, space or non-ASCII byte) — and the host it returns is that name.
func FuzzPeerOriginHost_G2(f *testing.F) {
	for _, s := range []string{
		"https://box.tail-scale.ts.net",
		"HTTPS://Box.Tail-Scale.TS.NET",
		"https://box.tail-scale.ts.net:443",
		"https://box.tail-scale.ts.net.",
		"https://box.tail-scale.ts.net/",
		"https://user@box.tail-scale.ts.net",
		"http://box.tail-scale.ts.net",
		"https://box.tail-scale.ts.net.evil.example",
		"https://",
		"null",
		"httpſ://box.tail-scale.ts.net",
		"https://bo\u212ax.tail-scale.ts.net",
		"https://-box.ts.net",
		"https://box..ts.net",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, origin string) {
		host, ok := PeerOriginHost(origin)
		if !ok {
			if host != "" {
				t.Fatalf("%q refused but named host %q", origin, host)
			}
			return
		}
		if !strings.EqualFold(origin, "https://"+host) || len(origin) != len("https://")+len(host) {
			t.Fatalf("%q taken as host %q", origin, host)
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
				t.Fatalf("%q: host %q holds %q", origin, host, c)
			}
		}
		if strings.HasSuffix(host, ".") || strings.HasPrefix(host, ".") || strings.Contains(host, "..") {
			t.Fatalf("%q: host %q is not a name", origin, host)
		}
	})
}
