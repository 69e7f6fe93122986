package reach

import (
	"net/netip"
	"testing"
)

// FuzzParseProfile: whatever the bytes, ParseProfile never panics, an error always comes with the
// closed profile, and an accepted profile that opens the door has one literal unicast listen
// address that is not a wildcard, with a port, and — when public by the standard library's own
// classification — the matching acknowledgement (R2, R3). The seed corpus is in
// testdata/fuzz/FuzzParseProfile.
func FuzzParseProfile(f *testing.F) {
	f.Add([]byte(section("direct", "192.168.1.20:7443", "")))
	f.Add([]byte(section("direct", `"[2001:db8::5]:7443"`, "2001:db8::5")))
	f.Add([]byte(bomb))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseProfile(b)
		if err != nil {
			if p != closed {
				t.Fatalf("error %v came with %+v", err, p)
			}
			return
		}
		if p.Mode != ModeOff && p.Mode != ModeDirect {
			t.Fatalf("mode %q", p.Mode)
		}
		if p.Acknowledged != "" {
			if _, err := netip.ParseAddr(p.Acknowledged); err != nil {
				t.Fatalf("acknowledged %q is not an address", p.Acknowledged)
			}
		}
		if !p.Open() {
			return
		}
		a := p.Listen.Addr()
		switch {
		case !p.Listen.IsValid(), p.Listen.Port() == 0:
			t.Fatalf("open on %v", p.Listen)
		case a.IsUnspecified(), a.Is4In6(), a.Zone() != "", a.IsMulticast(), !a.IsGlobalUnicast() && !a.IsLoopback() && !a.IsPrivate() && !a.IsLinkLocalUnicast():
			t.Fatalf("open on a wildcard or non-unicast address %v", p.Listen)
		case a.Is6() && a.IsLinkLocalUnicast():
			t.Fatalf("open on IPv6 link-local %v", p.Listen)
		}
		// The public rule, by a second classification that does not share IsPublic's table.
		public := !a.IsLoopback() && !a.IsPrivate() && !a.IsLinkLocalUnicast() && !cgnat.Contains(a)
		if public != IsPublic(a) {
			t.Fatalf("IsPublic(%v) = %v; the standard library says %v", a, IsPublic(a), public)
		}
		if public {
			ack, err := netip.ParseAddr(p.Acknowledged)
			if err != nil || ack != a {
				t.Fatalf("open on public %v with acknowledged %q", p.Listen, p.Acknowledged)
			}
		}
	})
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")
