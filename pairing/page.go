package pairing

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/look"
)

// The pairing page's paths on the direct-reach door (SPEC R7): the door hands these, and only
// these, to the Handler NewHandler makes.
const (
	PairPath     = "/pair"         // GET: the page; POST: pair
	AssetsPrefix = "/pair/assets/" // GET: the page's own script and style sheet
)

// MaxFormBytes bounds the body of the pairing POST. The form is three short fields; anything
// longer is refused 413 before a byte of it is judged.
const MaxFormBytes = 4 << 10

// formIdleTimeout cuts off a pairing form that sends no byte for this long: SPEC S9's 60 s, which
// the hop applies to every body it forwards, and the door to the one body it reads itself. A var
// for tests only.
var formIdleTimeout = 60 * time.Second

// CookieMaxAge is how long a device's credential cookie lives in its browser: 400 days, the
// longest browsers keep a cookie (RFC 6265bis). Revocation, not expiry, is what ends a device.
const CookieMaxAge = 400 * 24 * time.Hour

// ContentSecurityPolicy is sent with every answer of the Handler: the page's script and style
// come from the door itself and never inline, the form posts only to the door, and no other
// site may frame it.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'none'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// EventPaired is the event name of the log line written for each device paired.
const EventPaired = "fleet.paired"

// eventRejected is the event of every refusal's log line (SPEC S11), as proxy.EventRejected.
// Not imported: pairing stays below the proxy in the import graph, so the door's code may use both.
const eventRejected = "fleet.rejected"

// Reason words of the pairing refusals in the log. The answer itself never says which of code
// and password was wrong: see Handler.
const (
	ReasonCode     = "pairing-code"        // no such code, or expired, used or burned
	ReasonPassword = "pairing-password"    // a live code, a wrong password
	ReasonForm     = "pairing-form"        // not a well-formed form
	ReasonTooLarge = "body-too-large"      // a form over MaxFormBytes
	ReasonDown     = "pairing-unavailable" // the machine could not judge or register (its files, no password)
	ReasonOrigin   = "cross-origin"        // SPEC S12
	reasonPageWord = "pairing"             // X-Fleet-Reason of every code or password refusal alike
)

// What the page says when pairing fails. A wrong code and a wrong password read the same; only a
// code that was real but is no longer usable is told apart, so that its holder knows to make a
// new one instead of retyping the password.
const (
	msgWrong   = "The code or the password is wrong."
	msgDead    = "This code can no longer be used: it has expired, been used, or met too many wrong passwords. Make a new one on the machine with fleet reach pair."
	msgNoPW    = "Pairing is not set up on the machine yet: set a pairing password there with fleet reach password, then try again."
	msgDown    = "The machine could not complete the pairing; its log says why. Nothing was paired."
	msgNotKept = "The code was used but the device could not be registered; the machine's log says why. Make a new code with fleet reach pair."
)

//go:embed page/page.html page/assets
var pageFiles embed.FS

// pageTemplate is the pairing page, in fleet's one look (package look, SPEC U1).
var pageTemplate = look.Page(pageFiles, "page/page.html")

// An asset is one file of page/assets, served under AssetsPrefix.
type asset struct {
	body        []byte
	contentType string
}

// assets maps the name of each file in page/assets to it, and pair.css to fleet's one stylesheet
// (look.Stylesheet, which the page links to under its own assets so that the Handler serves all
// the page needs wherever it is mounted), built once: a request names one of these exactly or
// gets 404, so no path can reach anything else.
var assets = func() map[string]asset {
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	out := map[string]asset{"pair.css": {body: look.Stylesheet, contentType: types[".css"]}}
	ents, err := fs.ReadDir(pageFiles, "page/assets")
	if err != nil {
		panic(err)
	}
	for _, e := range ents {
		body, err := fs.ReadFile(pageFiles, "page/assets/"+e.Name())
		ct, ok := types[path.Ext(e.Name())]
		if err != nil || !ok {
			panic(fmt.Sprintf("pairing: asset %s: %v (type known: %v)", e.Name(), err, ok))
		}
		out[e.Name()] = asset{body: body, contentType: ct}
	}
	return out
}()

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Dir is the pairing folder, <stateHome>/fleet/reach: its codes and password are judged.
	Dir string
	// Register receives the devices paired (Register.Add).
	Register *Register
	// Fingerprint is the door's root fingerprint as ca.Authority.Fingerprint gives it, shown on
	// the page.
	Fingerprint string
	// Origin is the door's own origin, "https://192.168.1.20:7443": a POST whose Origin header is
	// anything else is refused.
	Origin string
	// Logger receives one line per pairing and per refusal. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock codes are judged and devices stamped by, read when a code is used (never
	// when a request begins: see pair). Nil means time.Now.
	Now func() time.Time
	// OnFailure, if set, is called once for every refused pairing attempt but a cross-origin one
	// (SPEC R6, R6b: the door counts it for its limiter) before the answer is written.
	OnFailure func(*http.Request)
	// OnAttempt, if set, is told of every pairing POST once it is decided, paired or refused,
	// before the answer is written (SPEC O7: the door records each in the access log and the
	// metrics). An Attempt holds no code, password or name typed.
	OnAttempt func(*http.Request, Attempt)
}

// Results of a pairing attempt beside the reason words of its refusals (Attempt.Result).
const (
	ResultPaired = "paired"
)

// An Attempt is what one pairing POST came to (SPEC O7).
type Attempt struct {
	// Result is ResultPaired, or the refusal's kind: ReasonCode, ReasonPassword, ReasonForm (a
	// form refused for its shape, its size or its origin) or ReasonDown.
	Result string
	// Reason is the refusal's reason word (ReasonForm, ReasonTooLarge, ReasonOrigin, …); empty
	// when paired.
	Reason string
	// Status is the answer's status.
	Status int
	// Login is the new device's login (device:<slug>#<id6>) when paired; else empty.
	Login string
}

// NewHandler returns the pairing page's handler (SPEC R7, R8). It serves:
//
//	GET  /pair            the page, in fleet's one look (package look), in the order a device must
//	                      follow: a notice to stop, and type no password, if the browser warned
//	                      about the page's certificate; then "Trust this door" — the root's
//	                      fingerprint, a link to /ca.crt and the steps to install it and check its
//	                      fingerprint on iOS and Android —, folded in a <details> whose summary is
//	                      "Installed and checked the root? Pair below"; then a plain HTML form
//	                      (code, password, device name) that works without JavaScript. On a
//	                      loopback door (fleet demo) the form comes first, under one paragraph
//	                      that says why a certificate warning is expected there, and the trust
//	                      steps follow it (SPEC U7)
//	GET  /pair/assets/…   its own script (which moves a code from the URL's #fragment into the
//	                      form, and opens the folded steps for a link to them) and fleet's one
//	                      stylesheet (pair.css, look.Stylesheet), nothing else
//	POST /pair            pairing
//
// The order is the defence against a stranger between the phone and the door (ARP spoofing, a
// rogue access point): a phone that does not yet trust the door's root sees a certificate warning
// on its first visit, and sees the same one behind such a stranger, who, once it is clicked
// through, reads the code and the password. The fingerprint on the page comes over that same
// connection and proves nothing; the one that counts is the machine's (`fleet reach pair`), checked
// in the device's own certificate settings. So the page, like `fleet reach pair`, asks for the
// root to be installed and checked first, and for the pairing link to be opened only then, with
// no warning. A stranger can serve a page without the notice: the steps printed on the machine
// are the ones that hold.
//
// and 404 or 405 to anything else, in the caller's language (SPEC U5: the refusal page or JSON) (logged, but not counted as failures: SPEC R6 counts wrong
// credentials and refused requests, not a mistyped path). Every answer carries ContentSecurityPolicy, nosniff,
// Referrer-Policy same-origin, no framing and no-store.
//
// The POST is judged in this order, and the first refusal ends it:
//
//  1. Origin: a browser sends Origin with every POST; one that is present and is not cfg.Origin
//     (or is "null", or sent twice), or a Sec-Fetch-Site of cross-site or same-site, is 403
//     cross-origin, which is not a failure. No GET changes anything, and the credential cookie
//     is SameSite=Strict, so no other site can make a browser act on the door: the one thing a
//     forged form could do is pair the victim's browser with a code of the attacker's (login
//     CSRF), which this refuses.
//  2. The body: application/x-www-form-urlencoded of at most MaxFormBytes (else 413 or 415), the
//     fields taken from the body only, never the URL.
//  3. The code (RedeemCode, judged at the time it is used — read once the form is in and
//     the folder locked, never when the request began): unknown, expired, used or burned codes
//     are refused without scrypt.
//  4. The password, only for a live code: the stored hash loaded afresh and checked with
//     CheckPasswordContext (the process-wide scrypt gate; a caller that goes away stops waiting).
//  5. A device is registered (cfg.Register.Add) under the name given to `fleet reach pair
//     --name`, else the form's, and its credential set as the cookie CookieName: Secure,
//     HttpOnly, SameSite=Strict, Path=/, no Domain, Max-Age CookieMaxAge, in place of any
//     ClearCookie line the door set for a refused credential sent with the POST (R10). The
//     answer is 303 to "/", the device's index of consoles.
//
// Every refusal of a POST writes one fleet.rejected log line (reason pairing-code,
// pairing-password, pairing-form, body-too-large, cross-origin or pairing-unavailable; method,
// path, peer; never the code, the password or the name), calls cfg.OnFailure unless it is
// cross-origin (SPEC R6b: a foreign origin guesses nothing, and any page could send one), and
// answers without echoing the code or the password. A refused code or password is 403 with the
// page again and one of two messages: "the code or the password is wrong" for an unknown code
// and a wrong password alike, or "this code can no longer be used" for one expired, used or
// burned. The answer does not tell a wrong code from a wrong password, but its time does, since
// scrypt runs only for a live code (SPEC R8 prefers that to doing scrypt for every guess): a code
// is 1 in 20^8 to guess, lives 5 minutes and dies after 5 wrong passwords, and the door's
// limiter (R6) allows ten failures per source. A pairing is one EventPaired line with the
// device's id6 and slug. Every POST that reaches the judgement, paired or refused, is told once
// to cfg.OnAttempt (SPEC O7), with its result and reason word and, when paired, the new device's
// login — never the code, the password or the name typed.
//
// An answer written before the form is read — cross-origin, 415, 404, 405 — leaves a request's
// body unread. The direct-reach door closes such a connection instead of reading what is left of
// the body (package reach, S9); a server that mounts this Handler elsewhere must do the same, or
// net/http waits, with no deadline, for up to 256 KiB of a body that may never come.
//
// NewHandler panics if Dir is empty, Register nil, or Origin not of the form scheme://host[:port].
func NewHandler(cfg HandlerConfig) http.Handler {
	if cfg.Dir == "" || cfg.Register == nil {
		panic("pairing: NewHandler needs a Dir and a Register")
	}
	u, err := url.Parse(cfg.Origin)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		panic(fmt.Sprintf("pairing: NewHandler: Origin %q is not scheme://host[:port]", cfg.Origin))
	}
	h := &handler{cfg: cfg, scheme: u.Scheme, host: u.Host, log: cfg.Logger, now: cfg.Now}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.Unmap().IsLoopback() {
		h.loopback = true
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h
}

type handler struct {
	cfg          HandlerConfig
	scheme, host string // of cfg.Origin
	loopback     bool   // cfg.Origin's host is a loopback address: the door of fleet demo, or a test's
	log          *slog.Logger
	now          func() time.Time
}

type pageData struct {
	Fingerprint string
	Error       string
	Name        string
	// Loopback: the door listens on a loopback address (fleet demo), which no other device can
	// reach, so no stranger can be between the browser and it, and a certificate warning there
	// is expected and harmless; the page says so under its notice, lest the demo teach that the
	// notice may be ignored.
	Loopback bool
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with the
	// form's POST, which the Origin check must refuse. Nothing leaks either way: the page links
	// to no other site, and a #fragment is never part of a Referer.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	p := r.URL.Path
	switch {
	case p == PairPath:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			h.page(w, http.StatusOK, pageData{})
		case http.MethodPost:
			h.pair(w, r)
		default:
			hd.Set("Allow", "GET, HEAD, POST")
			h.logRefusal(r, http.StatusMethodNotAllowed, "method", "only GET and POST here")
			h.refusalPage(w, r, http.StatusMethodNotAllowed, "method", "only GET and POST here")
		}
	case strings.HasPrefix(p, AssetsPrefix):
		a, ok := assets[strings.TrimPrefix(p, AssetsPrefix)]
		switch {
		case !ok:
			h.logRefusal(r, http.StatusNotFound, "not-found", "no such page")
			h.refusalPage(w, r, http.StatusNotFound, "not-found", "no such page")
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			hd.Set("Allow", "GET, HEAD")
			h.logRefusal(r, http.StatusMethodNotAllowed, "method", "only GET here")
			h.refusalPage(w, r, http.StatusMethodNotAllowed, "method", "only GET here")
		default:
			hd.Set("Content-Type", a.contentType)
			hd.Set("Cache-Control", "no-cache")
			w.Write(a.body)
		}
	default:
		h.logRefusal(r, http.StatusNotFound, "not-found", "no such page")
		h.refusalPage(w, r, http.StatusNotFound, "not-found", "no such page")
	}
}

// page writes the pairing page with status.
func (h *handler) page(w http.ResponseWriter, status int, d pageData) {
	d.Fingerprint, d.Loopback = h.cfg.Fingerprint, h.loopback
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	look.Render(w, pageTemplate, d)
}

// pair is the pairing POST; see NewHandler for its order.
//
// It reads no clock before the form has arrived: the code is judged by a time read when it is
// used (RedeemCode, under the folder's lock) and the device stamped by one read after, so a
// form held open for as long as it keeps moving (S9) carries no earlier time with it (R8).
func (h *handler) pair(w http.ResponseWriter, r *http.Request) {
	if !h.sameOrigin(r) {
		// Logged, not counted (SPEC R6b): any page can make a browser send it, and it guesses
		// nothing; counting it would let that page lock the phone out before it pairs.
		h.logRefusal(r, http.StatusForbidden, ReasonOrigin, "the pairing form is posted only from the door's own page")
		h.attempt(r, Attempt{Result: ReasonForm, Reason: ReasonOrigin, Status: http.StatusForbidden})
		h.refusalPage(w, r, http.StatusForbidden, ReasonOrigin, "the pairing form is posted only from the door's own page")
		return
	}
	r.Body = http.MaxBytesReader(w, &idleForm{ReadCloser: r.Body, rc: http.NewResponseController(w)}, MaxFormBytes)
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
		h.reject(r, http.StatusUnsupportedMediaType, ReasonForm, "not a urlencoded form")
		h.refusalPage(w, r, http.StatusUnsupportedMediaType, ReasonForm, "the pairing form is application/x-www-form-urlencoded")
		return
	}
	if err := r.ParseForm(); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			detail := fmt.Sprintf("the pairing form is limited to %d bytes", MaxFormBytes)
			h.reject(r, http.StatusRequestEntityTooLarge, ReasonTooLarge, detail)
			h.refusalPage(w, r, http.StatusRequestEntityTooLarge, ReasonTooLarge, detail)
			return
		}
		h.reject(r, http.StatusBadRequest, ReasonForm, "the form does not parse")
		h.refusalPage(w, r, http.StatusBadRequest, ReasonForm, "the form does not parse")
		return
	}
	// From the body only (PostForm): a code must never travel in a URL.
	code, pw, formName := r.PostForm.Get("code"), r.PostForm.Get("password"), cleanName(r.PostForm.Get("name"))
	again := pageData{Name: formName}

	issued, err := RedeemCode(h.cfg.Dir, code, h.now, func() (bool, error) {
		stored, err := LoadPassword(h.cfg.Dir)
		if err != nil {
			return false, err
		}
		return CheckPasswordContext(r.Context(), stored, []byte(pw))
	})
	if err != nil {
		status, reason, detail, msg := http.StatusForbidden, ReasonCode, "", msgWrong
		var extra []any
		switch {
		case errors.Is(err, ErrWrongPassword):
			reason, detail = ReasonPassword, "wrong password for a live code"
			if err != ErrWrongPassword { // counted, but the count could not be written
				extra = append(extra, "error", err.Error())
			}
		case errors.Is(err, ErrNoSuchCode):
			detail = "no such code"
		case errors.Is(err, ErrCodeExpired):
			detail, msg = "code expired", msgDead
		case errors.Is(err, ErrCodeUsed):
			detail, msg = "code already used", msgDead
		case errors.Is(err, ErrCodeBurned):
			detail, msg = "code dead after too many wrong passwords", msgDead
		default:
			status, reason, detail, msg = http.StatusServiceUnavailable, ReasonDown, "the code or password could not be judged", msgDown
			if errors.Is(err, ErrNoPassword) {
				msg = msgNoPW
			}
			if !errors.Is(err, context.Canceled) {
				extra = append(extra, "error", err.Error())
			}
		}
		h.reject(r, status, reason, detail, extra...)
		h.pageRefused(w, status, again, msg)
		return
	}

	name := issued.Name
	if name == "" {
		name = formName
	}
	d, cred, err := h.cfg.Register.AddFor(name, issued.Consoles, h.now())
	if err != nil {
		h.reject(r, http.StatusServiceUnavailable, ReasonDown, "the code was used but the device not registered", "error", err.Error())
		h.pageRefused(w, http.StatusServiceUnavailable, again, msgNotKept)
		return
	}
	// The door may have cleared a refused credential in this same answer (ClearCookie, R10): the
	// new one takes that line's place, so no browser has to apply the two in the right order.
	dropCookie(w.Header(), CookieName)
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    cred,
		Path:     "/",
		MaxAge:   int(CookieMaxAge / time.Second),
		Secure:   true,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	h.log.Info(EventPaired, "id6", d.ID6, "slug", d.Slug, "peer", r.RemoteAddr)
	h.attempt(r, Attempt{Result: ResultPaired, Status: http.StatusSeeOther, Login: d.Login()})
	w.Header().Set("Location", "/")
	w.WriteHeader(http.StatusSeeOther)
}

// dropCookie removes from h every Set-Cookie line that sets the cookie name.
func dropCookie(h http.Header, name string) {
	lines := h.Values("Set-Cookie")
	h.Del("Set-Cookie")
	for _, l := range lines {
		if n, _, _ := strings.Cut(l, "="); strings.TrimSpace(n) != name {
			h.Add("Set-Cookie", l)
		}
	}
}

// idleForm gives each read of the form formIdleTimeout to bring a byte (S9): a stalled form
// fails to parse, and is refused, instead of holding its request open for ever.
type idleForm struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (f *idleForm) Read(p []byte) (int, error) {
	f.rc.SetReadDeadline(time.Now().Add(formIdleTimeout)) // not supported (a recorder): no limit
	return f.ReadCloser.Read(p)
}

// sameOrigin reports whether the POST may come from a page of the door itself: its Origin, when
// present, is cfg.Origin (contract.SameOrigin: "null" never is), and its Sec-Fetch-Site, when
// present, says neither cross-site nor same-site (another port or host of the same site).
func (h *handler) sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return false
	}
	switch o := r.Header.Values("Origin"); len(o) {
	case 0:
		return true
	case 1:
		return contract.SameOrigin(o[0], h.scheme, h.host)
	default:
		return false
	}
}

// reject counts a refused POST for the door's limiter, logs it and reports the attempt.
func (h *handler) reject(r *http.Request, status int, reason, detail string, extra ...any) {
	if h.cfg.OnFailure != nil {
		h.cfg.OnFailure(r)
	}
	h.logRefusal(r, status, reason, detail, extra...)
	result := reason
	if reason == ReasonTooLarge {
		result = ReasonForm // a form refused for its size
	}
	h.attempt(r, Attempt{Result: result, Reason: reason, Status: status})
}

// attempt tells cfg.OnAttempt what a pairing POST came to.
func (h *handler) attempt(r *http.Request, a Attempt) {
	if h.cfg.OnAttempt != nil {
		h.cfg.OnAttempt(r, a)
	}
}

// logRefusal logs a refusal as one fleet.rejected line, in the shape of proxy.WriteRefusal's.
func (h *handler) logRefusal(r *http.Request, status int, reason, detail string, extra ...any) {
	attrs := []any{"reason", reason, "status", status, "method", r.Method, "path", contract.LogPath(r), "peer", r.RemoteAddr}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	h.log.Warn(eventRejected, append(attrs, extra...)...)
}

// pageRefused answers a refused code or password with the page again and msg.
func (h *handler) pageRefused(w http.ResponseWriter, status int, d pageData, msg string) {
	w.Header().Set("X-Fleet-Reason", reasonPageWord)
	d.Error = msg
	h.page(w, status, d)
}

// refusalPage answers as proxy.WriteRefusal does, without logging: the refusal in the caller's
// language (SPEC U5, package look).
func (h *handler) refusalPage(w http.ResponseWriter, r *http.Request, status int, reason, detail string) {
	w.Header().Set("X-Fleet-Reason", reason)
	look.WriteRefusal(w, r, status, reason, detail)
}
