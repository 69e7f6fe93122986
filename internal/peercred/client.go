package peercred

import (
	"net/http"
	"time"
)

// OwnClient is the HTTP client of every fleet program that sends the fleet token (or a run's) to
// a server on this machine: it dials with DialOwn, so the request reaches only a server run by
// this same user (never a process of someone else that took its port); it uses no proxy, whatever
// the environment says, so the bearer never leaves the machine; it follows no redirect, so a
// request goes only where its caller sent it; and it asks for no compression. timeout bounds each
// request whole (0: none); keepAlives false closes each connection after its request.
//
// The caller may change the client (its Transport is an *http.Transport) before the first
// request, for example to dial a fixed unix socket with DialOwn.
func OwnClient(timeout time.Duration, keepAlives bool) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:              nil,
			DialContext:        DialOwn,
			DisableKeepAlives:  !keepAlives,
			DisableCompression: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
