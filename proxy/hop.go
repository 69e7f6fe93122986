package proxy

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
)

// A Target is where one judged, verified request goes and what the hop asserts about it.
type Target struct {
	ConsoleID string // the judged <id>
	Addr      string // the console's loopback address, "127.0.0.1:9001"
	Path      string // the judged path (Route.Path), forwarded exactly
	Login     string // the verified login to assert
	Token     string // the fleet token to assert
	ClientIP  string // the verified caller address, for X-Forwarded-For
	Host      string // the Host the caller used, for X-Forwarded-Host
	Proto     string // "http" or "https", for X-Forwarded-Proto
}

// A Hop forwards judged requests to consoles. It is safe for concurrent use.
type Hop struct {
	rp     *httputil.ReverseProxy
	log    *slog.Logger
	onDown func(consoleID string)
}

type targetKey struct{}

// A DialFunc opens the connection to a console. The supervisor's checks that the console's socket
// belongs to its own user before the fleet token is sent over it (peercred.DialOwn).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// NewHop returns a Hop. log receives one line per failed forward (never a secret); onDown, if not
// nil, is told the console id of each forward that found no console answering; dial, if not nil,
// opens connections to consoles (default: a plain dialer).
func NewHop(log *slog.Logger, onDown func(consoleID string), dial DialFunc) *Hop {
	h := &Hop{log: log, onDown: onDown}
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	transport := &http.Transport{
		Proxy:                 nil, // never an environment proxy: the console is on loopback
		DialContext:           dial,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // consoles may stream (SSE) or think long; the caller's idle timeouts bound it
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:       h.rewrite,
		Transport:     transport,
		FlushInterval: -1, // flush every write: SSE and other streams arrive as they are sent (S9)
		ErrorHandler:  h.consoleDown,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return h
}

// Forward sends r to t. The caller has already judged r (CheckNoAssertion, JudgePath, CheckUpgrade,
// CheckOrigin) and verified who is calling; Forward refuses (and never forwards) a Target without
// a token, a login or an address.
func (h *Hop) Forward(w http.ResponseWriter, r *http.Request, t *Target) {
	if t.Token == "" || t.Login == "" || t.Addr == "" || t.Path == "" || t.Path[0] != '/' || t.ClientIP == "" {
		WriteRefusal(w, r, h.log, Refuse(http.StatusInternalServerError, "internal", "the hop was not given what it asserts"))
		return
	}
	h.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// rewrite is the whole hop, as pure steps on the outgoing request. httputil.ReverseProxy has
// already removed hop-by-hop headers (and those named in Connection) and X-Forwarded-* from Out.
func (h *Hop) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(*Target)
	out := pr.Out

	// The path forwarded is exactly the path judged (S7); the query passes as sent.
	out.URL.Scheme = "http"
	out.URL.Host = t.Addr
	out.URL.Path = t.Path
	out.URL.RawPath = ""
	out.URL.RawQuery = pr.In.URL.RawQuery
	out.Host = t.Addr // S6: the console sees its own loopback address

	ScrubIdentity(out.Header) // S4
	out.Trailer = nil         // S3: request trailers are never forwarded

	out.Header.Set("X-Forwarded-For", t.ClientIP)
	out.Header.Set("X-Forwarded-Host", t.Host)
	out.Header.Set("X-Forwarded-Proto", t.Proto)
	out.Header.Set("X-Forwarded-Prefix", "/c/"+t.ConsoleID)
	out.Header.Set(HeaderFleet, t.Token)
	out.Header.Set(HeaderFleetLogin, t.Login)
}

func (h *Hop) consoleDown(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(*Target)
	id := ""
	if t != nil {
		id = t.ConsoleID
	}
	if errors.Is(err, context.Canceled) {
		// The caller went away; nobody to answer.
		w.WriteHeader(499)
		return
	}
	if errors.Is(err, peercred.ErrOtherUser) {
		// Someone else's process holds the console's port: nothing was sent to it.
		WriteRefusal(w, r, h.log, Refuse(http.StatusBadGateway, "console-other-user",
			"the process on this console's port is run by another user; fleet sends it nothing"), "console", id)
		return
	}
	if h.onDown != nil && id != "" {
		h.onDown(id)
	}
	h.log.Warn("fleet.console-down", "console", id, "method", r.Method, "path", LogPath(r), "peer", r.RemoteAddr, "error", err.Error())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Fleet-Reason", "console-down")
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(w, "<!doctype html><title>502 console down</title><h1>Console %s is not answering</h1>"+
		"<p>fleet could not reach it on this machine. Start it again; the other consoles are unaffected.</p>\n",
		html.EscapeString(id))
}
