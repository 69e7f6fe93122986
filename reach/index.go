package reach

import (
	"embed"
	"errors"
	"net/http"
	"strings"

	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
)

// This file is a paired device's own pages on the door (SPEC U2, U3): its index — the consoles it
// may open, by name and health, and the device itself — and Forget this device, the one thing a
// device may change on the door: its own pairing, never another's, and nothing under /fleet/.

// ForgetPath is Forget this device: a POST from the device's index revokes that device (U3).
const ForgetPath = pairing.PairPath + "/forget"

// IndexPolicy is the Content-Security-Policy of the device's index: proxy.PagePolicy — fleet's
// stylesheet, no script, no framing (it shows the device's name behind its ambient cookie) —
// but for its one form, which posts to the door itself (ForgetPath).
var IndexPolicy = strings.Replace(proxy.PagePolicy, "form-action 'none'", "form-action 'self'", 1)

// A ConsoleDescriber is Consoles that can also say a console's name and health ("up", "down",
// "unknown"), for the device's index (U2). Consoles that cannot are shown by id, health unknown.
type ConsoleDescriber interface {
	Describe(id string) (name, health string)
}

//go:embed pages/index.html
var pageFiles embed.FS

// indexPage is the device's index, in fleet's one look (package look, SPEC U1).
var indexPage = look.Page(pageFiles, "pages/index.html")

// indexConsole is one console as the device's index shows it (look's "console" partial).
type indexConsole struct {
	URL, ID, Name, Health string
}

// indexData is what the device's index shows.
type indexData struct {
	Device   pairing.Device
	Patterns string // what the device was paired to open, as fleet reach pair --consoles takes it
	Consoles []indexConsole
}

// serveIndex is the device's index (U2): each console it may open (SPEC G1) by name, with its id
// beside it and its health in words, linking to its front door; the device's own name and id6;
// and Forget this device. A device that may open no console is told what to do instead of an
// empty list. Nothing of where the consoles listen is shown.
func (d *Door) serveIndex(w http.ResponseWriter, r *http.Request) {
	dev, _ := deviceFrom(r)
	data := indexData{Device: dev, Patterns: dev.Consoles.String()}
	describe, _ := d.cfg.Consoles.(ConsoleDescriber)
	for _, id := range d.cfg.Consoles.IDs() {
		if !dev.Consoles.Allows(id) { // G1: only what the device may open
			continue
		}
		c := indexConsole{URL: "/c/" + id + "/", ID: id, Name: id, Health: "unknown"}
		if describe != nil {
			name, health := describe.Describe(id)
			if name != "" {
				c.Name = name
			}
			if health != "" {
				c.Health = health
			}
		}
		data.Consoles = append(data.Consoles, c)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	proxy.SetPageHeaders(h)
	h.Set("Content-Security-Policy", IndexPolicy)
	h.Set("Cache-Control", "no-store")
	if err := look.Render(w, indexPage, data); err != nil {
		d.log.Warn("fleet.reach-index", "error", err.Error())
	}
}

// serveForget is POST /pair/forget, Forget this device (U3). In this order:
//
//  1. S12: an Origin that is not the door's own is 403 cross-origin, and so is a Sec-Fetch-Site
//     of same-site (a page on another port of this address); cross-site was refused already
//     (R6b, in the door's step 2). Neither is a failure (R6b). Browsers send Origin with every
//     POST, and the device cookie is SameSite=Strict: no other page can forget a device.
//  2. A caller that showed no valid credential — none, an unknown or a revoked one — is sent to
//     /pair (R7), its refused cookie cleared by the door (R10); nothing is revoked.
//  3. The device that showed its credential, and only that one, is revoked in the register as
//     `fleet reach revoke` revokes it (pairing.Register.Revoke: the file, then every subscriber
//     told), and its live connections on this door end before the answer (Door.Revoke).
//  4. The answer clears its cookie with R10's line and sends it (303) to the pairing page.
//
// No field of the form is read: the device is the one whose credential came with the request,
// so there is nothing to choose and nothing to forge. The body is left unread (the door closes
// such a connection, proxy.AnswerItself).
func (d *Door) serveForget(w http.ResponseWriter, r *http.Request) {
	if ref := forgetOrigin(r); ref != nil {
		proxy.WriteRefusal(w, r, d.log, ref, "door", "reach")
		return
	}
	dev, ok := deviceFrom(r)
	if !ok {
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, PairPath, http.StatusSeeOther)
		return
	}
	rev, ok := d.cfg.Devices.(Revoker)
	if !ok {
		proxy.WriteRefusal(w, r, d.log, proxy.Refuse(http.StatusServiceUnavailable, "pairing-unavailable",
			"this door cannot revoke a device; run fleet reach revoke on the machine"), "door", "reach")
		return
	}
	if err := rev.Revoke(dev.ID6); err != nil && !errors.Is(err, pairing.ErrNoSuchDevice) {
		ref := proxy.Refuse(http.StatusServiceUnavailable, "pairing-unavailable",
			"the machine could not revoke this device; nothing changed; its log says why")
		ref.LogDetail = err.Error()
		proxy.WriteRefusal(w, r, d.log, ref, "door", "reach")
		return
	}
	d.Revoke(dev.ID6) // whoever else the register tells, this door's streams end now
	d.log.Info("fleet.device-forgotten", "id6", dev.ID6, "slug", dev.Slug, "peer", r.RemoteAddr)
	h := w.Header()
	h.Del("Set-Cookie")
	h.Add("Set-Cookie", pairing.ClearCookie) // R10's line: the browser forgets the credential
	h.Set("Cache-Control", "no-store")
	http.Redirect(w, r, PairPath, http.StatusSeeOther)
}

// A Revoker revokes a paired device by its id6 (*pairing.Register is one). Forget this device
// (U3) needs the door's Devices to be one.
type Revoker interface {
	Revoke(id6 string) error
}

// forgetOrigin is S12 for Forget this device: the door's own origin only.
func forgetOrigin(r *http.Request) *proxy.Refusal {
	if anyToken(r.Header["Sec-Fetch-Site"], "same-site") {
		return proxy.Refuse(http.StatusForbidden, "cross-origin", "a device is forgotten only from the door's own page")
	}
	return proxy.CheckOrigin(r, "https")
}
