package peercred

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// OwnClient goes straight to this user's server: past an environment proxy, without following a
// redirect, without asking for compression.
func TestOwnClient(t *testing.T) {
	got := make(chan *http.Request, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		http.Redirect(w, r, "http://elsewhere.example/", http.StatusFound)
	}))
	defer srv.Close()
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")

	for _, keep := range []bool{false, true} {
		c := OwnClient(5*time.Second, keep)
		if c.Timeout != 5*time.Second {
			t.Errorf("Timeout %v", c.Timeout)
		}
		tr := c.Transport.(*http.Transport)
		if tr.Proxy != nil || tr.DisableKeepAlives == keep || !tr.DisableCompression {
			t.Errorf("keepAlives %v: transport %+v", keep, tr)
		}
		resp, err := c.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Errorf("status %d: the redirect was followed", resp.StatusCode)
		}
		r := <-got
		if r.URL.Path != "/x" || r.Header.Get("Accept-Encoding") != "" {
			t.Errorf("server saw %s with Accept-Encoding %q", r.URL.Path, r.Header.Get("Accept-Encoding"))
		}
		if len(got) != 0 {
			t.Error("more than one request")
		}
	}
}
