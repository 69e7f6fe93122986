package reach

import (
	"sync"

	"golang.org/x/crypto/cryptobyte"
)

// This file is how the door knows whether a connection's ClientHello has fully arrived (SPEC
// R6d): among strangers' connections, those still waiting for theirs are evicted first, so that
// a flood of bare connections from a phone's own address evicts its own before the phone's.

// helloScan follows the TLS records at the start of a connection, as its bytes arrive, until
// the first handshake message — a client's ClientHello — is whole. It keeps only lengths: a
// byte of the message's body is counted, never kept. Anything that is not a handshake record
// holding a ClientHello makes it give up (bad): such a connection's hello never arrives, and its
// handshake fails anyway.
type helloScan struct {
	hdr     [5]byte // the current record's header, hdrN bytes of it so far
	hdrN    int
	recLeft int     // body bytes of the current record still to come
	hs      [4]byte // the handshake message's header, hsN bytes of it so far
	hsN     int
	hsLeft  int // body bytes of the handshake message still to come, once hsN is 4
	done    bool
	bad     bool
}

const (
	recordTypeHandshake    = 22
	handshakeTypeClientHel = 1
)

// feed scans b, the next bytes of the connection; it reports whether the ClientHello is whole.
func (s *helloScan) feed(b []byte) bool {
	for len(b) > 0 && !s.done && !s.bad {
		if s.recLeft == 0 {
			n := copy(s.hdr[s.hdrN:], b)
			s.hdrN += n
			b = b[n:]
			if s.hdrN < len(s.hdr) {
				break
			}
			s.hdrN = 0
			s.recLeft = int(s.hdr[3])<<8 | int(s.hdr[4])
			if s.hdr[0] != recordTypeHandshake || s.recLeft == 0 {
				s.bad = true
			}
			continue
		}
		body := b[:min(len(b), s.recLeft)]
		b = b[len(body):]
		s.recLeft -= len(body)
		if s.hsN < len(s.hs) {
			n := copy(s.hs[s.hsN:], body)
			s.hsN += n
			body = body[n:]
			if s.hsN < len(s.hs) {
				continue
			}
			if s.hs[0] != handshakeTypeClientHel {
				s.bad = true
				break
			}
			s.hsLeft = int(s.hs[1])<<16 | int(s.hs[2])<<8 | int(s.hs[3])
		}
		n := min(len(body), s.hsLeft)
		s.hsLeft -= n
		if s.hsLeft == 0 {
			s.done = true
		}
	}
	return s.done
}

// helloState is a connection's helloScan, fed by its reads and looked at by evictions.
type helloState struct {
	mu   sync.Mutex
	scan helloScan
	// kept is what the door has read of the ClientHello while it came in pieces, up to
	// peekLimit, so that the whole hello can be asked for its ticket (R6d); tooLong: it was
	// longer, and is not kept.
	kept    []byte
	tooLong bool
	// offered is the handle of the door's own ticket that the ClientHello the door read offers
	// to resume (R6d), when hasOffer: set with scan's done, so that whoever sees one sees both.
	offered  ticketHandle
	hasOffer bool
}

// read scans b, just read from the connection; it reports whether the ClientHello became whole
// with it. The whole hello, as read from the connection's first byte, is then asked for the
// handle of the ticket it offers (open) unless it was longer than peekLimit.
func (h *helloState) read(b []byte, open func(hello []byte) (ticketHandle, bool)) (whole bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.scan.done || h.scan.bad {
		return false
	}
	fresh := h.scan == helloScan{}
	whole = h.scan.feed(b)
	hello := b // the common case: the whole hello in one read, nothing kept
	if !whole || !fresh {
		switch {
		case h.scan.bad || h.tooLong:
			h.kept = nil
		case len(h.kept)+len(b) > peekLimit:
			h.kept, h.tooLong = nil, true
		default:
			if h.kept == nil && fresh && len(b) >= 5 { // room for the whole record at once
				h.kept = make([]byte, 0, min(peekLimit, 5+(int(b[3])<<8|int(b[4]))))
			}
			h.kept = append(h.kept, b...)
		}
		hello = h.kept
	}
	if whole {
		h.kept = nil
		if hello != nil {
			h.offered, h.hasOffer = open(hello)
		}
	}
	return whole
}

// offer is the handle of the ticket that the ClientHello the door read offers, if any.
func (h *helloState) offer() (ticketHandle, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.offered, h.hasOffer
}

// arrivedWith reports whether the ClientHello is whole once pending, the bytes that arrived and
// are not read yet, are counted too; fresh is whether nothing of the connection had been read,
// so that pending starts with the ClientHello.
func (h *helloState) arrivedWith(pending []byte) (arrived, fresh bool) {
	h.mu.Lock()
	s := h.scan
	h.mu.Unlock()
	fresh = s == helloScan{}
	return s.done || s.feed(pending), fresh
}

// helloTicket is the first session ticket that hello — a whole ClientHello record, from the
// connection's first byte — offers to resume (its pre_shared_key extension, RFC 8446 §4.2.11),
// or nil. It reads only lengths and the identity: nothing is checked that the handshake does not
// check again.
func helloTicket(hello []byte) []byte {
	s := cryptobyte.String(hello)
	var rec, msg cryptobyte.String
	var recType, hsType uint8
	var version uint16
	if !s.ReadUint8(&recType) || recType != recordTypeHandshake || !s.ReadUint16(&version) ||
		!s.ReadUint16LengthPrefixed(&rec) || !rec.ReadUint8(&hsType) || hsType != handshakeTypeClientHel ||
		!rec.ReadUint24LengthPrefixed(&msg) {
		return nil
	}
	var sessionID, suites, compression, exts cryptobyte.String
	if !msg.Skip(2+32) || !msg.ReadUint8LengthPrefixed(&sessionID) || !msg.ReadUint16LengthPrefixed(&suites) ||
		!msg.ReadUint8LengthPrefixed(&compression) || !msg.ReadUint16LengthPrefixed(&exts) {
		return nil
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return nil
		}
		if typ != extensionPreSharedKey {
			continue
		}
		var identities, identity cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&identities) || !identities.ReadUint16LengthPrefixed(&identity) {
			return nil
		}
		return identity
	}
	return nil
}

const extensionPreSharedKey = 41
