package supervisor

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/tailnet"
)

// This file is the machine's owner in the browser (SPEC U4): on the tailnet index, the person
// who owns this node in tailscaled's status sees the direct-reach door's Devices, each with
// Revoke, and Pair a phone; and the two POSTs that act on them, the only paths under /fleet/ that
// answer through Tailscale Serve. Everything else under /fleet/ keeps its rules (/fleet/v1 is
// local only, api.go), and the direct-reach door answers /fleet/ with 403 reach-settings (R1), so
// no paired device ever reaches them.
//
// A POST acts only when all of these hold, judged in this order, the first failing answering:
//
//  1. the method is POST (405 method);
//  2. S5 in full, with a WhoIs asked for this request alone (tailnet.Verifier.VerifyFresh):
//     its own refusals as they are — 401 unverified, 401 tcp-forwardable (S5e: on the TCP door
//     while Tailscale SSH or a raw forward could carry a peer's own bytes), 401
//     identity-mismatch, 403 tagged-node, 403 funnel, 403 self;
//  3. the verified login is this node's owner in tailscaled's status, asked now
//     (tailnet.Verifier.Owner): else 403 not-owner, and so for every login on a machine whose
//     status names no owner (a tagged node: its devices are the CLI's);
//  4. the browser says the form is the page's own: Sec-Fetch-Site: same-origin, or an Origin —
//     which S12 has already held to the page's own origin, so only that one is left. A
//     Sec-Fetch-Site of anything else, or neither header: 403 not-owner;
//  5. the body is an urlencoded form of at most maxOwnerForm bytes (415, 413, 400 owner-form);
//  6. its field token is a token of this process's, made for this login less than
//     ownerTokenTTL ago (ownerTokens.valid, compared in constant time): else 403 not-owner.
//
// Only then is the body's id6 revoked, or a pairing code issued. Each POST that reaches here is
// one access-log line (G3), its login the verified caller's when S5 passed; no token, code or
// form field is ever logged.

// The owner's POSTs (SPEC U4).
const (
	OwnerRevokePath = "/fleet/owner/revoke"
	OwnerPairPath   = "/fleet/owner/pair"
)

// ownerTokenTTL is how long a page's token stays good: a page left open over a working day
// still works; an older one is refused (403 not-owner) and a reload gives a new one.
const ownerTokenTTL = 12 * time.Hour

// maxOwnerForm bounds an owner's form: three short fields.
const maxOwnerForm = 4 << 10

// ownerFormTimeout bounds the reading of an owner's form (S9's 60 s for a body that stalls).
const ownerFormTimeout = 60 * time.Second

// ownerTokens makes and checks the owner's per-page tokens: HMAC-SHA256 under a secret made from
// crypto/rand when the process starts, over the time a page was made, 16 random bytes of its own
// and the login it was made for. A token is bound to that login and to this process (a restart
// makes every open page reload), and holds nothing that names anyone. Never logged.
type ownerTokens struct {
	secret [32]byte
}

// ownerTokenHead is a token's time (8 bytes) and nonce (16); its HMAC follows.
const ownerTokenHead = 8 + 16

func newOwnerTokens() (*ownerTokens, error) {
	o := &ownerTokens{}
	if _, err := rand.Read(o.secret[:]); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *ownerTokens) mac(head []byte, login string) []byte {
	m := hmac.New(sha256.New, o.secret[:])
	m.Write([]byte("fleet owner page\x00"))
	m.Write(head)
	m.Write([]byte(login))
	return m.Sum(nil)
}

// token is a new token for a page made for login at now.
func (o *ownerTokens) token(login string, now time.Time) string {
	var head [ownerTokenHead]byte
	binary.BigEndian.PutUint64(head[:8], uint64(now.Unix()))
	rand.Read(head[8:])
	return base64.RawURLEncoding.EncodeToString(append(head[:], o.mac(head[:], login)...))
}

// valid reports whether tok is a token made for login, by this process, within ownerTokenTTL of
// now (and not more than a minute ahead of it). The HMACs are compared in constant time.
func (o *ownerTokens) valid(login, tok string, now time.Time) bool {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) != ownerTokenHead+sha256.Size {
		return false
	}
	ok := hmac.Equal(raw[ownerTokenHead:], o.mac(raw[:ownerTokenHead], login))
	made := time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	return ok && now.After(made.Add(-time.Minute)) && now.Before(made.Add(ownerTokenTTL))
}

func notOwner(detail string) *proxy.Refusal {
	return proxy.Refuse(http.StatusForbidden, "not-owner", detail)
}

func ownerForm(status int, detail string) *proxy.Refusal {
	return proxy.Refuse(status, "owner-form", detail)
}

// serveOwner is POST /fleet/owner/revoke and POST /fleet/owner/pair, judged as this file's
// comment says.
func (s *Server) serveOwner(w http.ResponseWriter, r *http.Request, path string) {
	cw := &ownerAnswer{ResponseWriter: w}
	e := audit.Entry{Time: s.cfg.Now(), Door: audit.DoorLoopback, Method: r.Method, Path: path, Identified: true}
	defer func() {
		// G3: every owner POST is a line, whoever sent it; its login only once verified.
		e.Status, e.Bytes, e.Duration = cw.status, cw.bytes, s.cfg.Now().Sub(e.Time)
		if e.Status == 0 {
			e.Status = http.StatusOK
		}
		if e.Status >= 400 {
			e.Reason = cw.Header().Get("X-Fleet-Reason")
		}
		if s.accessLog != nil {
			s.accessLog.Record(&e)
		}
	}()
	refuse := func(ref *proxy.Refusal) { proxy.WriteRefusal(cw, r, s.log, ref) }

	if r.Method != http.MethodPost {
		cw.Header().Set("Allow", "POST")
		refuse(proxy.Refuse(http.StatusMethodNotAllowed, "method", "only POST here, from the index's own forms"))
		return
	}
	who, ref := s.tailnet.VerifyFresh(r) // S5 in full, no cached WhoIs
	if ref != nil {
		refuse(ref)
		return
	}
	e.Login, e.Peer = who.Login, who.IP
	owner, err := s.tailnet.Owner(r.Context(), true)
	switch {
	case errors.Is(err, tailnet.ErrNoOwner):
		refuse(notOwner("this machine has no owner in tailscaled's status (a tagged node): manage its devices with fleet reach on the machine"))
		return
	case err != nil:
		ref := notOwner("tailscaled could not say who owns this machine; try again, or use fleet reach on the machine")
		ref.LogDetail = err.Error()
		refuse(ref)
		return
	case who.Login != owner:
		refuse(notOwner("only the person who owns this machine in the tailnet may manage its devices"))
		return
	}
	if !ownPage(r) {
		refuse(notOwner("the form is taken only from this machine's own page (Sec-Fetch-Site: same-origin, or its own Origin)"))
		return
	}
	if ref := s.readOwnerForm(cw, r); ref != nil {
		refuse(ref)
		return
	}
	if !s.ownerTokens.valid(who.Login, r.PostForm.Get("token"), s.cfg.Now()) {
		refuse(notOwner("the page's token is missing, another login's or too old: reload the index and try again"))
		return
	}
	switch path {
	case OwnerRevokePath:
		s.ownerRevoke(cw, r, who.Login, refuse)
	case OwnerPairPath:
		s.ownerPair(cw, r, who.Login, refuse)
	}
}

// ownPage reports whether the browser says the POST comes from a page of this origin: a
// Sec-Fetch-Site of same-origin, or, where a browser sends none, an Origin (S12 has refused
// every Origin but the request's own before the page is asked). A Sec-Fetch-Site that says
// anything else wins over an Origin.
func ownPage(r *http.Request) bool {
	switch sfs := r.Header.Values("Sec-Fetch-Site"); len(sfs) {
	case 0:
		return len(r.Header.Values("Origin")) == 1
	case 1:
		return strings.EqualFold(strings.TrimSpace(sfs[0]), "same-origin")
	default:
		return false
	}
}

// readOwnerForm reads r's body as an owner's form into r.PostForm: urlencoded, at most
// maxOwnerForm bytes, within ownerFormTimeout. Fields come from the body only.
func (s *Server) readOwnerForm(w http.ResponseWriter, r *http.Request) *proxy.Refusal {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
		return ownerForm(http.StatusUnsupportedMediaType, "the form is application/x-www-form-urlencoded")
	}
	http.NewResponseController(w).SetReadDeadline(s.cfg.Now().Add(ownerFormTimeout))
	r.Body = http.MaxBytesReader(w, r.Body, maxOwnerForm)
	if err := r.ParseForm(); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return proxy.Refuse(http.StatusRequestEntityTooLarge, "body-too-large", fmt.Sprintf("the form is limited to %d bytes", maxOwnerForm))
		}
		return ownerForm(http.StatusBadRequest, "the form does not parse")
	}
	return nil
}

// ownerRevoke revokes the device the form's id6 names, as fleet reach revoke does: in the
// register's file, and, through the register's subscribers, its streams on the door at once.
func (s *Server) ownerRevoke(w http.ResponseWriter, r *http.Request, login string, refuse func(*proxy.Refusal)) {
	id6 := r.PostForm.Get("id6")
	var err error
	if reg := s.reachRegister(); reg != nil {
		err = reg.Revoke(id6)
	} else {
		err = pairing.RevokeDevice(s.reachDir(), id6)
	}
	switch {
	case errors.Is(err, pairing.ErrNoSuchDevice):
		refuse(proxy.Refuse(http.StatusNotFound, "unknown-device", "no paired device has that id6 (revoked already?)"))
		return
	case err != nil:
		ref := proxy.Refuse(http.StatusServiceUnavailable, "pairing-unavailable", "the device register could not be changed; nothing was revoked; this machine's log says why")
		ref.LogDetail = err.Error()
		refuse(ref)
		return
	}
	s.log.Info("fleet.device-revoked", "id6", id6, "by", login)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/#devices", http.StatusSeeOther)
}

// ownerPair issues a pairing code, as fleet reach pair does, and answers the steps: the root's
// link and QR code, the fingerprint of the open door, then the pairing link and its QR code, with
// the code. It issues nothing while the door is closed or no pairing password is set.
func (s *Server) ownerPair(w http.ResponseWriter, r *http.Request, login string, refuse func(*proxy.Refusal)) {
	list := strings.TrimSpace(r.PostForm.Get("consoles"))
	if list == "" {
		list = access.All
	}
	consoles, err := access.ParseList(list)
	if err != nil {
		refuse(ownerForm(http.StatusBadRequest, "consoles: "+err.Error()))
		return
	}
	listen, fingerprint, open := s.openDoor()
	if !open {
		refuse(proxy.Refuse(http.StatusServiceUnavailable, "pairing-unavailable", "the direct-reach door is not open: a phone can pair only while it is (fleet reach status says why)"))
		return
	}
	dir := s.reachDir()
	if _, err := pairing.LoadPassword(dir); err != nil {
		ref := proxy.Refuse(http.StatusServiceUnavailable, "pairing-unavailable", "no pairing password is set yet: run fleet reach password on the machine first")
		if !errors.Is(err, pairing.ErrNoPassword) {
			ref.Detail, ref.LogDetail = "the pairing password could not be read; this machine's log says why", err.Error()
		}
		refuse(ref)
		return
	}
	steps := pairStepsPage{RootURL: pairing.RootLink(listen), Fingerprint: fingerprint, Consoles: consoles.String(),
		Name: strings.TrimSpace(r.PostForm.Get("name")), TTL: int(pairing.CodeTTL / time.Minute), Wrong: pairing.MaxWrongPasswords}
	rootQR, err := pairing.QRCodeSVG(steps.RootURL, "QR code of the door's root certificate link")
	if err != nil { // before the code: nothing issued if it fails
		refuse(proxy.Refuse(http.StatusInternalServerError, "internal", "the QR code could not be made"))
		return
	}
	code, err := pairing.IssueCodeFor(dir, steps.Name, consoles, s.cfg.Now())
	if err != nil {
		ref := proxy.Refuse(http.StatusServiceUnavailable, "pairing-unavailable", "no code could be issued; this machine's log says why")
		ref.LogDetail = err.Error()
		refuse(ref)
		return
	}
	steps.Code, steps.PairURL = code, pairing.PairLink(listen, code)
	pairQR, err := pairing.QRCodeSVG(steps.PairURL, "QR code of the pairing link, with the code")
	if err != nil {
		refuse(proxy.Refuse(http.StatusInternalServerError, "internal", "the QR code could not be made"))
		return
	}
	steps.RootQR, steps.PairQR = template.HTML(rootQR), template.HTML(pairQR)
	s.log.Info("fleet.pairing-code-issued", "by", login)
	var b bytes.Buffer
	if err := look.Render(&b, pairStepsView, steps); err != nil {
		refuse(proxy.Refuse(http.StatusInternalServerError, "internal", "the page could not be made"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	proxy.SetPageHeaders(h)
	h.Set("Cache-Control", "no-store") // it holds the code
	w.Write(b.Bytes())
}

// reachRegister is the register the door follows, once the door has opened; nil before.
func (s *Server) reachRegister() *pairing.Register {
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	return s.reach.register
}

// openDoor is where the direct-reach door is open now and its root's fingerprint.
func (s *Server) openDoor() (netip.AddrPort, string, bool) {
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	if s.reach.door == nil {
		return netip.AddrPort{}, "", false
	}
	return s.reach.door.Addr(), s.reach.door.Fingerprint(), true
}

// ownerDevice is one paired device as the owner's Devices section shows it.
type ownerDevice struct {
	Name, ID6, Consoles, LastSeen string
	LastSeenISO                   string
}

// ownerSectionData is the owner's part of the index.
type ownerSectionData struct {
	Token    string
	Devices  []ownerDevice
	Listed   bool   // the register could be read
	DoorOpen bool   // Pair a phone only while the door is open
	DoorAt   string // where
	Why      string // why it is closed
}

// ownerSection is the index's Devices and Pair a phone (pages/owner.html), for login when it
// owns this machine in tailscaled's status (the cached one: the POSTs ask again); otherwise nil.
func (s *Server) ownerSection(r *http.Request, login string) (*ownerSectionData, bool) {
	owner, err := s.tailnet.Owner(r.Context(), false)
	if err != nil || owner != login {
		return nil, false
	}
	d := &ownerSectionData{Token: s.ownerTokens.token(login, s.cfg.Now())}
	var devs []pairing.Device
	if reg := s.reachRegister(); reg != nil && reg.Refresh() == nil { // one stat, unless it changed
		devs, d.Listed = reg.Devices(), true
	} else if l, err := pairing.ListDevices(s.reachDir()); err == nil {
		devs, d.Listed = l, true
	}
	for _, dev := range devs {
		od := ownerDevice{Name: dev.Name, ID6: dev.ID6, Consoles: dev.Consoles.String(), LastSeen: "never"}
		if !dev.LastSeen.IsZero() {
			od.LastSeen = dev.LastSeen.UTC().Format("Jan 2 15:04 UTC")
			od.LastSeenISO = dev.LastSeen.UTC().Format(time.RFC3339)
		}
		d.Devices = append(d.Devices, od)
	}
	if at, _, open := s.openDoor(); open {
		d.DoorOpen, d.DoorAt = true, at.String()
	} else {
		d.Why = s.ReachStatus().Why
	}
	return d, true
}

// pairStepsPage is the answer to Pair a phone: what fleet reach pair prints, in its order.
type pairStepsPage struct {
	RootURL, PairURL, Fingerprint, Code, Name, Consoles string
	RootQR, PairQR                                      template.HTML
	TTL, Wrong                                          int
}

// pairStepsPage is the answer to Pair a phone, in fleet's one look (package look, SPEC U1).
var pairStepsView = look.Page(pageFiles, "pages/pair.html")

// ownerPagePolicy is the index's Content-Security-Policy for the machine's owner:
// proxy.PagePolicy, but for its forms, which post to this door alone (U4).
var ownerPagePolicy = strings.Replace(proxy.PagePolicy, "form-action 'none'", "form-action 'self'", 1)

// ownerAnswer is an answer as the owner's access-log line counts it: its status and the body
// bytes sent. Unwrap lets the door's own record and http.ResponseController reach the server's.
type ownerAnswer struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *ownerAnswer) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *ownerAnswer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *ownerAnswer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
