package doctor

import (
	"context"

	"tailscale.com/ipn"
)

// supervisorAPI is a fakeTailscaled as the supervisor's LocalAPI, which also reads prefs (SPEC
// S5e): Tailscale SSH is off.
type supervisorAPI struct{ *fakeTailscaled }

func (supervisorAPI) GetPrefs(context.Context) (*ipn.Prefs, error) { return &ipn.Prefs{}, nil }
