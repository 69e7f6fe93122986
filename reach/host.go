package reach

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/phase-console/fleet/proxy"
)

// admitHost is the door's Host admission (SPEC R5): the Host must name the listen address, with
// its port or without, and a client that sent SNI must have sent that same address. Anything
// else — another address, a name, an IPv4-mapped or zoned spelling, another port — is 421 host:
// the door answers for one address only, so a page that rebinds a name to it gets nothing.
func (d *Door) admitHost(r *http.Request) *proxy.Refusal {
	want := d.listen
	host := r.Host
	if host == d.hostText && (r.TLS == nil || r.TLS.ServerName == "" || r.TLS.ServerName == d.sniText) {
		// As every request of a device that dials the door's URL spells it: what the parse below
		// would admit, without it (asked twice a request: admitFast, then proxy.Door).
		return nil
	}
	var got netip.Addr
	if ap, err := netip.ParseAddrPort(host); err == nil {
		if ap.Port() != want.Port() {
			return refuseHost()
		}
		got = ap.Addr()
	} else {
		inner, bracketed := strings.CutPrefix(host, "[")
		if bracketed {
			if inner, bracketed = strings.CutSuffix(inner, "]"); !bracketed {
				return refuseHost()
			}
		}
		a, err := netip.ParseAddr(inner)
		if err != nil || a.Is6() != bracketed {
			return refuseHost() // a name, or an address not written as a Host writes it
		}
		got = a
	}
	if got != want.Addr() {
		return refuseHost()
	}
	if r.TLS != nil && r.TLS.ServerName != "" {
		// A client dialling an IP sends no SNI (RFC 6066); one that sends some must mean this Host.
		if sni, err := netip.ParseAddr(r.TLS.ServerName); err != nil || sni != got {
			return proxy.Refuse(http.StatusMisdirectedRequest, "host", "the TLS server name is not the Host")
		}
	}
	return nil
}

func refuseHost() *proxy.Refusal {
	return proxy.Refuse(http.StatusMisdirectedRequest, "host", "this door answers only for its own address")
}
