package reach

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
)

// This file ties a resumed TLS session to the device that showed its credential on the
// connection where the session began (SPEC R6d), so that a phone's new connections are its own
// from their handshake on: strangers sharing its address cannot evict them while they wait for
// their first request.
//
// Go's server sends its session ticket during the handshake, before any request, so a ticket
// cannot name a device. Instead each ticket carries a handle: 16 random bytes sealed into it
// with the session (tls.Config.WrapSession, under session ticket keys that crypto/tls makes and
// rotates, kept in memory only). A connection's configuration is its own (GetConfigForClient),
// so the door knows which connection each handle was given to, and maps the handle to a device
// once a request on that connection shows the device's valid credential. A connection that
// resumes a session whose handle maps to a device is that device's (connTable.resumed).
//
// What a handle is not:
//
//   - a credential: it admits nothing. Every request is still judged by its cookie, and a
//     resumed connection of a revoked device, or one whose requests show no cookie, gets what a
//     stranger gets (R10);
//   - a way in for someone who saw the ticket go by: a resumption is believed only on TLS 1.3,
//     whose PSK binder proves, before the server's answer, that the client holds the session's
//     secret (RFC 8446 §4.2.11). A TLS 1.2 client can resume, and is judged by its cookie as
//     ever, but its connection is a stranger's until its cookie shows;
//   - lasting: a revocation forgets the device's handles at once (connTable.revoke), a device
//     keeps its handlesPerDevice newest, and all are lost with the door (a restart, a move),
//     whose ticket keys go with them: the next connection is a full handshake.

// ticketHandle is the opaque handle sealed into a session ticket.
type ticketHandle [16]byte

// handleTag marks the handle among a session's extra data (tls.SessionState.Extra).
var handleTag = []byte("fleet-reach-handle-1:")

// handlesPerDevice is how many handles a device keeps: those of the tickets given last on its
// connections. A client resumes with one of the last few tickets it was given; 64 leaves room
// for a browser's several connections opened at once, and bounds the memory at about 5 KiB a
// device.
const handlesPerDevice = 64

// handleRing is a device's handles, the oldest overwritten first.
type handleRing struct {
	h    [handlesPerDevice]ticketHandle
	n    int
	next int
}

// tlsConfig is base made to give every connection its own configuration, whose tickets carry
// the connection's handle (R6d). base is not changed.
func (t *connTable) tlsConfig(base *tls.Config) *tls.Config {
	tmpl := base.Clone()
	// sealer's ticket keys seal every ticket of this door: one set, generated and rotated by
	// crypto/tls, shared by the connections' own configurations.
	sealer := &tls.Config{}
	t.sealer.Store(sealer)
	out := base.Clone()
	out.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := connOf(hello.Conn)
		if c == nil || c.table != t {
			return nil, nil
		}
		cfg := tmpl.Clone()
		cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
			return t.wrap(c, sealer, cs, ss)
		}
		cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
			return t.unwrap(c, sealer, identity, cs)
		}
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			t.resumed(c, cs)
			t.settle(c)
			return nil
		}
		return cfg, nil
	}
	return out
}

// wrap seals ss into the ticket connection c is given, with a new handle of its own.
func (t *connTable) wrap(c *conn, sealer *tls.Config, cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	var h ticketHandle
	rand.Read(h[:])
	t.resumed(c, cs) // a resuming connection is its device's before its new ticket is mapped
	t.mu.Lock()
	c.issued, c.hasIssued = h, true
	if c.kind == deviceConn {
		t.mapHandleLocked(h, c.id6)
	}
	t.mu.Unlock()
	ss.Extra = append(ss.Extra, append(bytes.Clone(handleTag), h[:]...))
	return sealer.EncryptTicket(cs, ss)
}

// unwrap opens a ticket that c offers, and remembers its handle: crypto/tls tries the offered
// tickets in order and resumes, if at all, the one it opened last.
func (t *connTable) unwrap(c *conn, sealer *tls.Config, identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	ss, err := sealer.DecryptTicket(identity, cs)
	h, found := handleOf(ss)
	t.mu.Lock()
	c.unwrapped, c.hasUnwrapped = h, found
	if found && err == nil {
		// From here to the end of the handshake the door is working on this connection: a flood
		// that fills the source's bound meanwhile must not evict it (claimHandleLocked).
		t.claimHandleLocked(c, h)
	}
	t.mu.Unlock()
	return ss, err
}

// resumed makes c the device's whose handle its resumed session carries, when it resumed on
// TLS 1.3 (its binder checked: the client holds the session's secret) and the handle maps to a
// device that has not been revoked since. It may close c (R6e).
func (t *connTable) resumed(c *conn, cs tls.ConnectionState) {
	if !cs.DidResume || cs.Version != tls.VersionTLS13 {
		return
	}
	t.mu.Lock()
	id6, ok := "", false
	if c.hasUnwrapped && (c.kind == strangerConn || c.kind == claimedConn) {
		id6, ok = t.handles[c.unwrapped]
	}
	var evicted *conn
	kept := true
	if ok {
		evicted, kept = t.promoteLocked(c, id6)
	}
	t.mu.Unlock()
	t.closeEvicted(c, evicted, kept)
}

// handleOf is the handle sealed into ss, if any.
func handleOf(ss *tls.SessionState) (h ticketHandle, ok bool) {
	if ss == nil {
		return h, false
	}
	for _, e := range ss.Extra {
		if rest, found := bytes.CutPrefix(e, handleTag); found && len(rest) == len(h) {
			copy(h[:], rest)
			ok = true
		}
	}
	return h, ok
}

// claimLocked is asked of a stranger's connection c whose ClientHello, hello, has arrived whole
// and has not been read yet: when it offers a session whose handle maps to a live device, c is
// claimed — no bound evicts it — until its handshake says whether it resumed that session
// (settle). A door whose handshakes fall behind a flood of connections from the phone's own
// address still holds the phone's: an eviction looks at what arrived, not at how far the door
// got with it. The claim proves nothing yet (the ticket's binder is checked in the handshake),
// so a device's claimed connections are bounded (handlesPerDevice) and counted as no device's.
func (t *connTable) claimLocked(c *conn, hello []byte) {
	if c.kind != strangerConn {
		return
	}
	if h, ok := t.offeredHandle(hello); ok {
		t.claimHandleLocked(c, h)
	}
}

// offeredHandle is the handle sealed into the first session ticket that hello, a whole
// ClientHello from a connection's first byte, offers to resume, if it is one of this door's.
func (t *connTable) offeredHandle(hello []byte) (ticketHandle, bool) {
	sealer := t.sealer.Load()
	identity := helloTicket(hello)
	if identity == nil || sealer == nil {
		return ticketHandle{}, false
	}
	ss, _ := sealer.DecryptTicket(identity, tls.ConnectionState{})
	return handleOf(ss)
}

// claimHandleLocked claims the stranger's connection c for the device whose handle h is, as
// claimLocked says, when h maps to a live device: whether c's ClientHello was seen whole in the
// kernel's buffer by an eviction (claimLocked), or read whole by the door (arrivedLocked), or
// opened by its handshake (unwrap), whose end settles the claim.
func (t *connTable) claimHandleLocked(c *conn, h ticketHandle) {
	if c.kind != strangerConn {
		return
	}
	id6, ok := t.handles[h]
	if !ok || t.claims[id6] >= handlesPerDevice {
		return
	}
	t.delistLocked(c) // its idle timer runs on: a claimed connection idles out as a stranger's
	c.kind, c.claimedBy = claimedConn, id6
	t.claims[id6]++
}

// unclaimLocked forgets c's claim; c is the caller's to make something else.
func (t *connTable) unclaimLocked(c *conn) {
	if t.claims[c.claimedBy]--; t.claims[c.claimedBy] <= 0 {
		delete(t.claims, c.claimedBy)
	}
	c.claimedBy = ""
}

// settle makes c, at the end of its handshake, a stranger's again when it is still claimed: it
// did not resume the session it offered, or that device was revoked meanwhile.
func (t *connTable) settle(c *conn) {
	t.mu.Lock()
	var evicted []*conn
	if c.kind == claimedConn {
		t.unclaimLocked(c)
		evicted = t.makeRoomLocked(c.key, 0)
		t.enlistLocked(c)
	}
	t.mu.Unlock()
	for _, e := range evicted {
		e.Conn.Close()
	}
}

// mapHandleLocked maps h to device id6, forgetting the device's oldest handle past
// handlesPerDevice.
func (t *connTable) mapHandleLocked(h ticketHandle, id6 string) {
	if t.handles[h] == id6 {
		return
	}
	r := t.rings[id6]
	if r == nil {
		r = &handleRing{}
		t.rings[id6] = r
	}
	if r.n == len(r.h) {
		if old := r.h[r.next]; t.handles[old] == id6 {
			delete(t.handles, old)
		}
	} else {
		r.n++
	}
	r.h[r.next] = h
	r.next = (r.next + 1) % len(r.h)
	t.handles[h] = id6
}

// dropHandlesLocked forgets every handle of device id6.
func (t *connTable) dropHandlesLocked(id6 string) {
	r := t.rings[id6]
	if r == nil {
		return
	}
	for i := 0; i < r.n; i++ {
		if t.handles[r.h[i]] == id6 {
			delete(t.handles, r.h[i])
		}
	}
	delete(t.rings, id6)
}
