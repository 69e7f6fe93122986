package tailnet

import (
	"context"
	"errors"
	"strings"

	"tailscale.com/ipn/ipnstate"
)

// This file is the machine's owner (SPEC U4): the login that owns this node in tailscaled's
// status, the one tailnet user who may manage the direct-reach door's devices from the browser.

// ErrNoOwner says that tailscaled's status names no person who owns this node: a tagged node
// (owned by its tags, not a person), or a status that names no user for it. Such a machine's
// devices are managed with the CLI alone.
var ErrNoOwner = errors.New("tailscaled names no person who owns this machine")

// Owner is the login of the person who owns this node: tailscaled's status, Self.UserID, looked
// up in the status's own users. fresh asks tailscaled now (for a request that changes something);
// otherwise the status cached for a Verifier's requests may answer. A tagged node, a Self with no
// user, a user the status does not name, or a login shaped like a device's is ErrNoOwner; any
// other error is tailscaled's (it could not be asked). It never guesses: no owner is no owner.
func (v *Verifier) Owner(ctx context.Context, fresh bool) (string, error) {
	var st *ipnstate.Status
	if fresh {
		sctx, cancel := context.WithTimeout(ctx, localAPITimeout)
		defer cancel()
		s, err := v.api.StatusWithoutPeers(sctx)
		if err != nil {
			return "", err
		}
		st = s
	} else {
		s, ref := v.tailscaleStatus(ctx)
		if ref != nil {
			return "", ref
		}
		st = s
	}
	return OwnerOf(st)
}

// OwnerOf is Owner's judgement of one status.
func OwnerOf(st *ipnstate.Status) (string, error) {
	if st == nil || st.Self == nil || st.Self.UserID == 0 {
		return "", ErrNoOwner
	}
	if st.Self.Tags != nil && st.Self.Tags.Len() > 0 {
		return "", ErrNoOwner
	}
	u, ok := st.User[st.Self.UserID]
	login := u.LoginName
	if !ok || login == "" || login == "tagged-devices" || strings.HasPrefix(strings.ToLower(login), "device:") {
		return "", ErrNoOwner
	}
	return login, nil
}
