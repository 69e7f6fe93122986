package doorrules

// The wire rows: what one request on a fresh connection cannot show — a Host of the row's own,
// several requests on one connection (smuggling, pipelining, Expect), many connections
// (exhaustion), several sources (rate-limit evasion), tailscaled's own forwards (S5e) and a
// secret compared (bearer timing). Each row runs on a raw connection the door hands out, and is
// checked by what came back and by exactly what the console saw.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/phase-console/fleet/internal/rawhttp"
)

// The kinds of door, as WireDoor.Kind names them.
const (
	Loopback = "loopback" // the loopback door (SPEC S): Tailscale Serve's callers
	Reach    = "reach"    // the direct-reach door (SPEC R): paired devices over TLS
)

// A WireDoor is a Door that also hands out raw connections.
type WireDoor interface {
	Door
	// Kind is Loopback or Reach: a row that is one door's own names it.
	Kind() string
	// Host is the Host value Request writes: the one the door admits.
	Host() string
	// Addr is the door's listening address, for bare TCP connections.
	Addr() string
	// Dial opens a new connection to the door (over TLS on the reach door, no SNI), whose reads
	// and writes are bounded so that a hang fails the test. The row closes it.
	Dial(t *testing.T) net.Conn
	// Paths is every path console Console has received so far, in order.
	Paths() []string
}

// A LimitedDoor counts failures per source (R6).
type LimitedDoor interface {
	WireDoor
	// DialFrom is Dial from src as the door sees its TCP peer: a loopback IPv4 source for real,
	// any other address given to the door's listener as the accepted connection's peer.
	DialFrom(t *testing.T, src netip.Addr) net.Conn
	// DialSNI is Dial sending serverName as the TLS server name.
	DialSNI(t *testing.T, serverName string) net.Conn
	// Forget lets every failure counted so far age out (its clock moved past the window).
	Forget()
	// Stranger is a raw request as Request writes it, from a caller with no credential: only a
	// stranger's failures count, and only a stranger is held back (R6).
	Stranger(method, target string, extra ...string) string
}

// A ForwardableDoor's TCP port can be reached through tailscaled's own forwards (S5e).
type ForwardableDoor interface {
	WireDoor
	// SetForwardable makes tailscaled say that Tailscale SSH is on (or off), and the door learn it
	// as its next poll would.
	SetForwardable(t *testing.T, on bool)
}

// A CredentialDoor admits some callers by a secret they present: the fleet token on the loopback
// door's API (S8), a device's credential cookie on the reach door (R9).
type CredentialDoor interface {
	WireDoor
	// Credential is the right secret.
	Credential() string
	// WithCredential is a raw request presenting secret the way a caller does ("" presents
	// none), to what the secret opens.
	WithCredential(secret string) string
}

// A WireRow is one attack that needs more than a request on a fresh connection.
type WireRow struct {
	Name  string // cites the rule: "S7 CL + TE"
	Class string // the advisory or bug class it comes from
	Door  string // "" every door; else the Kind it is own to
	Run   func(t *testing.T, d WireDoor)
}

// An Answer is one response read off the wire: its status and X-Fleet-Reason.
type Answer struct {
	Status int
	Reason string
}

func (a Answer) String() string { return fmt.Sprintf("%d %s", a.Status, a.Reason) }

// RunWire runs every wire row that applies to d; a row that needs what d is not (LimitedDoor,
// ForwardableDoor, CredentialDoor) and names d's kind fails, so that a door cannot drop a row by
// dropping a method.
func RunWire(t *testing.T, d WireDoor) {
	for _, row := range WireRows() {
		if row.Door != "" && row.Door != d.Kind() {
			continue
		}
		t.Run(row.Name, func(t *testing.T) {
			if row.Class == "" {
				t.Errorf("row %q names no advisory or bug class", row.Name)
			}
			if l, ok := d.(LimitedDoor); ok {
				l.Forget() // no row is held back by another's failures
			}
			row.Run(t, d)
		})
	}
}

// exchange writes raw on a new connection, then a last request of its own asking to close, and
// reads every answer until the door closes the connection. Whatever the door parsed out of raw,
// it has finished with it when the connection ends: nothing it smuggled can reach the console
// later. sentinel reports whether the last request was answered (and is left out of the answers).
func exchange(t *testing.T, d WireDoor, raw string) (answers []Answer, sentinel bool) {
	t.Helper()
	return exchangeOn(t, d, d.Dial(t), raw)
}

func exchangeOn(t *testing.T, d WireDoor, conn net.Conn, raw string) (answers []Answer, sentinel bool) {
	t.Helper()
	defer conn.Close()
	last := d.Request("GET", c+"/sentinel", "Connection: close")
	// Written concurrently with the reading: a door that answers and closes before reading all
	// of raw must not deadlock the test on a full socket buffer.
	go io.WriteString(conn, rawhttp.CRLF(raw)+last)
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if isEnd(err) {
				break
			}
			t.Fatalf("reading answer %d: %v", len(answers)+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answers = append(answers, Answer{resp.StatusCode, resp.Header.Get("X-Fleet-Reason")})
	}
	paths := d.Paths()
	if len(answers) > 0 && answers[len(answers)-1].Status == http.StatusOK && len(paths) > 0 && paths[len(paths)-1] == "/sentinel" {
		return answers[:len(answers)-1], true
	}
	return answers, false
}

// isEnd reports whether err is the door ending the connection (a close, or a reset because the
// door closed with bytes of ours unread) rather than a hang or a broken answer.
func isEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// since is what the console received after n requests.
func since(d WireDoor, n int) []string { return d.Paths()[n:] }

// wantSeen checks that the console received exactly paths since n — the sentinel left out, and
// requests under /late/, which rows send when the console may see them at any time (a broken or
// stalled body it reads until the hop aborts it).
func wantSeen(t *testing.T, d WireDoor, n int, paths ...string) {
	t.Helper()
	got := slices.DeleteFunc(since(d, n), func(p string) bool { return p == "/sentinel" || strings.HasPrefix(p, "/late/") })
	if !slices.Equal(got, paths) {
		t.Errorf("the console saw %q, want %q", got, paths)
	}
}

// wantAnswers checks the answers to a row's requests (the sentinel left out).
func wantAnswers(t *testing.T, got []Answer, want ...Answer) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
}

// withHost is req with its Host line replaced (or removed, for host "-").
func withHost(req, host string) string {
	var out []string
	for _, line := range strings.Split(req, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Host") {
			if host == "-" {
				continue
			}
			line = "Host: " + host
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// splitHost is a Host value's name (or address) and its ":port" ("" when there is none).
func splitHost(host string) (name, port string) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") && strings.Count(host, ":") == 1 {
		return host[:i], host[i:]
	}
	return host, ""
}
