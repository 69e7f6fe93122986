package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
)

// TestSupervisorKilledUnderLoad_F2: `fleet serve` killed with SIGKILL while a paired device sends
// requests through the direct-reach door, then started again on the same state folder: the route
// and the device are back, every answer the device got was the console's (a request either
// reached the console as the device, or failed to connect), and an unpaired caller still gets only
// the pairing page. Nothing is lost: consoles.json and the device register are as they were.
func TestSupervisorKilledUnderLoad_F2(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	listen := rawhttp.FreeLoopbackAddr(t).String()
	profile := fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", listen)
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile), []byte(profile)); err != nil {
		t.Fatal(err)
	}
	dir := pairingFolder(home)
	dev, cred, err := pairing.RegisterDeviceFor(dir, "phone", access.Everything, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var seenMu sync.Mutex
	var seenLogins []string
	console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenMu.Lock()
		seenLogins = append(seenLogins, r.Header.Get(contract.HeaderFleetLogin))
		seenMu.Unlock()
		io.WriteString(w, "console")
	}))
	defer console.Close()

	port := rawhttp.FreeLoopbackAddr(t).Port()
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "serve", "--state-dir", home, "--port", fmt.Sprint(port), "--tailscaled-uid", "0",
			"--tailscale-socket", filepath.Join(t.TempDir(), "none.sock"), "--log-format", "json")
		cmd.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	waitDoor := func() *http.Client {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if c, err := tls.Dial("tcp", listen, &tls.Config{InsecureSkipVerify: true}); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the door did not open")
			}
			time.Sleep(20 * time.Millisecond)
		}
		insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := insecure.Get("https://" + listen + "/ca.crt")
		if err != nil {
			t.Fatal(err)
		}
		pem, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		return &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	}

	first := start()
	client := waitDoor()
	if st, _, errs := runFleet("register", "--state-dir", home, "--id", "alpha", "--addr", strings.TrimPrefix(console.URL, "http://")); st != 0 {
		t.Fatalf("register: %d %s", st, errs)
	}
	get := func(c *http.Client, withCookie bool) (int, string, error) {
		req, _ := http.NewRequest("GET", "https://"+listen+"/c/alpha/", nil)
		if withCookie {
			req.AddCookie(&http.Cookie{Name: pairing.CookieName, Value: cred})
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	var ok, failed atomic.Int64
	var bad atomic.Value
	var clientMu sync.Mutex
	cur := client
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			clientMu.Lock()
			c := cur
			clientMu.Unlock()
			st, body, err := get(c, true)
			switch {
			case err != nil:
				failed.Add(1) // the door was down: nothing answered
				time.Sleep(5 * time.Millisecond)
			case st == 200 && body == "console":
				ok.Add(1)
			case st == http.StatusBadGateway:
				failed.Add(1) // the console's route not loaded yet
			default:
				bad.Store(fmt.Sprintf("status %d, %q", st, body))
			}
		}
	})
	waitFor(t, "requests through the door", func() bool { return ok.Load() >= 20 })
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	waitFor(t, "requests to fail while fleet is down", func() bool { return failed.Load() >= 5 })
	before := ok.Load()

	start()
	next := waitDoor() // the same root: the CA was kept
	clientMu.Lock()
	cur = next
	clientMu.Unlock()
	waitFor(t, "requests through the restarted door", func() bool { return ok.Load() >= before+20 })
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatalf("the device got an answer that was not the console's: %v", v)
	}
	if st, _, err := get(next, false); err != nil || st != http.StatusSeeOther {
		t.Errorf("an unpaired caller after the restart: %d %v, want 303 to the pairing page", st, err)
	}
	seenMu.Lock()
	for _, l := range seenLogins {
		if l != dev.Login() {
			t.Errorf("the console was told %q, want %q", l, dev.Login())
		}
	}
	seenMu.Unlock()
	devs, err := pairing.ListDevices(dir)
	if err != nil || len(devs) != 1 || devs[0].ID6 != dev.ID6 {
		t.Errorf("devices after the restart: %+v, %v", devs, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
