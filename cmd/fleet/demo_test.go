package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// TestDemoPairsAndAsserts_R8_R9: `fleet demo` on a fresh machine runs the supervisor, a console and
// the direct-reach door; with the code and password it prints, a client that trusts only the
// printed root pairs and is asserted to the console as device:<slug>#<id6>, scope remote. On exit
// it leaves nothing behind.
func TestDemoPairsAndAsserts_R8_R9(t *testing.T) {
	listen := rawhttp.FreeLoopbackAddr(t).String()
	ctx, cancel := context.WithCancel(context.Background())
	type start struct{ link, code, password string }
	ready := make(chan start, 1)
	done := make(chan int, 1)
	var out, errb syncBuffer
	go func() {
		done <- demo(ctx, demoOptions{listen: listen, ready: func(l, c, p string) { ready <- start{l, c, p} }}, &out, &errb)
	}()
	var s start
	select {
	case s = <-ready:
	case st := <-done:
		t.Fatalf("demo ended with %d: %s", st, errb.String())
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not start")
	}
	defer func() {
		cancel()
		if st := <-done; st != 0 {
			t.Errorf("demo exit %d: %s", st, errb.String())
		}
		home := strings.Fields(strings.SplitN(out.String(), "state in ", 2)[1])[0]
		if _, err := os.Stat(home); !os.IsNotExist(err) {
			t.Errorf("the demo's state %s is still there: %v", home, err)
		}
	}()
	printed := out.String()
	for _, want := range []string{s.link, s.code, s.password, "/ca.crt"} {
		if !strings.Contains(printed, want) {
			t.Errorf("the demo does not print %q:\n%s", want, printed)
		}
	}
	if !strings.HasPrefix(s.link, "https://"+listen+"/pair#") || strings.Contains(s.link, "?") {
		t.Errorf("link %q: want the code in the #fragment only", s.link)
	}
	// U7: no QR code of the loopback link, which no phone can open (a QR code is drawn with
	// the block characters ▀ ▄ █).
	if strings.ContainsAny(printed, "▀▄█") {
		t.Errorf("U7 the demo prints a QR code of its loopback address:\n%s", printed)
	}

	// Trust only the door's root, fetched once without verification and pinned from then on.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := insecure.Get("https://" + listen + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("/ca.crt is not a PEM certificate: %q", pem)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	form := url.Values{"code": {s.code}, "password": {s.password}, "name": {"Test Phone"}}
	req, _ := http.NewRequest("POST", "https://"+listen+"/pair", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://"+listen)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/" {
		t.Fatalf("pairing: %s at %s, want the device's index", resp.Status, resp.Request.URL)
	}
	resp, err = client.Get("https://" + listen + "/c/demo/whoami")
	if err != nil {
		t.Fatal(err)
	}
	var who struct{ Scope, Login string }
	json.NewDecoder(resp.Body).Decode(&who)
	resp.Body.Close()
	if resp.StatusCode != 200 || who.Scope != "remote" || !strings.HasPrefix(who.Login, "device:test-phone#") {
		t.Fatalf("whoami: %s %+v, want scope remote and device:test-phone#…", resp.Status, who)
	}
}

// runDemoUntil runs demo with --listen listen until it prints (the link, code and password it
// would hand a person) or ends; a demo that printed is stopped. It returns what it printed (nil if
// nothing), its exit status when it ended on its own, and its stdout and stderr.
func runDemoUntil(t *testing.T, listen string) (printed []string, status int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan []string, 1)
	done := make(chan int, 1)
	var out, errb syncBuffer
	go func() {
		done <- demo(ctx, demoOptions{listen: listen, ready: func(l, c, p string) { ready <- []string{l, c, p} }}, &out, &errb)
	}()
	select {
	case p := <-ready:
		cancel()
		<-done
		return p, 0, out.String(), errb.String()
	case st := <-done:
		return nil, st, out.String(), errb.String()
	case <-time.After(90 * time.Second):
		t.Fatal("demo neither printed nor ended")
	}
	return nil, 0, "", ""
}

// TestDemoPrintsNoSecretForADoorAnotherUserHolds_R8: another local user who holds the demo's door
// address (127.0.0.1:7443 by default) before `fleet demo` starts is not handed the demo's
// pairing secrets: the demo's door cannot open there, so it exits 1 naming the address and that
// another user's process holds it, and prints no link, code or password (a browser sent to that
// link would reach the other user's listener, which reads the code from the fragment and the
// password from the form). Waiting only for the CA root — made before the bind — would print them.
func TestDemoPrintsNoSecretForADoorAnotherUserHolds_R8(t *testing.T) {
	listen := rawhttp.FreeLoopbackAddr(t)
	holdAsOtherUser(t, listen)
	printed, st, out, errs := runDemoUntil(t, listen.String())
	if printed != nil {
		t.Fatalf("fleet demo printed the pairing link %s and the password %q while %s belongs to uid %d (its own door never opened)",
			printed[0], printed[2], listen, otheruser.UID)
	}
	if st != 1 || !strings.Contains(errs, listen.String()) || !strings.Contains(errs, "another user's process holds it") ||
		strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("exit %d, stderr %q; want exit 1 and one line naming %s and who holds it", st, errs, listen)
	}
	if strings.Contains(out, "password") || strings.Contains(out, "/pair#") {
		t.Errorf("stdout holds pairing secrets:\n%s", out)
	}
}

// TestDemoRefusesADoorItCannotOpen_R8: the same for an address that a process of this same user
// holds (another demo, say): not this demo's door, so no secret is printed for it. (Runs without
// root, unlike the test above.)
func TestDemoRefusesADoorItCannotOpen_R8(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	listen := ln.Addr().String()
	printed, st, out, errs := runDemoUntil(t, listen)
	if printed != nil {
		t.Fatalf("fleet demo printed the pairing link %s while %s is held by another process", printed[0], listen)
	}
	if st != 1 || !strings.Contains(errs, listen) || !strings.Contains(errs, "another process of yours holds it") {
		t.Errorf("exit %d, stderr %q; want exit 1 naming %s and who holds it", st, errs, listen)
	}
	if out != "" {
		t.Errorf("stdout: %q, want nothing", out)
	}
}

// TestDemoListenIsLoopbackOnly_R1: `fleet demo --listen` takes a loopback address and port only
// (its help; docs/commands.md: "the direct-reach door on loopback"), and R1 lets no flag open the
// direct-reach door to the network: a private LAN or tailnet address (which reach.ParseProfile
// would admit) or a name is bad usage, exit 2 with one line naming the flag, before anything
// starts: the demo never opens its door there, nor prints a code and password for it.
func TestDemoListenIsLoopbackOnly_R1(t *testing.T) {
	for _, listen := range []string{"10.255.255.1:7443", "100.100.100.100:7443", "192.168.1.20:7443", "localhost:7443", "127.0.0.1", ""} {
		t.Run(listen, func(t *testing.T) {
			printed, st, out, errs := runDemoUntil(t, listen)
			if printed != nil {
				t.Fatalf("fleet demo --listen %q ran and printed a pairing link %s and a password for a non-loopback door", listen, printed[0])
			}
			if st != 2 || !strings.Contains(errs, "--listen") || !strings.Contains(errs, "loopback") || strings.Count(errs, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line naming --listen and loopback", st, out, errs)
			}
		})
	}
}

// TestDemoEndsOnHangup_R8: closing the terminal that runs `fleet demo` (SIGHUP) ends it and
// removes what it made, as Ctrl-C does. With fleet serve's SIGHUP handler (reload the machine
// profile, SPEC R1) it would outlive its terminal, its door, pairing code and state folder
// (fleet token, CA key, password hash) left behind.
func TestDemoEndsOnHangup_R8(t *testing.T) {
	listen := rawhttp.FreeLoopbackAddr(t).String()
	cmd := exec.Command(os.Args[0], "demo", "--listen", listen)
	cmd.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	home := ""
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if home != "" {
			os.RemoveAll(strings.TrimSuffix(home, "/state"))
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(90 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("demo ended before it ran")
			}
			if _, rest, ok := strings.Cut(l, "state in "); ok && home == "" {
				home = strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
			if strings.HasPrefix(l, "Ctrl-C stops the demo") {
				break wait
			}
		case <-deadline:
			t.Fatal("demo did not start")
		}
	}
	go func() {
		for range lines {
		}
	}()
	if home == "" {
		t.Fatal("the demo did not name its state folder")
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if _, err := os.Stat(home); !os.IsNotExist(err) {
			t.Errorf("after SIGHUP the demo's state %s is still there: %v", home, err)
		}
		if answersAt(listen) {
			t.Errorf("after SIGHUP the demo's door on %s still answers", listen)
		}
	case <-time.After(10 * time.Second):
		_, err := os.Stat(home)
		t.Errorf("10 s after SIGHUP the demo still runs (its door on %s open, its state %s present: %v)", listen, home, err == nil)
	}
}

// answersAt says whether anything accepts a connection at addr.
func answersAt(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
