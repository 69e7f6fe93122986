package supervisor

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/tailnet"
)

// This file plugs the loopback door's own rules into the judgement that every door shares
// (proxy.Door): Host admission (S10) and who is calling (S5), both package tailnet's, the
// registry (S8), and the door's own pages (the API and the index). The order of the checks, and
// every rule of the hop, are package proxy's.

func (s *Server) newDoor() *proxy.Door {
	return &proxy.Door{
		Hop:       s.hop,
		Log:       s.log,
		Host:      s.tailnet,
		Callers:   tailnetCallers{s},
		Consoles:  registryConsoles{s.registry},
		Token:     s.token,
		FromServe: true, // published by Tailscale Serve (S2)
		Pages:     http.HandlerFunc(s.servePage),
		Audit:     s.auditRecorder(),
		Name:      audit.DoorLoopback, // the TCP and the unix-socket door alike (G3)
		Now:       s.cfg.Now,
		// G2: another machine of the caller's own may read the index's JSON (package tailnet).
		PeerOrigins: s.tailnet,
	}
}

// servePage is every request that is not for a console, after the checks every request passes.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	rawPath, _, _ := strings.Cut(r.RequestURI, "?")
	switch {
	case rawPath == OwnerRevokePath || rawPath == OwnerPairPath:
		s.serveOwner(w, r, rawPath) // U4: the owner's, through Serve; the rest of /fleet/ as below
	case strings.HasPrefix(rawPath, "/fleet/"):
		s.serveAPI(w, r, rawPath)
	case rawPath == "/":
		s.serveIndex(w, r)
	case rawPath == peersScriptPath:
		s.servePeersScript(w, r)
	case rawPath == look.StylePath:
		s.serveStyle(w, r)
	default:
		proxy.WriteRefusal(w, r, s.log, proxy.Refuse(http.StatusNotFound, "not-found", "no such page"))
	}
}

// tailnetCallers is S5 (package tailnet) as the door's caller verification; a caller on this
// machine is told where to go instead.
type tailnetCallers struct{ s *Server }

func (c tailnetCallers) VerifyCaller(r *http.Request, consoleID string) (proxy.Caller, *proxy.Refusal) {
	who, ref := c.s.tailnet.VerifyCaller(r, consoleID)
	if ref != nil {
		return who, c.s.hintLocalCaller(r, ref, consoleID) // who: only for a not-granted (G3)
	}
	return who, nil
}

// registryConsoles is the registry as the door's console lookup.
type registryConsoles struct{ r *Registry }

func (c registryConsoles) Lookup(id string) (string, bool) {
	con, ok := c.r.Get(id)
	return con.Addr, ok
}

// hintLocalCaller adds to a refusal of a caller on this machine (not tailscaled) where to go
// instead: the console's own loopback address, which this machine's user can open directly.
func (s *Server) hintLocalCaller(r *http.Request, ref *proxy.Refusal, consoleID string) *proxy.Refusal {
	if !tailnet.LocalCaller(r) {
		return ref
	}
	hint := "On this machine, open a console directly at its own address: 'fleet consoles' lists them."
	if c, ok := s.registry.Get(consoleID); ok {
		hint = fmt.Sprintf("On this machine, open the console directly: http://%s/", c.Addr)
	}
	hinted := *ref
	hinted.Detail = ref.Detail + ". " + hint
	return &hinted
}

// throughServe reports whether a request looks like it came through Tailscale Serve: it carries
// X-Forwarded-For or any Tailscale-* header (SPEC S8).
func throughServe(r *http.Request) bool {
	for name := range r.Header {
		f := contract.FoldName(name)
		if strings.HasPrefix(f, "tailscale-") || strings.HasPrefix(f, "x-forwarded-") || f == "forwarded" || f == "x-real-ip" {
			return true
		}
	}
	return false
}
