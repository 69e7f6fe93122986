package contract

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// LogPath never carries the query, however the target is written, and is bounded (S11).
func TestLogPath_S11(t *testing.T) {
	for _, target := range []string{"/c/a/?token=s3cret", "/c/a/x?a=1&token=s3cret", "/?s3cret", "/c/a/%3F?s3cret"} {
		r := httptest.NewRequest("GET", target, nil)
		if strings.Contains(LogPath(r), "s3cret") {
			t.Errorf("LogPath(%q) = %q", target, LogPath(r))
		}
	}
	for _, target := range []string{"/c/a/x?a=1?token=s3cret", "http://h/c/a?token=s3cret", "*?s3cret"} {
		r := &http.Request{RequestURI: target, URL: &url.URL{}}
		if strings.Contains(LogPath(r), "s3cret") {
			t.Errorf("LogPath(%q) = %q", target, LogPath(r))
		}
	}
	r := httptest.NewRequest("GET", "/c/a/"+strings.Repeat("x", 5000), nil)
	if len(LogPath(r)) > 600 {
		t.Error("LogPath is unbounded")
	}
}
