package reach

import (
	"context"
	"net/http"
	"path"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/proxy"
)

// This file is the door's own routes: the root certificate, fleet's stylesheet, the pairing pages,
// the redirect of an unpaired caller (R7), and a paired device's pages (R1: no settings on the
// door; its index and its way out, index.go).

// PairPath is the pairing page; an unpaired caller is sent there for everything else (R7).
const PairPath = "/pair"

// newRouter routes what the door serves itself. The router never rewrites a path (no fixed-path
// or trailing-slash redirects, no automatic OPTIONS or 405): anything it does not own goes, as
// it came, to d.notMine, where the hop judges it.
func (d *Door) newRouter() *httprouter.Router {
	rt := httprouter.New()
	rt.RedirectTrailingSlash = false
	rt.RedirectFixedPath = false
	rt.HandleMethodNotAllowed = false
	rt.HandleOPTIONS = false
	rt.NotFound = http.HandlerFunc(d.notMine)
	rt.Handler(http.MethodGet, "/ca.crt", http.HandlerFunc(d.serveRoot))
	rt.Handler(http.MethodHead, "/ca.crt", http.HandlerFunc(d.serveRoot))
	rt.Handler(http.MethodGet, look.StylePath, http.HandlerFunc(serveStyle))
	rt.Handler(http.MethodHead, look.StylePath, http.HandlerFunc(serveStyle))
	pair := d.cfg.Pairing
	if pair == nil {
		pair = http.HandlerFunc(servePairingNotSetUp)
	}
	pair = d.canonicalOnly(pair)
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		rt.Handler(m, PairPath, pair)
		rt.Handler(m, PairPath+"/*asset", pair)
	}
	post := d.recordAttempts(answerFromFirstByte(pair)) // scrypt's time is the door's, not the caller's (answer.go); each attempt recorded (O7)
	rt.Handler(http.MethodPost, PairPath, post)
	// POST /pair/forget is the device's own way out (U3, index.go). httprouter takes no route
	// beside a catch-all, so it is told from the pairing pages' POSTs here, on the path as
	// canonicalOnly passes it.
	forget := d.canonicalOnly(http.HandlerFunc(d.serveForget))
	rt.Handler(http.MethodPost, PairPath+"/*asset", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ForgetPath {
			forget.ServeHTTP(w, r)
			return
		}
		post.ServeHTTP(w, r)
	}))
	return rt
}

// canonicalOnly gives h only paths written plainly: the router matched on the decoded path, so
// "/pair/../c/x" or "/pair/%2e%2e/x" would otherwise reach the pairing pages as something else.
func (d *Door) canonicalOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawPath != "" || path.Clean(r.URL.Path) != r.URL.Path || strings.Contains(r.URL.Path, "%") {
			proxy.WriteRefusal(w, r, d.log, proxy.Refuse(http.StatusNotFound, "not-found", "no such page"), "door", "reach")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serveRoot is GET /ca.crt: the root, for a phone to install (R4, R7).
func (d *Door) serveRoot(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/x-x509-ca-cert")
	h.Set("Content-Disposition", `attachment; filename="fleet-root.crt"`)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	w.Write(d.auth.RootPEM())
}

// notMine is every request the router does not own. An unpaired caller gets only a redirect to
// the pairing page (R7); a paired device's request is judged by the shared Door.
func (d *Door) notMine(w http.ResponseWriter, r *http.Request) {
	dev, ok := deviceFrom(r)
	if forwards(r, ok) { // the one request the door does not answer itself (ServeHTTP, proxy.AnswerItself)
		stripDeviceCookie(r.Header) // R9: the credential never reaches a console
		var ctx context.Context
		var done func()
		mark := markFrom(r) // none: 0, refused if ever revoked (fail closed)
		rc := http.NewResponseController(w)
		if ctx, done, ok = d.streams.track(r.Context(), netHTTPAnswer{rc}, dev.ID6, mark); ok {
			defer done()
			r = forwarded(rc, r.WithContext(ctx)) // no deadline of the door's own answers (answer.go)
		}
	}
	if !ok {
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, PairPath, http.StatusSeeOther)
		return
	}
	d.door.ServeHTTP(w, r)
}

// servePairedPage is a paired device's request that is not for a console, after the checks every
// request passes (proxy.Door's Pages).
func (d *Door) servePairedPage(w http.ResponseWriter, r *http.Request) {
	rawPath, _, _ := strings.Cut(r.RequestURI, "?")
	switch {
	case underFleet(r):
		// R1: nothing on the door can change the door, nor anything else of fleet's.
		proxy.WriteRefusal(w, r, d.log, proxy.Refuse(http.StatusForbidden, "reach-settings",
			"fleet's settings are not reachable through the direct-reach door"), "door", "reach")
	case rawPath == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		d.serveIndex(w, r)
	default:
		proxy.WriteRefusal(w, r, d.log, proxy.Refuse(http.StatusNotFound, "not-found", "no such page"), "door", "reach")
	}
}

// underFleet reports whether r is for /fleet or anything under it (R1), judged on the decoded path
// as S7 judges a console path: "/%66leet/…" and an absolute-form "https://host/fleet/…" are under
// /fleet too, and the first segment folds case as S7's segments do (strings.EqualFold: "/FLEET/").
func underFleet(r *http.Request) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return strings.EqualFold(first, "fleet")
}

// serveStyle is fleet's one stylesheet (SPEC U1), to any caller: the pairing page's too (R7).
func serveStyle(w http.ResponseWriter, r *http.Request) {
	proxy.SetPageHeaders(w.Header())
	look.ServeStyle(w, r)
}

// servePairingNotSetUp stands in for the pairing pages when the door has none.
func servePairingNotSetUp(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	proxy.SetPageHeaders(h)
	h.Set("Cache-Control", "no-store")
	look.WriteNotSetUp(w)
}
