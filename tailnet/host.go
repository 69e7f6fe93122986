package tailnet

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/proxy"
)

// This file is Host admission for a door that Serve publishes (SPEC S10). How a Host header is
// read is the contract's (contract.ParseHost); which names are this machine's, tailscaled's
// status says.

// AdmitHost is S10: it admits r when its Host is a loopback name ("localhost", a loopback
// address), which is answered without asking tailscaled, or this machine's Tailscale name (its
// MagicDNS name, in full or its first label) or address, from tailscaled's status (cached).
// Anything else is 421 host; a status that cannot be read refuses (401 unverified), never
// admits. It makes a Verifier a proxy.HostAdmitter.
func (v *Verifier) AdmitHost(r *http.Request) *proxy.Refusal {
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
	st, ref := v.tailscaleStatus(r.Context())
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
