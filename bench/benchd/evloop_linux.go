package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/phase-console/fleet/internal/peercred"
)

// evloop is an event loop for a hop, as nginx is built: one loop per core on raw descriptors,
// each with its own epoll (edge-triggered; a read that comes back short ends the reading) and its
// own kept backend connections, and no goroutine, netFD, deadline or finalizer per connection. A
// kept backend connection that turns readable while idle is closed, as nginx's keepalive module
// closes it: no look before each reuse. Like the floor, it does no parsing past the heads'
// framing and checks nothing — a measuring tool, never to be run as a proxy; unlike the floor,
// it passes on only answers of a known length (bench/run does not send it the chunked 64 KiB
// workload). With -work,
// -connwork and -s5a it carries a model of fleet's own work (spin.go) and fleet's real owner
// lookup of each accepted connection (SPEC S5a: sock_diag, then TCP_INFO), to ask what fleet
// would reach on such a loop (bench/RESULTS.md).
func evloop(args []string) error {
	fs := flag.NewFlagSet("evloop", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18084", "listen address (IPv4)")
	backend := fs.String("backend", "127.0.0.1:18080", "the backend (IPv4)")
	loops := fs.Int("loops", runtime.NumCPU(), "event loops, each on its own thread and listener (SO_REUSEPORT)")
	work := fs.Float64("work", 0, "µs of user-space work to spend on each request (spin.go)")
	connWork := fs.Float64("connwork", 0, "µs of user-space work to spend on each accepted connection")
	s5a := fs.Bool("s5a", false, "look up who owns each accepted connection's peer, as fleet's S5a does")
	fs.Parse(args)
	ap, err := netip.ParseAddrPort(*addr)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("evloop: -addr %q is not an IPv4 address and port", *addr)
	}
	bp, err := netip.ParseAddrPort(*backend)
	if err != nil || !bp.Addr().Is4() {
		return fmt.Errorf("evloop: -backend %q is not an IPv4 address and port", *backend)
	}
	spin(*work) // calibrates before the first request
	errs := make(chan error, *loops)
	for range *loops {
		ln, err := listenReusePort(ap)
		if err != nil {
			return err
		}
		ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return err
		}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ln, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ln)}); err != nil {
			return err
		}
		l := &evLoop{ep: ep, ln: ln, conns: map[int]*evConn{}, work: *work, connWork: *connWork, s5a: *s5a,
			backend: &unix.SockaddrInet4{Port: int(bp.Port()), Addr: bp.Addr().As4()}}
		go func() { errs <- l.run() }()
	}
	return <-errs
}

func listenReusePort(ap netip.AddrPort) (int, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return -1, err
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		return -1, err
	}
	return ln, unix.Listen(ln, 4096)
}

// An evConn is a caller's connection or a kept backend connection.
type evConn struct {
	fd       int
	upstream bool
	buf      []byte  // bytes read and not yet used
	out      []byte  // bytes to write and not yet written
	peer     *evConn // in an exchange: the caller's backend connection, or the backend's caller
	closing  bool    // the caller asked for Connection: close
	dead     bool
}

type evLoop struct {
	ep, ln   int
	conns    map[int]*evConn
	idle     []*evConn // kept backend connections
	backend  unix.Sockaddr
	work     float64
	connWork float64
	s5a      bool
}

func (l *evLoop) run() error {
	runtime.LockOSThread()
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(l.ep, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == l.ln {
				l.accept()
				continue
			}
			c := l.conns[fd]
			if c == nil || c.dead {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 && len(c.out) > 0 {
				l.flush(c)
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0 && !c.dead {
				l.readable(c)
			}
		}
	}
}

func (l *evLoop) accept() {
	for {
		fd, peer, err := unix.Accept4(l.ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: accepted all there were
		}
		if l.s5a {
			if err := lookUpOwner(fd, peer); err != nil {
				unix.Close(fd)
				continue
			}
		}
		spin(l.connWork)
		l.add(&evConn{fd: fd, buf: make([]byte, 0, 4096)})
	}
}

// lookUpOwner does what fleet's S5a does for an accepted connection: asks the kernel who owns the
// socket at its other end (sock_diag), then checks that this one still holds the connection.
func lookUpOwner(fd int, peer unix.Sockaddr) error {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return err
	}
	l4, ok1 := sa.(*unix.SockaddrInet4)
	r4, ok2 := peer.(*unix.SockaddrInet4)
	if !ok1 || !ok2 {
		return errors.New("not IPv4")
	}
	local := netip.AddrPortFrom(netip.AddrFrom4(l4.Addr), uint16(l4.Port))
	remote := netip.AddrPortFrom(netip.AddrFrom4(r4.Addr), uint16(r4.Port))
	if _, err := peercred.PeerUID(local, remote); err != nil {
		return err
	}
	_, err = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	return err
}

func (l *evLoop) add(c *evConn) {
	l.conns[c.fd] = c
	unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLET | unix.EPOLLRDHUP, Fd: int32(c.fd)})
}

// close closes c and the other end of its exchange, if any: a backend connection caught
// mid-exchange is not reusable, and a caller whose answer broke off is not answered.
func (l *evLoop) close(c *evConn) {
	if c.dead {
		return
	}
	c.dead = true
	delete(l.conns, c.fd)
	unix.Close(c.fd)
	if p := c.peer; p != nil {
		p.peer = nil
		l.close(p)
	}
}

// readable reads what c holds, then acts on it.
func (l *evLoop) readable(c *evConn) {
	for {
		if cap(c.buf)-len(c.buf) < 2048 {
			grown := make([]byte, len(c.buf), 2*cap(c.buf)+4096)
			copy(grown, c.buf)
			c.buf = grown
		}
		room := cap(c.buf) - len(c.buf)
		n, err := unix.Read(c.fd, c.buf[len(c.buf):cap(c.buf)])
		if n > 0 {
			c.buf = c.buf[:len(c.buf)+n]
			if n < room {
				break // drained: edge-triggered, more bytes bring another event
			}
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err == unix.EINTR {
			continue
		}
		l.close(c) // end of stream or an error
		return
	}
	if c.upstream {
		l.answer(c)
	} else {
		l.request(c)
	}
}

var (
	headEndMark       = []byte("\r\n\r\n")
	evConnectionClose = []byte("Connection: close\r\n\r\n")
)

// request sends the caller's next request, without its Connection line, to a kept backend
// connection (or a new one).
func (l *evLoop) request(c *evConn) {
	if c.peer != nil || len(c.out) > 0 {
		return // one exchange at a time; a pipelined request waits in buf
	}
	end := bytes.Index(c.buf, headEndMark)
	if end < 0 {
		return
	}
	spin(l.work)
	head := c.buf[:end+4]
	c.closing = false
	var up *evConn
	if n := len(l.idle); n > 0 {
		up = l.idle[n-1]
		l.idle = l.idle[:n-1]
	} else {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			if err = unix.Connect(fd, l.backend); err == nil {
				err = unix.SetNonblock(fd, true)
			}
			if err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			l.close(c)
			return
		}
		up = &evConn{fd: fd, upstream: true, buf: make([]byte, 0, 4096)}
		l.add(up)
	}
	up.out = up.out[:0]
	for rest := head; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		if hasFieldName(line, connectionField) {
			c.closing = containsFold(line, closeToken)
			continue
		}
		up.out = append(up.out, line...)
	}
	c.buf = c.buf[:copy(c.buf, c.buf[end+4:])]
	up.peer, c.peer = c, up
	l.flush(up)
}

// answer passes a backend's answer on once all of it is there (a Content-Length answer only).
func (l *evLoop) answer(up *evConn) {
	c := up.peer
	if c == nil {
		l.close(up) // bytes, or the end, on an idle connection
		return
	}
	end := bytes.Index(up.buf, headEndMark)
	if end < 0 {
		return
	}
	length := -1
	for rest := up.buf[:end+2]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		if hasFieldName(line, contentLengthField) {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLengthField):])))
		}
	}
	if length < 0 {
		l.close(up)
		return
	}
	total := end + 4 + length
	if len(up.buf) < total {
		return
	}
	if c.closing {
		c.out = append(c.out, up.buf[:end+2]...)
		c.out = append(c.out, evConnectionClose...)
		c.out = append(c.out, up.buf[end+4:total]...)
	} else {
		c.out = append(c.out, up.buf[:total]...)
	}
	extra := len(up.buf) > total
	up.buf = up.buf[:0]
	up.peer, c.peer = nil, nil
	if extra {
		l.close(up)
	} else {
		l.idle = append(l.idle, up)
	}
	l.flush(c)
}

// flush writes what c has to write, as far as the socket takes it (EPOLLOUT brings the rest).
func (l *evLoop) flush(c *evConn) {
	for len(c.out) > 0 {
		n, err := unix.Write(c.fd, c.out)
		if n > 0 {
			c.out = c.out[n:]
			continue
		}
		if err == unix.EAGAIN {
			return
		}
		if err == unix.EINTR {
			continue
		}
		l.close(c)
		return
	}
	c.out = c.out[:0]
	if !c.upstream && c.peer == nil {
		if c.closing {
			l.close(c)
			return
		}
		if len(c.buf) > 0 {
			l.request(c) // a pipelined request
		}
	}
}
