package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

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
