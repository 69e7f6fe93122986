package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/supervisor"
)

// This file is where fleet serve gets its listening sockets and how it hands them on (SPEC O3).
//
// Socket activation: systemd (or systemd-socket-activate) may hand it sockets (LISTEN_FDS,
// LISTEN_PID, LISTEN_FDNAMES): the one named "tcp" is the loopback door's TCP socket, the one
// named "unix" the unix door's; a single socket without a name is the TCP door. Each is judged
// by the rules of the socket fleet would have opened (supervisor.CheckLoopbackListener: 127.0.0.1
// only, S1; supervisor.CheckUnixListener: a private place, S5e, F1) and refused otherwise.
//
// Handoff: SIGUSR2 starts the binary now at the path fleet serve was started from, with the
// same arguments, and hands it every listening socket — both loopback doors and the direct-reach
// door — and the state folder's lock (package tableflip passes the descriptors and tells when
// the new process is ready). Once it is ready, this process stops accepting, drains
// (supervisor.Server.Drain) and exits; a new process that fails to start, or is not ready within
// handoffTimeout, is killed, and this one serves on and says why (fleet.handoff-failed).
//
// The lock (internal/state: one fleet serve per state folder) is an flock, which belongs to the
// open file: the new process inherits a descriptor of the same open file, so it holds the very
// lock this one holds (state.AdoptLock checks it is that folder's lock file and that the lock is
// its to hold). Nothing else can take the lock in between, and a fleet serve started on its own
// is refused as ever.

// Names of what is handed on, as package tableflip keys them.
const (
	handedLock       = "serve.lock"
	handedTCPNetwork = "tcp4"
	handedTCPName    = "loopback-door"
	// A unix socket that systemd made is keyed apart from one fleet made (keyed by its path):
	// tableflip removes the socket files of the latter when fleet stops for good, and the socket
	// unit owns the former. Its key names no path, as --socket may name none.
	handedUnixActivated = "unix-activated"
	handedUnixName      = "unix-door"
	handedReachPrefix   = "reach-door:"
)

// handoffTimeout is how long a new process has to say it is ready (tableflip's UpgradeTimeout).
const handoffTimeout = 60 * time.Second

// PIDFile is the file in FleetDir that names the process serving the state folder (SPEC O3).
const PIDFile = "serve.pid"

// sockets is where serve gets its listening sockets: from systemd, from the process it takes
// over from, or opened itself. The zero value opens its own and hands nothing on (serve run in a
// test's process).
type sockets struct {
	upg          *tableflip.Upgrader
	activatedTCP net.Listener
	activatedUnx net.Listener
}

// newSockets takes the sockets systemd handed over (unsetting LISTEN_*, so that no process
// started later takes them for its own) and starts package tableflip, which takes those a
// process handing over passed. pidFile is written when serve is ready.
func newSockets(pidFile string) (*sockets, error) {
	s := &sockets{}
	named, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	if err := s.takeActivated(named); err != nil {
		return nil, err
	}
	if !upgraderTaken.CompareAndSwap(false, true) {
		// tableflip allows one upgrader a process: a second fleet serve in one process (tests
		// that run the command in theirs) opens its own sockets and cannot hand over.
		return s, nil
	}
	upg, err := tableflip.New(tableflip.Options{PIDFile: pidFile, UpgradeTimeout: handoffTimeout})
	if err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	s.upg = upg
	return s, nil
}

// upgraderTaken is set once this process has made its one tableflip upgrader.
var upgraderTaken atomic.Bool

// takeActivated sorts systemd's sockets by name: "tcp", "unix", or one unnamed (go-systemd names
// it LISTEN_FD_3) for the TCP door. Anything else is refused.
func (s *sockets) takeActivated(named map[string][]net.Listener) error {
	var unnamed []net.Listener
	for name, lns := range named {
		switch {
		case name == "tcp" && len(lns) == 1:
			s.activatedTCP = lns[0]
		case name == "unix" && len(lns) == 1:
			s.activatedUnx = lns[0]
		case strings.HasPrefix(name, "LISTEN_FD_"):
			unnamed = append(unnamed, lns...)
		default:
			return fmt.Errorf("socket activation: %d socket(s) named %q: fleet serve takes one named tcp (the TCP door) and one named unix (the unix door); set FileDescriptorName=", len(lns), name)
		}
	}
	if len(unnamed) > 0 {
		if len(unnamed) > 1 || s.activatedTCP != nil || s.activatedUnx != nil {
			return fmt.Errorf("socket activation: %d sockets without a name: name them with FileDescriptorName=tcp and FileDescriptorName=unix", len(unnamed))
		}
		s.activatedTCP = unnamed[0]
	}
	return nil
}

// handingOver reports whether this process takes over from another.
func (s *sockets) handingOver() bool { return s != nil && s.upg != nil && s.upg.HasParent() }

// lock takes the state folder's lock: the one handed over, or a new one (state.AcquireLock).
func (s *sockets) lock(fleetDir string) (*state.Lock, error) {
	var lock *state.Lock
	var err error
	if s.handingOver() {
		f, ferr := s.upg.Fds.File(handedLock)
		if ferr != nil || f == nil {
			return nil, fmt.Errorf("handoff: the process handing over passed no lock of %s (%v); not serving", fleetDir, ferr)
		}
		lock, err = state.AdoptLock(fleetDir, f)
	} else {
		lock, err = state.AcquireLock(fleetDir)
	}
	if err != nil || s == nil || s.upg == nil {
		return lock, err
	}
	if err := s.upg.Fds.AddFile(handedLock, lock.File()); err != nil {
		lock.Release()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return lock, nil
}

// tcp is the loopback door's TCP listener: systemd's, the one handed over, or a new one on
// 127.0.0.1:port. Whichever it is must listen on 127.0.0.1 (S1).
func (s *sockets) tcp(port int) (net.Listener, error) {
	if s == nil || s.upg == nil {
		return supervisor.Listen(port)
	}
	var ln net.Listener
	var err error
	if s.activatedTCP != nil {
		ln = s.activatedTCP
		if err := supervisor.CheckLoopbackListener(ln); err != nil {
			ln.Close()
			return nil, fmt.Errorf("socket activation: %w", err)
		}
		err = s.upg.Fds.AddListener(handedTCPNetwork, handedTCPName, ln.(tableflip.Listener))
	} else {
		ln, err = s.upg.Fds.ListenWithCallback(handedTCPNetwork, handedTCPName, func(string, string) (net.Listener, error) {
			return supervisor.Listen(port)
		})
	}
	if err != nil {
		return nil, err
	}
	if err := supervisor.CheckLoopbackListener(ln); err != nil {
		ln.Close()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return ln, nil
}

// unix is the unix door's listener: systemd's, the one handed over, or a new one at path
// (supervisor.ListenUnix). Whichever it is is judged as ListenUnix judges its place. A socket
// systemd made may come without --socket; path, when given, must name it.
func (s *sockets) unix(path string) (*net.UnixListener, error) {
	if s == nil || s.upg == nil {
		if path == "" {
			return nil, nil
		}
		return supervisor.ListenUnix(path)
	}
	if s.activatedUnx != nil {
		ul, err := supervisor.CheckUnixListener(s.activatedUnx, path)
		if err != nil {
			s.activatedUnx.Close()
			return nil, fmt.Errorf("socket activation: %w", err)
		}
		ul.SetUnlinkOnClose(false) // the socket unit's file
		return ul, s.upg.Fds.AddListener(handedUnixActivated, handedUnixName, ul)
	}
	// systemd's socket, handed over by the process that had it from systemd.
	if ln, err := s.upg.Fds.Listener(handedUnixActivated, handedUnixName); err != nil || ln != nil {
		if err != nil {
			return nil, fmt.Errorf("handoff: %w", err)
		}
		ul, err := supervisor.CheckUnixListener(ln, path)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("handoff: %w", err)
		}
		ul.SetUnlinkOnClose(false)
		return ul, s.upg.Fds.AddListener(handedUnixActivated, handedUnixName, ul)
	}
	if path == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	ln, err := s.upg.Fds.ListenWithCallback("unix", abs, func(string, string) (net.Listener, error) {
		return supervisor.ListenUnix(abs)
	})
	if err != nil {
		return nil, err
	}
	if !s.handingOver() {
		return ln.(*net.UnixListener), nil // ListenUnix's own checks passed
	}
	ul, err := supervisor.CheckUnixListener(ln, abs)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return ul, nil
}

// reachListen is the direct-reach door's listener for addr: the one handed over for exactly that
// address, or a new one (reach.Config.Listen). It is handed on only at a handoff (handOff), so
// that a door that moves or closes leaves no copy of its old socket open here.
func (s *sockets) reachListen(network, addr string) (net.Listener, error) {
	if s.handingOver() {
		ln, err := s.upg.Fds.Listener(network, handedReachPrefix+addr)
		if err != nil {
			return nil, fmt.Errorf("handoff: %w", err)
		}
		if ln != nil {
			return ln, nil
		}
	}
	return net.Listen(network, addr)
}

// ready tells the process that handed over (if any) and systemd (Type=notify, NotifyAccess=all:
// the new process becomes the service's main process) that this one serves, and writes serve.pid.
func (s *sockets) ready(log *slog.Logger) error {
	if s == nil || s.upg == nil {
		return nil
	}
	if err := s.upg.Ready(); err != nil {
		return err
	}
	if _, err := daemon.SdNotify(false, "READY=1\nMAINPID="+strconv.Itoa(os.Getpid())); err != nil {
		log.Warn("fleet.sd-notify", "error", err.Error())
	}
	return nil
}

// handOff starts the binary on disk and hands it every listening socket, the direct-reach door's
// (reach, may be nil) included. It returns once the new process is ready (nil: this process is
// to drain and exit; exit() is closed) or has failed (this one serves on).
func (s *sockets) handOff(reach net.Listener) error {
	if s == nil || s.upg == nil {
		return errors.New("this fleet serve cannot hand over")
	}
	if reach != nil {
		tl, ok := reach.(tableflip.Listener)
		if !ok {
			return fmt.Errorf("the direct-reach door's socket (%T) cannot be handed over", reach)
		}
		a, ok := reach.Addr().(*net.TCPAddr)
		if !ok {
			return fmt.Errorf("the direct-reach door's socket is not TCP (%s)", reach.Addr())
		}
		ap := a.AddrPort()
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		network := "tcp6"
		if ap.Addr().Is4() {
			network = "tcp4"
		}
		if err := s.upg.Fds.AddListener(network, handedReachPrefix+ap.String(), tl); err != nil {
			return err
		}
	}
	// A process that was itself handed over hands on only once its predecessor has exited
	// (tableflip's rule); it says so rather than wait for a predecessor still draining.
	if s.upg.HasParent() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.upg.WaitForParent(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return errors.New("the previous handoff is not over: the process this one took over from is still finishing what it had in flight; send SIGUSR2 again once it has exited")
		}
	}
	for tries := 0; ; tries++ {
		err := s.upg.Upgrade()
		// WaitForParent saw the predecessor go; tableflip's own loop may see it a moment later.
		if err == nil || err.Error() != "parent hasn't exited" || tries == 50 {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exit is closed once this process has handed over.
func (s *sockets) exit() <-chan struct{} {
	if s == nil || s.upg == nil {
		return nil
	}
	return s.upg.Exit()
}

// stop ends handing over for good (fleet serve stops): tableflip removes the socket files of the
// unix sockets fleet made.
func (s *sockets) stop() {
	if s != nil && s.upg != nil {
		s.upg.Stop()
	}
}

// servePID reads serve.pid in fleetDir (0 when missing or not a number).
func servePID(fleetDir string) int {
	b, err := os.ReadFile(filepath.Join(fleetDir, PIDFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
