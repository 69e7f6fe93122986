package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/reach"
)

// TestDoorsServeWhileReachConnsHeld_R6c: `fleet serve` started with a soft limit of 64 open files
// under a hard limit of 256 raises the soft one to 256, and while strangers hold 400 connections
// open on the direct-reach door (from 8 sources, so that no per-source bound is what holds them
// back) the loopback door and the registry API keep answering, and a newcomer on the door is
// served: the door holds at most half the limit, 128, in connections. Without that bound the
// supervisor would run out of descriptors at about 240 connections, and every accept — the
// loopback door's too — would fail.
func TestDoorsServeWhileReachConnsHeld_R6c(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("needs sh's ulimit")
	}
	home := filepath.Join(t.TempDir(), "state")
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	listen := rawhttp.FreeLoopbackAddr(t).String()
	profile := fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", listen)
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile), []byte(profile)); err != nil {
		t.Fatal(err)
	}
	port := rawhttp.FreeLoopbackAddr(t).Port()
	const soft, hard = 64, 256
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf(`ulimit -S -n %d && ulimit -H -n %d && exec "$0" "$@"`, soft, hard),
		os.Args[0], "serve", "--state-dir", home, "--port", fmt.Sprint(port), "--tailscaled-uid", "0",
		"--tailscale-socket", filepath.Join(t.TempDir(), "none.sock"), "--log-format", "json")
	cmd.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	var pool *x509.CertPool
	waitFor(t, "the direct-reach door", func() bool { pool = rootPool(listen); return pool != nil })
	loopbackServes := func(when string) {
		t.Helper()
		if st, _, errs := runFleet("consoles", "--state-dir", home); st != 0 {
			t.Fatalf("%s: fleet consoles (the registry API): exit %d, %s\nserve's log:\n%s", when, st, errs, stderr)
		}
		resp, err := (&http.Client{Timeout: waitLimit, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}).
			Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			t.Fatalf("%s: the loopback door: %v\nserve's log:\n%s", when, err, stderr)
		}
		resp.Body.Close()
	}
	doorServes := func(when string) {
		t.Helper()
		c := &http.Client{Timeout: waitLimit, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: netip.MustParseAddrPort(listen).Addr().String()}}}
		resp, err := c.Get("https://" + listen + "/ca.crt")
		if err != nil {
			t.Fatalf("%s: a newcomer on the direct-reach door: %v\nserve's log:\n%s", when, err, stderr)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: a newcomer on the direct-reach door: %d, want 200", when, resp.StatusCode)
		}
	}
	loopbackServes("at start")
	if runtime.GOOS == "linux" {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`Max open files\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(b)); m == nil || m[1] != fmt.Sprint(hard) || m[2] != fmt.Sprint(hard) {
			t.Errorf("fleet serve's limit on open files: %q, want the soft limit raised to the hard one, %d", m, hard)
		}
	}

	const sources, each = 8, 50
	for s := range sources {
		for range each {
			dialer := &net.Dialer{Timeout: waitLimit, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+s))}}
			c, err := dialer.Dial("tcp4", listen)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		when := fmt.Sprintf("with %d connections held on the direct-reach door", (s+1)*each)
		loopbackServes(when)
		doorServes(when)
	}
	if strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("fleet serve ran out of descriptors:\n%s", stderr)
	}
}

// rootPool is the door's root as GET /ca.crt serves it, or nil while the door does not answer.
func rootPool(listen string) *x509.CertPool {
	c := &http.Client{Timeout: waitLimit, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // to fetch the root only
	resp, err := c.Get("https://" + listen + "/ca.crt")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	pem, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if resp.StatusCode != http.StatusOK || !pool.AppendCertsFromPEM(pem) {
		return nil
	}
	return pool
}

// waitLimit bounds a wait of these tests: a guard against a hang, never an assertion.
const waitLimit = 10 * time.Second
