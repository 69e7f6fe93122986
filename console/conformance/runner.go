package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// This file is the probe runner: it sends a probe, reads the answer and judges it, and starts and
// ends the run that the C6 probes need.

func (c *checker) probes(ctx context.Context, ps []probe) {
	for _, p := range ps {
		if ctx.Err() != nil {
			return
		}
		c.results = append(c.results, c.probe(ctx, p))
	}
}

func (c *checker) hostOf(p probe) string {
	if p.host == "" {
		return c.base.Host
	}
	return strings.ReplaceAll(p.host, "{port}", c.port)
}

type answer struct {
	status int
	reason string
	body   []byte
}

func (c *checker) send(ctx context.Context, p probe) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, p.method, c.base.String()+p.path, strings.NewReader(p.body))
	if err != nil {
		return answer{}, err
	}
	req.Host = c.hostOf(p)
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range p.hs {
		req.Header[h.name] = append(req.Header[h.name], c.expand(h.value))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return answer{}, errors.New(c.redact(err.Error()))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a := answer{status: resp.StatusCode, reason: resp.Header.Get("X-Fleet-Reason"), body: body}
	if a.reason == "" {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			a.reason = e.Error
		}
	}
	return a, nil
}

func (c *checker) probe(ctx context.Context, p probe) Result {
	if p.needs != "" && c.lacks[p.needs] {
		return Result{Rule: p.rule, What: p.what, Needs: p.needs}
	}
	if c.lacks[routeOf(p.path)] {
		// A probe that wants a refusal: the verifier answers it before any routing, on "/" too.
		p.path = "/"
	}
	r := Result{Rule: p.rule, What: p.what, Sent: c.describe(p)}
	a, err := c.send(ctx, p)
	if err != nil {
		r.Got = "no answer: " + err.Error()
		return r
	}
	if p.finds != "" && lacksRoute(p.finds, a) {
		c.lacks[p.finds] = true
		return Result{Rule: p.rule, What: p.what, Needs: p.finds}
	}
	r.Got = c.show(a)
	r.OK = c.match(p.want, a)
	return r
}

// routeOf is the probe route that path belongs to, or "" for any other path.
func routeOf(path string) string {
	switch {
	case path == "/whoami", path == "/presence", path == "/settings/reach", path == "/runs":
		return path
	case strings.HasPrefix(path, "/runs/"):
		return "/runs"
	}
	return ""
}

// lacksRoute reports whether a, the answer to a local caller's request for route, says the console
// has no such route: 404, 405 or 501; for /whoami also a 2xx that is not {"scope","login"} (a
// single-page app's fallback page). Any other answer, a refusal included, is judged by the probe.
func lacksRoute(route string, a answer) bool {
	switch a.status {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	if route == "/whoami" && a.status >= 200 && a.status <= 299 {
		var who struct {
			Scope *string `json:"scope"`
			Login *string `json:"login"`
		}
		return json.Unmarshal(a.body, &who) != nil || who.Scope == nil || who.Login == nil
	}
	return false
}

func (c *checker) match(w expect, a answer) bool {
	if w.ok2xx {
		if a.status < 200 || a.status > 299 {
			return false
		}
	} else if !slices.Contains(w.status, a.status) {
		return false
	}
	if w.reason != "" && a.reason != w.reason && !bytes.Contains(a.body, []byte(w.reason)) {
		return false
	}
	if w.scope != "" {
		var who struct {
			Scope *string `json:"scope"`
			Login *string `json:"login"`
		}
		if json.Unmarshal(a.body, &who) != nil || who.Scope == nil || who.Login == nil ||
			*who.Scope != w.scope || *who.Login != w.login {
			return false
		}
	}
	return true
}

// startRun asks for a run token (POST /runs, local). On failure it records a FAIL for C6; when
// the console lacks /runs, a SKIP, and every probe that needs a run is SKIP too.
func (c *checker) startRun(ctx context.Context) bool {
	p := probe{rule: "C6", what: "start a run (POST /runs, local) for the hook probes", method: "POST", path: "/runs", body: "{}"}
	r := Result{Rule: p.rule, What: p.what, Sent: c.describe(p)}
	a, err := c.send(ctx, p)
	if err != nil {
		r.Got = "no answer: " + err.Error()
		c.results = append(c.results, r)
		return false
	}
	if lacksRoute("/runs", a) {
		c.lacks["/runs"] = true
		c.results = append(c.results, Result{Rule: p.rule, What: p.what, Needs: "/runs"})
		return false
	}
	var run struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if a.status < 200 || a.status > 299 || json.Unmarshal(a.body, &run) != nil || run.ID == "" || run.Token == "" {
		r.Got = c.show(a) + ` (want 2xx {"id":"…","token":"…"})`
		c.results = append(c.results, r)
		return false
	}
	c.runID, c.runToken = run.ID, run.Token
	r.OK = true
	c.results = append(c.results, r)
	return true
}

// endRun ends the run (DELETE /runs/<id>, local) and records the result.
func (c *checker) endRun(ctx context.Context) {
	p := probe{rule: "C6", what: "end the run (DELETE /runs/<id>, local)", method: "DELETE", path: "/runs/" + url.PathEscape(c.runID), want: expect{ok2xx: true}, needs: "/runs"}
	c.results = append(c.results, c.probe(ctx, p))
}
