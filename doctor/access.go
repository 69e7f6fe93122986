package doctor

// Who may open which console (SPEC G1): the profile's access: section, and whether this
// machine's owner would be shut out of every console.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/tailnet"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
)

// whoIser is the LocalAPI's WhoIs, when the doctor's LocalAPI has it (*local.Client does): it
// tells what the tailnet policy grants this machine's owner.
type whoIser interface {
	WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error)
}

const accessDoc = "docs/access.md"

// checkAccess reports the access.mode in force (as the profile says it: a running fleet serve
// follows the file within 10 s), and whether this machine's owner — as tailscaled's WhoIs of this
// node's own address names them and their grant — would open no console at all.
func (r *run) checkAccess(ctx context.Context) {
	path := filepath.Join(r.cfg.StateHome, reach.ProfileFile)
	b, err := reach.ReadProfileFile(r.cfg.StateHome)
	set := access.Refused
	if err == nil {
		set, err = access.ParseProfile(b)
	}
	if err != nil {
		key := "access"
		var se *access.SectionError
		if errors.As(err, &se) && se.Key != "" {
			key = se.Key
		}
		r.add(Fail, "access", fmt.Sprintf("the profile's access: section is refused (%v), so fleet treats it as access.mode grants: only callers that the tailnet policy grants consoles open any", err),
			fmt.Sprintf("correct %s in %s (%s)", key, path, accessDoc))
	} else if set.Mode == access.ModeGrants {
		r.add(OK, "access", "access.mode grants: a tailnet user opens only the consoles that the tailnet policy grants them ("+access.CapabilityName+")", "")
	} else {
		r.add(OK, "access", "access.mode tailnet: a tailnet user opens every console, unless the tailnet policy grants them "+access.CapabilityName+" (then only what it lists)", "")
	}
	r.checkOwnerGrant(ctx, set.Mode)
}

// checkOwnerGrant warns when this machine's owner would open no console: the policy grants them
// the capability with nothing in it, or not at all under mode grants. It says plainly when it
// cannot know (a tagged machine has no owner that is a person; a LocalAPI that cannot say).
func (r *run) checkOwnerGrant(ctx context.Context, mode access.Mode) {
	const name = "access: this machine's owner"
	cannot := func(why string) {
		// What the doctor cannot know is never OK (O6), whatever access.mode says.
		r.add(Warn, name, "cannot know whether you may open any console here: "+why,
			"open this machine's index (https://<its name>/) from one of your devices: it lists what you may open")
	}
	w, ok := r.cfg.LocalAPI.(whoIser)
	if !ok || r.cfg.LocalAPI == nil {
		cannot("tailscaled's WhoIs cannot be asked")
		return
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	st, err := r.cfg.LocalAPI.StatusWithoutPeers(sctx)
	cancel()
	if err != nil || st.Self == nil || len(st.Self.TailscaleIPs) == 0 {
		cannot("tailscaled did not name this machine's Tailscale address")
		return
	}
	if st.Self.Tags != nil && st.Self.Tags.Len() > 0 {
		cannot("this machine is tagged, so its owner is not a person, and grants go by who calls from where")
		return
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	who, err := w.WhoIs(wctx, st.Self.TailscaleIPs[0].String())
	cancel()
	if err != nil || who == nil || who.UserProfile == nil || who.UserProfile.LoginName == "" {
		cannot("tailscaled's WhoIs of this machine's own address named nobody")
		return
	}
	login := who.UserProfile.LoginName
	seen := "as tailscaled sees this machine's own address (a grant may differ by the device you call from)"
	fix := fmt.Sprintf("grant %s the app capability %s in the tailnet policy (%s)", login, access.CapabilityName, accessDoc)
	values, capable := who.CapMap[tailcfg.PeerCapability(access.CapabilityName)]
	if !capable {
		if mode == access.ModeGrants {
			r.add(Warn, name, fmt.Sprintf("the tailnet policy grants %s no console, %s: under access.mode grants they open nothing here", login, seen),
				fix+", or set access.mode: tailnet")
			return
		}
		r.add(OK, name, fmt.Sprintf("%s holds no grant, %s: under access.mode tailnet they open every console", login, seen), "")
		return
	}
	var bld access.Builder
	bad := 0
	for _, v := range values {
		list, err := tailnet.ParseCapabilityValue([]byte(v))
		if err == nil {
			err = bld.AddAll(list)
		}
		if err != nil {
			bad++
		}
	}
	g := bld.Grant()
	if g.Empty() {
		what := "its values list no console"
		if bad > 0 {
			what = fmt.Sprintf("%d of its values are malformed and grant nothing", bad)
		}
		r.add(Warn, name, fmt.Sprintf("%s holds %s but %s, %s: they open nothing here", login, access.CapabilityName, what, seen), fix+` with {"consoles": ["*"]} or the ids they need`)
		return
	}
	r.add(OK, name, fmt.Sprintf("%s may open %s, %s", login, g, seen), "")
}
