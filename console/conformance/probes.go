package conformance

import "context"

// This file is the probe table: every request the checker sends, the rule it proves and the
// answer it wants, in the order they are sent.

// A header line of a probe: the name exactly as sent, the value with placeholders.
type hv struct{ name, value string }

// expect is what a probe wants back.
type expect struct {
	status []int  // any of these; nil with ok2xx
	ok2xx  bool   // any 2xx
	reason string // the reason word, in X-Fleet-Reason or the body
	// when scope is set, the body must be JSON {"scope":scope,"login":login}
	scope, login string
}

type probe struct {
	rule, what   string
	method, path string
	host         string // Host header; "" is the URL's host:port; "{port}" is replaced
	hs           []hv
	body         string
	want         expect
	// needs is the route the probe needs (SKIP when the console lacks it); finds, on a local
	// caller's probe of a route, means its answer tells whether the console has that route.
	needs, finds string
}

const (
	alice  = "alice@example.com"
	device = "device:phone#abc234"
	hook   = "/hooks/permission-request"
)

func assertion(bearer, login string) []hv {
	return []hv{{"X-Phase-Console-Fleet", bearer}, {"X-Phase-Console-Fleet-Login", login}}
}

func with(hs ...[]hv) []hv {
	var out []hv
	for _, h := range hs {
		out = append(out, h...)
	}
	return out
}

func want(status int, reason string) expect { return expect{status: []int{status}, reason: reason} }
func remote(login string) expect            { return expect{status: []int{200}, scope: "remote", login: login} }

var (
	refusedRun  = expect{status: []int{401, 403}}
	notLocal    = expect{status: []int{403}, reason: "not local"}
	proxyHeader = []hv{{"Tailscale-User-Login", alice}}
	loginOnly   = func(v string) []hv { return []hv{{"X-Phase-Console-Fleet-Login", v}} }
	bearerOnly  = func(v string) []hv { return []hv{{"X-Phase-Console-Fleet", v}} }
	runBearer   = func(v string) []hv { return []hv{{"Authorization", "Bearer " + v}} }
)

func (c *checker) run(ctx context.Context) []Result {
	good := assertion(phFleet, alice)
	bad := assertion(phFleetLast, alice)
	whoami := func(rule, what string, host string, hs []hv, w expect) probe {
		p := probe{rule: rule, what: what, method: "GET", path: "/whoami", host: host, hs: hs, want: w}
		if w.scope != "" {
			p.needs = "/whoami" // a believed caller's scope and login: only /whoami tells them
		}
		return p
	}
	e401 := want(401, "fleet-bad-token")
	e421 := want(421, "fleet-not-loopback")
	e403p := want(403, "fleet-and-proxy")
	// rebind is what a DNS-rebinding page at name:port sends: a state-changing request, same origin by
	// its own Host, without an assertion. Every Host that is not a loopback name must be refused
	// 421 — by an exact match, so names that only start like one are probed too.
	rebind := func(name string) probe {
		host := name + ":" + c.port
		return probe{rule: "C2", what: "no assertion, Host " + name + ", same-origin POST /presence → 421 (DNS rebinding)",
			method: "POST", path: "/presence", host: host, hs: []hv{{"Origin", "http://" + host}}, body: "{}", want: expect{status: []int{421}}}
	}

	// The routes first, each asked as a local caller: what the console lacks, later probes skip.
	baseline := whoami("C4", "no assertion: scope local (baseline)", "", nil, expect{status: []int{200}, scope: "local", login: ""})
	baseline.finds = "/whoami"
	c.probes(ctx, []probe{
		baseline,
		{rule: "C5", what: "presence open to a local caller", method: "POST", path: "/presence", body: "{}", want: expect{ok2xx: true}, finds: "/presence"},
		{rule: "C7", what: "a local caller can change reach settings", method: "POST", path: "/settings/reach", body: `{"mode":"off"}`, want: expect{ok2xx: true}, finds: "/settings/reach"},
	})
	haveRun := c.startRun(ctx)

	c.probes(ctx, []probe{

		whoami("C1", "right bearer believed: scope remote, login as asserted", "", good, remote(alice)),
		whoami("C1", "bearer wrong by one byte (last) → 401 fleet-bad-token", "", bad, e401),
		whoami("C1", "bearer wrong by one byte (first) → 401 fleet-bad-token", "", assertion(phFleetFirst, alice), e401),
		whoami("C1", "bearer one byte short → 401 fleet-bad-token", "", assertion(phFleetShort, alice), e401),
		whoami("C1", "bearer one byte too long → 401 fleet-bad-token", "", assertion(phFleetLong, alice), e401),
		whoami("C1", "empty bearer → 401 fleet-bad-token", "", assertion("", alice), e401),
		whoami("C1", "malformed: empty login → 401 fleet-bad-token", "", assertion(phFleet, ""), e401),
		whoami("C1", "malformed: bearer without login → 401 fleet-bad-token", "", bearerOnly(phFleet), e401),
		whoami("C1", "malformed: login without bearer → 401 fleet-bad-token", "", loginOnly(alice), e401),
		whoami("C1", "malformed: empty login header alone → 401 fleet-bad-token", "", loginOnly(""), e401),
		whoami("C1", "malformed: two bearer values → 401 fleet-bad-token", "", with(good, bearerOnly(phFleet)), e401),
		whoami("C1", "malformed: two login values → 401 fleet-bad-token", "", with(good, loginOnly("bob@example.com")), e401),
		whoami("C1", "spelling X_Phase_Console_Fleet with a wrong bearer → 401 fleet-bad-token", "", []hv{{"X_Phase_Console_Fleet", phFleetLast}, {"X-Phase-Console-Fleet-Login", alice}}, e401),
		whoami("C1", "spelling X_Phase_Console_Fleet_Login alone → 401 fleet-bad-token", "", []hv{{"X_Phase_Console_Fleet_Login", alice}}, e401),

		whoami("C2", "Host evil.example with the right bearer → 421 fleet-not-loopback", "evil.example", good, e421),
		whoami("C2", "Host 127.0.0.1.evil.example → 421 fleet-not-loopback", "127.0.0.1.evil.example:{port}", good, e421),
		whoami("C2", "Host localhost.evil.example → 421 fleet-not-loopback", "localhost.evil.example", good, e421),
		whoami("C2", "Host 127.0.0.2 → 421 fleet-not-loopback", "127.0.0.2:{port}", good, e421),
		whoami("C2", "Host localhost believed", "localhost:{port}", good, remote(alice)),
		whoami("C2", "Host [::1] believed", "[::1]:{port}", good, remote(alice)),
		whoami("C2", "Host 127.0.0.1 without a port believed", "127.0.0.1", good, remote(alice)),
		whoami("C2", "foreign Host without an assertion → 421 (DNS rebinding)", "evil.example", nil, expect{status: []int{421}}),
		rebind("127.0.0.1.evil.example"),
		rebind("localhost.evil.example"),
		rebind("127.0.0.2"),
		rebind("localhost."),

		whoami("C3", "proxy header beside the right assertion → 403 fleet-and-proxy", "", with(good, proxyHeader), e403p),
		whoami("C3", "proxy header spelled tailscale_user_login → 403 fleet-and-proxy", "", with(good, []hv{{"tailscale_user_login", alice}}), e403p),
		whoami("C3", "order: proxy header + foreign Host + bad bearer → 403 fleet-and-proxy (C3 before C2, C1)", "evil.example", with(bad, proxyHeader), e403p),
		whoami("C3", "order: proxy header + bad bearer → 403 fleet-and-proxy (C3 before C1)", "", with(bad, proxyHeader), e403p),
		whoami("C2", "order: foreign Host + bad bearer → 421 fleet-not-loopback (C2 before C1)", "evil.example", bad, e421),
		whoami("C2", "order: foreign Host + malformed assertion → 421 fleet-not-loopback (C2 before C1)", "evil.example", loginOnly(""), e421),

		whoami("C4", "asserted from a loopback peer with X-Forwarded-For 127.0.0.1: remote", "", with(assertion(phFleet, "root"), []hv{{"X-Forwarded-For", "127.0.0.1"}}), remote("root")),
		whoami("C4", "asserted login \"local\": remote", "", assertion(phFleet, "local"), remote("local")),
		whoami("C4", "asserted device login: remote", "", assertion(phFleet, device), remote(device)),
		// Only the supervisor's assertion makes a caller remote: a proxy's word is not one.
		whoami("C4", "no assertion, proxy header only: not believed as that login", "", proxyHeader, expect{status: []int{401, 403}}),
		whoami("C4", "no assertion, X-Forwarded-For: not believed", "", []hv{{"X-Forwarded-For", "100.101.102.103"}}, expect{status: []int{401, 403}}),

		{rule: "C5", what: "presence shut to scope remote → 403", method: "POST", path: "/presence", body: "{}", hs: good, want: expect{status: []int{403}}, needs: "/presence"},
		{rule: "C5", what: "runs shut to scope remote → 403", method: "POST", path: "/runs", body: "{}", hs: good, want: expect{status: []int{403}}, needs: "/runs"},

		{rule: "C7", what: "device login cannot change reach settings → 403 reach-settings", method: "POST", path: "/settings/reach", body: `{"mode":"off"}`, hs: assertion(phFleet, device), want: want(403, "reach-settings"), needs: "/settings/reach"},
	})

	// C6 needs a run: without /runs every hook probe is SKIP; when starting one failed, FAIL above.
	if !haveRun && !c.lacks["/runs"] {
		return c.results
	}
	hk := func(what string, host string, hs []hv, w expect) probe {
		return probe{rule: "C6", what: what, method: "POST", path: hook, host: host, hs: hs, body: `{"tool":"Bash"}`, want: w, needs: "/runs"}
	}
	run := runBearer(phRun)
	c.probes(ctx, []probe{
		hk("run token accepted", "", run, expect{ok2xx: true}),
		hk("no bearer → refused", "", nil, refusedRun),
		hk("run token wrong by one byte → refused", "", runBearer(phRunLast), refusedRun),
		hk("the fleet token as the run bearer → refused", "", runBearer(phFleet), refusedRun),
		hk("run token + X-Forwarded-For → 403 not local", "", with(run, []hv{{"X-Forwarded-For", "127.0.0.1"}}), notLocal),
		hk("run token + X-Forwarded-Host → 403 not local", "", with(run, []hv{{"X-Forwarded-Host", "127.0.0.1"}}), notLocal),
		hk("run token + X_Forwarded_For → 403 not local", "", with(run, []hv{{"X_Forwarded_For", "127.0.0.1"}}), notLocal),
		hk("run token + Forwarded → 403 not local", "", with(run, []hv{{"Forwarded", "for=127.0.0.1"}}), notLocal),
		hk("run token + X-Real-Ip → 403 not local", "", with(run, []hv{{"X-Real-Ip", "127.0.0.1"}}), notLocal),
		hk("run token + proxy header → 403 not local", "", with(run, proxyHeader), notLocal),
		hk("run token + the right assertion (C5) → 403 not local", "", with(run, good), notLocal),
		hk("order: run token + assertion with a bad bearer → 403 not local (before C1)", "", with(run, bad), notLocal),
		hk("order: run token + proxy header + assertion + foreign Host → 403 not local (before C3, C2)", "evil.example", with(run, good, proxyHeader), notLocal),
		hk("order: no bearer + X-Forwarded-For → 403 not local (before the token)", "", []hv{{"X-Forwarded-For", "127.0.0.1"}}, notLocal),
	})
	c.endRun(ctx)
	c.probes(ctx, []probe{
		hk("run token right after the run ended → refused", "", run, refusedRun),
	})
	return c.results
}
