//go:build linux

package peercred

// One socket's owner, asked of the kernel by its addresses: netlink NETLINK_SOCK_DIAG,
// SOCK_DIAG_BY_FAMILY, an inet_diag_req_v2 naming the exact addresses and no dump flag. The
// kernel answers from the same hash lookup that routes a packet to the socket (inet_lookup), so
// the cost does not grow with the number of sockets on the machine, unlike reading /proc/net/tcp.
//
// x/sys/unix has the netlink constants but not the inet_diag structures; their layout is the
// kernel's stable ABI (include/uapi/linux/inet_diag.h) and is written out below.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// TCP states (include/net/tcp_states.h).
const (
	tcpEstablished = 1
	tcpSynRecv     = 3
	tcpFinWait1    = 4
	tcpFinWait2    = 5
	tcpTimeWait    = 6
	tcpCloseWait   = 8
	tcpLastAck     = 9
	tcpListen      = 10
	tcpClosing     = 11
	tcpNewSynRecv  = 12
)

// tcpLiveState reports whether a socket in state st can be the peer of a connection that its
// other end still holds (the states procNetLiveStates lists).
func tcpLiveState(st uint8) bool {
	switch st {
	case tcpEstablished, tcpFinWait1, tcpFinWait2, tcpCloseWait, tcpLastAck, tcpClosing:
		return true
	}
	return false
}

// sockFact is what the kernel says about one socket. inode 0 means that no open file holds the
// socket (a connection not yet accept()ed, TIME_WAIT, an orphan): its uid is then no one's.
type sockFact struct {
	state uint8
	uid   uint32
	inode uint64
}

const (
	sizeofNlmsghdr      = 16
	sizeofInetDiagReqV2 = 56
	sizeofInetDiagMsg   = 72
	diagRecvBuf         = 8192 // one inet_diag_msg and the few attributes the kernel adds
	loopbackIfindex     = 1    // LOOPBACK_IFINDEX: lo is interface 1 in every network namespace
)

// errNetlinkRefused wraps an error that says this process may not use NETLINK_SOCK_DIAG (a
// seccomp filter, a systemd unit's RestrictAddressFamilies=, a kernel without it): only then is
// /proc used instead.
var errNetlinkRefused = errors.New("netlink sock_diag refused")

// errDiagNotFound is the kernel's answer when no socket has the addresses asked for.
var errDiagNotFound = errors.New("no such socket")

// diagOpen opens a NETLINK_SOCK_DIAG socket; tests replace it to refuse netlink.
var diagOpen = func() (int, error) {
	return unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
}

// diagPoolSize is how many idle netlink sockets are kept for reuse. A socket is returned to the
// pool only after a lookup that read its whole answer, so a pooled socket never holds a stale
// reply. Keeping them makes a lookup about twice as fast as opening a socket for each
// (BenchmarkPeerUID).
const diagPoolSize = 8

var (
	diagPool    = make(chan int, diagPoolSize)
	diagPooling = true // tests turn it off to measure a socket per lookup
	diagSeq     atomic.Uint32
)

var diagBufs = sync.Pool{New: func() any { return new([diagRecvBuf]byte) }}

func diagRefused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) ||
		errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT)
}

func diagGet() (int, error) {
	select {
	case fd := <-diagPool:
		return fd, nil
	default:
	}
	fd, err := diagOpen()
	if err != nil {
		if diagRefused(err) {
			return -1, fmt.Errorf("%w: %w", errNetlinkRefused, err)
		}
		return -1, fmt.Errorf("netlink socket: %w", err)
	}
	// Connected to the kernel (port 0), the socket takes messages from the kernel only: another
	// process cannot slip in an answer. A reply is queued while the request is sent; the
	// timeout only bounds a kernel that never answers.
	tv := unix.Timeval{Sec: 1}
	err = unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	if err == nil {
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	if err != nil {
		unix.Close(fd)
		if diagRefused(err) {
			return -1, fmt.Errorf("%w: %w", errNetlinkRefused, err)
		}
		return -1, fmt.Errorf("netlink socket: %w", err)
	}
	return fd, nil
}

func diagPut(fd int) {
	if diagPooling {
		select {
		case diagPool <- fd:
			return
		default:
		}
	}
	unix.Close(fd)
}

// diagLookup asks the kernel for the TCP socket whose own end is src and whose other end is dst
// (dst port 0 names no connected socket, so the kernel answers with the listener that would
// accept a connection to src, as for an incoming packet). It returns errDiagNotFound when there
// is none. The answer is not checked against the question; callers do that.
func diagLookup(family uint8, src, dst netip.AddrPort) (sockFact, netip.AddrPort, netip.AddrPort, error) {
	fd, err := diagGet()
	if err != nil {
		return sockFact{}, netip.AddrPort{}, netip.AddrPort{}, err
	}
	f, gotSrc, gotDst, err := diagAsk(fd, family, src, dst)
	if err != nil && !errors.Is(err, errDiagNotFound) {
		unix.Close(fd) // the socket may hold an unread reply: never reuse it
		return sockFact{}, netip.AddrPort{}, netip.AddrPort{}, err
	}
	diagPut(fd)
	return f, gotSrc, gotDst, err
}

func diagAsk(fd int, family uint8, src, dst netip.AddrPort) (sockFact, netip.AddrPort, netip.AddrPort, error) {
	var none netip.AddrPort
	seq := diagSeq.Add(1)
	var req [sizeofNlmsghdr + sizeofInetDiagReqV2]byte
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST) // no NLM_F_DUMP: one exact lookup
	ne.PutUint32(req[8:], seq)
	r := req[sizeofNlmsghdr:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // idiag_states: any (an exact lookup ignores it)
	diagPutAddr(r[8:], family, src, dst)

	if _, err := diagRetry(func() (int, error) { return unix.Write(fd, req[:]) }); err != nil {
		if diagRefused(err) {
			return sockFact{}, none, none, fmt.Errorf("%w: %w", errNetlinkRefused, err)
		}
		return sockFact{}, none, none, fmt.Errorf("netlink send: %w", err)
	}
	// The receive buffer comes from a pool, not the stack: on the stack its 8 KiB made every
	// lookup's goroutine (one per accepted connection) grow its stack three times.
	bp := diagBufs.Get().(*[diagRecvBuf]byte)
	defer diagBufs.Put(bp)
	buf := bp[:]
	for range 4 { // skip what is not the reply to this request (bounded)
		n, err := diagRetry(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return sockFact{}, none, none, fmt.Errorf("netlink receive: %w", err)
		}
		if n < sizeofNlmsghdr {
			return sockFact{}, none, none, errors.New("netlink receive: short message")
		}
		b := buf[:n]
		mlen, typ, mseq := ne.Uint32(b[0:]), ne.Uint16(b[4:]), ne.Uint32(b[8:])
		if mseq != seq {
			continue
		}
		if mlen < sizeofNlmsghdr || int(mlen) > n {
			return sockFact{}, none, none, errors.New("netlink receive: malformed message")
		}
		b = b[sizeofNlmsghdr:mlen]
		switch typ {
		case unix.NLMSG_ERROR:
			if len(b) < 4 {
				return sockFact{}, none, none, errors.New("netlink receive: malformed error")
			}
			errno := -int32(ne.Uint32(b))
			if errno == int32(unix.ENOENT) {
				return sockFact{}, none, none, errDiagNotFound
			}
			return sockFact{}, none, none, fmt.Errorf("sock_diag: %w", unix.Errno(errno))
		case unix.SOCK_DIAG_BY_FAMILY:
			return diagParseMsg(b)
		default:
			return sockFact{}, none, none, fmt.Errorf("netlink receive: unexpected message type %d", typ)
		}
	}
	return sockFact{}, none, none, errors.New("netlink receive: no reply")
}

// diagRetry runs a read or write again while a signal interrupts it (a socket with a receive
// timeout is not restarted after one, and the Go runtime signals its threads to preempt them).
func diagRetry(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// diagPutAddr writes an inet_diag_sockid: ports and addresses in network byte order, a v4
// address in the first word, the loopback interface, and "no cookie".
func diagPutAddr(id []byte, family uint8, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	put := func(b []byte, a netip.Addr) {
		if family == unix.AF_INET {
			a4 := a.Unmap().As4()
			copy(b, a4[:])
		} else {
			a16 := a.As16() // a v4 address as ::ffff:a.b.c.d
			copy(b, a16[:])
		}
	}
	put(id[4:20], src.Addr())
	put(id[20:36], dst.Addr())
	binary.NativeEndian.PutUint32(id[36:], loopbackIfindex)
	binary.NativeEndian.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(id[44:], ^uint32(0))
}

// diagParseMsg reads an inet_diag_msg: the socket's state, uid and inode, and its own and
// other end (IPv4-mapped addresses unmapped, as procNetNormalize does).
func diagParseMsg(b []byte) (sockFact, netip.AddrPort, netip.AddrPort, error) {
	var none netip.AddrPort
	if len(b) < sizeofInetDiagMsg {
		return sockFact{}, none, none, errors.New("sock_diag: short inet_diag_msg")
	}
	ne := binary.NativeEndian
	family, state := b[0], b[1]
	id := b[4:]
	sport, dport := binary.BigEndian.Uint16(id[0:]), binary.BigEndian.Uint16(id[2:])
	var src, dst netip.Addr
	switch family {
	case unix.AF_INET:
		src, dst = netip.AddrFrom4([4]byte(id[4:8])), netip.AddrFrom4([4]byte(id[20:24]))
	case unix.AF_INET6:
		src, dst = netip.AddrFrom16([16]byte(id[4:20])), netip.AddrFrom16([16]byte(id[20:36]))
	default:
		return sockFact{}, none, none, fmt.Errorf("sock_diag: unexpected family %d", family)
	}
	f := sockFact{state: state, uid: ne.Uint32(b[64:]), inode: uint64(ne.Uint32(b[68:]))}
	return f, procNetNormalize(netip.AddrPortFrom(src, sport)), procNetNormalize(netip.AddrPortFrom(dst, dport)), nil
}

// diagFamilies are the families to ask in for an address: a v4 address first as AF_INET, then
// as a v4-mapped AF_INET6 address (a dual-stack socket); a v6 address as AF_INET6.
func diagFamilies(a netip.Addr) []uint8 {
	if a.Unmap().Is4() {
		return []uint8{unix.AF_INET, unix.AF_INET6}
	}
	return []uint8{unix.AF_INET6}
}

// diagPeer returns the socket whose own end is remote and whose other end is local: the peer's
// end of a connection that one side sees as local <-> remote. errDiagNotFound when none.
func diagPeer(local, remote netip.AddrPort) (sockFact, error) {
	local, remote = procNetNormalize(local), procNetNormalize(remote)
	if local.Addr().Is4() != remote.Addr().Is4() {
		return sockFact{}, errDiagNotFound
	}
	for _, fam := range diagFamilies(remote.Addr()) {
		f, src, dst, err := diagLookup(fam, remote, local)
		if errors.Is(err, errDiagNotFound) {
			continue
		}
		if err != nil {
			return sockFact{}, err
		}
		// A lookup that misses every connection falls back to a listener on remote: that
		// socket is not the peer.
		if src != remote || dst != local || f.state == tcpListen {
			continue
		}
		return f, nil
	}
	return sockFact{}, errDiagNotFound
}

// diagListener returns the listening socket that accepts connections to addr, whether bound to
// addr itself or to the wildcard (0.0.0.0, or a dual-stack ::). errDiagNotFound when none.
func diagListener(addr netip.AddrPort) (sockFact, error) {
	addr = procNetNormalize(addr)
	for _, fam := range diagFamilies(addr.Addr()) {
		// The other end's port 0 matches no connection: the kernel looks for a listener.
		var wild netip.Addr
		if addr.Addr().Is4() {
			wild = netip.IPv4Unspecified()
		} else {
			wild = netip.IPv6Unspecified()
		}
		f, src, _, err := diagLookup(fam, addr, netip.AddrPortFrom(wild, 0))
		if errors.Is(err, errDiagNotFound) {
			continue
		}
		if err != nil {
			return sockFact{}, err
		}
		if f.state != tcpListen || src.Port() != addr.Port() || !(src.Addr() == addr.Addr() || src.Addr().IsUnspecified()) {
			continue
		}
		return f, nil
	}
	return sockFact{}, errDiagNotFound
}
