// Package refconsole is the reference console (`fleet console`): the smallest console that uses
// package console for everything it believes, so that every C rule of the spec is observable over
// HTTP and `fleet check-console` can be run against it.
//
// Endpoints (all behind console.Verifier.Middleware, so a foreign Host is 421 on every request —
// "host" without an assertion, "fleet-not-loopback" with one):
//
//	GET  /                           page: the caller's scope and login, an SSE counter, a WebSocket echo
//	GET  /app.js                     the page's script (no inline script: CSP script-src 'self')
//	GET  /whoami                     {"scope":"local"|"remote","login":"…"}; local callers have login ""
//	POST /presence                   C5: local only (403 local-only)      → {"presence":"ok"}
//	POST /runs                       local only: starts a run            → 201 {"id":"…","token":"…"}
//	DELETE /runs/{id}                local only: ends it; its token is dead at once → 204 (404 unknown)
//	POST /hooks/permission-request   C6: loopback, not proxied, run bearer → {"run":"…","decision":"ask"}
//	GET|POST /settings/reach         C7: a device login may not POST     → {"mode":"off"|"direct"}
//	GET  /events                     text/event-stream: "event: tick", data {"n":1}, {"n":2}, … every Tick
//	GET  /ws                         WebSocket echo
//
// The reach setting here is a value in memory: the reference console only shows that C7 is
// enforced; it opens no door (only the machine profile does, SPEC R1).
package refconsole

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/phase-console/fleet/console"
)

// Config configures a reference console.
type Config struct {
	ID       string            // the console id (as registered with the supervisor)
	Name     string            // shown on the page; "" means ID
	Verifier *console.Verifier // required
	Tick     time.Duration     // SSE interval; 0 means one second
	Logger   *slog.Logger      // nil: JSON on stderr
}

// A Console is the reference console's http.Handler.
type Console struct {
	cfg     Config
	runs    console.Runs
	handler http.Handler
	log     *slog.Logger

	mu    sync.Mutex
	reach string
}

// New returns the reference console. Every request goes through cfg.Verifier's Middleware.
func New(cfg Config) *Console {
	if cfg.Name == "" {
		cfg.Name = cfg.ID
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	c := &Console{cfg: cfg, reach: "off", log: cfg.Logger}
	if c.log == nil {
		c.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	v := cfg.Verifier
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.page)
	mux.HandleFunc("GET /app.js", c.script)
	mux.HandleFunc("GET /whoami", c.whoami)
	mux.Handle("POST /presence", v.LocalOnly(http.HandlerFunc(c.presence)))
	mux.Handle("POST /runs", v.LocalOnly(http.HandlerFunc(c.startRun)))
	mux.Handle("DELETE /runs/{id}", v.LocalOnly(http.HandlerFunc(c.endRun)))
	mux.Handle("POST /hooks/permission-request", v.PermissionHook(&c.runs, http.HandlerFunc(c.hook)))
	mux.Handle("GET /settings/reach", v.ReachSettings(http.HandlerFunc(c.getReach)))
	mux.Handle("POST /settings/reach", v.ReachSettings(http.HandlerFunc(c.setReach)))
	mux.HandleFunc("GET /events", c.events)
	mux.HandleFunc("GET /ws", c.ws)
	c.handler = v.Middleware(mux)
	return c
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func caller(r *http.Request) console.Caller {
	c, _ := console.CallerFrom(r.Context())
	return c
}

func (c *Console) whoami(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, caller(r))
}

func (c *Console) presence(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"presence": "ok"})
}

func (c *Console) startRun(w http.ResponseWriter, r *http.Request) {
	id, tok, err := c.runs.Start()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "runs"})
		return
	}
	c.log.Info("console.run-started", "run", id)
	writeJSON(w, http.StatusCreated, map[string]string{"id": id, "token": tok})
}

func (c *Console) endRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !c.runs.End(id) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown-run"})
		return
	}
	c.log.Info("console.run-ended", "run", id)
	w.WriteHeader(http.StatusNoContent)
}

func (c *Console) hook(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	id, _ := console.RunFrom(r.Context())
	writeJSON(w, http.StatusOK, map[string]string{"run": id, "decision": "ask"})
}

func (c *Console) getReach(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	mode := c.reach
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"mode": mode})
}

func (c *Console) setReach(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Mode string `json:"mode"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad-json"})
		return
	}
	if body.Mode == "" {
		body.Mode = "off"
	}
	if body.Mode != "off" && body.Mode != "direct" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "mode must be off or direct"})
		return
	}
	c.mu.Lock()
	c.reach = body.Mode
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"mode": body.Mode})
}

// events streams a tick with a counter every cfg.Tick until the client goes away.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 3000\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	tick := time.NewTicker(c.cfg.Tick)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		if _, err := fmt.Fprintf(w, "event: tick\ndata: {\"n\":%d}\n\n", n); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// ws echoes every message back. The Origin was judged before this handler runs: by Middleware
// for a local caller (same origin only), by the supervisor (S12) for an asserted one — whose Origin
// is the tailnet name, never this loopback Host — so the library's own Origin check is off.
func (c *Console) ws(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 10)
	ctx := r.Context()
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if err := conn.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Name}} — fleet reference console</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body>
<h1>{{.Name}}</h1>
<p>Console <code>{{.ID}}</code>. You are <strong id="scope">{{.Scope}}</strong>{{if .Login}} as <strong id="login">{{.Login}}</strong>{{end}}.</p>
<p>Server-sent events: <output id="tick">waiting…</output></p>
<p>WebSocket echo: <input id="msg" value="hello"> <button id="send">send</button> <output id="echo"></output></p>
<script src="app.js"></script>
</body></html>
`))

// The script uses URLs relative to the page, so it works at / and behind the supervisor at /c/<id>/.
const appJS = `"use strict";
const tick = document.getElementById("tick");
const es = new EventSource("events");
es.addEventListener("tick", (e) => { tick.textContent = JSON.parse(e.data).n; });
const echo = document.getElementById("echo");
const u = new URL("ws", location.href);
u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
const sock = new WebSocket(u);
sock.onmessage = (e) => { echo.textContent = e.data; };
document.getElementById("send").onclick = () => sock.send(document.getElementById("msg").value);
`

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	who := caller(r)
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	pageTmpl.Execute(w, map[string]string{"ID": c.cfg.ID, "Name": c.cfg.Name, "Scope": string(who.Scope), "Login": who.Login})
}

func (c *Console) script(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	io.WriteString(w, appJS)
}
