package tailnet

// This file is who may open which console, for a tailnet user (SPEC G1): the app capability
// access.CapabilityName in WhoIs's CapMap, read once per WhoIs answer and kept with it in the
// cache, and the profile's access.mode for a caller whose answer carries no capability.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/proxy"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
)

// maxCapValue bounds one capability value that is read: a value is a short list of patterns.
const maxCapValue = 64 << 10

// notGranted is the answer to a verified caller who may not open a console — the same whether or
// not a console with that id exists, so that the door tells nobody which ids there are.
func notGranted() *proxy.Refusal {
	return proxy.Refuse(http.StatusForbidden, "not-granted",
		"you may not open this console: ask whoever runs the tailnet to grant it to you in the tailnet policy (app capability "+access.CapabilityName+")")
}

// SetAccess sets what a verified caller whose WhoIs carries no capability may open (the
// profile's access.mode): every console under access.ModeTailnet, none under anything else.
// It takes effect for the next request; a caller holding the capability is not affected.
func (v *Verifier) SetAccess(m access.Mode) { v.tailnetMode.Store(m == access.ModeTailnet) }

// grantFor is the Grant of a caller whose cached WhoIs answer is e: the capability's, if the
// answer carries it, else the mode's. It allocates nothing.
func (v *Verifier) grantFor(e *whoIsEntry) *access.Grant {
	switch {
	case e.capable:
		return e.grant
	case v.tailnetMode.Load():
		return access.Everything
	default:
		return access.Nothing
	}
}

// readCapability is the capability of one WhoIs answer: whether it carries it at all, and the
// union of the lists of its values that are well-formed. A value that is not — not a JSON object,
// "consoles" missing or not a list of strings, a pattern that is not one — adds nothing, and is
// logged at warning level with why; the others count as they are.
func (v *Verifier) readCapability(resp *apitype.WhoIsResponse) (capable bool, g *access.Grant) {
	if resp == nil {
		return false, nil
	}
	values, ok := resp.CapMap[tailcfg.PeerCapability(access.CapabilityName)]
	if !ok {
		return false, nil
	}
	var b access.Builder
	for i, raw := range values {
		patterns, err := ParseCapabilityValue([]byte(raw))
		if err == nil {
			err = b.AddAll(patterns)
		}
		if err != nil {
			login := ""
			if resp.UserProfile != nil {
				login = resp.UserProfile.LoginName
			}
			v.log.Warn("fleet.grant-malformed", "capability", access.CapabilityName, "login", login,
				"value", i, "why", err.Error())
		}
	}
	return true, b.Grant()
}

// ParseCapabilityValue reads one value of the capability access.CapabilityName: a JSON object
// whose "consoles" member is a list of strings. Other members are ignored (room for later
// fields). The patterns are returned as written; access.Builder judges them. It is an error —
// and the value grants nothing — when the value is not one such object: not JSON, not an object,
// "consoles" missing, null, not a list of strings, or named twice, or anything after the object.
// Member names are matched exactly: "Consoles" is another member.
func ParseCapabilityValue(b []byte) ([]string, error) {
	if len(b) > maxCapValue {
		return nil, fmt.Errorf("the value is larger than %d bytes", maxCapValue)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New(`the value is not a JSON object {"consoles": [...]}`)
	}
	var consoles []string
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errors.New("the value is not valid JSON")
		}
		name, _ := tok.(string)
		if name != "consoles" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, errors.New("the value is not valid JSON")
			}
			continue
		}
		if found {
			return nil, errors.New(`"consoles" is given twice`)
		}
		found = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, errors.New("the value is not valid JSON")
		}
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || json.Unmarshal(raw, &consoles) != nil {
			return nil, errors.New(`"consoles" is not a list of strings`)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("the value is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the value has more after its object")
	}
	if !found {
		return nil, errors.New(`the value has no "consoles" list`)
	}
	if consoles == nil {
		consoles = []string{}
	}
	return consoles, nil
}
