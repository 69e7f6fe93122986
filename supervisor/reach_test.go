package supervisor

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
)

// reachStatus is GET /fleet/v1/reach with the bearer, decoded.
func reachStatus(t *testing.T, d *door) ReachStatus {
	t.Helper()
	r := d.Raw(d.localReq("GET", "/fleet/v1/reach", "", d.bearer()))
	if r.Status != http.StatusOK {
		t.Fatalf("GET /fleet/v1/reach: %d %q", r.Status, r.Reason)
	}
	var st ReachStatus
	if err := json.Unmarshal([]byte(r.Body), &st); err != nil {
		t.Fatalf("GET /fleet/v1/reach: %v in %q", err, r.Body)
	}
	return st
}

func writeReachProfile(t *testing.T, d *door, listen string) {
	t.Helper()
	body := fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", listen)
	if listen == "" {
		body = "reach:\n  mode: off\n"
	}
	path := filepath.Join(d.home, "machine-profile.yaml")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reachGet sends one request over TLS to the reach door at addr and returns its status, or 0
// when nothing answers there. The door's TLS is proven in package reach; here only whether and
// how the door answers matters.
func reachGet(t *testing.T, addr, target string, extra ...string) int {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return 0
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, addr, strings.Join(append(extra, ""), "\r\n"))
	io.WriteString(conn, req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the reach door's answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// wantLoopbackServes: the loopback door answers its API throughout.
func wantLoopbackServes(t *testing.T, d *door, when string) {
	t.Helper()
	if r := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer())); r.Status != http.StatusOK {
		t.Fatalf("%s: the loopback door answered %d %q", when, r.Status, r.Reason)
	}
}

// TestReachReload_R1: the profile alone opens the door, moves it to a new port, and closes it
// (refused or off), saying why; the loopback door serves throughout. Reloads are driven
// explicitly, as SIGHUP drives them.
func TestReachReload_R1(t *testing.T) {
	d := startDoor(t)
	d.srv.ReloadReach()
	if st := reachStatus(t, d); st.Open || st.Mode != "off" {
		t.Fatalf("no profile: %+v, want closed, off", st)
	}

	first := rawhttp.FreeLoopbackAddr(t).String()
	writeReachProfile(t, d, first)
	d.srv.ReloadReach()
	st := reachStatus(t, d)
	if !st.Open || st.Mode != "direct" || st.Listen != first || st.Fingerprint == "" || st.LeafExpiry.IsZero() || st.Why != "" {
		t.Fatalf("opened: %+v", st)
	}
	if got := reachGet(t, first, "/ca.crt"); got != http.StatusOK {
		t.Fatalf("GET /ca.crt on the reach door: %d", got)
	}
	wantLoopbackServes(t, d, "door open")

	// A device paired from another process is believed, and reaches a console through the
	// shared hop as itself.
	dev, cred, err := pairing.RegisterDeviceFor(d.srv.reachDir(), "phone", access.Everything, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	before := d.Alpha.Count()
	if got := reachGet(t, first, "/c/alpha/x", "Cookie: "+pairing.CookieName+"="+cred); got != http.StatusOK {
		t.Fatalf("a paired device through the reach door: %d", got)
	}
	if s, _ := d.Alpha.Last(); d.Alpha.Count() != before+1 || s.Header.Get("X-Phase-Console-Fleet-Login") != dev.Login() {
		t.Fatalf("the console saw login %q, want %q", s.Header.Get("X-Phase-Console-Fleet-Login"), dev.Login())
	}
	if st := reachStatus(t, d); st.Devices != 1 {
		t.Errorf("devices: %d, want 1", st.Devices)
	}

	second := rawhttp.FreeLoopbackAddr(t).String()
	writeReachProfile(t, d, second)
	d.srv.ReloadReach()
	if st := reachStatus(t, d); !st.Open || st.Listen != second {
		t.Fatalf("moved: %+v", st)
	}
	if got := reachGet(t, first, "/ca.crt"); got != 0 {
		t.Errorf("the old address still answers: %d", got)
	}
	if got := reachGet(t, second, "/ca.crt"); got != http.StatusOK {
		t.Errorf("the new address: %d", got)
	}
	wantLoopbackServes(t, d, "door moved")

	// A wildcard is refused (R2): the door closes, and says why, naming the key.
	logsBefore := len(d.Logs.Events("fleet.reach-closed"))
	_, port, _ := net.SplitHostPort(second)
	writeReachProfile(t, d, "0.0.0.0:"+port)
	d.srv.ReloadReach()
	st = reachStatus(t, d)
	if st.Open || !strings.Contains(st.Why, "reach.listen") {
		t.Fatalf("refused profile: %+v, want closed naming reach.listen", st)
	}
	if got := reachGet(t, second, "/ca.crt"); got != 0 {
		t.Errorf("a refused profile left the door answering: %d", got)
	}
	lines := d.Logs.Events("fleet.reach-closed")
	if len(lines) != logsBefore+1 || lines[len(lines)-1]["key"] != "reach.listen" || lines[len(lines)-1]["level"] != "WARN" {
		t.Errorf("log: %v, want one Warn line naming reach.listen", lines[logsBefore:])
	}
	wantLoopbackServes(t, d, "profile refused")

	writeReachProfile(t, d, second)
	d.srv.ReloadReach()
	if st := reachStatus(t, d); !st.Open {
		t.Fatalf("reopened: %+v", st)
	}
	writeReachProfile(t, d, "")
	d.srv.ReloadReach()
	if st := reachStatus(t, d); st.Open || st.Why != "reach.mode is off" {
		t.Fatalf("off: %+v", st)
	}
	if got := reachGet(t, second, "/ca.crt"); got != 0 {
		t.Errorf("mode off left the door answering: %d", got)
	}
	wantLoopbackServes(t, d, "door closed")
}

// TestReachStampChanges_R1: what the poll compares sees a file rewritten in place or renamed
// over, so that a change without SIGHUP is picked up.
func TestReachStampChanges_R1(t *testing.T) {
	d := startDoor(t)
	path := filepath.Join(d.home, "machine-profile.yaml")
	if stampOf(path) != (fileStamp{}) {
		t.Fatal("a missing file has a stamp")
	}
	writeReachProfile(t, d, "")
	a := stampOf(path)
	writeReachProfile(t, d, "")
	if b := stampOf(path); a == b {
		t.Error("a file renamed over the profile has the same stamp")
	}
}

// TestReachPairingPages_R7: the supervisor gives the door the pairing pages its Config builds,
// with the open door (for its fingerprint) and the device register.
func TestReachPairingPages_R7(t *testing.T) {
	var gotFingerprint atomic.Value
	d := startDoor(t, func(c *Config) {
		c.ReachPairing = func(door *reach.Door, reg *pairing.Register) http.Handler {
			gotFingerprint.Store(door.Fingerprint())
			if reg == nil {
				t.Error("no register")
			}
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
		}
	})
	listen := rawhttp.FreeLoopbackAddr(t).String()
	writeReachProfile(t, d, listen)
	d.srv.ReloadReach()
	if got := reachGet(t, listen, "/pair"); got != http.StatusTeapot {
		t.Fatalf("GET /pair: %d, want the pages' own answer", got)
	}
	if fp, _ := gotFingerprint.Load().(string); fp == "" || fp != reachStatus(t, d).Fingerprint {
		t.Errorf("the pages were built for fingerprint %q", fp)
	}
}

// TestReachDoorRetriedUntilItOpens_R1: a door that the profile asks for but that cannot open —
// its address held by another process (another local user may bind the LAN address first: after
// a reboot, while fleet restarts), or not this machine's yet — is tried again at every poll, so
// it opens once the address is free, without a SIGHUP or a change to the profile; the failure is
// logged once however often it repeats, and an open door is left as it is. A door reloaded only
// when the profile's file changed would never retry a failed bind.
// The poll is driven here by calling pollReach, one look of reachLoop.
func TestReachDoorRetriedUntilItOpens_R1(t *testing.T) {
	d := startDoor(t)
	held, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	listen := held.Addr().String()
	writeReachProfile(t, d, listen)
	d.srv.ReloadReach()
	st := reachStatus(t, d)
	if st.Open || st.Mode != "direct" || !strings.Contains(st.Why, syscall.EADDRINUSE.Error()) {
		t.Fatalf("held: %+v, want closed, saying the address is in use", st)
	}
	for range 5 {
		d.srv.pollReach()
	}
	if st := reachStatus(t, d); st.Open {
		t.Fatalf("opened while held: %+v", st)
	}
	if lines := d.Logs.Events("fleet.reach-closed"); len(lines) != 1 || lines[0]["level"] != "WARN" {
		t.Errorf("a failure that repeats: %d fleet.reach-closed lines %v, want one Warn line", len(lines), lines)
	}

	held.Close() // the other process lets go of the address
	d.srv.pollReach()
	st = reachStatus(t, d)
	if !st.Open || st.Listen != listen || st.Why != "" {
		t.Fatalf("after the address came free and a poll: %+v, want open", st)
	}
	if got := reachGet(t, listen, "/ca.crt"); got != http.StatusOK {
		t.Fatalf("GET /ca.crt on the retried door: %d", got)
	}
	opened := len(d.Logs.Events("fleet.reach-open"))
	for range 3 {
		d.srv.pollReach()
	}
	if st := reachStatus(t, d); !st.Open || st.Fingerprint == "" {
		t.Fatalf("an open door after more polls: %+v", st)
	}
	if n := len(d.Logs.Events("fleet.reach-open")); n != opened {
		t.Errorf("polls reopened an open door: %d fleet.reach-open lines, want %d", n, opened)
	}
	wantLoopbackServes(t, d, "door retried")
}
