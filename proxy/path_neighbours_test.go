package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestNearHooksFormsNeverRouteToHooks_S7 pins the forms closest to "hooks" that JudgePath lets
// through (a trailing space, dot, NBSP, NEL, BOM or zero-width space, fullwidth letters, a
// format suffix, a colon, an encoded '?') to what a console's Go ServeMux makes of the path
// fleet forwards: never its hooks route. Those that fold to "hooks" (ſ, the Kelvin sign) are 403.
func TestNearHooksFormsNeverRouteToHooks_S7(t *testing.T) {
	hit := false
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/", func(http.ResponseWriter, *http.Request) { hit = true })
	mux.HandleFunc("/hooks", func(http.ResponseWriter, *http.Request) { hit = true })
	for _, p := range []string{
		"/c/a/hooks%20/permission-request", "/c/a/hooks%2E/permission-request",
		"/c/a/hooks%C2%A0/permission-request", "/c/a/hooks%C2%85/permission-request",
		"/c/a/hooks%EF%BB%BF/permission-request", "/c/a/%E2%80%8Bhooks/permission-request",
		"/c/a/%EF%BD%88%EF%BD%8F%EF%BD%8F%EF%BD%8B%EF%BD%93/permission-request",
		"/c/a/hooks.json", "/c/a/hooks:x/permission-request", "/c/a/hooks%3F/permission-request",
	} {
		route, ref := JudgePath(p)
		if ref != nil {
			t.Errorf("%s: refused %d %s; want it forwarded (it is not hooks)", p, ref.Status, ref.Reason)
			continue
		}
		target := (&url.URL{Path: route.Path}).RequestURI()
		hit = false
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", target, nil))
		if hit {
			t.Errorf("%s: forwarded as %s, which a console's ServeMux routes to its hooks", p, target)
		}
	}
	for _, p := range []string{"/c/a/hook%C5%BF/permission-request", "/c/a/hoo%E2%84%AAs/x", "/c/a/HOOKS"} {
		if _, ref := JudgePath(p); ref == nil || ref.Reason != ReasonHooks {
			t.Errorf("%s: want 403 hooks, got %v", p, ref)
		}
	}
}
