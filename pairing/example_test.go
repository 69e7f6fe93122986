package pairing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phase-console/fleet/pairing"
)

// The door's pairing POST, in order: the code first, the password (scrypt) only for a live code,
// then a device and its credential. reg is the server's Register; dir is <stateHome>/fleet/reach.
func Example_pairingPOST() {
	var (
		ctx                      = context.Background()
		dir                      = "/home/ann/.local/state/phase-console/fleet/reach"
		code, password, formName = "BCDF-GHJK", []byte("typed password"), "Ann's phone"
		reg, _                   = pairing.OpenRegister(dir)
		now                      = time.Now()
	)
	name, err := pairing.Redeem(dir, code, now, func() (bool, error) {
		stored, err := pairing.LoadPassword(dir)
		if err != nil {
			return false, err
		}
		return pairing.CheckPasswordContext(ctx, stored, password)
	})
	switch {
	case errors.Is(err, pairing.ErrWrongPassword), errors.Is(err, pairing.ErrNoSuchCode):
		// count a failure (R6) and show the form again
		return
	case err != nil:
		// expired, used, burned, or a file refused: not paired
		return
	}
	if name == "" {
		name = formName
	}
	d, credential, err := reg.Add(name, now)
	if err != nil {
		return
	}
	_ = credential // the cookie's value: Secure; HttpOnly; SameSite=Strict
	fmt.Println("asserted as", d.Login())
}
