package pairing_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	)
	issued, err := pairing.RedeemCode(dir, code, time.Now, func() (bool, error) {
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
	name := issued.Name
	if name == "" {
		name = formName
	}
	d, credential, err := reg.AddFor(name, issued.Consoles, time.Now())
	if err != nil {
		return
	}
	_ = credential // the cookie's value: Secure; HttpOnly; SameSite=Strict
	fmt.Println("asserted as", d.Login())
}

// How the direct-reach door mounts the pairing page for callers that are not paired: the page,
// its assets and the POST go to the handler; /ca.crt and everything else are the door's.
func ExampleNewHandler() {
	dir := "/home/ann/.local/state/phase-console/fleet/reach"
	reg, err := pairing.OpenRegister(dir)
	if err != nil {
		return
	}
	page := pairing.NewHandler(pairing.HandlerConfig{
		Dir:         dir,
		Register:    reg,
		Fingerprint: "AB12 CD34 …", // ca.Authority.Fingerprint()
		Origin:      "https://192.168.1.20:7443",
		OnFailure:   func(r *http.Request) { /* count r's TCP peer for the limiter (R6) */ },
	})
	mux := http.NewServeMux()
	mux.Handle(pairing.PairPath, page)
	mux.Handle(pairing.AssetsPrefix, page)
	_ = mux
}
