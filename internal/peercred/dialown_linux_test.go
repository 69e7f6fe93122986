//go:build linux

package peercred

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"
)

// slowListener listens on 127.0.0.1 and accepts one connection after wait (never, if wait < 0),
// holding it open until the test ends.
func slowListener(t *testing.T, network, addr string, wait time.Duration) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	if wait >= 0 {
		go func() {
			time.Sleep(wait) // a busy server (load, GC, a full accept queue)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}()
	}
	return ln
}

// TestDialOwnSlowAcceptIsNotDown: a console slow to accept (400 ms) is this user's console, not a console that is down:
// DialOwn judges the listening socket, which exists before accept, and waits for the accept.
// Under netlink and under the /proc fallback alike.
func TestDialOwnSlowAcceptIsNotDown(t *testing.T) {
	for _, viaProc := range []bool{false, true} {
		t.Run(fmt.Sprintf("proc=%v", viaProc), func(t *testing.T) {
			if viaProc {
				refuseNetlink(t)
			}
			for _, tt := range []struct{ network, listen, dial string }{
				{"tcp4", "127.0.0.1:0", "127.0.0.1"},
				{"tcp6", "[::1]:0", "::1"},
				{"tcp", "[::]:0", "127.0.0.1"},
				{"tcp4", "0.0.0.0:0", "127.0.0.1"},
			} {
				t.Run(tt.listen+" dialled at "+tt.dial, func(t *testing.T) {
					ln := slowListener(t, tt.network, tt.listen, 400*time.Millisecond)
					addr := net.JoinHostPort(tt.dial, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
					c, err := DialOwn(context.Background(), "tcp", addr)
					if err != nil {
						t.Fatalf("DialOwn to this user's slow-to-accept server: %v", err)
					}
					c.Close()
				})
			}
		})
	}
}

// TestDialOwnNeverAcceptedJudgedByListener: a server that does not accept before the dial's
// deadline is judged by its listener alone: a slow accept never turns into an error (the hop
// would call that console down).
func TestDialOwnNeverAcceptedJudgedByListener(t *testing.T) {
	ln := slowListener(t, "tcp4", "127.0.0.1:0", -1)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c, err := DialOwn(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialOwn to this user's listener that never accepts: %v", err)
	}
	c.Close()

	old := dialAcceptWait // no deadline: DialOwn's own bound
	dialAcceptWait = 20 * time.Millisecond
	t.Cleanup(func() { dialAcceptWait = old })
	c, err = DialOwn(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialOwn without a deadline: %v", err)
	}
	c.Close()
}

// A dial cancelled while DialOwn waits for the accept returns the cancellation (the hop answers
// 499, not console down).
func TestDialOwnCancelledWhileWaiting(t *testing.T) {
	ln := slowListener(t, "tcp4", "127.0.0.1:0", -1)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	c, err := DialOwn(ctx, "tcp", ln.Addr().String())
	if err == nil {
		c.Close()
		t.Fatal("DialOwn returned a connection after its context was cancelled")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DialOwn: %v; want context.Canceled", err)
	}
}

// A server whose listener closes before it accepts resets the connection: an error, never a
// connection judged by a listener that is gone.
func TestDialOwnListenerGoneIsAnError(t *testing.T) {
	ln := slowListener(t, "tcp4", "127.0.0.1:0", -1)
	old := dialAcceptWait
	dialAcceptWait = time.Minute
	t.Cleanup(func() { dialAcceptWait = old })
	time.AfterFunc(20*time.Millisecond, func() { ln.Close() })
	c, err := DialOwn(context.Background(), "tcp", ln.Addr().String())
	if err == nil {
		c.Close()
		t.Fatal("DialOwn returned a connection whose listener closed before accepting it")
	}
	if errors.Is(err, ErrOtherUser) {
		t.Fatalf("DialOwn: %v; not another user's", err)
	}
}

// Another user's listener is refused at once (ErrOtherUser), whether or not it accepts, bound to
// the address or to a wildcard, under netlink and under the /proc fallback; nothing is sent.
func TestDialOwnOtherUsersListenerIsOtherUser(t *testing.T) {
	needRoot(t)
	listens := []string{"127.0.0.1:0", "0.0.0.0:0", "[::]:0", "[::1]:0", "127.0.0.1:0"} // the last accepts
	dials := []string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "::1", "127.0.0.1"}
	h := otheruser.Start(t, "^TestDialOwnHelperProcess$", "FLEET_DIALOWN_HELPER", strings.Join(listens, " "), nil)
	var ports []string
	for range listens {
		ports = append(ports, strings.Fields(h.Expect(t, "PORT "))[1])
	}
	old := dialAcceptWait
	dialAcceptWait = time.Minute // the verdict must not depend on a timeout
	t.Cleanup(func() { dialAcceptWait = old })
	for _, viaProc := range []bool{false, true} {
		for i, listen := range listens {
			accepts := i == len(listens)-1
			t.Run(fmt.Sprintf("proc=%v %s accepts=%v dialled at %s", viaProc, listen, accepts, dials[i]), func(t *testing.T) {
				if viaProc {
					refuseNetlink(t)
				}
				c, err := DialOwn(context.Background(), "tcp", net.JoinHostPort(dials[i], ports[i]))
				if err == nil {
					io.WriteString(c, "secret")
					c.Close()
					t.Fatalf("DialOwn to uid %d's listener: connected", otheruser.UID)
				}
				if !errors.Is(err, ErrOtherUser) {
					t.Fatalf("DialOwn to uid %d's listener: %v; want ErrOtherUser", otheruser.UID, err)
				}
				if accepts {
					if l := h.Expect(t, "GOT"); l != "GOT \n" {
						t.Fatalf("uid %d's server received %q", otheruser.UID, l)
					}
				}
			})
		}
	}
	if err := h.Wait(t); err != nil {
		t.Errorf("helper: %v", err)
	}
}

// TestDialOwnHelperProcess is the other-uid server of the test above; otherwise it does nothing.
// It listens on each address it is given and prints PORT <port> for each; the last one accepts
// connections and prints GOT <what it read> when each ends, the others never accept. It exits
// when its stdin ends.
func TestDialOwnHelperProcess(t *testing.T) {
	addrs := strings.Fields(os.Getenv("FLEET_DIALOWN_HELPER"))
	if len(addrs) == 0 {
		return
	}
	var ln net.Listener
	for _, a := range addrs {
		var err error
		ln, err = net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(otheruser.Timeout))
			b, _ := io.ReadAll(c)
			c.Close()
			fmt.Printf("GOT %s\n", b)
		}
	}()
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
