package tailnet

// This file is what a Verifier knows of one connection (SPEC S5a, S5b): whether tailscaled
// opened it, and whether tailscaled's netstack forwarded a tailnet peer straight to it. Both are
// facts of the connection, judged once and kept with it. On the unix door the kernel names the
// peer (SO_PEERCRED), and that door's Host comes from Serve's X-Forwarded-Host only when the
// peer is tailscaled.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/proxy"
	"tailscale.com/client/local"
)

// overflowUID is the uid that unmapped users show as inside a user namespace; never tailscaled's.
const overflowUID = 65534

// maxPeerLookups bounds how many connections' peer uids are looked up at once (SPEC S9: each
// accepted connection would otherwise start its own lookup, however many arrive).
const maxPeerLookups = 32

// peerLookupWait is how long a connection's first request waits for a free lookup slot when
// all are taken; then it is refused (401 unverified), never forwarded.
const peerLookupWait = 2 * time.Second

// connFacts is what a Verifier knows of one accepted connection. S5a and S5b are facts of the
// connection, so they are judged once (on its first request that needs them) and kept.
type connFacts struct {
	local, remote netip.AddrPort
	peerUID       func(context.Context) (uint32, error)
	viaUnix       bool    // a unix-socket listener: no netstack forward can reach it
	door          doorKey // which door accepted it (S5e)
	epoch         uint64  // the forward watch's answers recorded when it was accepted (S5e)
	localCaller   bool    // set by judgeConn: the peer is a process on this machine, not tailscaled

	once sync.Once
	ref  *proxy.Refusal
}

type connFactsKey struct{}

// ConnContext records what a Verifier needs of every connection that a door accepts: give it to
// http.Server.ConnContext. A request on a connection it did not see is never verified. The
// peer's uid is looked up at once, in the background, while the connection surely still holds its
// addresses (peercred.ConnPeerUID also checks that it does); its first request waits for it. At
// most 32 lookups run at once (maxPeerLookups): past that, the connection's first request looks
// its peer up itself when a slot frees, or is refused 401 unverified after 2 s (peerLookupWait).
func (v *Verifier) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return v.newConnFacts(ctx, c, false)
}

// ConnContextHere is ConnContext for a server that calls it on the connection's own goroutine,
// before it reads the first request (the loopback door's connection loop): the peer is looked up
// right there, which saves a goroutine per connection (net/http's server calls ConnContext on its
// accept loop, which must not wait).
func (v *Verifier) ConnContextHere(ctx context.Context, c net.Conn) context.Context {
	return v.newConnFacts(ctx, c, true)
}

func (v *Verifier) newConnFacts(ctx context.Context, c net.Conn, here bool) context.Context {
	f := &connFacts{}
	switch c := c.(type) {
	case *net.TCPConn:
		f.local, _ = peercred.AddrPort(c.LocalAddr())
		f.remote, _ = peercred.AddrPort(c.RemoteAddr())
	case *net.UnixConn:
		f.viaUnix = true
	}
	f.door, _ = doorKeyOf(c.LocalAddr())
	f.epoch = v.forwards.epochNow()
	var uid uint32
	var err error
	select {
	case v.lookups <- struct{}{}:
		if here {
			uid, err = peercred.ConnPeerUID(c)
			<-v.lookups
			f.peerUID = func(context.Context) (uint32, error) { return uid, err }
			break
		}
		done := make(chan struct{})
		go func() {
			defer func() { <-v.lookups }()
			defer close(done)
			uid, err = peercred.ConnPeerUID(c)
		}()
		f.peerUID = func(context.Context) (uint32, error) {
			<-done
			return uid, err
		}
	default:
		var once sync.Once
		f.peerUID = func(ctx context.Context) (uint32, error) {
			once.Do(func() {
				t := time.NewTimer(peerLookupWait)
				defer t.Stop()
				select {
				case v.lookups <- struct{}{}:
					defer func() { <-v.lookups }()
					uid, err = peercred.ConnPeerUID(c)
				case <-t.C:
					err = errors.New("too many connections are being judged at once")
				case <-ctx.Done():
					err = ctx.Err()
				}
			})
			return uid, err
		}
	}
	return context.WithValue(ctx, connFactsKey{}, f)
}

// judgeConn answers S5a and S5b for one connection.
func (v *Verifier) judgeConn(ctx context.Context, f *connFacts) *proxy.Refusal {
	want, err := v.tailscaledUID()
	if err != nil {
		return unverified("cannot tell which user runs tailscaled: " + err.Error())
	}
	if want == overflowUID {
		// In a user namespace (systemd PrivateUsers=) every unmapped user shows as 65534: that
		// uid cannot tell tailscaled from anyone else.
		return unverified("tailscaled's uid shows as 65534 (nobody): run tailscaled as root or fleet outside a user namespace")
	}
	got, err := f.peerUID(ctx)
	if err != nil {
		return unverified("cannot tell who opened the connection: " + err.Error())
	}
	if got != want {
		f.localCaller = true
		return unverified("this door is for callers on your tailnet, through Tailscale Serve; this request came from a process on this machine, not from tailscaled")
	}
	if f.viaUnix {
		return nil
	}
	st, ref := v.tailscaleStatus(ctx)
	if ref != nil {
		return ref
	}
	if st.TUN {
		// A kernel TUN never forwards a peer straight to 127.0.0.1 (SPEC S5b).
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, localAPITimeout)
	defer cancel()
	_, err = v.api.WhoIs(wctx, f.remote.String())
	switch {
	case errors.Is(err, local.ErrPeerNotFound):
		return nil
	case err == nil:
		return unverified("a tailnet peer reached this port directly, not through Tailscale Serve")
	default:
		return v.apiDown(err)
	}
}

// factsOf is what ConnContext recorded for r's connection, or nil.
func factsOf(r *http.Request) *connFacts {
	f, _ := r.Context().Value(connFactsKey{}).(*connFacts)
	return f
}

// judgeConnOnce is judgeConn, once per connection: its first request that needs it judges, the
// others wait for and reuse the answer.
func (v *Verifier) judgeConnOnce(ctx context.Context, f *connFacts) *proxy.Refusal {
	f.once.Do(func() { f.ref = v.judgeConn(ctx, f) })
	return f.ref
}

// LocalCaller reports whether r's connection was opened by a process on this machine that is not
// tailscaled (S5a): such a caller is refused, and a door may tell it where to go instead. It is
// false until the connection has been judged, and for a connection ConnContext did not see.
func LocalCaller(r *http.Request) bool {
	f := factsOf(r)
	return f != nil && f.localCaller
}

// RestoreServeHost is the unix door's Host: call it on every request of that door before the
// request is judged. Serve tells a unix-socket backend "Host: localhost"
// and puts the name the caller used in X-Forwarded-Host; so, on a unix-socket connection whose
// peer is tailscaled's uid, and only there, RestoreServeHost sets r.Host to that single
// X-Forwarded-Host. A request from any other peer, on any other connection, or with no single
// well-formed X-Forwarded-Host keeps its Host.
func (v *Verifier) RestoreServeHost(r *http.Request) {
	f := factsOf(r)
	if f == nil || !f.viaUnix || !contract.EqualFoldASCII(r.Host, "localhost") {
		return
	}
	if v.judgeConnOnce(r.Context(), f) != nil {
		return
	}
	xfh := r.Header.Values("X-Forwarded-Host")
	if len(xfh) != 1 || strings.ContainsAny(xfh[0], ", /\\@") {
		return
	}
	if _, ok := contract.ParseHost(xfh[0]); !ok {
		return
	}
	r.Host = xfh[0]
}
