package reach

// deviceCookie and withoutDeviceCookie are on every request of a paired device (P2): each is held
// to what it replaced, net/http's own reading of the Cookie lines and the plain split and join.

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/phase-console/fleet/pairing"
)

// cookiesNamed is what authenticate made of r before deviceCookie: net/http's cookies of the
// device cookie's name, the last one's value and how many.
func cookiesNamed(r *http.Request) (cred string, n int) {
	for _, c := range r.Cookies() {
		if c.Name == pairing.CookieName {
			cred, n = c.Value, n+1
		}
	}
	return cred, n
}

const cred43 = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

var cookieLines = [][]string{
	nil,
	{""},
	{pairing.CookieName + "=" + cred43},
	{" " + pairing.CookieName + " = " + cred43 + " "},
	{"\t" + pairing.CookieName + "=\"" + cred43 + "\""},
	{pairing.CookieName + "=\"" + cred43},
	{pairing.CookieName + "=" + cred43 + "\\"},
	{pairing.CookieName + "=a b"},
	{pairing.CookieName + "=\x7f"},
	{pairing.CookieName},
	{pairing.CookieName + "="},
	{"theme=dark; " + pairing.CookieName + "=" + cred43 + "; lang=en"},
	{pairing.CookieName + "=one", pairing.CookieName + "=two"},
	{pairing.CookieName + "=one;" + pairing.CookieName + "=two"},
	{";;; " + pairing.CookieName + "=" + cred43 + " ;;"},
	{"__host-fleet-device=" + cred43},
	{pairing.CookieName + "x=" + cred43},
	{strings.Repeat("a=1;", 70) + pairing.CookieName + "=" + cred43},
	{strings.Repeat("a=1;", 40), strings.Repeat("b=2;", 40) + pairing.CookieName + "=" + cred43},
}

// TestDeviceCookieAsNetHTTP_R9_R10: the device's credential and whether it was sent (R10: once
// or more than once) are read as net/http reads them, for each shape of Cookie line.
func TestDeviceCookieAsNetHTTP_R9_R10(t *testing.T) {
	for _, lines := range cookieLines {
		r := &http.Request{Header: http.Header{}}
		for _, l := range lines {
			r.Header.Add("Cookie", l)
		}
		gotCred, gotN := deviceCookie(r)
		wantCred, wantN := cookiesNamed(r)
		if gotCred != wantCred || gotN != wantN {
			t.Errorf("Cookie %q: deviceCookie = %q, %d; net/http reads %q, %d", lines, gotCred, gotN, wantCred, wantN)
		}
		for _, l := range lines {
			if got, want := withoutDeviceCookie(l), splitWithoutDeviceCookie(l); got != want {
				t.Errorf("withoutDeviceCookie(%q) = %q, want %q", l, got, want)
			}
		}
	}
}

func FuzzDeviceCookie(f *testing.F) {
	for _, lines := range cookieLines {
		if len(lines) > 0 {
			f.Add(lines[0], strings.Join(lines[1:], ""))
		}
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		r := &http.Request{Header: http.Header{"Cookie": {a, b}}}
		gotCred, gotN := deviceCookie(r)
		wantCred, wantN := cookiesNamed(r)
		if gotCred != wantCred || gotN != wantN {
			t.Fatalf("Cookie %q %q: deviceCookie = %q, %d; net/http reads %q, %d", a, b, gotCred, gotN, wantCred, wantN)
		}
		if got, want := withoutDeviceCookie(a), splitWithoutDeviceCookie(a); got != want {
			t.Fatalf("withoutDeviceCookie(%q) = %q, want %q", a, got, want)
		}
	})
}

// TestPeerKeptByConnection_R9: the peer a device's requests are asserted from (X-Forwarded-For)
// and seen from (last seen) is parsed once for its connection, and is exactly PeerAddr of
// r.RemoteAddr, which net/http sets from the same socket: an IPv4 peer however the socket holds
// it, an IPv6 one with its zone.
func TestPeerKeptByConnection_R9(t *testing.T) {
	table := newConnTable(nil, nil, nil)
	for _, remote := range []*net.TCPAddr{
		{IP: net.IPv4(192, 0, 2, 7).To4(), Port: 1},
		{IP: net.IPv4(192, 0, 2, 7), Port: 2}, // the 16-byte form an IPv6 socket gives
		{IP: net.ParseIP("2001:db8::7"), Port: 3},
		{IP: net.ParseIP("fe80::1"), Port: 4, Zone: "eth0"},
	} {
		c, _, _ := table.admit(&peerConn{remote: remote})
		if c == nil {
			t.Fatalf("%v: not admitted", remote)
		}
		r := (&http.Request{RemoteAddr: remote.String()}).WithContext(table.connContext(t.Context(), c))
		want := PeerAddr(&http.Request{RemoteAddr: remote.String()})
		if got := peerAddr(r); got != want || !got.IsValid() {
			t.Errorf("%v: peerAddr = %v, want %v", remote, got, want)
		}
		if got := peerText(r); got != want.String() {
			t.Errorf("%v: peerText = %q, want %q", remote, got, want.String())
		}
		table.forget(c)
	}
	// A request on no connection of the door's is parsed as it comes.
	r := &http.Request{RemoteAddr: "198.51.100.1:5"}
	if got := peerAddr(r); got != netip.MustParseAddr("198.51.100.1") {
		t.Errorf("without a connection: %v", got)
	}
}
