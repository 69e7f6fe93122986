// Package peercred tells who is at the other end of a connection on this machine: the uid that
// owns the peer's socket. The supervisor uses it to know tailscaled (SPEC S5a); a console uses it
// to know that a "local" caller is really its own user; and every fleet client uses it (DialOwn)
// to send the fleet token only to a server run by the same user, never to a process that took a
// port over while the real server was down.
//
// Both ends of a loopback connection are sockets on this machine, in this network namespace, and
// the kernel knows which uid owns each:
//
//   - PeerUID answers for a loopback TCP connection. On Linux it asks the kernel for the one
//     socket whose own address is the connection's remote address and whose other address is the
//     connection's local address (the peer's end) with netlink sock_diag: one hash lookup, the
//     same cost however many sockets the machine holds. Where this process may not use netlink
//     (a seccomp filter, a systemd unit without AF_NETLINK), it reads /proc/net/tcp and
//     /proc/net/tcp6 instead, up to 4 MiB each (ErrProcNetTooLarge past it).
//   - UnixPeerUID answers for a unix-socket connection: SO_PEERCRED on Linux, LOCAL_PEERCRED
//     on macOS.
//   - DialOwn judges a server before anything is sent to it: the owner of the socket that
//     accepted the connection, or, until it is accepted, of the listening socket that holds it.
//
// Guarantee: all fail closed. Any doubt is an error and never a uid: a server address that is
// not loopback, no matching socket, two matching sockets with different uids, a socket that no
// process owns any more (TIME_WAIT, orphaned: inode 0, and the kernel reports uid 0 for those), a
// netlink or proc error, a proc table past its bound, the invalid uid 4294967295, or a platform
// without an implementation (ErrPeerUIDUnsupported: TCP lookups everywhere but Linux). A caller
// that gets an error must refuse the connection.
//
// The answer is a fact of the connection: judge it once, right after Accept, and keep it with
// the connection (S5). A uid is only as good as the moment it was read: if the peer closes and a
// new socket reuses the same address pair, the new owner is what a later lookup sees. Nothing is
// cached: every call asks the kernel again.
package peercred

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strconv"
)

var (
	// ErrPeerUIDUnsupported is returned where the peer's uid cannot be learned on this
	// platform. The caller must fail closed.
	ErrPeerUIDUnsupported = errors.New("peercred: peer uid lookup is not supported on this platform")

	// ErrPeerUIDNotFound is returned when no live socket is the peer of the connection.
	ErrPeerUIDNotFound = errors.New("peercred: peer socket not found")

	// ErrPeerUIDAmbiguous is returned when sockets owned by different uids match the
	// connection's addresses.
	ErrPeerUIDAmbiguous = errors.New("peercred: peer socket is ambiguous")

	// ErrProcNetTooLarge is returned when a /proc/net/tcp{,6} table is longer than
	// procNetMaxBytes: the lookup fails closed rather than read without bound.
	ErrProcNetTooLarge = errors.New("peercred: socket table too large to read")
)

// procNetFiles are the tables PeerUID searches on Linux; tests point it at samples.
var procNetFiles = []string{"/proc/net/tcp", "/proc/net/tcp6"}

// procNetInvalidUID is (uid_t)-1: "no uid". It is never a valid answer.
const procNetInvalidUID = 1<<32 - 1

// procNetMaxLine bounds a line of /proc/net/tcp{,6}; a real one is under 200 bytes. Longer
// lines are skipped.
const procNetMaxLine = 4096

// procNetNormalize puts an address in the form /proc/net/tcp{,6} compare against: IPv4-mapped
// IPv6 unmapped to IPv4 (a v4 connection on a dual-stack socket is listed in tcp6 as
// ::ffff:a.b.c.d, its v4 peer in tcp as a.b.c.d), and no zone (the proc files carry none).
func procNetNormalize(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// parseProcNetTCP reads a file in the format of Linux's /proc/net/tcp or /proc/net/tcp6 and
// returns the uid owning the socket whose local_address is remote and whose rem_address is
// local (the peer's end of a connection that the server sees as local <-> remote).
//
// Only live, owned sockets count: state ESTABLISHED, FIN_WAIT1, FIN_WAIT2, CLOSE_WAIT,
// LAST_ACK or CLOSING, with a nonzero inode (TIME_WAIT and FIN_WAIT2 timewait entries and
// orphans show inode 0 and a made-up uid 0). Malformed lines, the header, and lines of either
// family are handled alike: what does not parse exactly is skipped. found is false when nothing
// matched; err is ErrPeerUIDAmbiguous when entries with different uids matched, or a read error.
func parseProcNetTCP(r io.Reader, local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	local, remote = procNetNormalize(local), procNetNormalize(remote)
	br := bufio.NewReaderSize(r, procNetMaxLine)
	for {
		line, rerr := procNetReadLine(br)
		if line != nil {
			if e, ok := procNetParseLine(line); ok && e.live() && e.local == remote && e.remote == local {
				if found && e.uid != uid {
					return 0, false, ErrPeerUIDAmbiguous
				}
				uid, found = e.uid, true
			}
		}
		if rerr == io.EOF {
			return uid, found, nil
		}
		if rerr != nil {
			return 0, false, rerr
		}
	}
}

// procNetReadLine returns the next line without its newline, or nil for a line longer than
// procNetMaxLine (which it consumes). The error is io.EOF after the last line.
func procNetReadLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		for err == bufio.ErrBufferFull {
			_, err = br.ReadSlice('\n')
		}
		if err == nil {
			return nil, nil
		}
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte("\n")), err
}

// parseProcNetListen reads a table like parseProcNetTCP and returns the uid owning the listening
// socket that accepts connections to addr: state LISTEN, owned (inode not 0), bound to addr's
// port and to addr itself or a wildcard (0.0.0.0; or :: which, dual-stack, also takes IPv4: the
// table does not say which, so it counts). Sockets of different uids are ErrPeerUIDAmbiguous.
func parseProcNetListen(r io.Reader, addr netip.AddrPort) (uid uint32, found bool, err error) {
	addr = procNetNormalize(addr)
	br := bufio.NewReaderSize(r, procNetMaxLine)
	for {
		line, rerr := procNetReadLine(br)
		if line != nil {
			if e, ok := procNetParseLine(line); ok && e.listens(addr) {
				if found && e.uid != uid {
					return 0, false, ErrPeerUIDAmbiguous
				}
				uid, found = e.uid, true
			}
		}
		if rerr == io.EOF {
			return uid, found, nil
		}
		if rerr != nil {
			return 0, false, rerr
		}
	}
}

// procNetEntry is one parsed line of /proc/net/tcp{,6}.
type procNetEntry struct {
	local, remote netip.AddrPort // normalized with procNetNormalize
	state         uint8          // include/net/tcp_states.h
	uid           uint32         // never procNetInvalidUID
	inode         uint64         // 0: no process holds the socket (its uid is made up)
}

// live reports whether e is an owned socket in a state in which it can be the peer of an
// accepted connection: ESTABLISHED, FIN_WAIT1, FIN_WAIT2, CLOSE_WAIT, LAST_ACK or CLOSING.
func (e procNetEntry) live() bool {
	switch e.state {
	case 0x01, 0x04, 0x05, 0x08, 0x09, 0x0B:
		return e.inode != 0
	}
	return false
}

// listens reports whether e is an owned listener that takes connections to addr.
func (e procNetEntry) listens(addr netip.AddrPort) bool {
	if e.state != 0x0A || e.inode == 0 || e.local.Port() != addr.Port() {
		return false
	}
	a := e.local.Addr()
	return a == addr.Addr() || a == netip.IPv6Unspecified() || (a == netip.IPv4Unspecified() && addr.Addr().Is4())
}

// procNetParseLine parses one line such as
//
//	0: 0100007F:1CF4 0100007F:D2A6 01 00000000:00000000 00:00000000 00000000  1000        0 41873 1 0000000000000000 20 4 30 10 -1
//
// (sl, local_address, rem_address, st, tx_queue:rx_queue, tr:tm->when, retrnsmt, uid, timeout,
// inode, ...). ok is false for anything that is not exactly such a line with a valid uid.
func procNetParseLine(line []byte) (e procNetEntry, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 10 {
		return e, false
	}
	sl := f[0]
	if len(sl) < 2 || sl[len(sl)-1] != ':' {
		return e, false
	}
	if _, err := strconv.ParseUint(string(sl[:len(sl)-1]), 10, 32); err != nil {
		return e, false
	}
	local, ok1 := procNetParseAddrPort(f[1])
	remote, ok2 := procNetParseAddrPort(f[2])
	if !ok1 || !ok2 || len(f[1]) != len(f[2]) {
		return e, false
	}
	state, ok := procNetHexUint32(f[3])
	if !ok || len(f[3]) != 2 {
		return e, false
	}
	uid, err := strconv.ParseUint(string(f[7]), 10, 32)
	if err != nil || uid == procNetInvalidUID {
		return e, false
	}
	inode, err := strconv.ParseUint(string(f[9]), 10, 64)
	if err != nil {
		return e, false
	}
	return procNetEntry{local: local, remote: remote, state: uint8(state), uid: uint32(uid), inode: inode}, true
}

// procNetParseAddrPort parses "0100007F:1CF4" (IPv4: one 32-bit word) or
// "00000000000000000000000001000000:1CF4" (IPv6: four words). Each word is printed in host byte
// order; the port is the plain number in hex.
func procNetParseAddrPort(s []byte) (netip.AddrPort, bool) {
	i := bytes.IndexByte(s, ':')
	if i < 0 || len(s)-i-1 != 4 {
		return netip.AddrPort{}, false
	}
	hexAddr, hexPort := s[:i], s[i+1:]
	port, ok := procNetHexUint32(hexPort)
	if !ok {
		return netip.AddrPort{}, false
	}
	var b [16]byte
	switch len(hexAddr) {
	case 8, 32:
	default:
		return netip.AddrPort{}, false
	}
	for w := 0; w < len(hexAddr)/8; w++ {
		v, ok := procNetHexUint32(hexAddr[8*w : 8*w+8])
		if !ok {
			return netip.AddrPort{}, false
		}
		binary.NativeEndian.PutUint32(b[4*w:], v)
	}
	var addr netip.Addr
	if len(hexAddr) == 8 {
		addr = netip.AddrFrom4([4]byte(b[:4]))
	} else {
		addr = netip.AddrFrom16(b)
	}
	return procNetNormalize(netip.AddrPortFrom(addr, uint16(port))), true
}

// procNetHexUint32 parses 1 to 8 hex digits, nothing else (no sign, prefix or underscore).
func procNetHexUint32(s []byte) (uint32, bool) {
	if len(s) == 0 || len(s) > 8 {
		return 0, false
	}
	var v uint32
	for _, c := range s {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(d)
	}
	return v, true
}
