package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
)

// The seam a connection loop in front of net/http judges through (Door.Judge, Judged): the
// verdict is the Door's own, a forward is offered only for what Hop.Forward would send, the
// assertion is written only for such a verdict, and a verdict handed back (Judged.Context) is
// taken once, by its own Door, for its own request.

// judgedBy is d's verdict on r (Door.Judge).
func judgedBy(d *Door, r *http.Request) Judged {
	var j Judged
	d.Judge(r, &j)
	return j
}

func judgedRequest(method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Host = doortest.TSName
	r.Header.Set("X-Forwarded-Proto", "https")
	return r
}

// TestJudgedForwardsOnlyWhatForwardWould_S6: Target offers a forward only for a console request
// that passed every check with a Target that Hop.Forward sends (every value present and plain);
// WriteAssertion writes the hop's six lines for it, exactly as verified, and nothing (with
// ErrUnwritable) for any other verdict.
func TestJudgedForwardsOnlyWhatForwardWould_S6(t *testing.T) {
	d := startTestDoor(t)
	j := judgedBy(d.door, judgedRequest("GET", "/c/alpha/x?q=1"))
	target, ok := j.Target()
	if !ok || target.ConsoleID != "alpha" || target.Path != "/x" || target.Addr != d.Alpha.Addr() ||
		target.Login != doortest.Alice || target.ClientIP != doortest.AliceIP || target.Token != d.Token || target.Proto != "https" {
		t.Fatalf("a console request: %+v, %v", target, ok)
	}
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if err := j.WriteAssertion(w); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := "X-Forwarded-For: " + doortest.AliceIP + "\r\nX-Forwarded-Host: " + doortest.TSName + "\r\nX-Forwarded-Proto: https\r\n" +
		"X-Forwarded-Prefix: /c/alpha\r\nX-Phase-Console-Fleet: " + d.Token + "\r\nX-Phase-Console-Fleet-Login: " + doortest.Alice + "\r\n"
	if b.String() != want {
		t.Errorf("assertion\n%q\nwant\n%q", b.String(), want)
	}

	tokenCR := startTestDoor(t, func(door *Door) { door.Token = fixedToken("fleet-token\r\nX-Injected: 1") })
	emptyToken := startTestDoor(t, func(door *Door) { door.Token = fixedToken("") })
	for name, j := range map[string]Judged{
		"the zero Judged":        {},
		"a refusal (S3)":         judgedBy(d.door, withHeader(judgedRequest("GET", "/c/alpha/x"), "X-Phase-Console-Fleet", "x")),
		"a redirect":             judgedBy(d.door, judgedRequest("GET", "/c/alpha")),
		"a door page":            judgedBy(d.door, judgedRequest("GET", "/")),
		"an unknown console":     judgedBy(d.door, judgedRequest("GET", "/c/nosuch/x")),
		"a token with a CR LF":   judgedBy(tokenCR.door, judgedRequest("GET", "/c/alpha/x")),
		"an empty token":         judgedBy(emptyToken.door, judgedRequest("GET", "/c/alpha/x")),
		"a hooks path (S7)":      judgedBy(d.door, judgedRequest("GET", "/c/alpha/hooks/x")),
		"a non-canonical path":   judgedBy(d.door, judgedRequest("GET", "/c/alpha/a/../b")),
		"TRACE on a console":     judgedBy(d.door, judgedRequest("TRACE", "/c/alpha/x")),
		"a cross-origin request": judgedBy(d.door, withHeader(judgedRequest("GET", "/c/alpha/x"), "Origin", "https://evil.example")),
	} {
		if target, ok := j.Target(); ok || target != (Target{}) {
			t.Errorf("%s: Target %+v, %v; want none", name, target, ok)
		}
		var b bytes.Buffer
		w := bufio.NewWriterSize(&b, 16)
		if err := j.WriteAssertion(w); err != ErrUnwritable || b.Len() != 0 || w.Buffered() != 0 {
			t.Errorf("%s: WriteAssertion %v, wrote %q; want ErrUnwritable and nothing", name, err, b.String())
		}
	}
}

func withHeader(r *http.Request, name, value string) *http.Request {
	r.Header.Set(name, value)
	return r
}

// TestJudgedContextTakenOnce_S11: a verdict handed back to ServeHTTP is answered as it is (the
// refusal written and logged once, the caller not verified again), once; a second request, a
// request other than the one judged, or another Door judge for themselves.
func TestJudgedContextTakenOnce_S11(t *testing.T) {
	d := startTestDoor(t)
	other := startTestDoor(t)
	refused := judgedRequest("GET", "/c/nosuch/x") // 404 unknown-console, after the caller check
	j := judgedBy(d.door, refused)
	asked := d.own.asked.Load()
	ctx := j.Context(context.Background())

	serve := func(door *Door, r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		door.ServeHTTP(w, r.WithContext(ctx))
		return w
	}
	if w := serve(d.door, judgedRequest("GET", "/c/nosuch/x")); w.Code != http.StatusNotFound || d.own.asked.Load() != asked {
		t.Errorf("the request judged: %d, caller asked %d more time(s); want 404 and none", w.Code, d.own.asked.Load()-asked)
	}
	if n := len(d.Logs.Events(EventRejected)); n != 1 {
		t.Errorf("%d fleet.rejected lines, want the one of the verdict taken", n)
	}
	if serve(d.door, judgedRequest("GET", "/c/nosuch/x")); d.own.asked.Load() != asked+1 {
		t.Error("a second request with the same context took the verdict again")
	}

	for name, c := range map[string]struct {
		door *testDoor
		r    *http.Request
	}{
		"another Door":           {other, judgedRequest("GET", "/c/nosuch/x")},
		"another method":         {d, judgedRequest("HEAD", "/c/nosuch/x")},
		"another request-target": {d, judgedRequest("GET", "/c/alpha/x")},
	} {
		j := judgedBy(d.door, judgedRequest("GET", "/c/nosuch/x"))
		ctx = j.Context(context.Background())
		before := c.door.own.asked.Load()
		c.door.door.ServeHTTP(httptest.NewRecorder(), c.r.WithContext(ctx))
		if c.door.own.asked.Load() != before+1 {
			t.Errorf("%s: the verdict was taken; the request must be judged", name)
		}
	}
	var zero Judged
	if zero.Context(context.Background()) != context.Background() {
		t.Error("the zero Judged put itself in a context")
	}
}
