package supervisor

import (
	"html/template"
	"net/http"
	"slices"

	"github.com/phase-console/fleet/proxy"
)

// indexStyle is the index's one inline style sheet, allowed by its hash (proxy.SetPageHeaders).
const indexStyle = `body{font:16px system-ui,sans-serif;margin:2rem auto;max-width:40rem;padding:0 1rem}
li{margin:.5rem 0}.down{color:#a00}.up{color:#070}small,.unknown{color:#666}
table{border-collapse:collapse;font-size:14px}td,th{padding:.2rem .6rem .2rem 0;text-align:left}td.path{word-break:break-all}`

var indexPage = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>fleet</title>
<style>` + indexStyle + `</style></head>
<body><h1>fleet</h1><p>Signed in as <b>{{.Login}}</b>.</p>
{{if .Consoles}}<ul>{{range .Consoles}}<li><a href="{{.URL}}">{{if .Name}}{{.Name}}{{else}}{{.ID}}{{end}}</a>
<small>{{.ID}}</small> <span class="{{.Health}}">{{.Health}}</span></li>
{{end}}</ul>{{else}}<p>No console here that you may open.</p>{{end}}
{{with .Recent}}<h2>Your recent activity</h2>
<table><tr><th>time (UTC)</th><th>console</th><th>method</th><th>path</th><th>status</th></tr>
{{range .}}<tr><td><time datetime="{{.Time.UTC.Format "2006-01-02T15:04:05.000Z"}}">{{.Time.UTC.Format "Jan 2 15:04:05"}}</time></td><td>{{.Console}}</td><td>{{.Method}}</td><td class="path">{{.Path}}</td><td>{{.Status}}</td></tr>
{{end}}</table>{{end}}
</body></html>
`))

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
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The page shows the operator's login: no other site may frame it (S12's ambient identity).
	proxy.SetPageHeaders(h, indexStyle)
	indexPage.Execute(w, map[string]any{"Login": who.Login, "Consoles": consoles, "Recent": s.recent.Of(who.Login)})
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
