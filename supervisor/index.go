package supervisor

import (
	"embed"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/tailnet"
)

//go:embed pages/index.html pages/owner.html pages/pair.html
var pageFiles embed.FS

// indexPage is the tailnet index, in fleet's one look (package look, SPEC U1).
var indexPage = look.Page(pageFiles, "pages/index.html", "pages/owner.html")

// serveIndex is "/" for a verified caller: the consoles it may open (SPEC G1), their health and
// links. A console it may not open is not shown, in either form. The HTML form also shows the
// caller's own recent requests (RecentActivity), never another login's.
func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	who, grant, ref := s.tailnet.VerifyViewer(r)
	if ref != nil {
		proxy.WriteRefusal(w, r, s.log, s.hintLocalCaller(r, ref, ""))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		proxy.WriteRefusal(w, r, s.log, proxy.Refuse(http.StatusMethodNotAllowed, "method", "only GET here"))
		return
	}
	consoles := slices.DeleteFunc(s.registry.List(), func(c ConsoleStatus) bool { return !grant.Allows(c.ID) })
	if _, ok := proxy.PeerOrigin(r); ok {
		s.servePeerIndex(w, r, consoles)
		return
	}
	if proxy.WantsJSON(r) {
		w.Header().Add("Vary", "Origin")
		for i := range consoles {
			consoles[i].Addr = "" // callers need the link, not the loopback port
		}
		writeJSON(w, http.StatusOK, map[string]any{"login": who.Login, "consoles": consoles})
		return
	}
	peers, why := s.peerSections(r, who.Login)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The page shows the operator's login: no other site may frame it (S12's ambient identity).
	owner, isOwner := s.ownerSection(r, who.Login) // U4: the machine's owner manages its phones here
	proxy.SetPageHeaders(h)
	if isOwner {
		h.Set("Content-Security-Policy", ownerPagePolicy) // its forms post to this door alone
	}
	if len(peers) > 0 {
		// G2: the one script is this door's own, and it may ask exactly the peers listed.
		origins := make([]string, len(peers))
		for i, p := range peers {
			origins[i] = p.Origin()
		}
		h.Set("Content-Security-Policy", h.Get("Content-Security-Policy")+"; script-src 'self'; connect-src "+strings.Join(origins, " "))
	}
	look.Render(w, indexPage, map[string]any{"Login": who.Login, "Consoles": consoles, "Recent": s.recent.Of(who.Login),
		"Peers": peers, "PeersWhy": why, "PeersScript": peersScriptPath, "Owner": owner})
}

// peerSections are the index's sections of other machines for a tailnet caller with login
// (SPEC G2): the caller's own online peers and the listed tagged ones, which the page's script
// asks itself. When tailscaled cannot list them there are none, and why says so.
func (s *Server) peerSections(r *http.Request, login string) (peers []tailnet.Peer, why string) {
	l, err := s.tailnet.Peers(r.Context())
	switch {
	case errors.Is(err, tailnet.ErrNoSuffix):
		return nil, "Your other machines are not listed: tailscaled names no MagicDNS suffix for this tailnet."
	case err != nil:
		s.log.Warn("fleet.peers-unknown", "why", err.Error())
		return nil, "Your other machines are not listed: tailscaled's list of peers could not be read."
	}
	return s.tailnet.PeerOrigins(l, login), ""
}

// peersScriptPath is the index's one script (assets/peers.js): it asks each peer section's fleet.
const peersScriptPath = "/fleet-peers.js"

//go:embed assets/peers.js
var peersScript []byte

// servePeersScript serves the index's script, the same to everyone: it holds nothing of anyone.
func (s *Server) servePeersScript(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		proxy.WriteRefusal(w, r, s.log, proxy.Refuse(http.StatusMethodNotAllowed, "method", "only GET here"))
		return
	}
	h := w.Header()
	proxy.SetPageHeaders(h)
	h.Set("Content-Type", "text/javascript; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.Write(peersScript)
}

// serveStyle serves fleet's one stylesheet (SPEC U1), the same to everyone: it holds nothing of
// anyone.
func (s *Server) serveStyle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		proxy.WriteRefusal(w, r, s.log, proxy.Refuse(http.StatusMethodNotAllowed, "method", "only GET here"))
		return
	}
	proxy.SetPageHeaders(w.Header())
	look.ServeStyle(w, r)
}

// PeerConsole is one console as the index tells another machine's page (SPEC G2): its id, name,
// health and link, nothing else.
type PeerConsole struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Health Health `json:"health"`
	Link   string `json:"link"` // https://<this machine's MagicDNS name>/c/<id>/, through its Serve
}

// PeerIndex is the index's answer to another machine's page (SPEC G2).
type PeerIndex struct {
	Consoles []PeerConsole `json:"consoles"`
}

// servePeerIndex answers the index's JSON to a page of another machine of the caller's own (the
// Door allowed its Origin: proxy.PeerOrigin): the consoles the caller may open, by id, name,
// health and a link through this machine's own Serve name; no login, no address.
func (s *Server) servePeerIndex(w http.ResponseWriter, r *http.Request, consoles []ConsoleStatus) {
	l, err := s.tailnet.Peers(r.Context())
	if err != nil || l.Self == "" {
		ref := proxy.Refuse(http.StatusUnauthorized, "unverified", "this machine's tailnet name is not known; is tailscaled running?")
		if err != nil {
			ref.LogDetail = err.Error()
		}
		proxy.WriteRefusal(w, r, s.log, ref)
		return
	}
	out := PeerIndex{Consoles: make([]PeerConsole, 0, len(consoles))}
	for _, c := range consoles {
		out.Consoles = append(out.Consoles, PeerConsole{ID: c.ID, Name: c.Name, Health: c.Health,
			Link: "https://" + l.Self + "/c/" + c.ID + "/"})
	}
	writeJSON(w, http.StatusOK, out)
}
