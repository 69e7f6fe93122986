package supervisor

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/proxy"
)

// This file is the loopback door's Host admission (SPEC S10). How a Host header is read is the
// contract's (contract.ParseHost); which names are this machine's is the door's own.

// admitHost is S10: Host must be a loopback name, or this machine's Tailscale name or address.
func (s *Server) admitHost(r *http.Request) *proxy.Refusal {
	host, ok := contract.ParseHost(r.Host)
	if !ok {
		return proxy.Refuse(http.StatusMisdirectedRequest, "host", "the request names no host")
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() && ip.Zone() == "" {
		return nil
	}
	st, ref := s.verifier.tailscaleStatus(r.Context())
	if ref != nil {
		return ref
	}
	if st.Self != nil {
		fqdn := strings.ToLower(strings.TrimSuffix(st.Self.DNSName, "."))
		short, _, _ := strings.Cut(fqdn, ".")
		if fqdn != "" && (host == fqdn || host == short) {
			return nil
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		for _, mine := range st.TailscaleIPs {
			if mine == ip.Unmap() {
				return nil
			}
		}
	}
	return proxy.Refuse(http.StatusMisdirectedRequest, "host", "this door answers only to loopback names and this machine's Tailscale name")
}
